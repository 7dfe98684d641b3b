//! tracing set-up: an env filter (`RUST_LOG`, default `info`; request logs are at debug so
//! a storm cannot fill the disk, SEED 001 §6.1), human or JSON lines (`SECKILL_LOG_JSON=1`).

use tracing_subscriber::{fmt, prelude::*, EnvFilter};

pub fn init() {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn,lapin=warn,tower_http=warn"));
    let json = std::env::var("SECKILL_LOG_JSON").is_ok_and(|v| v == "1");
    let registry = tracing_subscriber::registry().with(filter);
    // A second init (tests spawn many apps in one process) keeps the first subscriber.
    let _ = if json {
        registry.with(fmt::layer().json()).try_init()
    } else {
        registry.with(fmt::layer()).try_init()
    };
}
