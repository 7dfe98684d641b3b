//! Typed settings in three layers, merged by figment: the defaults below (the loopback
//! services a development machine runs), an optional TOML file named by `SECKILL_CONFIG`
//! (field names as here), then the environment variables listed in [`VARIABLES`].
//!
//! Secrets are [`SecretString`]s so that `Debug` and logs never show them. Whether the
//! process may serve with the secrets it was given is [`judge_secrets`]'s rule.

use figment::{
    providers::{Data, Format, Serialized, Toml},
    value::{Dict, Map, Value},
    Figment, Metadata, Profile, Provider,
};
use secrecy::{ExposeSecret, SecretString};
use serde::{de::Error as _, Deserialize, Deserializer};
use std::{net::SocketAddr, path::PathBuf, time::Duration};

use crate::client_address::TrustedProxies;

mod events;
pub use events::EventsSettings;

/// Everything a `seckill` process needs to know about its environment.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    /// Where the HTTP server listens (`SECKILL_BIND`).
    pub bind: SocketAddr,
    /// Most HTTP connections open at once (`SECKILL_MAX_CONNECTIONS`, 4096): past it the
    /// listener stops accepting until one closes. An open connection costs about 70 KB
    /// whether or not a request is on it; this bounds what a flood of them costs.
    pub max_connections: usize,
    /// How long a connection may wait for its next request (or its first), in seconds
    /// (`SECKILL_CONNECTION_IDLE_S`, 60; 0: for ever), before it is closed: idle connections
    /// would otherwise hold the slots of `max_connections` for good. It waits until the
    /// request's head has arrived whole, so a head sent slowly counts as idle. A request
    /// being served is never idle, however long it takes.
    pub connection_idle_s: u64,
    /// How long a request waits for the rest of its body, in milliseconds
    /// (`SECKILL_BODY_PATIENCE_MS`, 2,000), once it did not come with the head; then the
    /// request is refused 400 `BAD_REQUEST`. A request being served is never idle, so a body
    /// sent a byte at a time would otherwise hold its connection's slot of
    /// `max_connections` (and, on the buy route, one of `[buy] max_in_flight`'s places) for
    /// as long as its sender likes; a few thousand of them would shut the sale out.
    pub body_patience_ms: u64,
    /// PostgreSQL (`DATABASE_URL`).
    pub database_url: SecretString,
    /// Most connections one instance opens to PostgreSQL (`SECKILL_DB_MAX_CONNECTIONS`).
    pub db_max_connections: u32,
    /// Redis; its database index is honoured (`REDIS_URL`).
    pub redis_url: SecretString,
    /// A Redis Cluster instead: URLs of some of its nodes, comma-separated in the
    /// environment (`REDIS_CLUSTER_NODES`); the client learns the other nodes and the slot
    /// map from them. Empty (the default): the one Redis of `redis_url`, which is then unused.
    pub redis_cluster_nodes: Vec<SecretString>,
    /// Prepended to every Redis key, so deployments and tests can share one Redis (`SECKILL_REDIS_PREFIX`).
    pub redis_prefix: String,
    /// Longest one Redis command may take, waiting for a connection included, in
    /// milliseconds (2000): past it the command fails, so a Redis that went away costs a
    /// request this much at most. Also the connect and response timeouts of the connection.
    pub redis_timeout_ms: u64,
    /// While Redis is unreachable, how often the instance tries to reach it again, in
    /// milliseconds (250): the connection is back within about this long of Redis returning.
    pub redis_reconnect_ms: u64,
    /// RabbitMQ; its vhost is honoured (`AMQP_URL`).
    pub amqp_url: SecretString,
    /// Prepended to every exchange and queue name (`SECKILL_AMQP_PREFIX`).
    pub amqp_prefix: String,
    /// etcd endpoints, comma-separated in the environment (`ETCD_ENDPOINTS`).
    #[serde(deserialize_with = "at_least_one_endpoint")]
    pub etcd_endpoints: Vec<String>,
    /// Root of every etcd key this deployment reads or writes (`SECKILL_ETCD_PREFIX`).
    #[serde(deserialize_with = "without_trailing_slash")]
    pub etcd_prefix: String,
    /// Proxies whose `X-Forwarded-For` / `Forwarded` headers name the client
    /// (`SECKILL_TRUSTED_PROXIES`: addresses or CIDR networks, comma-separated; empty, the
    /// default, trusts nobody and counts every client by its TCP peer). Name the load
    /// balancers in front of the instances here, and nothing a client can reach directly.
    pub trusted_proxies: TrustedProxies,
    /// Shared secret that verifies buyer JWTs (`SECKILL_JWT_SECRET`).
    pub jwt_secret: SecretString,
    /// Shared secret of the payment center's callback signature (`SECKILL_PAY_SECRET`).
    pub pay_secret: SecretString,
    /// Folder with the console's `pkg/` bundle and public assets (`SECKILL_SITE_ROOT` or `LEPTOS_SITE_ROOT`).
    pub site_root: PathBuf,
    /// Lifetime of a console session, in seconds (`SECKILL_SESSION_TTL_S`).
    pub session_ttl_s: i64,
    /// Mark session cookies `Secure`; turn on behind HTTPS (`SECKILL_SECURE_COOKIES`).
    pub secure_cookies: bool,
    /// Login attempts allowed per (username, client address) in one window
    /// (`SECKILL_LOGIN_ATTEMPTS`): past it that pair waits, the same user from elsewhere does not.
    pub login_attempts_per_window: u32,
    /// Login attempts allowed per client address in one window, whatever the usernames
    /// (`SECKILL_LOGIN_ADDRESS_ATTEMPTS`): the bound on spraying many accounts from one place.
    pub login_attempts_per_address: u32,
    /// The console's public origin (`https://console.example.com`, `SECKILL_PUBLIC_ORIGIN`):
    /// a cookie-authenticated state-changing request must come from it. Unset: from the
    /// origin the request's `Host` header names; empty counts as unset.
    #[serde(deserialize_with = "an_origin")]
    pub public_origin: Option<String>,
    /// Length of that window, in seconds (`SECKILL_LOGIN_WINDOW_S`).
    pub login_window_s: u32,
    /// How long a readiness probe waits for each dependency, in milliseconds.
    pub probe_timeout_ms: u64,
    /// Thresholds of the buy funnel; etcd's switches and limits override them live.
    pub buy: BuySettings,
    /// The RabbitMQ order pipeline and its workers.
    pub pipeline: PipelineSettings,
    /// Reconciliation: the leader's automatic pass and what counts as stuck.
    pub reconcile: ReconcileSettings,
    /// The payment center the orders are paid through.
    pub payment: PaymentSettings,
    /// The etcd control plane: node identity, leases, the local snapshot.
    pub control: ControlSettings,
    /// The static sale pages: where they are written and how long they are cached.
    pub sale_page: SalePageSettings,
    /// Baselines: how often every instance reports its figures.
    pub baselines: BaselineSettings,
    /// How long the growing tables and the sale pages' assets are kept (`retention`).
    pub retention: RetentionSettings,
    /// The buyers' event streams: how many an instance holds, how long a stream may resume.
    pub events: EventsSettings,
    /// Run the background workers (consumers, relay, DLQ sink) in this process; `serve
    /// --no-workers` turns them off, `worker` runs them without the HTTP server.
    pub workers: bool,
}

/// The order pipeline's queues and workers.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PipelineSettings {
    /// Unacknowledged create-order messages one consumer holds at most (bounded prefetch).
    pub prefetch: u16,
    /// Messages completed in one DB transaction at most, and how long the first waits for company.
    pub batch_max: usize,
    pub batch_wait_ms: u64,
    /// How long a publish waits for the broker's confirm before it counts as failed.
    pub confirm_timeout_ms: u64,
    /// Deliveries of one message before the quorum queue dead-letters it.
    pub delivery_limit: u32,
    /// An outbox row still pending this long after it was written is resent by the relay.
    pub relay_grace_ms: u64,
    /// How often the relay looks, and how many attempts it makes before marking a row failed.
    pub relay_interval_ms: u64,
    pub relay_max_attempts: i32,
    /// How often the leader scans PostgreSQL for unpaid orders past their deadline whose
    /// timeout message never came (a lost message must not keep stock forever).
    pub timeout_scan_interval_ms: u64,
    /// Attempts at giving a cancelled order's stock back to Redis before counting a failure
    /// (`seckill_redis_giveback_failures_total`); the journal row then keeps
    /// `redis_restored_at` empty.
    pub redis_giveback_attempts: u32,
    /// Queues unused this long are deleted by the broker (`x-expires`). Unset in
    /// production; tests set it so their per-test queues go away.
    pub idle_queue_expiry_ms: Option<u64>,
}

impl Default for PipelineSettings {
    fn default() -> Self {
        Self {
            prefetch: 512,
            batch_max: 256,
            // Long enough that a sale's completions go to PostgreSQL in a few transactions a
            // second: each one holds the item row the pre-order batches update, across its
            // commit's WAL flush (at 5 ms the consumer took the row about as often as the
            // buy path and a successful buy cost a fifth more CPU); orders become UNPAID
            // at most this much later.
            batch_wait_ms: 50,
            confirm_timeout_ms: 5_000,
            delivery_limit: 5,
            relay_grace_ms: 5_000,
            relay_interval_ms: 1_000,
            relay_max_attempts: 10,
            timeout_scan_interval_ms: 5_000,
            redis_giveback_attempts: 3,
            idle_queue_expiry_ms: None,
        }
    }
}

/// Baselines (`baselines`).
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BaselineSettings {
    /// How often every instance writes its figures to PostgreSQL, and the leader looks for
    /// sales that ended; a run's peaks (memory, pool) are as fine as this.
    pub report_interval_ms: u64,
}

impl Default for BaselineSettings {
    fn default() -> Self {
        Self {
            report_interval_ms: 5_000,
        }
    }
}

/// Reconciliation of Redis with PostgreSQL.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReconcileSettings {
    /// How often the leader reconciles every live activity (0: never automatically).
    pub interval_ms: u64,
    /// A deduction marker this old without its order is a deduction whose pre-order will
    /// not come: well past the pre-order writer's longest batch, which keeps trying for 8 s
    /// while PostgreSQL is out of reach (each try waiting up to the pool's 5 s for a
    /// connection). A shorter grace voids batches still being written: nothing is sold
    /// twice, but their buyers are told to retry.
    pub marker_grace_ms: u64,
    /// A pre-order still `PRE_CREATED` this long after its event was last sent (or, never
    /// sent, after it was written) is stuck: its event is sent again.
    pub stuck_after_s: u64,
    /// A stuck pre-order that has waited this long since its event last reached RabbitMQ
    /// (or since it was written) is flagged for a person (finding, alert, readiness). It is
    /// never failed by a timer: its buyer may have been told he won.
    pub fail_stuck_after_s: u64,
    /// Findings of one class stored per item and run; the rest are counted in one finding.
    pub max_findings_per_class: usize,
}

impl Default for ReconcileSettings {
    fn default() -> Self {
        Self {
            interval_ms: 2_000,
            marker_grace_ms: 15_000,
            stuck_after_s: 60,
            fail_stuck_after_s: 900,
            max_findings_per_class: 50,
        }
    }
}

/// The built-in simulated payment center.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PaymentSettings {
    /// Where the center posts its callbacks; unset: this instance's own `/api/pay/notify`.
    pub notify_url: Option<String>,
    /// How long after a trade starts the center "receives the money" (or fails the trade).
    pub delay_ms: u64,
    /// How long after that the first callback goes out: a late callback, as when the
    /// money arrives just before the pay deadline and the notice is still on its way.
    pub notify_delay_ms: u64,
    /// Share of trades the center fails (0.0 to 1.0), for tests and drills.
    pub failure_rate: f64,
}

impl Default for PaymentSettings {
    fn default() -> Self {
        Self {
            notify_url: None,
            delay_ms: 200,
            notify_delay_ms: 0,
            failure_rate: 0.0,
        }
    }
}

/// This instance in the control plane.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ControlSettings {
    /// Name under `/seckill/nodes/`; unset: host name, process id and a random suffix (`SECKILL_NODE_ID`).
    pub node_id: Option<String>,
    /// TTL of the node and election leases, in seconds: a dead leader is replaced within it.
    pub lease_ttl_s: i64,
    /// How often the heartbeat rewrites the node key.
    pub heartbeat_ms: u64,
    /// Where the last switch snapshot is kept on disk, for a start-up with etcd down.
    pub snapshot_path: PathBuf,
}

impl Default for ControlSettings {
    fn default() -> Self {
        Self {
            node_id: None,
            lease_ttl_s: 5,
            heartbeat_ms: 1_000,
            snapshot_path: PathBuf::from(".local/control-snapshot.json"),
        }
    }
}

/// The leader's retention job: what it prunes, after how long, and how gently. Each
/// retention is counted from the row's own time (written, sent, ended), in days.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetentionSettings {
    /// How often the leader prunes, in milliseconds (0: never).
    pub interval_ms: u64,
    /// Rows one delete statement removes at most: each statement is short, so a prune never
    /// holds locks on a hot table for long.
    pub batch_rows: i64,
    /// `processed_events`: nothing reads them back once written (an order is completed only
    /// while `PRE_CREATED`); a week keeps them for anyone tracing a redelivery.
    pub processed_events_days: u32,
    /// `outbox` rows already `sent`: a week, the same trace of what was published.
    pub sent_outbox_days: u32,
    /// `order_events`, the history the console shows beside an order: three months, past
    /// the time a buyer disputes a charge; the order keeps its final status for ever.
    pub order_events_days: u32,
    /// `dead_letters`, requeued or not: a month. A requeue that late would complete an
    /// order of a sale long over; the dead-letter alert fires within minutes.
    pub dead_letters_days: u32,
    /// Ended `hotkey_periods`: a month of hot keys, enough to compare one sale with the
    /// next; the console shows the last hours.
    pub hotkey_periods_days: u32,
    /// Finished `reconciliation_runs` and their findings: a month, for the review after
    /// a sale; what they repaired stays in the audit for ever.
    pub reconciliation_runs_days: u32,
    /// A sale page's asset (script, stylesheet) no published page names any more is
    /// removed once its file is this old, in seconds: a buyer's tab or a CDN holding the
    /// page before its republish keeps loading it for a while.
    pub sale_assets_grace_s: u64,
}

impl Default for RetentionSettings {
    fn default() -> Self {
        Self {
            interval_ms: 60_000,
            batch_rows: 1_000,
            processed_events_days: 7,
            sent_outbox_days: 7,
            order_events_days: 90,
            dead_letters_days: 30,
            hotkey_periods_days: 30,
            reconciliation_runs_days: 30,
            sale_assets_grace_s: 86_400,
        }
    }
}

/// The static sale pages.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SalePageSettings {
    /// The site directory publishing writes each page and its hashed assets into, ready to
    /// be copied to a CDN (`SECKILL_SALE_DIR`).
    pub dir: PathBuf,
    /// `max-age` of a page, in seconds: short, so a republish reaches the buyers soon.
    pub page_max_age_s: u32,
    /// `max-age` of the button script, in seconds: the start must reach the buyers within it.
    pub button_max_age_s: u32,
    /// How often an instance compares its loaded pages with PostgreSQL's versions, in
    /// milliseconds, to pick up a publish made by another instance or the command line.
    pub refresh_ms: u64,
}

impl Default for SalePageSettings {
    fn default() -> Self {
        Self {
            dir: PathBuf::from(".local/sale"),
            page_max_age_s: 5,
            button_max_age_s: 1,
            refresh_ms: 1_000,
        }
    }
}

/// Where the buy path deducts stock (the default of the `switches/deduction` etcd key).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeductionMode {
    /// Lua pre-deduction in Redis; PostgreSQL records it in the pre-order batch.
    Redis,
    /// Batches allocated against PostgreSQL's row directly: slower, never oversells.
    Db,
}

/// What the buy path does after the pre-order is written (the default of `switches/async`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AsyncMode {
    /// Publish the create-order message to RabbitMQ (the outbox relay backs it up).
    Mq,
    /// Record the pre-order only; an ops replay feeds it to the pipeline later.
    Record,
}

/// Limits and cache lifetimes of the buy funnel, per instance unless said otherwise.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BuySettings {
    /// Buy requests in flight at once; the rest get 503 `OVERLOADED` at once (`SECKILL_BUY_MAX_IN_FLIGHT`).
    pub max_in_flight: usize,
    /// Local token bucket: buy requests per second this instance admits to Redis.
    pub local_rate_per_s: u32,
    /// Fixed-window length of the Redis rate limits, in seconds.
    pub rate_window_s: u32,
    /// Buy requests one buyer may send per item and window (`SECKILL_BUY_USER_RATE`).
    pub per_user_per_window: u32,
    /// Buy requests one client address may send per item and window.
    pub per_ip_per_window: u32,
    /// Buy requests an item accepts per window across all instances.
    pub per_item_per_window: u32,
    /// Lottery registrations one client address may make per item and window.
    pub registrations_per_ip_per_window: u32,
    /// Lottery registrations of one item that reach this instance together go to Redis in
    /// one call, of at most this many (1: each alone; at most 1,000).
    pub registration_call_max: usize,
    /// Ask for a human challenge before deducting (`SECKILL_CHALLENGE`, `on`/`off`).
    pub challenge_required: bool,
    /// Where stock is deducted (`SECKILL_DEDUCTION`, `redis`/`db`).
    pub deduction: DeductionMode,
    /// Whether buys publish to RabbitMQ or only record (`SECKILL_ASYNC`, `mq`/`record`).
    pub async_mode: AsyncMode,
    /// Largest buy body accepted, in bytes.
    pub max_body_bytes: usize,
    /// Activity items the Bloom filter is sized for, and its false-positive rate.
    pub bloom_capacity: u64,
    pub bloom_false_positive_rate: f64,
    /// How long this instance trusts its copy of an activity, in milliseconds.
    pub activity_cache_ms: u64,
    /// How long an id that passed the Bloom filter but does not exist is remembered.
    pub null_cache_ms: u64,
    /// How long a local sold-out flag answers without asking Redis (stock can come back
    /// when unpaid orders are cancelled).
    pub sold_out_flag_ms: u64,
    /// Pre-orders written in one PostgreSQL transaction at most, and how long the first of
    /// a batch waits for company, in microseconds, at most: only while some admitted
    /// request may still bring a pre-order.
    pub preorder_batch_max: usize,
    pub preorder_batch_wait_us: u64,
    /// Count the item, buyer and address of every request for hot-key detection
    /// (`SECKILL_HOTKEYS`, `on`/`off`); off, nothing is counted and nothing is detected,
    /// while keys published by hand still apply.
    pub hotkey_detection: bool,
}

impl Default for BuySettings {
    fn default() -> Self {
        Self {
            max_in_flight: 4096,
            local_rate_per_s: 100_000,
            rate_window_s: 1,
            per_user_per_window: 5,
            per_ip_per_window: 2_000,
            per_item_per_window: 200_000,
            // A household or an office behind one address registers a few buyers; a farm
            // of accounts behind one address is what this stops.
            registrations_per_ip_per_window: 20,
            registration_call_max: 256,
            challenge_required: false,
            deduction: DeductionMode::Redis,
            async_mode: AsyncMode::Mq,
            max_body_bytes: 4096,
            bloom_capacity: 1_000_000,
            bloom_false_positive_rate: 0.001,
            activity_cache_ms: 1_000,
            null_cache_ms: 5_000,
            sold_out_flag_ms: 1_000,
            preorder_batch_max: 256,
            // A batch costs the machine a fixed 2-3 ms of CPU over every process (statement,
            // commit and WAL flush, outbox row and its message, its completion), shared by its
            // buyers. At 5 ms a loaded sale's batches are twice as large as at 2 ms and a buy
            // costs a tenth to a sixth less CPU, at the same rate and latency under load (the
            // buyers wait for company instead of queueing for a core). At 10 ms the wait
            // outgrows that queue and the rate falls. A lone buyer does not wait: nobody
            // else is on the way.
            preorder_batch_wait_us: 5_000,
            hotkey_detection: true,
        }
    }
}

/// The development default for secrets: known to everyone who read the source, so
/// [`judge_secrets`] refuses it on any address but loopback.
const DEVELOPMENT_SECRET: &str = "seckill-development-secret-change-me";

/// What is wrong with a secret.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Weakness {
    /// Unset, so the development default from the source.
    Development,
    /// Set to nothing: anyone signs with the empty key.
    Empty,
}

/// One secret anyone could know, named by its environment variable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WeakSecret {
    pub variable: &'static str,
    pub weakness: Weakness,
}

impl std::fmt::Display for WeakSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.weakness {
            Weakness::Development => {
                write!(f, "{} is unset (the development default)", self.variable)
            }
            Weakness::Empty => write!(f, "{} is empty", self.variable),
        }
    }
}

/// Serving on an address other machines reach with a secret anyone could know: anyone could
/// mint buyer tokens or sign payment callbacks.
#[derive(Debug, thiserror::Error)]
#[error(
    "refusing to serve on {bind}: {}; set it to a long random value (or bind a loopback address)",
    weak.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
)]
pub struct SecretsRefused {
    pub bind: SocketAddr,
    pub weak: Vec<WeakSecret>,
}

/// Whether a process bound to `bind` may run with `secrets` (environment variable, value):
/// every weak one refuses a non-loopback address; on loopback (a development machine) the
/// weak ones are handed back for the caller to warn about.
pub fn judge_secrets(
    bind: SocketAddr,
    secrets: &[(&'static str, &SecretString)],
) -> Result<Vec<WeakSecret>, SecretsRefused> {
    let weak: Vec<WeakSecret> = secrets
        .iter()
        .filter_map(|&(variable, secret)| {
            let weakness = match secret.expose_secret() {
                "" => Weakness::Empty,
                DEVELOPMENT_SECRET => Weakness::Development,
                _ => return None,
            };
            Some(WeakSecret { variable, weakness })
        })
        .collect();
    if weak.is_empty() || bind.ip().is_loopback() {
        Ok(weak)
    } else {
        Err(SecretsRefused { bind, weak })
    }
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            bind: SocketAddr::from(([127, 0, 0, 1], 3000)),
            max_connections: 4096,
            connection_idle_s: 60,
            body_patience_ms: 2_000,
            database_url: "postgres://postgres@127.0.0.1:5432/seckill".into(),
            db_max_connections: 32,
            redis_url: "redis://127.0.0.1:6379/0".into(),
            redis_cluster_nodes: Vec::new(),
            redis_prefix: "seckill:".into(),
            redis_timeout_ms: 2_000,
            redis_reconnect_ms: 250,
            amqp_url: "amqp://guest:guest@127.0.0.1:5672/%2f".into(),
            amqp_prefix: "seckill".into(),
            etcd_endpoints: vec!["http://127.0.0.1:2379".into()],
            etcd_prefix: "/seckill".into(),
            trusted_proxies: TrustedProxies::default(),
            jwt_secret: DEVELOPMENT_SECRET.into(),
            pay_secret: DEVELOPMENT_SECRET.into(),
            site_root: PathBuf::from("target/site"),
            session_ttl_s: 12 * 3600,
            secure_cookies: false,
            login_attempts_per_window: 10,
            login_attempts_per_address: 100,
            public_origin: None,
            login_window_s: 300,
            probe_timeout_ms: 1500,
            buy: BuySettings::default(),
            pipeline: PipelineSettings::default(),
            reconcile: ReconcileSettings::default(),
            payment: PaymentSettings::default(),
            control: ControlSettings::default(),
            sale_page: SalePageSettings::default(),
            baselines: BaselineSettings::default(),
            retention: RetentionSettings::default(),
            events: EventsSettings::default(),
            workers: true,
        }
    }
}

/// A layer holds a value that does not fit its field; the message names the field and the
/// file or environment variable the value came from.
#[derive(Debug, thiserror::Error)]
#[error("invalid settings: {0}")]
pub struct SettingsError(Box<figment::Error>);

impl Settings {
    /// Defaults, then the file named by `SECKILL_CONFIG` (if set), then the environment.
    pub fn load() -> Result<Self, SettingsError> {
        let file = std::env::var_os("SECKILL_CONFIG").map(Toml::file_exact);
        Self::from_layers(file, |name| std::env::var(name).ok())
    }

    /// The layers merged by figment, later over earlier. The defaults are each struct's
    /// `Default` through `#[serde(default)]` rather than a serialized layer: that would need
    /// the secrets to be `Serialize`, and a serializable secret can end up in a log. `lookup`
    /// is injected so tests need not touch the process environment.
    fn from_layers(
        file: Option<Data<Toml>>,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, SettingsError> {
        let mut figment = Figment::new();
        if let Some(file) = file {
            figment = figment.merge(file);
        }
        for &(name, key, spelling) in VARIABLES {
            if let Some(text) = lookup(name) {
                figment = figment.merge(Variable::read(name, key, spelling, text));
            }
        }
        // Lossy: the environment's numbers and flags arrive as text ("42", "on").
        figment
            .extract_lossy()
            .map_err(|error| SettingsError(Box::new(error)))
    }

    /// [`judge_secrets`] for this process's bind address and secrets; the weak ones allowed
    /// on loopback are logged as a warning here, once per start.
    pub fn check_secrets(&self) -> Result<(), SecretsRefused> {
        let weak = judge_secrets(
            self.bind,
            &[
                ("SECKILL_JWT_SECRET", &self.jwt_secret),
                ("SECKILL_PAY_SECRET", &self.pay_secret),
            ],
        )?;
        for secret in weak {
            tracing::warn!(
                bind = %self.bind,
                "{secret}: anyone who has read the source can mint buyer tokens and sign payment \
                 callbacks; allowed on loopback only, refused on any other address"
            );
        }
        Ok(())
    }

    pub fn probe_timeout(&self) -> Duration {
        Duration::from_millis(self.probe_timeout_ms)
    }

    pub fn redis_timeout(&self) -> Duration {
        Duration::from_millis(self.redis_timeout_ms)
    }

    pub fn redis_reconnect_interval(&self) -> Duration {
        Duration::from_millis(self.redis_reconnect_ms)
    }
}

/// How the text of a variable becomes a value.
#[derive(Clone, Copy)]
enum Spelling {
    /// As it is: a URL, a secret, a prefix or a path may hold blanks, quotes or digits that
    /// mean themselves (figment's own `Env` would read `0123` as a number and unquote `"x"`).
    Verbatim,
    /// A number, a flag (`true`/`false`, `on`/`off`) or a mode: surrounding blanks are ignored.
    Trimmed,
    /// Comma-separated; blanks around the items and empty items are ignored.
    List,
}

/// Every environment variable, the settings key it sets and how it is spelled. Where two
/// set the same key, the later row wins.
#[rustfmt::skip]
const VARIABLES: &[(&str, &str, Spelling)] = &[
    ("SECKILL_BIND",               "bind",                      Spelling::Trimmed),
    ("SECKILL_MAX_CONNECTIONS",    "max_connections",           Spelling::Trimmed),
    ("SECKILL_CONNECTION_IDLE_S",  "connection_idle_s",         Spelling::Trimmed),
    ("SECKILL_BODY_PATIENCE_MS",   "body_patience_ms",          Spelling::Trimmed),
    ("DATABASE_URL",               "database_url",              Spelling::Verbatim),
    ("SECKILL_DB_MAX_CONNECTIONS", "db_max_connections",        Spelling::Trimmed),
    ("REDIS_URL",                  "redis_url",                 Spelling::Verbatim),
    ("REDIS_CLUSTER_NODES",        "redis_cluster_nodes",       Spelling::List),
    ("SECKILL_REDIS_PREFIX",       "redis_prefix",              Spelling::Verbatim),
    ("AMQP_URL",                   "amqp_url",                  Spelling::Verbatim),
    ("SECKILL_AMQP_PREFIX",        "amqp_prefix",               Spelling::Verbatim),
    ("ETCD_ENDPOINTS",             "etcd_endpoints",            Spelling::List),
    ("SECKILL_ETCD_PREFIX",        "etcd_prefix",               Spelling::Verbatim),
    ("SECKILL_TRUSTED_PROXIES",    "trusted_proxies",           Spelling::List),
    ("SECKILL_JWT_SECRET",         "jwt_secret",                Spelling::Verbatim),
    ("SECKILL_PAY_SECRET",         "pay_secret",                Spelling::Verbatim),
    ("LEPTOS_SITE_ROOT",           "site_root",                 Spelling::Verbatim),
    ("SECKILL_SITE_ROOT",          "site_root",                 Spelling::Verbatim),
    ("SECKILL_SESSION_TTL_S",      "session_ttl_s",             Spelling::Trimmed),
    ("SECKILL_SECURE_COOKIES",     "secure_cookies",            Spelling::Trimmed),
    ("SECKILL_LOGIN_ATTEMPTS",     "login_attempts_per_window", Spelling::Trimmed),
    ("SECKILL_LOGIN_WINDOW_S",     "login_window_s",            Spelling::Trimmed),
    ("SECKILL_LOGIN_ADDRESS_ATTEMPTS", "login_attempts_per_address", Spelling::Trimmed),
    ("SECKILL_PUBLIC_ORIGIN",      "public_origin",             Spelling::Trimmed),
    ("SECKILL_BUY_MAX_IN_FLIGHT",  "buy.max_in_flight",         Spelling::Trimmed),
    ("SECKILL_BUY_USER_RATE",      "buy.per_user_per_window",   Spelling::Trimmed),
    ("SECKILL_CHALLENGE",          "buy.challenge_required",    Spelling::Trimmed),
    ("SECKILL_DEDUCTION",          "buy.deduction",             Spelling::Trimmed),
    ("SECKILL_ASYNC",              "buy.async_mode",            Spelling::Trimmed),
    ("SECKILL_HOTKEYS",            "buy.hotkey_detection",      Spelling::Trimmed),
    ("SECKILL_PREORDER_BATCH_WAIT_US", "buy.preorder_batch_wait_us", Spelling::Trimmed),
    ("SECKILL_NODE_ID",            "control.node_id",           Spelling::Verbatim),
    ("SECKILL_SALE_DIR",           "sale_page.dir",             Spelling::Verbatim),
];

/// One set environment variable as a layer of its own, so that an error names the variable.
/// No `Debug`: the value may be a secret.
struct Variable {
    name: &'static str,
    key: &'static str,
    value: Value,
}

impl Variable {
    fn read(name: &'static str, key: &'static str, spelling: Spelling, text: String) -> Self {
        let value = match spelling {
            Spelling::Verbatim => Value::from(text),
            Spelling::Trimmed => Value::from(text.trim()),
            Spelling::List => Value::from(
                text.split(',')
                    .map(str::trim)
                    .filter(|item| !item.is_empty())
                    .collect::<Vec<_>>(),
            ),
        };
        Self { name, key, value }
    }
}

impl Provider for Variable {
    fn metadata(&self) -> Metadata {
        Metadata::named(format!("environment variable {}", self.name))
            .interpolater(|_: &Profile, path: &[&str]| path.join("."))
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        Serialized::default(self.key, &self.value).data()
    }
}

/// One spelling of the etcd root, whether or not it was written with a trailing slash.
fn without_trailing_slash<'de, D: Deserializer<'de>>(field: D) -> Result<String, D::Error> {
    let prefix = String::deserialize(field)?;
    Ok(prefix.trim_end_matches('/').to_owned())
}

/// An origin is a scheme and a host (and port), nothing more: anything else would never
/// equal a browser's `Origin` header, and every console change would be refused.
fn an_origin<'de, D: Deserializer<'de>>(field: D) -> Result<Option<String>, D::Error> {
    let Some(origin) = Option::<String>::deserialize(field)? else {
        return Ok(None);
    };
    let origin = origin.trim().trim_end_matches('/');
    if origin.is_empty() {
        return Ok(None);
    }
    let uri: http::Uri = origin.parse().map_err(D::Error::custom)?;
    match (uri.scheme_str(), uri.authority(), uri.path_and_query()) {
        (Some("http" | "https"), Some(_), None) => Ok(Some(origin.to_owned())),
        (Some("http" | "https"), Some(_), Some(path)) if path.as_str() == "/" => {
            Ok(Some(origin.to_owned()))
        }
        _ => Err(D::Error::invalid_value(
            serde::de::Unexpected::Str(origin),
            &"an origin such as https://console.example.com",
        )),
    }
}

/// The etcd client cannot start without an endpoint.
fn at_least_one_endpoint<'de, D: Deserializer<'de>>(field: D) -> Result<Vec<String>, D::Error> {
    let endpoints = Vec::<String>::deserialize(field)?;
    if endpoints.is_empty() {
        return Err(D::Error::invalid_length(0, &"at least one endpoint"));
    }
    Ok(endpoints)
}

#[cfg(test)]
mod tests;
