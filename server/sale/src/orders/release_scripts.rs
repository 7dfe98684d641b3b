//! Redis's side of giving a cancelled order's stock back (`lua/restore_order.lua`): once per
//! order id, after the PostgreSQL side (`orders::release`) has committed.

use crate::orders::Holding;
use base::{lua::RESTORE_ORDER, redis::RedisStore};

/// A typed client over the Redis connection for the scripts that give an order's unit back: these scripts and keys are
/// reached only through it.
#[derive(Clone, Copy)]
pub struct ReleaseClient<'a>(pub &'a RedisStore);

impl ReleaseClient<'_> {
    /// Gives a cancelled order's units (or seats) back once per order id
    /// (`lua/restore_order.lua`): the stock afterwards, or -4 / -7 as the script documents.
    pub async fn restore_order(
        &self,
        order_id: &str,
        held: Holding,
        seats: &[String],
    ) -> redis::RedisResult<i64> {
        let sale = held.sale;
        RESTORE_ORDER
            .key(self.0.stock_key(sale))
            .key(self.0.bought_key(sale))
            .key(self.0.seats_key(sale))
            .key(self.0.restored_key(sale))
            .arg(order_id)
            .arg(held.buyer.0)
            .arg(held.quantity)
            .arg(seats)
            .invoke_async(&mut self.0.connection())
            .await
    }
}
