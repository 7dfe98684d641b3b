//! The time that rules about time read: the wall clock, or a clock a test puts in its place
//! and moves by hand, so a test about a second or an hour never waits for it.

use std::sync::{Arc, PoisonError, RwLock};

/// Where a rule reads the time.
pub trait Clock: Send + Sync {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> i64;
}

/// The real time.
struct WallClock;

impl Clock for WallClock {
    fn now_ms(&self) -> i64 {
        chrono::Utc::now().timestamp_millis()
    }
}

/// The wall clock until [`SwappableClock::set`] puts another in its place.
pub struct SwappableClock(RwLock<Arc<dyn Clock>>);

impl Default for SwappableClock {
    fn default() -> Self {
        Self(RwLock::new(Arc::new(WallClock)))
    }
}

impl SwappableClock {
    pub fn set(&self, clock: Arc<dyn Clock>) {
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = clock;
    }

    pub fn now_ms(&self) -> i64 {
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .now_ms()
    }
}
