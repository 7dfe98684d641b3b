//! The buy funnel against real Redis and PostgreSQL: storms on one hot
//! item never oversell nor break per-user limits, replays return the first answer, bad
//! input changes nothing, and a pre-order that cannot be written gives its stock back.

use crate::support::{
    app::{json, json_and_retry_after, spawn_app_with, TestApp},
    fixtures::{
        buy_body, count_codes, open_activity, open_sale, open_sale_of, order_id, storm,
        storm_settings, token, upcoming_activity, Listing, Sale, TestClock,
    },
    raw_http::response,
    redis_cluster::RedisCluster,
    wait::{self, PATIENCE},
};
use base::config::{DeductionMode, Settings};
use contract::Role;
use futures::{stream, StreamExt};
use ops::reconcile::redis_state::ItemStateClient;
use reqwest::StatusCode;
use sale::{buy::challenge::MIN_THINKING_TIME, identity::buyer_token};
use secrecy::ExposeSecret;
use serde_json::{json, Value};
use sqlx::{Connection, PgConnection};
use std::collections::{HashMap, HashSet};
use uuid::Uuid;

#[tokio::test]
async fn a_storm_of_2000_buyers_sells_exactly_the_stock() {
    storm_of_2000_buyers(DeductionMode::Redis).await;
}

#[tokio::test]
async fn a_storm_on_the_database_path_sells_exactly_the_stock() {
    storm_of_2000_buyers(DeductionMode::Db).await;
}

/// Found when buyers came as a sale's crowd does (an open loop at a quarter of `/healthz`'s
/// rate): every request that missed the activity's copy sent its own read to PostgreSQL,
/// so each time the copy expired a flood of reads took the pool the pre-orders need, and the
/// server served fewer buys than in a closed loop. Buyers who miss it at once share one read.
#[tokio::test]
async fn buyers_who_miss_the_activity_copy_at_once_share_one_read_of_it() {
    let app = spawn_app_with(|settings| {
        storm_settings(settings);
        // No copy expires during the test: every read counted is a miss of this storm's.
        settings.buy.activity_cache_ms = 600_000;
        // The lock below also stops every background job that reads the activities, each
        // holding one of the pool's connections meanwhile: the catalogue's read must still
        // find one, however long the buyers take to arrive.
        settings.db_max_connections = 32;
    })
    .await;
    // The pre-warm drops the copy, so the storm's first buyer misses it.
    let sale = open_sale(&app, 100, 1).await;
    let reads_before = app.metric("seckill_catalogue_reads_total").await;
    // The table locked, the first read waits in PostgreSQL until every buyer has come. The
    // lock is held on a connection of its own, none of the server's.
    let mut locker = PgConnection::connect(app.state.settings.database_url.expose_secret())
        .await
        .expect("connect");
    let mut lock = locker.begin().await.expect("begin");
    sqlx::query("LOCK TABLE activities IN ACCESS EXCLUSIVE MODE")
        .execute(&mut *lock)
        .await
        .expect("lock the activities");
    let buyers: i64 = 20;
    let requests = (1..=buyers)
        .map(|user| (user, format!("miss-{user}")))
        .collect();
    let (results, ()) = tokio::join!(storm(&app, &sale, requests, 20), async {
        wait::until("every buyer waits for the activity", PATIENCE, || async {
            app.metric("seckill_admission_in_flight").await == buyers as f64
        })
        .await;
        lock.commit().await.expect("release the lock");
    });
    assert_eq!(count_codes(&results).get("OK"), Some(&20), "{results:?}");
    assert_eq!(
        app.metric("seckill_catalogue_reads_total").await - reads_before,
        1.0,
        "one read for the 20 buyers who missed the copy together"
    );
}

/// Every request that misses an expired copy used to ask Redis's Bloom filter before
/// reading the activity again: in an open-loop run, about one round trip in ten. The copy
/// says the id is real; only ids without one need the filter.
#[tokio::test]
async fn an_expired_copy_is_read_again_without_asking_the_bloom_filter() {
    let app = spawn_app_with(|settings| {
        storm_settings(settings);
        // Every lookup finds the copy expired.
        settings.buy.activity_cache_ms = 0;
    })
    .await;
    let sale = open_sale(&app, 10, 1).await;
    let (status, body) = app.buy(1, "first", &buy_body(&sale, 1)).await;
    assert_eq!(status, 200, "{body}");
    // A filter that answers "absent" to every key: were it asked, the next buyer would be
    // told the item does not exist.
    let bloom = format!("{}bloom:{{items}}", app.state.settings.redis_prefix);
    let mut redis = app.state.redis.connection();
    let bits: usize = redis::cmd("STRLEN")
        .arg(&bloom)
        .query_async(&mut redis)
        .await
        .expect("strlen");
    assert!(bits > 0, "the pre-warm filled the filter");
    redis::cmd("SET")
        .arg(&bloom)
        .arg(vec![0_u8; bits])
        .query_async::<()>(&mut redis)
        .await
        .expect("empty the filter");
    let (status, body) = app.buy(2, "second", &buy_body(&sale, 1)).await;
    assert_eq!(status, 200, "{body}");
}

async fn storm_of_2000_buyers(mode: DeductionMode) {
    let app = spawn_app_with(|settings| {
        storm_settings(settings);
        settings.buy.deduction = mode;
    })
    .await;
    let sale = open_sale(&app, 100, 1).await;
    let requests = (1..=2_000)
        .map(|user| (user, format!("r-{user}")))
        .collect();
    let results = storm(&app, &sale, requests, 64).await;
    let codes = count_codes(&results);
    assert_eq!(codes.get("OK"), Some(&100), "{codes:?}");
    assert_eq!(codes.get("SOLD_OUT"), Some(&1_900), "{codes:?}");
    assert_eq!(app.held_by_orders(&sale).await, 100);
    assert_eq!(app.allocated(&sale).await, 100);
    let redis_stock = if mode == DeductionMode::Redis { 0 } else { 100 };
    assert_eq!(
        app.redis_stock(&sale).await,
        redis_stock,
        "the database path leaves Redis alone"
    );
    // The pipeline may already have completed some: PRE_CREATED or UNPAID, nothing else.
    let orders: i64 =
        sqlx::query_scalar("SELECT count(*) FROM orders WHERE status IN ('PRE_CREATED', 'UNPAID')")
            .fetch_one(&app.db)
            .await
            .expect("count");
    assert_eq!(orders, 100);
    let outbox = app
        .orders_whose_outbox("x.status IN ('pending', 'sent')")
        .await;
    assert_eq!(outbox, 100, "every pre-order has its outbox row");
    // Every success names an order that exists and belongs to that buyer.
    for (user, status, body) in &results {
        if *status == 200 {
            let id: uuid::Uuid = body["order_id"]
                .as_str()
                .expect("order id")
                .parse()
                .expect("uuid");
            let owner: i64 = sqlx::query_scalar("SELECT user_id FROM orders WHERE id = $1")
                .bind(id)
                .fetch_one(&app.db)
                .await
                .expect("order exists");
            assert_eq!(owner, *user);
        }
    }
}

#[tokio::test]
async fn retrying_buyers_never_exceed_their_limit() {
    retrying_buyers(DeductionMode::Redis).await;
}

#[tokio::test]
async fn retrying_buyers_never_exceed_their_limit_on_the_database_path() {
    retrying_buyers(DeductionMode::Db).await;
}

async fn retrying_buyers(mode: DeductionMode) {
    let app = spawn_app_with(|settings| {
        storm_settings(settings);
        settings.buy.per_user_per_window = 100;
        settings.buy.deduction = mode;
    })
    .await;
    let sale = open_sale(&app, 1_000, 2).await;
    // 300 buyers, five distinct requests each, all at once.
    let requests = (1..=300)
        .flat_map(|user| (0..5).map(move |n| (user, format!("u{user}-try{n}"))))
        .collect();
    let results = storm(&app, &sale, requests, 64).await;
    let codes = count_codes(&results);
    assert_eq!(codes.get("OK"), Some(&600), "{codes:?}");
    assert_eq!(codes.get("ALREADY_PURCHASED"), Some(&900), "{codes:?}");
    let over_limit: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT user_id FROM orders GROUP BY user_id HAVING SUM(quantity) > 2) AS over",
    )
    .fetch_one(&app.db)
    .await
    .expect("count");
    assert_eq!(over_limit, 0);
    assert_eq!(app.allocated(&sale).await, 600);
    if mode == DeductionMode::Redis {
        assert_eq!(
            app.redis_stock(&sale).await + app.held_by_orders(&sale).await,
            1_000
        );
    }
}

/// Waits until a pre-order batch's statement waits on a lock. The statement is known by its
/// opening: PostgreSQL shows a statement's first kilobyte only.
async fn until_a_batch_waits(app: &TestApp, what: &str) {
    app.until_a_statement_waits_on_a_lock(what, "WITH m AS (%")
        .await;
}

/// Every writer that moves an item's stock and its buyers' holdings locks the item row
/// first, so that two of them never wait for each other. A batch that waits for the item
/// row must therefore hold no holding yet: here a transaction holds the row, as a batch
/// decided member by member does, while the next buy of a buyer who holds a unit waits for
/// it; the transaction then takes that buyer's holding, at once. A batch that wrote the
/// holdings before the item row held it: the two waited for each other until PostgreSQL
/// rolled one back, and a buyer of the batch could be told 503.
#[tokio::test]
async fn a_batch_waiting_for_the_item_row_holds_no_holding_of_its_buyers() {
    let app = spawn_app_with(storm_settings).await;
    let sale = open_sale(&app, 10, 2).await;
    app.bought(5, "first", &buy_body(&sale, 1)).await;
    let mut allocation = app.hold_item_row(&sale).await;
    let body = buy_body(&sale, 1);
    let second = app.buy(5, "second", &body);
    let holding = async {
        // The create-order consumer may wait for the row too, completing the first order.
        until_a_batch_waits(&app, "the second buy's batch waits for the item row").await;
        let taken = sqlx::query(
            "SELECT 1 FROM buyer_holdings
             WHERE activity_id = $1 AND item_id = $2 AND user_id = 5
             FOR NO KEY UPDATE NOWAIT",
        )
        .bind(sale.activity_id)
        .bind(sale.item_id)
        .execute(&mut *allocation)
        .await;
        allocation.commit().await.expect("commit");
        taken
    };
    let ((status, answer), taken) = tokio::join!(second, holding);
    taken.expect("the buyer's holding is free while his batch waits for the item row");
    assert_eq!(status, 200, "{answer}");
    assert_eq!(app.allocated(&sale).await, 2);
}

/// PostgreSQL breaks a deadlock by rolling one of its transactions back. When that is a
/// pre-order batch, nothing of it was written and none of its members caused it: the batch
/// is written again, and its buyers get their orders. A batch of one member used to answer
/// its buyer 503 then.
///
/// The deadlock: a transaction holds the buyer's holding and waits for the batch's order
/// (the same request id), while the batch, let through the item row, waits for that
/// holding. PostgreSQL looks for a deadlock in a transaction that has waited a second, so
/// the other transaction, which waits first, is given longer: the batch is the one aborted.
#[tokio::test]
async fn a_batch_aborted_to_break_a_deadlock_is_written_again() {
    let app = spawn_app_with(storm_settings).await;
    let sale = open_sale(&app, 10, 2).await;
    let item_row = app.hold_item_row(&sale).await;
    let body = buy_body(&sale, 1);
    let buy = app.buy(5, "deadlocked", &body);
    let deadlock = async {
        until_a_batch_waits(&app, "the batch, its order written, waits for the item row").await;
        let mut other = app.db.begin().await.expect("begin");
        sqlx::query("SET LOCAL deadlock_timeout = '60s'")
            .execute(&mut *other)
            .await
            .expect("deadlock_timeout");
        sqlx::query(
            "INSERT INTO buyer_holdings (activity_id, item_id, user_id, units, per_user_limit)
             VALUES ($1, $2, 5, 1, 2)",
        )
        .bind(sale.activity_id)
        .bind(sale.item_id)
        .execute(&mut *other)
        .await
        .expect("the buyer's holding");
        let order = sqlx::query(
            "INSERT INTO orders (id, activity_id, item_id, user_id, quantity, amount_cents,
                                 status, request_id)
             VALUES (gen_random_uuid(), $1, $2, 5, 1, 100, 'PRE_CREATED', 'deadlocked')",
        )
        .bind(sale.activity_id)
        .bind(sale.item_id)
        .execute(&mut *other);
        let let_the_batch_on = async {
            app.until_a_statement_waits_on_a_lock(
                "the other transaction waits for the batch's order",
                "INSERT INTO orders (id, activity_id%",
            )
            .await;
            item_row.rollback().await.expect("rollback");
        };
        let (order, ()) = tokio::join!(order, let_the_batch_on);
        order.expect("the other transaction goes on once the batch is aborted");
        // The batch, written again, waits for this transaction's order: it never commits.
        until_a_batch_waits(&app, "the batch again").await;
        other.rollback().await.expect("rollback");
    };
    let ((status, answer), ()) = tokio::join!(buy, deadlock);
    assert_eq!(status, 200, "{answer}");
    let written: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM orders WHERE user_id = 5 AND request_id = 'deadlocked'
         AND id::TEXT = $1",
    )
    .bind(answer["order_id"].as_str().expect("order id"))
    .fetch_one(&app.db)
    .await
    .expect("orders");
    assert_eq!(written, 1);
    assert_eq!(app.allocated(&sale).await, 1);
}

#[tokio::test]
async fn twenty_concurrent_replays_make_one_order_with_identical_answers() {
    let app = spawn_app_with(storm_settings).await;
    let sale = open_sale(&app, 10, 1).await;
    let answers: Vec<(u16, String)> = stream::iter(0..20)
        .map(|_| async {
            let response = app
                .client
                .post(format!("{}/api/seckill/buy", app.address))
                .bearer_auth(token(&app, 77))
                .header("X-Request-ID", "same-request")
                .json(&buy_body(&sale, 1))
                .send()
                .await
                .expect("sent");
            (
                response.status().as_u16(),
                response.text().await.expect("body"),
            )
        })
        .buffer_unordered(20)
        .collect()
        .await;
    assert!(
        answers.iter().all(|answer| answer == &answers[0]),
        "{answers:?}"
    );
    assert_eq!(answers[0].0, 200);
    assert_eq!(app.count("orders").await, 1);
    assert_eq!(app.redis_stock(&sale).await, 9);
    // A failure is replayed too: same id from a buyer who then exceeds nothing new.
    let (first_status, first) = app.buy(77, "second-request", &buy_body(&sale, 1)).await;
    let (again_status, again) = app.buy(77, "second-request", &buy_body(&sale, 1)).await;
    assert_eq!(
        (first_status, &first["code"]),
        (409, &json!("ALREADY_PURCHASED"))
    );
    assert_eq!((again_status, again), (first_status, first));
}

#[tokio::test]
async fn bad_input_gets_a_clear_4xx_and_changes_nothing() {
    let app = spawn_app_with(storm_settings).await;
    let sale = open_sale(&app, 10, 2).await;
    let other = open_sale(&app, 10, 2).await;
    let url = format!("{}/api/seckill/buy", app.address);
    let good_token = token(&app, 5);
    let raw = |body: String, request_id: Option<&str>, token: Option<String>| {
        let mut request = app
            .client
            .post(&url)
            .header("Content-Type", "application/json")
            .body(body);
        if let Some(id) = request_id {
            request = request.header("X-Request-ID", id);
        }
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        request
    };
    let authed =
        |body: String, request_id: &str| raw(body, Some(request_id), Some(good_token.clone()));
    let body = |quantity: Value, item: i64| {
        json!({ "activity_id": sale.activity_id, "item_id": item, "quantity": quantity })
            .to_string()
    };
    let forged =
        buyer_token::mint(&"not-the-secret".into(), 5, chrono::Duration::hours(1)).expect("token");
    let expired = buyer_token::mint(
        &app.state.settings.jwt_secret,
        5,
        chrono::Duration::hours(-2),
    )
    .expect("token");
    let cases: Vec<(&str, reqwest::RequestBuilder, u16, &str)> = vec![
        (
            "malformed json",
            authed("{oops".into(), "a1"),
            400,
            "BAD_REQUEST",
        ),
        (
            "missing request id",
            raw(body(json!(1), sale.item_id), None, Some(good_token.clone())),
            400,
            "BAD_REQUEST",
        ),
        (
            "bad request id",
            raw(
                body(json!(1), sale.item_id),
                Some("a b"),
                Some(good_token.clone()),
            ),
            400,
            "BAD_REQUEST",
        ),
        (
            "quantity 0",
            authed(body(json!(0), sale.item_id), "a2"),
            400,
            "BAD_REQUEST",
        ),
        (
            "negative quantity",
            authed(body(json!(-3), sale.item_id), "a3"),
            400,
            "BAD_REQUEST",
        ),
        (
            "above the limit",
            authed(body(json!(3), sale.item_id), "a4"),
            400,
            "BAD_REQUEST",
        ),
        (
            "huge quantity",
            authed(body(json!(1e30), sale.item_id), "a5"),
            400,
            "BAD_REQUEST",
        ),
        (
            "unknown item",
            authed(body(json!(1), 987_654), "a6"),
            404,
            "ITEM_NOT_FOUND",
        ),
        (
            "another activity's item",
            authed(body(json!(1), other.item_id), "a7"),
            404,
            "ITEM_NOT_FOUND",
        ),
        (
            "no token",
            raw(body(json!(1), sale.item_id), Some("a8"), None),
            401,
            "UNAUTHENTICATED",
        ),
        (
            "forged token",
            raw(body(json!(1), sale.item_id), Some("a9"), Some(forged)),
            401,
            "UNAUTHENTICATED",
        ),
        (
            "expired token",
            raw(body(json!(1), sale.item_id), Some("a10"), Some(expired)),
            401,
            "UNAUTHENTICATED",
        ),
        (
            "oversized body",
            authed(format!("{{\"pad\": \"{}\"}}", "x".repeat(100_000)), "a11"),
            400,
            "BAD_REQUEST",
        ),
    ];
    for (name, request, status, code) in cases {
        let (got, body) = json(request.send().await.expect("sent")).await;
        assert_eq!(
            (got, body["code"].as_str()),
            (status, Some(code)),
            "{name}: {body}"
        );
    }
    // Unknown activity ids are stopped by the Bloom filter, whatever the item.
    let (status, body) = json(
        authed(
            json!({ "activity_id": 999_999, "item_id": 1, "quantity": 1 }).to_string(),
            "a12",
        )
        .send()
        .await
        .expect("sent"),
    )
    .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (404, Some("ITEM_NOT_FOUND"))
    );

    // Before the start and after the end.
    for (sql, code) in [
        ("UPDATE activities SET starts_at = now() + interval '1 hour', ends_at = now() + interval '2 hours' WHERE id = $1", "ACTIVITY_NOT_STARTED"),
        ("UPDATE activities SET starts_at = now() - interval '2 hours', ends_at = now() - interval '1 hour' WHERE id = $1", "ACTIVITY_ENDED"),
    ] {
        sqlx::query(sql).bind(sale.activity_id).execute(&app.db).await.expect("move the sale");
        app.state.catalogue.forget(sale.activity_id);
        let (status, body) = app.buy(5, &format!("t-{code}"), &buy_body(&sale, 1)).await;
        assert_eq!((status, body["code"].as_str()), (403, Some(code)), "{body}");
    }

    assert_eq!(app.count("orders").await, 0);
    assert_eq!(app.redis_stock(&sale).await, 10);
    assert_eq!(app.redis_stock(&other).await, 10);
}

#[tokio::test]
async fn a_pre_order_that_cannot_be_written_gives_its_stock_back() {
    let app = spawn_app_with(storm_settings).await;
    let sale = open_sale(&app, 10, 1).await;
    // PostgreSQL refuses buyer 42's pre-orders (and only those), as a failing disk or a
    // broken row would; his void, a `FAILED` row, still goes in.
    for statement in [
        "CREATE FUNCTION refuse_buyer_42() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             IF NEW.user_id = 42 AND NEW.status = 'PRE_CREATED' THEN
                 RAISE EXCEPTION 'buyer 42 cannot be written';
             END IF;
             RETURN NEW;
         END $$",
        "CREATE TRIGGER refuse_buyer_42 BEFORE INSERT ON orders
         FOR EACH ROW EXECUTE FUNCTION refuse_buyer_42()",
    ] {
        sqlx::query(statement)
            .execute(&app.db)
            .await
            .expect("the refusing trigger");
    }

    // Others buy in the same moment, so the failing pre-order shares batches with good ones.
    let body = buy_body(&sale, 1);
    let others: Vec<(i64, String)> = (100..105)
        .map(|user| (user, format!("ok-{user}")))
        .collect();
    let (doomed, others) = tokio::join!(app.buy(42, "taken", &body), storm(&app, &sale, others, 5));
    assert_eq!(
        (doomed.0, doomed.1["code"].as_str()),
        (503, Some("DEGRADED")),
        "{:?}",
        doomed.1
    );
    assert_eq!(count_codes(&others).get("OK"), Some(&5));
    // The insert's failure leaves open whether it committed, so the pre-order is voided in
    // PostgreSQL first and its unit given back after: moments after the answer.
    wait::until("the failed buyer's unit is back", PATIENCE, || async {
        let holders = ItemStateClient(&app.state.redis)
            .holders(contract::SaleItem::new(sale.activity_id, sale.item_id))
            .await
            .expect("holders");
        app.redis_stock(&sale).await == 5 && !holders.iter().any(|(user, _)| *user == 42)
    })
    .await;
}

#[tokio::test]
async fn buyers_are_rate_limited_per_window_with_retry_after() {
    let app = spawn_app_with(|settings| {
        storm_settings(settings);
        settings.buy.per_user_per_window = 2;
        settings.buy.rate_window_s = 60;
    })
    .await;
    let sale = open_sale(&app, 10, 1).await;
    // Both requests of the window are decided by the funnel: the unit, then the limit.
    let within_the_window = [(200, None), (409, Some("ALREADY_PURCHASED"))];
    for (n, expected) in within_the_window.into_iter().enumerate() {
        let (status, body) = app.buy(9, &format!("w{n}"), &buy_body(&sale, 1)).await;
        assert_eq!((status, body["code"].as_str()), expected, "{body}");
    }
    let response = app
        .client
        .post(format!("{}/api/seckill/buy", app.address))
        .bearer_auth(token(&app, 9))
        .header("X-Request-ID", "w3")
        .json(&buy_body(&sale, 1))
        .send()
        .await
        .expect("sent");
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok()),
        Some("60")
    );
    // Another buyer is not affected.
    let (status, _) = app.buy(10, "x1", &buy_body(&sale, 1)).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn a_buyer_past_his_window_leaves_the_address_window_to_the_others() {
    // Seen: 150 requests of one buyer, 145 of them refused, made the next buyer from the
    // same address get 429: the refused ones counted in the address and item windows too.
    let app = spawn_app_with(|settings| {
        storm_settings(settings);
        settings.buy.per_user_per_window = 5;
        settings.buy.per_ip_per_window = 100;
        settings.buy.rate_window_s = 60;
    })
    .await;
    let sale = open_sale(&app, 10, 1).await;
    let mut refused = 0;
    for n in 0..150 {
        let (status, _) = app
            .buy(7, &format!("greedy-{n}"), &buy_body(&sale, 1))
            .await;
        refused += u32::from(status == 429);
    }
    assert_eq!(refused, 145, "the buyer's own window admits 5");
    let (status, body) = app.buy(8, "next-buyer", &buy_body(&sale, 1)).await;
    assert_eq!(status, 200, "{body}");
}

#[tokio::test]
async fn the_challenge_must_be_answered_right_and_not_too_fast() {
    let app = spawn_app_with(|settings| {
        storm_settings(settings);
        settings.buy.challenge_required = true;
    })
    .await;
    let clock = TestClock::starting_now();
    app.state.funnel.challenges.use_clock(clock.clone());
    let sale = open_sale(&app, 10, 1).await;
    let (status, body) = app.buy(3, "c0", &buy_body(&sale, 1)).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (403, Some("CHALLENGE_FAILED"))
    );

    let ask = || app.challenge_for(sale.activity_id, 3);
    let with_answer = |id: &str, answer: i64| json!({ "activity_id": sale.activity_id, "item_id": sale.item_id, "quantity": 1, "challenge_id": id, "answer": answer });
    let (id, answer) = ask().await;
    let (status, _) = app.buy(3, "c1", &with_answer(&id, answer)).await;
    assert_eq!(status, 403, "answered faster than a person can");

    let (id, answer) = ask().await;
    clock.advance(MIN_THINKING_TIME);
    let (status, _) = app.buy(3, "c2", &with_answer(&id, answer + 1)).await;
    assert_eq!(status, 403, "wrong answer");
    let (status, _) = app.buy(3, "c3", &with_answer(&id, answer)).await;
    assert_eq!(status, 403, "a challenge is good for one attempt");

    let (id, answer) = ask().await;
    clock.advance(MIN_THINKING_TIME);
    let (status, body) = app.buy(3, "c4", &with_answer(&id, answer)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(app.count("orders").await, 1);
}

#[tokio::test]
async fn buyers_read_only_their_own_orders() {
    let app = spawn_app_with(storm_settings).await;
    let sale = open_sale(&app, 10, 1).await;
    let (_, bought) = app.buy(11, "mine", &buy_body(&sale, 1)).await;
    let order_id = bought["order_id"].as_str().expect("order id");
    let read = |user: Option<i64>| {
        let mut request = app
            .client
            .get(format!("{}/api/orders/{order_id}", app.address));
        if let Some(user) = user {
            request = request.bearer_auth(token(&app, user));
        }
        async move { json(request.send().await.expect("sent")).await }
    };
    let (status, order) = read(Some(11)).await;
    assert_eq!(status, 200, "{order}");
    assert!(
        ["PRE_CREATED", "UNPAID"].contains(&order["status"].as_str().unwrap_or_default()),
        "{order}"
    );
    assert_eq!(order["amount_cents"], 4990);
    assert_eq!(read(Some(12)).await.0, 404);
    assert_eq!(read(None).await.0, 401);
}

#[tokio::test]
async fn activity_info_and_status_come_from_the_server_clock() {
    let app = spawn_app_with(storm_settings).await;
    let sale = open_sale(&app, 1, 1).await;
    let response = app
        .get(&format!("/api/activities/{}", sale.activity_id), None)
        .await;
    assert_eq!(
        response
            .headers()
            .get("cache-control")
            .and_then(|v| v.to_str().ok()),
        Some("public, max-age=5")
    );
    let info: Value = response.json().await.expect("json");
    assert_eq!(info["items"][0]["total_stock"], 1);
    assert_eq!(info["items"][0]["price_cents"], 4990);

    let status_of = || async {
        let response = app
            .get(
                &format!("/api/activities/{}/status", sale.activity_id),
                None,
            )
            .await;
        assert_eq!(
            response
                .headers()
                .get("cache-control")
                .and_then(|v| v.to_str().ok()),
            Some("no-store")
        );
        response.json::<Value>().await.expect("json")
    };
    let before = status_of().await;
    assert_eq!(before["phase"], "open");
    assert_eq!(before["items"][0]["sold_out"], false);
    let drift = (before["server_time_ms"].as_i64().expect("time")
        - chrono::Utc::now().timestamp_millis())
    .abs();
    assert!(drift < 5_000);
    let (status, _) = app.buy(1, "last-one", &buy_body(&sale, 1)).await;
    assert_eq!(status, 200);
    assert_eq!(status_of().await["items"][0]["sold_out"], true);
    assert_eq!(app.get("/api/activities/424242", None).await.status(), 404);
}

/// Found when tried as a buyer would, with the deduction on `db`: once the last unit was
/// sold, the status kept saying `sold_out: false` (it read Redis's stock, which only a Redis
/// deduction moves), so the sale page kept offering a buy that could only be refused.
#[tokio::test]
async fn the_status_says_sold_out_once_the_database_path_sold_the_last_unit() {
    let app = on_the_database_path(storm_settings).await;
    let sale = open_sale(&app, 1, 1).await;
    let path = format!("/api/activities/{}/status", sale.activity_id);
    let sold_out =
        || async { json(app.get(&path, None).await).await.1["items"][0]["sold_out"].clone() };
    assert_eq!(sold_out().await, false);
    let (status, answer) = app.buy(1, "last-one", &buy_body(&sale, 1)).await;
    assert_eq!(status, 200, "{answer}");
    wait::until("the status says sold out", PATIENCE, || async {
        sold_out().await == true
    })
    .await;
}

#[tokio::test]
async fn prewarm_is_for_ops_idempotent_and_refused_during_the_sale() {
    let app = spawn_app_with(storm_settings).await;
    let merchant = app.caller(Role::Merchant, Some("acme")).await;
    let ops = app.caller(Role::Ops, None).await;
    let sre = app.caller(Role::Sre, None).await;
    let sale = upcoming_activity(&app, &merchant, &Listing::storm(50, 1, &[])).await;
    let path = format!("/admin/api/activities/{}/prewarm", sale.activity_id);
    for forbidden in [&sre, &merchant] {
        let (status, _) = json(app.post_json(&path, Some(forbidden), &json!({})).await).await;
        assert_eq!(status, 403);
    }
    let (_, detail) = json(
        app.get(
            &format!("/admin/api/activities/{}", sale.activity_id),
            Some(&ops),
        )
        .await,
    )
    .await;
    assert_eq!(
        detail["prewarmed"], false,
        "a refused pre-warm loads nothing"
    );

    let (status, first) = json(app.post_json(&path, Some(&ops), &json!({})).await).await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["items"][0]["redis_stock"], 50);
    assert!(first["bloom_bits_set"].as_i64().expect("bits") > 0);
    let (_, second) = json(app.post_json(&path, Some(&ops), &json!({})).await).await;
    assert_eq!(second["items"], first["items"]);
    assert_eq!(second["bloom_bits_set"], 0);
    let (_, detail) = json(
        app.get(
            &format!("/admin/api/activities/{}", sale.activity_id),
            Some(&ops),
        )
        .await,
    )
    .await;
    assert_eq!(detail["prewarmed"], true);
    assert_eq!(detail["items"][0]["redis_stock"], 50);
    // Both pre-warms are in the audit log, with who and what they loaded; the refused
    // ones are not.
    let (status, audit) = json(app.get("/admin/api/audit", Some(&sre)).await).await;
    assert_eq!(status, 200, "{audit}");
    let prewarms: Vec<&serde_json::Value> = audit["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .filter(|entry| entry["action"] == "activity.prewarm")
        .collect();
    assert_eq!(prewarms.len(), 2, "{audit}");
    for entry in prewarms {
        assert_eq!(entry["actor"], ops.username.as_str());
        assert_eq!(entry["source"], "api");
        assert_eq!(entry["target"], format!("activity:{}", sale.activity_id));
        assert!(entry["detail"].to_string().contains("loaded"), "{entry}");
    }

    sqlx::query("UPDATE activities SET starts_at = now() - interval '1 minute' WHERE id = $1")
        .bind(sale.activity_id)
        .execute(&app.db)
        .await
        .expect("open");
    // Live: allowed behind the reconciliation fence, and it derives the same figures.
    let (status, live) = json(app.post_json(&path, Some(&ops), &json!({})).await).await;
    assert_eq!(status, 200, "{live}");
    assert_eq!(live["items"], first["items"]);
}

fn seat_codes(count: usize) -> Vec<String> {
    (1..=count).map(|n| format!("A{n}")).collect()
}

impl TestApp {
    async fn take_seats(&self, user_id: i64, request_id: &str, body: &Value) -> (u16, Value) {
        self.buyer_post("/api/seckill/seats", user_id, request_id, body)
            .await
    }
}

#[tokio::test]
async fn buyers_racing_for_overlapping_seats_get_whole_sets_or_nothing() {
    overlapping_seats(DeductionMode::Redis).await;
}

/// Found by a buyer: with the deduction on `db`, a seat taken by another member of the same
/// batch failed the whole batch, and the loser got 503 `DEGRADED` instead of `SOLD_OUT`.
#[tokio::test]
async fn buyers_racing_for_overlapping_seats_on_the_database_path_lose_with_sold_out() {
    overlapping_seats(DeductionMode::Db).await;
}

async fn overlapping_seats(mode: DeductionMode) {
    let app = spawn_app_with(|settings| {
        storm_settings(settings);
        settings.buy.deduction = mode;
    })
    .await;
    let seats = seat_codes(40);
    let sale = open_activity(&app, 40, 4, &seats).await;
    // 300 buyers each want 2-4 adjacent seats starting at a spread of places: heavy overlap.
    let wants: Vec<(i64, Vec<String>)> = (1..=300)
        .map(|user: i64| {
            let start = (user * 7 % 38) as usize;
            let len = 2 + (user % 3) as usize;
            (user, seats[start..(start + len).min(40)].to_vec())
        })
        .collect();
    let results: Vec<(i64, Vec<String>, u16, Value)> = stream::iter(wants)
        .map(|(user, wanted)| {
            let app = &app;
            let body = json!({ "activity_id": sale.activity_id, "seats": wanted });
            async move {
                let (status, answer) = app.take_seats(user, &format!("s-{user}"), &body).await;
                (user, wanted, status, answer)
            }
        })
        .buffer_unordered(64)
        .collect()
        .await;

    let mut sold = HashMap::new();
    for (user, wanted, status, answer) in &results {
        match status {
            200 => {
                let order_id: uuid::Uuid = answer["order_id"]
                    .as_str()
                    .expect("id")
                    .parse()
                    .expect("uuid");
                let mut held: Vec<String> =
                    sqlx::query_scalar("SELECT seat_code FROM seats WHERE order_id = $1")
                        .bind(order_id)
                        .fetch_all(&app.db)
                        .await
                        .expect("seats of the order");
                held.sort();
                let mut expected = wanted.clone();
                expected.sort();
                assert_eq!(
                    held, expected,
                    "buyer {user} got a partial or different set"
                );
                for seat in wanted {
                    assert!(
                        sold.insert(seat.clone(), *user).is_none(),
                        "seat {seat} sold twice"
                    );
                }
            }
            409 => assert_eq!(answer["code"], "SOLD_OUT", "{answer}"),
            other => panic!("unexpected {other}: {answer}"),
        }
    }
    assert!(!sold.is_empty());
    let in_db: i64 = sqlx::query_scalar("SELECT count(*) FROM seats WHERE order_id IS NOT NULL")
        .fetch_one(&app.db)
        .await
        .expect("count");
    assert_eq!(in_db as usize, sold.len());
    assert_eq!(app.held_by_orders(&sale).await as usize, sold.len());
    assert_eq!(app.allocated(&sale).await as usize, sold.len());
    if mode == DeductionMode::Redis {
        assert_eq!(app.redis_stock(&sale).await + sold.len() as i64, 40);
    }
}

#[tokio::test]
async fn seat_requests_are_checked_before_anything_is_taken() {
    let app = spawn_app_with(storm_settings).await;
    let seats = seat_codes(6);
    let seated = open_activity(&app, 6, 2, &seats).await;
    let standard = open_sale(&app, 5, 1).await;
    let seats_of =
        |activity: i64, wanted: Value| json!({ "activity_id": activity, "seats": wanted });
    for (name, body, status, code) in [
        (
            "no seats",
            seats_of(seated.activity_id, json!([])),
            400,
            "BAD_REQUEST",
        ),
        (
            "twice the same seat",
            seats_of(seated.activity_id, json!(["A1", "A1"])),
            400,
            "BAD_REQUEST",
        ),
        (
            "malformed code",
            seats_of(seated.activity_id, json!(["A 1"])),
            400,
            "BAD_REQUEST",
        ),
        (
            "over the limit",
            seats_of(seated.activity_id, json!(["A1", "A2", "A3"])),
            400,
            "BAD_REQUEST",
        ),
        (
            "unknown seat",
            seats_of(seated.activity_id, json!(["A1", "Z9"])),
            404,
            "ITEM_NOT_FOUND",
        ),
        (
            "seats of a standard sale",
            seats_of(standard.activity_id, json!(["A1"])),
            400,
            "BAD_REQUEST",
        ),
    ] {
        let (got, answer) = app
            .take_seats(8, &format!("bad-{}", name.replace(' ', "-")), &body)
            .await;
        assert_eq!(
            (got, answer["code"].as_str()),
            (status, Some(code)),
            "{name}: {answer}"
        );
    }
    let (status, answer) = app
        .buy(
            8,
            "units-of-seated",
            &json!({ "activity_id": seated.activity_id, "item_id": seated.item_id, "quantity": 1 }),
        )
        .await;
    assert_eq!(
        (status, answer["code"].as_str()),
        (400, Some("BAD_REQUEST")),
        "{answer}"
    );
    assert_eq!(app.count("orders").await, 0);
    assert_eq!(app.redis_stock(&seated).await, 6);

    let (status, _) = app
        .take_seats(
            8,
            "good",
            &seats_of(seated.activity_id, json!(["A1", "A2"])),
        )
        .await;
    assert_eq!(status, 200);
    let (status, answer) = app
        .take_seats(
            9,
            "late",
            &seats_of(seated.activity_id, json!(["A2", "A3"])),
        )
        .await;
    assert_eq!((status, answer["code"].as_str()), (409, Some("SOLD_OUT")));
    let (status, answer) = app
        .take_seats(8, "greedy", &seats_of(seated.activity_id, json!(["A4"])))
        .await;
    assert_eq!(
        (status, answer["code"].as_str()),
        (409, Some("ALREADY_PURCHASED"))
    );
    assert_eq!(
        app.redis_stock(&seated).await,
        4,
        "A3 stayed free: nothing partial was taken"
    );
}

impl TestApp {
    /// A buy's status and its body as sent, for comparing answers byte for byte.
    async fn buy_bytes(&self, user_id: i64, request_id: &str, sale: &Sale) -> (u16, String) {
        let response = self
            .client
            .post(format!("{}/api/seckill/buy", self.address))
            .bearer_auth(token(self, user_id))
            .header("X-Request-ID", request_id)
            .json(&buy_body(sale, 1))
            .send()
            .await
            .expect("sent");
        (
            response.status().as_u16(),
            response.text().await.expect("body"),
        )
    }

    /// Waits until buyer 3's buy of `sale` is refused with `code`.
    async fn until_refused_with(&self, sale: &Sale, code: &str) {
        let mut attempt = 0;
        wait::until(&format!("buys refused with {code}"), PATIENCE, || {
            attempt += 1;
            let request_id = format!("probe-{code}-{attempt}");
            async move {
                let (_, answer) = self.buy(3, &request_id, &buy_body(sale, 1)).await;
                answer["code"] == code
            }
        })
        .await;
    }
}

/// A sale of one unit won by buyer 1 (his answer returned) and lost by buyer 2; then, with
/// the sold-out flag answering buyer 3, buyer 1's replay gets his answer byte for byte.
async fn last_unit_won_then_flagged(app: &TestApp) -> (Sale, (u16, String)) {
    let sale = open_sale(app, 1, 1).await;
    let won = app.buy_bytes(1, "won", &sale).await;
    assert_eq!(won.0, 200, "{won:?}");
    let (status, lost) = app.buy(2, "lost", &buy_body(&sale, 1)).await;
    assert_eq!((status, lost["code"].as_str()), (409, Some("SOLD_OUT")));
    let flagged = app.buy(3, "flagged", &buy_body(&sale, 1)).await;
    assert_eq!(flagged.1["code"], "SOLD_OUT");
    assert_eq!(app.buy_bytes(1, "won", &sale).await, won, "sold-out flag");
    (sale, won)
}

/// An app with `settings` that deducts in PostgreSQL.
async fn on_the_database_path(settings: fn(&mut Settings)) -> TestApp {
    spawn_app_with(|s| {
        settings(s);
        s.buy.deduction = DeductionMode::Db;
    })
    .await
}

/// A sale whose sold-out flag still stands when the winner comes back.
fn flag_stands(settings: &mut Settings) {
    storm_settings(settings);
    settings.buy.sold_out_flag_ms = 600_000;
}

/// Found when tried as a buyer would: the winner of the last unit who retried with the same
/// `X-Request-ID` after a timeout was told `SOLD_OUT` (the local sold-out flag answered before
/// the idempotency lookup), and after the end `ACTIVITY_ENDED`, with the entry closed
/// `ACTIVITY_CLOSED`. He won and was told he lost.
#[tokio::test]
async fn the_winner_of_the_last_unit_gets_his_order_on_replay_whatever_the_phase() {
    let app = spawn_app_with(flag_stands).await;
    let ops = app.caller(Role::Ops, None).await;
    let (sale, won) = last_unit_won_then_flagged(&app).await;

    let entry = format!("/admin/api/switches/switches/entry/{}", sale.activity_id);
    let flip = |value: &'static str| {
        let (app, ops, entry) = (&app, &ops, &entry);
        async move {
            let (status, body) = json(
                app.send_json(
                    reqwest::Method::PUT,
                    entry,
                    Some(ops),
                    &json!({ "value": value, "reason": "replay drill" }),
                )
                .await,
            )
            .await;
            assert_eq!(status, 200, "{body}");
        }
    };
    flip("closed").await;
    app.until_refused_with(&sale, "ACTIVITY_CLOSED").await;
    assert_eq!(app.buy_bytes(1, "won", &sale).await, won, "entry closed");
    flip("open").await;
    sqlx::query("UPDATE activities SET ends_at = now() - interval '1 second' WHERE id = $1")
        .bind(sale.activity_id)
        .execute(&app.db)
        .await
        .expect("end the sale");
    app.until_refused_with(&sale, "ACTIVITY_ENDED").await;
    assert_eq!(app.buy_bytes(1, "won", &sale).await, won, "activity ended");
    // Someone who did not win is refused as before, his request id left free.
    let (status, answer) = app.buy(2, "lost", &buy_body(&sale, 1)).await;
    assert_eq!(
        (status, answer["code"].as_str()),
        (403, Some("ACTIVITY_ENDED"))
    );
}

/// The winner of the last unit whose answer never reached Redis (Redis failing at that
/// moment, or the instance killed between answering and storing it) was told `SOLD_OUT` on
/// replay once his in-flight marker expired: the holder set sent him to a stored answer that
/// was not there. PostgreSQL has his order, and he gets it, byte for byte.
#[tokio::test]
async fn a_winner_whose_answer_never_reached_redis_gets_his_order_on_replay() {
    let app = spawn_app_with(flag_stands).await;
    let sale = open_sale(&app, 1, 1).await;
    let won = app.buy_bytes(1, "won", &sale).await;
    assert_eq!(won.0, 200, "{won:?}");
    // The stored answer and the marker gone, as when neither reached Redis or both expired.
    app.forget_answer(&sale, 1, "won").await;
    let (status, lost) = app.buy(2, "lost", &buy_body(&sale, 1)).await;
    assert_eq!((status, lost["code"].as_str()), (409, Some("SOLD_OUT")));
    assert_eq!(app.buy_bytes(1, "won", &sale).await, won, "sold-out flag");
    // A holder with another request id did not win with it.
    let (status, other) = app.buy(1, "another", &buy_body(&sale, 1)).await;
    assert_eq!((status, other["code"].as_str()), (409, Some("SOLD_OUT")));
}

/// Found when tried as a buyer would, with the deduction on `db`: the winner of the last
/// unit who retried once the sold-out flag stood was told `SOLD_OUT`. The holder set came
/// from Redis's buyer records, which only a Redis deduction writes, so on the database path
/// nobody was a holder and the flag answered everyone.
#[tokio::test]
async fn the_winner_of_the_last_unit_on_the_database_path_gets_his_order_on_replay() {
    let app = on_the_database_path(flag_stands).await;
    let (sale, won) = last_unit_won_then_flagged(&app).await;
    // His answer gone from Redis too: PostgreSQL's order answers him.
    app.forget_answer(&sale, 1, "won").await;
    assert_eq!(
        app.buy_bytes(1, "won", &sale).await,
        won,
        "no stored answer"
    );
    // A holder with another request id did not win with it.
    let (status, other) = app.buy(1, "another", &buy_body(&sale, 1)).await;
    assert_eq!((status, other["code"].as_str()), (409, Some("SOLD_OUT")));
}

/// Found when tried as a buyer would: once the item sold out, a holder's request with a fresh
/// request id went to PostgreSQL for the order of that id before any rate window, so with
/// `per_user_per_window` 5 thirty fresh ids from one holder got thirty 409s and no 429: one
/// query each of the pool every other sale's pre-orders need. A holder's fresh id now goes
/// through his windows (and counts in them) before PostgreSQL is asked; a replay of his
/// stored answer is still answered byte for byte, however full his window.
#[tokio::test]
async fn a_holder_with_fresh_request_ids_meets_his_window_before_postgresql() {
    let app = spawn_app_with(|settings| {
        flag_stands(settings);
        settings.buy.per_user_per_window = 5;
        settings.buy.rate_window_s = 60;
    })
    .await;
    // Buyer 1 holds the last unit; his winning request is the first of his window.
    let (sale, won) = last_unit_won_then_flagged(&app).await;
    let mut answered = HashMap::new();
    for n in 0..30 {
        let response = app
            .client
            .post(format!("{}/api/seckill/buy", app.address))
            .bearer_auth(token(&app, 1))
            .header("X-Request-ID", format!("fresh-{n}"))
            .json(&buy_body(&sale, 1))
            .send()
            .await
            .expect("sent");
        let (status, retry_after, body) = json_and_retry_after(response).await;
        let code = body["code"].as_str().unwrap_or_default().to_owned();
        *answered.entry((status, code, retry_after)).or_insert(0) += 1;
    }
    let expected = HashMap::from([
        ((409, "SOLD_OUT".to_owned(), None), 4),
        ((429, "RATE_LIMITED".to_owned(), Some("60".to_owned())), 26),
    ]);
    assert_eq!(answered, expected, "the window admits five in all");
    assert_eq!(
        app.buy_bytes(1, "won", &sale).await,
        won,
        "a replay is answered with his window full"
    );
}

/// Found in the code: an instance refusing an item from memory read the item's holder set
/// whole again once per `sold_out_flag_ms`, from Redis and from PostgreSQL, however long the
/// refusals lasted and though nobody could gain units meanwhile. For an item that ends with
/// hundreds of thousands of holders, that is an `HGETALL` blocking the shared Redis and a read
/// of every holding, each second on every instance. Each half is now read whole only when
/// its store's version of the item's holders moved; and a winner who won after the set was
/// read still gets his answer on replay.
///
/// Found next (issue 39): a new Redis deduction still had every instance read the whole
/// buyer records again, up to the item's stock, at each new holder. Redis's half now reads
/// only the holders' log entries appended since it last read: with five holders read, one
/// more deduction costs the next refresh one entry; and with the log lost (Redis's data),
/// the records are read whole again.
#[tokio::test]
async fn a_holder_set_reads_only_the_holders_gained_since_it_last_read() {
    for deduction in [DeductionMode::Redis, DeductionMode::Db] {
        holder_set_reads_only_new_holders(deduction).await;
    }
}

async fn holder_set_reads_only_new_holders(deduction: DeductionMode) {
    let app = spawn_app_with(|settings| {
        storm_settings(settings);
        settings.buy.deduction = deduction;
        // No sold-out flag, and a holder set refreshed at every local refusal.
        settings.buy.sold_out_flag_ms = 0;
        // Every request comes from one address to one item: not a hot key to throttle here.
        settings.buy.hotkey_detection = false;
    })
    .await;
    let refreshes = |store: &'static str, outcome: &'static str| {
        let app = &app;
        async move {
            app.metric(&format!(
                "seckill_holder_set_refreshes_total{{outcome=\"{outcome}\",store=\"{store}\"}}"
            ))
            .await
        }
    };
    let entries_read = |store: &'static str| {
        let app = &app;
        async move {
            app.metric(&format!(
                "seckill_holder_set_entries_read_total{{store=\"{store}\"}}"
            ))
            .await
        }
    };
    let read_whole = || async {
        [
            refreshes("redis", "read_whole").await,
            refreshes("postgres", "read_whole").await,
        ]
    };
    // Five holders, and one unit left.
    const HOLDERS: i64 = 5;
    let sale = open_sale(&app, HOLDERS + 1, 1).await;
    let won = app.buy_bytes(1, "won", &sale).await;
    assert_eq!(won.0, 200, "{won:?}");
    for buyer in 2..=HOLDERS {
        let (status, answer) = app.buy_bytes(100 + buyer, "won", &sale).await;
        assert_eq!(status, 200, "{answer}");
    }
    let set_end = |ends_at: &'static str| {
        let app = &app;
        async move {
            sqlx::query(&format!(
                "UPDATE activities SET ends_at = {ends_at} WHERE id = $1"
            ))
            .bind(sale.activity_id)
            .execute(&app.db)
            .await
            .expect("move the end");
        }
    };
    set_end("now() - interval '1 second'").await;
    until_ended(&app, &sale, "first").await;
    // Each store's holders, read once: Redis's buyer records only on the Redis path.
    let redis_holders = match deduction {
        DeductionMode::Redis => HOLDERS as f64,
        DeductionMode::Db => 0.0,
    };
    assert_eq!(
        [entries_read("redis").await, entries_read("postgres").await],
        [redis_holders, HOLDERS as f64],
        "{deduction:?}"
    );

    // The refusals go on; nobody can gain units: the versions are read, the holders are not.
    let whole = read_whole().await;
    let unchanged = [
        refreshes("redis", "unchanged").await,
        refreshes("postgres", "unchanged").await,
    ];
    for n in 0..20 {
        let (status, answer) = app
            .buy(2, &format!("refused-{n}"), &buy_body(&sale, 1))
            .await;
        assert_eq!(
            (status, answer["code"].as_str()),
            (403, Some("ACTIVITY_ENDED")),
            "{deduction:?}"
        );
    }
    assert_eq!(
        read_whole().await,
        whole,
        "{deduction:?}: no holder gained, nothing read whole"
    );
    for (store, before) in ["redis", "postgres"].into_iter().zip(unchanged) {
        assert!(
            refreshes(store, "unchanged").await >= before + 20.0,
            "{deduction:?}: {store} checked at every refusal"
        );
    }
    assert_eq!(app.buy_bytes(1, "won", &sale).await, won, "{deduction:?}");

    // The sale reopens and buyer 9 takes the other unit, then it ends again.
    set_end("now() + interval '1 hour'").await;
    let late = std::sync::Mutex::new((0, String::new()));
    wait::until("the sale reopened", PATIENCE, || {
        let (app, late) = (&app, &late);
        async move {
            let answer = app.buy_bytes(9, "late", &sale).await;
            let won = if answer.0 == 200 {
                Ok(())
            } else {
                Err(answer.clone())
            };
            *late.lock().expect("not poisoned") = answer;
            won
        }
    })
    .await;
    let late = late.into_inner().expect("not poisoned");
    set_end("now() - interval '1 second'").await;
    until_ended(&app, &sale, "again").await;
    // His replay is not refused: the set read him, and only him, from each store that
    // names him.
    assert_eq!(app.buy_bytes(9, "late", &sale).await, late, "{deduction:?}");
    let redis_after = match deduction {
        DeductionMode::Redis => redis_holders + 1.0,
        DeductionMode::Db => 0.0,
    };
    assert_eq!(
        [entries_read("redis").await, entries_read("postgres").await],
        [redis_after, (HOLDERS + 1) as f64],
        "{deduction:?}"
    );
    assert_eq!(
        read_whole().await,
        whole,
        "{deduction:?}: nothing read whole again"
    );
    assert!(refreshes("postgres", "read_new").await >= 1.0);
    if deduction == DeductionMode::Redis {
        assert!(refreshes("redis", "read_new").await >= 1.0);
        // Redis lost the log: the buyer records are read whole again, the late winner
        // with them.
        let log = app
            .state
            .redis
            .holders_log_key(contract::SaleItem::new(sale.activity_id, sale.item_id));
        let _: () = redis::cmd("DEL")
            .arg(log)
            .query_async(&mut app.state.redis.connection())
            .await
            .expect("drop the log");
        assert_eq!(app.buy_bytes(9, "late", &sale).await, late);
        assert_eq!(refreshes("redis", "read_whole").await, whole[0] + 1.0);
    }
}

/// The numbers PostgreSQL's half of a holder set reads new holders by: a holding written, or
/// one that gains units again, takes a number past every one before; a release keeps its
/// number. A buyer whose units were all given back is left out of a whole read (0 units), so
/// were his next purchase to keep the old number, the next read would miss a holder.
#[tokio::test]
async fn a_holding_takes_a_new_gain_number_whenever_it_gains_units() {
    let app = spawn_app_with(|_| {}).await;
    let gained = |statement: &'static str, buyer: i64| {
        let app = &app;
        async move {
            let gained: Option<i64> = sqlx::query_scalar(statement)
                .bind(buyer)
                .fetch_one(&app.db)
                .await
                .expect(statement);
            gained.expect("numbered")
        }
    };
    const BUY: &str =
        "INSERT INTO buyer_holdings (activity_id, item_id, user_id, units, per_user_limit)
         VALUES (1, 1, $1, 1, 2)
         ON CONFLICT (activity_id, item_id, user_id)
         DO UPDATE SET units = buyer_holdings.units + EXCLUDED.units
         RETURNING gained";
    const RELEASE: &str = "UPDATE buyer_holdings SET units = 0
         WHERE activity_id = 1 AND item_id = 1 AND user_id = $1 RETURNING gained";
    let first = gained(BUY, 7).await;
    let other = gained(BUY, 8).await;
    assert!(other > first);
    let again = gained(BUY, 7).await;
    assert!(again > other, "a second unit: {again} after {other}");
    assert_eq!(
        gained(RELEASE, 7).await,
        again,
        "a release keeps its number"
    );
    let after_release = gained(BUY, 7).await;
    assert!(after_release > again, "bought again after a release");
}

/// Waits until buyer 1's new request ids are refused as `sale` ended. He holds his limit,
/// so while the sale is still open to this instance they take nothing.
async fn until_ended(app: &TestApp, sale: &Sale, end: &str) {
    let mut probe = 0;
    wait::until(
        &format!("buys refused as the sale ended ({end})"),
        PATIENCE,
        || {
            probe += 1;
            let request_id = format!("probe-{end}-{probe}");
            async move {
                let (_, answer) = app.buy(1, &request_id, &buy_body(sale, 1)).await;
                answer["code"] == "ACTIVITY_ENDED"
            }
        },
    )
    .await;
}

/// Found in the code: a winner's replay with no stored answer that reaches the buy script
/// (no sold-out flag on this instance: it never saw the item sell out, or its flag lapsed)
/// was answered by the script's refusal: `SOLD_OUT` once the stock was gone, or
/// `ALREADY_PURCHASED` once he held his limit, for the very request that won.
#[tokio::test]
async fn a_winner_whose_answer_never_reached_redis_gets_his_order_from_the_script_path() {
    let app = spawn_app_with(|settings| {
        storm_settings(settings);
        // No instance-local flag: every request reaches Redis.
        settings.buy.sold_out_flag_ms = 0;
    })
    .await;
    // Stock 2, limit 2, the other unit bought next: his replay finds nothing left
    // (SOLD_OUT before).
    let sold_out = open_sale(&app, 2, 2).await;
    // Stock 2, limit 1: his replay finds him at his limit (ALREADY_PURCHASED before).
    let at_limit = open_sale(&app, 2, 1).await;
    // A buyer's request ids are his across items: one winner per sale.
    for (winner, sale, refusal) in [
        (1, sold_out, "SOLD_OUT"),
        (3, at_limit, "ALREADY_PURCHASED"),
    ] {
        let won = app.buy_bytes(winner, "won", &sale).await;
        assert_eq!(won.0, 200, "{won:?}");
        app.forget_answer(&sale, winner, "won").await;
        if refusal == "SOLD_OUT" {
            assert_eq!(app.buy(2, "last", &buy_body(&sale, 1)).await.0, 200);
        }
        assert_eq!(app.buy_bytes(winner, "won", &sale).await, won, "{refusal}");
        // The same holder with another request id did not win with it.
        let (status, other) = app.buy(winner, "another", &buy_body(&sale, 1)).await;
        assert_eq!((status, other["code"].as_str()), (409, Some(refusal)));
    }
}

/// Found when tried as a buyer would: the request id was claimed and an answer stored before
/// any rate limit, so one token with 3,000 unique ids (2,995 answered 429) left 3,001 keys for
/// 300 s; and `GET /api/challenge` stored a key per call (300 calls of one buyer, 300 keys).
#[tokio::test]
async fn refused_requests_and_repeated_challenges_leave_no_keys_behind() {
    let app = spawn_app_with(|settings| {
        storm_settings(settings);
        settings.buy.per_user_per_window = 5;
        settings.buy.rate_window_s = 600;
    })
    .await;
    let sale = open_sale(&app, 100, 1).await;
    let requests = (0..300).map(|n| (7, format!("id-{n}"))).collect();
    let results = storm(&app, &sale, requests, 16).await;
    let codes = count_codes(&results);
    assert_eq!(codes.get("OK"), Some(&1), "{codes:?}");
    assert_eq!(codes.get("RATE_LIMITED"), Some(&295), "{codes:?}");
    let kept = app
        .redis_keys(&format!(
            "{{a{}.i{}}}:idem:7:*",
            sale.activity_id, sale.item_id
        ))
        .await;
    assert_eq!(kept.len(), 1, "only the success is kept: {kept:?}");

    let url = format!(
        "{}/api/challenge?activity_id={}",
        app.address, sale.activity_id
    );
    for _ in 0..300 {
        let response = app
            .client
            .get(&url)
            .bearer_auth(token(&app, 7))
            .send()
            .await
            .expect("sent");
        assert_eq!(response.status(), StatusCode::OK);
    }
    let challenges = app.redis_keys("challenge:*").await;
    assert_eq!(
        challenges.len(),
        1,
        "one open challenge per buyer: {challenges:?}"
    );
}

/// Found in the code: the request body (up to 1 MB) was read before admission control, which
/// comes first: a full instance kept reading bodies it was going to refuse.
#[tokio::test]
async fn a_full_instance_refuses_before_reading_the_body() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let app = spawn_app_with(|settings| settings.buy.max_in_flight = 0).await;
    let address = app.address.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(address)
        .await
        .expect("connect");
    // The headers promise a body that never comes.
    let head = format!(
        "POST /api/seckill/buy HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\n\
         Content-Length: 4000\r\nX-Request-ID: slow-body\r\nAuthorization: Bearer {}\r\n\r\n",
        token(&app, 1)
    );
    stream.write_all(head.as_bytes()).await.expect("write");
    let mut answer = [0_u8; 64];
    let read = tokio::time::timeout(PATIENCE, stream.read(&mut answer))
        .await
        .expect("answered without the body")
        .expect("read");
    let answer = String::from_utf8_lossy(&answer[..read]);
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
}

/// Found when tried as an attacker would: an admitted buy whose body came a byte now and
/// then held its place in flight for as long as its sender liked, so a few such requests
/// (here one, `max_in_flight` being 1) refused every other buyer with 503 `OVERLOADED`. A
/// body that did not come with the head is now waited for `body_patience_ms`, then refused
/// 400, and the place is free again.
#[tokio::test]
async fn a_buy_whose_body_never_ends_is_refused_and_gives_its_place_back() {
    use tokio::io::AsyncWriteExt;
    let app = spawn_app_with(|settings| {
        storm_settings(settings);
        settings.buy.max_in_flight = 1;
        settings.body_patience_ms = 300;
    })
    .await;
    let sale = open_sale(&app, 10, 1).await;
    let address = app.address.trim_start_matches("http://");
    let mut slow = tokio::net::TcpStream::connect(address)
        .await
        .expect("connect");
    let body = buy_body(&sale, 1).to_string();
    let head = format!(
        "POST /api/seckill/buy HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nX-Request-ID: slow-body\r\nAuthorization: Bearer {}\r\n\r\n",
        body.len(),
        token(&app, 1)
    );
    // The head and the body's first byte; the rest never comes.
    slow.write_all(format!("{head}{}", &body[..1]).as_bytes())
        .await
        .expect("write");
    let answer = response(&mut slow).await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("BAD_REQUEST"), "{answer}");
    // The only place in flight is free: the next buyer buys.
    app.bought(2, "after-the-slow-one", &buy_body(&sale, 1))
        .await;
    assert_eq!(app.count("orders").await, 1);
}

/// While a reconciliation run fences an item, a buy of it is refused with a retry and takes
/// nothing: the stock stays whole and the request id free, so the same request buys once the
/// fence is down.
#[tokio::test]
async fn a_buy_while_reconciliation_fences_the_item_takes_nothing_and_can_be_retried() {
    let app = spawn_app_with(storm_settings).await;
    let sale = open_sale(&app, 5, 1).await;
    let fence = app
        .state
        .redis
        .fence_key(contract::SaleItem::new(sale.activity_id, sale.item_id));
    let mut connection = app.state.redis.connection();
    let _: () = redis::cmd("SET")
        .arg(&fence)
        .arg("run")
        .arg("PX")
        .arg(60_000)
        .query_async(&mut connection)
        .await
        .expect("fence");
    let (status, refused) = app.buy(1, "fenced", &buy_body(&sale, 1)).await;
    assert_eq!((status, refused["code"].as_str()), (503, Some("DEGRADED")));
    assert_eq!(app.redis_stock(&sale).await, 5);
    let _: i64 = redis::cmd("DEL")
        .arg(&fence)
        .query_async(&mut connection)
        .await
        .expect("lower the fence");
    let (status, bought) = app.buy(1, "fenced", &buy_body(&sale, 1)).await;
    assert_eq!(status, 200, "{bought}");
    assert_eq!(app.redis_stock(&sale).await, 4);
}

/// Found in the code: a request id reused after its in-flight claim expired (PostgreSQL slow)
/// deducted again and hit the `(user_id, request_id)` unique constraint, which rolled back the
/// batch of every buyer in it, and the buyer got 503.
#[tokio::test]
async fn a_request_id_claimed_again_after_its_claim_expired_gets_the_first_order() {
    let app = spawn_app_with(storm_settings).await;
    let sale = open_sale(&app, 100, 2).await;
    let first = app.bought(5, "again", &buy_body(&sale, 1)).await;
    // The claim and answer gone, as when the claim expired before the pre-order committed.
    app.forget_answer(&sale, 5, "again").await;
    // In the same batches as other buyers, none of whom may suffer for it.
    let requests = std::iter::once((5, "again".to_owned()))
        .chain((100..140).map(|user| (user, format!("other-{user}"))))
        .collect();
    let results = storm(&app, &sale, requests, 41).await;
    for (user, status, answer) in &results {
        assert_eq!(*status, 200, "buyer {user}: {answer}");
        if *user == 5 {
            assert_eq!(order_id(answer), first, "the first order, not a second one");
        }
    }
    assert_eq!(app.count("orders").await, 41);
    assert_eq!(app.allocated(&sale).await, 41);
    // The second deduction was given back.
    assert_eq!(app.redis_stock(&sale).await, 59);
}

/// Found when tried as a buyer would: a request id reused for an item of another activity
/// was answered 200 with the first item's order, the second item's unit given back, and that
/// answer kept for an hour. PostgreSQL's unique key was (buyer, request id), so the second
/// item's pre-order was taken for a duplicate of the first. Idempotency is keyed on the buyer,
/// the activity, the item and the request id: each item gets an order of its own, on either
/// deduction path, and each replay its own item's order.
#[tokio::test]
async fn a_request_id_reused_for_another_item_buys_that_item() {
    for deduction in [DeductionMode::Redis, DeductionMode::Db] {
        request_id_reused_for_another_item(deduction).await;
    }
}

async fn request_id_reused_for_another_item(deduction: DeductionMode) {
    let app = spawn_app_with(|settings| {
        storm_settings(settings);
        settings.buy.deduction = deduction;
    })
    .await;
    let two_items = open_sale_of(&app, 2, 10, 1).await;
    let another_activity = open_sale(&app, 10, 1).await;
    let sales = [two_items[0], another_activity, two_items[1]];
    let mut answers = Vec::new();
    for sale in &sales {
        let answer = app.buy_bytes(4, "r1", sale).await;
        assert_eq!(answer.0, 200, "{deduction:?}: {answer:?}");
        answers.push(answer);
    }
    let orders: Vec<Uuid> = answers
        .iter()
        .map(|(_, body)| order_id(&serde_json::from_str(body).expect("json")))
        .collect();
    let distinct: HashSet<&Uuid> = orders.iter().collect();
    assert_eq!(
        distinct.len(),
        3,
        "{deduction:?}: one order per item: {answers:?}"
    );
    for (sale, answer) in sales.iter().zip(&answers) {
        assert_eq!(app.allocated(sale).await, 1, "{deduction:?}: its unit sold");
        if deduction == DeductionMode::Redis {
            assert_eq!(
                app.redis_stock(sale).await,
                9,
                "its unit kept, not given back"
            );
        }
        assert_eq!(
            &app.buy_bytes(4, "r1", sale).await,
            answer,
            "{deduction:?}: replay"
        );
    }
    let mut written: Vec<(Uuid, i64, i64)> = sqlx::query_as(
        "SELECT id, activity_id, item_id FROM orders WHERE user_id = 4 AND request_id = 'r1'",
    )
    .fetch_all(&app.db)
    .await
    .expect("orders");
    let mut expected: Vec<(Uuid, i64, i64)> = orders
        .iter()
        .zip(&sales)
        .map(|(order, sale)| (*order, sale.activity_id, sale.item_id))
        .collect();
    written.sort();
    expected.sort();
    assert_eq!(
        written, expected,
        "{deduction:?}: each item's order in PostgreSQL"
    );
}

/// The buy script on a Redis Cluster of three masters: every key of one buy shares its
/// item's hash tag, so each call runs whole on the item's master (a key elsewhere would be
/// refused with `CROSSSLOT`), and a storm on three items, each on its own master, sells
/// exactly each one's stock within the per-user limit.
#[tokio::test]
async fn a_storm_through_the_buy_script_on_a_redis_cluster_sells_exactly_the_stock() {
    let cluster = RedisCluster::start(3).await;
    let client = redis::cluster::ClusterClient::new(cluster.urls()).expect("cluster client");
    let connection = client
        .get_async_connection()
        .await
        .expect("cluster connection");
    let buy = redis::Script::new(include_str!("../../lua/buy.lua"));
    let release = redis::Script::new(include_str!("../../lua/release_deduction.lua"));
    let key = |item: i64, rest: &str| format!("{{a1.i{item}}}:{rest}");
    // Three items whose tags land on three different masters.
    let mut items = Vec::new();
    let mut masters = std::collections::HashSet::new();
    for item in 1.. {
        if masters.insert(cluster.master_of(&key(item, "stock")).await) {
            items.push(item);
        }
        if items.len() == 3 {
            break;
        }
    }
    for item in &items {
        let _: () = redis::cmd("SET")
            .arg(key(*item, "stock"))
            .arg(100)
            .query_async(&mut connection.clone())
            .await
            .expect("stock");
    }
    let requests: Vec<(i64, i64)> = items
        .iter()
        .flat_map(|item| (1..=700).map(move |buyer| (*item, buyer)))
        .collect();
    let answers: Vec<(i64, i64)> = stream::iter(requests)
        .map(|(item, buyer)| {
            let (buy, mut connection) = (&buy, connection.clone());
            async move {
                let mut call = buy.prepare_invoke();
                for rest in [
                    format!("idem:{buyer}:r"),
                    format!("rl:user:{buyer}"),
                    "rl:ip:127.0.0.1".to_owned(),
                    "rl:item".to_owned(),
                    "stock".to_owned(),
                    "bought".to_owned(),
                    "pending".to_owned(),
                    "fence".to_owned(),
                    "seats".to_owned(),
                    "holders".to_owned(),
                ] {
                    call.key(key(item, &rest));
                }
                call.arg("wcd").arg("in-flight").arg(10_000).arg(60);
                call.arg(1_000_000).arg(1_000_000).arg(1_000_000);
                call.arg(buyer)
                    .arg(1)
                    .arg(1)
                    .arg(uuid::Uuid::new_v4().to_string());
                let (code, _): (i64, Vec<u8>) =
                    call.invoke_async(&mut connection).await.expect("buy");
                (item, code)
            }
        })
        .buffer_unordered(64)
        .collect()
        .await;
    let mut connection = connection;
    for item in &items {
        let codes: Vec<i64> = answers
            .iter()
            .filter(|(of, _)| of == item)
            .map(|(_, code)| *code)
            .collect();
        assert_eq!(
            codes.iter().filter(|code| **code == 0).count(),
            100,
            "item {item}"
        );
        assert_eq!(
            codes.iter().filter(|code| **code == -1).count(),
            600,
            "item {item}"
        );
        let (stock, buyers, markers): (i64, i64, i64) = redis::pipe()
            .get(key(*item, "stock"))
            .hlen(key(*item, "bought"))
            .hlen(key(*item, "pending"))
            .query_async(&mut connection)
            .await
            .expect("figures");
        assert_eq!((stock, buyers, markers), (0, 100, 100), "item {item}");
    }
    // A give-back runs on the item's master like the buy.
    let pending: std::collections::HashMap<String, String> = redis::cmd("HGETALL")
        .arg(key(items[0], "pending"))
        .query_async(&mut connection)
        .await
        .expect("markers");
    let order = pending.keys().next().expect("a marker");
    let released: i64 = release
        .key(key(items[0], "stock"))
        .key(key(items[0], "bought"))
        .key(key(items[0], "seats"))
        .key(key(items[0], "pending"))
        .arg(order)
        .arg("1")
        .invoke_async(&mut connection)
        .await
        .expect("release");
    assert_eq!(released, 1);
}
