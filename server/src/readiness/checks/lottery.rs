//! The lottery's readiness verdict: a lottery activity's draw can be trusted and will run.

use chrono::{DateTime, Utc};
use contract::{ReadinessCheck, ReadinessCheckName as Name};

use super::verdict;

/// How long after registration closes a draw may still be under way before readiness calls
/// it overdue: the leader looks four times a second, and a million registrants take seconds.
pub(crate) const DRAW_GRACE: chrono::Duration = chrono::Duration::seconds(30);

/// What readiness reads of a lottery activity's draw.
pub(crate) struct LotteryState<'a> {
    pub(crate) closes_at: DateTime<Utc>,
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
        Some(node) => verdict(
            Name::Lottery,
            true,
            format!(
                "commitment {short}… fixed; registration open until {due} ({registered} registration(s) so far); {node}, the leader, draws then"
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn a_lottery_needs_its_commitment_a_leader_and_no_overdue_draw() {
        let closes = Utc::now();
        let commitment = "ab".repeat(32);
        let draw = |undrawn| LotteryState {
            closes_at: closes,
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
}
