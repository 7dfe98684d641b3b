//! Change management on the switch board: changes that wait. A flip with a time (`at`) or a
//! revert (`revert_after_s`) becomes a change in `switch_changes`, in PostgreSQL, where
//! instances do not look (they watch etcd, and would take a waiting value for one in
//! force). The leader applies each change when it falls due and reverts it when its revert
//! does, exactly once across a change of leader ([`apply`]), each step audited like a flip.
//! A key that needs four eyes waits for a second person's approval ([`service`]); a key's
//! history and the rollback to one of its revisions are in [`history`]. A change may be
//! staged on some instances first ([`stage`]), and the leader aborts a stage whose
//! instances answer worse than the others ([`stage_watch`]). What a flip would touch is
//! in [`impact`].
//!
//! Time is read from [`Changes`]'s clock, which tests move by hand.

pub(crate) mod apply;
pub mod history;
pub mod impact;
pub(crate) mod routes;
pub(crate) mod rules;
pub mod service;
pub mod stage;
pub(crate) mod stage_watch;
pub(crate) mod store;

use chrono::{DateTime, Utc};
use std::{sync::Arc, time::Duration};

use crate::{control::board::Board, state::AppState};
use base::clock::{Clock, SwappableClock};

/// The clock due changes are read by, and what the leader remembers of the stages it
/// watches.
#[derive(Default)]
pub struct Changes {
    clock: SwappableClock,
    stages: std::sync::Mutex<stage_watch::Watch>,
}

impl Changes {
    /// Reads the time from `clock` from now on (tests move it past a revert).
    pub fn use_clock(&self, clock: Arc<dyn Clock>) {
        self.clock.set(clock);
    }

    pub fn now(&self) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(self.clock.now_ms()).unwrap_or_else(Utc::now)
    }

    /// What the leader remembers of the stages it watches; held only between awaits.
    pub(crate) fn stage_watch(&self) -> std::sync::MutexGuard<'_, stage_watch::Watch> {
        // A panic while judging leaves at worst a stale memory of the last look.
        self.stages
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// How often the leader looks for due changes: a change lands within this of its time,
/// plus the write and the instances' watch.
const TICK: Duration = Duration::from_millis(200);

/// Runs the leader's job: every [`TICK`] while this instance leads, the due changes, then
/// the due reverts.
pub fn spawn(state: &AppState) -> tokio::task::JoinHandle<()> {
    tokio::spawn(run_while_leading(state.clone()))
}

async fn run_while_leading(state: AppState) {
    let mut ticks = tokio::time::interval(TICK);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut leadership = state.leadership.clone();
    let mut warnings = sale::orders::mq::consume::QuietWarnings::new("switch changes");
    loop {
        leadership.until_leader().await;
        ticks.tick().await;
        match pass(&state).await {
            Ok(()) => warnings.recovered(),
            Err(error) => warnings.failed(&format!("{error:#}")),
        }
    }
}

/// Every change due now, then every revert due now, one transaction each; then the
/// stages' error rates.
async fn pass(state: &AppState) -> anyhow::Result<()> {
    while state.leadership.is_leader() && apply_next(state).await? {}
    while state.leadership.is_leader() && revert_next(state).await? {}
    if state.leadership.is_leader() {
        stage_watch::check(state).await?;
    }
    Ok(())
}

/// Puts a change in force, recorded in `tx` (which holds its row locked): its value on
/// every instance, or its stage on its instances.
pub(crate) async fn land(
    board: &Board<'_>,
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    change: &contract::SwitchChangeRow,
    now: DateTime<Utc>,
) -> anyhow::Result<contract::ChangeState> {
    if stage::is_stage(change) {
        let instances = stage::instances_of(board, change).await?;
        let instances = apply::stage(board, change, instances).await?;
        store::mark_staged(tx, change.id, now, &instances).await?;
        return Ok(contract::ChangeState::Staged);
    }
    let landed = apply::apply(board, change).await?;
    store::mark_applied(
        tx,
        change.id,
        now,
        landed.revision,
        landed.replaced.as_deref(),
    )
    .await?;
    Ok(contract::ChangeState::Applied)
}

/// Claims one due change, writes it into etcd once and commits it `applied`; false when
/// none is due. Dying anywhere in between leaves the row `scheduled` for the next leader,
/// whose write finds the marker if this one's landed.
async fn apply_next(state: &AppState) -> anyhow::Result<bool> {
    let mut tx = state.db.begin().await?;
    let Some(change) = store::claim(&mut tx, store::Due::Apply, state.changes.now()).await? else {
        return Ok(false);
    };
    let board = Board::of(state);
    let landed = land(&board, &mut tx, &change, state.changes.now()).await?;
    tx.commit().await?;
    state
        .metrics
        .control
        .change_steps
        .with_label_values(&["apply", landed.as_str()])
        .inc();
    tracing::info!(
        change_id = change.id,
        path = change.path,
        value = change.value,
        state = landed.as_str(),
        "a scheduled change is in force"
    );
    // A stage's marker stays until it is promoted or aborted; a revert's is still due.
    if landed == contract::ChangeState::Applied && change.revert_after_s.is_none() {
        apply::forget_markers(&board, change.id).await;
    }
    Ok(true)
}

/// Claims one change whose revert is due: sets the key back if it still holds the
/// change's write, else drops the revert and says why; false when none is due.
async fn revert_next(state: &AppState) -> anyhow::Result<bool> {
    let mut tx = state.db.begin().await?;
    let Some(change) = store::claim(&mut tx, store::Due::Revert, state.changes.now()).await? else {
        return Ok(false);
    };
    let board = Board::of(state);
    let outcome = match apply::revert(&board, &change).await? {
        apply::Reverted::Done => {
            store::mark_reverted(&mut tx, change.id).await?;
            "reverted"
        }
        apply::Reverted::ChangedMeanwhile { value, revision } => {
            let why = rules::changed_meanwhile(value.as_deref(), revision);
            store::drop_revert(&mut tx, change.id, &why).await?;
            tracing::info!(
                change_id = change.id,
                path = change.path,
                why,
                "a revert was dropped"
            );
            "dropped"
        }
    };
    tx.commit().await?;
    state
        .metrics
        .control
        .change_steps
        .with_label_values(&["revert", outcome])
        .inc();
    apply::forget_markers(&board, change.id).await;
    Ok(true)
}
