//! The console's operator pages through their server functions and server-rendered HTML:
//! the switch board (only ops and admins flip, with a reason; refusals change nothing; a flip
//! shows up as applied by the instance, in the audit log and on the pages; an unreachable
//! etcd gets a banner), the dead letters (requeue one or all, with a reason, audited), the
//! retry of outbox rows the relay gave up on (one or all, with a reason, audited) and the
//! replay of pre-orders recorded while the pipeline was switched to `record`.

use crate::support::{
    app::{json, spawn_app, spawn_app_with, TestApp},
    wait,
};
use contract::{
    AuditPage, DeadLetterPage, OutboxRetryReport, OutboxSummary, ReplayReport, RequeueReport, Role,
    SwitchBoard, SwitchChange,
};
use leptos::server_fn::ServerFn;
use sale::orders::mq::message::OrderCreated;
use std::time::Duration;
use uuid::Uuid;

const PATIENCE: Duration = Duration::from_secs(10);

async fn board(app: &TestApp, session: &str) -> SwitchBoard {
    let response = app
        .console_call(app::api::GetSwitchBoard::PATH, session, &[])
        .await;
    assert_eq!(response.status(), 200);
    response.json().await.expect("board")
}

fn etcd_value(board: &SwitchBoard, path: &str) -> Option<String> {
    board
        .switches
        .iter()
        .find(|row| row.path == path)
        .unwrap_or_else(|| panic!("{path} on the board"))
        .etcd_value
        .clone()
}

/// Flips audited as in force (a refused one is audited `failed`).
async fn flips_audited(app: &TestApp) -> i64 {
    app.count("switch_audit WHERE state = 'applied'").await
}

#[tokio::test]
async fn only_ops_and_admins_flip_from_the_console_and_refusals_change_nothing() {
    let app = spawn_app().await;
    let ops = app
        .console_session(&app.caller(Role::Ops, None).await)
        .await;
    let sre = app
        .console_session(&app.caller(Role::Sre, None).await)
        .await;
    let merchant = app
        .console_session(&app.caller(Role::Merchant, Some("acme")).await)
        .await;
    let flip = |session: String, value: &'static str, reason: &'static str| {
        let app = &app;
        async move {
            app.console_call(
                app::api::FlipSwitch::PATH,
                &session,
                &[
                    ("path", "switches/entry"),
                    ("value", value),
                    ("reason", reason),
                ],
            )
            .await
        }
    };

    for (who, refused) in [("sre", sre.clone()), ("merchant", merchant.clone())] {
        let response = flip(refused, "closed", "not mine to flip").await;
        assert_eq!(response.status(), 403, "{who}");
        assert!(response
            .text()
            .await
            .expect("body")
            .contains("your role may not do this"));
    }
    for (value, reason) in [("closed", "  "), ("ajar", "typo")] {
        let response = flip(ops.clone(), value, reason).await;
        assert_eq!(response.status(), 400, "{value:?} / {reason:?}");
    }
    assert_eq!(flips_audited(&app).await, 0);
    assert_eq!(etcd_value(&board(&app, &ops).await, "switches/entry"), None);
    assert!(app.state.switches.current().entry_open);

    let response = flip(ops.clone(), "closed", "drill: close the entry").await;
    assert_eq!(response.status(), 200);
    let change: SwitchChange = response.json().await.expect("change");
    assert_eq!(
        (
            change.path.as_str(),
            change.old_value.as_deref(),
            change.new_value.as_str()
        ),
        ("switches/entry", None, "closed")
    );
    let (actor_source, reason): (String, String) =
        sqlx::query_as("SELECT actor || '/' || source, reason FROM switch_audit WHERE id = $1")
            .bind(change.audit_id)
            .fetch_one(&app.db)
            .await
            .expect("audit row");
    assert!(actor_source.ends_with("/console"), "{actor_source}");
    assert_eq!(reason, "drill: close the entry");

    // The instance applies it, and the board (what the page polls) says so with its time.
    wait::until("the instance applied the flip", PATIENCE, || async {
        let board = board(&app, &sre).await;
        let row = board
            .switches
            .iter()
            .find(|row| row.path == "switches/entry");
        row.is_some_and(|row| {
            row.mod_revision == Some(change.revision)
                && !row.applied.is_empty()
                && row.applied.iter().all(|node| node.applied)
        })
    })
    .await;
    assert!(!app.state.switches.current().entry_open);
    assert_eq!(
        etcd_value(&board(&app, &sre).await, "switches/entry").as_deref(),
        Some("closed")
    );

    // The pages: ops gets the change forms, SRE reads only, a merchant is refused.
    let html = app.console_page("/switches", &ops).await;
    assert!(
        html.contains(r#"id="switch-list""#) && html.contains("Change…"),
        "{html}"
    );
    assert!(
        html.contains("drill: close the entry"),
        "the last write's reason: {html}"
    );
    let html = app.console_page("/switches", &sre).await;
    assert!(
        html.contains(r#"id="switch-list""#) && !html.contains("Change…"),
        "{html}"
    );
    assert!(html.contains("Read-only"), "{html}");
    let html = app.console_page("/switches", &merchant).await;
    assert!(
        html.contains(r#"id="switch-list""#) && !html.contains("Change…"),
        "merchants read the board too: {html}"
    );

    // The audit log shows the flip to readers, not to merchants.
    let response = app.console_call(app::api::AuditLog::PATH, &sre, &[]).await;
    assert_eq!(response.status(), 200);
    let audit: AuditPage = response.json().await.expect("audit");
    let entry = &audit.rows.entries[0];
    assert_eq!(
        (entry.target.as_str(), entry.new_value.as_deref()),
        ("switches/entry", Some("closed"))
    );
    assert_eq!(
        app.console_call(app::api::AuditLog::PATH, &merchant, &[])
            .await
            .status(),
        403
    );
    let html = app.console_page("/audit", &sre).await;
    assert!(
        html.contains(r#"id="audit-list""#) && html.contains("drill: close the entry"),
        "{html}"
    );
}

#[tokio::test]
async fn an_unreachable_etcd_gets_a_banner_and_flips_are_refused() {
    // Nothing listens on port 9 of the loopback: etcd is away from the start.
    let app = spawn_app_with(|settings| {
        settings.etcd_endpoints = vec!["http://127.0.0.1:9".into()];
    })
    .await;
    let ops = app
        .console_session(&app.caller(Role::Ops, None).await)
        .await;
    let board = board(&app, &ops).await;
    assert!(!board.etcd.reachable);
    let html = app.console_page("/switches", &ops).await;
    assert!(html.contains(r#"id="etcd-banner""#), "{html}");
    let response = app
        .console_call(
            app::api::FlipSwitch::PATH,
            &ops,
            &[
                ("path", "switches/entry"),
                ("value", "closed"),
                ("reason", "etcd is away"),
            ],
        )
        .await;
    assert_eq!(response.status(), 503);
    assert_eq!(
        flips_audited(&app).await,
        0,
        "a flip that did not land is not audited as in force"
    );
    assert_eq!(
        app.count("switch_audit WHERE state = 'failed'").await,
        1,
        "the attempt is audited as failed"
    );
}

/// A dead letter as the DLQ sink stores it: an order event that died in the create queue.
async fn dead_letter(app: &TestApp) -> i64 {
    let message = app.state.pipeline.topology.orders_created(&[OrderCreated {
        order_id: Uuid::new_v4(),
        activity_id: 1,
        item_id: 1,
        user_id: 1,
        quantity: 1,
        amount_cents: 1,
    }]);
    sqlx::query_scalar(
        "INSERT INTO dead_letters (source_queue, routing_key, message_id, payload, reason, death_count)
         VALUES ($1, $2, $3, $4, 'delivery_limit', 3) RETURNING id",
    )
    .bind(&app.state.pipeline.topology.create_queue)
    .bind(&message.routing_key)
    .bind(&message.message_id)
    .bind(&message.payload)
    .fetch_one(&app.db)
    .await
    .expect("dead letter")
}

async fn requeued(app: &TestApp, id: i64) -> bool {
    sqlx::query_scalar("SELECT requeued_at IS NOT NULL FROM dead_letters WHERE id = $1")
        .bind(id)
        .fetch_one(&app.db)
        .await
        .expect("dead letter")
}

#[tokio::test]
async fn dead_letters_are_requeued_from_the_console_by_ops_with_a_reason() {
    let app = spawn_app().await;
    let ops_caller = app.caller(Role::Ops, None).await;
    let ops = app.console_session(&ops_caller).await;
    let sre = app
        .console_session(&app.caller(Role::Sre, None).await)
        .await;
    let merchant = app
        .console_session(&app.caller(Role::Merchant, Some("acme")).await)
        .await;
    let first = dead_letter(&app).await;
    let others = [dead_letter(&app).await, dead_letter(&app).await];

    let response = app
        .console_call(app::api::ListDeadLetters::PATH, &sre, &[])
        .await;
    assert_eq!(response.status(), 200);
    let page: DeadLetterPage = response.json().await.expect("page");
    assert_eq!((page.rows.waiting, page.rows.dead_letters.len()), (3, 3));
    assert!(page.rows.dead_letters[0].payload.contains("order_id"));
    assert_eq!(
        app.console_call(app::api::ListDeadLetters::PATH, &merchant, &[])
            .await
            .status(),
        403
    );

    let id = first.to_string();
    for (who, refused) in [("sre", &sre), ("merchant", &merchant)] {
        let response = app
            .console_call(
                app::api::RequeueDeadLetter::PATH,
                refused,
                &[("id", &id), ("reason", "drain")],
            )
            .await;
        assert_eq!(response.status(), 403, "{who}");
        let response = app
            .console_call(
                app::api::RequeueAllDeadLetters::PATH,
                refused,
                &[("reason", "drain")],
            )
            .await;
        assert_eq!(response.status(), 403, "{who}");
    }
    let response = app
        .console_call(
            app::api::RequeueDeadLetter::PATH,
            &ops,
            &[("id", &id), ("reason", " ")],
        )
        .await;
    assert_eq!(response.status(), 400);
    assert!(!requeued(&app, first).await);
    assert_eq!(app.operator_actions().await, 0);

    let response = app
        .console_call(
            app::api::RequeueDeadLetter::PATH,
            &ops,
            &[("id", &id), ("reason", "consumer fixed")],
        )
        .await;
    assert_eq!(response.status(), 200);
    assert!(requeued(&app, first).await);
    let again = app
        .console_call(
            app::api::RequeueDeadLetter::PATH,
            &ops,
            &[("id", &id), ("reason", "twice")],
        )
        .await;
    assert_eq!(again.status(), 409, "a dead letter is requeued once");

    let response = app
        .console_call(
            app::api::RequeueAllDeadLetters::PATH,
            &ops,
            &[("reason", "drain after the fix")],
        )
        .await;
    assert_eq!(response.status(), 200);
    let report: RequeueReport = response.json().await.expect("report");
    // The first one went back into the pipeline and may have died again meanwhile.
    assert!(report.requeued >= 2, "{report:?}");
    for id in others {
        assert!(requeued(&app, id).await, "dead letter {id}");
    }
    let audited: Vec<(String, String, String)> =
        sqlx::query_as("SELECT actor, source, action FROM ops_audit WHERE action <> 'activity.prewarm' ORDER BY id")
            .fetch_all(&app.db)
            .await
            .expect("ops audit");
    assert_eq!(
        audited,
        [
            (
                ops_caller.username.clone(),
                "console".into(),
                "dead_letter.requeue".into()
            ),
            (
                ops_caller.username.clone(),
                "console".into(),
                "dead_letter.requeue_all".into()
            ),
        ]
    );

    // The page: requeue controls for ops only, the requeued state for everyone.
    let html = app.console_page("/dead-letters", &ops).await;
    assert!(html.contains(r#"id="dead-letter-list""#), "{html}");
    assert!(
        html.contains(&format!(" by {}", ops_caller.username)),
        "{html}"
    );
    let html = app.console_page("/dead-letters", &sre).await;
    assert!(
        html.contains(r#"id="dead-letter-list""#) && !html.contains("Requeue…"),
        "{html}"
    );
    let (status, _) = json(app.get("/admin/api/dead-letters", None).await).await;
    assert_eq!(status, 401);
}

#[tokio::test]
async fn recorded_pre_orders_are_replayed_from_the_console_by_ops_only() {
    use crate::support::fixtures::{buy_body, open_for_sale, shop};
    use base::config::AsyncMode;
    let app = spawn_app().await;
    let ops_caller = app.caller(Role::Ops, None).await;
    let ops = app.console_session(&ops_caller).await;
    let sre = app
        .console_session(&app.caller(Role::Sre, None).await)
        .await;
    let acme = shop(&app, "acme", "Recorded sale").await;
    open_for_sale(&app, &acme, &ops_caller).await;

    // MQ "down": ops switch the pipeline to recording; a buy is recorded, not sent.
    let response = app
        .console_call(
            app::api::FlipSwitch::PATH,
            &ops,
            &[
                ("path", "switches/async"),
                ("value", "record"),
                ("reason", "broker maintenance"),
            ],
        )
        .await;
    assert_eq!(response.status(), 200);
    wait::until("the instance records pre-orders", PATIENCE, || async {
        app.state.switches.current().async_mode == AsyncMode::Record
    })
    .await;
    let id = app
        .bought(501, "recorded-1", &buy_body(&acme.sale, 1))
        .await;
    let outbox = |session: String| {
        let app = &app;
        async move {
            let response = app
                .console_call(app::api::GetOutboxSummary::PATH, &session, &[])
                .await;
            assert_eq!(response.status(), 200);
            response.json::<OutboxSummary>().await.expect("outbox")
        }
    };
    assert_eq!(outbox(sre.clone()).await.recorded, 1);
    let html = app.console_page("/dead-letters", &ops).await;
    assert!(html.contains(r#"id="replay-recorded""#), "{html}");

    let refused = app
        .console_call(
            app::api::ReplayRecordedOrders::PATH,
            &sre,
            &[("reason", "mine?")],
        )
        .await;
    assert_eq!(refused.status(), 403);
    let refused = app
        .console_call(
            app::api::ReplayRecordedOrders::PATH,
            &ops,
            &[("reason", "")],
        )
        .await;
    assert_eq!(refused.status(), 400);
    assert_eq!(outbox(ops.clone()).await.recorded, 1);

    let response = app
        .console_call(
            app::api::ReplayRecordedOrders::PATH,
            &ops,
            &[("reason", "broker is back")],
        )
        .await;
    assert_eq!(response.status(), 200);
    let report: ReplayReport = response.json().await.expect("report");
    assert_eq!(report.replayed, 1);
    assert_eq!(outbox(ops.clone()).await.recorded, 0);
    // The pipeline completes the replayed pre-order.
    wait::until("the replayed order completed", PATIENCE, || async {
        let status: String = sqlx::query_scalar("SELECT status FROM orders WHERE id = $1")
            .bind(id)
            .fetch_one(&app.db)
            .await
            .expect("order");
        status == "UNPAID"
    })
    .await;
}

/// The outbox row of `order` and its status.
async fn outbox_row(app: &TestApp, order: Uuid) -> (i64, String) {
    sqlx::query_as(
        "SELECT id, status FROM outbox
         WHERE event_id = (SELECT COALESCE(outbox_event_id, id) FROM orders WHERE id = $1)",
    )
    .bind(order)
    .fetch_one(&app.db)
    .await
    .expect("outbox row")
}

async fn order_status(app: &TestApp, order: Uuid) -> String {
    sqlx::query_scalar("SELECT status FROM orders WHERE id = $1")
        .bind(order)
        .fetch_one(&app.db)
        .await
        .expect("order")
}

/// Marks the row failed as the relay does when it gives up.
async fn give_up_on(app: &TestApp, id: i64) {
    sqlx::query(
        "UPDATE outbox SET status = 'failed', attempts = 10, last_error = 'connection refused'
         WHERE id = $1",
    )
    .bind(id)
    .execute(&app.db)
    .await
    .expect("outbox row failed");
}

#[tokio::test]
async fn failed_outbox_rows_are_retried_from_the_console_by_ops_with_a_reason() {
    use crate::support::fixtures::{buy_body, open_sale};
    let app = spawn_app_with(|settings| {
        settings.pipeline.relay_grace_ms = 200;
        settings.pipeline.relay_interval_ms = 100;
    })
    .await;
    let ops_caller = app.caller(Role::Ops, None).await;
    let ops = app.console_session(&ops_caller).await;
    let sre = app
        .console_session(&app.caller(Role::Sre, None).await)
        .await;
    let sale = open_sale(&app, 10, 1).await;
    let order = app.bought(601, "retried-1", &buy_body(&sale, 1)).await;
    wait::until("the order completed", PATIENCE, || async {
        outbox_row(&app, order).await.1 == "sent" && order_status(&app, order).await == "UNPAID"
    })
    .await;
    // Its first publish arrived, yet the relay gave up on it (a lost confirm, say): a retry
    // sends its event again, which the consumer applies once.
    let (id, _) = outbox_row(&app, order).await;
    give_up_on(&app, id).await;
    let summary = |session: String| {
        let app = &app;
        async move {
            let response = app
                .console_call(app::api::GetOutboxSummary::PATH, &session, &[])
                .await;
            assert_eq!(response.status(), 200);
            response.json::<OutboxSummary>().await.expect("outbox")
        }
    };
    let seen = summary(sre.clone()).await;
    assert_eq!((seen.failed, seen.failed_rows[0].id), (1, id));

    // The page: retry controls for ops only.
    let html = app.console_page("/dead-letters", &ops).await;
    assert!(
        html.contains(r#"id="retry-failed""#) && html.contains("Retry…"),
        "{html}"
    );
    let html = app.console_page("/dead-letters", &sre).await;
    assert!(
        html.contains(r#"id="outbox-failed""#)
            && !html.contains(r#"id="retry-failed""#)
            && !html.contains("Retry…"),
        "{html}"
    );

    let row = id.to_string();
    let refused = app
        .console_call(
            app::api::RetryOutbox::PATH,
            &sre,
            &[("id", &row), ("reason", "broker back")],
        )
        .await;
    assert_eq!(refused.status(), 403);
    let refused = app
        .console_call(
            app::api::RetryOutbox::PATH,
            &ops,
            &[("id", &row), ("reason", " ")],
        )
        .await;
    assert_eq!(refused.status(), 400);
    assert_eq!(outbox_row(&app, order).await.1, "failed");
    assert_eq!(app.operator_actions().await, 0);

    let retried = app
        .console_call(
            app::api::RetryOutbox::PATH,
            &ops,
            &[("id", &row), ("reason", "broker back")],
        )
        .await;
    assert_eq!(retried.status(), 200);
    let report: OutboxRetryReport = retried.json().await.expect("report");
    assert_eq!(report.retried, 1);
    wait::until("the retried row sent again", PATIENCE, || async {
        outbox_row(&app, order).await.1 == "sent"
    })
    .await;
    assert_eq!(order_status(&app, order).await, "UNPAID");
    let again = app
        .console_call(
            app::api::RetryOutbox::PATH,
            &ops,
            &[("id", &row), ("reason", "twice")],
        )
        .await;
    assert_eq!(again.status(), 409, "only a failed row is retried");

    // Without an id: every failed row.
    give_up_on(&app, id).await;
    let retried = app
        .console_call(
            app::api::RetryOutbox::PATH,
            &ops,
            &[("reason", "drain after the fix")],
        )
        .await;
    assert_eq!(retried.status(), 200);
    let report: OutboxRetryReport = retried.json().await.expect("report");
    assert_eq!(report.retried, 1);
    assert_ne!(outbox_row(&app, order).await.1, "failed");
    let audited: Vec<(String, String, String)> =
        sqlx::query_as("SELECT source, action, target FROM ops_audit WHERE action <> 'activity.prewarm' ORDER BY id")
            .fetch_all(&app.db)
            .await
            .expect("ops audit");
    assert_eq!(
        audited,
        [
            (
                "console".into(),
                "outbox.retry".into(),
                format!("outbox:{id}")
            ),
            (
                "console".into(),
                "outbox.retry_all".into(),
                "outbox:failed".into()
            ),
        ]
    );
}
