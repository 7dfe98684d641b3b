//! Retention: the leader prunes what grows with every sale once it is older than its
//! retention, by a clock the test moves days forward, and keeps the young rows, the outbox
//! rows of pre-orders not yet completed, the hot keys in force, the orders and the audit.

use contract::Role;
use reqwest::Method;
use serde_json::{json, Value};
use std::time::Duration;
use uuid::Uuid;

use crate::support::{
    app::{json, spawn_app_with, TestApp},
    fixtures::{buy_body, open_sale, storm_settings, Sale, TestClock},
    wait::{until, PATIENCE},
};

/// Passes of the retention job so far.
async fn passes(app: &TestApp) -> f64 {
    app.metric("seckill_retention_passes_total").await
}

/// Waits until the retention job has completed two more passes (one may have been under
/// way when the test changed something).
pub(crate) async fn two_more_passes(app: &TestApp) {
    let from = passes(app).await;
    until("two more retention passes", PATIENCE, || async {
        passes(app).await >= from + 2.0
    })
    .await;
}

/// Buys one unit as `user_id`, pays it and waits until the order is paid (its one status
/// change kept in `order_events`; a completion writes none) and its batch's outbox row
/// sent; the order's id.
async fn paid_order(app: &TestApp, sale: &Sale, user_id: i64) -> Uuid {
    let order = app
        .bought(user_id, &format!("retained-{user_id}"), &buy_body(sale, 1))
        .await;
    let status = || async {
        sqlx::query_scalar::<_, String>("SELECT status FROM orders WHERE id = $1")
            .bind(order)
            .fetch_one(&app.db)
            .await
            .expect("status")
    };
    until("the order completes", PATIENCE, || async {
        status().await == "UNPAID"
    })
    .await;
    let (code, trade) = app.pay(user_id, order).await;
    assert_eq!(code, 200, "{trade}");
    until("the order is paid and its event sent", PATIENCE, || async {
        let sent: Option<bool> = sqlx::query_scalar(
            "SELECT bool_and(status = 'sent') FROM outbox
             WHERE event_id = (SELECT COALESCE(outbox_event_id, id) FROM orders WHERE id = $1)",
        )
        .bind(order)
        .fetch_one(&app.db)
        .await
        .expect("outbox");
        status().await == "PAID" && sent == Some(true)
    })
    .await;
    order
}

/// Every audit row.
const AUDIT: &str =
    "SELECT 'ops ' || id FROM ops_audit UNION ALL SELECT 'switch ' || id FROM switch_audit";

async fn ids(app: &TestApp, statement: &str) -> Vec<String> {
    sqlx::query_scalar(statement)
        .fetch_all(&app.db)
        .await
        .expect("ids")
}

/// What a retention pass may touch, as `(table, rows)`.
async fn figures(app: &TestApp) -> Vec<(&'static str, i64)> {
    let mut figures = Vec::new();
    for table in [
        "processed_events",
        "outbox",
        "order_events",
        "dead_letters",
        "hotkey_periods",
        "reconciliation_runs",
        "orders",
        "ops_audit",
    ] {
        figures.push((table, app.count(table).await));
    }
    figures
}

/// Found next: one activity left open for weeks kept the processed events, sent outbox rows
/// and order history of every sale written since its start, for as long as it stayed open:
/// those three tables were pruned only up to the start of the earliest live activity. Now
/// no sale holds back anyone's rows; what a sale still reads is kept row by row (the outbox
/// row of a pre-order not yet completed).
#[tokio::test]
async fn rows_past_their_retention_go_and_only_what_is_still_read_stays() {
    let app = spawn_app_with(|settings| {
        storm_settings(settings);
        settings.retention.interval_ms = 100;
        // Small batches: a table of a few rows is pruned over several statements.
        settings.retention.batch_rows = 1;
        // The stuck pre-order this test writes is not sent again meanwhile.
        settings.reconcile.stuck_after_s = 86_400;
    })
    .await;
    let clock = TestClock::starting_now();
    app.state.retention.use_clock(clock.clone());
    let ops = app.caller(Role::Ops, None).await;

    // A sale with one completed order: a processed event, a sent outbox row, a status
    // change; a finished reconciliation run of it; a dead letter; a hot key that ended and
    // one still in force.
    let long = open_sale(&app, 5, 1).await;
    let long_order = paid_order(&app, &long, 1).await;
    app.reconcile(&ops, &long, false).await;
    sqlx::query(
        "INSERT INTO dead_letters (source_queue, routing_key, payload, reason)
         VALUES ('orders.create', 'order.create', '\\x00', 'rejected')",
    )
    .execute(&app.db)
    .await
    .expect("a dead letter");
    // Two manual hot keys (each audited), one of them lifted.
    for key in ["10.0.0.1", "10.0.0.2"] {
        let body = json!({ "kind": "ip", "key": key, "action": "block", "hold_s": 600,
                           "reason": "scalper" });
        let (status, added) =
            json(app.post_json("/admin/api/hotkeys", Some(&ops), &body).await).await;
        assert_eq!(status, 201, "{added}");
    }
    let lifted = app
        .send_json(
            Method::DELETE,
            "/admin/api/hotkeys/ip/10.0.0.2?reason=done",
            Some(&ops),
            &Value::Null,
        )
        .await;
    assert_eq!(lifted.status(), 204);
    until("one hot-key period open, one ended", PATIENCE, || async {
        ids(
            &app,
            "SELECT key FROM hotkey_periods WHERE ended_at IS NOT NULL",
        )
        .await
            == ["10.0.0.2"]
            && app.count("hotkey_periods").await == 2
    })
    .await;
    let before = figures(&app).await;
    let audit_before = ids(&app, AUDIT).await;
    assert!(
        !audit_before.is_empty(),
        "the hot keys' changes are audited"
    );

    // Younger than every retention: kept.
    two_more_passes(&app).await;
    assert_eq!(figures(&app).await, before, "nothing is old yet");

    // The first sale stays open for weeks: it opened three weeks ago and ends in three.
    sqlx::query(
        "UPDATE activities SET starts_at = now() - interval '21 days', ends_at = now() + interval '21 days'
         WHERE id = $1",
    )
    .bind(long.activity_id)
    .execute(&app.db)
    .await
    .expect("a sale open for weeks");
    // Another sale sells and ends meanwhile.
    let short = open_sale(&app, 5, 1).await;
    let short_order = paid_order(&app, &short, 2).await;
    sqlx::query(
        "UPDATE activities SET starts_at = now() - interval '2 hours', ends_at = now() - interval '1 minute'
         WHERE id = $1",
    )
    .bind(short.activity_id)
    .execute(&app.db)
    .await
    .expect("end the other sale");
    // One of its pre-orders is still `PRE_CREATED`, its event sent and never consumed:
    // reconciliation reads its outbox row until it completes.
    let stuck_event = Uuid::new_v4();
    sqlx::query(
        "WITH sent AS (
             INSERT INTO outbox (event_id, topic, payload, status, sent_at)
             VALUES ($1, 'order.create', '{}', 'sent', now())
         )
         INSERT INTO orders (id, activity_id, item_id, user_id, quantity, amount_cents, status,
                             request_id, outbox_event_id)
         VALUES (gen_random_uuid(), $2, $3, 3, 1, 0, 'PRE_CREATED', 'stuck', $1)",
    )
    .bind(stuck_event)
    .bind(short.activity_id)
    .bind(short.item_id)
    .execute(&app.db)
    .await
    .expect("a stuck pre-order");

    // A hundred days later, past every retention.
    clock.advance(Duration::from_secs(100 * 86_400));
    until("the old rows are pruned", PATIENCE, || async {
        let now = figures(&app).await;
        let rows = |table: &str| now.iter().find(|(t, _)| *t == table).map(|(_, n)| *n);
        if rows("dead_letters") == Some(0)
            && rows("reconciliation_runs") == Some(0)
            && rows("hotkey_periods") == Some(1)
            && rows("processed_events") == Some(0)
            && rows("order_events") == Some(0)
            && rows("outbox") == Some(1)
        {
            Ok(())
        } else {
            Err(format!("{now:?}"))
        }
    })
    .await;

    // What stayed: the stuck pre-order's outbox row (not the open sale's rows), the key in
    // force, every order and the whole audit.
    assert_eq!(
        ids(&app, "SELECT event_id::TEXT FROM outbox").await,
        vec![stuck_event.to_string()]
    );
    assert_eq!(
        ids(
            &app,
            "SELECT key FROM hotkey_periods WHERE ended_at IS NULL"
        )
        .await,
        vec!["10.0.0.1".to_owned()]
    );
    let orders = ids(&app, "SELECT id::TEXT FROM orders").await;
    assert!(
        [long_order, short_order]
            .iter()
            .all(|order| orders.contains(&order.to_string())),
        "paid orders are never pruned"
    );
    assert_eq!(orders.len(), 3);
    let audit_after = ids(&app, AUDIT).await;
    assert!(
        audit_before.iter().all(|id| audit_after.contains(id)),
        "audit rows are never pruned"
    );

    // The figures: rows per table, the age of the oldest (by the job's clock), what went.
    until("the table figures follow", PATIENCE, || async {
        let rows = app.metric("seckill_table_rows{table=\"outbox\"}").await;
        let empty_age = app
            .metric("seckill_table_oldest_age_seconds{table=\"dead_letters\"}")
            .await;
        let age = app
            .metric("seckill_table_oldest_age_seconds{table=\"outbox\"}")
            .await;
        let pruned = app
            .metric("seckill_retention_pruned_total{table=\"order_events\"}")
            .await;
        if rows == 1.0 && empty_age == 0.0 && age >= 99.0 * 86_400.0 && pruned == 2.0 {
            Ok(())
        } else {
            Err(json!({ "rows": rows, "empty_age": empty_age, "age": age, "pruned": pruned }))
        }
    })
    .await;
    assert_eq!(
        app.metric("seckill_table_rows{table=\"orders\"}").await,
        3.0
    );
}
