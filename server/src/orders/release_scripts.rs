//! Redis's side of giving a cancelled order's stock back (`lua/restore_order.lua`): once per
//! order id, after the PostgreSQL side (`orders::release`) has committed.

use crate::{
    buy::stock_scripts::Holding,
    infra::{lua::RESTORE_ORDER, redis::RedisStore},
};

impl RedisStore {
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
            .key(self.stock_key(sale))
            .key(self.bought_key(sale))
            .key(self.seats_key(sale))
            .key(self.restored_key(sale))
            .arg(order_id)
            .arg(held.buyer.0)
            .arg(held.quantity)
            .arg(seats)
            .invoke_async(&mut self.connection())
            .await
    }
}
