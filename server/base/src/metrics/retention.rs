//! The retention job's metrics: its passes, what it prunes and the growing tables' sizes.

use prometheus::{IntCounter, IntCounterVec, IntGaugeVec};

use super::Registrar;

/// The tables' sizes and the retention job's work, set by the leader at each of its passes.
pub struct RetentionMetrics {
    /// Completed passes of the retention job.
    pub passes: IntCounter,
    /// Rows (and sale-page files, `table` `sale_pages_dir`/`sale_assets`) pruned, by `table`.
    pub pruned: IntCounterVec,
    /// Rows of each table: the planner's estimate, counted exactly on small tables.
    pub table_rows: IntGaugeVec,
    /// Age of each pruned table's oldest row, in seconds.
    pub oldest_age: IntGaugeVec,
}

impl RetentionMetrics {
    pub(super) fn register(add: &Registrar) -> Self {
        Self {
            passes: add.counter(
                "seckill_retention_passes_total",
                "Passes of the leader's retention job",
            ),
            pruned: add.counters(
                "seckill_retention_pruned_total",
                "Rows and sale-page files the retention job removed, by table",
                &["table"],
            ),
            table_rows: add.gauges(
                "seckill_table_rows",
                "Rows of each table (estimate; exact on small tables)",
                &["table"],
            ),
            oldest_age: add.gauges(
                "seckill_table_oldest_age_seconds",
                "Age of the oldest row of each table the retention job prunes, in seconds",
                &["table"],
            ),
        }
    }
}
