//! tracing set-up: an env filter (`RUST_LOG`, default `info`; request logs are at debug and
//! request-path warnings rate-limited by `quiet_log`, so a storm cannot fill the disk), human
//! or JSON lines (`SECKILL_LOG_JSON=1`). Every line written while serving a request carries
//! the request's span, with its request id.

use std::io::IsTerminal;
use tracing_subscriber::{fmt, prelude::*, EnvFilter};

pub fn init() {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn,lapin=warn,tower_http=warn"));
    let json = std::env::var("SECKILL_LOG_JSON").is_ok_and(|v| v == "1");
    let registry = tracing_subscriber::registry().with(filter);
    // Colours only for a terminal: a log file or collector gets plain text.
    let ansi = std::io::stdout().is_terminal();
    // A second init (tests spawn many apps in one process) keeps the first subscriber.
    let _ = if json {
        registry.with(fmt::layer().json()).try_init()
    } else {
        registry.with(fmt::layer().with_ansi(ansi)).try_init()
    };
}
