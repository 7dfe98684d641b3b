//! The buy path's Redis scripts (`lua/`): the stock deduction and seat taking (each leaving
//! a marker under the order id), the give-back of a deduction whose pre-order will never
//! commit, the rate windows and the request-id claim. Each runs as one EVALSHA, with every
//! key it touches under one hash tag.

use contract::{SaleItem, UserId};
use uuid::Uuid;

use crate::infra::{
    lua::{CLAIM_REQUEST, DEDUCT_STOCK, RATE_WINDOWS, RELEASE_DEDUCTION, TAKE_SEATS},
    redis::RedisStore,
};

/// The value `claim_request.lua` stores while the first request with an id is in flight.
pub(crate) const IN_FLIGHT: &[u8] = b"\0in-flight";

/// What a released deduction does with its units.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Units {
    BackToStock,
    /// Redis counted units PostgreSQL did not have: spending them brings Redis back to the
    /// truth.
    Kept,
}

/// Units one buyer takes of (or holds in) one sale item, as the stock scripts move them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Holding {
    pub sale: SaleItem,
    pub buyer: UserId,
    pub quantity: i64,
}

impl RedisStore {
    /// All the seats or none, within the per-user limit, for pre-order `order`
    /// (`lua/take_seats.lua`).
    pub(crate) async fn take_seats(
        &self,
        sale: SaleItem,
        buyer: UserId,
        limit: i64,
        order: Uuid,
        seats: &[String],
    ) -> redis::RedisResult<i64> {
        TAKE_SEATS
            .key(self.seats_key(sale))
            .key(self.stock_key(sale))
            .key(self.bought_key(sale))
            .key(self.pending_key(sale))
            .key(self.fence_key(sale))
            .arg(buyer.0)
            .arg(limit)
            .arg(order.to_string())
            .arg(seats)
            .invoke_async(&mut self.connection())
            .await
    }

    /// Atomic check-and-deduct of stock and the buyer's count for pre-order `order`
    /// (`lua/deduct_stock.lua`).
    pub async fn deduct_stock(
        &self,
        take: Holding,
        limit: i64,
        order: Uuid,
    ) -> redis::RedisResult<i64> {
        let sale = take.sale;
        DEDUCT_STOCK
            .key(self.stock_key(sale))
            .key(self.bought_key(sale))
            .key(self.pending_key(sale))
            .key(self.fence_key(sale))
            .arg(take.buyer.0)
            .arg(take.quantity)
            .arg(limit)
            .arg(order.to_string())
            .invoke_async(&mut self.connection())
            .await
    }

    /// Gives back the deduction of pre-order `order`, which will never commit, once
    /// (`lua/release_deduction.lua`): the units released, or `None` when nothing was owed.
    /// `Units::Kept` leaves the units deducted (PostgreSQL had none left for them).
    pub(crate) async fn release_deduction(
        &self,
        sale: SaleItem,
        order: Uuid,
        units: Units,
    ) -> redis::RedisResult<Option<i64>> {
        let released: i64 = RELEASE_DEDUCTION
            .key(self.stock_key(sale))
            .key(self.bought_key(sale))
            .key(self.seats_key(sale))
            .key(self.pending_key(sale))
            .arg(order.to_string())
            .arg(match units {
                Units::BackToStock => "1",
                Units::Kept => "0",
            })
            .invoke_async(&mut self.connection())
            .await?;
        Ok((released >= 0).then_some(released))
    }

    /// One hit in the buyer, address and item windows; 0 or the index of the tripped window.
    pub(crate) async fn hit_rate_windows(
        &self,
        activity_id: i64,
        item_id: i64,
        user_id: i64,
        client: &str,
        window_s: u64,
        limits: [u64; 3],
    ) -> redis::RedisResult<i64> {
        let tag = format!("{{a{activity_id}.i{item_id}}}");
        RATE_WINDOWS
            .key(self.key(&format!("{tag}:rl:user:{user_id}")))
            .key(self.key(&format!("{tag}:rl:ip:{client}")))
            .key(self.key(&format!("{tag}:rl:item")))
            .arg(window_s)
            .arg(&limits[..])
            .invoke_async(&mut self.connection())
            .await
    }

    /// Claims a request id: `None` when it is new, else what is stored under it.
    pub(crate) async fn claim_request(
        &self,
        key: &str,
        in_flight_ms: u64,
    ) -> redis::RedisResult<Option<Vec<u8>>> {
        CLAIM_REQUEST
            .key(key)
            .arg(IN_FLIGHT)
            .arg(in_flight_ms)
            .invoke_async(&mut self.connection())
            .await
    }
}
