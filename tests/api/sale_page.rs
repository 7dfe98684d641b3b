//! The static sale page. Over HTTP: who may publish and what it answers, the page and its
//! hashed assets with their cache headers and entity tags, versions, the button script by
//! the server's clock, bad input, and another instance serving what one published. In
//! Chromium (`tests/browser/sale_page_*.mjs`): a visitor's clock an hour off does not light
//! the button early or late, the buyer's whole flow from the countdown to paid, the flow with
//! a limit of two (to the limit, an unpaid order timed out, a new try), by mouse and by the
//! keyboard alone, refusals in
//! words, a buy that timed out retried as the same order, the page without its API, and an
//! order the pipeline holds said calmly to be in preparation, a page published before its
//! pre-warm saying the sale is not open yet (never that the shop cannot be reached), and a
//! sold-out sale's visitor reading sold out, not "sign in to buy", and the units left following
//! other buyers' purchases by the event stream down to sold out.

use crate::browser::{finish_scenario, shots, start_scenario};
use crate::support::{
    app::{json, spawn_app, spawn_app_with, TestApp},
    fixtures::{
        buy_body, open_for_sale, prewarm, shop, token, upcoming_activity, Caller, Listing, Sale,
        Shop, TestClock,
    },
    wait,
};
use base::config::AsyncMode;
use contract::Role;
use reqwest::{header, Method, Response};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

const ASSET_CACHE: &str = "public, max-age=31536000, immutable";

async fn publish(app: &TestApp, caller: Option<&Caller>, activity: &str) -> (u16, Value) {
    json(
        app.post_json(
            &format!("/admin/api/activities/{activity}/publish"),
            caller,
            &json!({}),
        )
        .await,
    )
    .await
}

/// Publishes as `caller`, which must succeed; the version.
async fn published(app: &TestApp, caller: &Caller, activity_id: i64) -> i64 {
    let (status, body) = publish(app, Some(caller), &activity_id.to_string()).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["url"], format!("/sale/{activity_id}/"));
    body["version"].as_i64().expect("version")
}

async fn get_with(app: &TestApp, path: &str, if_none_match: Option<&str>) -> Response {
    let mut request = app.client.get(format!("{}{path}", app.address));
    if let Some(tag) = if_none_match {
        request = request.header(header::IF_NONE_MATCH, tag);
    }
    request.send().await.expect("request sent")
}

fn header_of(response: &Response, name: header::HeaderName) -> String {
    response
        .headers()
        .get(&name)
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

/// The `/sale/assets/...` paths a page names: its script first, then its stylesheet.
fn asset_paths(html: &str) -> Vec<String> {
    let mut paths: Vec<String> = html
        .split("\"/sale/assets/")
        .skip(1)
        .filter_map(|rest| rest.split_once('"'))
        .map(|(name, _)| format!("/sale/assets/{name}"))
        .collect();
    paths.sort_by_key(|path| !path.ends_with(".js"));
    paths
}

/// The page's HTML and entity tag; the page must be there.
async fn page(app: &TestApp, activity_id: i64) -> (String, String) {
    let response = get_with(app, &format!("/sale/{activity_id}/"), None).await;
    assert_eq!(response.status(), 200);
    let tag = header_of(&response, header::ETAG);
    (response.text().await.expect("html"), tag)
}

/// Gives the shop's item a description, as the merchant would.
async fn describe_item(app: &TestApp, shop: &Shop, description: &str) {
    let (status, body) = json(
        app.send_json(
            Method::PUT,
            &format!("/admin/api/items/{}", shop.sale.item_id),
            Some(&shop.merchant),
            &json!({ "name": "Phone X", "description": description, "price_cents": 990 }),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{body}");
}

#[tokio::test]
async fn a_published_page_carries_the_static_facts_with_cache_headers_and_answers_304_when_current()
{
    let app = spawn_app().await;
    let shop = shop(&app, "acme", "Double <11>").await;
    describe_item(&app, &shop, "Fast & small").await;
    let id = shop.sale.activity_id;
    assert_eq!(published(&app, &shop.merchant, id).await, 1);

    let response = get_with(&app, &format!("/sale/{id}/"), None).await;
    assert_eq!(response.status(), 200);
    assert_eq!(
        header_of(&response, header::CACHE_CONTROL),
        "public, max-age=5"
    );
    assert!(header_of(&response, header::CONTENT_TYPE).starts_with("text/html"));
    let tag = header_of(&response, header::ETAG);
    assert!(tag.starts_with('"') && tag.len() > 2, "{tag}");
    let html = response.text().await.expect("html");
    for expected in [
        "<title>Double &lt;11&gt;</title>",
        "Phone X",
        ">¥9.90</span>",
        "Fast &amp; small",
        "At most 5 per buyer",
        r#"<button id="buy" type="button" disabled>"#,
        "Sale status unknown",
    ] {
        assert!(html.contains(expected), "{expected} not in\n{html}");
    }

    let current = get_with(&app, &format!("/sale/{id}/"), Some(&tag)).await;
    assert_eq!(current.status(), 304);
    assert_eq!(header_of(&current, header::ETAG), tag);
    assert!(current.bytes().await.expect("body").is_empty());
    let stale = get_with(&app, &format!("/sale/{id}/"), Some("\"someone-else\"")).await;
    assert_eq!(stale.status(), 200);

    let assets = asset_paths(&html);
    assert_eq!(assets.len(), 2, "{assets:?}");
    for path in &assets {
        let response = get_with(&app, path, None).await;
        assert_eq!(response.status(), 200, "{path}");
        assert_eq!(header_of(&response, header::CACHE_CONTROL), ASSET_CACHE);
        let tag = header_of(&response, header::ETAG);
        let body = response.bytes().await.expect("asset");
        // The name is the content's hash: other content, another name.
        let digest = hex::encode(Sha256::digest(&body));
        let hash = path.rsplit('/').next().expect("name").split('.').nth(1);
        assert_eq!(hash, Some(&digest[..12]), "{path}");
        let again = get_with(&app, path, Some(&tag)).await;
        assert_eq!(again.status(), 304, "{path}");
    }

    let button = get_with(&app, &format!("/sale/{id}/button.js"), None).await;
    assert_eq!(button.status(), 200);
    assert_eq!(
        header_of(&button, header::CACHE_CONTROL),
        "public, max-age=1"
    );
    let script = button.text().await.expect("button");
    assert!(script.contains(r#""canStart":false"#), "{script}");
}

/// The activity's input with another title and the same everything else.
async fn retitle(app: &TestApp, shop: &Shop, title: &str) {
    let id = shop.sale.activity_id;
    let (_, detail) = json(
        app.get(&format!("/admin/api/activities/{id}"), Some(&shop.merchant))
            .await,
    )
    .await;
    let items: Vec<Value> = detail["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|item| {
            json!({ "item_id": item["item_id"], "stock": item["total_stock"],
                    "per_user_limit": item["per_user_limit"], "price_cents": item["price_cents"] })
        })
        .collect();
    let (status, body) = json(
        app.send_json(
            Method::PUT,
            &format!("/admin/api/activities/{id}"),
            Some(&shop.merchant),
            &json!({ "title": title, "starts_at": detail["starts_at"], "ends_at": detail["ends_at"],
                     "kind": detail["kind"], "pay_timeout_s": detail["pay_timeout_s"], "items": items }),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{body}");
}

#[tokio::test]
async fn republishing_after_an_edit_bumps_the_version_and_the_old_assets_still_answer() {
    let app = spawn_app().await;
    let shop = shop(&app, "acme", "First title").await;
    let id = shop.sale.activity_id;
    assert_eq!(published(&app, &shop.merchant, id).await, 1);
    let (first, first_tag) = page(&app, id).await;
    let first_assets = asset_paths(&first);

    retitle(&app, &shop, "Second title").await;
    assert_eq!(published(&app, &shop.merchant, id).await, 2);
    let (second, second_tag) = page(&app, id).await;
    assert!(second.contains("<title>Second title</title>"), "{second}");
    assert!(second.contains(r#"data-version="2""#));
    assert_ne!(first_tag, second_tag);
    // The script carries the version: a new name. The stylesheet did not change: same name.
    let second_assets = asset_paths(&second);
    assert_ne!(first_assets[0], second_assets[0]);
    assert_eq!(first_assets[1], second_assets[1]);

    // A buyer who loaded the first version still gets its script, unchanged and immutable.
    let old = get_with(&app, &first_assets[0], None).await;
    assert_eq!(old.status(), 200);
    assert_eq!(header_of(&old, header::CACHE_CONTROL), ASSET_CACHE);
    let old_script = old.text().await.expect("script");
    assert!(old_script.contains(r#""version":1,"#), "{old_script}");
    let revalidated = get_with(&app, &format!("/sale/{id}/"), Some(&first_tag)).await;
    assert_eq!(revalidated.status(), 200, "the old tag is not current");
    assert_eq!(app.count("sale_pages").await, 1);
}

#[tokio::test]
async fn the_button_script_turns_on_at_the_start_by_the_servers_clock() {
    let app = spawn_app().await;
    let clock = TestClock::starting_now();
    app.state.sale_pages.use_clock(clock.clone());
    let shop = shop(&app, "acme", "Clockwork").await;
    let id = shop.sale.activity_id;
    published(&app, &shop.merchant, id).await;
    let path = format!("/sale/{id}/button.js");

    let before = get_with(&app, &path, None).await;
    let before_tag = header_of(&before, header::ETAG);
    let script = before.text().await.expect("script");
    assert!(script.contains(r#""canStart":false"#), "{script}");
    assert!(script.contains(r#""version":"1.upcoming""#), "{script}");

    // The fixture's sale starts an hour after it was made (just after the clock stood
    // still) and lasts one.
    clock.advance(Duration::from_secs(3605));
    let at_start = get_with(&app, &path, Some(&before_tag)).await;
    assert_eq!(at_start.status(), 200, "a new version, not the cached one");
    assert_ne!(header_of(&at_start, header::ETAG), before_tag);
    let script = at_start.text().await.expect("script");
    assert!(script.contains(r#""canStart":true"#), "{script}");
    assert!(script.contains(r#""version":"1.open""#), "{script}");

    clock.advance(Duration::from_secs(3600));
    let script = get_with(&app, &path, None)
        .await
        .text()
        .await
        .expect("script");
    assert!(script.contains(r#""canStart":false"#), "{script}");
    assert!(script.contains(r#""phase":"ended""#), "{script}");
}

#[tokio::test]
async fn publishing_is_for_the_owner_ops_and_admin_and_bad_input_changes_nothing() {
    let app = spawn_app().await;
    let shop = shop(&app, "acme", "Guarded").await;
    let id = shop.sale.activity_id.to_string();
    let other = app.caller(Role::Merchant, Some("globex")).await;
    let sre = app.caller(Role::Sre, None).await;
    let ops = app.caller(Role::Ops, None).await;
    let admin = app.caller(Role::Admin, None).await;

    let refused = [
        (Some(&other), id.as_str(), 404, "NOT_FOUND"),
        (Some(&sre), id.as_str(), 403, "FORBIDDEN"),
        (None, id.as_str(), 401, "UNAUTHENTICATED"),
        (Some(&ops), "abc", 400, "BAD_REQUEST"),
        (Some(&ops), "-", 400, "BAD_REQUEST"),
        (Some(&ops), "999999999", 404, "NOT_FOUND"),
    ];
    for (caller, activity, want, code) in refused {
        let (status, body) = publish(&app, caller, activity).await;
        assert_eq!(
            (status, body["code"].as_str()),
            (want, Some(code)),
            "{activity}: {body}"
        );
    }
    assert_eq!(app.count("sale_pages").await, 0);
    for (path, want, code) in [
        (format!("/sale/{id}/"), 404, "NOT_FOUND"),
        (format!("/sale/{id}/button.js"), 404, "NOT_FOUND"),
        ("/sale/abc/".to_owned(), 400, "BAD_REQUEST"),
        ("/sale/abc/button.js".to_owned(), 400, "BAD_REQUEST"),
        ("/sale/99999999999999999999/".to_owned(), 400, "BAD_REQUEST"),
        (
            "/sale/assets/sale.000000000000.js".to_owned(),
            404,
            "NOT_FOUND",
        ),
    ] {
        let (status, body) = json(app.get(&path, None).await).await;
        assert_eq!(
            (status, body["code"].as_str()),
            (want, Some(code)),
            "{path}: {body}"
        );
    }

    for (caller, version) in [(&ops, 1), (&admin, 2), (&shop.merchant, 3)] {
        assert_eq!(
            published(&app, caller, shop.sale.activity_id).await,
            version
        );
    }
    let bare = app.get(&format!("/sale/{id}"), None).await;
    assert_eq!(bare.status(), 308);
    assert_eq!(header_of(&bare, header::LOCATION), format!("/sale/{id}/"));
}

#[tokio::test]
async fn another_instance_serves_what_was_published_and_follows_the_next_publish() {
    let app = spawn_app().await;
    let shop = shop(&app, "acme", "Everywhere").await;
    let id = shop.sale.activity_id;
    published(&app, &shop.merchant, id).await;
    let (_, tag) = page(&app, id).await;

    // Started after the publish, as after a restart: loaded from the site directory.
    let sibling = app.spawn_sibling(|_| {}).await;
    let (html, sibling_tag) = page(&sibling, id).await;
    assert_eq!(sibling_tag, tag);
    for path in asset_paths(&html) {
        assert_eq!(
            get_with(&sibling, &path, None).await.status(),
            200,
            "{path}"
        );
    }

    published(&app, &shop.merchant, id).await;
    wait::until(
        "the sibling serves version 2",
        Duration::from_secs(10),
        || async { page(&sibling, id).await.0.contains(r#"data-version="2""#) },
    )
    .await;
}

#[tokio::test]
async fn the_console_publishes_from_the_activity_page() {
    use leptos::server_fn::ServerFn;
    let app = spawn_app().await;
    let shop = shop(&app, "acme", "From the console").await;
    let id = shop.sale.activity_id;
    let session = app.console_session(&shop.merchant).await;
    let html = app
        .console_page(&format!("/activities/{id}"), &session)
        .await;
    assert!(html.contains(r#"id="publish-form""#), "{html}");
    let id_text = id.to_string();
    let form = [("id", id_text.as_str())];
    let response = app
        .console_call(app::api::PublishSalePage::PATH, &session, &form)
        .await;
    let (status, body) = json(response).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["version"], 1);
    assert_eq!(body["url"], format!("/sale/{id}/"));
    assert!(page(&app, id).await.0.contains("From the console"));
}

// ---- in Chromium ----

/// A merchant's activity of one item, pre-warmed, starting `seconds` from now, its page
/// published; the sale and its start (ms since the epoch).
async fn opening_soon(app: &TestApp, seconds: i64, stock: i64) -> (Sale, i64) {
    opening_soon_limited(app, seconds, stock, 1).await
}

/// [`opening_soon`] where one buyer may buy `per_user_limit` units.
async fn opening_soon_limited(
    app: &TestApp,
    seconds: i64,
    stock: i64,
    per_user_limit: i64,
) -> (Sale, i64) {
    let merchant = app.caller(Role::Merchant, Some("acme")).await;
    let ops = app.caller(Role::Ops, None).await;
    let sale = upcoming_activity(app, &merchant, &Listing::storm(stock, per_user_limit, &[])).await;
    prewarm(app, &ops, &sale).await;
    let starts_at = chrono::Utc::now() + chrono::Duration::seconds(seconds);
    sqlx::query("UPDATE activities SET starts_at = $2 WHERE id = $1")
        .bind(sale.activity_id)
        .bind(starts_at)
        .execute(&app.db)
        .await
        .expect("move the start");
    published(app, &merchant, sale.activity_id).await;
    (sale, starts_at.timestamp_millis())
}

/// An open sale's page, published; its shop.
pub(crate) async fn open_page(app: &TestApp, stock: i64) -> Shop {
    open_page_limited(app, stock, 1).await
}

/// [`open_page`] where one buyer may buy `per_user_limit` units.
async fn open_page_limited(app: &TestApp, stock: i64, per_user_limit: i64) -> Shop {
    let merchant = app.caller(Role::Merchant, Some("acme")).await;
    let ops = app.caller(Role::Ops, None).await;
    let listing = Listing::storm(stock, per_user_limit, &[]);
    let sale = upcoming_activity(app, &merchant, &listing).await;
    let shop = Shop { merchant, sale };
    open_for_sale(app, &shop, &ops).await;
    published(app, &shop.merchant, shop.sale.activity_id).await;
    shop
}

/// `key=value` of the scenario's output.
pub(crate) fn said_value<'a>(said: &'a [String], key: &str) -> Option<&'a str> {
    said.iter()
        .find_map(|line| line.strip_prefix(key)?.strip_prefix('='))
}

async fn clock_off_by(offset_ms: i64) {
    let app = spawn_app().await;
    let (sale, starts_at_ms) = opening_soon(&app, 12, 10).await;
    let said = buyer_scenario(
        &app,
        "sale_page_clock.mjs",
        sale.activity_id,
        501,
        &[starts_at_ms.to_string(), offset_ms.to_string()],
    )
    .await;
    let lit_at: i64 = said_value(&said, "lit_at")
        .and_then(|ms| ms.parse().ok())
        .unwrap_or_else(|| panic!("no lit_at in {said:?}"));
    // The scenario's clock is the machine's, the server's: grey until the start, lit within 1 s.
    assert!(
        lit_at >= starts_at_ms,
        "lit {} ms early",
        starts_at_ms - lit_at
    );
    assert!(
        lit_at - starts_at_ms <= 1000,
        "lit {} ms late",
        lit_at - starts_at_ms
    );
}

/// Everything a started scenario says, once it ended well.
async fn lines_of(mut child: tokio::process::Child) -> Vec<String> {
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut said = Vec::new();
    while let Some(line) = lines.next_line().await.expect("the scenario's output") {
        said.push(line);
    }
    finish_scenario(child, &said).await;
    said
}

/// Runs `script` as buyer `buyer` on the activity's page (with `extra` arguments before the
/// screenshot folder); what it said.
async fn buyer_scenario(
    app: &TestApp,
    script: &str,
    activity_id: i64,
    buyer: i64,
    extra: &[String],
) -> Vec<String> {
    let mut args = vec![
        app.address.clone(),
        activity_id.to_string(),
        token(app, buyer),
    ];
    args.extend_from_slice(extra);
    args.push(shots());
    lines_of(start_scenario(script, args)).await
}

/// The buyer's orders: (id, `column`).
async fn orders_of(app: &TestApp, buyer: i64, column: &str) -> Vec<(String, String)> {
    sqlx::query_as(&format!(
        "SELECT id::TEXT, {column} FROM orders WHERE user_id = $1"
    ))
    .bind(buyer)
    .fetch_all(&app.db)
    .await
    .expect("orders")
}

#[tokio::test]
async fn a_visitor_an_hour_ahead_sees_the_button_light_at_the_servers_start() {
    clock_off_by(3_600_000).await;
}

#[tokio::test]
async fn a_visitor_an_hour_behind_sees_the_button_light_at_the_servers_start() {
    clock_off_by(-3_600_000).await;
}

#[tokio::test]
async fn a_buyer_goes_from_the_countdown_to_paid_with_one_request_and_a_reload_between() {
    let app = spawn_app().await;
    let (sale, _) = opening_soon(&app, 12, 10).await;
    const BUYER: i64 = 502;
    let said = buyer_scenario(&app, "sale_page_flow.mjs", sale.activity_id, BUYER, &[]).await;
    assert_eq!(said_value(&said, "buys"), Some("1"), "{said:?}");
    let shown = said_value(&said, "order").expect("order shown");
    assert_eq!(
        orders_of(&app, BUYER, "status").await,
        [(shown.to_owned(), "PAID".to_owned())]
    );
}

/// The buyer's whole flow with a per-user limit of two, by `input` (`mouse` or `keyboard`):
/// countdown → buy → pay → buy to the limit (a third unit refused) → the unpaid second
/// order times out → a new try makes a third order.
async fn buyer_flow_to_the_limit_and_again(input: &str, buyer: i64) {
    let app = spawn_app().await;
    let (sale, _) = opening_soon_limited(&app, 12, 10, 2).await;
    let child = start_scenario(
        "sale_page_buy_again.mjs",
        vec![
            app.address.clone(),
            sale.activity_id.to_string(),
            token(&app, buyer),
            input.to_owned(),
            shots(),
        ],
    );
    // Once the first order is paid, the orders to come have 20 s to be paid: more than the
    // 10 s a click blocks the button, so the refused third try still finds the second unpaid.
    let said = when_said(child, "paid", "go", || async {
        sqlx::query("UPDATE activities SET pay_timeout_s = 20 WHERE id = $1")
            .bind(sale.activity_id)
            .execute(&app.db)
            .await
            .expect("shorten the time to pay");
    })
    .await;
    let shown = |key: &str| {
        said_value(&said, key)
            .unwrap_or_else(|| panic!("no {key} in {said:?}"))
            .to_owned()
    };
    // The limit reached, in the page's words for either refusal the script may give.
    assert!(
        [
            "You already hold as many as one buyer may.",
            "That many would take you past the limit per buyer."
        ]
        .contains(&shown("refused").as_str()),
        "{said:?}"
    );
    assert_eq!(
        said_value(&said, "request_ids"),
        Some("4"),
        "a new id per click: {said:?}"
    );
    let mut orders = orders_of(&app, buyer, "status").await;
    orders.sort();
    let mut expected = vec![
        (shown("first"), "PAID".to_owned()),
        (shown("second"), "CANCELLED".to_owned()),
        (shown("third"), "UNPAID".to_owned()),
    ];
    expected.sort();
    assert_eq!(orders, expected);
}

#[tokio::test]
async fn a_buyer_counts_down_buys_to_the_limit_pays_and_buys_again_after_an_unpaid_order_times_out()
{
    buyer_flow_to_the_limit_and_again("mouse", 505).await;
}

#[tokio::test]
async fn a_buyer_does_the_whole_flow_with_the_keyboard_alone() {
    buyer_flow_to_the_limit_and_again("keyboard", 506).await;
}

/// Follows a started scenario to its end: when it says `cue`, the test does `act` and then
/// writes `reply` on its stdin. Everything the scenario said, once it ended well.
pub(crate) async fn when_said<F, Fut>(
    mut child: tokio::process::Child,
    cue: &str,
    reply: &str,
    mut act: F,
) -> Vec<String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut stdin = child.stdin.take().expect("stdin");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut said = Vec::new();
    while let Some(line) = lines.next_line().await.expect("the scenario's output") {
        if line == cue {
            act().await;
            stdin
                .write_all(format!("{reply}\n").as_bytes())
                .await
                .expect("tell the scenario");
        }
        said.push(line);
    }
    finish_scenario(child, &said).await;
    said
}

/// Runs the refusal scenario on an open sale's page: the test does `before_click` once the
/// button is lit, then the buyer clicks and must read `words` for `code`.
async fn refusal_shown(app: &TestApp, shop: &Shop, code: &str, words: &str, buyer: i64) {
    let child = start_scenario(
        "sale_page_refusal.mjs",
        vec![
            app.address.clone(),
            shop.sale.activity_id.to_string(),
            token(app, buyer),
            code.to_owned(),
            words.to_owned(),
            shots(),
        ],
    );
    let said = when_said(child, "lit", "click", || async {
        // Another buyer takes the last unit (or the item's window) first.
        let bought = app.buy(900, "first-buyer", &buy_body(&shop.sale, 1)).await;
        assert_eq!(bought.0, 200, "{}", bought.1);
    })
    .await;
    assert!(
        said.iter().any(|line| line.starts_with("shown=")),
        "{said:?}"
    );
}

#[tokio::test]
async fn sold_out_is_said_in_words() {
    let app = spawn_app().await;
    let shop = open_page(&app, 1).await;
    refusal_shown(&app, &shop, "SOLD_OUT", "Sold out", 503).await;
}

#[tokio::test]
async fn rate_limited_is_said_in_words_with_the_wait() {
    let app = spawn_app_with(|settings| {
        settings.buy.per_item_per_window = 1;
        settings.buy.rate_window_s = 30;
    })
    .await;
    let shop = open_page(&app, 10).await;
    refusal_shown(&app, &shop, "RATE_LIMITED", "wait 30 s", 504).await;
}

#[tokio::test]
async fn a_buy_that_timed_out_is_retried_as_the_same_order() {
    let app = spawn_app().await;
    let shop = open_page(&app, 10).await;
    const BUYER: i64 = 505;
    let said = buyer_scenario(
        &app,
        "sale_page_retry.mjs",
        shop.sale.activity_id,
        BUYER,
        &[],
    )
    .await;
    let shown = said_value(&said, "order").expect("order shown");
    let request_id = said_value(&said, "request_id").expect("the click's request id");
    // One order for the click and its retry, the one the page shows.
    assert_eq!(
        orders_of(&app, BUYER, "request_id").await,
        [(shown.to_owned(), request_id.to_owned())]
    );
}

#[tokio::test]
async fn without_its_api_the_page_shows_its_static_facts_and_an_unknown_status() {
    let app = spawn_app().await;
    let shop = shop(&app, "acme", "Offline sale").await;
    published(&app, &shop.merchant, shop.sale.activity_id).await;
    let said = buyer_scenario(
        &app,
        "sale_page_offline.mjs",
        shop.sale.activity_id,
        506,
        &["Offline sale".into(), "9.90".into()],
    )
    .await;
    assert!(said.iter().any(|line| line.starts_with("ok:")), "{said:?}");
}

#[tokio::test]
async fn an_order_the_pipeline_holds_is_said_to_be_in_preparation_after_10_s() {
    // Pre-orders are recorded, not handed to the pipeline: they stay PRE_CREATED.
    let app = spawn_app_with(|settings| settings.buy.async_mode = AsyncMode::Record).await;
    let shop = open_page(&app, 10).await;
    const BUYER: i64 = 507;
    let said = buyer_scenario(
        &app,
        "sale_page_preparing.mjs",
        shop.sale.activity_id,
        BUYER,
        &[],
    )
    .await;
    let shown = said_value(&said, "order").expect("order shown");
    assert_eq!(
        orders_of(&app, BUYER, "status").await,
        [(shown.to_owned(), "PRE_CREATED".to_owned())]
    );
}

/// The status of a GET of `path`.
async fn status_of(app: &TestApp, path: &str) -> u16 {
    get_with(app, path, None).await.status().as_u16()
}

#[tokio::test]
async fn a_deleted_activitys_page_and_the_assets_no_page_names_stop_being_served() {
    let app = spawn_app_with(|settings| settings.retention.interval_ms = 100).await;
    let clock = TestClock::starting_now();
    app.state.retention.use_clock(clock.clone());
    let kept = shop(&app, "acme", "Kept").await;
    let kept_id = kept.sale.activity_id;
    published(&app, &kept.merchant, kept_id).await;
    let (first, _) = page(&app, kept_id).await;
    let first_script = asset_paths(&first)[0].clone();
    published(&app, &kept.merchant, kept_id).await;
    let (second, _) = page(&app, kept_id).await;
    let [script, stylesheet] = <[String; 2]>::try_from(asset_paths(&second)).expect("two assets");
    assert_ne!(
        script, first_script,
        "each publish names a script of its own"
    );
    let deleted = shop(&app, "acme", "Deleted").await;
    let deleted_id = deleted.sale.activity_id;
    published(&app, &deleted.merchant, deleted_id).await;
    let (deleted_page, _) = page(&app, deleted_id).await;
    let deleted_script = asset_paths(&deleted_page)[0].clone();

    // Within the grace, a tab holding the first publication still loads its script.
    crate::retention::two_more_passes(&app).await;
    assert_eq!(status_of(&app, &first_script).await, 200);

    // The activity is deleted (as a rehearsal's copy is at its clean-up): its page goes,
    // from memory and from the site directory.
    sqlx::query("DELETE FROM activities WHERE id = $1")
        .bind(deleted_id)
        .execute(&app.db)
        .await
        .expect("delete the activity");
    let page_path = format!("/sale/{deleted_id}/");
    wait::until(
        "the deleted activity's page is gone",
        wait::PATIENCE,
        || async { status_of(&app, &page_path).await == 404 },
    )
    .await;
    let folder = app
        .state
        .settings
        .sale_page
        .dir
        .join(deleted_id.to_string());
    wait::until("its folder is removed", wait::PATIENCE, || async {
        !folder.exists()
    })
    .await;

    // Past the grace, the assets no page names go; the current page's stay.
    clock.advance(Duration::from_secs(
        app.state.settings.retention.sale_assets_grace_s + 60,
    ));
    wait::until("the unnamed scripts are gone", wait::PATIENCE, || async {
        status_of(&app, &first_script).await == 404 && status_of(&app, &deleted_script).await == 404
    })
    .await;
    for path in [&script, &stylesheet, &format!("/sale/{kept_id}/")] {
        assert_eq!(status_of(&app, path).await, 200, "{path}");
    }
    let assets = std::fs::read_dir(app.state.settings.sale_page.dir.join("assets"))
        .expect("the assets folder")
        .count();
    assert_eq!(assets, 2, "the current page's script and stylesheet");
}

#[tokio::test]
async fn a_page_published_before_the_prewarm_says_not_open_yet_then_counts_down() {
    let app = spawn_app().await;
    // Another sale pre-warmed first: the Bloom filter exists, and knows nothing yet of the
    // sale whose page is published early, so its `/status` answers 404 until its pre-warm.
    let ops = app.caller(Role::Ops, None).await;
    let other = shop(&app, "acme", "Earlier sale").await;
    prewarm(&app, &ops, &other.sale).await;
    let shop = shop(&app, "acme", "Early page").await;
    published(&app, &shop.merchant, shop.sale.activity_id).await;
    let status = app
        .client
        .get(format!(
            "{}/api/activities/{}/status",
            app.address, shop.sale.activity_id
        ))
        .send()
        .await
        .expect("status");
    assert_eq!(status.status(), 404, "not prepared yet");
    let child = start_scenario(
        "sale_page_not_prepared.mjs",
        vec![
            app.address.clone(),
            shop.sale.activity_id.to_string(),
            token(&app, 508),
            shots(),
        ],
    );
    let said = when_said(child, "not-ready", "prewarmed", || {
        prewarm(&app, &ops, &shop.sale)
    })
    .await;
    assert_eq!(said, ["not-ready", "ok"]);
}

#[tokio::test]
async fn a_visitor_of_a_sold_out_sale_reads_sold_out_not_sign_in_to_buy() {
    let app = spawn_app().await;
    let shop = open_page(&app, 1).await;
    let (status, answer) = app
        .buy(509, "the-last-unit", &buy_body(&shop.sale, 1))
        .await;
    assert_eq!(status, 200, "{answer}");
    let said = lines_of(start_scenario(
        "sale_page_sold_out_visitor.mjs",
        vec![
            app.address.clone(),
            shop.sale.activity_id.to_string(),
            shots(),
        ],
    ))
    .await;
    assert!(said.iter().any(|line| line.starts_with("ok:")), "{said:?}");
}

/// The units left on an open sale's page follow other buyers' purchases within seconds,
/// pushed by the event stream (the page cannot read `/status` meanwhile), down to sold out.
#[tokio::test]
async fn the_units_left_follow_other_buyers_purchases_by_the_event_stream() {
    let app = spawn_app().await;
    let shop = open_page(&app, 10).await;
    let body = buy_body(&shop.sale, 1);
    let mut child = start_scenario(
        "sale_page_units.mjs",
        vec![
            app.address.clone(),
            shop.sale.activity_id.to_string(),
            token(&app, 700),
            "10".into(),
            shots(),
        ],
    );
    let mut stdin = child.stdin.take().expect("stdin");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut said = Vec::new();
    // Three other buyers, then the seven others that sell the item out.
    let mut rounds = [(701..704, 7), (704..711, 0)].into_iter();
    while let Some(line) = lines.next_line().await.expect("the scenario's output") {
        let next = line == "watching" || (line.starts_with("seen=") && line != "seen=0");
        said.push(line);
        let Some((buyers, left)) = next.then(|| rounds.next()).flatten() else {
            continue;
        };
        for buyer in buyers {
            app.bought(buyer, &format!("units-{buyer}"), &body).await;
        }
        stdin
            .write_all(format!("left={left}\n").as_bytes())
            .await
            .expect("tell the scenario");
    }
    finish_scenario(child, &said).await;
    assert_eq!(said_value(&said, "seen"), Some("7"), "{said:?}");
    assert!(said.contains(&"seen=0".to_owned()), "{said:?}");
}
