//! The RabbitMQ order pipeline against real RabbitMQ and PostgreSQL: every
//! pre-order becomes `UNPAID` exactly once whatever is duplicated, redelivered or lost on
//! the way; buyers keep getting order ids while RabbitMQ is unreachable and the relay
//! delivers later; rows the relay gave up on wait for ops to retry them; poison messages end
//! in the dead letters and are requeued once; recorded orders are replayed exactly once. Each
//! test has its own AMQP prefix.

use crate::support::{
    app::{json, spawn_app_with, TestApp},
    fixtures::{count_codes, open_sale, order_id, storm, storm_settings, Caller, Sale},
    proxy::{self, Proxy},
    wait::{self, PATIENCE},
};
use base::config::{AsyncMode, Settings};
use contract::{Readiness, ReadinessCheckName as Name, Role};
use sale::orders::{
    create_order, dead_letters,
    mq::{
        message::{OrderCreated, PayTimeouts},
        topology::Outgoing,
    },
};
use secrecy::ExposeSecret;
use serde_json::{json, Value};
use uuid::Uuid;

/// Storm limits, and a relay that resends after a fifth of a second.
fn quick_relay(settings: &mut Settings) {
    storm_settings(settings);
    settings.pipeline.relay_grace_ms = 200;
    settings.pipeline.relay_interval_ms = 100;
}

/// Buys one unit for each of `buyers`; every buy must succeed. Returns the order ids.
async fn buy_each(app: &TestApp, sale: &Sale, buyers: std::ops::Range<i64>) -> Vec<Uuid> {
    let requests = buyers.map(|user| (user, format!("rq-{user}"))).collect();
    let results = storm(app, sale, requests, 16).await;
    assert!(
        results.iter().all(|(_, status, _)| *status == 200),
        "{:?}",
        count_codes(&results)
    );
    results.iter().map(|(_, _, body)| order_id(body)).collect()
}

impl TestApp {
    async fn orders_in(&self, sale: &Sale, status: &str) -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM orders WHERE activity_id = $1 AND status = $2")
            .bind(sale.activity_id)
            .bind(status)
            .fetch_one(&self.db)
            .await
            .expect("count orders")
    }

    async fn sold(&self, sale: &Sale) -> i64 {
        sqlx::query_scalar(
            "SELECT sold::BIGINT FROM activity_items WHERE activity_id = $1 AND item_id = $2",
        )
        .bind(sale.activity_id)
        .bind(sale.item_id)
        .fetch_one(&self.db)
        .await
        .expect("sold")
    }

    /// `PRE_CREATED → UNPAID` transitions recorded for the sale's orders.
    async fn completions(&self, sale: &Sale) -> i64 {
        sqlx::query_scalar(
            "SELECT count(*) FROM order_history e JOIN orders o ON o.id = e.order_id
             WHERE o.activity_id = $1 AND e.from_status = 'PRE_CREATED' AND e.to_status = 'UNPAID'",
        )
        .bind(sale.activity_id)
        .fetch_one(&self.db)
        .await
        .expect("count completions")
    }

    /// One create-order message per order, built from its event in its outbox row.
    async fn create_messages(&self, orders: &[Uuid]) -> Vec<Outgoing> {
        self.outbox_events(orders)
            .await
            .into_iter()
            .map(|event| {
                self.state
                    .pipeline
                    .topology
                    .orders_created(std::slice::from_ref(&event))
            })
            .collect()
    }

    async fn publish(&self, messages: &[Outgoing]) {
        let confirmed = self
            .state
            .pipeline
            .control
            .publish(messages)
            .await
            .expect("RabbitMQ reachable");
        assert!(confirmed.iter().all(|ok| *ok), "every publish confirmed");
    }

    /// Orders whose pay timeout waits in the delay queue of the sale's pay timeout (900 s).
    async fn scheduled_timeouts(&self) -> usize {
        let queue = self.state.pipeline.topology.delay_queue(900);
        self.browse(&queue)
            .await
            .iter()
            .map(|body| {
                let message: PayTimeouts = serde_json::from_slice(body).expect("pay timeouts");
                message.order_ids().len()
            })
            .sum()
    }

    /// The buy path's offers with this outcome (`confirmed`, `dropped`, ...).
    fn offers(&self, outcome: &str) -> u64 {
        self.state
            .metrics
            .pipeline
            .published
            .with_label_values(&["offer", outcome])
            .get()
    }

    /// Passes of the outbox relay completed so far.
    fn relay_passes(&self) -> u64 {
        self.state.metrics.pipeline.relay_passes.get()
    }

    /// Create-order events the consumer found processed before (or repeated in a batch).
    fn duplicates_skipped(&self) -> u64 {
        self.state
            .metrics
            .pipeline
            .orders_completed
            .with_label_values(&["duplicate"])
            .get()
    }
}

#[tokio::test]
async fn a_message_delivered_twice_completes_its_order_once() {
    let app = spawn_app_with(|settings| {
        storm_settings(settings);
        // Only this test's two publishes reach the consumer (unless the buy path publishes).
        settings.pipeline.relay_grace_ms = 600_000;
    })
    .await;
    let sale = open_sale(&app, 10, 2).await;
    let (status, body) = app
        .buy(
            7,
            "twice",
            &json!({ "activity_id": sale.activity_id, "item_id": sale.item_id, "quantity": 2 }),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let order_id = order_id(&body);
    let message = app.create_messages(&[order_id]).await.remove(0);
    app.publish(&[message.clone(), message]).await;

    wait::until(
        "the order completed and the duplicate skipped",
        PATIENCE,
        || async { app.orders_in(&sale, "UNPAID").await == 1 && app.duplicates_skipped() >= 1 },
    )
    .await;
    let (status, amount, due_in_s): (String, i64, f64) = sqlx::query_as(
        "SELECT status, amount_cents, EXTRACT(EPOCH FROM pay_deadline - now())::FLOAT8 FROM orders WHERE id = $1",
    )
    .bind(order_id)
    .fetch_one(&app.db)
    .await
    .expect("order");
    assert_eq!(status, "UNPAID");
    assert_eq!(amount, 2 * 4990, "price snapshot from the activity item");
    assert!(
        (880.0..=900.0).contains(&due_in_s),
        "deadline {due_in_s}s away"
    );
    assert_eq!(app.completions(&sale).await, 1);
    assert_eq!(app.sold(&sale).await, 2);
    assert_eq!(app.count("processed_events").await, 1);
    wait::until("its pay timeout scheduled once", PATIENCE, || async {
        app.scheduled_timeouts().await == 1
    })
    .await;
}

#[tokio::test]
async fn the_buy_path_publishes_at_once_and_marks_its_outbox_rows_sent() {
    let app = spawn_app_with(|settings| {
        storm_settings(settings);
        // The relay stays out of it: only the buy path's offers publish.
        settings.pipeline.relay_grace_ms = 600_000;
    })
    .await;
    let sale = open_sale(&app, 50, 1).await;
    buy_each(&app, &sale, 1..51).await;
    wait::until("every order completed", PATIENCE, || async {
        app.orders_in(&sale, "UNPAID").await == 50
    })
    .await;
    wait::until("every outbox row marked sent", PATIENCE, || async {
        app.orders_whose_outbox("x.status = 'sent' AND x.attempts = 0")
            .await
            == 50
    })
    .await;
    // Sequential buyers: each message may carry one order, or the few a batch committed.
    assert!((1..=50).contains(&app.offers("confirmed")));
    assert_eq!(app.completions(&sale).await, 50);
}

#[tokio::test]
async fn orders_the_database_stock_no_longer_covers_fail_and_give_their_stock_back() {
    let app = spawn_app_with(|settings| {
        storm_settings(settings);
        settings.workers = false;
    })
    .await;
    let sale = open_sale(&app, 10, 1).await;
    let orders = buy_each(&app, &sale, 1..4).await;
    assert_eq!(app.redis_stock(&sale).await, 7);
    // Drift: the database says 9 of 10 are sold, so only the oldest of the three fits.
    sqlx::query("UPDATE activity_items SET sold = 9 WHERE activity_id = $1")
        .bind(sale.activity_id)
        .execute(&app.db)
        .await
        .expect("drift");
    app.publish(&app.create_messages(&orders).await).await;
    let _consumer = create_order::spawn(&app.state);
    wait::until("one completed, two failed", PATIENCE, || async {
        app.orders_in(&sale, "UNPAID").await == 1 && app.orders_in(&sale, "FAILED").await == 2
    })
    .await;
    let oldest: String = sqlx::query_scalar(
        "SELECT status FROM orders WHERE activity_id = $1 ORDER BY created_at, id LIMIT 1",
    )
    .bind(sale.activity_id)
    .fetch_one(&app.db)
    .await
    .expect("oldest");
    assert_eq!(oldest, "UNPAID");
    assert_eq!(app.sold(&sale).await, 10, "never past the total");
    assert_eq!(
        app.allocated(&sale).await,
        1,
        "failed orders released their units"
    );
    let given_back: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM stock_restore_journal WHERE redis_restored_at IS NOT NULL",
    )
    .fetch_one(&app.db)
    .await
    .expect("journal");
    assert_eq!(given_back, 2);
    assert_eq!(
        app.redis_stock(&sale).await,
        9,
        "Redis got the two units back"
    );
    assert_eq!(
        app.count("processed_events").await,
        app.create_order_events().await,
        "each event recorded once"
    );
}

#[tokio::test]
async fn a_consumer_that_dies_holding_messages_leaves_them_to_the_next_one() {
    let app = spawn_app_with(|settings| {
        storm_settings(settings);
        settings.workers = false;
    })
    .await;
    let sale = open_sale(&app, 20, 1).await;
    let orders = buy_each(&app, &sale, 1..21).await;
    app.publish(&app.create_messages(&orders).await).await;

    // Hold the item row: the consumer takes its batch, then blocks inside its transaction.
    let mut blocker = app.db.begin().await.expect("begin");
    sqlx::query("SELECT 1 FROM activity_items WHERE activity_id = $1 FOR UPDATE")
        .bind(sale.activity_id)
        .execute(&mut *blocker)
        .await
        .expect("lock the item row");
    let doomed = create_order::spawn(&app.state);
    app.until_waiting_on_a_lock("the consumer blocked mid-batch")
        .await;
    doomed.abort();
    assert!(doomed.await.expect_err("aborted").is_cancelled());
    blocker.rollback().await.expect("release the row");

    let _survivor = create_order::spawn(&app.state);
    wait::until("every order completed", PATIENCE, || async {
        app.orders_in(&sale, "UNPAID").await == 20
    })
    .await;
    assert_eq!(app.completions(&sale).await, 20);
    assert_eq!(app.sold(&sale).await, 20);
    assert_eq!(
        app.count("processed_events").await,
        app.create_order_events().await,
        "each event recorded once"
    );
    wait::until("one pay timeout per order", PATIENCE, || async {
        app.scheduled_timeouts().await == 20
    })
    .await;
}

#[tokio::test]
async fn buyers_get_their_orders_while_rabbitmq_is_unreachable_and_the_relay_delivers_later() {
    let amqp_url = Settings::load().expect("settings").amqp_url;
    let mut rabbit = Proxy::start(&proxy::target_of(amqp_url.expose_secret())).await;
    let through = proxy::through(amqp_url.expose_secret(), &rabbit);
    rabbit.stop().await;
    let app = spawn_app_with(|settings| {
        quick_relay(settings);
        settings.amqp_url = through.into();
        settings.pipeline.confirm_timeout_ms = 1_000;
    })
    .await;
    let sale = open_sale(&app, 30, 1).await;
    buy_each(&app, &sale, 1..31).await;
    wait::until(
        "the relay tried while RabbitMQ was away",
        PATIENCE,
        || async {
            app.orders_whose_outbox("x.status = 'pending' AND x.attempts > 0")
                .await
                == 30
        },
    )
    .await;
    assert_eq!(app.orders_in(&sale, "PRE_CREATED").await, 30);
    assert_eq!(
        app.offers("dropped"),
        30,
        "the buy path dropped its offers, never its buyers"
    );

    rabbit.resume().await;
    wait::until("every order completed", PATIENCE, || async {
        app.orders_in(&sale, "UNPAID").await == 30
    })
    .await;
    assert_eq!(app.completions(&sale).await, 30);
    assert_eq!(app.sold(&sale).await, 30);
    wait::until("every outbox row sent", PATIENCE, || async {
        app.orders_whose_outbox("x.status = 'sent'").await == 30
    })
    .await;
}

#[tokio::test]
async fn pre_orders_an_instance_of_the_previous_release_writes_get_a_row_each_and_complete() {
    let app = spawn_app_with(quick_relay).await;
    let sale = open_sale(&app, 10, 1).await;
    let orders = vec![Uuid::new_v4(), Uuid::new_v4()];
    // The allocation's former signature, as the previous release calls it (no outbox ids).
    let verdicts: Vec<String> = sqlx::query_scalar(
        "SELECT verdict FROM allocate_preorders($1, $2, $3, $4, $5, $6, $7, $8, $9, '{}', '{}', $10)
         ORDER BY member",
    )
    .bind(&orders)
    .bind(vec![sale.activity_id; 2])
    .bind(vec![sale.item_id; 2])
    .bind(vec![1_i64, 2])
    .bind(vec![1_i32; 2])
    .bind(vec![4_990_i64; 2])
    .bind(vec!["previous-1", "previous-2"])
    .bind(vec!["pending"; 2])
    .bind(vec![1_i32; 2])
    .bind("order.create")
    .fetch_all(&app.db)
    .await
    .expect("the former allocation");
    assert_eq!(verdicts, ["written", "written"]);
    // One row per order under the order's id: the event id that release marks sent.
    for order in &orders {
        let events = app.outbox_events(std::slice::from_ref(order)).await;
        assert_eq!(events[0].order_id, *order);
        let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox WHERE event_id = $1")
            .bind(order)
            .fetch_one(&app.db)
            .await
            .expect("its row");
        assert_eq!(rows, 1);
    }
    // This release's relay delivers them and its consumer completes them.
    wait::until("both orders completed", PATIENCE, || async {
        app.orders_in(&sale, "UNPAID").await == 2
    })
    .await;
}

#[tokio::test]
async fn every_pre_order_of_a_storm_becomes_unpaid_exactly_once() {
    let app = spawn_app_with(quick_relay).await;
    let sale = open_sale(&app, 150, 1).await;
    let requests = (1..=400)
        .map(|user| (user, format!("storm-{user}")))
        .collect();
    let results = storm(&app, &sale, requests, 32).await;
    assert_eq!(count_codes(&results).get("OK"), Some(&150));
    wait::until("every order completed", PATIENCE, || async {
        app.orders_in(&sale, "UNPAID").await == 150
    })
    .await;
    assert_eq!(app.completions(&sale).await, 150);
    assert_eq!(app.sold(&sale).await, 150);
    assert_eq!(app.allocated(&sale).await, 150);
    wait::until("one pay timeout per order", PATIENCE, || async {
        app.scheduled_timeouts().await == 150
    })
    .await;
    // Orders committed together share an outbox row and travel together: PostgreSQL's work
    // is per row, RabbitMQ's per message.
    let outbox_rows = app.outbox_rows_of(&sale).await;
    assert!(
        outbox_rows < 150,
        "{outbox_rows} outbox rows for 150 orders"
    );
    let create_messages = app.offers("confirmed");
    assert!(
        create_messages < 150,
        "{create_messages} create-order messages for 150 orders"
    );
    let delay_queue = app.state.pipeline.topology.delay_queue(900);
    let timeout_messages = app.browse(&delay_queue).await.len();
    assert!(
        timeout_messages < 150,
        "{timeout_messages} pay-timeout messages for 150 orders"
    );
}

/// The readiness report of `sale`'s activity, as `caller` sees it.
async fn readiness(app: &TestApp, caller: &Caller, sale: &Sale) -> Readiness {
    let path = format!("/admin/api/readiness?activity_id={}", sale.activity_id);
    let (status, body) = json(app.get(&path, Some(caller)).await).await;
    assert_eq!(status, 200, "{body}");
    serde_json::from_value(body).expect("a readiness report")
}

/// Whether the check `name` of the report is ok.
fn passes(report: &Readiness, name: Name) -> bool {
    report.check(name).expect("the check is reported").ok
}

/// An app whose RabbitMQ is cut off (the proxy in front of it stopped) and whose relay gives
/// a row up after two attempts, trying every 20 ms; and the proxy, to bring RabbitMQ back.
async fn relay_cut_off_from_rabbitmq() -> (TestApp, Proxy) {
    let amqp_url = Settings::load().expect("settings").amqp_url;
    let mut rabbit = Proxy::start(&proxy::target_of(amqp_url.expose_secret())).await;
    let through = proxy::through(amqp_url.expose_secret(), &rabbit);
    rabbit.stop().await;
    let app = spawn_app_with(|settings| {
        quick_relay(settings);
        settings.amqp_url = through.into();
        settings.pipeline.relay_interval_ms = 20;
        settings.pipeline.relay_max_attempts = 2;
    })
    .await;
    (app, rabbit)
}

#[tokio::test]
async fn every_attempt_the_relay_counts_reaches_for_rabbitmq() {
    let (app, _rabbit) = relay_cut_off_from_rabbitmq().await;
    let sale = open_sale(&app, 1, 1).await;
    buy_each(&app, &sale, 1..2).await;
    // After a failed connect the relay's publisher waits a moment before the next; passes in
    // that moment must leave the row alone, so its second attempt is a second connect.
    wait::until("the relay gave up", PATIENCE, || async {
        app.orders_whose_outbox("x.status = 'failed'").await == 1
    })
    .await;
    let (attempts, last_error): (i32, String) =
        sqlx::query_as("SELECT attempts, last_error FROM outbox WHERE status = 'failed'")
            .fetch_one(&app.db)
            .await
            .expect("the failed row");
    assert_eq!(attempts, 2);
    assert!(
        !last_error.contains("moments ago"),
        "an attempt spent without trying: {last_error}"
    );
}

#[tokio::test]
async fn ops_retry_the_rows_the_relay_gave_up_on_once_rabbitmq_is_back() {
    let (app, mut rabbit) = relay_cut_off_from_rabbitmq().await;
    let sale = open_sale(&app, 5, 1).await;
    buy_each(&app, &sale, 1..6).await;
    // Orders committed together share a row: one to five rows carry the five orders.
    let outbox_rows = app.outbox_rows_of(&sale).await;
    let ops = app.caller(Role::Ops, None).await;
    let sre = app.caller(Role::Sre, None).await;
    let merchant = app.caller(Role::Merchant, Some("acme")).await;
    wait::until("the relay gave up", PATIENCE, || async {
        let (_, summary) = json(app.get("/admin/api/outbox", Some(&sre)).await).await;
        summary["failed"] == outbox_rows
    })
    .await;
    let (status, summary) = json(app.get("/admin/api/outbox", Some(&sre)).await).await;
    assert_eq!(status, 200);
    assert_eq!(summary["pending"], 0);
    let rows = summary["failed_rows"].as_array().expect("rows");
    assert_eq!(rows.len() as i64, outbox_rows);
    assert!(rows
        .iter()
        .all(|row| row["attempts"] == 2 && row["last_error"].is_string()));
    let failed_id = rows[0]["id"].as_i64().expect("id");
    let (status, _) = json(app.get("/admin/api/outbox", Some(&merchant)).await).await;
    assert_eq!(status, 403);
    assert_eq!(app.orders_in(&sale, "PRE_CREATED").await, 5);

    // RabbitMQ is back (the consumers are attached again), and still nothing takes the
    // failed rows up: the readiness check says so.
    rabbit.resume().await;
    wait::until(
        "the consumers attached again, the outbox still not ok",
        PATIENCE,
        || async {
            let report = readiness(&app, &sre, &sale).await;
            let seen = (
                passes(&report, Name::Consumers),
                passes(&report, Name::Outbox),
            );
            if seen == (true, false) {
                Ok(())
            } else {
                Err(format!("{:#?}", report.checks))
            }
        },
    )
    .await;
    let report = readiness(&app, &sre, &sale).await;
    let outbox = report.check(Name::Outbox).expect("the outbox check");
    assert!(
        !outbox.ok
            && outbox
                .detail
                .contains(&format!("{outbox_rows} row(s) the relay gave up on")),
        "{outbox:?}"
    );
    assert_eq!(app.orders_in(&sale, "PRE_CREATED").await, 5);

    // Refusals change nothing.
    let retry_all = "/admin/api/outbox/retry";
    let retry_one = format!("/admin/api/outbox/{failed_id}/retry");
    for (caller, path, body, expected, code) in [
        (
            &sre,
            retry_all,
            json!({ "reason": "broker back" }),
            403,
            "FORBIDDEN",
        ),
        (
            &sre,
            retry_one.as_str(),
            json!({ "reason": "broker back" }),
            403,
            "FORBIDDEN",
        ),
        (
            &merchant,
            retry_all,
            json!({ "reason": "broker back" }),
            403,
            "FORBIDDEN",
        ),
        (
            &ops,
            retry_all,
            json!({ "reason": "  " }),
            400,
            "REASON_REQUIRED",
        ),
        (
            &ops,
            retry_one.as_str(),
            json!({ "reason": "" }),
            400,
            "REASON_REQUIRED",
        ),
        (&ops, retry_all, json!({}), 400, "BAD_REQUEST"),
        (
            &ops,
            "/admin/api/outbox/999999999/retry",
            json!({ "reason": "broker back" }),
            404,
            "NOT_FOUND",
        ),
    ] {
        let (status, error) = json(app.post_json(path, Some(caller), &body).await).await;
        assert_eq!(
            (status, error["code"].as_str()),
            (expected, Some(code)),
            "{path}: {error}"
        );
    }
    let (_, summary) = json(app.get("/admin/api/outbox", Some(&sre)).await).await;
    assert_eq!(
        (summary["failed"].clone(), summary["pending"].clone()),
        (json!(outbox_rows), json!(0))
    );
    assert_eq!(app.operator_actions().await, 0);

    let (status, report) = json(
        app.post_json(retry_all, Some(&ops), &json!({ "reason": "broker back" }))
            .await,
    )
    .await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["retried"], outbox_rows);
    wait::until("every order completed", PATIENCE, || async {
        app.orders_in(&sale, "UNPAID").await == 5
    })
    .await;
    assert_eq!(app.completions(&sale).await, 5);
    wait::until("every outbox row sent", PATIENCE, || async {
        let (_, summary) = json(app.get("/admin/api/outbox", Some(&sre)).await).await;
        summary["failed"] == 0 && summary["pending"] == 0
    })
    .await;
    let (_, summary) = json(app.get("/admin/api/outbox", Some(&sre)).await).await;
    assert_eq!(summary["failed_rows"], json!([]));
    wait::until("the outbox check ok again", PATIENCE, || async {
        passes(&readiness(&app, &sre, &sale).await, Name::Outbox)
    })
    .await;

    // A row that is not failed is not the operator's to retry.
    let (status, error) = json(
        app.post_json(&retry_one, Some(&ops), &json!({ "reason": "again" }))
            .await,
    )
    .await;
    assert_eq!(
        (status, error["code"].as_str()),
        (409, Some("NOT_FAILED")),
        "{error}"
    );
    let audited: Vec<(String, String, String, String, Value)> =
        sqlx::query_as("SELECT actor, source, action, target, detail FROM ops_audit WHERE action <> 'activity.prewarm'")
            .fetch_all(&app.db)
            .await
            .expect("ops audit");
    assert_eq!(audited.len(), 1, "{audited:?}");
    let (actor, source, action, target, detail) = &audited[0];
    assert_eq!(
        (
            actor.as_str(),
            source.as_str(),
            action.as_str(),
            target.as_str()
        ),
        (
            ops.username.as_str(),
            "api",
            "outbox.retry_all",
            "outbox:failed"
        )
    );
    assert_eq!(
        detail,
        &json!({ "reason": "broker back", "retried": outbox_rows })
    );
}

#[tokio::test]
async fn a_message_whose_one_order_cannot_be_completed_completes_the_others_and_is_dead_lettered_whole(
) {
    let app = spawn_app_with(|settings| {
        storm_settings(settings);
        settings.workers = false;
        settings.pipeline.delivery_limit = 2;
    })
    .await;
    let sale = open_sale(&app, 10, 1).await;
    let orders = buy_each(&app, &sale, 1..4).await;
    let bad = orders[1];
    // PostgreSQL refuses to complete one of the three (a fault of that row alone).
    sqlx::query(&format!(
        "CREATE FUNCTION refuse_one() RETURNS trigger AS $$
         BEGIN
             IF NEW.id = '{bad}' AND NEW.status = 'UNPAID' THEN
                 RAISE EXCEPTION 'this order cannot be completed';
             END IF;
             RETURN NEW;
         END $$ LANGUAGE plpgsql"
    ))
    .execute(&app.db)
    .await
    .expect("the refusing function");
    sqlx::query(
        "CREATE TRIGGER refuse_one BEFORE UPDATE ON orders FOR EACH ROW EXECUTE FUNCTION refuse_one()",
    )
    .execute(&app.db)
    .await
    .expect("the refusing trigger");
    // The three in one message, as the buy path's publisher sends orders committed together.
    let events = app.outbox_events(&orders).await;
    // (The buy path published its own messages too; this one is told apart by its id.)
    app.publish(&[Outgoing {
        message_id: "three-orders".into(),
        ..app.state.pipeline.topology.orders_created(&events)
    }])
    .await;
    let _consumer = create_order::spawn(&app.state);
    let _sink = dead_letters::spawn_sink(&app.state);
    wait::until(
        "the message dead-lettered after its deliveries",
        PATIENCE,
        || async { dead_letter_of(&app, "three-orders").await.is_some() },
    )
    .await;
    assert_eq!(app.orders_in(&sale, "UNPAID").await, 2);
    assert_eq!(app.orders_in(&sale, "PRE_CREATED").await, 1);
    assert_eq!(app.completions(&sale).await, 2, "the others once each");

    // Mended and requeued, the message completes its last order; the others are skipped.
    sqlx::query("DROP TRIGGER refuse_one ON orders")
        .execute(&app.db)
        .await
        .expect("mend");
    let ops = app.caller(Role::Ops, None).await;
    let id = dead_letter_of(&app, "three-orders")
        .await
        .expect("the dead letter");
    let (status, body) = json(
        app.post_json(
            &format!("/admin/api/dead-letters/{id}/requeue"),
            Some(&ops),
            &json!({ "reason": "mended" }),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    wait::until("every order completed", PATIENCE, || async {
        app.orders_in(&sale, "UNPAID").await == 3
    })
    .await;
    assert_eq!(app.completions(&sale).await, 3);
    assert_eq!(app.sold(&sale).await, 3);
}

/// The id of the dead letter of the message with this message id.
async fn dead_letter_of(app: &TestApp, message_id: &str) -> Option<i64> {
    sqlx::query_scalar("SELECT id FROM dead_letters WHERE message_id = $1")
        .bind(message_id)
        .fetch_optional(&app.db)
        .await
        .expect("dead letters")
}

#[tokio::test]
async fn a_poison_message_is_dead_lettered_and_requeued_only_once() {
    let app = spawn_app_with(|settings| settings.pipeline.delivery_limit = 2).await;
    let topology = &app.state.pipeline.topology;
    let poison = Outgoing {
        message_id: "poison-1".into(),
        payload: b"{not an order".to_vec(),
        ..topology.orders_created(&[OrderCreated {
            order_id: Uuid::new_v4(),
            activity_id: 1,
            item_id: 1,
            user_id: 1,
            quantity: 1,
            amount_cents: 1,
        }])
    };
    app.publish(&[poison]).await;
    wait::until(
        "the poison message in the dead letters",
        PATIENCE,
        || async { app.count("dead_letters").await == 1 },
    )
    .await;
    let ops = app.caller(Role::Ops, None).await;
    let sre = app.caller(Role::Sre, None).await;
    let merchant = app.caller(Role::Merchant, Some("acme")).await;

    let (status, page) = json(app.get("/admin/api/dead-letters", Some(&sre)).await).await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(page["waiting"], 1);
    let letter = &page["dead_letters"][0];
    assert_eq!(letter["source_queue"], topology.create_queue.as_str());
    assert_eq!(letter["reason"], "delivery_limit");
    assert_eq!(letter["routing_key"], "create");
    assert_eq!(letter["message_id"], "poison-1");
    assert_eq!(letter["payload"], "{not an order");
    let id = letter["id"].as_i64().expect("id");
    let requeue = format!("/admin/api/dead-letters/{id}/requeue");

    // Refusals change nothing.
    for (caller, body, expected) in [
        (&sre, json!({ "reason": "try again" }), 403),
        (&merchant, json!({ "reason": "try again" }), 403),
        (&ops, json!({ "reason": "   " }), 400),
        (&ops, json!({}), 400),
    ] {
        let (status, error) = json(app.post_json(&requeue, Some(caller), &body).await).await;
        assert_eq!(status, expected, "{error}");
        assert!(error["code"].is_string());
    }
    let (status, _) = json(app.get("/admin/api/dead-letters", Some(&merchant)).await).await;
    assert_eq!(status, 403);
    let (status, _) = json(app.get("/admin/api/dead-letters?page=0", Some(&sre)).await).await;
    assert_eq!(status, 400);
    let (status, _) = json(app.get("/admin/api/dead-letters?page=x", Some(&sre)).await).await;
    assert_eq!(status, 400);
    let (status, _) = json(
        app.post_json(
            "/admin/api/dead-letters/999999/requeue",
            Some(&ops),
            &json!({ "reason": "r" }),
        )
        .await,
    )
    .await;
    assert_eq!(status, 404);
    assert_eq!(app.operator_actions().await, 0);

    let (status, requeued) = json(
        app.post_json(&requeue, Some(&ops), &json!({ "reason": "drill" }))
            .await,
    )
    .await;
    assert_eq!(status, 200, "{requeued}");
    assert_eq!(requeued["requeued_by"], ops.username.as_str());
    let (status, again) = json(
        app.post_json(&requeue, Some(&ops), &json!({ "reason": "drill" }))
            .await,
    )
    .await;
    assert_eq!(status, 409, "{again}");
    assert_eq!(again["code"], "ALREADY_REQUEUED");
    let (action, source, detail): (String, String, Value) = sqlx::query_as(
        "SELECT action, source, detail FROM ops_audit WHERE action <> 'activity.prewarm'",
    )
    .fetch_one(&app.db)
    .await
    .expect("one audit row");
    assert_eq!(
        (action.as_str(), source.as_str()),
        ("dead_letter.requeue", "api")
    );
    assert_eq!(detail["reason"], "drill");

    // It really went back: still poison, it dies again and is requeued by requeue-all.
    wait::until("the requeued message dead again", PATIENCE, || async {
        app.count("dead_letters").await == 2
    })
    .await;
    let (status, report) = json(
        app.post_json(
            "/admin/api/dead-letters/requeue-all",
            Some(&ops),
            &json!({ "reason": "drain" }),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["requeued"], 1);
}

#[tokio::test]
async fn recorded_orders_are_replayed_exactly_once() {
    let app = spawn_app_with(|settings| {
        quick_relay(settings);
        settings.buy.async_mode = AsyncMode::Record;
    })
    .await;
    let sale = open_sale(&app, 40, 1).await;
    buy_each(&app, &sale, 1..41).await;
    let ops = app.caller(Role::Ops, None).await;
    let sre = app.caller(Role::Sre, None).await;
    // Recorded rows are not the relay's: once every row is past the relay's grace, two more
    // passes (the second one started after that) leave them all recorded.
    let grace_s = app.state.settings.pipeline.relay_grace_ms as f64 / 1000.0;
    wait::until(
        "every outbox row past the relay's grace",
        PATIENCE,
        || async {
            let young: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM outbox WHERE created_at > now() - make_interval(secs => $1)",
            )
            .bind(grace_s)
            .fetch_one(&app.db)
            .await
            .expect("outbox");
            young == 0
        },
    )
    .await;
    let passes = app.relay_passes();
    wait::until("two more relay passes", PATIENCE, || async {
        app.relay_passes() >= passes + 2
    })
    .await;
    let (status, summary) = json(app.get("/admin/api/outbox", Some(&sre)).await).await;
    assert_eq!(status, 200);
    let outbox_rows = app.outbox_rows_of(&sale).await;
    assert_eq!(summary["recorded"], outbox_rows);
    assert_eq!(app.orders_in(&sale, "PRE_CREATED").await, 40);

    let (status, _) = json(
        app.post_json(
            "/admin/api/recordings/replay",
            Some(&sre),
            &json!({ "reason": "r" }),
        )
        .await,
    )
    .await;
    assert_eq!(status, 403);
    let (status, _) = json(
        app.post_json(
            "/admin/api/recordings/replay",
            Some(&ops),
            &json!({ "reason": "" }),
        )
        .await,
    )
    .await;
    assert_eq!(status, 400);
    let recorded = app.orders_whose_outbox("x.status = 'recorded'").await;
    assert_eq!(recorded, 40, "refusals replay nothing");

    let replay = || async {
        json(
            app.post_json(
                "/admin/api/recordings/replay",
                Some(&ops),
                &json!({ "reason": "MQ is back" }),
            )
            .await,
        )
        .await
    };
    let ((first_status, first), (second_status, second)) = tokio::join!(replay(), replay());
    assert_eq!(
        (first_status, second_status),
        (200, 200),
        "{first} {second}"
    );
    assert_eq!(
        first["replayed"].as_i64().unwrap_or(0) + second["replayed"].as_i64().unwrap_or(0),
        40,
        "{first} {second}"
    );
    wait::until("every recorded order completed", PATIENCE, || async {
        app.orders_in(&sale, "UNPAID").await == 40
    })
    .await;
    let (_, third) = replay().await;
    assert_eq!(third["replayed"], 0);
    assert_eq!(app.completions(&sale).await, 40);
    assert_eq!(app.sold(&sale).await, 40);
    assert_eq!(
        app.count("processed_events").await,
        app.create_order_events().await,
        "each event recorded once"
    );
    let audited: i64 =
        sqlx::query_scalar("SELECT count(*) FROM ops_audit WHERE action = 'recordings.replay'")
            .fetch_one(&app.db)
            .await
            .expect("audit");
    assert_eq!(audited, 3);
}
