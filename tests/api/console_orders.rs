//! Orders in the admin API and the console: filters by activity and status,
//! newest first in pages, merchants see only their own activities' orders (404 otherwise),
//! bad filters answer 400 with a code, and one order shows its whole history.
//!
//! Orders in known states are written straight into PostgreSQL (then moved with guarded
//! updates, so the `order_events` trigger records their history as the pipeline would);
//! one order goes through the real buyer API to prove the listing reads what the buy path writes.

use crate::support::{
    app::{json, spawn_app, spawn_app_with, TestApp},
    fixtures::{buy_body, open_for_sale, shop, Caller, Shop},
};
use contract::{OrderDetail, OrderPage, Role};
use leptos::server_fn::ServerFn;
use serde_json::Value;
use uuid::Uuid;

/// Writes a pre-order created `minutes_ago`, then moves it along `path` one guarded step at
/// a time (the trigger records each step).
async fn order(app: &TestApp, shop: &Shop, user_id: i64, minutes_ago: i64, path: &[&str]) -> Uuid {
    order_with_id(app, shop, Uuid::new_v4(), user_id, minutes_ago, path).await
}

/// [`order`] with the id the test chose.
async fn order_with_id(
    app: &TestApp,
    shop: &Shop,
    id: Uuid,
    user_id: i64,
    minutes_ago: i64,
    path: &[&str],
) -> Uuid {
    sqlx::query(
        "INSERT INTO orders (id, activity_id, item_id, user_id, quantity, amount_cents, status, request_id, created_at)
         VALUES ($1, $2, $3, $4, 1, 990, 'PRE_CREATED', $5, now() - make_interval(mins => $6::INTEGER))",
    )
    .bind(id)
    .bind(shop.sale.activity_id)
    .bind(shop.sale.item_id)
    .bind(user_id)
    .bind(format!("req-{id}"))
    .bind(minutes_ago)
    .execute(&app.db)
    .await
    .expect("pre-order");
    let mut from = "PRE_CREATED";
    for to in path {
        let moved = sqlx::query("UPDATE orders SET status = $3 WHERE id = $1 AND status = $2")
            .bind(id)
            .bind(from)
            .bind(to)
            .execute(&app.db)
            .await
            .expect("move order");
        assert_eq!(moved.rows_affected(), 1, "{from} → {to}");
        from = to;
    }
    id
}

/// An app whose leader never gives the world's journaled stock back to Redis: its scanner
/// retries a give-back two scan intervals after the journal row, so a test that reads the
/// row as still owed would otherwise pass or fail with the speed of the machine.
async fn spawn_app_keeping_give_backs_owed() -> TestApp {
    spawn_app_with(|settings| settings.pipeline.timeout_scan_interval_ms = 3_600_000).await
}

/// Acme has a paid, a cancelled and a fresh order; Globex one unpaid order.
struct World {
    acme: Shop,
    globex: Shop,
    paid: Uuid,
    cancelled: Uuid,
    fresh: Uuid,
    rival_unpaid: Uuid,
}

async fn world(app: &TestApp) -> World {
    let acme = shop(app, "acme", "Acme sale").await;
    let globex = shop(app, "globex", "Globex sale").await;
    let paid = order(app, &acme, 1, 40, &["UNPAID", "PAID"]).await;
    let cancelled = order(app, &acme, 2, 30, &["UNPAID", "CANCELLED"]).await;
    let rival_unpaid = order(app, &globex, 3, 20, &["UNPAID"]).await;
    let fresh = order(app, &acme, 4, 10, &[]).await;
    sqlx::query(
        "INSERT INTO payment_trades (trade_no, order_id, amount_cents, status, paid_at, notified_at, notify_attempts)
         VALUES ('T-PAID-1', $1, 990, 'paid', now(), now(), 1)",
    )
    .bind(paid)
    .execute(&app.db)
    .await
    .expect("trade");
    sqlx::query(
        "INSERT INTO stock_restore_journal (order_id, activity_id, item_id, quantity) VALUES ($1, $2, $3, 1)",
    )
    .bind(cancelled)
    .bind(acme.sale.activity_id)
    .bind(acme.sale.item_id)
    .execute(&app.db)
    .await
    .expect("restore journal");
    World {
        acme,
        globex,
        paid,
        cancelled,
        fresh,
        rival_unpaid,
    }
}

async fn page(app: &TestApp, caller: &Caller, query: &str) -> OrderPage {
    let response = app
        .get(&format!("/admin/api/orders{query}"), Some(caller))
        .await;
    assert_eq!(response.status(), 200, "{query}");
    response.json().await.expect("order page")
}

fn ids(page: &OrderPage) -> Vec<String> {
    page.rows
        .orders
        .iter()
        .map(|order| order.id.clone())
        .collect()
}

#[tokio::test]
async fn orders_are_filtered_newest_first_and_merchants_see_only_their_own() {
    let app = spawn_app().await;
    let w = world(&app).await;
    let ops = app.caller(Role::Ops, None).await;
    let sre = app.caller(Role::Sre, None).await;

    let all = page(&app, &ops, "").await;
    let newest_first = [w.fresh, w.rival_unpaid, w.cancelled, w.paid].map(|id| id.to_string());
    assert_eq!(ids(&all), newest_first);
    assert_eq!((all.page, all.has_more), (1, false));
    assert_eq!(all.rows.statuses[0].as_str(), "PRE_CREATED");
    assert_eq!(all.rows.statuses.len(), 6);
    assert_eq!(ids(&page(&app, &sre, "").await), newest_first);

    let acme_only = page(
        &app,
        &ops,
        &format!("?activity_id={}", w.acme.sale.activity_id),
    )
    .await;
    assert_eq!(
        ids(&acme_only),
        [w.fresh, w.cancelled, w.paid].map(|id| id.to_string())
    );
    let paid = page(&app, &ops, "?status=PAID").await;
    assert_eq!(ids(&paid), [w.paid.to_string()]);
    assert_eq!(paid.rows.orders[0].activity_title, "Acme sale");
    assert_eq!(paid.rows.orders[0].amount_cents, 990);
    let none = page(
        &app,
        &ops,
        &format!("?activity_id={}&status=PAID", w.globex.sale.activity_id),
    )
    .await;
    assert!(none.rows.orders.is_empty());
    // Empty parameters, as an HTML form sends them, mean "any".
    assert_eq!(
        ids(&page(&app, &ops, "?activity_id=&status=&page=").await),
        newest_first
    );

    // A merchant sees its own orders only; the rival's activity and order are "not found".
    let mine = page(&app, &w.acme.merchant, "").await;
    assert_eq!(
        ids(&mine),
        [w.fresh, w.cancelled, w.paid].map(|id| id.to_string())
    );
    let rival_activity = format!(
        "/admin/api/orders?activity_id={}",
        w.globex.sale.activity_id
    );
    let (status, body) = json(app.get(&rival_activity, Some(&w.acme.merchant)).await).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (404, Some("NOT_FOUND")),
        "{body}"
    );
    let rival_order = format!("/admin/api/orders/{}", w.rival_unpaid);
    let (status, body) = json(app.get(&rival_order, Some(&w.acme.merchant)).await).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (404, Some("NOT_FOUND")),
        "{body}"
    );
    let (status, _) = json(app.get(&rival_order, Some(&w.globex.merchant)).await).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn orders_come_in_pages_of_fifty() {
    let app = spawn_app().await;
    let acme = shop(&app, "acme", "Big sale").await;
    let ops = app.caller(Role::Ops, None).await;
    // 51 orders, one a minute apart: the oldest is the only one on page 2.
    sqlx::query(
        "INSERT INTO orders (id, activity_id, item_id, user_id, quantity, amount_cents, status, request_id, created_at)
         SELECT gen_random_uuid(), $1, $2, n, 1, 990, 'PRE_CREATED', 'bulk-' || n, now() - make_interval(mins => n)
         FROM generate_series(1, 51) AS n",
    )
    .bind(acme.sale.activity_id)
    .bind(acme.sale.item_id)
    .execute(&app.db)
    .await
    .expect("bulk orders");

    let first = page(&app, &ops, "").await;
    assert_eq!(
        (first.rows.orders.len(), first.per_page, first.has_more),
        (50, 50, true)
    );
    assert_eq!(first.rows.orders[0].user_id, 1);
    let second = page(&app, &ops, "?page=2").await;
    assert_eq!(
        (second.rows.orders.len(), second.page, second.has_more),
        (1, 2, false)
    );
    assert_eq!(second.rows.orders[0].user_id, 51);
    assert!(page(&app, &ops, "?page=3").await.rows.orders.is_empty());
}

#[tokio::test]
async fn bad_order_queries_get_a_400_with_a_code_and_strangers_a_401() {
    let app = spawn_app().await;
    let ops = app.caller(Role::Ops, None).await;
    for query in [
        "?status=SHIPPED",
        "?status=paid",
        "?activity_id=abc",
        "?page=0",
        "?page=-3",
        "?page=9223372036854775807",
        "?colour=red",
    ] {
        let (status, body) = json(
            app.get(&format!("/admin/api/orders{query}"), Some(&ops))
                .await,
        )
        .await;
        assert_eq!(status, 400, "{query}: {body}");
        assert_eq!(body["code"], "BAD_REQUEST", "{query}");
        assert!(body["message"].as_str().is_some_and(|m| !m.is_empty()));
    }
    let (status, body) = json(
        app.get("/admin/api/orders?status=SHIPPED", Some(&ops))
            .await,
    )
    .await;
    assert!(
        body["message"]
            .as_str()
            .unwrap_or_default()
            .contains("REFUND_PENDING"),
        "the message lists the known statuses: {body}"
    );
    assert_eq!(status, 400);
    let (status, body) = json(app.get("/admin/api/orders/not-an-order", Some(&ops)).await).await;
    assert_eq!((status, body["code"].as_str()), (400, Some("BAD_REQUEST")));
    let missing = format!("/admin/api/orders/{}", Uuid::new_v4());
    assert_eq!(json(app.get(&missing, Some(&ops)).await).await.0, 404);
    assert_eq!(
        json(
            app.get("/admin/api/orders?activity_id=999999", Some(&ops))
                .await
        )
        .await
        .0,
        404
    );
    assert_eq!(json(app.get("/admin/api/orders", None).await).await.0, 401);
    assert_eq!(json(app.get(&missing, None).await).await.0, 401);
}

#[tokio::test]
async fn an_order_shows_its_history_trades_and_stock_restore() {
    let app = spawn_app_keeping_give_backs_owed().await;
    let w = world(&app).await;
    let ops = app.caller(Role::Ops, None).await;
    let detail = |id: Uuid| {
        let app = &app;
        let ops = &ops;
        async move {
            let response = app.get(&format!("/admin/api/orders/{id}"), Some(ops)).await;
            assert_eq!(response.status(), 200);
            response.json::<OrderDetail>().await.expect("order detail")
        }
    };
    let steps = |detail: &OrderDetail| -> Vec<(Option<String>, String)> {
        detail
            .history
            .iter()
            .map(|step| {
                (
                    step.from.map(|s| s.as_str().to_owned()),
                    step.to.as_str().to_owned(),
                )
            })
            .collect()
    };
    let pair = |from: Option<&str>, to: &str| (from.map(str::to_owned), to.to_owned());

    let paid = detail(w.paid).await;
    assert_eq!(paid.order.status.as_str(), "PAID");
    assert_eq!(
        steps(&paid),
        [
            pair(None, "PRE_CREATED"),
            pair(Some("PRE_CREATED"), "UNPAID"),
            pair(Some("UNPAID"), "PAID")
        ]
    );
    assert_eq!(paid.history[0].at, paid.order.created_at);
    assert!(paid.history.windows(2).all(|w| w[0].at <= w[1].at));
    assert_eq!(paid.trades.len(), 1);
    assert_eq!(
        (
            paid.trades[0].trade_no.as_str(),
            paid.trades[0].status.as_str()
        ),
        ("T-PAID-1", "paid")
    );
    assert_eq!(paid.restore, None);
    assert_eq!(paid.request_id, format!("req-{}", w.paid));

    let cancelled = detail(w.cancelled).await;
    assert_eq!(
        steps(&cancelled).last(),
        Some(&pair(Some("UNPAID"), "CANCELLED"))
    );
    let restore = cancelled.restore.expect("restore journal row");
    assert_eq!(restore.quantity, 1);
    assert_eq!(restore.redis_restored_at, None);
    assert!(cancelled.trades.is_empty());

    let fresh = detail(w.fresh).await;
    assert_eq!(steps(&fresh), [pair(None, "PRE_CREATED")]);
}

/// The consumer's completion is kept in the order row, the previous release's as a row of
/// `order_events` (a rolling deploy runs both): either way the history shows it once, in its
/// place, and the next change after it.
#[tokio::test]
async fn a_completion_by_either_release_shows_once_in_the_history() {
    let app = spawn_app().await;
    let acme = shop(&app, "acme", "Two releases").await;
    let ops = app.caller(Role::Ops, None).await;
    let now = order(&app, &acme, 11, 2, &[]).await;
    let before = order(&app, &acme, 12, 2, &[]).await;
    // This release's statement, then the one the previous release calls (an order without a
    // batch row is its own event).
    for (call, id) in [
        (
            "SELECT count(*) FROM complete_orders('console-test', ARRAY[$1])",
            now,
        ),
        (
            "SELECT count(*) FROM complete_created_orders('console-test', ARRAY[$1])",
            before,
        ),
    ] {
        sqlx::query(call)
            .bind(id)
            .execute(&app.db)
            .await
            .expect("complete");
    }
    for id in [now, before] {
        let paid =
            sqlx::query("UPDATE orders SET status = 'PAID' WHERE id = $1 AND status = 'UNPAID'")
                .bind(id)
                .execute(&app.db)
                .await
                .expect("pay");
        assert_eq!(paid.rows_affected(), 1, "{id} completed");
    }
    let history_rows = |id: Uuid| {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM order_events WHERE order_id = $1")
            .bind(id)
            .fetch_one(&app.db)
    };
    assert_eq!(
        history_rows(now).await.expect("rows"),
        1,
        "only UNPAID → PAID"
    );
    assert_eq!(history_rows(before).await.expect("rows"), 2, "both changes");

    for id in [now, before] {
        let response = app
            .get(&format!("/admin/api/orders/{id}"), Some(&ops))
            .await;
        assert_eq!(response.status(), 200);
        let detail: OrderDetail = response.json().await.expect("order detail");
        let steps: Vec<(Option<&str>, &str)> = detail
            .history
            .iter()
            .map(|step| (step.from.map(|s| s.as_str()), step.to.as_str()))
            .collect();
        assert_eq!(
            steps,
            [
                (None, "PRE_CREATED"),
                (Some("PRE_CREATED"), "UNPAID"),
                (Some("UNPAID"), "PAID")
            ],
            "{id}"
        );
        assert!(
            detail.history.windows(2).all(|w| w[0].at <= w[1].at),
            "{id}"
        );
    }
}

#[tokio::test]
async fn an_order_bought_through_the_buyer_api_is_listed_from_its_creation() {
    let app = spawn_app().await;
    let acme = shop(&app, "acme", "Live sale").await;
    let ops = app.caller(Role::Ops, None).await;
    open_for_sale(&app, &acme, &ops).await;
    let order_id = app
        .bought(77, "console-orders-1", &buy_body(&acme.sale, 2))
        .await
        .to_string();

    let listed = page(
        &app,
        &acme.merchant,
        &format!("?activity_id={}", acme.sale.activity_id),
    )
    .await;
    assert_eq!(ids(&listed), std::slice::from_ref(&order_id));
    assert_eq!(
        (
            listed.rows.orders[0].user_id,
            listed.rows.orders[0].quantity
        ),
        (77, 2)
    );
    let (status, detail) = json(
        app.get(&format!("/admin/api/orders/{order_id}"), Some(&ops))
            .await,
    )
    .await;
    assert_eq!(status, 200, "{detail}");
    assert_eq!(detail["request_id"], "console-orders-1");
    let history = detail["history"].as_array().expect("history");
    assert_eq!(history[0]["to"], "PRE_CREATED");
    assert_eq!(history[0]["from"], Value::Null);
    // The pipeline may have moved it on already; the history always ends where the order is.
    assert_eq!(
        history.last().expect("a step")["to"],
        detail["order"]["status"]
    );
}

#[tokio::test]
async fn the_console_lists_and_shows_orders_within_the_merchant_scope() {
    let app = spawn_app_keeping_give_backs_owed().await;
    let w = world(&app).await;
    tokio::time::sleep(std::time::Duration::from_secs(12)).await;
    let acme = app.console_session(&w.acme.merchant).await;

    let response = app
        .console_call(app::api::ListOrders::PATH, &acme, &[("status", "PAID")])
        .await;
    assert_eq!(response.status(), 200);
    let paid: OrderPage = response.json().await.expect("page");
    assert_eq!(ids(&paid), [w.paid.to_string()]);
    let response = app
        .console_call(app::api::ListOrders::PATH, &acme, &[])
        .await;
    let mine: OrderPage = response.json().await.expect("page");
    assert!(!ids(&mine).contains(&w.rival_unpaid.to_string()));

    let refused = app
        .console_call(app::api::ListOrders::PATH, &acme, &[("status", "SHIPPED")])
        .await;
    assert_eq!(refused.status(), 400);
    let hidden = app
        .console_call(
            app::api::GetOrder::PATH,
            &acme,
            &[("id", &w.rival_unpaid.to_string())],
        )
        .await;
    assert_eq!(hidden.status(), 404);
    let shown = app
        .console_call(
            app::api::GetOrder::PATH,
            &acme,
            &[("id", &w.cancelled.to_string())],
        )
        .await;
    assert_eq!(shown.status(), 200);
    let unauthenticated = app
        .console_call(app::api::ListOrders::PATH, "expired", &[])
        .await;
    assert_eq!(unauthenticated.status(), 401);

    // The pages render on the server: the filtered list, and the detail with its history.
    let html = app.console_page("/orders?status=CANCELLED", &acme).await;
    assert!(html.contains(r#"id="order-list""#), "{html}");
    assert!(html.contains(&w.cancelled.to_string()[..8]), "{html}");
    assert!(
        !html.contains(&w.paid.to_string()[..8]),
        "PAID order under a CANCELLED filter: {html}"
    );
    assert!(
        html.contains(r#"<option value="CANCELLED" selected"#),
        "{html}"
    );
    // Times as every page shows them: in the viewer's zone once live, UTC beside.
    assert!(html.contains(r#"class="when">"#), "{html}");
    let html = app
        .console_page(&format!("/orders/{}", w.cancelled), &acme)
        .await;
    assert!(html.contains(r#"id="order-history""#), "{html}");
    assert!(html.contains("status-cancelled"), "{html}");
    assert!(html.contains("not given back yet"), "{html}");
    assert!(html.contains(r#"class="when">"#), "{html}");
    let html = app
        .console_page(&format!("/orders/{}", w.rival_unpaid), &acme)
        .await;
    assert!(
        html.contains("not found") && !html.contains(r#"id="order-history""#),
        "{html}"
    );
}

#[tokio::test]
async fn the_order_list_tells_apart_orders_made_in_the_same_second() {
    let app = spawn_app().await;
    let acme = shop(&app, "acme", "Same second").await;
    // UUIDv7s of one moment share their leading (time) digits.
    let ids = [Uuid::now_v7(), Uuid::now_v7()];
    for (user, id) in (1..).zip(ids) {
        order_with_id(&app, &acme, id, user, 0, &["UNPAID"]).await;
    }
    let label = |id: &Uuid| {
        let id = id.to_string();
        format!("…{}", &id[id.len() - 12..])
    };
    assert_ne!(label(&ids[0]), label(&ids[1]));
    let session = app.console_session(&acme.merchant).await;
    let html = app.console_page("/orders", &session).await;
    for id in &ids {
        assert!(html.contains(&label(id)), "{} not shown: {html}", label(id));
        assert!(html.contains(&format!(r#"title="{id}""#)), "{html}");
    }
}
