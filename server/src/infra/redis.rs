//! Redis: one multiplexed connection that is reached again on its own when Redis comes
//! back, with every command bounded in time, the key layout every capability shares, and the
//! generic commands. The Lua scripts (`lua/`) are loaded in `infra::lua`; each capability's
//! calls of them are methods it adds to [`RedisStore`] in its own folder
//! (`buy::stock_scripts`, `buy::bloom`, `orders::release_scripts`, `prewarm::load`).
//!
//! Every key starts with the configured prefix so deployments and tests can share one
//! Redis. Keys one script touches share a hash tag (`{...}`) to stay cluster-safe.

use prometheus::Histogram;
use redis::{
    aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig},
    AsyncCommands, Cmd, Pipeline, RedisError, RedisFuture, RedisResult, Value,
};
use secrecy::ExposeSecret;
use std::{collections::HashMap, future::Future, sync::Arc, time::Duration};
use tokio::sync::mpsc;

use contract::SaleItem;

use crate::infra::{config::Settings, lua, lua::FIXED_WINDOW, metrics::Metrics};

#[derive(Clone)]
pub struct RedisStore {
    connection: RedisConnection,
    prefix: Arc<str>,
    /// For connections of their own (a subscription holds its connection).
    client: redis::Client,
}

impl RedisStore {
    /// Connects once (failing at once if Redis does not answer), then keeps the connection.
    pub(crate) async fn connect(settings: &Settings, metrics: &Metrics) -> RedisResult<Self> {
        let client = redis::Client::open(settings.redis_url.expose_secret())?;
        let timeout = settings.redis_timeout();
        // One attempt per reconnection, no backoff: the manager's retries sleep between
        // attempts (a second, then a minute each with redis 0.32's defaults) and every
        // command waits for them, so a Redis that went away would hang requests, and one that
        // came back would stay unused meanwhile.
        // Attempts are made instead by the commands that find the connection broken and by
        // `reconnect_while_unreachable`.
        let config = ConnectionManagerConfig::new()
            .set_number_of_retries(0)
            .set_connection_timeout(timeout)
            .set_response_timeout(timeout);
        let manager = ConnectionManager::new_with_config(client.clone(), config).await?;
        // One pending signal is enough: the task pings until Redis answers, whatever the count.
        let (failed, failures) = mpsc::channel(1);
        tokio::spawn(reconnect_while_unreachable(
            manager.clone(),
            failures,
            timeout,
            settings.redis_reconnect_interval(),
        ));
        Ok(Self {
            connection: RedisConnection {
                manager,
                timeout,
                failed,
                durations: CallDurations::of(metrics),
                commands: metrics.redis_commands.clone(),
            },
            prefix: settings.redis_prefix.as_str().into(),
            client,
        })
    }

    /// The client, for a connection apart from the shared one (a pub/sub subscription).
    pub(crate) fn client(&self) -> &redis::Client {
        &self.client
    }

    /// A clone of the shared connection; cheap, multiplexed, every command bounded in time.
    pub fn connection(&self) -> RedisConnection {
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
        self.item_key(sale, "stock")
    }

    /// Hash of buyer id → units that buyer holds of the item.
    pub fn bought_key(&self, sale: SaleItem) -> String {
        self.item_key(sale, "bought")
    }

    /// Hash of seat code → '' (free) or the buyer holding it, for seated activities.
    pub fn seats_key(&self, sale: SaleItem) -> String {
        self.item_key(sale, "seats")
    }

    /// Set of cancelled orders whose units Redis has taken back (`lua/restore_order.lua`).
    pub fn restored_key(&self, sale: SaleItem) -> String {
        self.item_key(sale, "restored")
    }

    /// Hash of order id → deduction marker, left by every deduction until reconciliation
    /// finds its order committed (`lua/buy.lua`).
    pub fn pending_key(&self, sale: SaleItem) -> String {
        self.item_key(sale, "pending")
    }

    /// Present while a reconciliation run holds the item: no deduction runs then.
    pub fn fence_key(&self, sale: SaleItem) -> String {
        self.item_key(sale, "fence")
    }

    /// Where the answer to a buyer's request id for one item is kept for replay (or the
    /// in-flight marker while the request runs); under the item's tag, since the buy script
    /// claims it together with the deduction.
    pub fn request_key(&self, sale: SaleItem, user_id: i64, request_id: &str) -> String {
        self.item_key(sale, &format!("idem:{user_id}:{request_id}"))
    }

    /// One of an item's keys: every key of one item shares its hash tag, so one script can
    /// touch them all, on Redis Cluster too.
    pub(crate) fn item_key(&self, sale: SaleItem, rest: &str) -> String {
        let (activity, item) = (sale.activity, sale.item);
        self.key(&format!("{{a{activity}.i{item}}}:{rest}"))
    }

    /// The Bloom filter of every pre-warmed activity item.
    pub(crate) fn bloom_key(&self) -> String {
        self.key("bloom:{items}")
    }

    /// The buyer's open human challenge, handed out and not answered yet.
    pub(crate) fn challenge_key(&self, user_id: i64) -> String {
        self.key(&format!("challenge:{{{user_id}}}"))
    }

    /// Stores a request's final response for replay.
    pub(crate) async fn store_response(
        &self,
        key: &str,
        response: &[u8],
        ttl_s: u64,
    ) -> RedisResult<()> {
        self.connection().set_ex(key, response, ttl_s).await
    }

    pub(crate) async fn get_bytes(&self, key: &str) -> RedisResult<Option<Vec<u8>>> {
        self.connection().get(key).await
    }

    /// Reads and deletes a key in one step (GETDEL), for one-shot values.
    pub(crate) async fn take_bytes(&self, key: &str) -> RedisResult<Option<Vec<u8>>> {
        self.connection().get_del(key).await
    }

    /// Counts one hit in a fixed window and returns the hits so far (`lua/fixed_window.lua`).
    pub(crate) async fn hit_fixed_window(&self, key: &str, window_s: u32) -> RedisResult<u64> {
        FIXED_WINDOW
            .key(key)
            .arg(window_s)
            .invoke_async(&mut self.connection())
            .await
    }

    pub(crate) async fn delete(&self, key: &str) -> RedisResult<()> {
        self.connection().del(key).await
    }

    /// Values of many integer keys in one round trip; absent keys are `None`.
    pub async fn get_integers(&self, keys: &[String]) -> RedisResult<Vec<Option<i64>>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for key in keys {
            pipe.get(key);
        }
        pipe.query_async(&mut self.connection()).await
    }

    pub(crate) async fn ping(&self) -> RedisResult<()> {
        redis::cmd("PING").query_async(&mut self.connection()).await
    }
}

/// The shared connection as commands use it. A command fails after the Redis timeout at the
/// latest, waiting for a reconnection included; a failure that says the connection is broken
/// wakes `reconnect_while_unreachable`.
#[derive(Clone)]
pub struct RedisConnection {
    manager: ConnectionManager,
    timeout: Duration,
    failed: mpsc::Sender<()>,
    durations: CallDurations,
    commands: prometheus::IntCounter,
}

/// Redis commands the timings name; any other command is timed as `redis.other`. (`eval`
/// is a script's body sent after a `NOSCRIPT`, once per script and Redis restart.)
const NAMED_COMMANDS: [&str; 15] = [
    "get", "set", "setex", "psetex", "getdel", "del", "mget", "exists", "hgetall", "hmget",
    "hscan", "scan", "ping", "time", "eval",
];

/// `seckill_dependency_call_duration_seconds{call="redis.<script or command>"}`: every
/// label value resolved once, since the set is fixed (our scripts, the commands above,
/// `pipeline` and `other`), so a call costs one lookup and no allocation.
#[derive(Clone)]
struct CallDurations(Arc<HashMap<&'static str, Outcomes>>);

#[derive(Clone)]
struct Outcomes {
    ok: Histogram,
    error: Histogram,
}

/// The name of what a command runs: the script of an EVALSHA, else the command.
fn call_name(cmd: &Cmd) -> &'static str {
    let mut args = cmd.args_iter().filter_map(|arg| match arg {
        redis::Arg::Simple(bytes) => Some(bytes),
        redis::Arg::Cursor => None,
    });
    let Some(command) = args.next() else {
        return "other";
    };
    if command.eq_ignore_ascii_case(b"EVALSHA") {
        return args.next().and_then(lua::name_of).unwrap_or("other");
    }
    NAMED_COMMANDS
        .iter()
        .find(|name| command.eq_ignore_ascii_case(name.as_bytes()))
        .copied()
        .unwrap_or("other")
}

impl CallDurations {
    fn of(metrics: &Metrics) -> Self {
        let names = lua::NAMES
            .iter()
            .chain(NAMED_COMMANDS.iter())
            .chain(["pipeline", "other"].iter());
        let by_name = names
            .map(|&name| {
                let call = format!("redis.{name}");
                let outcome = |outcome: &str| {
                    metrics
                        .dependency_calls
                        .with_label_values(&[call.as_str(), outcome])
                };
                (
                    name,
                    Outcomes {
                        ok: outcome("ok"),
                        error: outcome("error"),
                    },
                )
            })
            .collect();
        Self(Arc::new(by_name))
    }

    fn of_call(&self, name: &str) -> &Outcomes {
        self.0
            .get(name)
            .or_else(|| self.0.get("other"))
            .expect("`other` is always listed")
    }
}

impl RedisConnection {
    /// Runs one round trip of `commands` commands, named `call` in the timings.
    async fn bounded<T>(
        &self,
        call: &str,
        commands: usize,
        command: impl Future<Output = RedisResult<T>>,
    ) -> RedisResult<T> {
        // Sent or not, it is what the caller asked of Redis: a buy's path counts it.
        self.commands.inc_by(commands as u64);
        crate::baselines::path::redis(commands);
        let started = std::time::Instant::now();
        let outcome = tokio::time::timeout(self.timeout, command)
            .await
            .unwrap_or_else(|_| {
                Err(RedisError::from(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("Redis did not answer within {:?}", self.timeout),
                )))
            });
        let took = started.elapsed().as_secs_f64();
        let durations = self.durations.of_call(call);
        match &outcome {
            Ok(_) => durations.ok.observe(took),
            Err(_) => durations.error.observe(took),
        }
        if outcome.as_ref().is_err_and(RedisError::is_io_error) {
            // Full: the task has been told already.
            let _ = self.failed.try_send(());
        }
        outcome
    }
}

impl ConnectionLike for RedisConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        let mut manager = self.manager.clone();
        Box::pin(async move {
            self.bounded(call_name(cmd), 1, manager.send_packed_command(cmd))
                .await
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        let mut manager = self.manager.clone();
        Box::pin(async move {
            // What Redis runs: `count` commands after `offset` answers skipped, the
            // MULTI and the queued commands of an atomic pipeline (its EXEC is the one).
            self.bounded(
                "pipeline",
                offset + count,
                manager.send_packed_commands(cmd, offset, count),
            )
            .await
        })
    }

    fn get_db(&self) -> i64 {
        self.manager.get_db()
    }
}

/// After a command found the connection broken, pings every `interval` until Redis answers,
/// so the connection is back within about `interval` of Redis returning even when no request
/// comes to try. Ends with the last [`RedisConnection`].
async fn reconnect_while_unreachable(
    mut manager: ConnectionManager,
    mut failures: mpsc::Receiver<()>,
    timeout: Duration,
    interval: Duration,
) {
    while failures.recv().await.is_some() {
        let mut unreachable = false;
        loop {
            // A ping that finds the last connection attempt failed only reports it, and
            // makes the manager start another; the second ping waits for that one.
            let outcome = match ping(&mut manager, timeout).await {
                Ok(()) => Ok(()),
                Err(_) => ping(&mut manager, timeout).await,
            };
            match outcome {
                Ok(()) => break,
                Err(error) if !unreachable => {
                    tracing::warn!(%error, "Redis unreachable; trying again every {interval:?}");
                }
                Err(_) => {}
            }
            unreachable = true;
            if failures.is_closed() {
                return;
            }
            tokio::time::sleep(interval).await;
        }
        if unreachable {
            tracing::info!("Redis reachable again");
        }
    }
}

async fn ping(manager: &mut ConnectionManager, timeout: Duration) -> Result<(), String> {
    let command = redis::cmd("PING");
    match tokio::time::timeout(timeout, command.query_async::<()>(manager)).await {
        Ok(answer) => answer.map_err(|error| error.to_string()),
        Err(_) => Err(format!("no answer within {timeout:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::infra::lua::BUY;

    #[test]
    fn a_call_is_named_by_its_script_or_its_command() {
        let mut evalsha = redis::cmd("EVALSHA");
        evalsha.arg(BUY.get_hash()).arg(9);
        assert_eq!(call_name(&evalsha), "buy");
        assert_eq!(call_name(redis::cmd("getdel").arg("k")), "getdel");
        assert_eq!(call_name(redis::cmd("EVALSHA").arg("0123")), "other");
        assert_eq!(call_name(&redis::cmd("FLUSHALL")), "other");
        // Every name a call can have is resolved up front.
        let durations = CallDurations::of(&Metrics::new());
        for name in lua::NAMES.iter().chain(&NAMED_COMMANDS) {
            assert!(durations.0.contains_key(name), "{name}");
        }
    }
}
