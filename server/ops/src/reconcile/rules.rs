//! Reconciliation's decisions as plain functions: the ledger's drift, the class a drift
//! falls in, what a stuck pre-order gets (never a failure), and how many findings a run keeps.

use std::{collections::HashSet, time::Duration};

use contract::{Finding, FindingAction, FindingClass};

/// Units missing from `total = Redis stock + allocated + in flight + restores owed`.
/// Positive: units nobody holds (Redis took them without an order). Negative: Redis counts
/// units as free that orders hold (it would sell them again, were PostgreSQL not the arbiter).
pub(crate) fn drift(
    total: i64,
    redis_stock: i64,
    allocated: i64,
    in_flight: i64,
    restore_owed: i64,
) -> i64 {
    total - redis_stock - allocated - in_flight - restore_owed
}

/// The class of a non-zero drift.
pub(crate) fn drift_class(drift: i64) -> Option<FindingClass> {
    match drift.signum() {
        1 => Some(FindingClass::RedisDeductedNoOrder),
        -1 => Some(FindingClass::OrderNotInRedis),
        _ => None,
    }
}

/// Where a stuck pre-order's event is, as its outbox row says.
///
/// Only committed pre-orders (`PRE_CREATED` rows) are ever judged here, and every one of them
/// may have been answered 200. A pre-order the buy path lost track of before answering is
/// not one of them: it is voided by inserting a `FAILED` row under its id, which either
/// takes the id before the pre-order commits (so it never does) or finds it committed and
/// changes nothing (`settle`). So no rule here needs, or has, a way to fail a pre-order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EventState {
    /// Written under the async switch's `record`: the ops replay publishes it, whatever
    /// the switch says now.
    Recorded,
    /// The relay (or the buy path's own publish) is sending it.
    Pending,
    /// RabbitMQ confirmed it; `resent`: reconciliation already handed it back once since.
    Sent { resent: bool },
    /// The relay gave up on it.
    Failed,
    /// No outbox row: nothing can publish it.
    Missing,
}

impl EventState {
    /// The state of an outbox row of `status` (`None`: no row), `resent` when
    /// reconciliation handed it back before.
    pub(crate) fn of(status: Option<&str>, resent: bool) -> Self {
        match status {
            Some("recorded") => Self::Recorded,
            Some("pending") => Self::Pending,
            Some("sent") => Self::Sent { resent },
            Some("failed") => Self::Failed,
            // An unknown status is not the relay's to send: a person looks, as for no row.
            _ => Self::Missing,
        }
    }
}

/// What the leader does about a stuck pre-order: never fail it (its buyer may have been told
/// he won), only send its event again and, once it has waited too long, tell a person.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct StuckVerdict {
    /// Its outbox row goes back to the relay (the consumer applies an event once, however
    /// often it comes).
    pub(crate) resend: bool,
    /// It has waited `fail_stuck_after_s` since its event last reached RabbitMQ (or since it
    /// was written, if it never did): flagged for a person.
    pub(crate) flagged: bool,
    /// Why, in words for the finding.
    pub(crate) why: &'static str,
}

/// `since_sent`: how long since the pre-order's event last reached RabbitMQ, or since it
/// was written when it never did; only a confirmed send starts the clock again, so a relay
/// retrying against a broker that is away does not hide the wait.
pub(crate) fn stuck_verdict(
    event: EventState,
    since_sent: Duration,
    flag_after: Duration,
) -> StuckVerdict {
    let flagged = since_sent >= flag_after;
    let (resend, why) = match event {
        EventState::Recorded => (false, "recorded under the async switch's `record`: left for the replay of the recorded orders"),
        EventState::Pending => (false, "its event waits in the outbox for the relay: is RabbitMQ reachable?"),
        EventState::Sent { resent: false } => (true, "its event reached RabbitMQ but no consumer completed it"),
        EventState::Sent { resent: true } => (false, "its event was sent again and still no consumer completed it: look at the consumers and the dead letters"),
        // The relay does not take a failed row up again by itself, and pauses while the
        // broker is away, so handing it back costs nothing but a later attempt.
        EventState::Failed => (true, "the relay gave up on its event"),
        EventState::Missing => (false, "no outbox row: nothing can publish its event"),
    };
    StuckVerdict {
        resend,
        // Nothing will ever send an event without a row: waiting longer changes nothing.
        flagged: flagged || event == EventState::Missing,
        why,
    }
}

/// Keeps the first `max` findings of each class; the rest of a class become one finding
/// that counts them (so a run over a broken million-order item stays readable and small).
pub(crate) fn capped(findings: Vec<Finding>, max: usize) -> Vec<Finding> {
    let mut kept: Vec<Finding> = Vec::new();
    let mut dropped: Vec<(FindingClass, i64, i64, i64, FindingAction)> = Vec::new();
    for finding in findings {
        let of_class = kept
            .iter()
            .filter(|kept| kept.class == finding.class && kept.item_id == finding.item_id)
            .count();
        if of_class < max {
            kept.push(finding);
            continue;
        }
        match dropped
            .iter_mut()
            .find(|(class, item, ..)| *class == finding.class && *item == finding.item_id)
        {
            Some((_, _, count, units, _)) => {
                *count += 1;
                *units += finding.units;
            }
            None => dropped.push((
                finding.class,
                finding.item_id,
                1,
                finding.units,
                finding.action,
            )),
        }
    }
    kept.extend(
        dropped
            .into_iter()
            .map(|(class, item_id, count, units, action)| Finding {
                class,
                item_id,
                order_id: None,
                user_id: None,
                units,
                action,
                detail: format!("{count} more findings of this class, {units} units in all"),
            }),
    );
    kept
}

/// What makes findings of two passes the same finding: its detail (a wait in seconds, a
/// count) moves from one pass to the next while the finding stays the same.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct FindingKey {
    class: FindingClass,
    item_id: i64,
    order_id: Option<String>,
    user_id: Option<i64>,
    action: FindingAction,
}

impl From<&Finding> for FindingKey {
    fn from(finding: &Finding) -> Self {
        Self {
            class: finding.class,
            item_id: finding.item_id,
            order_id: finding.order_id.clone(),
            user_id: finding.user_id,
            action: finding.action,
        }
    }
}

/// Whether a leader's pass over an activity is worth a stored run: it repaired something
/// (each repair is news), or found something the activity's previous pass did not. A
/// pre-order flagged at every pass while the async switch stays on `record` is one run,
/// not one every `interval_ms`.
pub(crate) fn worth_storing(previous: &HashSet<FindingKey>, findings: &[Finding]) -> bool {
    findings.iter().any(|finding| {
        finding.action == FindingAction::Repaired || !previous.contains(&FindingKey::from(finding))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drift_is_what_the_ledger_misses() {
        assert_eq!(drift(100, 60, 38, 2, 0), 0);
        assert_eq!(drift(100, 59, 38, 2, 0), 1);
        assert_eq!(drift(100, 62, 38, 2, 0), -2);
        assert_eq!(drift(100, 60, 35, 2, 3), 0);
        assert_eq!(drift_class(1), Some(FindingClass::RedisDeductedNoOrder));
        assert_eq!(drift_class(-3), Some(FindingClass::OrderNotInRedis));
        assert_eq!(drift_class(0), None);
    }

    #[test]
    fn a_stuck_pre_order_is_sent_again_then_flagged_and_never_failed() {
        let (limit, young, old) = (
            Duration::from_secs(900),
            Duration::from_secs(90),
            Duration::from_secs(1000),
        );
        let verdict = |event, since| {
            let v = stuck_verdict(event, since, limit);
            (v.resend, v.flagged)
        };
        // Sent once more when its sent event went nowhere, and when the relay gave up.
        assert_eq!(
            verdict(EventState::Sent { resent: false }, young),
            (true, false)
        );
        assert_eq!(verdict(EventState::Failed, young), (true, false));
        assert_eq!(verdict(EventState::Failed, old), (true, true));
        // Sent again once: not again and again into a backlog; a person after the wait.
        assert_eq!(
            verdict(EventState::Sent { resent: true }, young),
            (false, false)
        );
        assert_eq!(
            verdict(EventState::Sent { resent: true }, old),
            (false, true)
        );
        // The relay's, and the replay's: left to them, flagged once they take too long.
        assert_eq!(verdict(EventState::Pending, young), (false, false));
        assert_eq!(verdict(EventState::Pending, old), (false, true));
        assert_eq!(verdict(EventState::Recorded, young), (false, false));
        assert_eq!(verdict(EventState::Recorded, old), (false, true));
        // Nothing can send it: a person at once.
        assert_eq!(verdict(EventState::Missing, young), (false, true));
    }

    #[test]
    fn outbox_statuses_read_as_event_states() {
        assert_eq!(EventState::of(Some("recorded"), true), EventState::Recorded);
        assert_eq!(EventState::of(Some("pending"), false), EventState::Pending);
        assert_eq!(
            EventState::of(Some("sent"), true),
            EventState::Sent { resent: true }
        );
        assert_eq!(EventState::of(Some("failed"), false), EventState::Failed);
        assert_eq!(EventState::of(None, false), EventState::Missing);
    }

    fn finding(class: FindingClass, item_id: i64) -> Finding {
        Finding {
            class,
            item_id,
            order_id: None,
            user_id: None,
            units: 1,
            action: FindingAction::Repaired,
            detail: String::new(),
        }
    }

    #[test]
    fn findings_are_capped_per_class_and_item_with_a_count() {
        let mut findings: Vec<Finding> = (0..5)
            .map(|_| finding(FindingClass::RedisDeductedNoOrder, 1))
            .collect();
        findings.push(finding(FindingClass::PreorderStuck, 1));
        findings.push(finding(FindingClass::RedisDeductedNoOrder, 2));
        let kept = capped(findings, 2);
        assert_eq!(kept.len(), 5, "{kept:?}");
        let summary = kept.last().expect("summary");
        assert_eq!((summary.item_id, summary.units), (1, 3));
        assert!(summary.detail.starts_with("3 more"), "{}", summary.detail);
    }

    #[test]
    fn a_pass_is_stored_only_when_it_finds_something_new_or_repairs() {
        let mut flagged = finding(FindingClass::PreorderStuck, 1);
        flagged.action = FindingAction::Flagged;
        flagged.order_id = Some("a".into());
        let none = HashSet::new();
        assert!(!worth_storing(&none, &[]), "nothing found");
        assert!(
            worth_storing(&none, std::slice::from_ref(&flagged)),
            "first seen"
        );
        let seen: HashSet<FindingKey> = [FindingKey::from(&flagged)].into();
        let mut later = flagged.clone();
        later.detail = "waits 12 s".into();
        assert!(
            !worth_storing(&seen, &[later.clone()]),
            "the same, waiting longer"
        );
        let mut other = later.clone();
        other.order_id = Some("b".into());
        assert!(worth_storing(&seen, &[later, other]), "another order");
        let repaired = finding(FindingClass::RedisDeductedNoOrder, 1);
        let seen: HashSet<FindingKey> = [FindingKey::from(&repaired)].into();
        assert!(worth_storing(&seen, &[repaired]), "a repair is always news");
    }
}
