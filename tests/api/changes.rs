//! Switch changes that wait, against real PostgreSQL and etcd: a change scheduled for T
//! lands at T on three instances, the leader killed just before T leaves it to the next,
//! which applies it once; an auto-revert sets the key back, and is dropped when someone
//! changed the key meanwhile; a cancelled change never lands; bad input stores nothing. A
//! stage applies on its instances only until promoted or aborted (an instance restarted
//! while etcd is away keeps it from its disk), and the leader aborts one whose instance
//! answers buys with 5xx; the impact of a flip names what it touches, with each activity's
//! buy traffic.

use crate::{
    control::{cluster, etcd, key, one_leader, quick, two_on_a_private_etcd},
    support::{
        app::{json, spawn_app_with, TestApp},
        fixtures::{buy_body, open_sale, upcoming_activity, Caller, Listing, TestClock},
        wait,
    },
};
use base::clock::Clock;
use contract::{Actor, Role, Source};
use ops::control::board::{Board, Flip};
use serde_json::{json, Value};
use std::{
    sync::Arc,
    time::{Duration, Instant},
};

impl TestApp {
    async fn changes(&self, caller: &Caller, state: Option<&str>) -> Vec<Value> {
        let query = state.map_or(String::new(), |state| format!("?state={state}"));
        let (status, body) = json(
            self.get(&format!("/admin/api/changes{query}"), Some(caller))
                .await,
        )
        .await;
        assert_eq!(status, 200, "{body}");
        body["changes"].as_array().expect("changes").clone()
    }

    async fn change(&self, caller: &Caller, id: i64) -> Value {
        self.changes(caller, None)
            .await
            .into_iter()
            .find(|change| change["id"] == id)
            .unwrap_or_else(|| panic!("no change #{id}"))
    }

    /// Waits until change `id` is in `state` (and, for a revert, until it is settled).
    async fn until_change(&self, caller: &Caller, id: i64, what: &str, done: fn(&Value) -> bool) {
        wait::until(what, Duration::from_secs(10), || async {
            let change = self.change(caller, id).await;
            if done(&change) {
                Ok(())
            } else {
                Err(change.to_string())
            }
        })
        .await;
    }

    async fn cancel(&self, caller: &Caller, id: i64, reason: &str) -> (u16, Value) {
        json(
            self.send_json(
                reqwest::Method::DELETE,
                &format!("/admin/api/changes/{id}"),
                Some(caller),
                &json!({ "reason": reason }),
            )
            .await,
        )
        .await
    }

    /// The switch-audit rows a change made: (new value, state), oldest first.
    async fn change_flips(&self, id: i64) -> Vec<(String, String)> {
        sqlx::query_as("SELECT new_value, state FROM switch_audit WHERE change_id = $1 ORDER BY id")
            .bind(id)
            .fetch_all(&self.db)
            .await
            .expect("audit rows")
    }
}

/// The value of a key in etcd and how many times it was written since it was created.
async fn stored(app: &TestApp, path: &str) -> Option<(String, i64)> {
    let mut client = etcd(app).await;
    let response = client.get(key(app, path), None).await.expect("etcd read");
    response
        .kvs()
        .first()
        .map(|kv| (kv.value_str().expect("utf-8").to_owned(), kv.version()))
}

fn accepted_id(status: u16, body: &Value, state: &str) -> i64 {
    assert_eq!(
        (status, body["state"].as_str()),
        (202, Some(state)),
        "{body}"
    );
    body["change_id"].as_i64().expect("change id")
}

#[tokio::test]
async fn a_change_scheduled_for_t_lands_at_t_on_three_instances() {
    let apps = Arc::new(cluster(|_| {}).await);
    let ops = apps[0].caller(Role::Ops, None).await;
    let lead = Duration::from_secs(3);
    let at = chrono::Utc::now() + lead;
    let due = Instant::now() + lead;
    let body = json!({ "value": "closed", "reason": "entry closes at 20:00", "at": at });
    let (status, answer) = apps[1].flip(&ops, "switches/entry", &body, None).await;
    let id = accepted_id(status, &answer, "scheduled");
    assert_eq!(
        stored(&apps[0], "switches/entry").await,
        None,
        "nothing in etcd before T"
    );

    // Each instance's first request-visible moment with the entry closed.
    let watchers: Vec<_> = (0..apps.len())
        .map(|n| {
            let apps = apps.clone();
            tokio::spawn(async move {
                while apps[n].state.switches.current().entry_open {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                Instant::now()
            })
        })
        .collect();
    for (n, watcher) in watchers.into_iter().enumerate() {
        let landed = tokio::time::timeout(lead + Duration::from_secs(5), watcher)
            .await
            .expect("applied in time")
            .expect("watcher");
        let early = due.saturating_duration_since(landed);
        let late = landed.saturating_duration_since(due);
        println!("instance {n}: early {early:?}, late {late:?}");
        assert!(early <= Duration::from_secs(1) && late <= Duration::from_secs(1));
    }
    // The instances may see the write before the leader's transaction commits.
    apps[0]
        .until_change(&ops, id, "recorded applied", |change| {
            change["state"] == "applied"
        })
        .await;
    let change = apps[0].change(&ops, id).await;
    assert_eq!(change["replaced_value"], Value::Null, "the key was absent");
    assert_eq!(
        apps[0].change_flips(id).await,
        [("closed".to_owned(), "applied".to_owned())]
    );
    assert_eq!(
        stored(&apps[0], "switches/entry").await,
        Some(("closed".into(), 1))
    );
}

#[tokio::test]
async fn the_leader_killed_just_before_t_leaves_the_change_to_the_next_which_applies_it_once() {
    let apps = cluster(quick).await;
    let leader = one_leader(&apps).await;
    let other = (leader + 1) % apps.len();
    let ops = apps[other].caller(Role::Ops, None).await;
    let lead = Duration::from_millis(1_500);
    let at = chrono::Utc::now() + lead;
    let body = json!({ "value": "db", "reason": "Redis maintenance at T", "at": at });
    let (status, answer) = apps[other]
        .flip(&ops, "switches/deduction", &body, None)
        .await;
    let id = accepted_id(status, &answer, "scheduled");
    // Reaching the moment just before T, not proving anything by waiting.
    tokio::time::sleep(lead - Duration::from_millis(200)).await;
    apps[leader].kill();
    let killed = Instant::now();
    apps[other]
        .until_change(&ops, id, "applied by the next leader", |change| {
            change["state"] == "applied"
        })
        .await;
    println!("applied {:?} after the leader was killed", killed.elapsed());
    assert!(apps
        .iter()
        .enumerate()
        .any(|(n, app)| n != leader && app.state.leadership.is_leader()));
    assert_eq!(
        apps[other].change_flips(id).await,
        [("db".to_owned(), "applied".to_owned())],
        "one audited flip"
    );
    assert_eq!(
        stored(&apps[other], "switches/deduction").await,
        Some(("db".into(), 1)),
        "written into etcd once"
    );
}

#[tokio::test]
async fn an_auto_revert_sets_the_key_back_unless_it_was_changed_meanwhile() {
    let app = spawn_app_with(|_| {}).await;
    let clock = TestClock::starting_now();
    app.state.changes.use_clock(clock.clone());
    let ops = app.caller(Role::Ops, None).await;

    // Without `at`: applied at once, reverted a minute later on the changes' clock.
    let body = json!({ "value": "closed", "reason": "drain for a minute", "revert_after_s": 60 });
    let (status, answer) = app.flip(&ops, "switches/entry", &body, None).await;
    let id = accepted_id(status, &answer, "scheduled");
    app.until_change(&ops, id, "applied", |change| change["state"] == "applied")
        .await;
    wait::until("entry closed", Duration::from_secs(2), || async {
        !app.state.switches.current().entry_open
    })
    .await;
    clock.advance(Duration::from_secs(61));
    app.until_change(&ops, id, "reverted", |change| change["state"] == "reverted")
        .await;
    wait::until("entry open again", Duration::from_secs(2), || async {
        app.state.switches.current().entry_open
    })
    .await;
    assert_eq!(
        app.change_flips(id).await,
        [
            ("closed".to_owned(), "applied".to_owned()),
            ("open".to_owned(), "applied".to_owned())
        ],
        "the revert is audited like the flip: the absent key had its setting, open"
    );

    // Someone changes the key meanwhile: the revert is dropped and says why.
    let body = json!({ "value": 100, "reason": "shed load", "revert_after_s": 60 });
    let (status, answer) = app.flip(&ops, "limits/max_in_flight", &body, None).await;
    let id = accepted_id(status, &answer, "scheduled");
    app.until_change(&ops, id, "applied", |change| change["state"] == "applied")
        .await;
    let by_hand = json!({ "value": 200, "reason": "a bit more" });
    let (status, answer) = app.flip(&ops, "limits/max_in_flight", &by_hand, None).await;
    assert_eq!(status, 200, "{answer}");
    clock.advance(Duration::from_secs(61));
    app.until_change(&ops, id, "revert dropped", |change| {
        !change["revert_dropped"].is_null()
    })
    .await;
    let change = app.change(&ops, id).await;
    assert_eq!(change["state"], "applied");
    assert!(
        change["revert_dropped"]
            .as_str()
            .is_some_and(|why| why.contains("`200`")),
        "{change}"
    );
    assert_eq!(
        stored(&app, "limits/max_in_flight").await,
        Some(("200".into(), 2))
    );
    assert_eq!(app.change_flips(id).await.len(), 1, "no revert flip");
}

#[tokio::test]
async fn a_cancelled_change_never_lands_and_bad_changes_store_nothing() {
    let app = spawn_app_with(|_| {}).await;
    let clock = TestClock::starting_now();
    app.state.changes.use_clock(clock.clone());
    let ops = app.caller(Role::Ops, None).await;
    let in_an_hour = chrono::Utc::now() + chrono::Duration::hours(1);
    let body = json!({ "value": "on", "reason": "challenge at the peak", "at": in_an_hour });
    let (status, answer) = app.flip(&ops, "switches/challenge", &body, None).await;
    let cancelled = accepted_id(status, &answer, "scheduled");
    let (status, answer) = app.cancel(&ops, cancelled, "").await;
    assert_eq!(
        (status, answer["code"].as_str()),
        (400, Some("REASON_REQUIRED"))
    );
    let (status, _) = app.cancel(&ops, cancelled, "peak moved").await;
    assert_eq!(status, 204);
    let (status, answer) = app.cancel(&ops, cancelled, "again").await;
    assert_eq!(
        (status, answer["code"].as_str()),
        (409, Some("CHANGE_NOT_WAITING"))
    );
    let (status, _) = app.cancel(&ops, 999_999_999, "nothing").await;
    assert_eq!(status, 404);

    // A later change applies: the leader passed the cancelled one's time without it.
    let later = in_an_hour + chrono::Duration::minutes(1);
    let body = json!({ "value": "off", "reason": "after the peak", "at": later });
    let (status, answer) = app.flip(&ops, "switches/challenge", &body, None).await;
    let applied = accepted_id(status, &answer, "scheduled");
    clock.advance(Duration::from_secs(2 * 3600));
    app.until_change(&ops, applied, "applied", |change| {
        change["state"] == "applied"
    })
    .await;
    assert_eq!(app.change(&ops, cancelled).await["state"], "cancelled");
    assert_eq!(app.change_flips(cancelled).await, []);
    assert_eq!(
        stored(&app, "switches/challenge").await,
        Some(("off".into(), 1))
    );
    let listed = app.changes(&ops, Some("cancelled")).await;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["decided_reason"], "peak moved");

    // Refused input stores no change; times are checked against the changes' clock.
    let now = chrono::DateTime::from_timestamp_millis(clock.now_ms()).expect("a time");
    let in_an_hour = now + chrono::Duration::hours(1);
    for (body, code) in [
        (
            json!({ "value": "closed", "reason": "r", "at": now - chrono::Duration::hours(1) }),
            "INVALID_SCHEDULE",
        ),
        (
            json!({ "value": "closed", "reason": "r", "revert_after_s": 0 }),
            "INVALID_REVERT",
        ),
        (
            json!({ "value": "ajar", "reason": "r", "at": in_an_hour }),
            "INVALID_SWITCH_VALUE",
        ),
        (
            json!({ "value": "closed", "reason": "", "at": in_an_hour }),
            "REASON_REQUIRED",
        ),
    ] {
        let (status, answer) = app.flip(&ops, "switches/entry", &body, None).await;
        assert_eq!(
            (status, answer["code"].as_str()),
            (400, Some(code)),
            "{body}"
        );
    }
    let sre = app.caller(Role::Sre, None).await;
    let body = json!({ "value": "closed", "reason": "r", "at": in_an_hour });
    let (status, _) = app.flip(&sre, "switches/entry", &body, None).await;
    assert_eq!(status, 403);
    let (status, _) = app.cancel(&sre, applied, "r").await;
    assert_eq!(status, 403);
    assert_eq!(
        app.changes(&sre, None).await.len(),
        2,
        "any role reads the list"
    );
    let (status, answer) = json(app.get("/admin/api/changes?state=nope", Some(&ops)).await).await;
    assert_eq!(
        (status, answer["code"].as_str()),
        (400, Some("INVALID_STATE"))
    );
}

#[tokio::test]
async fn a_change_whose_write_landed_before_its_leader_died_is_recorded_not_written_again() {
    let app = spawn_app_with(|_| {}).await;
    let clock = TestClock::starting_now();
    app.state.changes.use_clock(clock.clone());
    let ops = app.caller(Role::Ops, None).await;
    let now = chrono::DateTime::from_timestamp_millis(clock.now_ms()).expect("a time");
    let body = json!({
        "value": "record", "reason": "broker upgrade", "at": now + chrono::Duration::hours(1),
    });
    let (status, answer) = app.flip(&ops, "switches/async", &body, None).await;
    let id = accepted_id(status, &answer, "scheduled");

    // What a leader that died between its etcd write and its commit leaves behind: the
    // value with the change's marker in one transaction, its audit row still pending.
    let mut client = etcd(&app).await;
    let marker = key(&app, &format!("changes/{id}/apply"));
    let txn = etcd_client::Txn::new().and_then(vec![
        etcd_client::TxnOp::put(key(&app, "switches/async"), "record", None),
        etcd_client::TxnOp::put(marker.clone(), r#"{"replaced":null}"#, None),
    ]);
    let written = client
        .txn(txn)
        .await
        .expect("etcd write")
        .header()
        .map(|header| header.revision())
        .expect("revision");
    sqlx::query(
        "INSERT INTO switch_audit (actor, source, path, new_value, reason, state, change_id)
         VALUES ($1, 'api', 'switches/async', 'record', 'change', 'pending', $2)",
    )
    .bind(&ops.username)
    .bind(id)
    .execute(&app.db)
    .await
    .expect("pending audit row");

    clock.advance(Duration::from_secs(2 * 3600));
    app.until_change(&ops, id, "applied", |change| change["state"] == "applied")
        .await;
    let change = app.change(&ops, id).await;
    assert_eq!(change["applied_revision"], written, "{change}");
    assert_eq!(
        stored(&app, "switches/async").await,
        Some(("record".into(), 1)),
        "not written again"
    );
    assert_eq!(
        app.change_flips(id).await,
        [("record".to_owned(), "applied".to_owned())],
        "the pending row is the one completed"
    );
    wait::until("the marker is cleared", Duration::from_secs(2), || async {
        let mut client = etcd(&app).await;
        client
            .get(marker.clone(), None)
            .await
            .is_ok_and(|response| response.kvs().is_empty())
    })
    .await;
}

impl TestApp {
    /// The readiness report's `changes` check for an activity.
    async fn changes_check(&self, caller: &Caller, activity_id: i64) -> Value {
        let path = format!("/admin/api/readiness?activity_id={activity_id}");
        let (status, report) = json(self.get(&path, Some(caller)).await).await;
        assert_eq!(status, 200, "{report}");
        report["checks"]
            .as_array()
            .expect("checks")
            .iter()
            .find(|check| check["name"] == "changes")
            .cloned()
            .expect("the changes check")
    }

    async fn history(&self, caller: &Caller, path: &str) -> (u16, Value) {
        let path = format!("/admin/api/switches/{path}/history");
        json(self.get(&path, Some(caller)).await).await
    }

    async fn rollback(&self, caller: &Caller, path: &str, body: Value) -> (u16, Value) {
        let path = format!("/admin/api/switches/{path}/rollback");
        json(self.post_json(&path, Some(caller), &body).await).await
    }

    async fn decide(&self, caller: &Caller, id: i64, decision: &str, reason: &str) -> (u16, Value) {
        json(
            self.post_json(
                &format!("/admin/api/changes/{id}/{decision}"),
                Some(caller),
                &json!({ "reason": reason }),
            )
            .await,
        )
        .await
    }
}

/// Puts the four-eyes policy in etcd, as an operator does with `etcdctl`.
async fn require_approval(app: &TestApp, patterns: &Value) {
    etcd(app)
        .await
        .put(key(app, "policy/approval"), patterns.to_string(), None)
        .await
        .expect("policy written");
}

#[tokio::test]
async fn four_eyes_a_second_person_applies_what_the_first_proposed_and_nothing_lands_before() {
    let app = spawn_app_with(|_| {}).await;
    require_approval(&app, &json!(["switches/deduction", "switches/entry*"])).await;
    let (alice, bob) = (
        app.caller(Role::Ops, None).await,
        app.caller(Role::Ops, None).await,
    );
    let body = json!({ "value": "db", "reason": "Redis failover drill" });
    let (status, answer) = app.flip(&alice, "switches/deduction", &body, None).await;
    let id = accepted_id(status, &answer, "pending_approval");
    assert_eq!(
        stored(&app, "switches/deduction").await,
        None,
        "nothing in etcd"
    );

    let (status, answer) = app.decide(&alice, id, "approve", "looks fine to me").await;
    assert_eq!(
        (status, answer["code"].as_str()),
        (403, Some("SELF_APPROVAL"))
    );
    let sre = app.caller(Role::Sre, None).await;
    let (status, _) = app.decide(&sre, id, "approve", "sre may not").await;
    assert_eq!(status, 403);
    assert_eq!(stored(&app, "switches/deduction").await, None);

    let (status, change) = app.decide(&bob, id, "approve", "drill agreed").await;
    assert_eq!(
        (status, change["state"].as_str()),
        (200, Some("applied")),
        "{change}"
    );
    assert_eq!(change["decided_by"], bob.username.as_str());
    assert_eq!(
        stored(&app, "switches/deduction").await,
        Some(("db".into(), 1))
    );
    let (actor, reason): (String, String) = sqlx::query_as(
        "SELECT actor, reason FROM switch_audit WHERE change_id = $1 AND state = 'applied'",
    )
    .bind(id)
    .fetch_one(&app.db)
    .await
    .expect("the flip's audit row");
    assert_eq!(actor, alice.username);
    assert!(
        reason.contains(&format!("approved by {}", bob.username)),
        "{reason}"
    );
    let (status, answer) = app.decide(&bob, id, "approve", "twice").await;
    assert_eq!(
        (status, answer["code"].as_str()),
        (409, Some("CHANGE_NOT_WAITING"))
    );

    // Rejected: never lands. A pattern with a star covers every activity's entry.
    let body = json!({ "value": "closed", "reason": "close sale 7" });
    let (status, answer) = app.flip(&alice, "switches/entry/7", &body, None).await;
    let rejected = accepted_id(status, &answer, "pending_approval");
    let (status, _) = app
        .decide(&bob, rejected, "reject", "sale 7 stays open")
        .await;
    assert_eq!(status, 204);
    let (status, answer) = app
        .decide(&bob, rejected, "approve", "changed my mind")
        .await;
    assert_eq!(
        (status, answer["code"].as_str()),
        (409, Some("CHANGE_NOT_WAITING"))
    );
    assert_eq!(stored(&app, "switches/entry/7").await, None);
    assert_eq!(app.change(&alice, rejected).await["state"], "rejected");

    // Keys outside the policy flip at once.
    let body = json!({ "value": 500, "reason": "shed load" });
    let (status, answer) = app.flip(&alice, "limits/max_in_flight", &body, None).await;
    assert_eq!(status, 200, "{answer}");
}

#[tokio::test]
async fn four_eyes_an_admins_emergency_flip_applies_at_once_and_the_audit_flags_it() {
    let app = spawn_app_with(|_| {}).await;
    require_approval(&app, &json!(["switches/entry*"])).await;
    let ops = app.caller(Role::Ops, None).await;
    let admin = app.caller(Role::Admin, None).await;
    let body = json!({ "value": "closed", "reason": "fraud wave", "emergency": true });
    let (status, answer) = app.flip(&ops, "switches/entry", &body, None).await;
    assert_eq!((status, answer["code"].as_str()), (403, Some("FORBIDDEN")));
    let scheduled = json!({
        "value": "closed", "reason": "fraud wave", "emergency": true, "revert_after_s": 60,
    });
    let (status, answer) = app.flip(&admin, "switches/entry", &scheduled, None).await;
    assert_eq!(
        (status, answer["code"].as_str()),
        (400, Some("INVALID_EMERGENCY"))
    );
    assert_eq!(stored(&app, "switches/entry").await, None);

    let (status, answer) = app.flip(&admin, "switches/entry", &body, None).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        stored(&app, "switches/entry").await,
        Some(("closed".into(), 1))
    );
    let (status, page) = json(app.get("/admin/api/audit", Some(&admin)).await).await;
    assert_eq!(status, 200);
    let entry = page["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .find(|entry| entry["target"] == "switches/entry" && entry["action"] == "set")
        .cloned()
        .expect("the flip in the audit");
    assert_eq!(entry["emergency"], true, "{entry}");
    assert_eq!(entry["actor"], admin.username.as_str());

    // The board's own flip (the console's path) never bypasses the policy.
    let board = Board {
        db: &app.state.db,
        etcd: &app.state.etcd,
        settings: &app.state.settings,
        instance: None,
    };
    let refused = board
        .flip(Flip {
            actor: &Actor {
                user_id: 0,
                username: ops.username.clone(),
                role: Role::Ops,
                merchant_id: None,
            },
            source: Source::Console,
            path: "switches/entry",
            value: "open",
            reason: "reopen",
            wait: None,
        })
        .await
        .expect_err("refused");
    assert_eq!(refused.code(), "APPROVAL_REQUIRED");
    assert_eq!(
        stored(&app, "switches/entry").await,
        Some(("closed".into(), 1))
    );
}

#[tokio::test]
async fn a_policy_written_into_etcd_is_audited_as_an_outside_write() {
    let app = spawn_app_with(|_| {}).await;
    let patterns = json!(["switches/deduction"]);
    require_approval(&app, &patterns).await;
    wait::until(
        "the policy's write audited",
        Duration::from_secs(5),
        || async {
            let rows: Vec<(String, String, String)> = sqlx::query_as(
                "SELECT actor, source, new_value FROM switch_audit WHERE path = 'policy/approval'",
            )
            .fetch_all(&app.db)
            .await
            .expect("audit rows");
            if rows
                == [(
                    "etcd".to_owned(),
                    "external".to_owned(),
                    patterns.to_string(),
                )]
            {
                Ok(())
            } else {
                Err(rows)
            }
        },
    )
    .await;
}

#[tokio::test]
async fn a_malformed_policy_makes_every_key_wait_for_a_second_person() {
    let app = spawn_app_with(|_| {}).await;
    etcd(&app)
        .await
        .put(key(&app, "policy/approval"), "switches/*", None)
        .await
        .expect("policy written");
    let ops = app.caller(Role::Ops, None).await;
    let body = json!({ "value": 7, "reason": "r" });
    let (status, answer) = app.flip(&ops, "limits/max_in_flight", &body, None).await;
    accepted_id(status, &answer, "pending_approval");
}

#[tokio::test]
async fn a_rollback_sets_the_value_a_revision_held_again_audited_and_under_four_eyes() {
    let app = spawn_app_with(|_| {}).await;
    let ops = app.caller(Role::Ops, None).await;
    let mut revisions = Vec::new();
    for (value, reason) in [(10, "tight"), (20, "looser"), (30, "loosest")] {
        let body = json!({ "value": value, "reason": reason });
        let (status, answer) = app.flip(&ops, "limits/max_in_flight", &body, None).await;
        assert_eq!(status, 200, "{answer}");
        revisions.push(answer["revision"].as_i64().expect("revision"));
    }
    let sre = app.caller(Role::Sre, None).await;
    let (status, listed) = app.history(&sre, "limits/max_in_flight").await;
    assert_eq!(status, 200, "{listed}");
    let seen: Vec<(i64, &str, &str)> = listed
        .as_array()
        .expect("revisions")
        .iter()
        .map(|entry| {
            (
                entry["revision"].as_i64().unwrap_or(0),
                entry["value"].as_str().unwrap_or("?"),
                entry["reason"].as_str().unwrap_or("?"),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            (revisions[2], "30", "loosest"),
            (revisions[1], "20", "looser"),
            (revisions[0], "10", "tight")
        ],
        "newest first"
    );

    let body = json!({ "revision": revisions[0], "reason": "back to tight" });
    let (status, _) = app
        .rollback(&sre, "limits/max_in_flight", body.clone())
        .await;
    assert_eq!(status, 403);
    let (status, answer) = app.rollback(&ops, "limits/max_in_flight", body).await;
    assert_eq!(
        (status, answer["new_value"].as_str()),
        (200, Some("10")),
        "{answer}"
    );
    assert_eq!(answer["old_value"], "30");
    wait::until("rolled back in force", Duration::from_secs(2), || async {
        app.state.switches.current().limits.max_in_flight == 10
    })
    .await;
    let (_, listed) = app.history(&ops, "limits/max_in_flight").await;
    assert_eq!(listed[0]["value"], "10");
    assert_eq!(
        listed[0]["reason"],
        format!("rollback to revision {}: back to tight", revisions[0])
    );
    assert_eq!(listed[0]["by"], ops.username.as_str());

    let missing = json!({ "revision": 1, "reason": "nothing there" });
    let (status, _) = app.rollback(&ops, "limits/max_in_flight", missing).await;
    assert_eq!(status, 404);
    let (status, answer) = app.history(&ops, "switches/nope").await;
    assert_eq!(
        (status, answer["code"].as_str()),
        (400, Some("UNKNOWN_SWITCH"))
    );

    // A key that needs four eyes: the rollback waits for a second person.
    let body = json!({ "value": "db", "reason": "drill" });
    let (status, answer) = app.flip(&ops, "switches/deduction", &body, None).await;
    assert_eq!(status, 200, "{answer}");
    let drill = answer["revision"].as_i64().expect("revision");
    let body = json!({ "value": "redis", "reason": "drill over" });
    let (status, _) = app.flip(&ops, "switches/deduction", &body, None).await;
    assert_eq!(status, 200);
    require_approval(&app, &json!(["switches/deduction"])).await;
    let body = json!({ "revision": drill, "reason": "drill again" });
    let (status, answer) = app.rollback(&ops, "switches/deduction", body).await;
    accepted_id(status, &answer, "pending_approval");
    assert_eq!(
        stored(&app, "switches/deduction")
            .await
            .map(|(value, _)| value),
        Some("redis".into())
    );
}

#[tokio::test]
async fn readiness_lists_a_change_landing_during_the_sale_and_an_approval_left_waiting() {
    let app = spawn_app_with(|_| {}).await;
    let clock = TestClock::starting_now();
    app.state.changes.use_clock(clock.clone());
    let sale = open_sale(&app, 10, 1).await;
    let ops = app.caller(Role::Ops, None).await;
    assert_eq!(app.changes_check(&ops, sale.activity_id).await["ok"], true);

    // The sale runs for the next hour: a flip scheduled in ten minutes lands during it.
    let now = chrono::DateTime::from_timestamp_millis(clock.now_ms()).expect("a time");
    let body = json!({
        "value": "db", "reason": "drill", "at": now + chrono::Duration::minutes(10),
    });
    let (status, answer) = app.flip(&ops, "switches/deduction", &body, None).await;
    let id = accepted_id(status, &answer, "scheduled");
    let check = app.changes_check(&ops, sale.activity_id).await;
    assert_eq!(check["ok"], false);
    assert!(
        check["detail"]
            .as_str()
            .is_some_and(|detail| detail.contains(&format!("change #{id}"))),
        "{check}"
    );
    let (status, _) = app.cancel(&ops, id, "not during the sale").await;
    assert_eq!(status, 204);
    assert_eq!(app.changes_check(&ops, sale.activity_id).await["ok"], true);

    // A proposal nobody decided on for more than five minutes.
    require_approval(&app, &json!(["switches/async"])).await;
    let body = json!({ "value": "record", "reason": "broker upgrade" });
    let (status, answer) = app.flip(&ops, "switches/async", &body, None).await;
    let pending = accepted_id(status, &answer, "pending_approval");
    assert_eq!(
        app.changes_check(&ops, sale.activity_id).await["ok"],
        true,
        "a fresh proposal is fine"
    );
    clock.advance(Duration::from_secs(6 * 60));
    let check = app.changes_check(&ops, sale.activity_id).await;
    assert_eq!(check["ok"], false);
    assert!(
        check["detail"]
            .as_str()
            .is_some_and(|detail| detail.contains(&format!("change #{pending}"))),
        "{check}"
    );
}

impl TestApp {
    /// This instance's node id, as its own switch board says.
    async fn node_id(&self, caller: &Caller) -> String {
        let (status, board) = json(self.get("/admin/api/switches", Some(caller)).await).await;
        assert_eq!(status, 200, "{board}");
        board["instance"]["node_id"]
            .as_str()
            .expect("node id")
            .to_owned()
    }

    /// Per live instance, the value it reports for a staged `path` (`None`: not staged
    /// there), from the heartbeats the board reads.
    async fn staged_reports(&self, caller: &Caller, path: &str) -> Vec<(String, Option<String>)> {
        let (status, board) = json(self.get("/admin/api/switches", Some(caller)).await).await;
        assert_eq!(status, 200, "{board}");
        let mut seen: Vec<(String, Option<String>)> = board["nodes"]
            .as_array()
            .expect("nodes")
            .iter()
            .map(|node| {
                let staged = node["staged"].as_array().into_iter().flatten();
                let value = staged
                    .filter(|entry| entry["path"] == path)
                    .find_map(|entry| entry["value"].as_str().map(str::to_owned));
                (node["node_id"].as_str().unwrap_or("?").to_owned(), value)
            })
            .collect();
        seen.sort();
        seen
    }

    async fn impact(&self, caller: &Caller, path: &str, value: &str) -> (u16, Value) {
        let path = format!("/admin/api/switches/{path}/impact?value={value}");
        json(self.get(&path, Some(caller)).await).await
    }
}

/// Buys sent at once to one instance, in the stage-abort test.
const BURST: i64 = 4;

fn max_in_flight(app: &TestApp) -> u64 {
    app.state.switches.current().limits.max_in_flight
}

#[tokio::test]
async fn staged_to_one_instance_of_three_only_it_applies_the_value_until_promoted_or_aborted() {
    let apps = cluster(|_| {}).await;
    let ops = apps[0].caller(Role::Ops, None).await;
    let chosen = apps[1].node_id(&ops).await;
    let default = max_in_flight(&apps[0]);
    let body = json!({
        "value": 500, "reason": "try a tighter admission on one instance",
        "stage": { "instances": [chosen] },
    });
    let (status, answer) = apps[0]
        .flip(&ops, "limits/max_in_flight", &body, None)
        .await;
    let id = accepted_id(status, &answer, "staged");
    let mut expected: Vec<(String, Option<String>)> = Vec::new();
    for app in &apps {
        let node = app.node_id(&ops).await;
        let value = (node == chosen).then(|| "500".to_owned());
        expected.push((node, value));
    }
    expected.sort();
    wait::until(
        "only the chosen instance reports the staged value",
        Duration::from_secs(5),
        || async {
            let seen = apps[2].staged_reports(&ops, "limits/max_in_flight").await;
            if seen == expected {
                Ok(())
            } else {
                Err(seen)
            }
        },
    )
    .await;
    assert_eq!(
        apps.iter().map(max_in_flight).collect::<Vec<_>>(),
        [default, 500, default]
    );
    assert_eq!(
        stored(&apps[0], "limits/max_in_flight").await,
        None,
        "the key itself waits"
    );
    let change = apps[0].change(&ops, id).await;
    assert_eq!(change["stage_instances"], json!([chosen]), "{change}");

    // One stage per key at a time; a stage names live instances; promote needs a stage.
    let (status, answer) = apps[0]
        .flip(&ops, "limits/max_in_flight", &body, None)
        .await;
    assert_eq!(
        (status, answer["code"].as_str()),
        (409, Some("STAGE_IN_PROGRESS"))
    );
    let ghost = json!({ "value": 7, "reason": "r", "stage": { "instances": ["nobody"] } });
    let (status, answer) = apps[0]
        .flip(&ops, "limits/local_rate_per_s", &ghost, None)
        .await;
    assert_eq!(
        (status, answer["code"].as_str()),
        (400, Some("UNKNOWN_INSTANCE"))
    );
    let both =
        json!({ "value": 7, "reason": "r", "stage": { "instances": [chosen], "percent": 5 } });
    let (status, answer) = apps[0]
        .flip(&ops, "limits/local_rate_per_s", &both, None)
        .await;
    assert_eq!(
        (status, answer["code"].as_str()),
        (400, Some("INVALID_STAGE"))
    );
    let sre = apps[0].caller(Role::Sre, None).await;
    let (status, _) = apps[0].decide(&sre, id, "promote", "sre may not").await;
    assert_eq!(status, 403);

    // Promoted: every instance, through the key itself; the stage is gone.
    let (status, change) = apps[0].decide(&ops, id, "promote", "looks healthy").await;
    assert_eq!(
        (status, change["state"].as_str()),
        (200, Some("applied")),
        "{change}"
    );
    wait::until(
        "every instance on the promoted value",
        Duration::from_secs(5),
        || async { apps.iter().all(|app| max_in_flight(app) == 500) },
    )
    .await;
    assert_eq!(
        stored(&apps[0], "limits/max_in_flight").await,
        Some(("500".into(), 1))
    );
    assert_eq!(
        apps[0].change_flips(id).await,
        [("500".to_owned(), "applied".to_owned())],
        "the promote is an audited flip of the change"
    );
    let (status, answer) = apps[0].decide(&ops, id, "abort", "too late").await;
    assert_eq!(
        (status, answer["code"].as_str()),
        (409, Some("CHANGE_NOT_STAGED"))
    );

    // A share of the live instances, then aborted: the instance goes back to the key's value.
    let body = json!({ "value": 400, "reason": "a third of them", "stage": { "percent": 34 } });
    let (status, answer) = apps[0]
        .flip(&ops, "limits/max_in_flight", &body, None)
        .await;
    let second = accepted_id(status, &answer, "staged");
    let change = apps[0].change(&ops, second).await;
    let instances = change["stage_instances"]
        .as_array()
        .expect("chosen")
        .clone();
    assert_eq!(instances.len(), 2, "34 % of three, rounded up: {change}");
    wait::until(
        "two instances on the staged value",
        Duration::from_secs(5),
        || async { apps.iter().filter(|app| max_in_flight(app) == 400).count() == 2 },
    )
    .await;
    let (status, change) = apps[0].decide(&ops, second, "abort", "not convinced").await;
    assert_eq!(
        (status, change["state"].as_str()),
        (200, Some("aborted")),
        "{change}"
    );
    assert_eq!(change["decided_by"], ops.username.as_str());
    wait::until(
        "every instance back on the key's value",
        Duration::from_secs(5),
        || async { apps.iter().all(|app| max_in_flight(app) == 500) },
    )
    .await;
    assert_eq!(
        stored(&apps[0], "limits/max_in_flight").await,
        Some(("500".into(), 1))
    );
    let actions: Vec<String> =
        sqlx::query_scalar("SELECT action FROM ops_audit WHERE target = ANY($1) ORDER BY id")
            .bind(vec![format!("change:{id}"), format!("change:{second}")])
            .fetch_all(&apps[0].db)
            .await
            .expect("operator actions");
    assert_eq!(
        actions,
        [
            "change.stage",
            "change.promote",
            "change.stage",
            "change.abort"
        ]
    );
}

#[tokio::test]
async fn an_instance_restarted_while_etcd_is_away_still_applies_the_stage_naming_it() {
    let (mut etcd, private, first, other) = two_on_a_private_etcd().await;
    let ops = first.caller(Role::Ops, None).await;
    let staged_on = first.node_id(&ops).await;
    let body = json!({
        "value": 7, "reason": "a tight admission on one instance",
        "stage": { "instances": [staged_on] },
    });
    let (status, answer) = first.flip(&ops, "limits/max_in_flight", &body, None).await;
    accepted_id(status, &answer, "staged");
    let snapshot = first.state.settings.control.snapshot_path.clone();
    wait::until("the stage on disk", Duration::from_secs(5), || async {
        max_in_flight(&first) == 7
            && std::fs::read_to_string(&snapshot)
                .is_ok_and(|text| text.contains("\"stages\"") && text.contains(&staged_on))
    })
    .await;

    // The staged instance restarts (same node id, same disk) while etcd is away.
    etcd.stop().await;
    first.kill();
    let restarted = other
        .spawn_sibling(|settings| {
            private(settings);
            settings.control.node_id = Some(staged_on.clone());
            settings.control.snapshot_path = snapshot.clone();
        })
        .await;
    assert_eq!(max_in_flight(&restarted), 7, "the stage kept");
    assert_ne!(
        max_in_flight(&other),
        7,
        "the others still apply the key's own"
    );
    drop(etcd);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_staged_instance_answering_buys_with_5xx_is_aborted_by_the_leader() {
    let apps = Arc::new(cluster(quick).await);
    let clock = TestClock::starting_now();
    for app in apps.iter() {
        app.state.changes.use_clock(clock.clone());
    }
    // Stock for everyone, one unit each: every buy asks Redis (a repeat buyer is refused
    // there), so a buy holds its place in flight across a round trip.
    let sale = open_sale(&apps[0], 1_000, 1).await;
    let ops = apps[0].caller(Role::Ops, None).await;
    let sick = apps[2].node_id(&ops).await;
    // A real cause: one request in flight at a time sheds the rest of a busy instance's
    // buys with 503 OVERLOADED.
    let body = json!({
        "value": 1, "reason": "admission of one", "stage": { "instances": [sick] },
    });
    let (status, answer) = apps[0]
        .flip(&ops, "limits/max_in_flight", &body, None)
        .await;
    let id = accepted_id(status, &answer, "staged");
    wait::until("the stage in force", Duration::from_secs(5), || async {
        max_in_flight(&apps[2]) == 1
    })
    .await;

    // Every instance gets bursts of concurrent buys from a few buyers: the sick one admits
    // one of a burst and sheds the others while it waits on Redis. Paced, not a flood, and
    // on a runtime of several threads: the three instances run in this test's runtime,
    // control planes included, and a flood of buys on one thread starved their election's
    // keep-alives on a busy machine (each leader stepped down before its lease could
    // expire, again and again) until no instance led, and none was left to abort.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let buy = Arc::new(buy_body(&sale, 1));
    let mut load = Vec::new();
    for n in 0..apps.len() {
        let (apps, stop, buy) = (apps.clone(), stop.clone(), buy.clone());
        load.push(tokio::spawn(async move {
            let mut sent = 0_i64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let burst: Vec<(i64, String)> = (sent..sent + BURST)
                    .map(|k| (1_000_000 * (n as i64 + 1) + k % 20, format!("load-{n}-{k}")))
                    .collect();
                futures::future::join_all(
                    burst
                        .iter()
                        .map(|(user, request)| apps[n].buy(*user, request, &buy)),
                )
                .await;
                sent += BURST;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }));
    }
    let started = Instant::now();
    loop {
        let change = apps[0].change(&ops, id).await;
        if change["state"] == "aborted" {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(40),
            "never aborted: {change}"
        );
        // The leader's hold is read on the changes' clock: moving it is what takes time.
        clock.advance(Duration::from_secs(5));
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for task in load {
        task.await.expect("load");
    }
    let change = apps[0].change(&ops, id).await;
    assert_eq!(change["decided_by"], "auto", "{change}");
    let (actor, source, detail): (String, String, Value) = sqlx::query_as(
        "SELECT actor, source, detail FROM ops_audit WHERE action = 'change.abort' AND target = $1",
    )
    .bind(format!("change:{id}"))
    .fetch_one(&apps[0].db)
    .await
    .expect("the abort audited");
    assert_eq!((actor.as_str(), source.as_str()), ("auto", "system"));
    assert_eq!(detail["auto"], true);
    // The audited figures are the window's, and show the breach: the staged side's share
    // of 5xx above the others' by more than the margin.
    let share = |side: &str| {
        let figures = &detail["figures"][side];
        let answered = figures["answered"].as_f64().unwrap_or(0.0);
        figures["server_errors"].as_f64().unwrap_or(0.0) / answered
    };
    assert!(
        share("staged") - share("others") > detail["figures"]["margin"].as_f64().unwrap_or(1.0),
        "{detail}"
    );
    wait::until(
        "the sick instance back on the key's value",
        Duration::from_secs(5),
        || async { max_in_flight(&apps[2]) == max_in_flight(&apps[0]) },
    )
    .await;
}

#[tokio::test]
async fn the_impact_of_a_flip_names_the_sales_it_touches_and_the_traffic_of_each() {
    let app = spawn_app_with(|_| {}).await;
    let live = open_sale(&app, 1, 1).await;
    let merchant = app.caller(Role::Merchant, Some("acme")).await;
    let upcoming = upcoming_activity(&app, &merchant, &Listing::storm(5, 1, &[])).await;
    let sre = app.caller(Role::Sre, None).await;
    for n in 0..30 {
        app.buy(7_000 + n, &format!("impact-{n}"), &buy_body(&live, 1))
            .await;
    }
    let traffic = |impact: &Value, id: i64| {
        let activity = impact["activities"]
            .as_array()
            .and_then(|all| all.iter().find(|a| a["id"] == id))
            .cloned()
            .unwrap_or_else(|| panic!("activity {id} not in {impact}"));
        (
            activity["buy_rate_per_s"].as_f64().unwrap_or(-1.0),
            activity["in_flight"].as_u64(),
        )
    };
    wait::until(
        "the live sale's buys in the heartbeat's rate",
        Duration::from_secs(10),
        || async {
            let (status, impact) = app.impact(&sre, "switches/entry", "closed").await;
            assert_eq!(status, 200, "{impact}");
            if traffic(&impact, live.activity_id).0 > 0.0 {
                Ok(())
            } else {
                Err(impact)
            }
        },
    )
    .await;
    let (_, impact) = app.impact(&sre, "switches/entry", "closed").await;
    assert_eq!(impact["current"], "open");
    assert_eq!(impact["changes_anything"], true);
    let touched: Vec<(i64, &str)> = impact["activities"]
        .as_array()
        .expect("activities")
        .iter()
        .map(|a| {
            (
                a["id"].as_i64().unwrap_or(0),
                a["window"].as_str().unwrap_or("?"),
            )
        })
        .collect();
    assert!(touched.contains(&(live.activity_id, "live")), "{impact}");
    assert!(
        touched.contains(&(upcoming.activity_id, "upcoming")),
        "{impact}"
    );
    // Nobody bought the upcoming sale: its traffic is none, whatever the live one's.
    let (live_rate, live_in_flight) = traffic(&impact, live.activity_id);
    assert!(live_rate > 0.0 && live_in_flight == Some(0), "{impact}");
    assert_eq!(traffic(&impact, upcoming.activity_id), (0.0, Some(0)));
    assert_eq!(impact["buy_rate_per_s"].as_f64(), Some(live_rate));
    assert_eq!(impact["instances"].as_array().map(Vec::len), Some(1));
    assert_eq!(
        impact["instances"][0]["buy_rate_per_s"].as_f64(),
        Some(live_rate)
    );

    // One activity's entry touches that activity only; its current value changes nothing.
    let path = format!("switches/entry/{}", upcoming.activity_id);
    let (_, impact) = app.impact(&sre, &path, "open").await;
    assert_eq!(impact["changes_anything"], false);
    let ids: Vec<i64> = impact["activities"]
        .as_array()
        .expect("activities")
        .iter()
        .filter_map(|a| a["id"].as_i64())
        .collect();
    assert_eq!(ids, [upcoming.activity_id]);
    assert_eq!(impact["buy_rate_per_s"].as_f64(), Some(0.0), "{impact}");

    let (status, answer) = app.impact(&sre, "switches/entry", "ajar").await;
    assert_eq!(
        (status, answer["code"].as_str()),
        (400, Some("INVALID_SWITCH_VALUE"))
    );
    let (status, answer) = json(
        app.get("/admin/api/switches/switches/entry/impact", Some(&sre))
            .await,
    )
    .await;
    assert_eq!(
        (status, answer["code"].as_str()),
        (400, Some("INVALID_VALUE"))
    );
}
