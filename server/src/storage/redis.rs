//! Redis: one multiplexed, auto-reconnecting connection, the key layout, and the Lua
//! scripts of `lua/`.
//!
//! Every key starts with the configured prefix so deployments and tests can share one
//! Redis. Keys one script touches share a hash tag (`{...}`) to stay cluster-safe.

use redis::{aio::ConnectionManager, AsyncCommands, Script};
use secrecy::ExposeSecret;
use std::sync::{Arc, LazyLock};

use crate::config::Settings;

static FIXED_WINDOW: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../../lua/fixed_window.lua")));

#[derive(Clone)]
pub struct RedisStore {
    connection: ConnectionManager,
    prefix: Arc<str>,
}

impl RedisStore {
    pub async fn connect(settings: &Settings) -> redis::RedisResult<Self> {
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
    pub fn key(&self, rest: &str) -> String {
        format!("{}{rest}", self.prefix)
    }

    /// Counter of failed-or-attempted logins for one subject (username or address).
    pub fn login_attempts_key(&self, subject: &str) -> String {
        self.key(&format!("login:{{{subject}}}"))
    }

    /// Stock left in Redis for one item of one activity. The hash tag groups it with the
    /// item's buyer records for the deduction script.
    pub fn stock_key(&self, activity_id: i64, item_id: i64) -> String {
        self.key(&format!("{{a{activity_id}.i{item_id}}}:stock"))
    }

    /// Counts one hit in a fixed window and returns the hits so far (`lua/fixed_window.lua`).
    pub async fn hit_fixed_window(&self, key: &str, window_s: u32) -> redis::RedisResult<u64> {
        FIXED_WINDOW
            .key(key)
            .arg(window_s)
            .invoke_async(&mut self.connection())
            .await
    }

    pub async fn delete(&self, key: &str) -> redis::RedisResult<()> {
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

    pub async fn ping(&self) -> redis::RedisResult<()> {
        redis::cmd("PING").query_async(&mut self.connection()).await
    }
}
