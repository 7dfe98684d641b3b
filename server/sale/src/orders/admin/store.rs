//! Orders as the admin console and `/admin/api/orders` read them: filtered pages, and one
//! order with its history (`order_events`), payment trades and restore-journal row.
//!
//! A rehearsal's copy and its synthetic orders are no real orders: every read here leaves
//! them out.
//!
//! `merchant` arguments are the visibility scope from [`Actor::visible_merchant`]: `None`
//! reads every merchant's orders, `Some(id)` only those of that merchant's activities.
//!
//! [`Actor::visible_merchant`]: contract::Actor::visible_merchant

use chrono::{DateTime, Utc};
use contract::{
    OrderStatus, OrderSummary, OrderTransition, PaymentTradeView, StockRestoreView, TradeStatus,
};

use crate::catalog::copies::REAL_ACTIVITY;
use base::db::decode_name;
use sqlx::PgPool;
use uuid::Uuid;

/// Which orders a page shows; `None` fields do not filter.
#[derive(Clone, Debug, Default)]
pub struct OrderFilter<'a> {
    pub merchant: Option<i64>,
    pub activity_id: Option<i64>,
    pub status: Option<&'a str>,
}

const SUMMARY_COLUMNS: &str = "o.id, o.activity_id, a.title AS activity_title, o.item_id,
    i.name AS item_name, o.user_id, o.quantity, o.amount_cents, o.status, o.created_at,
    o.updated_at, o.pay_deadline, o.request_id
    FROM orders o
    JOIN activities a ON a.id = o.activity_id
    JOIN items i ON i.id = o.item_id";

#[derive(sqlx::FromRow)]
struct OrderRow {
    id: Uuid,
    activity_id: i64,
    activity_title: String,
    item_id: i64,
    item_name: String,
    user_id: i64,
    quantity: i32,
    amount_cents: i64,
    status: String,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
    pay_deadline: Option<DateTime<Utc>>,
    request_id: String,
}

impl TryFrom<OrderRow> for OrderSummary {
    type Error = sqlx::Error;

    fn try_from(row: OrderRow) -> Result<Self, sqlx::Error> {
        Ok(OrderSummary {
            id: row.id.to_string(),
            activity_id: row.activity_id,
            activity_title: row.activity_title,
            item_id: row.item_id,
            item_name: row.item_name,
            user_id: row.user_id,
            quantity: row.quantity.into(),
            amount_cents: row.amount_cents,
            status: decode_name("status", &row.status, OrderStatus::parse)?,
            created_at: row.created_at,
            updated_at: row.updated_at,
            pay_deadline: row.pay_deadline,
        })
    }
}

/// Up to `limit` orders matching `filter`, newest first, after skipping `offset`.
pub async fn list(
    pool: &PgPool,
    filter: &OrderFilter<'_>,
    limit: i64,
    offset: i64,
) -> Result<Vec<OrderSummary>, sqlx::Error> {
    let rows: Vec<OrderRow> = sqlx::query_as(&format!(
        "SELECT {SUMMARY_COLUMNS}
         WHERE ($1::BIGINT IS NULL OR a.merchant_id = $1) AND {REAL_ACTIVITY}
           AND ($2::BIGINT IS NULL OR o.activity_id = $2)
           AND ($3::TEXT IS NULL OR o.status = $3)
         ORDER BY o.created_at DESC, o.id DESC
         LIMIT $4 OFFSET $5"
    ))
    .bind(filter.merchant)
    .bind(filter.activity_id)
    .bind(filter.status)
    .bind(limit)
    .bind(offset)
    .fetch_all(pool)
    .await?;
    rows.into_iter().map(OrderSummary::try_from).collect()
}

/// Whether the activity exists in `merchant`'s scope.
pub async fn activity_visible(
    pool: &PgPool,
    activity_id: i64,
    merchant: Option<i64>,
) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar(&format!(
        "SELECT EXISTS (SELECT 1 FROM activities a
                        WHERE a.id = $1 AND ($2::BIGINT IS NULL OR a.merchant_id = $2)
                          AND {REAL_ACTIVITY})"
    ))
    .bind(activity_id)
    .bind(merchant)
    .fetch_one(pool)
    .await
}

/// One order and everything recorded about it, as stored.
pub struct OrderRecord {
    pub order: OrderSummary,
    pub request_id: String,
    pub seats: Vec<String>,
    /// Status changes from `order_history`, oldest first (the creation is not among them).
    pub changes: Vec<OrderTransition>,
    pub trades: Vec<PaymentTradeView>,
    pub restore: Option<StockRestoreView>,
}

#[derive(sqlx::FromRow)]
struct TradeRow {
    trade_no: String,
    amount_cents: i64,
    status: String,
    created_at: DateTime<Utc>,
    paid_at: Option<DateTime<Utc>>,
    notified_at: Option<DateTime<Utc>>,
    notify_attempts: i32,
}

/// The order if it is visible in `merchant`'s scope, with its history, trades, seats and
/// restore-journal row.
///
/// The reads share one snapshot (a repeatable-read, read-only transaction): the pipeline
/// moves orders while the console looks, and the status must match the history's last step.
pub async fn get(
    pool: &PgPool,
    id: Uuid,
    merchant: Option<i64>,
) -> Result<Option<OrderRecord>, sqlx::Error> {
    let mut tx = pool.begin().await?;
    sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        .execute(&mut *tx)
        .await?;
    let row: Option<OrderRow> = sqlx::query_as(&format!(
        "SELECT {SUMMARY_COLUMNS}
         WHERE o.id = $1 AND ($2::BIGINT IS NULL OR a.merchant_id = $2) AND {REAL_ACTIVITY}"
    ))
    .bind(id)
    .bind(merchant)
    .fetch_optional(&mut *tx)
    .await?;
    let Some(row) = row else {
        return Ok(None);
    };
    let changes: Vec<(String, String, DateTime<Utc>)> = sqlx::query_as(
        "SELECT from_status, to_status, at FROM order_history WHERE order_id = $1 ORDER BY step",
    )
    .bind(id)
    .fetch_all(&mut *tx)
    .await?;
    let trades: Vec<TradeRow> = sqlx::query_as(
        "SELECT trade_no, amount_cents, status, created_at, paid_at, notified_at, notify_attempts
         FROM payment_trades WHERE order_id = $1 ORDER BY created_at, trade_no",
    )
    .bind(id)
    .fetch_all(&mut *tx)
    .await?;
    let restore: Option<(i32, DateTime<Utc>, Option<DateTime<Utc>>)> = sqlx::query_as(
        "SELECT quantity, restored_at, redis_restored_at FROM stock_restore_journal
         WHERE order_id = $1",
    )
    .bind(id)
    .fetch_optional(&mut *tx)
    .await?;
    let seats: Vec<String> =
        sqlx::query_scalar("SELECT seat_code FROM seats WHERE order_id = $1 ORDER BY seat_code")
            .bind(id)
            .fetch_all(&mut *tx)
            .await?;
    tx.commit().await?;
    let request_id = row.request_id.clone();
    Ok(Some(OrderRecord {
        order: row.try_into()?,
        request_id,
        seats,
        changes: changes
            .into_iter()
            .map(|(from, to, at)| {
                Ok(OrderTransition {
                    from: Some(decode_name("from_status", &from, OrderStatus::parse)?),
                    to: decode_name("to_status", &to, OrderStatus::parse)?,
                    at,
                })
            })
            .collect::<Result<_, sqlx::Error>>()?,
        trades: trades
            .into_iter()
            .map(|trade| {
                Ok(PaymentTradeView {
                    trade_no: trade.trade_no,
                    amount_cents: trade.amount_cents,
                    status: decode_name("status", &trade.status, TradeStatus::parse)?,
                    created_at: trade.created_at,
                    paid_at: trade.paid_at,
                    notified_at: trade.notified_at,
                    notify_attempts: trade.notify_attempts.into(),
                })
            })
            .collect::<Result<_, sqlx::Error>>()?,
        restore: restore.map(
            |(quantity, restored_at, redis_restored_at)| StockRestoreView {
                quantity: quantity.into(),
                restored_at,
                redis_restored_at,
            },
        ),
    }))
}

/// Units of paid orders per item of an activity, from the activity's status index.
pub async fn paid_units(pool: &PgPool, activity_id: i64) -> Result<Vec<(i64, i64)>, sqlx::Error> {
    sqlx::query_as(
        "SELECT item_id, SUM(quantity)::BIGINT FROM orders
         WHERE activity_id = $1 AND status = 'PAID' GROUP BY item_id",
    )
    .bind(activity_id)
    .fetch_all(pool)
    .await
}

/// Deletes the status changes written before `before` among the `limit` oldest; how many it
/// deleted. The orders keep their status: only the history of how they got there goes.
/// The oldest first by id, which follows their time, so one statement reads `limit` rows
/// at most and the last of a prune stops at the first younger one.
pub async fn prune_events_older_than(
    pool: &PgPool,
    before: DateTime<Utc>,
    limit: i64,
) -> Result<u64, sqlx::Error> {
    base::db::prune_batch(
        pool,
        "DELETE FROM order_events WHERE id IN (
             SELECT id FROM (SELECT id, at FROM order_events ORDER BY id LIMIT $2) oldest
             WHERE at < $1)",
        before,
        limit,
    )
    .await
}
