//! Unit tests of `cli`: its rules and steps without the stores.

use super::*;
use contract::{Finding, FindingAction, FindingClass, Progress};

#[test]
fn a_repair_from_the_command_line_needs_a_reason() {
    use clap::Parser;
    let parse = |args: &[&str]| Cli::try_parse_from(args);
    let refused = parse(&["seckill", "reconcile", "7", "--repair"])
        .err()
        .expect("refused");
    assert!(refused.to_string().contains("--reason"), "{refused}");
    assert!(parse(&["seckill", "reconcile", "7", "--repair", "--reason", "drill"]).is_ok());
    assert!(parse(&["seckill", "reconcile", "7"]).is_ok());
}

#[test]
fn readiness_prints_a_line_per_check_and_the_verdict() {
    use contract::{Readiness, ReadinessCheck, ReadinessCheckName};
    let report = Readiness::of(
        3,
        vec![
            ReadinessCheck {
                name: ReadinessCheckName::Stock,
                ok: true,
                detail: "equal".into(),
            },
            ReadinessCheck {
                name: ReadinessCheckName::BuyerRecords,
                ok: false,
                detail: "differ".into(),
            },
        ],
    );
    assert_eq!(
        readiness_table(&report),
        "ok    stock          equal\nFAIL  buyer_records  differ\nNOT READY: activity 3\n"
    );
}

#[test]
fn the_progress_bar_fills_with_the_items_done() {
    let bar = |done, total| progress_bar(Progress { done, total }, "items");
    assert_eq!(bar(0, 0), format!("[{}] 0/0 items", ".".repeat(30)));
    assert_eq!(
        bar(3, 10),
        format!("[{}{}] 3/10 items", "#".repeat(9), ".".repeat(21))
    );
    assert_eq!(bar(10, 10), format!("[{}] 10/10 items", "#".repeat(30)));
}

#[test]
fn findings_print_as_a_table_with_a_line_per_class() {
    let findings = [
        Finding {
            class: FindingClass::OrderNotInRedis,
            item_id: 7,
            order_id: Some("0b9e".into()),
            user_id: Some(42),
            units: 2,
            action: FindingAction::Repaired,
            detail: "taken again in Redis".into(),
        },
        Finding {
            class: FindingClass::RedisMissing,
            item_id: 12,
            order_id: None,
            user_id: None,
            units: 100,
            action: FindingAction::Flagged,
            detail: "stock key gone".into(),
        },
    ];
    let table = findings_table(&findings);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(
        lines[0],
        "class               item  order  user  units  action    detail"
    );
    assert_eq!(
        lines[1],
        "ORDER_NOT_IN_REDIS     7  0b9e     42      2  repaired  taken again in Redis"
    );
    assert_eq!(
        lines[2],
        "REDIS_MISSING         12  -         -    100  flagged   stock key gone"
    );
    assert!(
        table.contains("ORDER_NOT_IN_REDIS:      1 finding(s), 2 unit(s): 1 repaired, 0 flagged, 0 reported only"),
        "{table}"
    );
    assert!(
        table.contains("PREORDER_STUCK:          0 finding(s)"),
        "{table}"
    );
    assert_eq!(
        table
            .lines()
            .filter(|line| line.contains(" finding(s), "))
            .count(),
        FindingClass::ALL.len()
    );
    assert!(findings_table(&[]).starts_with("no findings\n"));
}
