//! Lottery sales (docs/lottery.md) against the real services: registration, the
//! draw recomputed by the documented script, buys with codes, and the waitlist moving when
//! codes expire. Time that is the subject (the window closing, codes expiring) is the
//! lottery's clock, moved by the test.

use crate::support::{
    app::{json, spawn_app_with, TestApp},
    fixtures::{token, Caller, Sale, TestClock},
    wait::until,
};
use contract::Role;
use futures::{stream, StreamExt};
use serde_json::{json, Value};
use std::{collections::BTreeSet, time::Duration};

const REGISTRANTS: i64 = 2_000;
const STOCK: i64 = 100;
const CODE_TTL_S: i64 = 60;

/// A lottery activity of one item (`stock` units, one per buyer) made through the API: its
/// sale starts at `starts`, its registration opens two hours before and closes ten minutes
/// before. Not pre-warmed.
async fn new_lottery(app: &TestApp, stock: i64, starts: chrono::DateTime<chrono::Utc>) -> Sale {
    let merchant = app.caller(Role::Merchant, Some("acme")).await;
    let (status, item) = json(
        app.post_json(
            "/admin/api/items",
            Some(&merchant),
            &json!({ "name": "Sneaker", "price_cents": 99_900 }),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{item}");
    let item_id = item["id"].as_i64().expect("item id");
    let (status, activity) = json(
        app.post_json(
            "/admin/api/activities",
            Some(&merchant),
            &json!({
                "title": "Sneaker drop", "kind": "standard", "pay_timeout_s": 900,
                "starts_at": starts, "ends_at": starts + chrono::Duration::hours(1),
                "items": [{ "item_id": item_id, "stock": stock, "per_user_limit": 1, "price_cents": 99_900 }],
                "mode": "lottery",
                "registration_opens_at": starts - chrono::Duration::hours(2),
                "registration_closes_at": starts - chrono::Duration::minutes(10),
                "code_ttl_s": CODE_TTL_S,
            }),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{activity}");
    Sale {
        activity_id: activity["id"].as_i64().expect("id"),
        item_id,
    }
}

/// A lottery activity of one item (`stock` units, one per buyer), pre-warmed, its sale open
/// by the wall clock (the buy path's), its registration window open by the lottery's clock,
/// which the test returns.
async fn lottery_sale(app: &TestApp, stock: i64) -> (Sale, std::sync::Arc<TestClock>) {
    let ops = app.caller(Role::Ops, None).await;
    let sale = new_lottery(app, stock, chrono::Utc::now() + chrono::Duration::hours(1)).await;
    let activity_id = sale.activity_id;
    // The lottery's clock is set before the window is moved into the past: the leader's
    // draw pass runs on its own, and between the two it would read the wall clock, find
    // the window closed and draw the item with nobody registered (the test's registrations
    // then answered 403 REGISTRATION_CLOSED).
    let clock =
        TestClock::at((chrono::Utc::now() - chrono::Duration::minutes(10)).timestamp_millis());
    app.state.lottery.use_clock(clock.clone());
    // The sale opens now by the wall clock, which the buy path reads; its registration
    // closed a minute and a half ago, which the lottery's clock has not reached yet.
    sqlx::query(
        "UPDATE activities SET registration_opens_at = now() - interval '2 hours',
                registration_closes_at = now() - interval '90 seconds',
                starts_at = now() - interval '1 minute', ends_at = now() + interval '1 hour'
         WHERE id = $1",
    )
    .bind(activity_id)
    .execute(&app.db)
    .await
    .expect("open the sale");
    let (status, report) = json(
        app.post_json(
            &format!("/admin/api/activities/{activity_id}/prewarm"),
            Some(&ops),
            &json!({}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{report}");
    (sale, clock)
}

async fn register(app: &TestApp, sale: &Sale, user: i64) -> (u16, Value) {
    register_with(app, sale, user, None, json!({ "item_id": sale.item_id })).await
}

/// A registration that a trusted proxy forwards from client address `from`.
async fn register_from(app: &TestApp, sale: &Sale, user: i64, from: Option<&str>) -> (u16, Value) {
    register_with(app, sale, user, from, json!({ "item_id": sale.item_id })).await
}

/// A registration with `body`, forwarded from `from` when given.
async fn register_with(
    app: &TestApp,
    sale: &Sale,
    user: i64,
    from: Option<&str>,
    body: Value,
) -> (u16, Value) {
    let mut request = app
        .client
        .post(format!(
            "{}/api/activities/{}/registrations",
            app.address, sale.activity_id
        ))
        .bearer_auth(token(app, user))
        .json(&body);
    if let Some(from) = from {
        request = request.header("x-forwarded-for", from);
    }
    json(request.send().await.expect("sent")).await
}

async fn mine(app: &TestApp, sale: &Sale, user: i64) -> Value {
    let response = app
        .client
        .get(format!(
            "{}/api/activities/{}/registrations/me",
            app.address, sale.activity_id
        ))
        .bearer_auth(token(app, user))
        .send()
        .await
        .expect("sent");
    let (status, body) = json(response).await;
    assert_eq!(status, 200, "{body}");
    body
}

fn lottery_buy(sale: &Sale, code: Option<&str>) -> Value {
    let mut body =
        json!({ "activity_id": sale.activity_id, "item_id": sale.item_id, "quantity": 1 });
    if let Some(code) = code {
        body["code"] = code.into();
    }
    body
}

/// (user, code) of every code handed out so far, by the draw or the waitlist.
async fn codes(app: &TestApp, sale: &Sale) -> Vec<(i64, String)> {
    sqlx::query_as(
        "SELECT user_id, code FROM lottery_entries
         WHERE activity_id = $1 AND item_id = $2 AND code IS NOT NULL ORDER BY rank",
    )
    .bind(sale.activity_id)
    .bind(sale.item_id)
    .fetch_all(&app.db)
    .await
    .expect("codes")
}

async fn draw_report(app: &TestApp, ops: &Caller, sale: &Sale) -> Value {
    let (status, report) = json(
        app.get(
            &format!("/admin/api/activities/{}/draw", sale.activity_id),
            Some(ops),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{report}");
    report
}

/// Registers buyers `users`, closes the window by the lottery's clock and waits until the
/// draw of `winners` is published (the waitlist has reached their ranks).
async fn registered_and_drawn(
    app: &TestApp,
    ops: &Caller,
    sale: &Sale,
    clock: &TestClock,
    users: std::ops::RangeInclusive<i64>,
    winners: i64,
) {
    for user in users {
        assert_eq!(register(app, sale, user).await.0, 200);
    }
    clock.advance(Duration::from_secs(10 * 60));
    until("the draw is published", Duration::from_secs(30), || async {
        draw_report(app, ops, sale).await["items"][0]["waitlist_reached"] == json!(winners)
    })
    .await;
}

/// The order the script of docs/lottery.md prints for `seed` and `users`.
fn documented_order(seed: &str, users: &[i64]) -> Vec<i64> {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/lottery.md"))
        .expect("docs/lottery.md");
    let script = doc
        .split("```python\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("the python block");
    assert!(
        script.lines().count() <= 10,
        "the script is ten lines at most"
    );
    let mut child = std::process::Command::new("python3")
        .arg("-c")
        .arg(script)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3");
    let input: String = std::iter::once(seed.to_owned())
        .chain(users.iter().map(i64::to_string))
        .collect::<Vec<_>>()
        .join("\n");
    use std::io::Write;
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.as_bytes())
        .expect("written");
    let output = child.wait_with_output().expect("ran");
    assert!(output.status.success());
    String::from_utf8(output.stdout)
        .expect("utf-8")
        .lines()
        .map(|line| line.parse().expect("a user id"))
        .collect()
}

#[tokio::test]
async fn two_thousand_registrants_on_a_hundred_units_draw_buy_and_pass_on_expired_codes() {
    let app = spawn_app_with(|settings| {
        settings.buy.registrations_per_ip_per_window = 1_000_000;
    })
    .await;
    let ops = app.caller(Role::Ops, None).await;
    let (sale, clock) = lottery_sale(&app, STOCK).await;
    let users: Vec<i64> = (1..=REGISTRANTS).map(|user| 10_000 + user).collect();
    let answers: Vec<(u16, Value)> = stream::iter(users.iter().copied())
        .map(|user| {
            let (app, sale) = (&app, &sale);
            async move { register(app, sale, user).await }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    assert!(
        answers
            .iter()
            .all(|(status, body)| *status == 200 && body["status"] == "registered"),
        "{:?}",
        answers.iter().find(|(status, _)| *status != 200)
    );
    // Idempotent: again, the same answer.
    assert_eq!(register(&app, &sale, users[0]).await.0, 200);
    assert_eq!(mine(&app, &sale, users[0]).await[0]["status"], "registered");

    // The window closes by the lottery's clock: the leader draws.
    clock.advance(Duration::from_secs(10 * 60));
    until(
        "the draw is made and published",
        Duration::from_secs(30),
        || async {
            let report = draw_report(&app, &ops, &sale).await;
            report["items"][0]["waitlist_reached"] == json!(STOCK)
        },
    )
    .await;
    assert_eq!(
        register(&app, &sale, 99).await.0,
        403,
        "registration is closed"
    );
    let winners = codes(&app, &sale).await;
    assert_eq!(winners.len(), STOCK as usize, "exactly one code per unit");

    // The revealed seed matches the commitment, and the documented script gives the same
    // winners from it and the list.
    let shown = || async {
        let path = format!("/api/activities/{}", sale.activity_id);
        json(app.get(&path, None).await).await.1
    };
    until("the seed is revealed", Duration::from_secs(5), || async {
        shown().await.get("draw_seed").is_some()
    })
    .await;
    let activity = shown().await;
    let seed = activity["draw_seed"].as_str().expect("seed").to_owned();
    {
        use sha2::Digest;
        let hashed = sha2::Sha256::digest(hex::decode(&seed).expect("hex"));
        assert_eq!(
            Some(hex::encode(hashed).as_str()),
            activity["draw_commitment"].as_str()
        );
    }
    let order = documented_order(&seed, &users);
    let expected: BTreeSet<i64> = order[..STOCK as usize].iter().copied().collect();
    let drawn: BTreeSet<i64> = winners.iter().map(|(user, _)| *user).collect();
    assert_eq!(
        drawn, expected,
        "the script recomputes the server's winners"
    );

    // A buy without a code, or with another's, is not qualified.
    let (first, first_code) = &winners[0];
    let (second, second_code) = &winners[1];
    let (status, body) = app.buy(*first, "no-code", &lottery_buy(&sale, None)).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (403, Some("NOT_QUALIFIED"))
    );
    let (status, body) = app
        .buy(*first, "theirs", &lottery_buy(&sale, Some(second_code)))
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (403, Some("NOT_QUALIFIED"))
    );
    let loser = order[STOCK as usize + 500];
    let (status, body) = app
        .buy(loser, "stolen", &lottery_buy(&sale, Some(first_code)))
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (403, Some("NOT_QUALIFIED"))
    );
    let me = mine(&app, &sale, *second).await;
    assert_eq!(me[0]["status"], "won");
    assert_eq!(me[0]["code"].as_str(), Some(second_code.as_str()));
    let waiting = mine(&app, &sale, order[STOCK as usize + 4]).await;
    assert_eq!(
        (
            waiting[0]["status"].as_str(),
            waiting[0]["waitlist_position"].as_i64()
        ),
        (Some("waitlisted"), Some(5))
    );

    // Eighty winners buy once each; a second buy is refused.
    let (buyers, idle) = winners.split_at(80);
    for (user, code) in buyers {
        let (status, body) = app
            .buy(*user, "first", &lottery_buy(&sale, Some(code)))
            .await;
        assert_eq!(status, 200, "{body}");
    }
    let (status, body) = app
        .buy(*first, "again", &lottery_buy(&sale, Some(first_code)))
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (409, Some("ALREADY_PURCHASED"))
    );
    assert_eq!(mine(&app, &sale, *first).await[0]["status"], "bought");

    // Twenty let their codes expire: within 2 s the next twenty on the waitlist have codes.
    clock.advance(Duration::from_secs(CODE_TTL_S as u64 + 60));
    let (idle_user, idle_code) = &idle[0];
    let started = std::time::Instant::now();
    until(
        "twenty codes handed to the waitlist",
        Duration::from_secs(2),
        || async { codes(&app, &sale).await.len() == STOCK as usize + 20 },
    )
    .await;
    let handed = started.elapsed();
    let (status, body) = app
        .buy(*idle_user, "late", &lottery_buy(&sale, Some(idle_code)))
        .await;
    assert_eq!((status, body["code"].as_str()), (403, Some("CODE_EXPIRED")));
    let all = codes(&app, &sale).await;
    let next: Vec<i64> = all[STOCK as usize..]
        .iter()
        .map(|(user, _)| *user)
        .collect();
    assert_eq!(
        next,
        order[STOCK as usize..STOCK as usize + 20],
        "in the draw's order"
    );
    for (user, code) in &all[STOCK as usize..] {
        let (status, body) = app
            .buy(*user, "turn", &lottery_buy(&sale, Some(code)))
            .await;
        assert_eq!(status, 200, "{body}");
    }
    let report = draw_report(&app, &ops, &sale).await;
    assert_eq!(report["items"][0]["codes_used"], json!(100));
    assert_eq!(report["items"][0]["codes_expired"], json!(20));
    assert_eq!(report["items"][0]["waitlist_reached"], json!(STOCK + 20));
    eprintln!("codes handed to the waitlist {handed:?} after the expiry");
}

#[tokio::test]
async fn lottery_terms_are_validated_with_their_codes() {
    let app = spawn_app_with(|_| {}).await;
    let merchant = app.caller(Role::Merchant, Some("acme")).await;
    let (_, item) = json(
        app.post_json(
            "/admin/api/items",
            Some(&merchant),
            &json!({ "name": "x", "price_cents": 1 }),
        )
        .await,
    )
    .await;
    let starts = chrono::Utc::now() + chrono::Duration::hours(1);
    let activity = |extra: Value| {
        let mut body = json!({
            "title": "L", "kind": "standard", "pay_timeout_s": 900,
            "starts_at": starts, "ends_at": starts + chrono::Duration::hours(1),
            "items": [{ "item_id": item["id"], "stock": 10, "per_user_limit": 1, "price_cents": 1 }],
            "mode": "lottery",
            "registration_opens_at": starts - chrono::Duration::hours(1),
            "registration_closes_at": starts,
        });
        for (key, value) in extra.as_object().expect("object") {
            body[key] = value.clone();
        }
        body
    };
    for (extra, code) in [
        (json!({ "code_ttl_s": 59 }), "CODE_TTL_OUT_OF_RANGE"),
        (
            json!({ "registration_closes_at": starts + chrono::Duration::seconds(1) }),
            "REGISTRATION_WINDOW_INVALID",
        ),
        (
            json!({ "registration_opens_at": null }),
            "REGISTRATION_WINDOW_INVALID",
        ),
    ] {
        let before = app.count("activities").await;
        let (status, body) = json(
            app.post_json("/admin/api/activities", Some(&merchant), &activity(extra))
                .await,
        )
        .await;
        assert_eq!((status, body["code"].as_str()), (400, Some(code)), "{body}");
        assert_eq!(
            app.count("activities").await,
            before,
            "a refusal writes nothing"
        );
    }
    let (status, created) = json(
        app.post_json(
            "/admin/api/activities",
            Some(&merchant),
            &activity(json!({})),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{created}");
    let (_, shown) = json(
        app.get(&format!("/api/activities/{}", created["id"]), None)
            .await,
    )
    .await;
    assert_eq!(shown["mode"], "lottery");
    assert_eq!(shown["code_ttl_s"], json!(900));
    assert_eq!(shown["draw_commitment"].as_str().map(str::len), Some(64));
    assert!(
        shown.get("draw_seed").is_none(),
        "the seed stays hidden before the draw"
    );
}

/// (user, status) of every entry of the sale's item, by user.
async fn statuses(app: &TestApp, sale: &Sale) -> Vec<(i64, String)> {
    sqlx::query_as(
        "SELECT user_id, status FROM lottery_entries
         WHERE activity_id = $1 AND item_id = $2 ORDER BY user_id",
    )
    .bind(sale.activity_id)
    .bind(sale.item_id)
    .fetch_all(&app.db)
    .await
    .expect("statuses")
}

#[tokio::test]
async fn a_refused_registration_leaves_nothing_and_a_repeated_one_counts_nothing() {
    let app = spawn_app_with(|settings| {
        settings.buy.registrations_per_ip_per_window = 3;
        // A window longer than the test: the count cannot reset under it.
        settings.buy.rate_window_s = 3_600;
    })
    .await;
    let (sale, clock) = lottery_sale(&app, STOCK).await;
    let window = || app.redis_keys("*rl:reg:*");
    for user in 1..=3 {
        assert_eq!(register(&app, &sale, user).await.0, 200);
    }
    // Again: 200, and the address's window is not counted.
    let (status, again) = register(&app, &sale, 1).await;
    assert_eq!(
        (status, again["status"].as_str()),
        (200, Some("registered"))
    );
    let (status, body) = register(&app, &sale, 4).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (429, Some("RATE_LIMITED")),
        "{body}"
    );
    let regs: i64 = redis::cmd("HLEN")
        .arg(app.state.redis.item_key(
            contract::SaleItem::new(sale.activity_id, sale.item_id),
            "lot:regs",
        ))
        .query_async(&mut app.state.redis.connection())
        .await
        .expect("hlen");
    assert_eq!(regs, 3, "the refused buyer is not in the list");
    let counter: Vec<i64> = {
        let keys = window().await;
        let mut counts = Vec::new();
        for key in keys {
            counts.push(
                redis::cmd("GET")
                    .arg(&key)
                    .query_async(&mut app.state.redis.connection())
                    .await
                    .expect("get"),
            );
        }
        counts
    };
    assert_eq!(
        counter,
        vec![3],
        "neither the repeat nor the refusal counted"
    );
    assert!(mine(&app, &sale, 4)
        .await
        .as_array()
        .expect("list")
        .is_empty());
    // Outside the window (the lottery's clock past its close): 403, nothing written.
    clock.advance(Duration::from_secs(10 * 60));
    let (status, body) = register(&app, &sale, 5).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (403, Some("REGISTRATION_CLOSED"))
    );
    // A first-come activity takes no registration.
    let first_come = crate::support::fixtures::open_sale(&app, 10, 1).await;
    let (status, body) = register(&app, &first_come, 1).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (400, Some("NOT_A_LOTTERY"))
    );
    // Nor a buy with a code.
    let (status, body) = app
        .buy(1, "coded", &lottery_buy(&first_come, Some("ABC")))
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (400, Some("BAD_REQUEST")),
        "{body}"
    );
}

/// The status of order `order`.
/// Registrations that go to Redis in one call are each answered as if they had come alone,
/// in their order: a buyer named twice is listed once and told so the second time, each
/// address's window counts only those it let in, and a sealed list takes no one new.
/// Through the API too: a burst of buyers, each registering twice at once, from one address.
#[tokio::test]
async fn registrations_sent_together_are_each_answered_as_if_alone() {
    const PER_ADDRESS: i64 = 10;
    let app = spawn_app_with(|settings| {
        settings.buy.registrations_per_ip_per_window = PER_ADDRESS as u32;
        // A window longer than the test: the count cannot reset under it.
        settings.buy.rate_window_s = 3_600;
    })
    .await;
    let (sale, _clock) = lottery_sale(&app, STOCK).await;
    let item = contract::SaleItem::new(sale.activity_id, sale.item_id);
    let redis = &app.state.redis;
    let client = sale::lottery::scripts::LotteryClient(redis);
    let terms = sale::lottery::scripts::RegistrationTerms {
        window_s: 3_600,
        per_address: 2,
        expires_at_ms: (chrono::Utc::now() + chrono::Duration::days(1)).timestamp_millis(),
    };
    let one = |buyer: i64, address: &str| sale::lottery::scripts::Registration {
        buyer,
        address: address.to_owned(),
    };
    // Not through the API: another item's list, so the burst below starts empty.
    let other = contract::SaleItem::new(sale.activity_id, sale.item_id + 1_000_000);
    let called = [
        one(1, "192.0.2.1"),
        one(2, "192.0.2.1"),
        one(1, "192.0.2.1"),
        one(3, "192.0.2.1"),
        one(4, "192.0.2.2"),
    ];
    let answers = client
        .register(other, terms, &called)
        .await
        .expect("a call");
    use sale::lottery::scripts::Registered::{Listed, Sealed, WindowFull};
    let listed = || Listed("r".to_owned());
    assert_eq!(
        answers,
        vec![listed(), listed(), listed(), WindowFull, listed()]
    );
    let get = |key: String| async move {
        redis::cmd("GET")
            .arg(key)
            .query_async::<Option<i64>>(&mut redis.connection())
            .await
            .expect("get")
    };
    assert_eq!(
        get(redis.item_key(other, "rl:reg:192.0.2.1")).await,
        Some(2)
    );
    assert_eq!(
        get(redis.item_key(other, "rl:reg:192.0.2.2")).await,
        Some(1)
    );
    let keys = sale::lottery::scripts::LotteryKeys::of(redis, other);
    let (listed_count, farm): (i64, Option<i64>) = redis::pipe()
        .hlen(&keys.regs)
        .zscore(&keys.addresses, "192.0.2.1")
        .query_async(&mut redis.connection())
        .await
        .expect("list");
    assert_eq!((listed_count, farm), (3, Some(2)));
    let _: () = redis::cmd("SET")
        .arg(&keys.sealed)
        .arg(1)
        .query_async(&mut redis.connection())
        .await
        .expect("seal");
    let answers = client
        .register(other, terms, &[one(5, "192.0.2.3"), one(2, "192.0.2.3")])
        .await
        .expect("a call");
    assert_eq!(answers, vec![Sealed, listed()]);
    assert_eq!(get(redis.item_key(other, "rl:reg:192.0.2.3")).await, None);

    // Through the API: 30 buyers at once, each twice, from one address.
    let (app, sale) = (&app, &sale);
    let answers: Vec<(i64, u16)> = stream::iter((1..=30).flat_map(|user| [user, user]))
        .map(|user| async move { (user, register(app, sale, user).await.0) })
        .buffer_unordered(60)
        .collect()
        .await;
    let admitted: BTreeSet<i64> = answers
        .iter()
        .filter(|(_, status)| *status == 200)
        .map(|(user, _)| *user)
        .collect();
    assert_eq!(admitted.len() as i64, PER_ADDRESS, "{answers:?}");
    for (user, status) in &answers {
        let expected = if admitted.contains(user) { 200 } else { 429 };
        assert_eq!(*status, expected, "buyer {user}: {answers:?}");
    }
    let keys = sale::lottery::scripts::LotteryKeys::of(redis, item);
    let (listed_count, from): (i64, Option<i64>) = redis::pipe()
        .hlen(&keys.regs)
        .zscore(&keys.addresses, "127.0.0.1")
        .query_async(&mut redis.connection())
        .await
        .expect("list");
    assert_eq!((listed_count, from), (PER_ADDRESS, Some(PER_ADDRESS)));
    assert_eq!(
        get(redis.item_key(item, "rl:reg:127.0.0.1")).await,
        Some(PER_ADDRESS)
    );
    assert_eq!(
        app.metric("seckill_lottery_registration_call_size_sum")
            .await,
        60.0,
        "every registration went in a call"
    );
}

async fn order_status(app: &TestApp, order: uuid::Uuid) -> String {
    sqlx::query_scalar("SELECT status FROM orders WHERE id = $1")
        .bind(order)
        .fetch_one(&app.db)
        .await
        .expect("order")
}

/// Unpaid orders completed from now on are cancelled `seconds` after they are made.
async fn pay_within(app: &TestApp, sale: &Sale, seconds: i32) {
    sqlx::query("UPDATE activities SET pay_timeout_s = $2 WHERE id = $1")
        .bind(sale.activity_id)
        .bind(seconds)
        .execute(&app.db)
        .await
        .expect("pay timeout");
}

#[tokio::test]
async fn a_cancelled_order_and_a_revoked_winner_pass_their_units_on_and_the_end_settles_everyone() {
    // A sold-out flag that outlives the test: a code holder must never meet it.
    let app = spawn_app_with(|settings| settings.buy.sold_out_flag_ms = 600_000).await;
    let ops = app.caller(Role::Ops, None).await;
    // Two units: two winners, three waiting.
    let (sale, clock) = lottery_sale(&app, 2).await;
    registered_and_drawn(&app, &ops, &sale, &clock, 1..=5, 2).await;
    let winners = codes(&app, &sale).await;
    assert_eq!(winners.len(), 2);
    let ((unpaid, unpaid_code), (keeper, keeper_code)) = (&winners[0], &winners[1]);

    // One winner buys and keeps his order; the other buys the last unit (the item sells
    // out here) and never pays: his order is cancelled, its unit given back, and the next
    // on the waitlist gets a code.
    let kept = app
        .bought(*keeper, "kept", &lottery_buy(&sale, Some(keeper_code)))
        .await;
    until(
        "the kept order is completed",
        Duration::from_secs(30),
        || async { order_status(&app, kept).await == "UNPAID" },
    )
    .await;
    pay_within(&app, &sale, 2).await;
    let order = app
        .bought(*unpaid, "unpaid", &lottery_buy(&sale, Some(unpaid_code)))
        .await;
    until(
        "the unpaid order is completed",
        Duration::from_secs(30),
        || async { order_status(&app, order).await != "PRE_CREATED" },
    )
    .await;
    pay_within(&app, &sale, 900).await;
    until(
        "the unpaid order is cancelled",
        Duration::from_secs(30),
        || async { order_status(&app, order).await == "CANCELLED" },
    )
    .await;
    until(
        "the cancelled unit's code",
        Duration::from_secs(2),
        || async { codes(&app, &sale).await.len() == 3 },
    )
    .await;
    let (status, body) = app
        .buy(*unpaid, "again", &lottery_buy(&sale, Some(unpaid_code)))
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (409, Some("ALREADY_PURCHASED")),
        "a code buys once"
    );

    // Ops revoke the one it went to before he buys (audited): his code ends, his unit goes on.
    let revoked = codes(&app, &sale).await[2].0;
    let audited = app.operator_actions().await;
    let (status, body) = json(
        app.post_json(
            &format!(
                "/admin/api/activities/{}/registrations/{revoked}/revoke",
                sale.activity_id
            ),
            Some(&ops),
            &json!({ "reason": "one of a farm of accounts" }),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(app.operator_actions().await, audited + 1);
    assert_eq!(mine(&app, &sale, revoked).await[0]["status"], "revoked");
    until(
        "the revoked buyer's code",
        Duration::from_secs(2),
        || async { codes(&app, &sale).await.len() == 4 },
    )
    .await;
    let (fourth, fourth_code) = codes(&app, &sale).await[3].clone();
    // The item sold out on this instance a moment ago; his unit is reserved all the same.
    let (status, body) = app
        .buy(fourth, "turn", &lottery_buy(&sale, Some(&fourth_code)))
        .await;
    assert_eq!(status, 200, "a live code is never told sold out: {body}");
    let last: i64 = (1..=5)
        .find(|user| ![*unpaid, *keeper, revoked, fourth].contains(user))
        .expect("the last in line");
    assert_eq!(
        mine(&app, &sale, last).await[0]["waitlist_position"],
        json!(1)
    );

    // The sale ends by the lottery's clock: every registrant's status is final.
    clock.advance(Duration::from_secs(2 * 3_600));
    until("the draw is settled", Duration::from_secs(10), || async {
        let settled: Option<chrono::DateTime<chrono::Utc>> =
            sqlx::query_scalar("SELECT settled_at FROM lottery_draws WHERE activity_id = $1")
                .bind(sale.activity_id)
                .fetch_one(&app.db)
                .await
                .expect("draw");
        settled.is_some()
    })
    .await;
    let mut expected = vec![
        (*unpaid, "bought".to_owned()),
        (*keeper, "bought".to_owned()),
        (revoked, "revoked".to_owned()),
        (fourth, "bought".to_owned()),
        (last, "lost".to_owned()),
    ];
    expected.sort();
    assert_eq!(statuses(&app, &sale).await, expected);
    assert_eq!(mine(&app, &sale, last).await[0]["status"], "lost");
    // Every order that holds a unit is a code's, and each code bought once.
    let holders: Vec<i64> = sqlx::query_scalar(
        "SELECT user_id FROM orders WHERE activity_id = $1 AND status <> 'CANCELLED' ORDER BY user_id",
    )
    .bind(sale.activity_id)
    .fetch_all(&app.db)
    .await
    .expect("orders");
    let mut expected_holders = vec![*keeper, fourth];
    expected_holders.sort();
    assert_eq!(holders, expected_holders);
}

/// The draw's steps a leader can die at: before its transaction commits, and after it,
/// before the result is in Redis.
const DRAW_FAULT_POINTS: [&str; 2] = ["lottery.drawing", "lottery.drawn"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_draw_survives_its_leader_killed_mid_draw_and_no_code_is_issued_twice() {
    let app = spawn_app_with(|settings| {
        settings.buy.registrations_per_ip_per_window = 1_000_000;
    })
    .await;
    until(
        "this instance leads",
        crate::support::wait::PATIENCE,
        || async { app.state.leadership.is_leader() },
    )
    .await;
    let (sale, _clock) = lottery_sale(&app, 10).await;
    let users: Vec<i64> = (1..=40).collect();
    for user in &users {
        assert_eq!(register(&app, &sale, *user).await.0, 200);
    }
    // This instance's lottery clock stays inside the window: it never draws. It stops as a
    // crash would, and each next leader runs by the wall clock, past the window's close.
    app.kill();
    let client = reqwest::Client::new();
    for step in DRAW_FAULT_POINTS {
        let mut process = crate::support::serve_process::ServeProcess::start_with_env(
            &app.state.settings,
            &client,
            &[(base::fault::VARIABLE, step)],
        )
        .await;
        let status = tokio::time::timeout(Duration::from_secs(60), process.exited())
            .await
            .unwrap_or_else(|_| panic!("{step}: the leader never reached its fault point"));
        assert!(!status.success(), "{step}: {status}");
        let draws: i64 = sqlx::query_scalar("SELECT count(*) FROM lottery_draws")
            .fetch_one(&app.db)
            .await
            .expect("draws");
        // Died before the commit: nothing; after it: the draw, whole.
        assert_eq!(draws, i64::from(step == "lottery.drawn"), "{step}");
    }
    let drawn_codes = codes(&app, &sale).await;
    assert_eq!(drawn_codes.len(), 10);
    let last =
        crate::support::serve_process::ServeProcess::start(&app.state.settings, &client).await;
    let ops = app.caller(Role::Ops, None).await;
    let report_path = format!(
        "{}/admin/api/activities/{}/draw",
        last.address, sale.activity_id
    );
    until(
        "the next leader publishes the draw",
        Duration::from_secs(60),
        || async {
            let report: Value = client
                .get(&report_path)
                .bearer_auth(&ops.token)
                .send()
                .await
                .expect("sent")
                .json()
                .await
                .expect("json");
            report["items"][0]["waitlist_reached"] == json!(10)
        },
    )
    .await;
    // The codes in Redis are the ones the committed draw made, one per winner, and every
    // registrant has one entry.
    assert_eq!(
        codes(&app, &sale).await,
        drawn_codes,
        "no code issued twice"
    );
    let held = redis_codes(&app, &sale).await;
    let mut committed: Vec<(i64, String)> = drawn_codes.clone();
    committed.sort();
    assert_eq!(held, committed);
    assert_eq!(statuses(&app, &sale).await.len(), users.len());
    last.finish().await;
}

/// The codes Redis holds for an item, by buyer.
async fn redis_codes(app: &TestApp, sale: &Sale) -> Vec<(i64, String)> {
    let key = app.state.redis.item_key(
        contract::SaleItem::new(sale.activity_id, sale.item_id),
        "lot:codes",
    );
    let held: Vec<(i64, String)> = redis::cmd("HGETALL")
        .arg(key)
        .query_async(&mut app.state.redis.connection())
        .await
        .expect("codes");
    let mut codes: Vec<(i64, String)> = held
        .into_iter()
        .map(|(buyer, grant)| {
            (
                buyer,
                grant.split(' ').next().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    codes.sort();
    codes
}

#[tokio::test]
async fn a_registrant_sees_his_win_reach_the_sale_page_without_a_reload_and_buys() {
    let app = spawn_app_with(|_| {}).await;
    let (sale, clock) = lottery_sale(&app, 1).await;
    let ops = app.caller(Role::Ops, None).await;
    let (status, body) = json(
        app.post_json(
            &format!("/admin/api/activities/{}/publish", sale.activity_id),
            Some(&ops),
            &json!({}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(register(&app, &sale, 7).await.0, 200);
    let child = crate::browser::start_scenario(
        "sale_page_lottery.mjs",
        vec![
            app.address.clone(),
            sale.activity_id.to_string(),
            token(&app, 7),
            crate::browser::shots(),
        ],
    );
    let said = crate::sale_page::when_said(child, "registered", "drawn", || async {
        clock.advance(Duration::from_secs(10 * 60));
    })
    .await;
    assert!(said.iter().any(|line| line == "bought"), "{said:?}");
    assert_eq!(mine(&app, &sale, 7).await[0]["status"], "bought");
}

#[tokio::test]
async fn ops_read_the_draw_in_the_console_and_revoke_a_buyer_with_a_reason() {
    let app = spawn_app_with(|_| {}).await;
    let ops = app.caller(Role::Ops, None).await;
    let (sale, clock) = lottery_sale(&app, 2).await;
    registered_and_drawn(&app, &ops, &sale, &clock, 1..=4, 2).await;
    let commitment = draw_report(&app, &ops, &sale).await["commitment"]
        .as_str()
        .expect("commitment")
        .to_owned();
    let winner = codes(&app, &sale).await[0].0;
    let audited = app.operator_actions().await;
    let said = crate::browser::run_scenario(
        "console_lottery_draw.mjs",
        vec![
            app.address.clone(),
            ops.username.clone(),
            ops.password.clone(),
            sale.activity_id.to_string(),
            commitment,
            winner.to_string(),
            crate::browser::shots(),
        ],
    )
    .await;
    assert!(said.lines().any(|line| line == "revoked"), "{said}");
    assert_eq!(app.operator_actions().await, audited + 1);
    assert_eq!(mine(&app, &sale, winner).await[0]["status"], "revoked");
}

/// Ops see where registrations came from, by client address: a farm of one address stands
/// out by its share. Live while registration is open; after the draw, as the draw fixed it,
/// so the figures outlive the sale's keys in Redis. A refused registration is not counted.
#[tokio::test]
async fn ops_see_how_many_addresses_registered_and_the_share_of_the_busiest() {
    const FARM: &str = "203.0.113.7";
    let app = spawn_app_with(|settings| {
        settings.trusted_proxies = ["127.0.0.1".parse().expect("network")]
            .into_iter()
            .collect();
        settings.buy.registrations_per_ip_per_window = 30;
        settings.buy.rate_window_s = 3_600;
    })
    .await;
    let ops = app.caller(Role::Ops, None).await;
    let (sale, clock) = lottery_sale(&app, 2).await;
    for user in 1..=30 {
        assert_eq!(register_from(&app, &sale, user, Some(FARM)).await.0, 200);
    }
    let (status, body) = register_from(&app, &sale, 31, Some(FARM)).await;
    assert_eq!((status, body["code"].as_str()), (429, Some("RATE_LIMITED")));
    for user in 40..45 {
        let from = format!("198.51.100.{user}");
        assert_eq!(register_from(&app, &sale, user, Some(&from)).await.0, 200);
    }
    let live = draw_report(&app, &ops, &sale).await["items"][0]["sources"].clone();
    assert_eq!(
        (
            &live["registrations"],
            &live["addresses"],
            &live["from_top_100"]
        ),
        (&json!(35), &json!(6), &json!(35)),
        "{live}"
    );
    let top = live["top"].as_array().expect("top");
    assert_eq!(top.len(), 6, "{live}");
    assert_eq!(top[0], json!({ "address": FARM, "registrations": 30 }));
    assert!(top[1..].iter().all(|entry| entry["registrations"] == 1));

    clock.advance(Duration::from_secs(10 * 60));
    until("the draw is published", Duration::from_secs(30), || async {
        draw_report(&app, &ops, &sale).await["items"][0]["waitlist_reached"] == json!(2)
    })
    .await;
    // The sale's keys go (as they do two days after its end): the draw's figures stay.
    let _: () = redis::cmd("DEL")
        .arg(app.state.redis.item_key(
            contract::SaleItem::new(sale.activity_id, sale.item_id),
            "lot:addrs",
        ))
        .query_async(&mut app.state.redis.connection())
        .await
        .expect("del");
    assert_eq!(
        draw_report(&app, &ops, &sale).await["items"][0]["sources"],
        live
    );
}

/// The lottery's line of the readiness check: before the close, the commitment and the
/// registrations so far; after the draw, every item drawn. (Its refusals, no leader and an
/// overdue draw, are the verdict's unit tests.)
#[tokio::test]
async fn readiness_shows_a_lotterys_commitment_registrations_and_draw() {
    let app = spawn_app_with(|_| {}).await;
    let ops = app.caller(Role::Ops, None).await;
    let (sale, clock) = lottery_sale(&app, 2).await;
    for user in 1..=3 {
        assert_eq!(register(&app, &sale, user).await.0, 200);
    }
    let lottery_line = || readiness_line(&app, &ops, &sale);
    let before = lottery_line().await;
    assert_eq!(before["ok"], true, "{before}");
    let detail = before["detail"].as_str().expect("detail");
    assert!(
        detail.contains("3 registration(s) so far") && detail.contains("commitment"),
        "{detail}"
    );
    clock.advance(Duration::from_secs(10 * 60));
    until(
        "readiness sees the draw made",
        Duration::from_secs(30),
        || async {
            let line = lottery_line().await;
            line["ok"] == true
                && line["detail"]
                    .as_str()
                    .is_some_and(|detail| detail.contains("all 1 item(s) drawn"))
        },
    )
    .await;
}

/// The line of readiness's `lottery` check for the activity of `sale`.
async fn readiness_line(app: &TestApp, ops: &Caller, sale: &Sale) -> Value {
    let path = format!("/admin/api/readiness?activity_id={}", sale.activity_id);
    let (status, report) = json(app.get(&path, Some(ops)).await).await;
    assert_eq!(status, 200, "{report}");
    report["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .find(|check| check["name"] == "lottery")
        .cloned()
        .expect("a lottery check")
}

/// Registration opens hours before the sale, before anyone pre-warms it: the buyer API must
/// find the activity all the same. Before the leader's horizon it does not (a made-up id
/// costs nothing, and neither does this one yet); once the window opens, a registration is
/// taken without a pre-warm, and readiness, the draw report and the console's activity page
/// say buyers can register.
#[tokio::test]
async fn a_lottery_never_pre_warmed_takes_registrations_once_its_window_opens() {
    let app = spawn_app_with(|_| {}).await;
    let ops = app.caller(Role::Ops, None).await;
    until(
        "this instance leads",
        crate::support::wait::PATIENCE,
        || async { app.state.leadership.is_leader() },
    )
    .await;
    // The Bloom filter exists, as it does once any activity was pre-warmed: a key it lacks
    // is absent (a filter that is gone lets every id through to the database).
    let _: () = redis::cmd("SETBIT")
        .arg(app.state.redis.bloom_key())
        .arg(0)
        .arg(1)
        .query_async(&mut app.state.redis.connection())
        .await
        .expect("a filter");
    let clock = TestClock::starting_now();
    app.state.lottery.use_clock(clock.clone());
    // Registration opens in an hour, the sale in three.
    let sale = new_lottery(&app, 2, chrono::Utc::now() + chrono::Duration::hours(3)).await;
    let (status, body) = register(&app, &sale, 1).await;
    assert_eq!(status, 404, "not known an hour before: {body}");
    let later = readiness_line(&app, &ops, &sale).await;
    assert!(
        later["ok"] == true
            && later["detail"]
                .as_str()
                .is_some_and(|detail| detail.contains("makes it reachable")),
        "{later}"
    );
    // The console's activity page says so too.
    let session = app.console_session(&ops).await;
    let page = format!("/activities/{}", sale.activity_id);
    let html = app.console_page(&page, &session).await;
    assert!(
        html.contains(r#"id="registration" data-state="upcoming""#),
        "{html}"
    );

    clock.advance(Duration::from_secs(61 * 60));
    until(
        "a registration is taken without a pre-warm",
        Duration::from_secs(10),
        || async { register(&app, &sale, 1).await.0 == 200 },
    )
    .await;
    assert_eq!(mine(&app, &sale, 1).await[0]["status"], "registered");
    let open = readiness_line(&app, &ops, &sale).await;
    assert!(
        open["ok"] == true
            && open["detail"]
                .as_str()
                .is_some_and(|detail| detail.contains("buyers can register")),
        "{open}"
    );
    let report = draw_report(&app, &ops, &sale).await;
    assert_eq!(report["registration"]["reachable"], true, "{report}");
    let html = app.console_page(&page, &session).await;
    assert!(
        html.contains(r#"id="registration" data-state="open""#)
            && html.contains("buyers can register"),
        "{html}"
    );
}

/// While a lottery's registration is open and buyers cannot reach it (no leader made it
/// known, nobody pre-warmed it), the console's activity page shows ops a notice saying so, in
/// a real browser; once a pre-warm lets buyers in, the page says they can register, without a
/// reload.
#[tokio::test]
async fn the_console_warns_while_buyers_cannot_reach_an_open_registration() {
    let app = spawn_app_with(|_| {}).await;
    let ops = app.caller(Role::Ops, None).await;
    // No leader: the instance resigns the election, so no lottery pass makes the activity
    // known to the buyer API.
    app.control.shutdown().await;
    until(
        "this instance no longer leads",
        crate::support::wait::PATIENCE,
        || async { !app.state.leadership.is_leader() },
    )
    .await;
    // The Bloom filter exists, as it does once any activity was pre-warmed: a key it lacks
    // is absent (a filter that is gone lets every id through to the database).
    let _: () = redis::cmd("SETBIT")
        .arg(app.state.redis.bloom_key())
        .arg(0)
        .arg(1)
        .query_async(&mut app.state.redis.connection())
        .await
        .expect("a filter");
    // Registration opened an hour ago and closes in fifty minutes.
    let sale = new_lottery(&app, 2, chrono::Utc::now() + chrono::Duration::hours(1)).await;
    let (status, body) = register(&app, &sale, 1).await;
    assert_eq!(status, 404, "buyers cannot register: {body}");
    let child = crate::browser::start_scenario(
        "console_lottery_blocked.mjs",
        vec![
            app.address.clone(),
            ops.username.clone(),
            ops.password.clone(),
            sale.activity_id.to_string(),
            crate::browser::shots(),
        ],
    );
    let said = crate::sale_page::when_said(child, "blocked", "reachable", || async {
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
    })
    .await;
    assert!(said.iter().any(|line| line == "open"), "{said:?}");
    // The instance may remember the id as missing for a moment after the 404 above.
    until(
        "a registration is taken",
        Duration::from_secs(10),
        || async { register(&app, &sale, 1).await.0 == 200 },
    )
    .await;
}

/// While the `challenge` switch is on, a registration answers the human challenge as a buy
/// does: without it, or too fast, 403 `CHALLENGE_FAILED` and nothing in the list; with the
/// right answer, registered.
#[tokio::test]
async fn a_registration_answers_the_challenge_while_the_switch_asks_for_it() {
    let app = spawn_app_with(|settings| settings.buy.challenge_required = true).await;
    let clock = TestClock::starting_now();
    app.state.funnel.challenges.use_clock(clock.clone());
    let (sale, _) = lottery_sale(&app, 2).await;
    let (status, body) = register(&app, &sale, 7).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (403, Some("CHALLENGE_FAILED")),
        "{body}"
    );
    let answered = |(id, answer): (String, i64)| json!({ "item_id": sale.item_id, "challenge_id": id, "answer": answer });
    let asked = app.challenge_for(sale.activity_id, 7).await;
    let (status, _) = register_with(&app, &sale, 7, None, answered(asked)).await;
    assert_eq!(status, 403, "answered faster than a person can");
    assert!(mine(&app, &sale, 7)
        .await
        .as_array()
        .expect("list")
        .is_empty());

    let asked = app.challenge_for(sale.activity_id, 7).await;
    clock.advance(sale::buy::challenge::MIN_THINKING_TIME);
    let (status, body) = register_with(&app, &sale, 7, None, answered(asked)).await;
    assert_eq!(
        (status, body["status"].as_str()),
        (200, Some("registered")),
        "{body}"
    );
}

/// A waitlisted buyer is told his place net of the buyers revoked ahead of him (their turn
/// will pass them by), and how many turns the waitlist has had since the draw.
#[tokio::test]
async fn a_waitlisted_buyers_place_leaves_out_the_revoked_ahead_and_counts_the_turns() {
    let app = spawn_app_with(|_| {}).await;
    let ops = app.caller(Role::Ops, None).await;
    // Two units: ranks 1 and 2 win, 3 to 6 wait.
    let (sale, clock) = lottery_sale(&app, 2).await;
    registered_and_drawn(&app, &ops, &sale, &clock, 1..=6, 2).await;
    let ranked = ranked(&app, &sale).await;
    let place = |user: i64| {
        let app = &app;
        let sale = &sale;
        async move {
            let line = mine(app, sale, user).await[0].clone();
            (
                line["waitlist_position"].as_i64(),
                line["waitlist_turns_passed"].as_i64(),
            )
        }
    };
    assert_eq!(place(ranked[4]).await, (Some(3), Some(0)), "rank 5, before");
    let (status, body) = json(
        app.post_json(
            &format!(
                "/admin/api/activities/{}/registrations/{}/revoke",
                sale.activity_id, ranked[3]
            ),
            Some(&ops),
            &json!({ "reason": "one of a farm of accounts" }),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(place(ranked[4]).await, (Some(2), Some(0)), "rank 4 revoked");
    assert_eq!(place(ranked[2]).await, (Some(1), Some(0)), "rank 3 is next");

    // One winner buys; the other's code expires: rank 3 gets its turn, the waitlist has
    // had one.
    let winners = codes(&app, &sale).await;
    app.bought(
        winners[0].0,
        "first",
        &lottery_buy(&sale, Some(&winners[0].1)),
    )
    .await;
    clock.advance(Duration::from_secs(CODE_TTL_S as u64 + 1));
    until("rank 3 gets a code", Duration::from_secs(5), || async {
        mine(&app, &sale, ranked[2]).await[0]["status"] == "won"
    })
    .await;
    assert_eq!(place(ranked[4]).await, (Some(1), Some(1)), "rank 5 is next");
}

/// Every registrant drawn, in rank order.
async fn ranked(app: &TestApp, sale: &Sale) -> Vec<i64> {
    sqlx::query_scalar(
        "SELECT user_id FROM lottery_entries
         WHERE activity_id = $1 AND item_id = $2 ORDER BY rank",
    )
    .bind(sale.activity_id)
    .bind(sale.item_id)
    .fetch_all(&app.db)
    .await
    .expect("ranks")
}

/// Redis loses the lottery's keys mid-sale (a restart or a fail-over without its data): the
/// draw committed in PostgreSQL is the truth, and the leader writes it back. A winner who
/// bought is still told his code bought; one who had not buys with his code; the next in
/// line keeps his place, and the waitlist moves on when a code expires.
#[tokio::test]
async fn the_lotterys_keys_lost_from_redis_are_rederived_from_the_committed_draw() {
    let app = spawn_app_with(|_| {}).await;
    let ops = app.caller(Role::Ops, None).await;
    // Three units: three winners, three waiting.
    let (sale, clock) = lottery_sale(&app, 3).await;
    registered_and_drawn(&app, &ops, &sale, &clock, 1..=6, 3).await;
    let winners = codes(&app, &sale).await;
    let [(early, early_code), (late, late_code), (idle, _)] =
        <[(i64, String); 3]>::try_from(winners).expect("three winners");
    let order = app
        .bought(early, "before", &lottery_buy(&sale, Some(&early_code)))
        .await;
    until(
        "the order is in PostgreSQL",
        Duration::from_secs(30),
        || async { order_status(&app, order).await == "UNPAID" },
    )
    .await;
    let next = ranked(&app, &sale).await[3];
    assert_eq!(mine(&app, &sale, next).await[0]["waitlist_position"], 1);

    // Every lottery key of the item is gone (the test's own key prefix).
    let pattern = app.state.redis.item_key(
        contract::SaleItem::new(sale.activity_id, sale.item_id),
        "lot:*",
    );
    let mut redis = app.state.redis.connection();
    let lost: Vec<String> = redis::cmd("KEYS")
        .arg(&pattern)
        .query_async(&mut redis)
        .await
        .expect("keys");
    assert!(lost.len() >= 6, "{lost:?}");
    let _: () = redis::cmd("DEL")
        .arg(&lost)
        .query_async(&mut redis)
        .await
        .expect("deleted");

    until(
        "the leader writes the draw back",
        Duration::from_secs(10),
        || async { mine(&app, &sale, late).await[0]["status"] == "won" },
    )
    .await;
    assert_eq!(mine(&app, &sale, early).await[0]["status"], "bought");
    assert_eq!(mine(&app, &sale, idle).await[0]["status"], "won");
    assert_eq!(mine(&app, &sale, next).await[0]["waitlist_position"], 1);
    let (status, body) = app
        .buy(early, "again", &lottery_buy(&sale, Some(&early_code)))
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (409, Some("ALREADY_PURCHASED")),
        "a code bought before the loss is still used: {body}"
    );
    app.bought(late, "after", &lottery_buy(&sale, Some(&late_code)))
        .await;

    // The idle winner's code expires: the next in line gets one and buys.
    clock.advance(Duration::from_secs(CODE_TTL_S as u64 + 1));
    until(
        "the next in line gets a code",
        Duration::from_secs(2),
        || async { codes(&app, &sale).await.len() == 4 },
    )
    .await;
    let (turn, turn_code) = codes(&app, &sale).await[3].clone();
    assert_eq!(turn, next);
    app.bought(next, "turn", &lottery_buy(&sale, Some(&turn_code)))
        .await;
}
