//! Fault points: named places where a test makes the process die as a crash would (no
//! task finishing, nothing released, no graceful shutdown), to prove that what the next
//! instance finds there is recovered. The point is named by `SECKILL_FAULT_POINT`; unset,
//! as in every deployment, a point costs one comparison with nothing.

use std::sync::OnceLock;

/// The environment variable that names the point at which the process aborts.
pub const VARIABLE: &str = "SECKILL_FAULT_POINT";

/// Aborts the process here if the environment names `name`.
pub fn point(name: &str) {
    static CHOSEN: OnceLock<Option<String>> = OnceLock::new();
    let chosen = CHOSEN.get_or_init(|| std::env::var(VARIABLE).ok().filter(|v| !v.is_empty()));
    if chosen.as_deref() == Some(name) {
        eprintln!("fault point {name} reached: aborting");
        std::process::abort();
    }
}
