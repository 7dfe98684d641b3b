//! A token bucket whose rate is passed on every take, so a limit changed live applies to the
//! next request. It starts full (a burst of one second's worth), refills continuously.

use std::{sync::Mutex, time::Instant};

pub struct TokenBucket {
    state: Mutex<(f64, Instant)>,
}

impl Default for TokenBucket {
    fn default() -> Self {
        Self::new()
    }
}

impl TokenBucket {
    pub fn new() -> Self {
        Self {
            state: Mutex::new((f64::INFINITY, Instant::now())),
        }
    }

    pub fn try_take(&self, rate_per_s: u64) -> bool {
        let rate = rate_per_s.max(1) as f64;
        let Ok(mut state) = self.state.lock() else {
            return false;
        };
        let (tokens, last) = &mut *state;
        let now = Instant::now();
        *tokens = (*tokens + now.duration_since(*last).as_secs_f64() * rate).min(rate);
        *last = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_bucket_admits_its_rate_then_refuses() {
        let bucket = TokenBucket::new();
        assert!((0..3).all(|_| bucket.try_take(3)));
        assert!(!bucket.try_take(3));
    }
}
