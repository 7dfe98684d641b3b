//! The buy funnel's decisions as plain values: an activity's phase, what a
//! buy request may ask for, how a stock script's answer reads, and what each refusal
//! answers over HTTP.

use chrono::{DateTime, Utc};

/// Where an activity stands at a moment; `Closed` is an ops decision, not a time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    Upcoming,
    Open,
    Ended,
    Closed,
}

pub fn phase(
    starts_at: DateTime<Utc>,
    ends_at: DateTime<Utc>,
    now: DateTime<Utc>,
    entry_open: bool,
) -> Phase {
    if !entry_open {
        Phase::Closed
    } else if now < starts_at {
        Phase::Upcoming
    } else if now >= ends_at {
        Phase::Ended
    } else {
        Phase::Open
    }
}

/// Every way the funnel refuses a buy request, in funnel order. The stage counters use
/// [`Outcome::code`]. A granted request is no outcome of these: it answers its pre-order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    BadRequest,
    Unauthenticated,
    NotStarted,
    Ended,
    Closed,
    ChallengeFailed,
    ItemNotFound,
    SoldOut,
    AlreadyPurchased,
    LimitExceeded,
    RateLimited,
    Overloaded,
    Degraded,
    /// A lottery buy without a code of the buyer's own for the item (docs/lottery.md).
    NotQualified,
    /// A lottery buy whose code's lifetime is over.
    CodeExpired,
}

impl Outcome {
    /// Every outcome, in declaration order (`outcome as usize` is its index).
    pub const ALL: [Outcome; 15] = [
        Outcome::BadRequest,
        Outcome::Unauthenticated,
        Outcome::NotStarted,
        Outcome::Ended,
        Outcome::Closed,
        Outcome::ChallengeFailed,
        Outcome::ItemNotFound,
        Outcome::SoldOut,
        Outcome::AlreadyPurchased,
        Outcome::LimitExceeded,
        Outcome::RateLimited,
        Outcome::Overloaded,
        Outcome::Degraded,
        Outcome::NotQualified,
        Outcome::CodeExpired,
    ];

    pub fn code(self) -> &'static str {
        match self {
            Outcome::BadRequest => "BAD_REQUEST",
            Outcome::Unauthenticated => "UNAUTHENTICATED",
            Outcome::NotStarted => "ACTIVITY_NOT_STARTED",
            Outcome::Ended => "ACTIVITY_ENDED",
            Outcome::Closed => "ACTIVITY_CLOSED",
            Outcome::ChallengeFailed => "CHALLENGE_FAILED",
            Outcome::ItemNotFound => "ITEM_NOT_FOUND",
            Outcome::SoldOut => "SOLD_OUT",
            Outcome::AlreadyPurchased => "ALREADY_PURCHASED",
            Outcome::LimitExceeded => "LIMIT_EXCEEDED",
            Outcome::RateLimited => "RATE_LIMITED",
            Outcome::Overloaded => "OVERLOADED",
            Outcome::Degraded => "DEGRADED",
            Outcome::NotQualified => "NOT_QUALIFIED",
            Outcome::CodeExpired => "CODE_EXPIRED",
        }
    }

    pub fn status(self) -> u16 {
        match self {
            Outcome::BadRequest => 400,
            Outcome::Unauthenticated => 401,
            Outcome::NotStarted
            | Outcome::Ended
            | Outcome::Closed
            | Outcome::ChallengeFailed
            | Outcome::NotQualified
            | Outcome::CodeExpired => 403,
            Outcome::ItemNotFound => 404,
            Outcome::SoldOut | Outcome::AlreadyPurchased | Outcome::LimitExceeded => 409,
            Outcome::RateLimited => 429,
            Outcome::Overloaded | Outcome::Degraded => 503,
        }
    }

    pub fn message(self) -> &'static str {
        match self {
            Outcome::BadRequest => "the request is malformed",
            Outcome::Unauthenticated => "a valid buyer token is required",
            Outcome::NotStarted => "the activity has not started",
            Outcome::Ended => "the activity has ended",
            Outcome::Closed => "the activity is closed",
            Outcome::ChallengeFailed => "the challenge answer is wrong, too fast or expired",
            Outcome::ItemNotFound => "no such item in this activity",
            Outcome::SoldOut => "sold out",
            Outcome::AlreadyPurchased => "you already bought your limit of this item",
            Outcome::LimitExceeded => "this quantity exceeds your per-user limit",
            Outcome::RateLimited => "too many requests, retry later",
            Outcome::Overloaded => "the server is at capacity, retry later",
            Outcome::Degraded => "ordering is temporarily unavailable, retry later",
            Outcome::NotQualified => "this sale is by lottery: buy with the code you won",
            Outcome::CodeExpired => "your code's lifetime is over",
        }
    }

    pub fn from_phase(phase: Phase) -> Option<Outcome> {
        match phase {
            Phase::Open => None,
            Phase::Upcoming => Some(Outcome::NotStarted),
            Phase::Ended => Some(Outcome::Ended),
            Phase::Closed => Some(Outcome::Closed),
        }
    }
}

/// Why a deduction was refused, by the buy script (`lua/buy.lua`) or by the database
/// allocation of the pre-order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    SoldOut,
    AlreadyPurchased,
    LimitExceeded,
    NotPrewarmed,
    /// Some units remain, fewer than asked for: the buyer may still get a smaller quantity.
    NotEnough,
    /// A chosen seat does not exist.
    UnknownSeat,
    /// A reconciliation run holds the item for a moment.
    Fenced,
    /// No live code of this buyer's for the item (a lottery).
    NotQualified,
    /// His code's lifetime is over.
    CodeExpired,
}

impl Refusal {
    /// What the buyer is told. For a seats request, sold out means a chosen seat is taken.
    pub fn answer(self, seats: bool) -> (Outcome, &'static str) {
        match self {
            Refusal::SoldOut if seats => (Outcome::SoldOut, "a chosen seat is already taken"),
            Refusal::SoldOut => (Outcome::SoldOut, Outcome::SoldOut.message()),
            Refusal::NotEnough => (Outcome::SoldOut, "fewer units are left than asked for"),
            Refusal::UnknownSeat => (Outcome::ItemNotFound, "a chosen seat does not exist"),
            Refusal::AlreadyPurchased => (
                Outcome::AlreadyPurchased,
                Outcome::AlreadyPurchased.message(),
            ),
            Refusal::LimitExceeded => (Outcome::LimitExceeded, Outcome::LimitExceeded.message()),
            Refusal::NotPrewarmed => (Outcome::Degraded, Outcome::Degraded.message()),
            Refusal::Fenced => (
                Outcome::Degraded,
                "this item's stock is being reconciled; retry in a moment",
            ),
            Refusal::NotQualified => (Outcome::NotQualified, Outcome::NotQualified.message()),
            Refusal::CodeExpired => (Outcome::CodeExpired, Outcome::CodeExpired.message()),
        }
    }
}

/// What the buy script (`lua/buy.lua`) answered, read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScriptAnswer {
    /// The request id was seen before: its stored answer, or the first request's in-flight
    /// marker. Nothing changed.
    Seen(Vec<u8>),
    /// A rate window is full; nothing counted.
    WindowFull,
    /// Counted in the windows; nothing claimed yet (the challenge comes next).
    Admitted,
    /// Claimed without a deduction: PostgreSQL deducts.
    Claimed,
    Deducted {
        stock_left: i64,
    },
    Refused(Refusal),
    /// Refused a buyer who holds units of the item already. With no answer stored under
    /// this request id, he may be replaying the request that won them (its answer never
    /// reached Redis): only PostgreSQL can tell.
    RefusedHolder(Refusal),
}

/// A code the buy script does not document: the script and this server are out of step,
/// and whether the script deducted anything is unknown.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the buy script answered {0}, a code it does not document")]
pub struct UnknownAnswer(pub i64);

impl ScriptAnswer {
    /// Reads the script's `{code, value}` pair.
    pub fn read((code, value): (i64, Vec<u8>)) -> Result<ScriptAnswer, UnknownAnswer> {
        let refusal = match code {
            1 => return Ok(ScriptAnswer::Seen(value)),
            2 => return Ok(ScriptAnswer::WindowFull),
            3 => return Ok(ScriptAnswer::Admitted),
            4 => return Ok(ScriptAnswer::Claimed),
            0 => {
                return std::str::from_utf8(&value)
                    .ok()
                    .and_then(|left| left.parse::<i64>().ok())
                    .filter(|left| *left >= 0)
                    .map(|stock_left| ScriptAnswer::Deducted { stock_left })
                    .ok_or(UnknownAnswer(code))
            }
            -1 => return Self::refused_buyer(code, Refusal::SoldOut, &value),
            -2 => return Self::refused_buyer(code, Refusal::AlreadyPurchased, &value),
            -3 => return Self::refused_buyer(code, Refusal::LimitExceeded, &value),
            -4 => Refusal::NotPrewarmed,
            -5 => Refusal::NotEnough,
            -6 => Refusal::UnknownSeat,
            -8 => Refusal::Fenced,
            -9 => Refusal::NotQualified,
            -10 => Refusal::CodeExpired,
            unknown => return Err(UnknownAnswer(unknown)),
        };
        Ok(ScriptAnswer::Refused(refusal))
    }

    /// A refusal that carries the units the buyer holds of the item.
    fn refused_buyer(code: i64, refusal: Refusal, held: &[u8]) -> Result<Self, UnknownAnswer> {
        match std::str::from_utf8(held).map(str::parse::<i64>) {
            Ok(Ok(0)) => Ok(ScriptAnswer::Refused(refusal)),
            Ok(Ok(held)) if held > 0 => Ok(ScriptAnswer::RefusedHolder(refusal)),
            _ => Err(UnknownAnswer(code)),
        }
    }
}

/// A request id as clients send it: 1–64 letters, digits, `-` or `_`.
pub fn valid_request_id(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// The quantity a buyer may ask for in one request: 1 up to the item's per-user limit.
pub fn valid_quantity(quantity: i64, per_user_limit: i64) -> bool {
    (1..=per_user_limit).contains(&quantity)
}

/// Whether the buyer API shows and sells an activity to a caller. A rehearsal's shadow
/// copy (`rehearsal_of` set) only to that rehearsal's synthetic buyers, whose tokens name it
/// (`caller_rehearsal`); every other activity only to callers that are not synthetic, so a
/// rehearsal's load can never buy a real sale's stock. Anything else is answered as absent.
pub fn shown_to(
    activity_id: i64,
    rehearsal_of: Option<i64>,
    caller_rehearsal: Option<i64>,
) -> bool {
    match (rehearsal_of, caller_rehearsal) {
        (None, None) => true,
        (Some(_), Some(shadow)) => shadow == activity_id,
        (Some(_), None) | (None, Some(_)) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Duration;

    #[test]
    fn a_shadow_activity_is_shown_to_its_own_synthetic_buyers_only() {
        // A real activity: to buyers and anonymous readers, not to synthetic buyers.
        assert!(shown_to(7, None, None));
        assert!(!shown_to(7, None, Some(9)));
        // Shadow 9 of activity 7: to tokens naming 9, to nobody else.
        assert!(shown_to(9, Some(7), Some(9)));
        assert!(!shown_to(9, Some(7), None));
        assert!(!shown_to(9, Some(7), Some(10)));
    }

    #[test]
    fn phases_follow_the_clock_unless_the_entry_is_closed() {
        let start = Utc::now();
        let end = start + Duration::minutes(10);
        assert_eq!(
            phase(start, end, start - Duration::seconds(1), true),
            Phase::Upcoming
        );
        assert_eq!(phase(start, end, start, true), Phase::Open);
        assert_eq!(phase(start, end, end, true), Phase::Ended);
        assert_eq!(phase(start, end, start, false), Phase::Closed);
    }

    #[test]
    fn script_answers_read_as_replays_windows_claims_deductions_or_refusals() {
        let read = |code: i64, value: &str| ScriptAnswer::read((code, value.as_bytes().to_vec()));
        assert_eq!(read(0, "0"), Ok(ScriptAnswer::Deducted { stock_left: 0 }));
        assert_eq!(read(0, "7"), Ok(ScriptAnswer::Deducted { stock_left: 7 }));
        assert_eq!(
            read(1, "200 0\n{}"),
            Ok(ScriptAnswer::Seen(b"200 0\n{}".to_vec()))
        );
        assert_eq!(read(2, "3"), Ok(ScriptAnswer::WindowFull));
        assert_eq!(read(3, ""), Ok(ScriptAnswer::Admitted));
        assert_eq!(read(4, ""), Ok(ScriptAnswer::Claimed));
        for (code, refusal) in [
            (-4, Refusal::NotPrewarmed),
            (-5, Refusal::NotEnough),
            (-6, Refusal::UnknownSeat),
            (-8, Refusal::Fenced),
        ] {
            assert_eq!(read(code, ""), Ok(ScriptAnswer::Refused(refusal)), "{code}");
        }
        for (code, refusal) in [
            (-1, Refusal::SoldOut),
            (-2, Refusal::AlreadyPurchased),
            (-3, Refusal::LimitExceeded),
        ] {
            assert_eq!(
                read(code, "0"),
                Ok(ScriptAnswer::Refused(refusal)),
                "{code}"
            );
            assert_eq!(
                read(code, "2"),
                Ok(ScriptAnswer::RefusedHolder(refusal)),
                "{code}: the buyer holds 2 units"
            );
        }
    }

    #[test]
    fn undocumented_script_codes_are_errors_not_refusals() {
        for code in [-7, -100, 5, i64::MIN] {
            assert_eq!(
                ScriptAnswer::read((code, Vec::new())),
                Err(UnknownAnswer(code))
            );
        }
        assert_eq!(
            ScriptAnswer::read((0, b"-1".to_vec())),
            Err(UnknownAnswer(0)),
            "a deduction cannot leave less than nothing"
        );
        for held in ["", "-1", "x"] {
            assert_eq!(
                ScriptAnswer::read((-1, held.as_bytes().to_vec())),
                Err(UnknownAnswer(-1)),
                "a refusal says what the buyer holds: {held:?}"
            );
        }
    }

    #[test]
    fn refusals_answer_with_their_codes() {
        let answers = [
            (Refusal::SoldOut, false, Outcome::SoldOut, "sold out"),
            (
                Refusal::SoldOut,
                true,
                Outcome::SoldOut,
                "a chosen seat is already taken",
            ),
            (
                Refusal::NotEnough,
                false,
                Outcome::SoldOut,
                "fewer units are left than asked for",
            ),
            (
                Refusal::UnknownSeat,
                true,
                Outcome::ItemNotFound,
                "a chosen seat does not exist",
            ),
            (
                Refusal::AlreadyPurchased,
                false,
                Outcome::AlreadyPurchased,
                Outcome::AlreadyPurchased.message(),
            ),
            (
                Refusal::LimitExceeded,
                true,
                Outcome::LimitExceeded,
                Outcome::LimitExceeded.message(),
            ),
            (
                Refusal::NotPrewarmed,
                false,
                Outcome::Degraded,
                Outcome::Degraded.message(),
            ),
        ];
        for (refusal, seats, outcome, message) in answers {
            assert_eq!(refusal.answer(seats), (outcome, message), "{refusal:?}");
        }
        assert_eq!(Outcome::Degraded.status(), 503);
    }

    #[test]
    fn request_ids_are_short_and_plain() {
        assert!(valid_request_id("3f2c-11_ab"));
        assert!(!valid_request_id(""));
        assert!(!valid_request_id(&"a".repeat(65)));
        assert!(!valid_request_id("a b"));
        assert!(!valid_request_id("a:b"));
    }

    #[test]
    fn quantities_stay_within_the_limit() {
        assert!(valid_quantity(1, 2));
        assert!(valid_quantity(2, 2));
        for bad in [0, -1, 3, i64::MAX, i64::MIN] {
            assert!(!valid_quantity(bad, 2), "{bad}");
        }
    }

    #[test]
    fn refusals_carry_the_spec_codes() {
        assert_eq!(
            (Outcome::SoldOut.status(), Outcome::SoldOut.code()),
            (409, "SOLD_OUT")
        );
        assert_eq!(Outcome::RateLimited.status(), 429);
        assert_eq!(
            Outcome::from_phase(Phase::Upcoming),
            Some(Outcome::NotStarted)
        );
        assert_eq!(Outcome::from_phase(Phase::Open), None);
    }
}
