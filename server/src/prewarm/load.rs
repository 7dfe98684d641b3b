//! What a pre-warm writes into Redis: one item's stock, buyer records and seat map in one
//! transaction, and what Redis records of the item's buyers.

use redis::AsyncCommands;

use contract::SaleItem;

use crate::infra::redis::RedisStore;

impl RedisStore {
    /// Loads one item's stock, buyer records and (seated activities) seat map in one
    /// transaction, replacing what was there. `seats` maps each seat to its holder, if any.
    pub async fn load_item(
        &self,
        sale: SaleItem,
        stock: i64,
        holders: &[(i64, i64)],
        seats: &[(String, Option<i64>)],
    ) -> redis::RedisResult<()> {
        let bought = self.bought_key(sale);
        let seat_map = self.seats_key(sale);
        let mut pipe = redis::pipe();
        pipe.atomic()
            .set(self.stock_key(sale), stock)
            .ignore()
            .del(&bought)
            .ignore()
            .del(&seat_map)
            .ignore();
        if !holders.is_empty() {
            pipe.hset_multiple(&bought, holders).ignore();
        }
        if !seats.is_empty() {
            let entries: Vec<(&str, String)> = seats
                .iter()
                .map(|(code, holder)| {
                    (
                        code.as_str(),
                        holder.map(|h| h.to_string()).unwrap_or_default(),
                    )
                })
                .collect();
            pipe.hset_multiple(&seat_map, &entries).ignore();
        }
        pipe.query_async(&mut self.connection()).await
    }

    /// Units each buyer holds of an item, as Redis records them.
    pub async fn holders(&self, sale: SaleItem) -> redis::RedisResult<Vec<(i64, i64)>> {
        self.connection().hgetall(self.bought_key(sale)).await
    }
}
