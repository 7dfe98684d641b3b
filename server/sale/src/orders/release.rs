//! PostgreSQL's side of giving stock back: the one statement sequence every path that ends
//! an order without a sale uses (the pay-timeout cancel, an order the consumer fails),
//! so `allocated`, `sold`, the buyer's holding and the seats always move together.
//!
//! Redis is given back by the caller after the commit, never for a cancel that rolls back.

use sqlx::{Postgres, Transaction};
use uuid::Uuid;

/// An order whose units go back to stock.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct Released {
    pub order_id: Uuid,
    pub activity_id: i64,
    pub item_id: i64,
    pub user_id: i64,
    pub quantity: i32,
}

/// Gives the order's units back inside `tx`: `allocated` and the buyer's holding always,
/// `sold` when the create-order consumer had counted it (the order had reached `UNPAID`),
/// and frees its seats. Returns the seat codes freed, which Redis must free too.
///
/// The caller has already moved the order out of a stock-holding state in `tx` under a
/// status guard (and, for cancellations, inserted the restore-journal row), so a second
/// caller for the same order finds nothing to move and never reaches this.
pub async fn release(
    tx: &mut Transaction<'_, Postgres>,
    order: &Released,
    counted_as_sold: bool,
) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query(
        "UPDATE activity_items
         SET allocated = allocated - $3,
             sold = sold - CASE WHEN $4 THEN $3 ELSE 0 END
         WHERE activity_id = $1 AND item_id = $2",
    )
    .bind(order.activity_id)
    .bind(order.item_id)
    .bind(order.quantity)
    .bind(counted_as_sold)
    .execute(&mut **tx)
    .await?;
    sqlx::query(
        "UPDATE buyer_holdings SET units = units - $4
         WHERE activity_id = $1 AND item_id = $2 AND user_id = $3",
    )
    .bind(order.activity_id)
    .bind(order.item_id)
    .bind(order.user_id)
    .bind(order.quantity)
    .execute(&mut **tx)
    .await?;
    sqlx::query_scalar("UPDATE seats SET order_id = NULL WHERE order_id = $1 RETURNING seat_code")
        .bind(order.order_id)
        .fetch_all(&mut **tx)
        .await
}
