//! Settling one Redis deduction whose pre-order did not (or may not) commit: the void in
//! PostgreSQL that makes it certain the pre-order never commits, then the release in Redis.
//! The buy path calls these the moment it loses track of a deduction; reconciliation calls
//! them for every marker that outlived its grace without an order.
//!
//! The void is a `FAILED` order row under the pre-order's id. The order id is the primary
//! key, so of the void and a late pre-order commit exactly one wins: a pre-order committing
//! after the void fails its batch member (and its buyer is told 503); a void coming after
//! the commit inserts nothing and gives nothing back.

use crate::buy::stock_scripts::StockClient;
use contract::{SaleItem, UserId};
use sqlx::PgPool;
use std::time::{Duration, Instant};
use uuid::Uuid;

use crate::buy::stock_scripts::Units;
use base::redis::RedisStore;

/// One Redis deduction, as its marker or the buy path knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deduction {
    pub sale: SaleItem,
    pub order: Uuid,
    pub buyer: UserId,
    pub units: i64,
}

/// What settling a deduction came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Settled {
    /// Voided in PostgreSQL and its units given back to Redis now.
    Released(i64),
    /// Voided, and Redis owed nothing any more (released before, or wiped).
    NothingOwed,
    /// The pre-order committed (or someone voided it first): nothing to give back here.
    OrderExists,
}

/// Makes sure the pre-order never commits, then gives its units back.
pub async fn void_and_release(
    db: &PgPool,
    redis: &RedisStore,
    deduction: &Deduction,
) -> anyhow::Result<Settled> {
    if !void(db, deduction).await? {
        return Ok(Settled::OrderExists);
    }
    Ok(
        match StockClient(redis)
            .release_deduction(deduction.sale, deduction.order, Units::BackToStock)
            .await?
        {
            Some(units) => Settled::Released(units),
            None => Settled::NothingOwed,
        },
    )
}

/// Releases a deduction whose script answer was lost. The pre-order was never handed to the
/// writer, so no void is needed; if the script never ran, its marker is absent and nothing
/// changes.
///
/// An answer is lost most often because Redis went away (a master crashed and its replica is
/// taking over): the release fails too, for as long as the failover lasts. So it is tried
/// again, the pause doubling up to [`RETRY_PAUSE_MAX`], for up to `patience`: the unit is back
/// on sale the moment Redis is, not a reconciliation grace later, while the buyers who wanted
/// it are still there. After that the marker stays for reconciliation.
pub async fn release_unanswered(redis: &RedisStore, deduction: &Deduction, patience: Duration) {
    let started = Instant::now();
    let mut pause = RETRY_PAUSE_FIRST;
    loop {
        match StockClient(redis)
            .release_deduction(deduction.sale, deduction.order, Units::BackToStock)
            .await
        {
            Ok(Some(units)) => {
                tracing::info!(order = %deduction.order, units, "a deduction whose answer was lost is given back");
                return;
            }
            Ok(None) => return,
            Err(error) if started.elapsed() + pause > patience => {
                tracing::debug!(order = %deduction.order, error = %error, "a deduction whose answer was lost stays for reconciliation");
                return;
            }
            Err(_) => {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(RETRY_PAUSE_MAX);
            }
        }
    }
}

/// The first pause before a failed release is tried again.
const RETRY_PAUSE_FIRST: Duration = Duration::from_millis(20);
/// The longest pause between two tries: the unit comes back at most this long after Redis.
const RETRY_PAUSE_MAX: Duration = Duration::from_millis(250);

/// Inserts the void row; `false` when an order under that id exists already.
async fn void(db: &PgPool, deduction: &Deduction) -> Result<bool, sqlx::Error> {
    // `void:<id>` as the request id: the buyer's own request id stays free for a retry.
    let inserted = sqlx::query(
        "INSERT INTO orders (id, activity_id, item_id, user_id, quantity, amount_cents, status, request_id)
         VALUES ($1, $2, $3, $4, $5, 0, 'FAILED', 'void:' || $1::TEXT)
         ON CONFLICT DO NOTHING",
    )
    .bind(deduction.order)
    .bind(deduction.sale.activity.0)
    .bind(deduction.sale.item.0)
    .bind(deduction.buyer.0)
    .bind(i32::try_from(deduction.units).unwrap_or(i32::MAX))
    .execute(db)
    .await?
    .rows_affected();
    Ok(inserted == 1)
}

/// Which of `orders` exist in PostgreSQL (in any state).
pub async fn existing_orders(db: &PgPool, orders: &[Uuid]) -> Result<Vec<Uuid>, sqlx::Error> {
    if orders.is_empty() {
        return Ok(Vec::new());
    }
    sqlx::query_scalar("SELECT id FROM orders WHERE id = ANY($1)")
        .bind(orders)
        .fetch_all(db)
        .await
}
