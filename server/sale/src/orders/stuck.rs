//! Pre-orders that have not reached the pipeline's end after a while ("stuck"): listed for
//! reconciliation, counted for the gauges and readiness, and handed back to the relay. The
//! orders and their outbox rows are the pipeline's tables, so their queries live here.

use std::time::Duration;

use sqlx::PgPool;
use uuid::Uuid;

/// A pre-order that has not reached the pipeline's end after a while.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct StuckPreorder {
    pub order_id: Uuid,
    pub item_id: i64,
    pub user_id: i64,
    pub quantity: i32,
    /// The outbox row's status (`pending`, `sent`, `failed`, `recorded`), if any.
    pub outbox_status: Option<String>,
    /// Reconciliation handed its row back before.
    pub resent: bool,
    /// Seconds since its event last reached RabbitMQ, or since it was written if it never did.
    pub since_sent_s: f64,
}

/// The moment a pre-order's event last reached RabbitMQ, or its writing if it never did
/// (`o`: the order, `x`: its outbox row): what a stuck pre-order's wait is counted from.
const LAST_SENT: &str = "COALESCE(x.sent_at, o.created_at)";

/// Pre-orders of the activity still `PRE_CREATED` whose event was last sent (or, never sent,
/// which were written) more than `older_than` ago, oldest first.
pub async fn stuck_preorders(
    db: &PgPool,
    activity_id: i64,
    older_than: Duration,
    limit: i64,
) -> Result<Vec<StuckPreorder>, sqlx::Error> {
    sqlx::query_as(&format!(
        "SELECT o.id AS order_id, o.item_id, o.user_id, o.quantity, x.status AS outbox_status,
                x.resent_at IS NOT NULL AS resent,
                EXTRACT(EPOCH FROM now() - {LAST_SENT})::FLOAT8 AS since_sent_s
         FROM orders o LEFT JOIN outbox x ON x.event_id = COALESCE(o.outbox_event_id, o.id)
         WHERE o.activity_id = $1 AND o.status = 'PRE_CREATED'
           AND o.created_at < now() - make_interval(secs => $2)
           AND {LAST_SENT} < now() - make_interval(secs => $2)
         ORDER BY o.created_at LIMIT $3"
    ))
    .bind(activity_id)
    .bind(older_than.as_secs_f64())
    .bind(limit)
    .fetch_all(db)
    .await
}

/// What `stuck_counts` counts by: an outbox row's status, or `missing`.
pub const OUTBOX_STATES: [&str; 5] = ["recorded", "pending", "sent", "failed", "missing"];

/// Pre-orders answered and still `PRE_CREATED`, over every activity, whose event was last
/// sent (or, never sent, which were written) more than `older_than` ago, counted by their
/// outbox row's status (`missing`: no row). One probe of the orders' activity index per
/// activity, so an ended sale's stuck pre-orders are counted too.
pub async fn stuck_counts(
    db: &PgPool,
    older_than: Duration,
) -> Result<Vec<(String, i64)>, sqlx::Error> {
    sqlx::query_as(&format!(
        "SELECT COALESCE(x.status, 'missing') AS status, count(*) AS stuck
         FROM activities a
         CROSS JOIN LATERAL (
             SELECT o.created_at, COALESCE(o.outbox_event_id, o.id) AS event_id FROM orders o
             WHERE o.activity_id = a.id AND o.status = 'PRE_CREATED'
               AND o.created_at < now() - make_interval(secs => $1)
         ) o
         LEFT JOIN outbox x ON x.event_id = o.event_id
         WHERE {LAST_SENT} < now() - make_interval(secs => $1)
         GROUP BY 1 ORDER BY 1"
    ))
    .bind(older_than.as_secs_f64())
    .fetch_all(db)
    .await
}

/// Hands a stuck pre-order's outbox row (with the other orders of its batch) back to the
/// relay: `pending`, due now, attempts from zero. Only a `sent` or `failed` row: a `pending`
/// one is the relay's already, a `recorded` one waits for the replay. The create-order
/// consumer applies an event once, however often it comes.
pub async fn republish(db: &PgPool, order_id: Uuid) -> Result<bool, sqlx::Error> {
    Ok(sqlx::query(
        "UPDATE outbox SET status = 'pending', attempts = 0, next_attempt_at = now(),
                last_error = NULL, resent_at = now()
         WHERE event_id = (SELECT COALESCE(outbox_event_id, id) FROM orders WHERE id = $1)
           AND status IN ('sent', 'failed')",
    )
    .bind(order_id)
    .execute(db)
    .await?
    .rows_affected()
        == 1)
}
