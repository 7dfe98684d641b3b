//! What reconciliation reads of an item's Redis state and writes back: the deduction
//! markers, the fence, the buyer records in chunks, and the re-derivation that replaces
//! the item's state with what PostgreSQL holds, chunk by chunk behind a fence only its
//! run can renew or lower. Every key here shares the item's hash tag.

use redis::{AsyncCommands, RedisResult};
use std::collections::HashMap;
use uuid::Uuid;

use contract::SaleItem;

use base::{
    lua::{FENCE_LOWER, FENCE_RENEW, REDERIVE_COMMIT},
    redis::RedisStore,
};

/// A deduction marker as `lua/buy.lua` writes it:
/// `"<deducted at ms> <buyer> <units> [<seat> ...]"`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Marker {
    pub(crate) order: Uuid,
    pub(crate) at_ms: i64,
    pub(crate) buyer: i64,
    pub(crate) units: i64,
}

impl Marker {
    pub(crate) fn parse(order: &str, value: &str) -> Option<Marker> {
        let mut fields = value.split_ascii_whitespace();
        Some(Marker {
            order: order.parse().ok()?,
            at_ms: fields.next()?.parse().ok()?,
            buyer: fields.next()?.parse().ok()?,
            units: fields.next()?.parse().ok()?,
        })
    }
}

/// One consistent read of an item's counters in Redis.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ItemCounters {
    /// `None`: the stock key is gone (or was never loaded).
    pub(crate) stock: Option<i64>,
    pub(crate) buyers: i64,
    pub(crate) markers: Vec<Marker>,
    /// Markers that do not parse: written by something else than the stock scripts.
    pub(crate) unreadable_markers: usize,
    pub(crate) fenced: bool,
}

/// What a re-derivation writes: PostgreSQL's view of the item.
pub struct Derived<'a> {
    pub stock: i64,
    pub holders: &'a [(i64, i64)],
    /// Seat code → holder (seated items); empty otherwise.
    pub seats: &'a [(String, Option<i64>)],
    /// Orders whose units went back to stock in PostgreSQL: Redis must never give them
    /// back again, whoever retries.
    pub restored: &'a [Uuid],
    /// When every key written expires (the activity's end plus the grace of
    /// `catalog::expiry`); the scripts that create the item's other keys copy it.
    pub expires_at: chrono::DateTime<chrono::Utc>,
}

/// Redis's millisecond clock, read together with the markers it stamps.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RedisNow(pub(crate) i64);

/// A typed client over the Redis connection for an item's Redis state as reconciliation reads, fences and re-derives it: these scripts and keys are
/// reached only through it.
#[derive(Clone, Copy)]
pub struct ItemStateClient<'a>(pub &'a RedisStore);

impl ItemStateClient<'_> {
    /// Stock, buyer count, markers and fence in one MULTI, with Redis's clock.
    pub(crate) async fn item_counters(
        &self,
        sale: SaleItem,
    ) -> redis::RedisResult<(ItemCounters, RedisNow)> {
        type Read = (Option<i64>, i64, HashMap<String, String>, bool, (i64, i64));
        let (stock, buyers, pending, fenced, (seconds, micros)): Read = redis::pipe()
            .atomic()
            .get(self.0.stock_key(sale))
            .hlen(self.0.bought_key(sale))
            .hgetall(self.0.pending_key(sale))
            .exists(self.0.fence_key(sale))
            .cmd("TIME")
            .query_async(&mut self.0.connection())
            .await?;
        let mut markers = Vec::with_capacity(pending.len());
        let mut unreadable_markers = 0;
        for (order, value) in &pending {
            match Marker::parse(order, value) {
                Some(marker) => markers.push(marker),
                None => unreadable_markers += 1,
            }
        }
        markers.sort_by_key(|marker| marker.at_ms);
        Ok((
            ItemCounters {
                stock,
                buyers,
                markers,
                unreadable_markers,
                fenced,
            },
            RedisNow(seconds * 1000 + micros / 1000),
        ))
    }

    /// Units each buyer holds of an item, as Redis records them.
    pub async fn holders(&self, sale: SaleItem) -> redis::RedisResult<Vec<(i64, i64)>> {
        self.0.connection().hgetall(self.0.bought_key(sale)).await
    }

    /// Units of every buyer record of the item, summed (HVALS: for small hashes only).
    pub(crate) async fn buyer_unit_sum(&self, sale: SaleItem) -> redis::RedisResult<i64> {
        let units: Vec<i64> = self.0.connection().hvals(self.0.bought_key(sale)).await?;
        Ok(units.iter().sum())
    }

    /// Drops markers of deductions whose order is committed (nothing is owed for them).
    pub(crate) async fn forget_markers(
        &self,
        sale: SaleItem,
        orders: &[Uuid],
    ) -> redis::RedisResult<()> {
        if orders.is_empty() {
            return Ok(());
        }
        let ids: Vec<String> = orders.iter().map(Uuid::to_string).collect();
        self.0
            .connection()
            .hdel(self.0.pending_key(sale), ids)
            .await
    }

    /// One chunk of the item's buyer records (HSCAN); cursor 0 starts and ends a scan.
    pub(crate) async fn scan_buyers(
        &self,
        sale: SaleItem,
        cursor: u64,
    ) -> redis::RedisResult<(u64, Vec<(i64, i64)>)> {
        redis::cmd("HSCAN")
            .arg(self.0.bought_key(sale))
            .arg(cursor)
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut self.0.connection())
            .await
    }

    /// Units Redis records for each of `buyers` (0 when it has no record).
    pub(crate) async fn buyer_units(
        &self,
        sale: SaleItem,
        buyers: &[i64],
    ) -> redis::RedisResult<Vec<i64>> {
        if buyers.is_empty() {
            return Ok(Vec::new());
        }
        let units: Vec<Option<i64>> = redis::cmd("HMGET")
            .arg(self.0.bought_key(sale))
            .arg(buyers)
            .query_async(&mut self.0.connection())
            .await?;
        Ok(units.into_iter().map(Option::unwrap_or_default).collect())
    }

    /// Holds the item for run `run`: no deduction runs until the run lowers it
    /// ([`RedisStore::lower_fence`]) or `ttl_ms` passes without a renewal. Taken over from a
    /// run that died with it up: that run can no longer renew, write or lower it.
    pub async fn raise_fence(&self, sale: SaleItem, run: &str, ttl_ms: u64) -> RedisResult<()> {
        self.0
            .connection()
            .pset_ex(self.0.fence_key(sale), run, ttl_ms)
            .await
    }

    /// Gives the fence `ttl_ms` more if it is still `run`'s (`lua/fence_renew.lua`).
    pub(crate) async fn renew_fence(
        &self,
        sale: SaleItem,
        run: &str,
        ttl_ms: u64,
    ) -> RedisResult<bool> {
        let renewed: i64 = FENCE_RENEW
            .key(self.0.fence_key(sale))
            .arg(run)
            .arg(ttl_ms)
            .invoke_async(&mut self.0.connection())
            .await?;
        Ok(renewed == 1)
    }

    /// Lowers the fence if it is still `run`'s (`lua/fence_lower.lua`); whether it was.
    pub async fn lower_fence(&self, sale: SaleItem, run: &str) -> RedisResult<bool> {
        let lowered: i64 = FENCE_LOWER
            .key(self.0.fence_key(sale))
            .arg(run)
            .invoke_async(&mut self.0.connection())
            .await?;
        Ok(lowered == 1)
    }

    /// Where run `run` stages one of the item's keys (`what`) before swapping it in.
    fn staged_key(&self, sale: SaleItem, run: &str, what: &str) -> String {
        self.0.item_key(sale, format_args!("rederive:{run}:{what}"))
    }

    /// Replaces the item's stock, buyer records, seat map and restore set with PostgreSQL's
    /// view, each expiring at `derived.expires_at`, and clears its markers, while `run`'s
    /// fence holds the item. The sets are written into staging keys of the run's own in
    /// chunks of [`STAGED_CHUNK`] (one command each, so Redis serves every other sale in
    /// between), then swapped in by one short script (`lua/rederive_commit.lua`) that
    /// writes nothing unless the fence is still `run`'s. Returns whether it was.
    pub async fn rederive(
        &self,
        sale: SaleItem,
        run: &str,
        derived: &Derived<'_>,
    ) -> RedisResult<bool> {
        let [bought, seat_map, restored] =
            ["bought", "seats", "restored"].map(|what| self.staged_key(sale, run, what));
        for chunk in derived.holders.chunks(STAGED_CHUNK) {
            self.stage(&bought, |pipe| pipe.hset_multiple(&bought, chunk))
                .await?;
        }
        for chunk in derived.seats.chunks(STAGED_CHUNK) {
            let entries: Vec<(&str, String)> = chunk
                .iter()
                .map(|(code, holder)| {
                    (
                        code.as_str(),
                        holder.map(|h| h.to_string()).unwrap_or_default(),
                    )
                })
                .collect();
            self.stage(&seat_map, |pipe| pipe.hset_multiple(&seat_map, &entries))
                .await?;
        }
        for chunk in derived.restored.chunks(STAGED_CHUNK) {
            let ids: Vec<String> = chunk.iter().map(Uuid::to_string).collect();
            self.stage(&restored, |pipe| pipe.sadd(&restored, ids))
                .await?;
        }
        let committed: i64 = REDERIVE_COMMIT
            .key(self.0.fence_key(sale))
            .key(self.0.stock_key(sale))
            .key(self.0.bought_key(sale))
            .key(self.0.seats_key(sale))
            .key(self.0.restored_key(sale))
            .key(self.0.pending_key(sale))
            .key(bought)
            .key(seat_map)
            .key(restored)
            .arg(run)
            .arg(derived.stock)
            .arg(derived.expires_at.timestamp())
            .invoke_async(&mut self.0.connection())
            .await?;
        Ok(committed == 1)
    }

    /// One chunk written into a staging key, which expires unless swapped in soon: a run
    /// that dies midway leaves nothing for long.
    async fn stage(
        &self,
        key: &str,
        write: impl FnOnce(&mut redis::Pipeline) -> &mut redis::Pipeline,
    ) -> RedisResult<()> {
        let mut pipe = redis::pipe();
        write(&mut pipe).ignore();
        pipe.pexpire(key, STAGED_TTL_MS).ignore();
        pipe.query_async(&mut self.0.connection()).await
    }
}

/// Entries of a staging key written per command.
pub const STAGED_CHUNK: usize = 1000;
/// How long a staging key outlives its last chunk if it is never swapped in.
const STAGED_TTL_MS: i64 = 120_000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_read_as_the_scripts_write_them() {
        let order = Uuid::new_v4();
        assert_eq!(
            Marker::parse(&order.to_string(), "1764583200123 42 2"),
            Some(Marker {
                order,
                at_ms: 1_764_583_200_123,
                buyer: 42,
                units: 2
            })
        );
        let seated = Marker::parse(&order.to_string(), "5 7 2 A1 A2").expect("seated");
        assert_eq!((seated.buyer, seated.units), (7, 2));
        assert_eq!(Marker::parse("not-a-uuid", "1 2 3"), None);
        assert_eq!(Marker::parse(&order.to_string(), "1 2"), None);
    }
}
