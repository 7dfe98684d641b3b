//! The use cases the admin API, the console and the CLI share: start a run, read runs, read
//! the live ledger. Each asks the permission table first.

use std::time::Duration;

use contract::{
    ActivityLedger, Actor, Permission, ReconciliationRun, RunSummary, Source, StartReconciliation,
    StartedRun,
};
use serde_json::json;
use sqlx::{pool::PoolConnection, PgPool, Postgres};

use crate::{
    reconcile::{
        ledger,
        run::{self, Mode, SeenDrifts, Sink},
        store::{self, NewRun},
    },
    state::AppState,
};
use base::error::{ApiError, ApiResult};
use sale::{
    audit::ops_audit::{self, OpsAction},
    audit::reason::audited_reason,
    catalog::copies,
    catalog::store::StoredActivity,
    identity::authorize,
};

/// Runs listed at most.
const LISTED_RUNS: i64 = 100;
/// How long a repair run (or a pre-warm) waits for another re-derivation of the same
/// activity to finish.
pub(crate) const LOCK_WAIT: Duration = Duration::from_secs(30);
/// Advisory-lock namespace of reconciliation repairs (the second key is the activity).
const LOCK_CLASS: i32 = 0x5ec0;

/// Starts a run in the background; answers its id at once (the run is stored `running`).
/// A repair needs [`Permission::RepairStock`] and a reason; a report needs `Reconcile`.
pub async fn start(
    state: &AppState,
    actor: &Actor,
    source: Source,
    request: StartReconciliation,
) -> ApiResult<StartedRun> {
    let reason = if request.repair {
        authorize(actor, Permission::RepairStock)?;
        Some(audited_reason(request.reason.as_deref().unwrap_or(""))?.to_owned())
    } else {
        authorize(actor, Permission::Reconcile)?;
        None
    };
    let activity = copies::real_activity(&state.db, request.activity_id, None).await?;
    let run_id = store::insert_run(
        &state.db,
        &NewRun {
            activity_id: activity.id,
            repair: request.repair,
            trigger: run::trigger_of(source),
            actor: &actor.username,
            reason: reason.as_deref(),
            items: activity.lines.len() as i64 + 1,
        },
    )
    .await?;
    if let Some(reason) = &reason {
        ops_audit::record(
            &state.db,
            &OpsAction {
                actor: &actor.username,
                source,
                action: "reconcile.repair",
                target: &format!("activity:{}", activity.id),
                detail: json!({ "run_id": run_id, "reason": reason }),
            },
        )
        .await?;
    }
    let state = state.clone();
    let mode = Mode {
        repair: request.repair,
        automatic: false,
    };
    tokio::spawn(async move {
        let outcome = run_stored(&state, &activity, mode, run_id).await;
        let error = outcome.err().map(|error| format!("{error:#}"));
        if let Some(error) = &error {
            tracing::warn!(run_id, activity = activity.id, %error, "reconciliation run failed");
        }
        if let Err(error) = store::finish(&state.db, run_id, error.as_deref()).await {
            tracing::warn!(run_id, %error, "could not record the end of a reconciliation run");
        }
    });
    Ok(StartedRun { id: run_id })
}

async fn run_stored(
    state: &AppState,
    activity: &StoredActivity,
    mode: Mode,
    run_id: i64,
) -> anyhow::Result<()> {
    let mut sink = Sink::Stored(run_id);
    if !mode.repair {
        run::execute(state, activity, mode, None, &SeenDrifts::new(), &mut sink).await?;
        return Ok(());
    }
    let lock = ActivityLock::wait(&state.db, activity.id, LOCK_WAIT)
        .await?
        .ok_or_else(|| anyhow::anyhow!("another repair of this activity is still running"))?;
    let outcome = run::execute(
        state,
        activity,
        mode,
        Some(&lock),
        &SeenDrifts::new(),
        &mut sink,
    )
    .await;
    lock.release().await;
    outcome.map(drop)
}

/// A repair's hold on one activity: a session advisory lock on a connection of its own,
/// so two repairs (the leader's and an operator's, or two operators') never rewrite the
/// same item at once, and a crashed instance's lock goes with its connection.
///
/// Released whatever becomes of its holder: [`ActivityLock::release`] unlocks and gives the
/// connection back to the pool; dropped any other way (its holder panicked, or its future
/// was dropped, even while the lock was being taken or given back), the connection is
/// closed instead, which releases every lock of its session. Given back to the pool still
/// locked, it would keep the activity from every repair on another connection for as long
/// as the pool keeps it.
///
/// Every re-derivation of an item asks for one ([`crate::reconcile::fence::rederive_item`]
/// takes it as an argument), so a pre-warm, the deduction hand-over on every instance and
/// the leader's pass re-derive an activity one after the other, never over each other.
pub struct ActivityLock {
    activity_id: i64,
    session: Option<PoolConnection<Postgres>>,
}

impl ActivityLock {
    /// Takes the lock, waiting up to `wait`; `None` when it stayed taken.
    pub async fn wait(
        db: &PgPool,
        activity_id: i64,
        wait: Duration,
    ) -> Result<Option<ActivityLock>, sqlx::Error> {
        // Guarded from the first try: a holder cancelled while `pg_try_advisory_lock` runs
        // may hold the lock without having read the answer.
        let mut lock = ActivityLock {
            activity_id,
            session: Some(db.acquire().await?),
        };
        let started = tokio::time::Instant::now();
        loop {
            let taken: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1, $2)")
                .bind(LOCK_CLASS)
                .bind(lock_key(activity_id))
                .fetch_one(lock.session())
                .await?;
            if taken {
                return Ok(Some(lock));
            }
            if started.elapsed() >= wait {
                // Never locked: the connection goes back to the pool as it came.
                lock.session.take();
                return Ok(None);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub async fn release(mut self) {
        let unlocked = sqlx::query("SELECT pg_advisory_unlock_all()")
            .execute(self.session())
            .await
            .is_ok();
        if unlocked {
            // Back to the pool, unlocked; otherwise the drop closes the session.
            self.session.take();
        }
    }

    /// The activity this lock holds.
    pub(crate) fn activity_id(&self) -> i64 {
        self.activity_id
    }

    fn session(&mut self) -> &mut sqlx::PgConnection {
        self.session
            .as_deref_mut()
            .expect("an activity lock holds its connection until it is released or dropped")
    }
}

impl Drop for ActivityLock {
    fn drop(&mut self) {
        if let Some(connection) = self.session.take() {
            // Closing the session is what releases a session lock for sure; the pool opens
            // another connection when it needs one.
            drop(connection.detach());
        }
    }
}

/// The lock's second key: activity ids beyond `i32` share keys, which only serialises
/// their repairs a little more.
fn lock_key(activity_id: i64) -> i32 {
    (activity_id.rem_euclid(i64::from(i32::MAX))) as i32
}

/// One run with its progress and findings.
pub async fn get(state: &AppState, actor: &Actor, id: i64) -> ApiResult<ReconciliationRun> {
    authorize(actor, Permission::Reconcile)?;
    store::get_run(&state.db, id, actor.visible_merchant())
        .await?
        .ok_or(ApiError::NotFound("reconciliation run"))
}

/// Runs, newest first, of one activity or of all.
pub async fn list(
    state: &AppState,
    actor: &Actor,
    activity_id: Option<i64>,
) -> ApiResult<Vec<RunSummary>> {
    authorize(actor, Permission::Reconcile)?;
    Ok(store::list_runs(
        &state.db,
        activity_id,
        actor.visible_merchant(),
        LISTED_RUNS,
    )
    .await?)
}

/// The live stock ledger of an activity's items (merchants: their own activities), as
/// computed at most once a second on this instance for every viewer (`viewers`).
pub async fn ledger(
    state: &AppState,
    actor: &Actor,
    activity_id: i64,
) -> ApiResult<ActivityLedger> {
    authorize(actor, Permission::ReadCatalog)?;
    if !state.ledgers.admit(&actor.username) {
        return Err(ApiError::RateLimited { retry_after_s: 1 });
    }
    copies::real_activity(&state.db, activity_id, actor.visible_merchant()).await?;
    let shared = state
        .ledgers
        .get(activity_id, compute_ledger(state, activity_id))
        .await
        .map_err(|error| ApiError::Unavailable(anyhow::anyhow!("{error:#}")))?;
    Ok(ActivityLedger::clone(&shared))
}

async fn compute_ledger(state: &AppState, activity_id: i64) -> anyhow::Result<ActivityLedger> {
    state.metrics.ledger_computations.inc();
    let (observed, tx) = ledger::observe(state, activity_id).await?;
    tx.rollback().await?;
    let switched = state.switches.current().deduction;
    Ok(ActivityLedger {
        activity_id,
        deduction: if state.deduction.redis_serves(switched) {
            "redis"
        } else {
            "db"
        }
        .to_owned(),
        items: observed.into_iter().map(|item| item.ledger).collect(),
        at_ms: chrono::Utc::now().timestamp_millis(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_keys_stay_in_range() {
        assert_eq!(lock_key(7), 7);
        assert!(lock_key(i64::MAX) >= 0);
        assert!(lock_key(-5) >= 0);
    }
}
