//! Payments in PostgreSQL: the simulated payment center's trades (`payment_trades`) and the
//! order moves a payment causes (`UNPAID → PAID`, `CANCELLED → REFUND_PENDING`).
//!
//! A payment moves the order under the order row's lock and a status guard, and the
//! pay-timeout cancel guards on the same row, so when both race exactly one of them wins
//! and the other sees its result. Opening a trade holds the same row, shared, until the
//! trade is committed: the cancel, which closes the order's trades under the row, sees
//! every trade opened before it, and none is opened after it.

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use crate::{
    orders::status::{payment_effect, OrderStatus, PaymentEffect},
    payment::{status::TradeStatus, Unpayable},
};

/// One trade of the payment center.
#[derive(Clone, Debug)]
pub struct Trade {
    pub trade_no: String,
    pub order_id: Uuid,
    pub amount_cents: i64,
    pub status: TradeStatus,
    pub paid_at: Option<DateTime<Utc>>,
}

type TradeRow = (String, Uuid, i64, String, Option<DateTime<Utc>>);

const TRADE_COLUMNS: &str = "trade_no, order_id, amount_cents, status, paid_at";

fn trade(row: TradeRow) -> Result<Trade, sqlx::Error> {
    let (trade_no, order_id, amount_cents, status, paid_at) = row;
    let status = TradeStatus::parse(&status)
        .ok_or_else(|| sqlx::Error::Protocol(format!("unknown trade status {status}")))?;
    Ok(Trade {
        trade_no,
        order_id,
        amount_cents,
        status,
        paid_at,
    })
}

/// The order's open trade (pending or paid); a new pending one numbered `trade_no` if it has
/// none. The flag says whether this call created it (only then does anyone settle it).
/// `Unpayable` unless the order is `UNPAID` with its deadline ahead.
///
/// One transaction under the order row's share lock, the order's state read on the
/// database's clock: a cancel waits for the trade's commit and then closes it, and a trade
/// asked for after a cancel finds the order cancelled. The share lock lets two pays of one
/// order go on together: the unique open trade decides between them.
pub async fn open_trade(
    pool: &PgPool,
    order_id: Uuid,
    amount_cents: i64,
    trade_no: &str,
) -> Result<Result<(Trade, bool), Unpayable>, sqlx::Error> {
    let mut tx = pool.begin().await?;
    // An order without a deadline is never cancelled by the timeout: payable.
    let (status, ahead): (String, bool) = sqlx::query_as(
        "SELECT status, COALESCE(pay_deadline > now(), true) FROM orders WHERE id = $1 FOR SHARE",
    )
    .bind(order_id)
    .fetch_one(&mut *tx)
    .await?;
    if OrderStatus::parse(&status) != Some(OrderStatus::Unpaid) {
        return Ok(Err(Unpayable::Status(status)));
    }
    if !ahead {
        return Ok(Err(Unpayable::DeadlinePassed));
    }
    // Two rounds at most: an open trade found by the insert can close (its center failed it)
    // before the read.
    for _ in 0..2 {
        let created: Option<TradeRow> = sqlx::query_as(&format!(
            "INSERT INTO payment_trades (trade_no, order_id, amount_cents, status)
             VALUES ($1, $2, $3, 'pending')
             ON CONFLICT (order_id) WHERE status <> 'failed' DO NOTHING
             RETURNING {TRADE_COLUMNS}"
        ))
        .bind(trade_no)
        .bind(order_id)
        .bind(amount_cents)
        .fetch_optional(&mut *tx)
        .await?;
        let found = match created {
            Some(row) => Some((trade(row)?, true)),
            None => {
                let open: Option<TradeRow> = sqlx::query_as(&format!(
                    "SELECT {TRADE_COLUMNS} FROM payment_trades WHERE order_id = $1 AND status <> 'failed'"
                ))
                .bind(order_id)
                .fetch_optional(&mut *tx)
                .await?;
                open.map(trade).transpose()?.map(|open| (open, false))
            }
        };
        if let Some(found) = found {
            tx.commit().await?;
            return Ok(Ok(found));
        }
    }
    Err(sqlx::Error::Protocol(format!(
        "order {order_id} has an open trade that keeps closing"
    )))
}

/// Moves a pending trade to `paid` or `failed`; `None` when it was no longer pending
/// (closed by the pay-timeout cancel, so its money never arrives).
pub async fn settle_trade(
    pool: &PgPool,
    trade_no: &str,
    outcome: TradeStatus,
) -> Result<Option<Trade>, sqlx::Error> {
    let row: Option<TradeRow> = sqlx::query_as(&format!(
        "UPDATE payment_trades
         SET status = $2, paid_at = CASE WHEN $2 = 'paid' THEN now() END
         WHERE trade_no = $1 AND status = 'pending'
         RETURNING {TRADE_COLUMNS}"
    ))
    .bind(trade_no)
    .bind(outcome.as_str())
    .fetch_optional(pool)
    .await?;
    row.map(trade).transpose()
}

/// Closes the order's pending trades (as `failed`), then reads its paid trade, if any; on
/// `connection`, so that the cancel can do it inside its transaction, under the order row.
///
/// Two statements on purpose: the update waits for a settlement in flight on the same row,
/// and only a statement started after it sees that settlement's `paid`.
pub async fn close_unless_paid(
    connection: &mut PgConnection,
    order_id: Uuid,
) -> Result<Option<Trade>, sqlx::Error> {
    sqlx::query(
        "UPDATE payment_trades SET status = 'failed' WHERE order_id = $1 AND status = 'pending'",
    )
    .bind(order_id)
    .execute(&mut *connection)
    .await?;
    let row: Option<TradeRow> = sqlx::query_as(&format!(
        "SELECT {TRADE_COLUMNS} FROM payment_trades WHERE order_id = $1 AND status = 'paid'"
    ))
    .bind(order_id)
    .fetch_optional(&mut *connection)
    .await?;
    row.map(trade).transpose()
}

pub async fn trade_by_number(pool: &PgPool, trade_no: &str) -> Result<Option<Trade>, sqlx::Error> {
    let row: Option<TradeRow> = sqlx::query_as(&format!(
        "SELECT {TRADE_COLUMNS} FROM payment_trades WHERE trade_no = $1"
    ))
    .bind(trade_no)
    .fetch_optional(pool)
    .await?;
    row.map(trade).transpose()
}

/// Counts one callback attempt; `delivered` when the merchant answered 2xx.
pub async fn count_notify_attempt(
    pool: &PgPool,
    trade_no: &str,
    delivered: bool,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE payment_trades
         SET notify_attempts = notify_attempts + 1,
             notified_at = CASE WHEN $2 THEN COALESCE(notified_at, now()) ELSE notified_at END
         WHERE trade_no = $1",
    )
    .bind(trade_no)
    .bind(delivered)
    .execute(pool)
    .await?;
    Ok(())
}

/// What recording a payment did to its order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recorded {
    /// The order (of `user_id` in `activity_id`) was in `from`; `effect` says what the
    /// payment did to it.
    Applied {
        from: OrderStatus,
        effect: PaymentEffect,
        activity_id: i64,
        user_id: i64,
    },
    /// The order costs something else; nothing changed.
    AmountMismatch {
        order_amount_cents: i64,
    },
    NoOrder,
}

/// Applies a payment of `amount_cents` to the order, in one transaction under its row lock:
/// `UNPAID → PAID`, `CANCELLED → REFUND_PENDING`, and nothing for an order already paid
/// (a repeated callback) or not payable (`orders::status::payment_effect`).
pub async fn record_payment(
    pool: &PgPool,
    order_id: Uuid,
    amount_cents: i64,
) -> Result<Recorded, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let row: Option<(String, i64, i64, i64)> = sqlx::query_as(
        "SELECT status, amount_cents, activity_id, user_id FROM orders WHERE id = $1 FOR UPDATE",
    )
    .bind(order_id)
    .fetch_optional(&mut *tx)
    .await?;
    let Some((status, order_amount_cents, activity_id, user_id)) = row else {
        return Ok(Recorded::NoOrder);
    };
    if order_amount_cents != amount_cents {
        return Ok(Recorded::AmountMismatch { order_amount_cents });
    }
    let from = OrderStatus::parse(&status)
        .ok_or_else(|| sqlx::Error::Protocol(format!("unknown order status {status}")))?;
    let effect = payment_effect(from);
    if let Some(to) = effect.moves_to() {
        debug_assert!(from.may_become(to));
        // The guard cannot miss under the row lock; it keeps the storage rule uniform.
        sqlx::query(
            "UPDATE orders SET status = $3, updated_at = now() WHERE id = $1 AND status = $2",
        )
        .bind(order_id)
        .bind(from.as_str())
        .bind(to.as_str())
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    Ok(Recorded::Applied {
        from,
        effect,
        activity_id,
        user_id,
    })
}
