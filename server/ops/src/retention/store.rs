//! What the retention job reads of the database as a whole: each table's rows and, for the
//! tables it prunes, when their oldest row was written. The rows themselves are pruned by
//! their owners (`prune_older_than` beside the code that writes them).

use chrono::{DateTime, Utc};
use sqlx::PgPool;

/// Below this estimate a table is counted exactly: cheap, and an estimate of a small table
/// is often still -1 (never analysed) or off by half.
const COUNTED_BELOW: f32 = 10_000.0;

/// Each pruned table with a statement reading its oldest row's time through an index.
const OLDEST: &[(&str, &str)] = &[
    (
        "order_events",
        "SELECT at FROM order_events ORDER BY id LIMIT 1",
    ),
    (
        "outbox",
        "SELECT created_at FROM outbox ORDER BY id LIMIT 1",
    ),
    (
        "processed_events",
        "SELECT processed_at FROM processed_events ORDER BY processed_at LIMIT 1",
    ),
    (
        "dead_letters",
        "SELECT received_at FROM dead_letters ORDER BY id LIMIT 1",
    ),
    (
        "hotkey_periods",
        "SELECT started_at FROM hotkey_periods ORDER BY started_at LIMIT 1",
    ),
    (
        "reconciliation_runs",
        "SELECT started_at FROM reconciliation_runs ORDER BY id LIMIT 1",
    ),
    (
        "ops_audit",
        "SELECT created_at FROM ops_audit ORDER BY created_at LIMIT 1",
    ),
];

/// Every table of the schema with its rows: the planner's estimate, or an exact count
/// below [`COUNTED_BELOW`].
pub(crate) async fn table_rows(db: &PgPool) -> Result<Vec<(String, i64)>, sqlx::Error> {
    let estimates: Vec<(String, f32)> = sqlx::query_as(
        "SELECT relname::TEXT, reltuples FROM pg_class
         WHERE relkind = 'r' AND relnamespace = current_schema()::regnamespace
           AND relname NOT LIKE '\\_%'
         ORDER BY relname",
    )
    .fetch_all(db)
    .await?;
    let mut rows = Vec::with_capacity(estimates.len());
    for (table, estimate) in estimates {
        let count = if estimate < COUNTED_BELOW {
            // The name comes from the catalogue; quoted all the same.
            sqlx::query_scalar::<_, i64>(&format!(
                "SELECT count(*) FROM \"{}\"",
                table.replace('"', "\"\"")
            ))
            .fetch_one(db)
            .await?
        } else {
            // An estimate in the millions: the gauge's precision is all it needs.
            estimate as i64
        };
        rows.push((table, count));
    }
    Ok(rows)
}

/// When the oldest row of each pruned table was written (`None`: the table is empty).
pub(crate) async fn oldest_rows(
    db: &PgPool,
) -> Result<Vec<(&'static str, Option<DateTime<Utc>>)>, sqlx::Error> {
    let mut oldest = Vec::with_capacity(OLDEST.len());
    for (table, statement) in OLDEST {
        let at: Option<DateTime<Utc>> = sqlx::query_scalar(statement).fetch_optional(db).await?;
        oldest.push((*table, at));
    }
    Ok(oldest)
}
