//! Reconciliation's decisions as plain functions: the ledger's drift, the class a drift
//! falls in, what to do with a stuck pre-order, and how many findings a run keeps.

use std::time::Duration;

use contract::{Finding, FindingAction, FindingClass};

use crate::infra::config::AsyncMode;

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

/// What a stuck pre-order gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StuckRepair {
    /// Its event goes out again (the consumer applies it once however often it comes).
    Republish,
    /// Too old to wait for any more: failed, its units given back.
    Fail,
    /// Left for a person, with why.
    Leave(&'static str),
}

pub(crate) fn stuck_repair(
    outbox_status: Option<&str>,
    age: Duration,
    async_mode: AsyncMode,
    fail_after: Duration,
) -> StuckRepair {
    match outbox_status {
        Some("recorded") if async_mode == AsyncMode::Record => StuckRepair::Leave(
            "recorded while the async switch is on `record`: replay the recorded orders",
        ),
        _ if age >= fail_after => StuckRepair::Fail,
        // No outbox row: nothing can ever publish it.
        None => StuckRepair::Fail,
        Some(_) => StuckRepair::Republish,
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
    fn stuck_pre_orders_are_republished_then_failed() {
        let young = Duration::from_secs(90);
        let old = Duration::from_secs(1000);
        let limit = Duration::from_secs(900);
        assert_eq!(
            stuck_repair(Some("failed"), young, AsyncMode::Mq, limit),
            StuckRepair::Republish
        );
        assert_eq!(
            stuck_repair(Some("sent"), old, AsyncMode::Mq, limit),
            StuckRepair::Fail
        );
        assert_eq!(
            stuck_repair(Some("recorded"), young, AsyncMode::Mq, limit),
            StuckRepair::Republish
        );
        assert!(matches!(
            stuck_repair(Some("recorded"), old, AsyncMode::Record, limit),
            StuckRepair::Leave(_)
        ));
        assert_eq!(
            stuck_repair(None, young, AsyncMode::Mq, limit),
            StuckRepair::Fail
        );
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
}
