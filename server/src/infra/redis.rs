//! Redis: one multiplexed, auto-reconnecting connection, the key layout, and the Lua
//! scripts of `lua/`.
//!
//! Every key starts with the configured prefix so deployments and tests can share one
//! Redis. Keys one script touches share a hash tag (`{...}`) to stay cluster-safe.

use redis::{aio::ConnectionManager, AsyncCommands, Script};
use secrecy::ExposeSecret;
use std::sync::{Arc, LazyLock};

use contract::{SaleItem, UserId};

use crate::infra::config::Settings;

static FIXED_WINDOW: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../../lua/fixed_window.lua")));
static DEDUCT_STOCK: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../../lua/deduct_stock.lua")));
static RESTORE_STOCK: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../../lua/restore_stock.lua")));
static RATE_WINDOWS: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../../lua/rate_windows.lua")));
static CLAIM_REQUEST: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../../lua/claim_request.lua")));
static TAKE_SEATS: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../../lua/take_seats.lua")));
static RELEASE_SEATS: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../../lua/release_seats.lua")));
static BLOOM: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../../lua/bloom.lua")));
static RESTORE_ORDER: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../../lua/restore_order.lua")));

/// The value `claim_request.lua` stores while the first request with an id is in flight.
pub(crate) const IN_FLIGHT: &[u8] = b"\0in-flight";

/// Units one buyer takes of (or holds in) one sale item, as the stock scripts move them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Holding {
    pub sale: SaleItem,
    pub buyer: UserId,
    pub quantity: i64,
}

#[derive(Clone)]
pub struct RedisStore {
    connection: ConnectionManager,
    prefix: Arc<str>,
}

impl RedisStore {
    pub(crate) async fn connect(settings: &Settings) -> redis::RedisResult<Self> {
        let client = redis::Client::open(settings.redis_url.expose_secret())?;
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(std::time::Duration::from_secs(2))
            .set_response_timeout(std::time::Duration::from_secs(2));
        let connection = ConnectionManager::new_with_config(client, config).await?;
        Ok(Self {
            connection,
            prefix: settings.redis_prefix.as_str().into(),
        })
    }

    /// A clone of the shared connection; cheap, multiplexed.
    pub fn connection(&self) -> ConnectionManager {
        self.connection.clone()
    }

    /// The full key for `rest`, under this deployment's prefix.
    pub(crate) fn key(&self, rest: &str) -> String {
        format!("{}{rest}", self.prefix)
    }

    /// Counter of failed-or-attempted logins for one subject (username or address).
    pub(crate) fn login_attempts_key(&self, subject: &str) -> String {
        self.key(&format!("login:{{{subject}}}"))
    }

    /// Stock left in Redis for one item of one activity. The hash tag groups it with the
    /// item's buyer records and rate windows for the scripts that touch them together.
    pub fn stock_key(&self, sale: SaleItem) -> String {
        let (activity, item) = (sale.activity, sale.item);
        self.key(&format!("{{a{activity}.i{item}}}:stock"))
    }

    /// Hash of buyer id → units that buyer holds of the item.
    pub fn bought_key(&self, sale: SaleItem) -> String {
        let (activity, item) = (sale.activity, sale.item);
        self.key(&format!("{{a{activity}.i{item}}}:bought"))
    }

    /// Hash of seat code → '' (free) or the buyer holding it, for seated activities.
    pub fn seats_key(&self, sale: SaleItem) -> String {
        let (activity, item) = (sale.activity, sale.item);
        self.key(&format!("{{a{activity}.i{item}}}:seats"))
    }

    /// Set of cancelled orders whose units Redis has taken back (`lua/restore_order.lua`).
    pub fn restored_key(&self, sale: SaleItem) -> String {
        let (activity, item) = (sale.activity, sale.item);
        self.key(&format!("{{a{activity}.i{item}}}:restored"))
    }

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

    /// All the seats or none, within the per-user limit (`lua/take_seats.lua`).
    pub(crate) async fn take_seats(
        &self,
        sale: SaleItem,
        buyer: UserId,
        limit: i64,
        seats: &[String],
    ) -> redis::RedisResult<i64> {
        TAKE_SEATS
            .key(self.seats_key(sale))
            .key(self.stock_key(sale))
            .key(self.bought_key(sale))
            .arg(buyer.0)
            .arg(limit)
            .arg(seats)
            .invoke_async(&mut self.connection())
            .await
    }

    /// Frees seats the buyer holds (`lua/release_seats.lua`); returns how many.
    pub(crate) async fn release_seats(
        &self,
        sale: SaleItem,
        buyer: UserId,
        seats: &[String],
    ) -> redis::RedisResult<i64> {
        RELEASE_SEATS
            .key(self.seats_key(sale))
            .key(self.stock_key(sale))
            .key(self.bought_key(sale))
            .arg(buyer.0)
            .arg(seats)
            .invoke_async(&mut self.connection())
            .await
    }

    /// Where the first response to a buyer's request id is kept for replay.
    pub(crate) fn request_key(&self, user_id: i64, request_id: &str) -> String {
        self.key(&format!("idem:{{{user_id}}}:{request_id}"))
    }

    /// The Bloom filter of every pre-warmed activity item.
    pub(crate) fn bloom_key(&self) -> String {
        self.key("bloom:{items}")
    }

    /// A human challenge handed out and not answered yet.
    pub(crate) fn challenge_key(&self, challenge_id: &str) -> String {
        self.key(&format!("challenge:{{{challenge_id}}}"))
    }

    /// Atomic check-and-deduct of stock and the buyer's count (`lua/deduct_stock.lua`).
    pub(crate) async fn deduct_stock(&self, take: Holding, limit: i64) -> redis::RedisResult<i64> {
        let sale = take.sale;
        DEDUCT_STOCK
            .key(self.stock_key(sale))
            .key(self.bought_key(sale))
            .arg(take.buyer.0)
            .arg(take.quantity)
            .arg(limit)
            .invoke_async(&mut self.connection())
            .await
    }

    /// Gives a deduction back (`lua/restore_stock.lua`).
    pub(crate) async fn restore_stock(&self, held: Holding) -> redis::RedisResult<i64> {
        let sale = held.sale;
        RESTORE_STOCK
            .key(self.stock_key(sale))
            .key(self.bought_key(sale))
            .arg(held.buyer.0)
            .arg(held.quantity)
            .invoke_async(&mut self.connection())
            .await
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

    /// Stores a request's final response for replay.
    pub(crate) async fn store_response(
        &self,
        key: &str,
        response: &[u8],
        ttl_s: u64,
    ) -> redis::RedisResult<()> {
        self.connection().set_ex(key, response, ttl_s).await
    }

    pub(crate) async fn get_bytes(&self, key: &str) -> redis::RedisResult<Option<Vec<u8>>> {
        self.connection().get(key).await
    }

    /// Reads and deletes a key in one step (GETDEL), for one-shot values.
    pub(crate) async fn take_bytes(&self, key: &str) -> redis::RedisResult<Option<Vec<u8>>> {
        self.connection().get_del(key).await
    }

    /// Sets a Bloom filter's bits; returns how many were new.
    pub(crate) async fn bloom_add(&self, positions: &[u64]) -> redis::RedisResult<i64> {
        BLOOM
            .key(self.bloom_key())
            .arg("add")
            .arg(positions)
            .invoke_async(&mut self.connection())
            .await
    }

    /// Whether every bit is set (the key may be present) or not (it certainly is not).
    pub(crate) async fn bloom_test(&self, positions: &[u64]) -> redis::RedisResult<bool> {
        let answer: i64 = BLOOM
            .key(self.bloom_key())
            .arg("test")
            .arg(positions)
            .invoke_async(&mut self.connection())
            .await?;
        Ok(answer == 1)
    }

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

    /// Counts one hit in a fixed window and returns the hits so far (`lua/fixed_window.lua`).
    pub(crate) async fn hit_fixed_window(
        &self,
        key: &str,
        window_s: u32,
    ) -> redis::RedisResult<u64> {
        FIXED_WINDOW
            .key(key)
            .arg(window_s)
            .invoke_async(&mut self.connection())
            .await
    }

    pub(crate) async fn delete(&self, key: &str) -> redis::RedisResult<()> {
        self.connection().del(key).await
    }

    /// Values of many integer keys in one round trip; absent keys are `None`.
    pub async fn get_integers(&self, keys: &[String]) -> redis::RedisResult<Vec<Option<i64>>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for key in keys {
            pipe.get(key);
        }
        pipe.query_async(&mut self.connection()).await
    }

    pub(crate) async fn ping(&self) -> redis::RedisResult<()> {
        redis::cmd("PING").query_async(&mut self.connection()).await
    }
}
