//! Redis: one multiplexed, auto-reconnecting connection, the key layout every capability
//! shares, and the generic commands. Each capability's Lua scripts (`lua/`) are methods it
//! adds to [`RedisStore`] in its own folder (`buy::stock_scripts`, `buy::bloom`,
//! `orders::release_scripts`, `prewarm::load`).
//!
//! Every key starts with the configured prefix so deployments and tests can share one
//! Redis. Keys one script touches share a hash tag (`{...}`) to stay cluster-safe.

use redis::{aio::ConnectionManager, AsyncCommands, Script};
use secrecy::ExposeSecret;
use std::sync::{Arc, LazyLock};

use contract::SaleItem;

use crate::infra::config::Settings;

static FIXED_WINDOW: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../../lua/fixed_window.lua")));

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

    /// Hash of order id → deduction marker, left by every deduction until reconciliation
    /// finds its order committed (`lua/deduct_stock.lua`).
    pub fn pending_key(&self, sale: SaleItem) -> String {
        let (activity, item) = (sale.activity, sale.item);
        self.key(&format!("{{a{activity}.i{item}}}:pending"))
    }

    /// Present while a reconciliation run holds the item: no deduction runs then.
    pub fn fence_key(&self, sale: SaleItem) -> String {
        let (activity, item) = (sale.activity, sale.item);
        self.key(&format!("{{a{activity}.i{item}}}:fence"))
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
