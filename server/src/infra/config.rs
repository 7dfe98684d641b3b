//! Typed settings: defaults that point at the services on loopback, overridden by
//! an optional TOML file (`SECKILL_CONFIG`), then by environment variables.
//!
//! Secrets are [`SecretString`]s so that `Debug` and logs never show them.

use secrecy::SecretString;
use serde::Deserialize;
use std::{net::SocketAddr, path::PathBuf, time::Duration};

/// Everything a `seckill` process needs to know about its environment.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    /// Where the HTTP server listens (`SECKILL_BIND`).
    pub bind: SocketAddr,
    /// PostgreSQL (`DATABASE_URL`).
    pub database_url: SecretString,
    /// Most connections one instance opens to PostgreSQL (`SECKILL_DB_MAX_CONNECTIONS`).
    pub db_max_connections: u32,
    /// Redis; its database index is honoured (`REDIS_URL`).
    pub redis_url: SecretString,
    /// Prepended to every Redis key, so deployments and tests can share one Redis (`SECKILL_REDIS_PREFIX`).
    pub redis_prefix: String,
    /// RabbitMQ; its vhost is honoured (`AMQP_URL`).
    pub amqp_url: SecretString,
    /// Prepended to every exchange and queue name (`SECKILL_AMQP_PREFIX`).
    pub amqp_prefix: String,
    /// etcd endpoints, comma-separated in the environment (`ETCD_ENDPOINTS`).
    pub etcd_endpoints: Vec<String>,
    /// Root of every etcd key this deployment reads or writes (`SECKILL_ETCD_PREFIX`).
    pub etcd_prefix: String,
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
    /// Failed logins allowed per username and per client address in one window (`SECKILL_LOGIN_ATTEMPTS`).
    pub login_attempts_per_window: u32,
    /// Length of that window, in seconds (`SECKILL_LOGIN_WINDOW_S`).
    pub login_window_s: u32,
    /// How long a readiness probe waits for each dependency, in milliseconds.
    pub probe_timeout_ms: u64,
    /// Thresholds of the buy funnel; etcd's switches and limits override them live.
    pub buy: BuySettings,
    /// The RabbitMQ order pipeline and its workers.
    pub pipeline: PipelineSettings,
    /// The payment center the orders are paid through.
    pub payment: PaymentSettings,
    /// The etcd control plane: node identity, leases, the local snapshot.
    pub control: ControlSettings,
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
    /// Attempts at giving a cancelled order's stock back to Redis; then the scanner retries.
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
            batch_wait_ms: 5,
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

/// Where the buy path deducts stock (`switches/deduction`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeductionMode {
    /// Lua pre-deduction in Redis; PostgreSQL records it in the pre-order batch.
    Redis,
    /// Batches allocated against PostgreSQL's row directly: slower, never oversells.
    Db,
}

/// What the buy path does after the pre-order is written (`switches/async`).
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
    /// a batch waits for company, in microseconds.
    pub preorder_batch_max: usize,
    pub preorder_batch_wait_us: u64,
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
            preorder_batch_wait_us: 2_000,
        }
    }
}

/// The development default for secrets; fine on a laptop, refused nowhere, logged nowhere.
const DEVELOPMENT_SECRET: &str = "seckill-development-secret-change-me";

impl Default for Settings {
    fn default() -> Self {
        Self {
            bind: SocketAddr::from(([127, 0, 0, 1], 3000)),
            database_url: "postgres://postgres@127.0.0.1:5432/seckill".into(),
            db_max_connections: 32,
            redis_url: "redis://127.0.0.1:6379/0".into(),
            redis_prefix: "seckill:".into(),
            amqp_url: "amqp://guest:guest@127.0.0.1:5672/%2f".into(),
            amqp_prefix: "seckill".into(),
            etcd_endpoints: vec!["http://127.0.0.1:2379".into()],
            etcd_prefix: "/seckill".into(),
            jwt_secret: DEVELOPMENT_SECRET.into(),
            pay_secret: DEVELOPMENT_SECRET.into(),
            site_root: PathBuf::from("target/site"),
            session_ttl_s: 12 * 3600,
            secure_cookies: false,
            login_attempts_per_window: 10,
            login_window_s: 300,
            probe_timeout_ms: 1500,
            buy: BuySettings::default(),
            pipeline: PipelineSettings::default(),
            payment: PaymentSettings::default(),
            control: ControlSettings::default(),
            workers: true,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error("cannot read settings file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("invalid settings file {path}: {source}")]
    Parse {
        path: PathBuf,
        source: toml::de::Error,
    },
    #[error("invalid value for {name}: {reason}")]
    Env { name: &'static str, reason: String },
}

impl Settings {
    /// Defaults, then the file named by `SECKILL_CONFIG` (if set), then the environment.
    pub fn load() -> Result<Self, SettingsError> {
        let mut settings = match std::env::var_os("SECKILL_CONFIG") {
            Some(path) => Self::from_file(PathBuf::from(path))?,
            None => Self::default(),
        };
        settings.apply_env(|name| std::env::var(name).ok())?;
        Ok(settings)
    }

    fn from_file(path: PathBuf) -> Result<Self, SettingsError> {
        let text = std::fs::read_to_string(&path).map_err(|source| SettingsError::Read {
            path: path.clone(),
            source,
        })?;
        toml::from_str(&text).map_err(|source| SettingsError::Parse { path, source })
    }

    /// Applies environment overrides; `lookup` is injected so tests need not touch the process env.
    fn apply_env(&mut self, lookup: impl Fn(&str) -> Option<String>) -> Result<(), SettingsError> {
        fn parsed<T: std::str::FromStr>(
            name: &'static str,
            value: String,
        ) -> Result<T, SettingsError>
        where
            T::Err: std::fmt::Display,
        {
            value
                .trim()
                .parse()
                .map_err(|e: T::Err| SettingsError::Env {
                    name,
                    reason: e.to_string(),
                })
        }
        if let Some(v) = lookup("SECKILL_BIND") {
            self.bind = parsed("SECKILL_BIND", v)?;
        }
        if let Some(v) = lookup("DATABASE_URL") {
            self.database_url = v.into();
        }
        if let Some(v) = lookup("SECKILL_DB_MAX_CONNECTIONS") {
            self.db_max_connections = parsed("SECKILL_DB_MAX_CONNECTIONS", v)?;
        }
        if let Some(v) = lookup("REDIS_URL") {
            self.redis_url = v.into();
        }
        if let Some(v) = lookup("SECKILL_REDIS_PREFIX") {
            self.redis_prefix = v;
        }
        if let Some(v) = lookup("AMQP_URL") {
            self.amqp_url = v.into();
        }
        if let Some(v) = lookup("SECKILL_AMQP_PREFIX") {
            self.amqp_prefix = v;
        }
        if let Some(v) = lookup("ETCD_ENDPOINTS") {
            self.etcd_endpoints = v
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect();
            if self.etcd_endpoints.is_empty() {
                return Err(SettingsError::Env {
                    name: "ETCD_ENDPOINTS",
                    reason: "no endpoint given".into(),
                });
            }
        }
        if let Some(v) = lookup("SECKILL_ETCD_PREFIX") {
            self.etcd_prefix = v.trim_end_matches('/').to_owned();
        }
        if let Some(v) = lookup("SECKILL_JWT_SECRET") {
            self.jwt_secret = v.into();
        }
        if let Some(v) = lookup("SECKILL_PAY_SECRET") {
            self.pay_secret = v.into();
        }
        if let Some(v) = lookup("SECKILL_SITE_ROOT").or_else(|| lookup("LEPTOS_SITE_ROOT")) {
            self.site_root = PathBuf::from(v);
        }
        if let Some(v) = lookup("SECKILL_SESSION_TTL_S") {
            self.session_ttl_s = parsed("SECKILL_SESSION_TTL_S", v)?;
        }
        if let Some(v) = lookup("SECKILL_SECURE_COOKIES") {
            self.secure_cookies = parsed("SECKILL_SECURE_COOKIES", v)?;
        }
        if let Some(v) = lookup("SECKILL_LOGIN_ATTEMPTS") {
            self.login_attempts_per_window = parsed("SECKILL_LOGIN_ATTEMPTS", v)?;
        }
        if let Some(v) = lookup("SECKILL_LOGIN_WINDOW_S") {
            self.login_window_s = parsed("SECKILL_LOGIN_WINDOW_S", v)?;
        }
        if let Some(v) = lookup("SECKILL_BUY_MAX_IN_FLIGHT") {
            self.buy.max_in_flight = parsed("SECKILL_BUY_MAX_IN_FLIGHT", v)?;
        }
        if let Some(v) = lookup("SECKILL_BUY_USER_RATE") {
            self.buy.per_user_per_window = parsed("SECKILL_BUY_USER_RATE", v)?;
        }
        if let Some(v) = lookup("SECKILL_DEDUCTION") {
            self.buy.deduction = match v.trim() {
                "redis" => DeductionMode::Redis,
                "db" => DeductionMode::Db,
                other => {
                    return Err(SettingsError::Env {
                        name: "SECKILL_DEDUCTION",
                        reason: format!("`{other}` is neither redis nor db"),
                    })
                }
            };
        }
        if let Some(v) = lookup("SECKILL_NODE_ID") {
            self.control.node_id = Some(v);
        }
        if let Some(v) = lookup("SECKILL_ASYNC") {
            self.buy.async_mode = match v.trim() {
                "mq" => AsyncMode::Mq,
                "record" => AsyncMode::Record,
                other => {
                    return Err(SettingsError::Env {
                        name: "SECKILL_ASYNC",
                        reason: format!("`{other}` is neither mq nor record"),
                    })
                }
            };
        }
        if let Some(v) = lookup("SECKILL_CHALLENGE") {
            self.buy.challenge_required = match v.trim() {
                "on" => true,
                "off" => false,
                other => {
                    return Err(SettingsError::Env {
                        name: "SECKILL_CHALLENGE",
                        reason: format!("`{other}` is neither on nor off"),
                    })
                }
            };
        }
        Ok(())
    }

    pub fn probe_timeout(&self) -> Duration {
        Duration::from_millis(self.probe_timeout_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use secrecy::ExposeSecret;
    use std::collections::HashMap;

    fn with_env(pairs: &[(&str, &str)]) -> Result<Settings, SettingsError> {
        let env: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let mut settings = Settings::default();
        settings.apply_env(|name| env.get(name).cloned())?;
        Ok(settings)
    }

    #[test]
    fn environment_overrides_defaults() {
        let settings = with_env(&[
            ("DATABASE_URL", "postgres://db/x"),
            ("ETCD_ENDPOINTS", "http://a:2379, http://b:2379"),
            ("SECKILL_ETCD_PREFIX", "/blue/"),
            ("SECKILL_BIND", "127.0.0.1:0"),
        ])
        .expect("valid env");
        assert_eq!(settings.database_url.expose_secret(), "postgres://db/x");
        assert_eq!(settings.etcd_endpoints, ["http://a:2379", "http://b:2379"]);
        assert_eq!(settings.etcd_prefix, "/blue");
        assert_eq!(settings.bind.port(), 0);
    }

    #[test]
    fn malformed_values_name_the_variable() {
        let error = with_env(&[("SECKILL_BIND", "nowhere")]).expect_err("bad bind");
        assert!(error.to_string().contains("SECKILL_BIND"));
        assert!(with_env(&[("ETCD_ENDPOINTS", " , ")]).is_err());
    }

    #[test]
    fn secrets_stay_out_of_debug_output() {
        let settings = with_env(&[("SECKILL_JWT_SECRET", "hunter2")]).expect("valid env");
        assert!(!format!("{settings:?}").contains("hunter2"));
    }

    #[test]
    fn a_settings_file_parses_partially() {
        let settings: Settings =
            toml::from_str("redis_prefix = \"t1:\"\nbind = \"127.0.0.1:4000\"").expect("toml");
        assert_eq!(settings.redis_prefix, "t1:");
        assert_eq!(settings.bind.port(), 4000);
        assert_eq!(settings.etcd_prefix, "/seckill");
    }
}
