//! Redis: one multiplexed connection, to a single Redis or to a Redis Cluster, that is
//! reached again on its own when Redis comes back, with every command bounded in time, the
//! key layout every capability shares, and the generic commands. The Lua scripts (`lua/`) are
//! loaded in [`crate::lua`]; each capability calls its own through a typed client over this
//! connection, in its own folder (`StockClient` in the server's `buy::stock_scripts`,
//! `BloomClient`, `ReleaseClient`, `ItemStateClient`, `ShadowClient`).
//!
//! Every key starts with the configured prefix so deployments and tests can share one
//! Redis. Keys one script, MULTI or pipeline touches share a hash tag (`{...}`), so each
//! goes to one cluster slot; reads of several items' keys use MGET, which the cluster
//! client splits by slot. On a cluster the client follows MOVED and ASK, and a script a
//! new master does not hold yet is loaded on every node and run again (NOSCRIPT).

use arc_swap::ArcSwap;
use prometheus::Histogram;
use redis::{
    aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig, PubSub},
    cluster::{ClusterClient, ClusterClientBuilder},
    cluster_async::ClusterConnection,
    AsyncCommands, Cmd, Pipeline, RedisError, RedisFuture, RedisResult, Value,
};
use secrecy::ExposeSecret;
use std::{collections::HashMap, future::Future, sync::Arc, time::Duration};
use tokio::sync::mpsc;

use contract::SaleItem;

use crate::{config::Settings, lua, lua::FIXED_WINDOW, metrics::Metrics};

#[derive(Clone)]
pub struct RedisStore {
    connection: RedisConnection,
    prefix: Arc<str>,
    /// Where a subscription opens a connection of its own: the one Redis, or each cluster
    /// node in turn.
    subscribers: Arc<[redis::Client]>,
}

/// Where commands go.
#[derive(Clone)]
enum Link {
    /// One Redis.
    Node(ConnectionManager),
    /// A Redis Cluster: the client keeps the slot map and a connection to every node,
    /// routes each command by its key's slot and follows MOVED and ASK. Replaced by a new
    /// one when it stops answering (`reconnect_while_unreachable`).
    Cluster(Arc<ArcSwap<ClusterConnection>>),
}

impl Link {
    async fn send(&mut self, cmd: &Cmd) -> RedisResult<Value> {
        match self {
            Link::Node(manager) => manager.send_packed_command(cmd).await,
            Link::Cluster(cluster) => {
                let mut connection = ClusterConnection::clone(&cluster.load());
                connection.req_packed_command(cmd).await
            }
        }
    }

    async fn send_pipeline(
        &mut self,
        pipeline: &Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        match self {
            Link::Node(manager) => manager.send_packed_commands(pipeline, offset, count).await,
            // One slot per pipeline: the client refuses one whose keys span slots
            // (CROSSSLOT) rather than split a MULTI.
            Link::Cluster(cluster) => {
                let mut connection = ClusterConnection::clone(&cluster.load());
                connection
                    .req_packed_commands(pipeline, offset, count)
                    .await
            }
        }
    }
}

impl ConnectionLike for Link {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(self.send(cmd))
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(self.send_pipeline(cmd, offset, count))
    }

    fn get_db(&self) -> i64 {
        match self {
            Link::Node(manager) => manager.get_db(),
            Link::Cluster(_) => 0,
        }
    }
}

/// Retries of one cluster command (redirections, a slot without a master for a moment),
/// and the shortest and longest wait before one, in milliseconds.
const CLUSTER_RETRIES: u32 = 8;
const CLUSTER_RETRY_WAIT_MS: (u64, u64) = (10, 250);

impl RedisStore {
    /// Connects once (failing at once if Redis, or every cluster node named, does not
    /// answer), then keeps the connection.
    pub async fn connect(settings: &Settings, metrics: &Metrics) -> RedisResult<Self> {
        let timeout = settings.redis_timeout();
        let (link, subscribers, cluster) = if settings.redis_cluster_nodes.is_empty() {
            let client = redis::Client::open(settings.redis_url.expose_secret())?;
            // One attempt per reconnection, no backoff: the manager's retries sleep between
            // attempts (a second, then a minute each with redis 0.32's defaults) and every
            // command waits for them, so a Redis that went away would hang requests, and one
            // that came back would stay unused meanwhile.
            // Attempts are made instead by the commands that find the connection broken and
            // by `reconnect_while_unreachable`.
            let config = ConnectionManagerConfig::new()
                .set_number_of_retries(0)
                .set_connection_timeout(timeout)
                .set_response_timeout(timeout);
            let manager = ConnectionManager::new_with_config(client.clone(), config).await?;
            (Link::Node(manager), vec![client], None)
        } else {
            let nodes: Vec<&str> = settings
                .redis_cluster_nodes
                .iter()
                .map(|node| node.expose_secret())
                .collect();
            // Redirections and a slot whose master is being replaced (CLUSTERDOWN,
            // TRYAGAIN) are retried after a short wait, well inside the command's own
            // deadline; the defaults wait over a second before the first retry.
            let client = ClusterClientBuilder::new(nodes.iter().copied())
                .connection_timeout(timeout)
                .response_timeout(timeout)
                .retries(CLUSTER_RETRIES)
                .min_retry_wait(CLUSTER_RETRY_WAIT_MS.0)
                .max_retry_wait(CLUSTER_RETRY_WAIT_MS.1)
                .build()?;
            let connection = client.get_async_connection().await?;
            let subscribers = nodes
                .into_iter()
                .map(redis::Client::open)
                .collect::<RedisResult<_>>()?;
            let link = Link::Cluster(Arc::new(ArcSwap::from_pointee(connection)));
            (link, subscribers, Some(client))
        };
        // One pending signal is enough: the task pings until Redis answers, whatever the count.
        let (failed, failures) = mpsc::channel(1);
        tokio::spawn(reconnect_while_unreachable(
            link.clone(),
            cluster,
            failures,
            timeout,
            settings.redis_reconnect_interval(),
        ));
        Ok(Self {
            connection: RedisConnection {
                link,
                timeout,
                failed,
                durations: CallDurations::of(metrics),
                commands: metrics.redis_commands.clone(),
            },
            prefix: settings.redis_prefix.as_str().into(),
            subscribers: subscribers.into(),
        })
    }

    /// A connection of its own for a pub/sub subscription, to the one Redis or to the first
    /// cluster node that answers (a message published on any node of a cluster reaches the
    /// subscribers of every node). Each attempt is bounded by the Redis timeout.
    pub async fn subscription(&self) -> RedisResult<PubSub> {
        let timeout = self.connection.timeout;
        let mut failure = None;
        for client in self.subscribers.iter() {
            match tokio::time::timeout(timeout, client.get_async_pubsub()).await {
                Ok(Ok(subscription)) => return Ok(subscription),
                Ok(Err(error)) => failure = Some(error),
                Err(_) => failure = Some(timed_out(timeout)),
            }
        }
        Err(failure.unwrap_or_else(|| timed_out(timeout)))
    }

    /// A clone of the shared connection; cheap, multiplexed, every command bounded in time.
    pub fn connection(&self) -> RedisConnection {
        self.connection.clone()
    }

    /// The full key for `rest`, under this deployment's prefix; `rest` may be a
    /// `format_args!`, written straight into the key.
    pub fn key(&self, rest: impl std::fmt::Display) -> String {
        format!("{}{rest}", self.prefix)
    }

    /// Counter of failed-or-attempted logins for one subject (username or address).
    pub fn login_attempts_key(&self, subject: &str) -> String {
        self.key(format_args!("login:{{{subject}}}"))
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

    /// List every Redis deduction of the item appends its buyer and order id to
    /// (`lua/buy.lua`): an instance that refuses the item from memory reads only the entries
    /// appended since it last read, not the buyer records whole.
    pub fn holders_log_key(&self, sale: SaleItem) -> String {
        self.item_key(sale, "holders")
    }

    /// Present while a reconciliation run holds the item: no deduction runs then.
    pub fn fence_key(&self, sale: SaleItem) -> String {
        self.item_key(sale, "fence")
    }

    /// Where the answer to a buyer's request id for one item is kept for replay (or the
    /// in-flight marker while the request runs); under the item's tag, since the buy script
    /// claims it together with the deduction.
    pub fn request_key(&self, sale: SaleItem, user_id: i64, request_id: &str) -> String {
        self.item_key(sale, format_args!("idem:{user_id}:{request_id}"))
    }

    /// One of an item's keys: every key of one item shares its hash tag, so one script can
    /// touch them all, on Redis Cluster too. Formatted in one go: a buy names ten of them.
    pub fn item_key(&self, sale: SaleItem, rest: impl std::fmt::Display) -> String {
        let (activity, item) = (sale.activity, sale.item);
        self.key(format_args!("{{a{activity}.i{item}}}:{rest}"))
    }

    /// The Bloom filter of every pre-warmed activity item.
    pub fn bloom_key(&self) -> String {
        self.key("bloom:{items}")
    }

    /// The buyer's open human challenge, handed out and not answered yet.
    pub fn challenge_key(&self, user_id: i64) -> String {
        self.key(format_args!("challenge:{{{user_id}}}"))
    }

    /// Stores a request's final response for replay.
    pub async fn store_response(&self, key: &str, response: &[u8], ttl_s: u64) -> RedisResult<()> {
        self.connection().set_ex(key, response, ttl_s).await
    }

    /// Sets each key to its value, all with one expiry, in one round trip. The keys share
    /// a hash tag (one cluster slot).
    pub async fn store_responses(
        &self,
        responses: &[(&str, &[u8])],
        ttl_s: u64,
    ) -> RedisResult<()> {
        let mut pipe = redis::pipe();
        for (key, response) in responses {
            pipe.set_ex(*key, *response, ttl_s).ignore();
        }
        pipe.query_async(&mut self.connection()).await
    }

    /// Reads and deletes a key in one step (GETDEL), for one-shot values.
    pub async fn take_bytes(&self, key: &str) -> RedisResult<Option<Vec<u8>>> {
        self.connection().get_del(key).await
    }

    /// Counts one hit in a fixed window and returns the hits so far (`lua/fixed_window.lua`).
    pub async fn hit_fixed_window(&self, key: &str, window_s: u32) -> RedisResult<u64> {
        FIXED_WINDOW
            .key(key)
            .arg(window_s)
            .invoke_async(&mut self.connection())
            .await
    }

    pub async fn delete(&self, key: &str) -> RedisResult<()> {
        self.connection().del(key).await
    }

    /// Values of many integer keys in one round trip (MGET; on a cluster, one per slot,
    /// sent together); absent keys are `None`.
    pub async fn get_integers(&self, keys: &[String]) -> RedisResult<Vec<Option<i64>>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        self.connection().mget(keys).await
    }

    pub async fn ping(&self) -> RedisResult<()> {
        redis::cmd("PING").query_async(&mut self.connection()).await
    }
}

/// The shared connection as commands use it. A command fails after the Redis timeout at the
/// latest, waiting for a reconnection included; a failure that says the connection is broken
/// wakes `reconnect_while_unreachable`.
#[derive(Clone)]
pub struct RedisConnection {
    link: Link,
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
        crate::tally::redis(commands);
        let started = std::time::Instant::now();
        let outcome = tokio::time::timeout(self.timeout, command)
            .await
            .unwrap_or_else(|_| Err(timed_out(self.timeout)));
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

/// The error of a call that got no answer within `timeout`.
fn timed_out(timeout: Duration) -> RedisError {
    RedisError::from(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!("Redis did not answer within {timeout:?}"),
    ))
}

impl ConnectionLike for RedisConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        let mut link = self.link.clone();
        Box::pin(async move { self.bounded(call_name(cmd), 1, link.send(cmd)).await })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        let mut link = self.link.clone();
        Box::pin(async move {
            // What Redis runs: `count` commands after `offset` answers skipped, the
            // MULTI and the queued commands of an atomic pipeline (its EXEC is the one).
            self.bounded(
                "pipeline",
                offset + count,
                link.send_pipeline(cmd, offset, count),
            )
            .await
        })
    }

    fn get_db(&self) -> i64 {
        self.link.get_db()
    }
}

/// After a command found the connection broken, pings every `interval` until Redis answers,
/// so the connection is back within about `interval` of Redis returning even when no request
/// comes to try. On a cluster, each failed round also replaces the cluster connection by a
/// new one made from `cluster`'s seed nodes. Ends with the last [`RedisConnection`].
async fn reconnect_while_unreachable(
    mut link: Link,
    cluster: Option<ClusterClient>,
    mut failures: mpsc::Receiver<()>,
    timeout: Duration,
    interval: Duration,
) {
    while failures.recv().await.is_some() {
        let mut unreachable = false;
        loop {
            // A ping that finds the last connection attempt failed only reports it, and
            // makes the manager start another; the second ping waits for that one.
            let outcome = match ping(&mut link, timeout).await {
                Ok(()) => Ok(()),
                Err(_) => ping(&mut link, timeout).await,
            };
            match outcome {
                Ok(()) => break,
                Err(error) if !unreachable => {
                    tracing::warn!(%error, "Redis unreachable; trying again every {interval:?}");
                }
                Err(_) => {}
            }
            unreachable = true;
            if let (Link::Cluster(current), Some(client)) = (&link, &cluster) {
                // Seen under a storm on three masters: after one was SIGKILLed and its
                // replica took over, one instance's cluster client timed out on every
                // command for as long as the test watched (20 s and more) while the others
                // sold on. A new client learns the slot map afresh from the seed nodes.
                if let Ok(Ok(fresh)) =
                    tokio::time::timeout(timeout, client.get_async_connection()).await
                {
                    current.store(Arc::new(fresh));
                }
            }
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

/// PING: on a cluster, every master must answer.
async fn ping(link: &mut Link, timeout: Duration) -> Result<(), String> {
    let command = redis::cmd("PING");
    match tokio::time::timeout(timeout, command.query_async::<()>(link)).await {
        Ok(answer) => answer.map_err(|error| error.to_string()),
        Err(_) => Err(format!("no answer within {timeout:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lua::BUY;

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
