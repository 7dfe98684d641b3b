//! The transactional outbox in PostgreSQL (rows written by `buy::preorders` with each
//! pre-order): marking rows sent, the relay's claims and failures, the recorded-order
//! replay's claim, an operator's retry of failed rows, and the figures the console and the
//! gauges show.
//!
//! Rows are claimed with `FOR UPDATE SKIP LOCKED` and a lease on `next_attempt_at`, so two
//! relays (or a relay and a replay) never publish the same row at the same moment.

use sqlx::{PgPool, Postgres, Transaction};
use std::time::Duration;
use uuid::Uuid;

/// An outbox row taken for publishing.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct Claimed {
    pub id: i64,
    pub event_id: Uuid,
    pub topic: String,
    pub payload: serde_json::Value,
    /// Attempts so far, this one included.
    pub attempts: i32,
}

impl Claimed {
    /// The pre-orders the row carries: a batch's (`{"orders": [...]}`), or one.
    pub fn orders(&self) -> usize {
        self.payload
            .get("orders")
            .and_then(serde_json::Value::as_array)
            .map_or(1, Vec::len)
    }
}

/// A row whose publish failed, with its next wait.
pub struct Failure {
    pub id: i64,
    pub retry_in: Duration,
    pub error: String,
}

/// Rows per status that the console and the gauges watch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub pending: i64,
    pub failed: i64,
    pub recorded: i64,
}

/// A row the relay gave up on.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct FailedRow {
    pub id: i64,
    pub event_id: Uuid,
    pub topic: String,
    pub attempts: i32,
    pub last_error: Option<String>,
    pub created_at: chrono::DateTime<chrono::Utc>,
}

/// Marks the rows of these events `sent` (those still pending; a row already sent or
/// given up on stays as it is).
pub async fn mark_sent(pool: &PgPool, event_ids: &[Uuid]) -> Result<u64, sqlx::Error> {
    if event_ids.is_empty() {
        return Ok(0);
    }
    Ok(sqlx::query(
        "UPDATE outbox SET status = 'sent', sent_at = now()
         WHERE event_id = ANY($1) AND status = 'pending'",
    )
    .bind(event_ids)
    .execute(pool)
    .await?
    .rows_affected())
}

/// Claims up to `limit` pending rows written more than `grace` ago and due for an attempt:
/// counts the attempt and leases the row for `lease`, so no other relay takes it meanwhile.
pub async fn claim_due(
    pool: &PgPool,
    grace: Duration,
    lease: Duration,
    limit: i64,
) -> Result<Vec<Claimed>, sqlx::Error> {
    sqlx::query_as(
        "UPDATE outbox o SET attempts = o.attempts + 1,
                next_attempt_at = now() + make_interval(secs => $2)
         FROM (SELECT id FROM outbox
               WHERE status = 'pending' AND next_attempt_at <= now()
                 AND created_at <= now() - make_interval(secs => $1)
               ORDER BY next_attempt_at LIMIT $3
               FOR UPDATE SKIP LOCKED) due
         WHERE o.id = due.id
         RETURNING o.id, o.event_id, o.topic, o.payload, o.attempts",
    )
    .bind(grace.as_secs_f64())
    .bind(lease.as_secs_f64())
    .bind(limit)
    .fetch_all(pool)
    .await
}

/// Records failed attempts: the error and the next attempt's time, or `failed` for rows
/// that used up `max_attempts`.
pub async fn record_failures(
    pool: &PgPool,
    failures: &[Failure],
    max_attempts: i32,
) -> Result<(), sqlx::Error> {
    if failures.is_empty() {
        return Ok(());
    }
    let ids: Vec<i64> = failures.iter().map(|f| f.id).collect();
    let waits: Vec<f64> = failures.iter().map(|f| f.retry_in.as_secs_f64()).collect();
    let errors: Vec<&str> = failures.iter().map(|f| f.error.as_str()).collect();
    sqlx::query(
        "UPDATE outbox o SET last_error = f.error,
                next_attempt_at = now() + make_interval(secs => f.wait),
                status = CASE WHEN o.attempts >= $4 THEN 'failed' ELSE o.status END
         FROM UNNEST($1::BIGINT[], $2::FLOAT8[], $3::TEXT[]) AS f (id, wait, error)
         WHERE o.id = f.id AND o.status = 'pending'",
    )
    .bind(&ids)
    .bind(&waits)
    .bind(&errors)
    .bind(max_attempts)
    .execute(pool)
    .await?;
    Ok(())
}

/// Turns up to `limit` recorded rows (oldest first) into pending ones leased for `lease`,
/// and returns them: each recorded row is taken by exactly one replay.
pub async fn claim_recorded(
    pool: &PgPool,
    lease: Duration,
    limit: i64,
) -> Result<Vec<Claimed>, sqlx::Error> {
    sqlx::query_as(
        "UPDATE outbox o SET status = 'pending', attempts = o.attempts + 1,
                next_attempt_at = now() + make_interval(secs => $1)
         FROM (SELECT id FROM outbox WHERE status = 'recorded'
               ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED) taken
         WHERE o.id = taken.id
         RETURNING o.id, o.event_id, o.topic, o.payload, o.attempts",
    )
    .bind(lease.as_secs_f64())
    .bind(limit)
    .fetch_all(pool)
    .await
}

/// Locks one row for an operator's retry and says its status (`None`: no such row); a
/// concurrent retry of the same row waits here and then finds it `pending`.
pub async fn lock_status(
    tx: &mut Transaction<'_, Postgres>,
    id: i64,
) -> Result<Option<String>, sqlx::Error> {
    sqlx::query_scalar("SELECT status FROM outbox WHERE id = $1 FOR UPDATE")
        .bind(id)
        .fetch_optional(&mut **tx)
        .await
}

/// Hands failed rows back to the relay: `pending`, attempts from zero (so it has all of
/// `relay_max_attempts` again), due now, the old error cleared. `only`: that row, else every
/// failed row. Rows in any other status are left alone. Returns how many were handed back.
pub async fn retry_failed(
    tx: &mut Transaction<'_, Postgres>,
    only: Option<i64>,
) -> Result<u64, sqlx::Error> {
    Ok(sqlx::query(
        "UPDATE outbox SET status = 'pending', attempts = 0, next_attempt_at = now(),
                last_error = NULL
         WHERE status = 'failed' AND ($1::BIGINT IS NULL OR id = $1)",
    )
    .bind(only)
    .execute(&mut **tx)
    .await?
    .rows_affected())
}

/// One count per status, each answered from its partial index (sent rows are never read).
pub async fn counts(pool: &PgPool) -> Result<Counts, sqlx::Error> {
    let (pending, failed, recorded) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM outbox WHERE status = 'pending'),
                (SELECT count(*) FROM outbox WHERE status = 'failed'),
                (SELECT count(*) FROM outbox WHERE status = 'recorded')",
    )
    .fetch_one(pool)
    .await?;
    Ok(Counts {
        pending,
        failed,
        recorded,
    })
}

/// Seconds since the oldest row still waiting to be published was written (0 when none
/// waits): how far the relay is behind, which a count alone does not say.
pub async fn oldest_pending_age_s(pool: &PgPool) -> Result<f64, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT COALESCE(EXTRACT(EPOCH FROM now() - min(created_at)), 0)::FLOAT8
         FROM outbox WHERE status = 'pending'",
    )
    .fetch_one(pool)
    .await
}

/// The newest rows the relay gave up on.
pub async fn failed_rows(pool: &PgPool, limit: i64) -> Result<Vec<FailedRow>, sqlx::Error> {
    sqlx::query_as(
        "SELECT id, event_id, topic, attempts, last_error, created_at FROM outbox
         WHERE status = 'failed' ORDER BY id DESC LIMIT $1",
    )
    .bind(limit)
    .fetch_all(pool)
    .await
}

/// Deletes up to `limit` rows sent before `before`, oldest send first; how many it deleted.
/// Rows another transaction holds are skipped, never waited for, and so is the row of a
/// pre-order still `PRE_CREATED`, however old: reconciliation reads it (and sends it again)
/// until its order completes. That is the one row a sale still needs; the rows of the other
/// orders of a sale, live or not, go with their age, so a sale that stays open for weeks
/// keeps nobody's rows but its waiting pre-orders'. The pre-orders are found by one probe of
/// the orders' activity index per activity, as the stuck count finds them.
pub async fn prune_sent_older_than(
    pool: &PgPool,
    before: chrono::DateTime<chrono::Utc>,
    limit: i64,
) -> Result<u64, sqlx::Error> {
    base::db::prune_batch(
        pool,
        "DELETE FROM outbox WHERE id IN (
             SELECT id FROM outbox
             WHERE status = 'sent' AND sent_at < $1
               AND event_id NOT IN (
                   SELECT COALESCE(o.outbox_event_id, o.id) FROM activities a
                   CROSS JOIN LATERAL (
                       SELECT outbox_event_id, id FROM orders
                       WHERE activity_id = a.id AND status = 'PRE_CREATED') o)
             ORDER BY sent_at LIMIT $2 FOR UPDATE SKIP LOCKED)",
        before,
        limit,
    )
    .await
}
