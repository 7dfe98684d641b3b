//! Warnings and errors that cannot fill the disk. A failure that repeats on every request
//! (a store away, an open activity not pre-warmed) writes at most a few lines per kind
//! and interval; the rest go to debug, and the next line let through says how many were
//! held back since the last one. Background jobs throttle their own failures with the same
//! [`Budget`], one per job.
//!
//! On the request path, and for each batch, message or order a background job handles, log
//! through [`quiet!`]: `quiet!(warn, "buy.claim", error = %error, "request claim failed")`.
//! A job's failure as a whole (a store away for every pass) goes through its own
//! [`Budget`] instead, which also says when it recovered.

use std::{
    sync::Mutex,
    time::{Duration, Instant},
};

/// Lines of one kind let through per [`REQUEST_INTERVAL`] on the request path.
const REQUEST_LINES: u32 = 3;
const REQUEST_INTERVAL: Duration = Duration::from_secs(30);

/// At most `limit` lines per `interval`; counts the ones it holds back.
#[derive(Debug)]
pub struct Budget {
    limit: u32,
    interval: Duration,
    window_start: Option<Instant>,
    used: u32,
    suppressed: u64,
}

impl Budget {
    pub const fn new(limit: u32, interval: Duration) -> Self {
        Self {
            limit,
            interval,
            window_start: None,
            used: 0,
            suppressed: 0,
        }
    }

    /// `Some(lines held back since the last one let through)` when a line may be written
    /// at `now`, else `None` (and the line is counted as held back).
    pub fn admit(&mut self, now: Instant) -> Option<u64> {
        let window_over = self
            .window_start
            .is_none_or(|start| now.saturating_duration_since(start) >= self.interval);
        if window_over {
            self.window_start = Some(now);
            self.used = 0;
        }
        if self.used < self.limit {
            self.used += 1;
            Some(std::mem::take(&mut self.suppressed))
        } else {
            self.suppressed += 1;
            None
        }
    }

    /// Whether any line came since the budget was made or last reset.
    pub fn in_use(&self) -> bool {
        self.window_start.is_some()
    }

    /// Starts afresh (the failure is over): the next line goes through at once. Returns
    /// how many lines were held back since the last one let through.
    pub fn reset(&mut self) -> u64 {
        self.window_start = None;
        self.used = 0;
        std::mem::take(&mut self.suppressed)
    }
}

/// One [`Budget`] per kind, all with the same limit. Kinds are few static names, so a
/// short list under a mutex held for a few comparisons is all it takes.
pub struct QuietLog {
    limit: u32,
    interval: Duration,
    kinds: Mutex<Vec<(&'static str, Budget)>>,
}

impl QuietLog {
    pub const fn new(limit: u32, interval: Duration) -> Self {
        Self {
            limit,
            interval,
            kinds: Mutex::new(Vec::new()),
        }
    }

    /// [`Budget::admit`] for `kind`'s budget.
    pub fn admit(&self, kind: &'static str, now: Instant) -> Option<u64> {
        let mut kinds = self
            .kinds
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((_, budget)) = kinds.iter_mut().find(|(name, _)| *name == kind) {
            return budget.admit(now);
        }
        let mut budget = Budget::new(self.limit, self.interval);
        let admitted = budget.admit(now);
        kinds.push((kind, budget));
        admitted
    }
}

static REQUEST_PATH: QuietLog = QuietLog::new(REQUEST_LINES, REQUEST_INTERVAL);

/// Whether a request-path line of `kind` may be written now; `Some(held back since)` if so.
pub fn let_through(kind: &'static str) -> Option<u64> {
    REQUEST_PATH.admit(kind, Instant::now())
}

/// A `warn`/`error` line of a kind (a static name) that can repeat per request, batch or
/// message, rate-limited per kind:
/// a line let through carries `kind` and `suppressed` (lines held back since the last
/// one); a line held back goes to debug.
#[doc(hidden)]
#[macro_export]
macro_rules! __quiet {
    ($level:ident, $kind:literal, $($line:tt)+) => {
        match $crate::quiet_log::let_through($kind) {
            Some(suppressed) => ::tracing::$level!(kind = $kind, suppressed, $($line)+),
            None => ::tracing::debug!(kind = $kind, $($line)+),
        }
    };
}
// Exported at the crate's root, as every `#[macro_export]` macro is; named here as well.
pub use crate::__quiet as quiet;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_budget_lets_its_limit_through_per_interval_and_counts_the_rest() {
        let start = Instant::now();
        let mut budget = Budget::new(2, Duration::from_secs(10));
        assert_eq!(budget.admit(start), Some(0));
        assert_eq!(budget.admit(start + Duration::from_secs(1)), Some(0));
        for second in 2..7 {
            assert_eq!(budget.admit(start + Duration::from_secs(second)), None);
        }
        // A new interval: the first line says how many were held back, the next says none.
        assert_eq!(budget.admit(start + Duration::from_secs(10)), Some(5));
        assert_eq!(budget.admit(start + Duration::from_secs(11)), Some(0));
        assert_eq!(budget.admit(start + Duration::from_secs(12)), None);
        assert_eq!(budget.reset(), 1);
        assert_eq!(budget.admit(start + Duration::from_secs(13)), Some(0));
    }

    #[test]
    fn each_kind_has_a_budget_of_its_own() {
        let start = Instant::now();
        let log = QuietLog::new(1, Duration::from_secs(10));
        assert_eq!(log.admit("redis", start), Some(0));
        assert_eq!(log.admit("redis", start), None);
        assert_eq!(log.admit("postgres", start), Some(0));
        assert_eq!(log.admit("redis", start), None);
        assert_eq!(log.admit("redis", start + Duration::from_secs(10)), Some(2));
        assert_eq!(
            log.admit("postgres", start + Duration::from_secs(10)),
            Some(0)
        );
    }

    #[test]
    fn a_storm_writes_a_bounded_number_of_lines() {
        let start = Instant::now();
        let log = QuietLog::new(REQUEST_LINES, REQUEST_INTERVAL);
        // 10,000 failures over 100 s: four intervals, a few lines each.
        let written = (0..10_000u64)
            .filter(|i| {
                log.admit("storm", start + Duration::from_millis(i * 10))
                    .is_some()
            })
            .count();
        assert_eq!(written, 4 * REQUEST_LINES as usize);
    }
}
