//! The rules of a change that waits, as plain functions: when it may be scheduled, how long
//! its revert may wait, and what a dropped revert says.

use chrono::{DateTime, Duration, Utc};
use thiserror::Error;

/// The earliest a schedule may name: a little in the past is tolerated (the request took
/// time to arrive), and applies at once.
const PAST_TOLERANCE: Duration = Duration::seconds(5);
/// The latest a schedule may name.
const MAX_AHEAD: Duration = Duration::days(90);
/// The longest a revert may wait.
pub(crate) const MAX_REVERT_AFTER_S: u32 = 7 * 24 * 3600;

#[derive(Debug, Error, PartialEq, Eq)]
pub(crate) enum TimingError {
    #[error("`at` is in the past ({0}); a flip for now needs no `at`")]
    InThePast(DateTime<Utc>),
    #[error("`at` is more than 90 days ahead ({0})")]
    TooFarAhead(DateTime<Utc>),
    #[error("`revert_after_s` is between 1 and {MAX_REVERT_AFTER_S}")]
    RevertOutOfRange,
}

impl TimingError {
    pub(crate) fn code(&self) -> &'static str {
        match self {
            Self::InThePast(_) | Self::TooFarAhead(_) => "INVALID_SCHEDULE",
            Self::RevertOutOfRange => "INVALID_REVERT",
        }
    }
}

/// When a flip takes effect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Timing {
    /// Written now, nothing waits: the plain flip.
    Now,
    /// A change the leader applies at `at` (at once when absent), and reverts
    /// `revert_after_s` after, when asked.
    Waits {
        at: Option<DateTime<Utc>>,
        revert_after_s: Option<u32>,
    },
}

impl Timing {
    /// The timing a flip asks for, checked against `now`.
    pub(crate) fn of(
        at: Option<DateTime<Utc>>,
        revert_after_s: Option<u32>,
        now: DateTime<Utc>,
    ) -> Result<Self, TimingError> {
        if let Some(at) = at {
            if at < now - PAST_TOLERANCE {
                return Err(TimingError::InThePast(at));
            }
            if at > now + MAX_AHEAD {
                return Err(TimingError::TooFarAhead(at));
            }
        }
        if revert_after_s.is_some_and(|s| s == 0 || s > MAX_REVERT_AFTER_S) {
            return Err(TimingError::RevertOutOfRange);
        }
        Ok(match (at, revert_after_s) {
            (None, None) => Self::Now,
            (at, revert_after_s) => Self::Waits { at, revert_after_s },
        })
    }
}

/// Why a revert was dropped: the key no longer held the change's write.
pub(crate) fn changed_meanwhile(value: Option<&str>, revision: i64) -> String {
    match value {
        Some(value) => {
            format!("the key was changed meanwhile: `{value}` since revision {revision}")
        }
        None => format!("the key was deleted meanwhile (revision {revision})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000, 0).expect("a time")
    }

    #[test]
    fn a_flip_without_time_or_revert_applies_now() {
        assert_eq!(Timing::of(None, None, now()), Ok(Timing::Now));
    }

    #[test]
    fn a_time_or_a_revert_makes_a_change_that_waits() {
        let at = now() + Duration::minutes(30);
        assert_eq!(
            Timing::of(Some(at), Some(60), now()),
            Ok(Timing::Waits {
                at: Some(at),
                revert_after_s: Some(60)
            })
        );
        assert_eq!(
            Timing::of(None, Some(60), now()),
            Ok(Timing::Waits {
                at: None,
                revert_after_s: Some(60)
            })
        );
    }

    #[test]
    fn the_past_the_far_future_and_odd_reverts_are_refused() {
        let past = now() - Duration::seconds(6);
        assert_eq!(
            Timing::of(Some(past), None, now()),
            Err(TimingError::InThePast(past))
        );
        assert!(Timing::of(Some(now() - Duration::seconds(4)), None, now()).is_ok());
        let far = now() + Duration::days(91);
        assert_eq!(
            Timing::of(Some(far), None, now()).map_err(|e| e.code()),
            Err("INVALID_SCHEDULE")
        );
        for revert in [0, MAX_REVERT_AFTER_S + 1] {
            assert_eq!(
                Timing::of(None, Some(revert), now()).map_err(|e| e.code()),
                Err("INVALID_REVERT")
            );
        }
    }

    #[test]
    fn a_dropped_revert_says_what_the_key_holds_now() {
        assert_eq!(
            changed_meanwhile(Some("open"), 42),
            "the key was changed meanwhile: `open` since revision 42"
        );
        assert!(changed_meanwhile(None, 7).contains("deleted"));
    }
}
