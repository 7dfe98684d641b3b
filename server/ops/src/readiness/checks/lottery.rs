//! The lottery's readiness verdict: buyers can register when registration is open, and a
//! lottery activity's draw can be trusted and will run.

use chrono::{DateTime, Utc};
use contract::{ReadinessCheck, ReadinessCheckName as Name, RegistrationPhase, RegistrationReach};

use super::verdict;

/// How long after registration closes a draw may still be under way before readiness calls
/// it overdue: the leader looks four times a second, and a million registrants take seconds.
pub(crate) const DRAW_GRACE: chrono::Duration = chrono::Duration::seconds(30);

/// What readiness reads of a lottery activity's draw.
pub(crate) struct LotteryState<'a> {
    pub(crate) opens_at: DateTime<Utc>,
    pub(crate) closes_at: DateTime<Utc>,
    /// Whether the buyer API finds the activity and its items (their keys in the Bloom
    /// filter); `None`: the filter could not be read.
    pub(crate) reachable: Option<bool>,
    /// Hex SHA-256 of the draw's seed.
    pub(crate) commitment: &'a str,
    pub(crate) items: usize,
    /// Items whose draw is not made yet.
    pub(crate) undrawn: usize,
    /// Registrations Redis holds for the undrawn items, where it could be read.
    pub(crate) registrations: Option<i64>,
}

/// A lottery activity (`None`: a first-come one, nothing to draw) is ready when its draw's
/// commitment is fixed (a seed chosen later could be picked after seeing the registrants),
/// buyers can register while registration is open or about to open (the buyer API finds the
/// activity; the leader makes it findable before the window opens, long before a pre-warm),
/// a leader is elected to draw when registration closes (the draw runs only on the leader),
/// and no draw is overdue by more than [`DRAW_GRACE`].
pub(crate) fn lottery(
    draw: Option<&LotteryState>,
    leader: Option<&str>,
    now: DateTime<Utc>,
) -> ReadinessCheck {
    let Some(draw) = draw else {
        return verdict(Name::Lottery, true, "a first-come activity: no draw".into());
    };
    let due = draw.closes_at.to_rfc3339();
    let fixed = draw.commitment.len() == 64
        && draw
            .commitment
            .bytes()
            .all(|byte| byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte));
    if !fixed {
        return verdict(
            Name::Lottery,
            false,
            format!(
                "the draw's commitment is not a SHA-256 (`{}`): buyers cannot check the draw; create the activity again as a lottery, so a seed is fixed before anyone registers",
                draw.commitment
            ),
        );
    }
    let short = &draw.commitment[..12];
    if draw.undrawn == 0 {
        return verdict(
            Name::Lottery,
            true,
            format!("all {} item(s) drawn (commitment {short}…)", draw.items),
        );
    }
    let reach = RegistrationReach {
        opens_at: draw.opens_at,
        closes_at: draw.closes_at,
        at_ms: now.timestamp_millis(),
        reachable: draw.reachable.unwrap_or(false),
    };
    if reach.blocked() {
        return unreachable(draw, &reach, leader);
    }
    let registered = draw
        .registrations
        .map_or_else(|| "unknown".to_owned(), |count| count.to_string());
    match leader {
        None => verdict(
            Name::Lottery,
            false,
            format!(
                "no leader is elected to draw {} item(s) due at {due}: the draw runs only on the leader; is any server connected to etcd?",
                draw.undrawn
            ),
        ),
        Some(node) if now >= draw.closes_at + DRAW_GRACE => verdict(
            Name::Lottery,
            false,
            format!(
                "the draw was due at {due} and {} of {} item(s) are not drawn ({registered} registration(s) waiting): look at the lottery job's log on {node}, the leader",
                draw.undrawn, draw.items
            ),
        ),
        Some(node) if now >= draw.closes_at => verdict(
            Name::Lottery,
            true,
            format!("registration closed at {due}; {node}, the leader, is drawing"),
        ),
        Some(node) if reach.phase() == RegistrationPhase::Later => verdict(
            Name::Lottery,
            true,
            format!(
                "commitment {short}… fixed; registration opens at {}: {node}, the leader, makes it reachable on the buyer API {} min before, and draws at {due}",
                draw.opens_at.to_rfc3339(),
                RegistrationReach::PREPARED_AHEAD_MS / 60_000
            ),
        ),
        Some(node) => verdict(
            Name::Lottery,
            true,
            format!(
                "commitment {short}… fixed; buyers can register until {due} ({registered} registration(s) so far); {node}, the leader, draws then"
            ),
        ),
    }
}

/// Registration open or about to open, and buyers could not register: what is wrong, in
/// words ops can act on.
fn unreachable(
    draw: &LotteryState,
    reach: &RegistrationReach,
    leader: Option<&str>,
) -> ReadinessCheck {
    let opens = draw.opens_at.to_rfc3339();
    let when = if reach.phase() == RegistrationPhase::Open {
        format!("registration has been open since {opens}")
    } else {
        format!("registration opens at {opens}")
    };
    let why = match (draw.reachable, leader) {
        (None, _) => "whether buyers can register is unknown: the Bloom filter the buyer API checks could not be read".to_owned(),
        (Some(_), None) => "buyers cannot register (they are answered 404: the buyer API does not know the activity) and no leader is elected to make it known; is any server connected to etcd?".to_owned(),
        (Some(_), Some(node)) => format!(
            "buyers cannot register (they are answered 404: the buyer API does not know the activity), though {node}, the leader, makes it known {} min before registration opens: look at its lottery job's log",
            RegistrationReach::PREPARED_AHEAD_MS / 60_000
        ),
    };
    verdict(
        Name::Lottery,
        false,
        format!("{when} and {why}; a pre-warm of the activity lets buyers in at once"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn a_lottery_needs_its_commitment_a_leader_and_no_overdue_draw() {
        let closes = Utc::now();
        let commitment = "ab".repeat(32);
        let draw = |undrawn| LotteryState {
            opens_at: closes - chrono::Duration::hours(2),
            closes_at: closes,
            reachable: Some(true),
            commitment: &commitment,
            items: 2,
            undrawn,
            registrations: Some(7),
        };
        let before = closes - chrono::Duration::minutes(5);
        assert!(lottery(None, None, before).ok, "a first-come activity");
        let open = lottery(Some(&draw(2)), Some("n1"), before);
        assert!(
            open.ok && open.detail.contains("7 registration(s)"),
            "{open:?}"
        );
        assert!(!lottery(Some(&draw(2)), None, before).ok, "nobody to draw");
        assert!(lottery(Some(&draw(2)), Some("n1"), closes).ok, "drawing");
        let late = lottery(Some(&draw(1)), Some("n1"), closes + DRAW_GRACE);
        assert!(!late.ok && late.detail.contains("1 of 2"), "{late:?}");
        assert!(
            lottery(Some(&draw(0)), None, closes + DRAW_GRACE).ok,
            "all drawn"
        );
        let bad = LotteryState {
            commitment: "not-hex",
            ..draw(2)
        };
        assert!(!lottery(Some(&bad), Some("n1"), before).ok);
    }

    #[test]
    fn registration_open_or_about_to_open_that_buyers_cannot_reach_is_named() {
        let opens = Utc::now();
        let commitment = "ab".repeat(32);
        let draw = |reachable| LotteryState {
            opens_at: opens,
            closes_at: opens + chrono::Duration::hours(1),
            reachable,
            commitment: &commitment,
            items: 1,
            undrawn: 1,
            registrations: Some(0),
        };
        let minutes = |m| opens + chrono::Duration::minutes(m);
        let later = lottery(Some(&draw(Some(false))), Some("n1"), minutes(-11));
        assert!(
            later.ok && later.detail.contains("makes it reachable"),
            "{later:?}"
        );
        let soon = lottery(Some(&draw(Some(false))), Some("n1"), minutes(-10));
        assert!(
            !soon.ok
                && soon.detail.contains("registration opens at")
                && soon.detail.contains("cannot register")
                && soon.detail.contains("n1, the leader"),
            "{soon:?}"
        );
        let open = lottery(Some(&draw(Some(false))), None, minutes(5));
        assert!(
            !open.ok
                && open.detail.contains("has been open since")
                && open.detail.contains("no leader"),
            "{open:?}"
        );
        let unknown = lottery(Some(&draw(None)), Some("n1"), minutes(5));
        assert!(
            !unknown.ok && unknown.detail.contains("unknown"),
            "{unknown:?}"
        );
        let fine = lottery(Some(&draw(Some(true))), Some("n1"), minutes(5));
        assert!(
            fine.ok && fine.detail.contains("buyers can register"),
            "{fine:?}"
        );
    }
}
