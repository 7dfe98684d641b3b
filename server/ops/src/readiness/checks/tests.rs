//! Unit tests of `checks`: its rules and steps without the stores.

use super::*;
use contract::BaselineScope;

fn item(redis_stock: Option<i64>, db_stock: i64, redis_buyers: i64, db_buyers: i64) -> ItemState {
    ItemState {
        item_id: 7,
        name: "Widget".into(),
        redis_stock,
        db_stock,
        redis_buyers,
        db_buyers,
    }
}

#[test]
fn stock_and_buyers_must_equal_the_database() {
    assert!(stock(&[item(Some(10), 10, 0, 0)]).ok);
    let edited = stock(&[item(Some(9), 10, 0, 0)]);
    assert!(!edited.ok);
    assert!(
        edited.detail.contains("Redis 9, the database leaves 10"),
        "{}",
        edited.detail
    );
    assert!(!stock(&[item(None, 10, 0, 0)]).ok);
    assert!(!stock(&[]).ok);
    assert!(buyer_records(&[item(Some(1), 1, 2, 2)]).ok);
    assert!(!buyer_records(&[item(Some(1), 1, 1, 2)]).ok);
}

#[test]
fn the_bloom_filter_needs_every_key_and_a_rate_near_its_size() {
    let mut probe = BloomProbe {
        gone: false,
        absent: Vec::new(),
        own_keys: 2,
        probes: 1000,
        false_positives: 1,
        target_rate: 0.001,
    };
    assert!(bloom(&probe).ok);
    probe.false_positives = 6;
    assert!(!bloom(&probe).ok, "{}", bloom(&probe).detail);
    probe.false_positives = 0;
    probe.absent = vec!["item:1:2".into()];
    assert!(!bloom(&probe).ok);
    probe.absent.clear();
    probe.gone = true;
    assert!(!bloom(&probe).ok);
}

fn rehearsal_of(status: &str, failed_check: Option<&str>) -> Rehearsal {
    let checks: Vec<serde_json::Value> = failed_check
        .map(|detail| serde_json::json!({"name": "not_oversold", "ok": false, "detail": detail}))
        .into_iter()
        .collect();
    serde_json::from_value(serde_json::json!({
        "id": 4, "activity_id": 1, "buyers": 100, "rate_per_s": 50, "source": "api",
        "actor": "ops", "reason": "drill", "status": status, "stage": "done",
        "progress": {"done": 120, "total": 120},
        "result": {"requests": 120, "unanswered": 0, "load_s": 2.4, "outcomes": [],
                   "checks": checks, "passed": failed_check.is_none()},
        "error": (status == "error").then_some("Redis away"),
        "cleaned_up": true, "started_at": "2026-12-01T10:00:00Z"
    }))
    .expect("a rehearsal")
}

fn run_of(id: i64, p99_ms: f64, redis_round_trips: f64) -> BaselineRun {
    let path = serde_json::json!({"requests": 100, "redis_round_trips": redis_round_trips,
        "redis_commands": redis_round_trips, "db_statements": 0.4, "db_transactions": 0.4,
        "mq_publishes": 1.0});
    serde_json::from_value(serde_json::json!({
        "id": id, "activity_id": 1, "kind": "rehearsal",
        "started_at": "2026-12-01T10:00:00Z", "ended_at": "2026-12-01T10:00:03Z",
        "is_baseline": false,
        "perf": {"endpoints": [{"route": "/api/seckill/buy", "requests": 120, "qps": 50.0,
            "p50_ms": 3.0, "p99_ms": p99_ms, "p999_ms": p99_ms, "errors": {},
            "error_rate": 0.0}]},
        "cost": {"instances": [], "cpu_seconds": 0.0, "db_pool_peak_in_use": 0,
            "db_pool_waits": 0, "db_pool_wait_ms": 0.0, "redis_commands": 0, "mq_publishes": 0},
        "path": {"success": path, "refused": path}
    }))
    .expect("a run")
}

#[test]
fn the_last_rehearsal_must_pass_and_stay_within_the_baseline() {
    let never = rehearsal(None, None, None);
    assert!(
        !never.ok && never.detail.contains("seckill rehearse"),
        "{}",
        never.detail
    );
    let failed = rehearsal(
        Some(&rehearsal_of("failed", Some("item 2 oversold"))),
        None,
        None,
    );
    assert!(
        !failed.ok && failed.detail.contains("item 2 oversold"),
        "{}",
        failed.detail
    );
    let stopped = rehearsal(Some(&rehearsal_of("error", None)), None, None);
    assert!(
        !stopped.ok && stopped.detail.contains("Redis away"),
        "{}",
        stopped.detail
    );

    let passed = rehearsal_of("passed", None);
    assert!(
        rehearsal(Some(&passed), None, None).ok,
        "no baseline to hold it against"
    );
    let baseline = AppliedBaseline {
        activity_id: 1,
        scope: BaselineScope::Activity,
        run: run_of(1, 20.0, 2.0),
    };
    let unrecorded = rehearsal(Some(&passed), None, Some(&baseline));
    assert!(!unrecorded.ok, "{}", unrecorded.detail);
    let within = rehearsal(Some(&passed), Some(&run_of(2, 39.0, 2.4)), Some(&baseline));
    assert!(within.ok, "{}", within.detail);
    let slower = rehearsal(Some(&passed), Some(&run_of(2, 41.0, 2.0)), Some(&baseline));
    assert!(
        !slower.ok && slower.detail.contains("buy p99 41.0 ms"),
        "{}",
        slower.detail
    );
    let new_call = rehearsal(Some(&passed), Some(&run_of(2, 20.0, 3.0)), Some(&baseline));
    assert!(
        !new_call.ok
            && new_call
                .detail
                .contains("+1.0 Redis round trips per successful buy"),
        "{}",
        new_call.detail
    );
    // Without a baseline of its own, the activity's rehearsal is held against its kind's.
    let of_kind = AppliedBaseline {
        activity_id: 5,
        scope: BaselineScope::Kind,
        ..baseline
    };
    let within = rehearsal(Some(&passed), Some(&run_of(2, 39.0, 2.4)), Some(&of_kind));
    assert!(
        within.ok
            && within
                .detail
                .contains("within baseline run #1 (its kind's baseline, a run of activity #1)"),
        "{}",
        within.detail
    );
}

fn fallbacks() -> Vec<Fallback> {
    vec![
        Fallback {
            paths: vec!["switches/entry".into(), "switches/entry/7".into()],
            sale_value: "open",
            fallback_value: "closed",
        },
        Fallback {
            paths: vec!["switches/deduction".into()],
            sale_value: "redis",
            fallback_value: "db",
        },
    ]
}

fn flip(path: &str, new_value: &str, second: u32) -> SwitchFlip {
    SwitchFlip {
        path: path.into(),
        actor: "ops".into(),
        old_value: None,
        new_value: new_value.into(),
        reason: "drill".into(),
        at: DateTime::from_timestamp(1_764_600_000 + i64::from(second), 0).expect("a time"),
    }
}

#[test]
fn every_fallback_must_be_flipped_away_and_back_on_the_same_switch() {
    let started = DateTime::from_timestamp(1_764_600_000, 0).expect("a time");
    let newest = Some(("node-b", started));
    let drilled = [
        flip("switches/deduction", "db", 1),
        flip("switches/entry/7", "closed", 2),
        flip("switches/deduction", "redis", 3),
        flip("switches/entry/7", "open", 4),
    ];
    let check = switches_rehearsed(&fallbacks(), &drilled, newest);
    assert!(check.ok, "{}", check.detail);
    assert!(
        check.detail.contains("switches/entry/7 closed at"),
        "{}",
        check.detail
    );

    // Away and never back, back on another switch, or only ever set to the sale's value.
    for flips in [
        &drilled[..3],
        &[
            flip("switches/deduction", "db", 1),
            flip("switches/deduction", "redis", 2),
            flip("switches/entry", "closed", 3),
            flip("switches/entry/7", "open", 4),
        ][..],
        &[
            flip("switches/deduction", "redis", 1),
            flip("switches/entry", "open", 2),
        ][..],
    ] {
        let check = switches_rehearsed(&fallbacks(), flips, newest);
        assert!(!check.ok, "{flips:?}");
        assert!(
            check
                .detail
                .contains("flip switches/entry to closed and back"),
            "{}",
            check.detail
        );
    }
    let undrilled = switches_rehearsed(&fallbacks(), &[], newest);
    assert!(
        undrilled
            .detail
            .contains("switches/deduction to db and back"),
        "{}",
        undrilled.detail
    );
    assert!(!switches_rehearsed(&fallbacks(), &drilled, None).ok);
}

#[test]
fn switches_want_a_sale_and_report_the_challenge() {
    let state = |path: &str, value: &str, expected| SwitchState {
        path: path.into(),
        value: value.into(),
        expected,
        last_flip: None,
    };
    let sale = [
        state("switches/deduction", "redis", Some("redis")),
        state("switches/challenge", "off", None),
    ];
    let check = switches(&sale, None);
    assert!(check.ok, "{}", check.detail);
    assert!(check
        .detail
        .contains("switches/challenge = off, either is fine"));
    assert!(!switches(&sale, Some("timeout")).ok);
    let db = [state("switches/deduction", "db", Some("redis"))];
    let check = switches(&db, None);
    assert!(!check.ok);
    assert!(
        check.detail.starts_with("flip switches/deduction to redis"),
        "{}",
        check.detail
    );
}

#[test]
fn propagation_consumers_backlog_and_leader() {
    assert!(propagation(5, &[("a".into(), 5), ("b".into(), 6)]).ok);
    assert!(!propagation(5, &[("a".into(), 4)]).ok);
    assert!(!propagation(5, &[]).ok);
    assert!(consumers(&[("create", 1), ("pay-timeout", 2)]).ok);
    assert!(!consumers(&[("create", 0), ("pay-timeout", 2)]).ok);
    assert!(dead_letters(0).ok && !dead_letters(1).ok);
    let grace = Duration::from_secs(5);
    assert!(outbox(Duration::from_secs(1), grace, 0).ok);
    assert!(!outbox(Duration::from_secs(6), grace, 0).ok);
    assert!(!outbox(Duration::ZERO, grace, 1).ok);
    assert!(leader(Some("n1")).ok && !leader(None).ok);
}

#[test]
fn a_pre_order_waiting_past_the_limit_is_not_ok_and_says_where_it_waits() {
    let limit = Duration::from_secs(900);
    assert!(stuck_preorders(&[], limit).ok);
    assert!(stuck_preorders(&[("pending".into(), 0)], limit).ok);
    let stuck = stuck_preorders(&[("recorded".into(), 2), ("sent".into(), 1)], limit);
    assert!(!stuck.ok);
    assert!(
        stuck.detail.starts_with("3 pre-order(s)")
            && stuck.detail.contains("2 recorded, 1 sent")
            && stuck.detail.contains("never failed by a timer"),
        "{}",
        stuck.detail
    );
}

#[test]
fn clocks_within_a_tenth_of_a_second() {
    let db_now = Utc::now();
    let sample = |offset_ms| ClockSample {
        offset_ms,
        round_trip_ms: 1.0,
        db_now,
    };
    let second = Duration::from_secs(1);
    let recent = [(
        "n1".to_owned(),
        db_now - chrono::Duration::milliseconds(400),
    )];
    assert!(clocks(&sample(3.0), &recent, second).ok);
    assert!(!clocks(&sample(150.0), &recent, second).ok);
    let ahead = [(
        "n2".to_owned(),
        db_now + chrono::Duration::milliseconds(300),
    )];
    let check = clocks(&sample(0.0), &ahead, second);
    assert!(!check.ok);
    assert!(
        check.detail.contains("n2 wrote its report 300 ms ahead"),
        "{}",
        check.detail
    );
}

mod waiting_changes {
    use super::*;
    use contract::Source;

    fn at(minute: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + minute * 60, 0).expect("a time")
    }

    fn change(id: i64, path: &str, state: ChangeState) -> SwitchChangeRow {
        SwitchChangeRow {
            id,
            path: path.into(),
            value: "closed".into(),
            reason: "r".into(),
            proposer: "alice".into(),
            source: Source::Api,
            state,
            apply_at: None,
            revert_after_s: None,
            created_at: at(0),
            applied_at: None,
            applied_revision: None,
            replaced_value: None,
            revert_at: None,
            revert_dropped: None,
            decided_by: None,
            decided_reason: None,
            decided_at: None,
            stage_instances: None,
            stage_percent: None,
            staged_at: None,
        }
    }

    const SALE: (i64, i64) = (60, 120);

    fn check(waiting: &[SwitchChangeRow], now: i64) -> ReadinessCheck {
        changes(waiting, 7, (at(SALE.0), at(SALE.1)), at(now))
    }

    #[test]
    fn a_change_landing_during_the_sale_on_a_key_it_obeys_is_not_ready() {
        let during = SwitchChangeRow {
            apply_at: Some(at(90)),
            ..change(1, "switches/entry/7", ChangeState::Scheduled)
        };
        let verdict = check(std::slice::from_ref(&during), 1);
        assert!(!verdict.ok);
        assert!(verdict.detail.contains("change #1"), "{}", verdict.detail);
        let other_activity = SwitchChangeRow {
            path: "switches/entry/8".into(),
            ..during.clone()
        };
        let before = SwitchChangeRow {
            apply_at: Some(at(30)),
            ..during.clone()
        };
        assert!(check(&[other_activity, before], 1).ok);
        let revert = SwitchChangeRow {
            revert_at: Some(at(100)),
            ..change(2, "switches/deduction", ChangeState::Applied)
        };
        assert!(!check(std::slice::from_ref(&revert), 1).ok);
        let dropped = SwitchChangeRow {
            revert_dropped: Some("changed meanwhile".into()),
            ..revert
        };
        assert!(check(&[dropped], 1).ok);
    }

    #[test]
    fn a_stage_still_in_force_is_not_ready() {
        let staged = SwitchChangeRow {
            stage_instances: Some(vec!["node-a".into()]),
            ..change(4, "limits/max_in_flight", ChangeState::Staged)
        };
        let verdict = check(&[staged], 1);
        assert!(!verdict.ok);
        assert!(verdict.detail.contains("node-a"), "{}", verdict.detail);
    }

    #[test]
    fn a_change_waiting_long_for_approval_is_not_ready() {
        let pending = change(3, "switches/deduction", ChangeState::PendingApproval);
        assert!(
            check(std::slice::from_ref(&pending), 4).ok,
            "four minutes is fine"
        );
        let verdict = check(&[pending], 6);
        assert!(!verdict.ok);
        assert!(verdict.detail.contains("alice"), "{}", verdict.detail);
    }
}
