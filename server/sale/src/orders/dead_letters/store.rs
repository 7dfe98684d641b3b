//! Dead letters in PostgreSQL: what the DLQ sink copies from the dead-letter queue, the
//! console's listing, and the requeue bookkeeping. A row is requeued at most once: the
//! requeue locks it, publishes, and stamps `requeued_at` in the same transaction.

use chrono::{DateTime, Utc};
use contract::DeadLetterView;
use sqlx::{PgPool, Postgres, Transaction};

/// A message taken from the dead-letter queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewDeadLetter {
    pub source_queue: String,
    pub routing_key: String,
    pub message_id: Option<String>,
    pub payload: Vec<u8>,
    pub reason: String,
    pub death_count: i64,
}

/// A waiting dead letter, locked for requeue.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct Waiting {
    pub id: i64,
    pub routing_key: String,
    pub message_id: Option<String>,
    pub payload: Vec<u8>,
}

/// Where a dead letter stands when someone asks to requeue it.
#[derive(Debug)]
pub enum Lookup {
    Waiting(Waiting),
    Requeued {
        by: Option<String>,
        at: DateTime<Utc>,
    },
    Missing,
}

#[derive(sqlx::FromRow)]
struct Row {
    id: i64,
    source_queue: String,
    routing_key: String,
    message_id: Option<String>,
    payload: Vec<u8>,
    reason: String,
    death_count: i64,
    received_at: DateTime<Utc>,
    requeued_at: Option<DateTime<Utc>>,
    requeued_by: Option<String>,
}

impl From<Row> for DeadLetterView {
    fn from(row: Row) -> Self {
        Self {
            id: row.id,
            source_queue: row.source_queue,
            routing_key: row.routing_key,
            message_id: row.message_id,
            payload: String::from_utf8_lossy(&row.payload).into_owned(),
            reason: row.reason,
            death_count: row.death_count,
            received_at: row.received_at,
            requeued_at: row.requeued_at,
            requeued_by: row.requeued_by,
        }
    }
}

const COLUMNS: &str = "id, source_queue, routing_key, message_id, payload, reason, death_count, \
                       received_at, requeued_at, requeued_by";

/// Stores a batch from the sink in one statement.
pub async fn insert_many(pool: &PgPool, letters: &[NewDeadLetter]) -> Result<(), sqlx::Error> {
    if letters.is_empty() {
        return Ok(());
    }
    let queues: Vec<&str> = letters.iter().map(|l| l.source_queue.as_str()).collect();
    let keys: Vec<&str> = letters.iter().map(|l| l.routing_key.as_str()).collect();
    let ids: Vec<Option<&str>> = letters.iter().map(|l| l.message_id.as_deref()).collect();
    let payloads: Vec<&[u8]> = letters.iter().map(|l| l.payload.as_slice()).collect();
    let reasons: Vec<&str> = letters.iter().map(|l| l.reason.as_str()).collect();
    let counts: Vec<i64> = letters.iter().map(|l| l.death_count).collect();
    sqlx::query(
        "INSERT INTO dead_letters (source_queue, routing_key, message_id, payload, reason, death_count)
         SELECT * FROM UNNEST($1::TEXT[], $2::TEXT[], $3::TEXT[], $4::BYTEA[], $5::TEXT[], $6::BIGINT[])",
    )
    .bind(&queues)
    .bind(&keys)
    .bind(&ids)
    .bind(&payloads)
    .bind(&reasons)
    .bind(&counts)
    .execute(pool)
    .await?;
    Ok(())
}

/// `limit` dead letters after `offset`: the waiting ones first, newest first within each.
pub async fn list(
    pool: &PgPool,
    limit: i64,
    offset: i64,
) -> Result<Vec<DeadLetterView>, sqlx::Error> {
    let rows: Vec<Row> = sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM dead_letters
         ORDER BY requeued_at IS NOT NULL, id DESC LIMIT $1 OFFSET $2"
    ))
    .bind(limit)
    .bind(offset)
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().map(DeadLetterView::from).collect())
}

pub async fn get(pool: &PgPool, id: i64) -> Result<Option<DeadLetterView>, sqlx::Error> {
    let row: Option<Row> =
        sqlx::query_as(&format!("SELECT {COLUMNS} FROM dead_letters WHERE id = $1"))
            .bind(id)
            .fetch_optional(pool)
            .await?;
    Ok(row.map(DeadLetterView::from))
}

/// Dead letters not requeued yet (the DLQ depth the console and the gauge show).
pub async fn waiting_count(pool: &PgPool) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar("SELECT count(*) FROM dead_letters WHERE requeued_at IS NULL")
        .fetch_one(pool)
        .await
}

#[derive(sqlx::FromRow)]
struct Locked {
    routing_key: String,
    message_id: Option<String>,
    payload: Vec<u8>,
    requeued_at: Option<DateTime<Utc>>,
    requeued_by: Option<String>,
}

/// Locks one dead letter for requeue; a concurrent requeue of the same row waits here and
/// then finds it requeued.
pub async fn lock(tx: &mut Transaction<'_, Postgres>, id: i64) -> Result<Lookup, sqlx::Error> {
    let row: Option<Locked> = sqlx::query_as(
        "SELECT routing_key, message_id, payload, requeued_at, requeued_by
         FROM dead_letters WHERE id = $1 FOR UPDATE",
    )
    .bind(id)
    .fetch_optional(&mut **tx)
    .await?;
    Ok(match row {
        None => Lookup::Missing,
        Some(Locked {
            requeued_at: Some(at),
            requeued_by,
            ..
        }) => Lookup::Requeued {
            by: requeued_by,
            at,
        },
        Some(locked) => Lookup::Waiting(Waiting {
            id,
            routing_key: locked.routing_key,
            message_id: locked.message_id,
            payload: locked.payload,
        }),
    })
}

/// Locks up to `limit` waiting dead letters with ids above `after`, oldest first, skipping
/// those another requeue holds.
pub async fn lock_waiting(
    tx: &mut Transaction<'_, Postgres>,
    after: i64,
    limit: i64,
) -> Result<Vec<Waiting>, sqlx::Error> {
    sqlx::query_as(
        "SELECT id, routing_key, message_id, payload FROM dead_letters
         WHERE requeued_at IS NULL AND id > $1 ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED",
    )
    .bind(after)
    .bind(limit)
    .fetch_all(&mut **tx)
    .await
}

pub async fn mark_requeued(
    tx: &mut Transaction<'_, Postgres>,
    ids: &[i64],
    by: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE dead_letters SET requeued_at = now(), requeued_by = $2
         WHERE id = ANY($1) AND requeued_at IS NULL",
    )
    .bind(ids)
    .bind(by)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Deletes up to `limit` dead letters received before `before`, requeued or not, oldest
/// first; how many it deleted. One being requeued now is skipped, never waited for.
pub async fn prune_older_than(
    pool: &PgPool,
    before: DateTime<Utc>,
    limit: i64,
) -> Result<u64, sqlx::Error> {
    base::db::prune_batch(
        pool,
        "DELETE FROM dead_letters WHERE id IN (
             SELECT id FROM dead_letters WHERE received_at < $1
             ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED)",
        before,
        limit,
    )
    .await
}
