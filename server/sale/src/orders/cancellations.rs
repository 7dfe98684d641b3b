//! Cancelling unpaid orders in PostgreSQL (the pay timeout, docs/pipeline.md): the cancel
//! transaction with its restore journal, the bookkeeping of the Redis give-back that follows
//! the commit, and the scanner's searches for what a lost message or a failed give-back left.

use base::quiet_log::quiet;
use sqlx::PgPool;
use std::time::Duration;
use uuid::Uuid;

use crate::{
    orders::{
        release::{self as stock, Released},
        status::OrderStatus,
    },
    payment::store::{self as payments, Trade},
};

/// Units of a cancelled order that Redis is owed (its restore-journal row).
#[derive(Clone, Debug, PartialEq, Eq, sqlx::FromRow)]
pub struct GiveBack {
    pub order_id: Uuid,
    pub activity_id: i64,
    pub item_id: i64,
    pub user_id: i64,
    pub quantity: i32,
    /// Seats freed in PostgreSQL (seated orders only).
    pub seats: Vec<String>,
}

/// Where an order stands for its pay timeout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimeoutView {
    pub status: OrderStatus,
    /// Milliseconds until the pay deadline by the database's clock (negative once past).
    pub ms_to_deadline: Option<i64>,
}

pub async fn timeout_view(
    pool: &PgPool,
    order_id: Uuid,
) -> Result<Option<TimeoutView>, sqlx::Error> {
    let row: Option<(String, Option<i64>)> = sqlx::query_as(
        "SELECT status, (EXTRACT(EPOCH FROM pay_deadline - now()) * 1000)::BIGINT
         FROM orders WHERE id = $1",
    )
    .bind(order_id)
    .fetch_optional(pool)
    .await?;
    row.map(|(status, ms_to_deadline)| {
        let status = OrderStatus::parse(&status)
            .ok_or_else(|| sqlx::Error::Protocol(format!("unknown order status {status}")))?;
        Ok(TimeoutView {
            status,
            ms_to_deadline,
        })
    })
    .transpose()
}

/// What the cancel of an overdue order did.
#[derive(Clone, Debug)]
pub enum Cancel {
    /// Cancelled, its DB stock moved: Redis is owed its units.
    Cancelled(GiveBack),
    /// A trade opened before the deadline had been paid: not cancelled, the payment is to be
    /// recorded.
    Paid(Trade),
    /// Not `UNPAID` any more, not past its deadline, or its stock went back before: nothing
    /// changed.
    Unchanged,
}

/// Cancels an `UNPAID` order past its deadline (by the database's clock) in one transaction:
/// the order row locked, the order's pending trades closed (a paid one stops the cancel), the
/// status moved, the restore-journal row (the order id is its key), and the DB stock move of
/// `stock::release`.
///
/// The row lock is what makes a trade and the cancel exclusive: a trade is opened only under
/// the same row, shared, for an order `UNPAID` before its deadline (`payment::store::
/// open_trade`). Every trade opened before this lock is committed and closed (or found paid)
/// here; every one asked for after it finds the order cancelled.
pub async fn cancel_unpaid(pool: &PgPool, order_id: Uuid) -> Result<Cancel, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let overdue: Option<Uuid> = sqlx::query_scalar(
        "SELECT id FROM orders WHERE id = $1 AND status = 'UNPAID' AND pay_deadline <= now()
         FOR NO KEY UPDATE",
    )
    .bind(order_id)
    .fetch_optional(&mut *tx)
    .await?;
    if overdue.is_none() {
        return Ok(Cancel::Unchanged);
    }
    if let Some(paid) = payments::close_unless_paid(&mut tx, order_id).await? {
        // Rolled back: the payment is recorded under the row's lock of its own.
        return Ok(Cancel::Paid(paid));
    }
    let order: Released = sqlx::query_as(
        "UPDATE orders SET status = 'CANCELLED', updated_at = now()
         WHERE id = $1 AND status = 'UNPAID'
         RETURNING id AS order_id, activity_id, item_id, user_id, quantity",
    )
    .bind(order_id)
    .fetch_one(&mut *tx)
    .await?;
    debug_assert!(OrderStatus::Unpaid.may_become(OrderStatus::Cancelled));
    let journaled = sqlx::query(
        "INSERT INTO stock_restore_journal (order_id, activity_id, item_id, quantity)
         VALUES ($1, $2, $3, $4) ON CONFLICT (order_id) DO NOTHING",
    )
    .bind(order.order_id)
    .bind(order.activity_id)
    .bind(order.item_id)
    .bind(order.quantity)
    .execute(&mut *tx)
    .await?
    .rows_affected();
    if journaled == 0 {
        // Its stock went back already; moving it again would oversell.
        quiet!(warn, "orders.cancel_journaled", %order_id, "unpaid order already has a restore-journal row; not cancelled");
        return Ok(Cancel::Unchanged);
    }
    // The create-order consumer counted an UNPAID order as sold.
    let seats = stock::release(&mut tx, &order, true).await?;
    sqlx::query("UPDATE stock_restore_journal SET seats = $2 WHERE order_id = $1")
        .bind(order.order_id)
        .bind(&seats)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(Cancel::Cancelled(GiveBack {
        order_id: order.order_id,
        activity_id: order.activity_id,
        item_id: order.item_id,
        user_id: order.user_id,
        quantity: order.quantity,
        seats,
    }))
}

/// Records that Redis has the order's units back.
pub async fn mark_given_back(pool: &PgPool, order_id: Uuid) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE stock_restore_journal SET redis_restored_at = now()
         WHERE order_id = $1 AND redis_restored_at IS NULL",
    )
    .bind(order_id)
    .execute(pool)
    .await?;
    Ok(())
}

/// Give-backs Redis is still owed, journaled more than `older_than` ago (younger ones are
/// most likely still being given back by the cancel that wrote them).
pub async fn owed_give_backs(
    pool: &PgPool,
    older_than: Duration,
    limit: i64,
) -> Result<Vec<GiveBack>, sqlx::Error> {
    sqlx::query_as(
        "SELECT j.order_id, j.activity_id, j.item_id, o.user_id, j.quantity, j.seats
         FROM stock_restore_journal j JOIN orders o ON o.id = j.order_id
         WHERE j.redis_restored_at IS NULL
           AND j.restored_at < now() - make_interval(secs => $1)
         ORDER BY j.restored_at LIMIT $2",
    )
    .bind(older_than.as_secs_f64())
    .bind(limit)
    .fetch_all(pool)
    .await
}

/// `UNPAID` orders whose deadline passed more than `grace` ago, oldest first: their timeout
/// message was lost or is stuck.
pub async fn overdue_unpaid(
    pool: &PgPool,
    grace: Duration,
    limit: i64,
) -> Result<Vec<Uuid>, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT id FROM orders
         WHERE status = 'UNPAID' AND pay_deadline < now() - make_interval(secs => $1)
         ORDER BY pay_deadline LIMIT $2",
    )
    .bind(grace.as_secs_f64())
    .bind(limit)
    .fetch_all(pool)
    .await
}
