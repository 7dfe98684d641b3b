//! The lottery's Redis keys and scripts, reached only through [`LotteryClient`]. Every key
//! of an item sits under its hash tag, with the buy script's, so the buy checks and uses a
//! code in the same script as the deduction.

use contract::{AddressRegistrations, RegistrationSources, SaleItem};
use redis::AsyncCommands;

use crate::lottery::{
    rules::{Grant, Held},
    store::DrawnState,
};
use base::{
    lua::{LOTTERY_ADVANCE, LOTTERY_REGISTER, LOTTERY_REVOKE},
    redis::RedisStore,
};

/// The lottery's keys of one item.
pub struct LotteryKeys {
    /// Hash: buyer -> `r` registered, his rank once drawn, `x` revoked.
    pub regs: String,
    /// Hash: buyer -> his code (`Grant::encode`).
    pub codes: String,
    /// Set: buyers whose code bought.
    pub used: String,
    /// List: the waitlist, next first.
    pub queue: String,
    /// How many ranks have had their turn.
    pub turns: String,
    /// Present once the draw has read the registration list: no one joins after.
    pub sealed: String,
    /// Present once the draw's whole result is in Redis.
    pub drawn: String,
    /// Sorted set: client address -> registrations it made.
    pub addresses: String,
    /// Sorted set: a buyer revoked after the draw -> his rank.
    pub gone: String,
    /// How many the draw made winners.
    pub winners: String,
}

impl LotteryKeys {
    pub fn of(redis: &RedisStore, sale: SaleItem) -> Self {
        let key = |rest| redis.item_key(sale, rest);
        Self {
            regs: key("lot:regs"),
            codes: key("lot:codes"),
            used: key("lot:used"),
            queue: key("lot:queue"),
            turns: key("lot:turns"),
            sealed: key("lot:sealed"),
            drawn: key("lot:drawn"),
            addresses: key("lot:addrs"),
            gone: key("lot:gone"),
            winners: key("lot:winners"),
        }
    }
}

/// What a registration came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Registered {
    /// In the list now, or already: his entry (`r`, a rank, `x` revoked).
    Listed(String),
    /// The address's window is full.
    WindowFull,
    /// The draw has sealed the list.
    Sealed,
}

/// What a registration is judged by besides its buyer and address: the same for every
/// registration of an item until ops change the limits or the activity's end.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RegistrationTerms {
    pub window_s: u64,
    pub per_address: u64,
    pub expires_at_ms: i64,
}

/// One registration as `lua/lottery_register.lua` takes it.
#[derive(Clone, Debug)]
pub struct Registration {
    pub buyer: i64,
    /// The client's address as the windows count it.
    pub address: String,
}

/// A code handed to the next on the waitlist.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Issued {
    pub buyer: i64,
    pub grant: Grant,
}

/// Rows one pipeline of the publish carries at most.
const PUBLISH_CHUNK: usize = 10_000;

/// The `n`th slice of [`PUBLISH_CHUNK`] rows of `list` (empty past its end).
fn nth_chunk<T>(list: &[T], n: usize) -> &[T] {
    let start = (n * PUBLISH_CHUNK).min(list.len());
    &list[start..(start + PUBLISH_CHUNK).min(list.len())]
}

#[derive(Clone, Copy)]
pub struct LotteryClient<'a>(pub &'a RedisStore);

impl LotteryClient<'_> {
    /// Registrations for one item (`lua/lottery_register.lua`), one round trip however many:
    /// each one's answer, in their order.
    pub async fn register(
        &self,
        sale: SaleItem,
        terms: RegistrationTerms,
        registrations: &[Registration],
    ) -> redis::RedisResult<Vec<Registered>> {
        let keys = LotteryKeys::of(self.0, sale);
        let mut invocation = LOTTERY_REGISTER.prepare_invoke();
        invocation
            .key(&keys.regs)
            .key(&keys.sealed)
            .key(&keys.addresses)
            .arg(terms.window_s)
            .arg(terms.per_address)
            .arg(terms.expires_at_ms);
        for registration in registrations {
            invocation
                .key(
                    self.0
                        .item_key(sale, format_args!("rl:reg:{}", registration.address)),
                )
                .arg(registration.buyer)
                .arg(&registration.address);
        }
        let answers: Vec<(i64, String)> = invocation.invoke_async(&mut self.0.connection()).await?;
        Ok(answers
            .into_iter()
            .map(|(code, value)| match code {
                0 | 1 => Registered::Listed(value),
                2 => Registered::WindowFull,
                _ => Registered::Sealed,
            })
            .collect())
    }

    /// What Redis holds of `buyer` for each of `sales`, in one round trip (one pipeline of
    /// plain reads, which a cluster routes per key).
    pub async fn held(&self, sales: &[SaleItem], buyer: i64) -> redis::RedisResult<Vec<Held>> {
        let mut pipe = redis::pipe();
        for sale in sales {
            let keys = LotteryKeys::of(self.0, *sale);
            pipe.hget(&keys.regs, buyer)
                .hget(&keys.codes, buyer)
                .sismember(&keys.used, buyer)
                .get(&keys.turns)
                .get(&keys.winners)
                .zrange_withscores(&keys.gone, 0, -1);
        }
        // Per item: his entry, his code, whether it bought, the turns, the winners, the
        // revoked ranks (as few as ops revoked).
        type Reads = (
            Option<String>,
            Option<String>,
            bool,
            Option<i64>,
            Option<i64>,
            Vec<(String, f64)>,
        );
        let values: Vec<Reads> = pipe.query_async(&mut self.0.connection()).await?;
        Ok(values
            .into_iter()
            .map(|(entry, grant, used, turns, winners, gone)| Held {
                entry,
                grant,
                used,
                turns,
                winners,
                // Scores are ranks, whole numbers.
                gone_ranks: gone.into_iter().map(|(_, rank)| rank as i64).collect(),
            })
            .collect())
    }

    /// Seals the list (no registration lands after) and reads it whole: the registrants to
    /// draw, and those revoked before the draw.
    pub async fn seal_and_read(
        &self,
        sale: SaleItem,
        expires_at_ms: i64,
    ) -> redis::RedisResult<(Vec<i64>, Vec<i64>)> {
        let keys = LotteryKeys::of(self.0, sale);
        let mut connection = self.0.connection();
        let _: () = redis::pipe()
            .set(&keys.sealed, "1")
            .pexpire_at(&keys.sealed, expires_at_ms)
            .query_async(&mut connection)
            .await?;
        let (mut drawn, mut revoked) = (Vec::new(), Vec::new());
        let mut cursor: u64 = 0;
        loop {
            let (next, page): (u64, Vec<(i64, String)>) = redis::cmd("HSCAN")
                .arg(&keys.regs)
                .arg(cursor)
                .arg("COUNT")
                .arg(10_000)
                .query_async(&mut connection)
                .await?;
            for (buyer, entry) in page {
                if entry == "x" {
                    revoked.push(buyer);
                } else {
                    drawn.push(buyer);
                }
            }
            if next == 0 {
                break;
            }
            cursor = next;
        }
        // HSCAN may return an entry twice.
        for list in [&mut drawn, &mut revoked] {
            list.sort_unstable();
            list.dedup();
        }
        Ok((drawn, revoked))
    }

    /// Where `sale`'s registrations came from so far, in one round trip; None when Redis
    /// holds no registration of it (none made, or its keys gone after the sale).
    pub async fn sources(&self, sale: SaleItem) -> redis::RedisResult<Option<RegistrationSources>> {
        let keys = LotteryKeys::of(self.0, sale);
        let (registrations, addresses, top): (i64, i64, Vec<(String, f64)>) = redis::pipe()
            .hlen(&keys.regs)
            .zcard(&keys.addresses)
            .zrevrange_withscores(&keys.addresses, 0, 99)
            .query_async(&mut self.0.connection())
            .await?;
        if addresses == 0 {
            return Ok(None);
        }
        // Scores are whole counts (ZINCRBY by 1).
        let top: Vec<AddressRegistrations> = top
            .into_iter()
            .map(|(address, count)| AddressRegistrations {
                address,
                registrations: count as i64,
            })
            .collect();
        Ok(Some(RegistrationSources {
            registrations,
            addresses,
            from_top_100: top.iter().map(|entry| entry.registrations).sum(),
            top: top
                .into_iter()
                .take(RegistrationSources::TOP_SHOWN)
                .collect(),
        }))
    }

    /// Writes a drawn item's state (`drawn`): after the draw, again from the start when a
    /// leader died in the middle, and whenever Redis has lost it. Every step sets what
    /// `drawn` says (a buy's used code is only ever added), and the waitlist is rebuilt
    /// whole. Nothing moves the waitlist before the last step marks the state complete.
    pub async fn publish(
        &self,
        sale: SaleItem,
        drawn: &DrawnState,
        expires_at_ms: i64,
    ) -> redis::RedisResult<()> {
        let keys = LotteryKeys::of(self.0, sale);
        let mut connection = self.0.connection();
        let _: () = connection.del(&keys.queue).await?;
        let chunks = drawn
            .ranked
            .len()
            .max(drawn.waiting.len())
            .div_ceil(PUBLISH_CHUNK);
        for chunk in 0..chunks {
            let mut pipe = redis::pipe();
            let ranked = nth_chunk(&drawn.ranked, chunk);
            if !ranked.is_empty() {
                pipe.hset_multiple(&keys.regs, ranked).ignore();
            }
            let waiting = nth_chunk(&drawn.waiting, chunk);
            if !waiting.is_empty() {
                pipe.rpush(&keys.queue, waiting).ignore();
            }
            pipe.query_async::<()>(&mut connection).await?;
        }
        for codes in drawn.codes.chunks(PUBLISH_CHUNK) {
            let encoded: Vec<(i64, String)> = codes
                .iter()
                .map(|(buyer, grant)| (*buyer, grant.encode()))
                .collect();
            let _: () = connection.hset_multiple(&keys.codes, &encoded).await?;
        }
        let mut pipe = redis::pipe();
        if !drawn.used.is_empty() {
            pipe.sadd(&keys.used, &drawn.used).ignore();
        }
        for (buyer, rank) in &drawn.revoked {
            pipe.hset(&keys.regs, buyer, "x").ignore();
            if let Some(rank) = rank {
                pipe.zadd(&keys.gone, buyer, rank).ignore();
            }
        }
        for key in [&keys.regs, &keys.codes, &keys.queue, &keys.used, &keys.gone] {
            pipe.pexpire_at(key, expires_at_ms).ignore();
        }
        for (key, value) in [
            (&keys.turns, drawn.turns),
            (&keys.winners, drawn.winners),
            (&keys.sealed, 1),
            (&keys.drawn, 1),
        ] {
            pipe.set(key, value)
                .ignore()
                .pexpire_at(key, expires_at_ms)
                .ignore();
        }
        pipe.query_async::<()>(&mut connection).await
    }

    /// Whether Redis holds `sale`'s drawn state whole (`publish`'s last step).
    pub async fn holds_draw(&self, sale: SaleItem) -> redis::RedisResult<bool> {
        let keys = LotteryKeys::of(self.0, sale);
        self.0.connection().exists(&keys.drawn).await
    }

    /// Hands free units to the next on the waitlist (`lua/lottery_advance.lua`): codes live
    /// from `valid_from_ms` to `expires_ms`, taken from `fresh` in order.
    pub async fn advance(
        &self,
        sale: SaleItem,
        now_ms: i64,
        valid_from_ms: i64,
        expires_ms: i64,
        per_user_limit: i64,
        fresh: &[String],
    ) -> redis::RedisResult<Vec<Issued>> {
        let keys = LotteryKeys::of(self.0, sale);
        let flat: Vec<String> = LOTTERY_ADVANCE
            .key(self.0.stock_key(sale))
            .key(&keys.codes)
            .key(&keys.used)
            .key(&keys.queue)
            .key(&keys.regs)
            .key(&keys.turns)
            .key(&keys.drawn)
            .arg(now_ms)
            .arg(valid_from_ms)
            .arg(expires_ms)
            .arg(per_user_limit)
            .arg(fresh)
            .invoke_async(&mut self.0.connection())
            .await?;
        Ok(flat
            .chunks_exact(5)
            .filter_map(|five| {
                Some(Issued {
                    buyer: five[0].parse().ok()?,
                    grant: Grant {
                        code: five[1].clone(),
                        valid_from_ms: five[2].parse().ok()?,
                        expires_ms: five[3].parse().ok()?,
                        units: five[4].parse().ok()?,
                    },
                })
            })
            .collect())
    }

    /// Revokes `buyer` (`lua/lottery_revoke.lua`): whether he was registered and not revoked
    /// before.
    pub async fn revoke(&self, sale: SaleItem, buyer: i64) -> redis::RedisResult<bool> {
        let keys = LotteryKeys::of(self.0, sale);
        let (code, _): (i64, String) = LOTTERY_REVOKE
            .key(&keys.regs)
            .key(&keys.codes)
            .key(&keys.used)
            .key(&keys.gone)
            .arg(buyer)
            .invoke_async(&mut self.0.connection())
            .await?;
        Ok(code == 1)
    }

    /// The live state of a drawn item, for the final statuses and the ops page: every code,
    /// the buyers whose code bought, the revoked, and the turns.
    pub async fn live_state(&self, sale: SaleItem) -> redis::RedisResult<LiveState> {
        let keys = LotteryKeys::of(self.0, sale);
        let (codes, used, turns): (Vec<(i64, String)>, Vec<i64>, Option<i64>) = redis::pipe()
            .hgetall(&keys.codes)
            .smembers(&keys.used)
            .get(&keys.turns)
            .query_async(&mut self.0.connection())
            .await?;
        Ok(LiveState {
            codes: codes
                .into_iter()
                .filter_map(|(buyer, grant)| Some((buyer, Grant::parse(&grant)?)))
                .collect(),
            used: used.into_iter().collect(),
            turns,
        })
    }
}

/// A drawn item's codes as Redis has them now.
pub struct LiveState {
    pub codes: Vec<(i64, Grant)>,
    pub used: std::collections::HashSet<i64>,
    pub turns: Option<i64>,
}
