//! Reconciliation: the holes an operator found (a lost deduct reply, Redis wiped mid-sale,
//! stuck pre-orders, a give-back counted twice, a client hanging up mid-buy), the runs'
//! API, and the sale going on while repairs loop and while Redis loses its data.

use base::config::{AsyncMode, DeductionMode, Settings};
use contract::Role;
use futures::{stream, StreamExt};
use ops::reconcile::redis_state::ItemStateClient;
use ops::reconcile::service::ActivityLock;
use sale::buy::stock_scripts::StockClient;
use sale::{
    buy::stock_scripts::{BuyCall, Steps, Windows},
    orders::Holding,
};
use serde_json::{json, Value};
use std::time::Duration;
use uuid::Uuid;

use crate::support::{
    app::{json, json_and_retry_after, spawn_app_with, TestApp},
    fixtures::{buy_body, open_sale, order_id, storm_settings, token, Caller, Sale},
    proxy::{target_of, through, Proxy},
    wait::{until, PATIENCE},
};

/// A quick leader's pass, so a test sees repairs within a second or two.
pub(crate) fn quick_reconcile(settings: &mut Settings) {
    storm_settings(settings);
    settings.buy.per_user_per_window = 1_000_000;
    settings.reconcile.interval_ms = 200;
    settings.reconcile.marker_grace_ms = 500;
    settings.pipeline.timeout_scan_interval_ms = 200;
}

fn sale_item(sale: &Sale) -> contract::SaleItem {
    contract::SaleItem::new(sale.activity_id, sale.item_id)
}

impl TestApp {
    /// Starts a run and waits for its end; the run as the API answers it.
    pub(crate) async fn reconcile(&self, caller: &Caller, sale: &Sale, repair: bool) -> Value {
        let (status, started) = json(
            self.post_json(
                "/admin/api/reconciliations",
                Some(caller),
                &json!({ "activity_id": sale.activity_id, "repair": repair, "reason": "test" }),
            )
            .await,
        )
        .await;
        assert_eq!(status, 202, "{started}");
        let path = format!("/admin/api/reconciliations/{}", started["id"]);
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            let (_, run) = json(self.get(&path, Some(caller)).await).await;
            if run["status"] != "running" {
                assert_eq!(run["status"], "done", "{run}");
                return run;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the run never ended: {run}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The ledger's first item; a caller polling past its allowance waits as told.
    pub(crate) async fn ledger_item(&self, caller: &Caller, sale: &Sale) -> Value {
        loop {
            let (status, retry_after, ledger) = json_and_retry_after(
                self.get(
                    &format!("/admin/api/activities/{}/ledger", sale.activity_id),
                    Some(caller),
                )
                .await,
            )
            .await;
            if status == 429 {
                let wait: u64 = retry_after
                    .and_then(|s| s.parse().ok())
                    .expect("Retry-After");
                tokio::time::sleep(Duration::from_secs(wait)).await;
                continue;
            }
            assert_eq!(status, 200, "{ledger}");
            return ledger["items"][0].clone();
        }
    }

    /// Units the buyer holds in Redis's buyer record.
    async fn redis_bought(&self, sale: &Sale, user_id: i64) -> i64 {
        ItemStateClient(&self.state.redis)
            .holders(sale_item(sale))
            .await
            .expect("redis")
            .into_iter()
            .find(|(buyer, _)| *buyer == user_id)
            .map_or(0, |(_, units)| units)
    }

    /// Deletes every Redis key of this test's deployment: what a Redis restart without
    /// persistence does to it, without touching other tests' keys.
    async fn wipe_redis(&self) {
        let mut connection = self.state.redis.connection();
        let pattern = format!("{}*", self.state.settings.redis_prefix);
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(&pattern)
            .query_async(&mut connection)
            .await
            .expect("keys");
        if !keys.is_empty() {
            let _: () = redis::cmd("DEL")
                .arg(&keys)
                .query_async(&mut connection)
                .await
                .expect("del");
        }
    }

    async fn stored_status(&self, order: Uuid) -> String {
        sqlx::query_scalar("SELECT status FROM orders WHERE id = $1")
            .bind(order)
            .fetch_one(&self.db)
            .await
            .expect("order")
    }
}

/// The (class, action) of each finding of a run.
pub(crate) fn classes(run: &Value) -> Vec<(String, String)> {
    run["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .map(|f| {
            (
                f["class"].as_str().unwrap_or("?").to_owned(),
                f["action"].as_str().unwrap_or("?").to_owned(),
            )
        })
        .collect()
}

#[tokio::test]
async fn a_deduction_whose_reply_was_lost_is_given_back_and_the_buyer_can_buy_again() {
    let redis_url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let mut proxy = Proxy::start(&target_of(&redis_url)).await;
    let app = spawn_app_with(|settings| {
        quick_reconcile(settings);
        settings.redis_url = through(&redis_url, &proxy).into();
    })
    .await;
    let sale = open_sale(&app, 5, 1).await;
    // The scripts are loaded now, so the deduction goes out as an EVALSHA of its hash.
    app.bought(1, "warm-up", &buy_body(&sale, 1)).await;
    let deduct = redis::Script::new(include_str!("../../lua/buy.lua"));
    proxy.lose_replies_after(deduct.get_hash().as_bytes());
    let (status, answer) = app.buy(2, "reply-lost", &buy_body(&sale, 1)).await;
    assert_eq!(
        (status, answer["code"].as_str()),
        (503, Some("DEGRADED")),
        "{answer}"
    );
    assert!(proxy.losing_replies(), "the deduction's reply was dropped");
    // Redis did deduct: its reply was lost on the way back. New connections, replies again.
    proxy.keep_replies();
    proxy.stop().await;
    proxy.resume().await;
    until("the lost deduction is given back", PATIENCE, || async {
        let stock = app
            .state
            .redis
            .get_integers(&[app.state.redis.stock_key(sale_item(&sale))])
            .await;
        matches!(stock.as_deref(), Ok([Some(4)])) && app.redis_bought(&sale, 2).await == 0
    })
    .await;
    let (status, answer) = app.buy(2, "retry", &buy_body(&sale, 1)).await;
    assert_eq!(status, 200, "the buyer is not locked out: {answer}");
    assert_eq!(app.allocated(&sale).await, 2);
}

#[tokio::test]
async fn a_buyer_who_hangs_up_mid_buy_gets_the_order_on_replay() {
    let app = spawn_app_with(quick_reconcile).await;
    let sale = open_sale(&app, 5, 1).await;
    // Hold the item row, so the pre-order batch waits while the buyer gives up.
    let mut blocker = app.db.begin().await.expect("begin");
    sqlx::query("SELECT 1 FROM activity_items WHERE activity_id = $1 FOR UPDATE")
        .bind(sale.activity_id)
        .execute(&mut *blocker)
        .await
        .expect("lock the item row");
    let impatient = reqwest::Client::builder()
        .timeout(Duration::from_millis(500))
        .build()
        .expect("client");
    let gave_up = impatient
        .post(format!("{}/api/seckill/buy", app.address))
        .bearer_auth(crate::support::fixtures::token(&app, 7))
        .header("X-Request-ID", "hung-up")
        .json(&buy_body(&sale, 1))
        .send()
        .await;
    assert!(gave_up.is_err(), "the buyer gave up before the answer");
    blocker.commit().await.expect("release the row");
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let replayed = loop {
        let (status, answer) = app.buy(7, "hung-up", &buy_body(&sale, 1)).await;
        if status == 200 {
            break answer;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the replay never answered the order: {status} {answer}"
        );
    };
    let order = order_id(&replayed);
    let status = app.stored_status(order).await;
    assert!(
        ["PRE_CREATED", "UNPAID"].contains(&status.as_str()),
        "{status}"
    );
    assert_eq!(app.allocated(&sale).await, 1);
}

#[tokio::test]
async fn redis_wiped_mid_sale_is_re_derived_without_an_operator() {
    let app = spawn_app_with(|settings| {
        quick_reconcile(settings);
        // The leader's pass at its default pace: how long a sale stays degraded is printed.
        settings.reconcile.interval_ms = 2_000;
        // Every lookup goes through the Bloom filter, as once the cached copy expires.
        settings.buy.activity_cache_ms = 0;
    })
    .await;
    let sre = app.caller(Role::Sre, None).await;
    let sale = open_sale(&app, 10, 1).await;
    for user in 1..=3 {
        app.bought(user, &format!("before-{user}"), &buy_body(&sale, 1))
            .await;
    }
    app.wipe_redis().await;
    let wiped = std::time::Instant::now();
    // An item that exists is never answered 404, with or without its Bloom bits.
    let info = app
        .get(&format!("/api/activities/{}", sale.activity_id), None)
        .await;
    assert_eq!(info.status(), 200, "the activity is still there");
    let (status, answer) = app.buy(4, "during", &buy_body(&sale, 1)).await;
    assert!(
        status == 200 || (status == 503 && answer["code"] == "DEGRADED"),
        "{status} {answer}"
    );
    until("the sale resumes", PATIENCE, || async {
        app.buy(5, &format!("after-{}", Uuid::new_v4()), &buy_body(&sale, 1))
            .await
            .0
            == 200
    })
    .await;
    println!("degraded for {:?} after the wipe", wiped.elapsed());
    // A buyer of before the wipe is still known to Redis.
    let (status, answer) = app.buy(1, "again", &buy_body(&sale, 1)).await;
    assert_eq!(
        (status, answer["code"].as_str()),
        (409, Some("ALREADY_PURCHASED"))
    );
    let ledger = app.ledger_item(&sre, &sale).await;
    assert_eq!(ledger["drift"], 0, "{ledger}");
    assert_eq!(
        app.redis_stock(&sale).await + app.allocated(&sale).await,
        10,
        "{ledger}"
    );
}

#[tokio::test]
async fn an_activity_that_opened_without_a_pre_warm_is_loaded_by_the_leader() {
    let app = spawn_app_with(quick_reconcile).await;
    let merchant = app.caller(Role::Merchant, Some("acme")).await;
    let sale = crate::support::fixtures::upcoming_activity(
        &app,
        &merchant,
        &crate::support::fixtures::Listing::storm(3, 1, &[]),
    )
    .await;
    sqlx::query("UPDATE activities SET starts_at = now() - interval '1 minute' WHERE id = $1")
        .bind(sale.activity_id)
        .execute(&app.db)
        .await
        .expect("open");
    until("the open activity sells", PATIENCE, || async {
        let (status, answer) = app
            .buy(1, &format!("try-{}", Uuid::new_v4()), &buy_body(&sale, 1))
            .await;
        assert!(
            status == 200 || answer["code"] == "DEGRADED",
            "never 404 for an item that exists: {status} {answer}"
        );
        status == 200
    })
    .await;
    assert_eq!(app.redis_stock(&sale).await, 2);
}

#[tokio::test]
async fn stuck_pre_orders_are_sent_again_and_flagged_never_failed() {
    let app = spawn_app_with(|settings| {
        storm_settings(settings);
        // The leader's pass stays out of the way: the operator's run does the repair.
        settings.reconcile.interval_ms = 0;
        settings.buy.async_mode = AsyncMode::Record;
    })
    .await;
    let ops = app.caller(Role::Ops, None).await;
    let sale = open_sale(&app, 5, 1).await;
    let failed_outbox = app.bought(1, "failed-outbox", &buy_body(&sale, 1)).await;
    let too_old = app.bought(2, "too-old", &buy_body(&sale, 1)).await;
    // The relay gave up on one; the other's message went out and was lost (dead-lettered,
    // say), two hours ago: long past `fail_stuck_after_s`.
    for (order, outbox) in [(failed_outbox, "failed"), (too_old, "sent")] {
        sqlx::query(
            "UPDATE outbox SET status = $2
             WHERE event_id = (SELECT COALESCE(outbox_event_id, id) FROM orders WHERE id = $1)",
        )
        .bind(order)
        .bind(outbox)
        .execute(&app.db)
        .await
        .expect("set the outbox row");
    }
    for (order, age) in [(failed_outbox, "5 minutes"), (too_old, "2 hours")] {
        sqlx::query(&format!(
            "UPDATE orders SET created_at = now() - interval '{age}' WHERE id = $1"
        ))
        .bind(order)
        .execute(&app.db)
        .await
        .expect("age the pre-order");
    }
    let report = app.reconcile(&ops, &sale, false).await;
    assert_eq!(
        classes(&report),
        vec![
            ("PREORDER_STUCK".to_owned(), "flagged".to_owned()),
            ("PREORDER_STUCK".to_owned(), "none".to_owned())
        ],
        "{report}"
    );
    let repair = app.reconcile(&ops, &sale, true).await;
    assert_eq!(
        classes(&repair),
        vec![
            ("PREORDER_STUCK".to_owned(), "flagged".to_owned()),
            ("PREORDER_STUCK".to_owned(), "repaired".to_owned())
        ],
        "{repair}"
    );
    // Both were answered 200: both are sent again, neither failed, however old.
    until("both re-sent pre-orders complete", PATIENCE, || async {
        app.stored_status(failed_outbox).await == "UNPAID"
            && app.stored_status(too_old).await == "UNPAID"
    })
    .await;
    assert_eq!(app.redis_stock(&sale).await, 3);
    assert_eq!(app.allocated(&sale).await, 2);
    let again = app.reconcile(&ops, &sale, false).await;
    assert!(classes(&again).is_empty(), "{again}");
}

/// The order's status as its buyer reads it (`GET /api/orders/{id}`).
async fn buyer_reads(app: &TestApp, user_id: i64, order: Uuid) -> String {
    let request = app
        .client
        .get(format!("{}/api/orders/{order}", app.address))
        .bearer_auth(token(app, user_id));
    let (status, body) = json(request.send().await.expect("sent")).await;
    assert_eq!(status, 200, "{body}");
    body["status"].as_str().expect("status").to_owned()
}

/// The actions of the leader's findings about one order, oldest first.
async fn actions_on(app: &TestApp, order: Uuid) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT action FROM reconciliation_findings
         WHERE class = 'PREORDER_STUCK' AND order_id = $1 ORDER BY id",
    )
    .bind(order)
    .fetch_all(&app.db)
    .await
    .expect("findings")
}

/// Flips `switches/async` and waits until this instance applied it.
async fn flip_async(app: &TestApp, ops: &Caller, mode: AsyncMode) {
    let value = match mode {
        AsyncMode::Mq => "mq",
        AsyncMode::Record => "record",
    };
    let (status, body) = app
        .flip(
            ops,
            "switches/async",
            &json!({ "value": value, "reason": "the broker's health" }),
            Some(2_000),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    until(
        "the instance applies the async switch",
        PATIENCE,
        || async { app.state.switches.current().async_mode == mode },
    )
    .await;
}

#[tokio::test]
async fn an_order_answered_under_record_is_never_failed_by_the_leader() {
    let app = spawn_app_with(|settings| {
        quick_reconcile(settings);
        settings.pipeline.relay_grace_ms = 200;
        settings.pipeline.relay_interval_ms = 100;
        settings.reconcile.stuck_after_s = 1;
        settings.reconcile.fail_stuck_after_s = 2;
    })
    .await;
    let ops = app.caller(Role::Ops, None).await;
    let sale = open_sale(&app, 5, 1).await;
    flip_async(&app, &ops, AsyncMode::Record).await;
    let order = app.bought(1, "answered", &buy_body(&sale, 1)).await;
    // The switch goes back before the replay: the recorded row is still the replay's.
    flip_async(&app, &ops, AsyncMode::Mq).await;

    // The leader's passes go on past `fail_stuck_after_s`: wait until one has judged the
    // order that late (it flags it, or it moved it on).
    until(
        "the leader judges the order past fail_stuck_after_s",
        PATIENCE,
        || async {
            actions_on(&app, order)
                .await
                .iter()
                .any(|action| action == "flagged")
                || app.stored_status(order).await != "PRE_CREATED"
        },
    )
    .await;
    assert_eq!(
        buyer_reads(&app, 1, order).await,
        "PRE_CREATED",
        "answered 200: never failed by a timer"
    );
    assert_eq!(app.allocated(&sale).await, 1, "its unit is not sold again");
    assert_eq!(app.redis_stock(&sale).await, 4);
    let sre = app.caller(Role::Sre, None).await;
    let (status, readiness) = json(
        app.get(
            &format!("/admin/api/readiness?activity_id={}", sale.activity_id),
            Some(&sre),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{readiness}");
    let stuck = readiness["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .find(|check| check["name"] == "stuck_preorders")
        .expect("the stuck pre-orders check")
        .clone();
    assert_eq!(stuck["ok"], false, "{stuck}");
    assert!(
        stuck["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("1 recorded"),
        "{stuck}"
    );
    until("the stuck gauge counts it", PATIENCE, || async {
        app.metric("seckill_preorders_stuck{outbox=\"recorded\"}")
            .await
            == 1.0
    })
    .await;

    // The replay publishes it, whatever the switch says now: the buyer gets his order.
    let (status, replayed) = json(
        app.post_json(
            "/admin/api/recordings/replay",
            Some(&ops),
            &json!({ "reason": "MQ is back" }),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{replayed}");
    until("the answered order completes", PATIENCE, || async {
        buyer_reads(&app, 1, order).await == "UNPAID"
    })
    .await;
    assert!(
        actions_on(&app, order)
            .await
            .iter()
            .all(|action| action == "flagged"),
        "the leader only flagged it"
    );
}

#[tokio::test]
async fn a_pre_order_flagged_at_every_pass_is_stored_as_one_run() {
    let app = spawn_app_with(|settings| {
        quick_reconcile(settings);
        settings.reconcile.stuck_after_s = 1;
        settings.reconcile.fail_stuck_after_s = 1;
    })
    .await;
    let ops = app.caller(Role::Ops, None).await;
    let sale = open_sale(&app, 5, 1).await;
    // The switch stays on `record`: the pre-order is flagged again at every pass.
    flip_async(&app, &ops, AsyncMode::Record).await;
    let order = app.bought(1, "flagged", &buy_body(&sale, 1)).await;
    until(
        "the leader flags the recorded pre-order",
        PATIENCE,
        || async {
            actions_on(&app, order)
                .await
                .iter()
                .any(|action| action == "flagged")
        },
    )
    .await;
    let from = app.metric("seckill_reconcile_passes_total").await;
    until("five more passes", PATIENCE, || async {
        app.metric("seckill_reconcile_passes_total").await >= from + 5.0
    })
    .await;
    let runs: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM reconciliation_runs WHERE activity_id = $1 AND trigger = 'auto'",
    )
    .bind(sale.activity_id)
    .fetch_one(&app.db)
    .await
    .expect("runs");
    assert_eq!(runs, 1, "the same finding is one run, not one per pass");
}

#[tokio::test]
async fn a_repair_lock_whose_holder_is_cancelled_is_free_for_another_connection() {
    let app = spawn_app_with(|_| {}).await;
    let activity = 42;
    // A holder that takes the lock and then waits for ever; dropped once it holds it, as a
    // request whose client hung up, or a task aborted, drops its future.
    let (held, holds) = tokio::sync::oneshot::channel();
    let mut holder = Box::pin(async {
        let lock = ActivityLock::wait(&app.db, activity, Duration::ZERO)
            .await
            .expect("database")
            .expect("the lock is free");
        held.send(()).expect("the test waits");
        std::future::pending::<()>().await;
        lock.release().await;
    });
    tokio::select! {
        () = &mut holder => unreachable!("the holder never finishes"),
        answer = holds => answer.expect("the holder took the lock"),
    }
    drop(holder);
    // Another repair, on a connection of another pool, gets it within a bounded wait.
    let other = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect_with((*app.db.connect_options()).clone())
        .await
        .expect("another pool");
    let taken = ActivityLock::wait(&other, activity, Duration::from_secs(5))
        .await
        .expect("database");
    assert!(taken.is_some(), "the cancelled holder's lock was released");
}

#[tokio::test]
async fn a_give_back_retried_after_a_re_derivation_is_not_given_twice() {
    let app = spawn_app_with(|settings| {
        storm_settings(settings);
        settings.reconcile.interval_ms = 0;
        // The scanner retries give-backs owed for over two intervals: after the pre-warm.
        settings.pipeline.timeout_scan_interval_ms = 2_000;
    })
    .await;
    let ops = app.caller(Role::Ops, None).await;
    let sale = open_sale(&app, 5, 1).await;
    let order = app.bought(1, "to-cancel", &buy_body(&sale, 1)).await;
    until("the order is unpaid", PATIENCE, || async {
        app.stored_status(order).await == "UNPAID"
    })
    .await;
    // The cancel commits in PostgreSQL as the pay timeout does; its Redis give-back fails
    // (nothing reaches Redis here), so the journal still owes it.
    let mut tx = app.db.begin().await.expect("begin");
    for statement in [
        "UPDATE orders SET status = 'CANCELLED' WHERE id = $1",
        "INSERT INTO stock_restore_journal (order_id, activity_id, item_id, quantity)
         SELECT id, activity_id, item_id, quantity FROM orders WHERE id = $1",
        "UPDATE activity_items ai SET allocated = allocated - o.quantity, sold = sold - o.quantity
         FROM orders o WHERE o.id = $1 AND ai.activity_id = o.activity_id AND ai.item_id = o.item_id",
        "UPDATE buyer_holdings h SET units = units - o.quantity
         FROM orders o WHERE o.id = $1 AND h.activity_id = o.activity_id
           AND h.item_id = o.item_id AND h.user_id = o.user_id",
    ] {
        sqlx::query(statement)
            .bind(order)
            .execute(&mut *tx)
            .await
            .expect(statement);
    }
    tx.commit().await.expect("cancel");
    // A re-derivation (a pre-warm; the db → redis hand-over runs the same) comes first.
    let (status, report) = json(
        app.post_json(
            &format!("/admin/api/activities/{}/prewarm", sale.activity_id),
            Some(&ops),
            &json!({}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(app.redis_stock(&sale).await, 5);
    // Then the scanner retries the give-back it owes.
    until("the journal has the give-back", PATIENCE, || async {
        sqlx::query_scalar::<_, bool>(
            "SELECT redis_restored_at IS NOT NULL FROM stock_restore_journal WHERE order_id = $1",
        )
        .bind(order)
        .fetch_one(&app.db)
        .await
        .expect("journal")
    })
    .await;
    assert_eq!(app.redis_stock(&sale).await, 5, "given back once only");
}

#[tokio::test]
async fn runs_report_then_repair_and_a_second_run_finds_nothing() {
    let app = spawn_app_with(|settings| {
        storm_settings(settings);
        settings.reconcile.interval_ms = 0;
        settings.reconcile.marker_grace_ms = 0;
    })
    .await;
    let (ops, sre) = (
        app.caller(Role::Ops, None).await,
        app.caller(Role::Sre, None).await,
    );
    let sale = open_sale(&app, 10, 2).await;
    app.bought(1, "kept", &buy_body(&sale, 1)).await;
    // A deduction without its pre-order (a server gone between the two), and Redis off by
    // two units for no order at all.
    let lost = Uuid::new_v4();
    let holding = Holding {
        sale: sale_item(&sale),
        buyer: contract::UserId(9),
        quantity: 1,
    };
    let deducted = StockClient(&app.state.redis)
        .buy(
            &BuyCall {
                take: holding,
                request_id: "lost",
                client: "127.0.0.1",
                windows: Windows {
                    length_s: 1,
                    per_buyer: 1,
                    per_address: 1,
                    per_item: 1,
                },
                per_user_limit: 2,
                order: lost,
                seats: &[],
                code: None,
            },
            Steps::Deduct,
        )
        .await
        .expect("deduct");
    assert_eq!(deducted, (0, b"8".to_vec()));
    let mut connection = app.state.redis.connection();
    let _: i64 = redis::cmd("DECRBY")
        .arg(app.state.redis.stock_key(sale_item(&sale)))
        .arg(2)
        .query_async(&mut connection)
        .await
        .expect("decr");
    let ledger = app.ledger_item(&sre, &sale).await;
    assert_eq!(
        (
            ledger["redis_stock"].as_i64(),
            ledger["allocated"].as_i64(),
            ledger["in_flight"].as_i64()
        ),
        (Some(6), Some(1), Some(1)),
        "{ledger}"
    );
    assert_eq!(ledger["drift"], 2, "{ledger}");

    let (status, refused) = json(
        app.post_json(
            "/admin/api/reconciliations",
            Some(&sre),
            &json!({ "activity_id": sale.activity_id, "repair": true, "reason": "x" }),
        )
        .await,
    )
    .await;
    assert_eq!(status, 403, "an sre reports only: {refused}");
    let (status, refused) = json(
        app.post_json(
            "/admin/api/reconciliations",
            Some(&ops),
            &json!({ "activity_id": sale.activity_id, "repair": true }),
        )
        .await,
    )
    .await;
    assert_eq!(
        (status, refused["code"].as_str()),
        (400, Some("REASON_REQUIRED"))
    );

    let report = app.reconcile(&sre, &sale, false).await;
    let mut found = classes(&report);
    found.sort();
    assert_eq!(
        found,
        vec![
            ("REDIS_DEDUCTED_NO_ORDER".to_owned(), "none".to_owned()),
            ("REDIS_DEDUCTED_NO_ORDER".to_owned(), "none".to_owned())
        ],
        "the lost deduction and the drift: {report}"
    );
    assert_eq!(app.redis_stock(&sale).await, 6, "a report changes nothing");

    let repair = app.reconcile(&ops, &sale, true).await;
    assert!(
        classes(&repair)
            .iter()
            .all(|(class, action)| class == "REDIS_DEDUCTED_NO_ORDER" && action == "repaired"),
        "{repair}"
    );
    assert_eq!(app.redis_stock(&sale).await, 9);
    assert_eq!(
        app.redis_bought(&sale, 9).await,
        0,
        "the buyer's record went back too"
    );
    assert_eq!(app.stored_status(lost).await, "FAILED", "voided");
    let again = app.reconcile(&ops, &sale, true).await;
    assert!(classes(&again).is_empty(), "{again}");
    let (status, runs) = json(
        app.get(
            &format!(
                "/admin/api/reconciliations?activity_id={}",
                sale.activity_id
            ),
            Some(&sre),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(runs.as_array().map(Vec::len), Some(3), "{runs}");
    assert_eq!(runs[1]["repaired"], 2, "{runs}");
}

/// Buys until the answer is not a momentary 503, with a new request id each try (a 503
/// is kept for replays of its request id).
async fn buy_through(app: &TestApp, sale: &Sale, user: i64) -> (u16, Value) {
    for attempt in 0.. {
        let (status, answer) = app
            .buy(user, &format!("u{user}-{attempt}"), &buy_body(sale, 1))
            .await;
        if !matches!(status, 429 | 503) || attempt > 200 {
            return (status, answer);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    unreachable!()
}

/// Exactly `stock` buys of a one-per-buyer sale were answered 200 and every other
/// `SOLD_OUT`; PostgreSQL holds exactly the stock, and no buyer more than one unit.
async fn sold_exactly(app: &TestApp, sale: &Sale, answers: &[(u16, Value)], stock: i64) {
    let sold = answers.iter().filter(|(status, _)| *status == 200).count() as i64;
    assert_eq!(sold, stock, "exactly the stock is sold");
    assert!(answers
        .iter()
        .all(|(status, answer)| *status == 200 || answer["code"] == "SOLD_OUT"));
    assert_eq!(app.allocated(sale).await, stock);
    let over: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM (SELECT user_id FROM orders WHERE activity_id = $1
         AND status IN ('PRE_CREATED', 'UNPAID', 'PAID') GROUP BY user_id HAVING SUM(quantity) > 1) o",
    )
    .bind(sale.activity_id)
    .fetch_one(&app.db)
    .await
    .expect("count");
    assert_eq!(over, 0, "no buyer over the limit");
}

#[tokio::test]
async fn a_storm_sells_exactly_the_stock_while_repairs_loop() {
    let app = spawn_app_with(quick_reconcile).await;
    let ops = app.caller(Role::Ops, None).await;
    let sale = open_sale(&app, 300, 1).await;
    let storming = async {
        stream::iter(1..=2000_i64)
            .map(|user| {
                let (app, sale) = (&app, &sale);
                async move { buy_through(app, sale, user).await }
            })
            .buffer_unordered(48)
            .collect::<Vec<_>>()
            .await
    };
    let done = std::sync::atomic::AtomicBool::new(false);
    let repairing = async {
        let mut runs = 0;
        while !done.load(std::sync::atomic::Ordering::SeqCst) {
            app.reconcile(&ops, &sale, true).await;
            runs += 1;
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        runs
    };
    let (answers, runs) = tokio::join!(
        async {
            let answers = storming.await;
            done.store(true, std::sync::atomic::Ordering::SeqCst);
            answers
        },
        repairing
    );
    assert!(runs > 0);
    sold_exactly(&app, &sale, &answers, 300).await;
    let report = app.reconcile(&ops, &sale, false).await;
    assert!(classes(&report).is_empty(), "{report}");
    assert_eq!(app.redis_stock(&sale).await, 0);
}

#[tokio::test]
async fn a_storm_survives_redis_losing_its_data() {
    let app = spawn_app_with(quick_reconcile).await;
    let sre = app.caller(Role::Sre, None).await;
    let sale = open_sale(&app, 300, 1).await;
    let storming = stream::iter(1..=900_i64)
        .map(|user| {
            let (app, sale) = (&app, &sale);
            async move { buy_through(app, sale, user).await }
        })
        .buffer_unordered(32)
        .collect::<Vec<_>>();
    let wiping = async {
        until("a third is sold", PATIENCE, || async {
            app.allocated(&sale).await >= 100
        })
        .await;
        app.wipe_redis().await;
    };
    let (answers, ()) = tokio::join!(storming, wiping);
    let sold = answers.iter().filter(|(status, _)| *status == 200).count();
    assert!(sold <= 300, "never oversold: {sold}");
    assert!(app.allocated(&sale).await <= 300);
    until("Redis and PostgreSQL agree again", PATIENCE, || async {
        let ledger = app.ledger_item(&sre, &sale).await;
        ledger["drift"] == 0 && ledger["in_flight"] == 0
    })
    .await;
    assert_eq!(
        app.redis_stock(&sale).await + app.allocated(&sale).await,
        300
    );
}

#[tokio::test]
async fn only_the_run_that_raised_a_fence_lowers_it_or_writes_behind_it() {
    let app = spawn_app_with(|_| {}).await;
    let redis = &app.state.redis;
    let sale = contract::SaleItem::new(31, 32);
    let fence = redis.fence_key(sale);
    // A first run's fence expired while it worked; a second run raised the fence again.
    ItemStateClient(redis)
        .raise_fence(sale, "first", 10_000)
        .await
        .expect("fence");
    ItemStateClient(redis)
        .raise_fence(sale, "second", 10_000)
        .await
        .expect("fence");
    assert!(
        !ItemStateClient(redis)
            .lower_fence(sale, "first")
            .await
            .expect("lower"),
        "the first run no longer owns the fence"
    );
    let holder: Option<String> = redis::cmd("GET")
        .arg(&fence)
        .query_async(&mut redis.connection())
        .await
        .expect("get");
    assert_eq!(holder.as_deref(), Some("second"), "the fence stays up");
    // Nor does the first run's re-derivation land behind the second run's fence.
    let derived = ops::reconcile::redis_state::Derived {
        stock: 5,
        holders: &[(42, 1)],
        seats: &[],
        restored: &[],
        expires_at: chrono::Utc::now() + chrono::Duration::hours(1),
    };
    assert!(!ItemStateClient(redis)
        .rederive(sale, "first", &derived)
        .await
        .expect("write"));
    let stock: Option<i64> = redis::cmd("GET")
        .arg(redis.stock_key(sale))
        .query_async(&mut redis.connection())
        .await
        .expect("get");
    assert_eq!(stock, None, "nothing written");
    assert!(ItemStateClient(redis)
        .rederive(sale, "second", &derived)
        .await
        .expect("write"));
    assert_eq!(
        ItemStateClient(redis).holders(sale).await.expect("holders"),
        vec![(42, 1)]
    );
    assert!(ItemStateClient(redis)
        .lower_fence(sale, "second")
        .await
        .expect("lower"));
    let up: bool = redis::cmd("EXISTS")
        .arg(&fence)
        .query_async(&mut redis.connection())
        .await
        .expect("exists");
    assert!(!up, "its owner lowered it");
}

/// A large item is written in chunks into staging keys of its run and swapped in at once:
/// every buyer record and given-back order arrives, what Redis held before (a record no
/// holding explains, a marker) is gone, and no staging key stays behind.
#[tokio::test]
async fn a_large_item_is_re_derived_in_chunks_and_swapped_in_whole() {
    let app = spawn_app_with(|_| {}).await;
    let redis = &app.state.redis;
    let sale = contract::SaleItem::new(33, 34);
    let mut connection = redis.connection();
    let _: () = redis::pipe()
        .hset(redis.bought_key(sale), 999_999, 5)
        .ignore()
        .hset(redis.pending_key(sale), Uuid::new_v4().to_string(), "1 1 1")
        .ignore()
        .query_async(&mut connection)
        .await
        .expect("stale state");
    let holders: Vec<(i64, i64)> = (1..=2_500).map(|buyer| (buyer, 1 + buyer % 2)).collect();
    let restored: Vec<Uuid> = (0..1_500).map(|_| Uuid::new_v4()).collect();
    ItemStateClient(redis)
        .raise_fence(sale, "large", 10_000)
        .await
        .expect("fence");
    let derived = ops::reconcile::redis_state::Derived {
        stock: 7,
        holders: &holders,
        seats: &[],
        restored: &restored,
        expires_at: chrono::Utc::now() + chrono::Duration::hours(1),
    };
    assert!(ItemStateClient(redis)
        .rederive(sale, "large", &derived)
        .await
        .expect("write"));
    let mut recorded = ItemStateClient(redis).holders(sale).await.expect("holders");
    recorded.sort_unstable();
    assert_eq!(recorded, holders);
    let (stock, given_back, markers, ttl): (i64, i64, bool, i64) = redis::pipe()
        .get(redis.stock_key(sale))
        .scard(redis.restored_key(sale))
        .exists(redis.pending_key(sale))
        .ttl(redis.bought_key(sale))
        .query_async(&mut connection)
        .await
        .expect("read");
    assert_eq!((stock, given_back, markers), (7, 1_500, false));
    assert!(ttl > 0, "the records expire with the activity");
    let staged: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{}*rederive:*", app.state.settings.redis_prefix))
        .query_async(&mut connection)
        .await
        .expect("keys");
    assert!(staged.is_empty(), "{staged:?}");
    assert!(ItemStateClient(redis)
        .lower_fence(sale, "large")
        .await
        .expect("lower"));
}

/// Pre-warms the sale's activity through `instance`; it must succeed.
async fn prewarm_on(instance: &TestApp, caller: &Caller, sale: &Sale) {
    let path = format!("/admin/api/activities/{}/prewarm", sale.activity_id);
    let (status, report) = json(instance.post_json(&path, Some(caller), &json!({})).await).await;
    assert_eq!(status, 200, "{report}");
}

/// Re-derives one item from three places at once, round after round, in the middle of a
/// storm: pre-warms on two instances, and the deduction hand-over of both (the switch
/// flipped to `db` and back), with the leader's pass running. They take turns under the
/// activity lock, each behind a fence of its own run: every pre-warm succeeds, exactly the
/// stock is sold, no buyer goes over the limit, Redis ends with what PostgreSQL left, and
/// no run ever found its fence another's (no lower or write by a non-owner was tried).
#[tokio::test]
async fn one_item_re_derived_from_three_places_at_once_mid_storm_sells_exactly_its_stock() {
    let tuned = |settings: &mut Settings| {
        quick_reconcile(settings);
        // No local sold-out flag: the second wave asks Redis until it is empty.
        settings.buy.sold_out_flag_ms = 0;
    };
    let app = spawn_app_with(tuned).await;
    let sibling = app.spawn_sibling(tuned).await;
    let ops = app.caller(Role::Ops, None).await;
    let sale = open_sale(&app, 300, 1).await;
    let hand_over = || async {
        for instance in [&app, &sibling] {
            for mode in [DeductionMode::Db, DeductionMode::Redis] {
                let mut values = (*instance.state.switches.current()).clone();
                values.deduction = mode;
                instance.state.switches.replace(values);
                // As the first request under `db` does: Redis stops serving, so the flip
                // back re-derives it.
                instance.state.deduction.mode(mode);
            }
        }
        for instance in [&app, &sibling] {
            until("the hand-over re-derived Redis", PATIENCE, || async {
                instance.state.deduction.mode(DeductionMode::Redis) == DeductionMode::Redis
            })
            .await;
        }
    };
    let (stop, stopped) = tokio::sync::watch::channel(false);
    // Each round starts the three at the same moment; a pause between rounds lets buyers in.
    let rederiving = async {
        let mut rounds = 0;
        while !*stopped.borrow() {
            tokio::join!(
                prewarm_on(&app, &ops, &sale),
                prewarm_on(&sibling, &ops, &sale),
                hand_over()
            );
            rounds += 1;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        rounds
    };
    let storming = async {
        let answers = stream::iter(1..=900_i64)
            .map(|user| {
                let (target, sale) = (if user % 2 == 0 { &app } else { &sibling }, &sale);
                async move { buy_through(target, sale, user).await }
            })
            .buffer_unordered(32)
            .collect::<Vec<_>>()
            .await;
        stop.send_replace(true);
        answers
    };
    let (first_wave, rounds) = tokio::join!(storming, rederiving);
    assert!(rounds > 0);
    // Whatever is left sells to fresh buyers once the re-derivations stop: a Redis that
    // over- or under-stated the stock would show here.
    let second_wave = stream::iter(1_001..=1_400_i64)
        .map(|user| {
            let (app, sale) = (&app, &sale);
            async move { buy_through(app, sale, user).await }
        })
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await;
    let answers: Vec<_> = first_wave.into_iter().chain(second_wave).collect();
    sold_exactly(&app, &sale, &answers, 300).await;
    assert_eq!(app.redis_stock(&sale).await, 0);
    for instance in [&app, &sibling] {
        assert_eq!(
            instance
                .metric("seckill_reconcile_fence_refused_total")
                .await,
            0.0,
            "no run found its fence another's"
        );
    }
}

/// An instance without the leader's pass, a sale of ten units, and its ledger's path.
async fn ledger_of_a_sale() -> (TestApp, String) {
    let app = spawn_app_with(|settings| {
        storm_settings(settings);
        settings.reconcile.interval_ms = 0;
    })
    .await;
    let sale = open_sale(&app, 10, 1).await;
    let path = format!("/admin/api/activities/{}/ledger", sale.activity_id);
    (app, path)
}

/// Twenty viewers polling one activity's ledger at once cost Redis one computation, not
/// twenty: the ledger is computed at most once a second per instance and shared.
#[tokio::test]
async fn twenty_viewers_of_a_ledger_share_one_computation_a_second() {
    let (app, path) = ledger_of_a_sale().await;
    let mut viewers = Vec::new();
    for _ in 0..20 {
        viewers.push(app.caller(Role::Ops, None).await);
    }
    let before = app.metric("seckill_ledger_computations_total").await;
    let started = std::time::Instant::now();
    let answers = futures::future::join_all(
        viewers
            .iter()
            .map(|viewer| async { json(app.get(&path, Some(viewer)).await).await }),
    )
    .await;
    let elapsed = started.elapsed();
    for (status, ledger) in &answers {
        assert_eq!(*status, 200, "{ledger}");
        assert_eq!(ledger["items"][0]["total"], 10, "{ledger}");
    }
    let computed = app.metric("seckill_ledger_computations_total").await - before;
    // One computation, and one more for every whole second the burst took on a slow machine.
    assert!(
        computed >= 1.0 && computed <= 1.0 + elapsed.as_secs_f64().floor(),
        "{computed} computations for 20 viewers in {elapsed:?}"
    );
}

/// One caller polling faster than its allowance is told to wait, with a code and a
/// Retry-After; other callers are not.
#[tokio::test]
async fn a_caller_polling_the_ledger_too_fast_gets_429_with_retry_after() {
    let (app, path) = ledger_of_a_sale().await;
    let (poller, other) = (
        app.caller(Role::Ops, None).await,
        app.caller(Role::Sre, None).await,
    );
    let answers = futures::future::join_all(
        (0..12).map(|_| async { json_and_retry_after(app.get(&path, Some(&poller)).await).await }),
    )
    .await;
    let refused: Vec<_> = answers
        .iter()
        .filter(|(status, ..)| *status == 429)
        .collect();
    assert!(refused.len() >= 6, "{answers:?}");
    for (_, retry_after, answer) in &refused {
        assert_eq!(answer["code"], "RATE_LIMITED", "{answer}");
        assert_eq!(retry_after.as_deref(), Some("1"));
    }
    assert!(answers
        .iter()
        .all(|(status, ..)| *status == 200 || *status == 429));
    let (status, _) = json(app.get(&path, Some(&other)).await).await;
    assert_eq!(status, 200, "another caller is not held back");
}
