//! The human challenge in front of the deduction: an arithmetic question
//! bound to the buyer, answered once, and not sooner than a second after it was asked —
//! a person needs that long, a script does not.
//!
//! A buyer has one open challenge at most, kept under his own key: asking again replaces
//! it, so however often a buyer asks, Redis holds one key for him.

use rand::Rng;
use std::{sync::Arc, time::Duration};

use crate::identity::secret_token;
pub use base::clock::Clock;
use base::{clock::SwappableClock, redis::RedisStore};

/// How long a challenge may stay unanswered.
const CHALLENGE_TTL_S: u64 = 300;
/// Answers faster than this are taken for a machine's.
pub const MIN_THINKING_TIME: Duration = Duration::from_secs(1);

pub struct Challenges {
    redis: RedisStore,
    /// Replaceable because the thinking time is what the rule is about: a test moves a
    /// clock of its own forward instead of waiting.
    clock: SwappableClock,
}

#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct Challenge {
    pub challenge_id: String,
    pub question: String,
}

/// What is kept under the buyer's key while his challenge is open:
/// `"<challenge id> <answer> <issued at, ms>"`.
fn record(challenge_id: &str, answer: i64, issued_ms: i64) -> String {
    format!("{challenge_id} {answer} {issued_ms}")
}

/// Whether `stored` accepts this answer to challenge `challenge_id` at `now_ms`.
fn accepts(stored: &str, challenge_id: &str, answer: i64, now_ms: i64) -> bool {
    let mut fields = stored.split(' ');
    let (Some(id), Some(Ok(expected)), Some(Ok(issued_ms))) = (
        fields.next(),
        fields.next().map(str::parse::<i64>),
        fields.next().map(str::parse::<i64>),
    ) else {
        return false;
    };
    let thought_ms = i64::try_from(MIN_THINKING_TIME.as_millis()).unwrap_or(i64::MAX);
    id == challenge_id && expected == answer && now_ms - issued_ms >= thought_ms
}

impl Challenges {
    pub fn new(redis: RedisStore) -> Self {
        Self {
            redis,
            clock: SwappableClock::default(),
        }
    }

    /// Reads the time from `clock` from now on, for issuing and checking alike.
    pub fn use_clock(&self, clock: Arc<dyn Clock>) {
        self.clock.set(clock);
    }

    fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    pub async fn issue(&self, user_id: i64) -> redis::RedisResult<Challenge> {
        let (a, b) = {
            let mut rng = rand::thread_rng();
            (rng.gen_range(10..100), rng.gen_range(1..10))
        };
        let challenge_id = secret_token::generate()[..24].to_owned();
        let value = record(&challenge_id, a * b, self.now_ms());
        self.redis
            .store_response(
                &self.redis.challenge_key(user_id),
                value.as_bytes(),
                CHALLENGE_TTL_S,
            )
            .await?;
        Ok(Challenge {
            challenge_id,
            question: format!("What is {a} × {b}?"),
        })
    }

    /// Consumes the buyer's open challenge (one attempt) and says whether this answer to
    /// `challenge_id` stands.
    pub async fn check(
        &self,
        challenge_id: &str,
        user_id: i64,
        answer: i64,
    ) -> redis::RedisResult<bool> {
        if !crate::buy::rules::valid_request_id(challenge_id) {
            return Ok(false);
        }
        let stored = self
            .redis
            .take_bytes(&self.redis.challenge_key(user_id))
            .await?;
        Ok(stored
            .and_then(|bytes| String::from_utf8(bytes).ok())
            .is_some_and(|stored| accepts(&stored, challenge_id, answer, self.now_ms())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_open_challenge_with_the_right_answer_after_a_second_passes() {
        let stored = record("c7", 42, 1_000);
        assert!(accepts(&stored, "c7", 42, 2_000));
        assert!(!accepts(&stored, "c7", 42, 1_999), "too fast");
        assert!(
            !accepts(&stored, "c8", 42, 5_000),
            "a challenge asked before this one"
        );
        assert!(!accepts(&stored, "c7", 41, 5_000), "wrong answer");
        assert!(!accepts("garbage", "c7", 42, 5_000));
    }
}
