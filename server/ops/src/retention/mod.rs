//! The leader's retention job: every `[retention] interval_ms`, it prunes the tables that
//! grow with every sale (`processed_events`, `sent` outbox rows, `order_events`,
//! `dead_letters`, ended `hotkey_periods`, finished `reconciliation_runs`) of the rows
//! older than their retention, removes the sale pages of deleted activities and the
//! assets no page names, and exports every table's rows and the age of each pruned table's
//! oldest row.
//!
//! What it never prunes: orders (paid or not), the audit (`ops_audit`, switch audit), an
//! outbox row not yet `sent`, the sent outbox row of a pre-order still waiting for its
//! completion (reconciliation reads it and sends it again), a hot key in force and a
//! running reconciliation. Those are kept row by row, so no sale holds back anyone else's
//! rows: a sale left open for weeks once kept every processed event, sent outbox row and
//! order history written since its start, of every sale. Nothing a sale does reads its
//! processed events (an order is completed only while `PRE_CREATED`, whatever they say) or
//! its order history (the console shows it to people), so those go with their age alone.
//! Each table is pruned by the module that writes it, `limit` rows per statement, so a
//! prune never holds locks on a hot table for long; rows another transaction holds are
//! skipped until the next pass.
//!
//! Ages are read from [`Retention`]'s clock, which tests move forward instead of waiting
//! days.

pub(crate) mod rules;
pub(crate) mod store;

use chrono::{DateTime, Utc};
use std::{sync::Arc, time::Duration};

use crate::{hotkeys, reconcile::store as reconcile, state::AppState};
use base::{
    clock::{Clock, SwappableClock},
    config::RetentionSettings,
};
use sale::{
    orders::mq::consume::QuietWarnings,
    orders::{admin, completions, dead_letters, outbox},
};

/// The retention job's clock.
#[derive(Default)]
pub struct Retention {
    clock: SwappableClock,
}

impl Retention {
    /// Reads the time from `clock` from now on (tests move it days forward).
    pub fn use_clock(&self, clock: Arc<dyn Clock>) {
        self.clock.set(clock);
    }

    fn now(&self) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(self.clock.now_ms()).unwrap_or_else(Utc::now)
    }
}

/// A table the job prunes, by its owner's function.
#[derive(Clone, Copy, Debug)]
enum Pruned {
    ProcessedEvents,
    SentOutbox,
    OrderEvents,
    DeadLetters,
    HotkeyPeriods,
    ReconciliationRuns,
}

impl Pruned {
    const ALL: [Self; 6] = [
        Self::ProcessedEvents,
        Self::SentOutbox,
        Self::OrderEvents,
        Self::DeadLetters,
        Self::HotkeyPeriods,
        Self::ReconciliationRuns,
    ];

    fn table(self) -> &'static str {
        match self {
            Self::ProcessedEvents => "processed_events",
            Self::SentOutbox => "outbox",
            Self::OrderEvents => "order_events",
            Self::DeadLetters => "dead_letters",
            Self::HotkeyPeriods => "hotkey_periods",
            Self::ReconciliationRuns => "reconciliation_runs",
        }
    }

    fn days(self, settings: &RetentionSettings) -> u32 {
        match self {
            Self::ProcessedEvents => settings.processed_events_days,
            Self::SentOutbox => settings.sent_outbox_days,
            Self::OrderEvents => settings.order_events_days,
            Self::DeadLetters => settings.dead_letters_days,
            Self::HotkeyPeriods => settings.hotkey_periods_days,
            Self::ReconciliationRuns => settings.reconciliation_runs_days,
        }
    }

    /// Deletes one batch; how many rows went.
    async fn prune(
        self,
        db: &sqlx::PgPool,
        before: DateTime<Utc>,
        limit: i64,
    ) -> Result<u64, sqlx::Error> {
        match self {
            Self::ProcessedEvents => {
                completions::prune_processed_older_than(db, before, limit).await
            }
            Self::SentOutbox => outbox::prune_sent_older_than(db, before, limit).await,
            Self::OrderEvents => admin::store::prune_events_older_than(db, before, limit).await,
            Self::DeadLetters => dead_letters::store::prune_older_than(db, before, limit).await,
            Self::HotkeyPeriods => hotkeys::store::prune_older_than(db, before, limit).await,
            Self::ReconciliationRuns => reconcile::prune_runs_older_than(db, before, limit).await,
        }
    }
}

/// A pause between two batches of one table, so a long prune leaves room for the sale.
const BETWEEN_BATCHES: Duration = Duration::from_millis(20);

pub fn spawn(state: &AppState) -> tokio::task::JoinHandle<()> {
    tokio::spawn(run_while_leading(state.clone()))
}

async fn run_while_leading(state: AppState) {
    let interval_ms = state.settings.retention.interval_ms;
    if interval_ms == 0 {
        return;
    }
    let mut ticks = tokio::time::interval(Duration::from_millis(interval_ms));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut leadership = state.leadership.clone();
    let mut warnings = QuietWarnings::new("retention");
    loop {
        leadership.until_leader().await;
        ticks.tick().await;
        if !state.leadership.is_leader() {
            continue;
        }
        match pass(&state).await {
            Ok(()) => {
                state.metrics.retention.passes.inc();
                warnings.recovered();
            }
            Err(error) => warnings.failed(&format!("{error:#}")),
        }
    }
}

/// One pass: every table, the sale pages, then the figures.
async fn pass(state: &AppState) -> anyhow::Result<()> {
    let settings = &state.settings.retention;
    let metrics = &state.metrics.retention;
    let now = state.retention.now();
    let limit = settings.batch_rows.max(1);
    for table in Pruned::ALL {
        let before = rules::cutoff(now, table.days(settings));
        loop {
            let pruned = table.prune(&state.db, before, limit).await?;
            metrics
                .pruned
                .with_label_values(&[table.table()])
                .inc_by(pruned);
            // A batch short of the limit was the last; a leader that stepped down stops.
            if pruned < limit.unsigned_abs() || !state.leadership.is_leader() {
                break;
            }
            tokio::time::sleep(BETWEEN_BATCHES).await;
        }
    }
    let grace = Duration::from_secs(settings.sale_assets_grace_s);
    let (pages, assets) = sale::sale_page::prune(state, now.timestamp_millis(), grace).await?;
    metrics
        .pruned
        .with_label_values(&["sale_pages_dir"])
        .inc_by(pages as u64);
    metrics
        .pruned
        .with_label_values(&["sale_assets"])
        .inc_by(assets as u64);
    export(state, now).await
}

/// Every table's rows, and the age of each pruned table's oldest row (0 when empty).
async fn export(state: &AppState, now: DateTime<Utc>) -> anyhow::Result<()> {
    let metrics = &state.metrics.retention;
    for (table, rows) in store::table_rows(&state.db).await? {
        metrics.table_rows.with_label_values(&[&table]).set(rows);
    }
    for (table, oldest) in store::oldest_rows(&state.db).await? {
        let age = oldest.map_or(0, |oldest| rules::age_s(now, oldest));
        metrics.oldest_age.with_label_values(&[table]).set(age);
    }
    Ok(())
}
