//! Hot keys on real instances and a real etcd: a buyer hot only in the sum of two instances
//! is found by the leader, published with a lease, and blocked on both within a second and
//! a half while others are served; the key lapses once the buyer stops; a new leader picks
//! detection up after the old one dies; manual keys are audited and refused to roles that
//! may not add them; `limit` and `cache` act where they should, and a `limit` is the
//! cluster's total, not each instance's.

use crate::control::cluster;
use crate::support::{
    app::{json, spawn_app_with, TestApp},
    fixtures::{buy_body, open_sale, storm_settings, Caller, Sale},
    wait::until,
};
use base::config::Settings;
use contract::Role;
use etcd_client::Client;
use futures::{stream::FuturesUnordered, StreamExt};
use reqwest::Method;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// Short leases, so a dead leader is replaced quickly; loose rate limits, so only hot keys
/// refuse anything.
fn settings(settings: &mut Settings) {
    storm_settings(settings);
    settings.buy.per_user_per_window = 1_000_000;
    settings.control.lease_ttl_s = 2;
}

async fn etcd(app: &TestApp) -> Client {
    Client::connect(&app.state.settings.etcd_endpoints, None)
        .await
        .expect("etcd client")
}

/// Sets a hot-key rule through the admin API and waits until every live instance has it.
async fn rule(app: &TestApp, ops: &Caller, kind: &str, rule: Value) {
    let response = app
        .send_json(
            Method::PUT,
            &format!("/admin/api/switches/rules/hotkeys/{kind}?wait_ms=5000"),
            Some(ops),
            &json!({ "value": rule, "reason": "hot-key test" }),
        )
        .await;
    let (status, body) = json(response).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["propagation"]["complete"], true, "{body}");
}

async fn view(app: &TestApp, caller: &Caller) -> Value {
    let (status, body) = json(app.get("/admin/api/hotkeys", Some(caller)).await).await;
    assert_eq!(status, 200, "{body}");
    body
}

fn listed<'v>(view: &'v Value, kind: &str, key: &str) -> Option<&'v Value> {
    view["hot"]
        .as_array()?
        .iter()
        .find(|hot| hot["kind"] == kind && hot["key"] == key)
}

async fn add(app: &TestApp, caller: &Caller, key: &Value) -> (u16, Value) {
    json(app.post_json("/admin/api/hotkeys", Some(caller), key).await).await
}

async fn remove(app: &TestApp, caller: &Caller, path: &str) -> (u16, Value) {
    json(
        app.send_json(Method::DELETE, path, Some(caller), &Value::Null)
            .await,
    )
    .await
}

/// Sends buys of `user` to `app` at `per_s` for `during`, each with a fresh request id and
/// without waiting for the previous answer (a slow answer does not slow the burst down);
/// returns when each was sent (from `start`) and its status and code, in sending order.
async fn burst(
    app: &TestApp,
    body: &Value,
    user: i64,
    per_s: u32,
    during: Duration,
    start: Instant,
) -> Vec<(Duration, u16, String)> {
    let mut tick = tokio::time::interval(Duration::from_secs(1) / per_s);
    let mut pending = FuturesUnordered::new();
    let mut answers = Vec::new();
    loop {
        tokio::select! {
            _ = tick.tick(), if start.elapsed() < during => {
                let sent = start.elapsed();
                let request_id = format!("burst-{}", uuid::Uuid::new_v4().simple());
                pending.push(async move {
                    let (status, answer) = app.buy(user, &request_id, body).await;
                    (sent, status, answer["code"].as_str().unwrap_or("").to_owned())
                });
            }
            Some(answer) = pending.next() => answers.push(answer),
            else => break,
        }
    }
    answers.sort_by_key(|(sent, ..)| *sent);
    answers
}

/// When the first buy answered 429 `RATE_LIMITED` was sent.
fn first_blocked(answers: &[(Duration, u16, String)]) -> Option<Duration> {
    answers
        .iter()
        .find(|(_, status, code)| *status == 429 && code == "RATE_LIMITED")
        .map(|(sent, ..)| *sent)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_buyer_hot_only_in_the_sum_is_blocked_on_both_instances_within_a_second_and_a_half() {
    let first = spawn_app_with(settings).await;
    let second = first.spawn_sibling(|_| {}).await;
    let sale = open_sale(&first, 100_000, 1_000).await;
    let ops = first.caller(Role::Ops, None).await;
    let hold_s = 2;
    rule(
        &first,
        &ops,
        "user",
        json!({ "threshold_per_s": 50, "action": "block", "hold_s": hold_s }),
    )
    .await;
    let body = buy_body(&sale, 1);
    let greedy = 4_242;
    // 30 buys a second to each instance: 60 in the sum, neither instance above 50 alone.
    let start = Instant::now();
    let during = Duration::from_millis(2_500);
    let (on_first, on_second) = tokio::join!(
        burst(&first, &body, greedy, 30, during, start),
        burst(&second, &body, greedy, 30, during, start),
    );
    let stopped = Instant::now();
    for (name, answers) in [("first", &on_first), ("second", &on_second)] {
        let blocked = first_blocked(answers)
            .unwrap_or_else(|| panic!("the {name} instance never blocked the buyer: {answers:?}"));
        assert!(
            blocked <= Duration::from_millis(1_500),
            "the {name} instance blocked the buyer only {blocked:?} after the burst began"
        );
        let before: Vec<_> = answers
            .iter()
            .filter(|(sent, ..)| *sent < blocked)
            .collect();
        assert!(
            before.iter().all(|(_, status, _)| *status == 200),
            "before the block every buy is served: {before:?}"
        );
    }
    // While the key is in force: etcd holds it under a lease, both instances list it, and
    // another buyer is served by both.
    let key = format!("{}/hotkeys/user/{greedy}", first.state.settings.etcd_prefix);
    let stored = etcd(&first)
        .await
        .get(key.as_str(), None)
        .await
        .expect("etcd get");
    let kv = stored.kvs().first().expect("the hot key is in etcd");
    assert_ne!(kv.lease(), 0, "published with a lease");
    let published: Value = serde_json::from_slice(kv.value()).expect("json");
    assert_eq!(published["source"], "detected");
    let sre = first.caller(Role::Sre, None).await;
    for (n, app) in [&first, &second].into_iter().enumerate() {
        let seen = view(app, &sre).await;
        let hot = listed(&seen, "user", &greedy.to_string())
            .unwrap_or_else(|| panic!("listed on every instance: {seen}"));
        assert_eq!(hot["source"], "detected");
        assert_eq!(hot["action"], "block");
        assert!(hot["rate_per_s"].as_u64().unwrap_or(0) >= 50, "{hot}");
        assert!(
            hot["expires_ms"].as_i64() > hot["since_ms"].as_i64(),
            "{hot}"
        );
        let (status, answer) = app.buy(77, &format!("other-{n}"), &body).await;
        assert_eq!(status, 200, "another buyer is served: {answer}");
        assert!(
            app.metric(
                "seckill_funnel_requests_total{outcome=\"RATE_LIMITED\",stage=\"hotkey_block\"}"
            )
            .await
                > 0.0
        );
    }
    // The buyer stopped: nobody renews the key, and it lapses a hold after its last renewal.
    until(
        "the key lapses on both instances",
        Duration::from_secs(hold_s + 3),
        || async {
            listed(&view(&first, &sre).await, "user", &greedy.to_string()).is_none()
                && listed(&view(&second, &sre).await, "user", &greedy.to_string()).is_none()
        },
    )
    .await;
    assert!(
        stopped.elapsed() >= Duration::from_millis(hold_s * 1000 - 1_100),
        "held for about hold_s after the last renewal, not dropped at once: {:?}",
        stopped.elapsed()
    );
    let (status, answer) = first.buy(greedy, "after-the-hold", &body).await;
    assert_eq!(status, 200, "served again once the key lapsed: {answer}");
    // The period is in the history.
    let (status, history) = json(first.get("/admin/api/hotkeys/history", Some(&sre)).await).await;
    assert_eq!(status, 200, "{history}");
    let period = history
        .as_array()
        .and_then(|rows| {
            rows.iter()
                .find(|row| row["key"].as_str() == Some(greedy.to_string().as_str()))
        })
        .unwrap_or_else(|| panic!("the period is stored: {history}"));
    assert_eq!(period["source"], "detected");
    assert!(
        period["peak_rate_per_s"].as_u64().unwrap_or(0) >= 50,
        "{period}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_new_leader_publishes_within_the_takeover_and_a_second_when_the_old_one_dies_in_a_burst()
{
    let first = spawn_app_with(settings).await;
    until(
        "the first instance leads",
        Duration::from_secs(10),
        || async { first.state.leadership.is_leader() },
    )
    .await;
    let second = first.spawn_sibling(|_| {}).await;
    let sale = open_sale(&first, 100_000, 1_000).await;
    let ops = first.caller(Role::Ops, None).await;
    rule(
        &first,
        &ops,
        "user",
        json!({ "threshold_per_s": 40, "action": "block", "hold_s": 5 }),
    )
    .await;
    let body = buy_body(&sale, 1);
    let greedy = 5_151;
    // The leader dies as the burst begins; the burst goes on at the survivor.
    first.kill();
    let killed = Instant::now();
    let (answers, took_over) = tokio::join!(
        burst(&second, &body, greedy, 60, Duration::from_secs(8), killed),
        async {
            until("the survivor leads", Duration::from_secs(10), || async {
                second.state.leadership.is_leader()
            })
            .await;
            killed.elapsed()
        }
    );
    let blocked = first_blocked(&answers)
        .unwrap_or_else(|| panic!("the survivor never blocked the buyer: {answers:?}"));
    assert!(
        blocked <= took_over + Duration::from_secs(1),
        "published {blocked:?} after the kill; the takeover took {took_over:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manual_hot_keys_are_audited_act_at_once_and_are_refused_to_roles_that_may_not_add_them() {
    let app = spawn_app_with(settings).await;
    let sale = open_sale(&app, 100, 100).await;
    let ops = app.caller(Role::Ops, None).await;
    let sre = app.caller(Role::Sre, None).await;
    let body = buy_body(&sale, 1);
    // Changes in force: a refused one is audited `failed`, if at all.
    let audited = || app.count("switch_audit WHERE path LIKE 'hotkeys/%' AND state = 'applied'");
    let before = audited().await;
    // Refused: a role that may not, and bad input of every kind; nothing is written.

    let good = json!({ "kind": "user", "key": "31", "action": "block", "hold_s": 60, "reason": "scalper" });
    let (status, _) = add(&app, &sre, &good).await;
    assert_eq!(status, 403);
    for (bad, code) in [
        (
            json!({ "kind": "user", "key": "031", "action": "block", "hold_s": 60, "reason": "x" }),
            "INVALID_HOTKEY",
        ),
        (
            json!({ "kind": "user", "key": "31", "action": "cache", "hold_s": 60, "reason": "x" }),
            "INVALID_HOTKEY_ACTION",
        ),
        (
            json!({ "kind": "item", "key": "31", "action": "limit", "hold_s": 60, "reason": "x" }),
            "INVALID_HOTKEY_ACTION",
        ),
        (
            json!({ "kind": "user", "key": "31", "action": "block", "hold_s": 0, "reason": "x" }),
            "INVALID_HOLD",
        ),
        (
            json!({ "kind": "user", "key": "31", "action": "block", "hold_s": 60, "reason": " " }),
            "REASON_REQUIRED",
        ),
    ] {
        let (status, answer) = add(&app, &ops, &bad).await;
        assert_eq!(
            (status, answer["code"].as_str()),
            (400, Some(code)),
            "{bad}"
        );
    }
    let (status, answer) = add(&app, &ops, &json!({ "kind": "seat" })).await;
    assert_eq!(status, 400, "{answer}");
    assert!(answer["code"].is_string(), "{answer}");
    assert_eq!(audited().await, before, "refused requests audit nothing");
    assert!(view(&app, &sre).await["hot"]
        .as_array()
        .is_some_and(Vec::is_empty));

    // Added: audited, in force at once (as soon as the watch applies it), listed as manual.
    let (status, added) = add(&app, &ops, &good).await;
    assert_eq!(status, 201, "{added}");
    assert_eq!(added["source"], "manual");
    assert_eq!(audited().await, before + 1);
    until(
        "the manual block applies",
        Duration::from_secs(5),
        || async {
            app.buy(31, &format!("m-{}", uuid::Uuid::new_v4().simple()), &body)
                .await
                .0
                == 429
        },
    )
    .await;
    let response = app.buy(31, "blocked-once-more", &body).await;
    assert_eq!(response.1["code"], "RATE_LIMITED", "{}", response.1);
    let (status, _) = app.buy(32, "someone-else", &body).await;
    assert_eq!(status, 200, "another buyer is served");
    let seen = view(&app, &sre).await;
    let hot = listed(&seen, "user", "31").unwrap_or_else(|| panic!("{seen}"));
    assert_eq!(
        (&hot["source"], &hot["reason"]),
        (&json!("manual"), &json!("scalper"))
    );
    assert_eq!(hot["actor"], ops.username);

    // Removed: audited, and the buyer is served again.

    let (status, _) = remove(&app, &sre, "/admin/api/hotkeys/user/31?reason=done").await;
    assert_eq!(status, 403);
    let (status, answer) = remove(&app, &ops, "/admin/api/hotkeys/user/31").await;
    assert_eq!(
        (status, answer["code"].as_str()),
        (400, Some("REASON_REQUIRED"))
    );
    let (status, _) = remove(&app, &ops, "/admin/api/hotkeys/user/99?reason=done").await;
    assert_eq!(status, 404, "nothing to remove");
    assert_eq!(audited().await, before + 1);
    let (status, _) = remove(&app, &ops, "/admin/api/hotkeys/user/31?reason=done").await;
    assert_eq!(status, 204);
    assert_eq!(audited().await, before + 2);
    until(
        "the buyer is served again",
        Duration::from_secs(5),
        || async {
            app.buy(31, &format!("r-{}", uuid::Uuid::new_v4().simple()), &body)
                .await
                .0
                == 200
        },
    )
    .await;
    let (_, history) = json(app.get("/admin/api/hotkeys/history", Some(&sre)).await).await;
    let period = &history[0];
    assert_eq!(
        (&period["key"], &period["source"]),
        (&json!("31"), &json!("manual"))
    );
    assert!(
        period["ended_at"].is_string(),
        "closed on removal: {period}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limited_item_lets_its_rate_through_and_refuses_the_rest_before_redis() {
    let app = spawn_app_with(settings).await;
    let sale = open_sale(&app, 1_000, 1).await;
    let ops = app.caller(Role::Ops, None).await;
    let key = json!({ "kind": "item", "key": sale.item_id.to_string(), "action": "limit",
                      "limit_per_s": 5, "hold_s": 60, "reason": "flash crowd" });
    let (status, added) = json(app.post_json("/admin/api/hotkeys", Some(&ops), &key).await).await;
    assert_eq!(status, 201, "{added}");
    let sre = app.caller(Role::Sre, None).await;
    until("the limit applies", Duration::from_secs(5), || async {
        listed(&view(&app, &sre).await, "item", &sale.item_id.to_string()).is_some()
    })
    .await;
    let body = buy_body(&sale, 1);
    let answers =
        futures::future::join_all((0..40).map(|user| app.buy(1_000 + user, "limited", &body)))
            .await;
    let served = answers.iter().filter(|(status, _)| *status == 200).count();
    let limited = answers
        .iter()
        .filter(|(status, body)| *status == 429 && body["code"] == "RATE_LIMITED")
        .count();
    assert_eq!(served + limited, 40, "{answers:?}");
    // The bucket starts with one second's worth; the burst takes well under a second.
    assert!((5..=10).contains(&served), "{served} served");
    let stopped = app
        .metric("seckill_funnel_requests_total{outcome=\"RATE_LIMITED\",stage=\"hotkey_limit\"}")
        .await;
    assert_eq!(stopped as usize, limited);
    // The refused buys never reached Redis: only the served ones were deducted.
    assert_eq!(app.redis_stock(&sale).await, 1_000 - served as i64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cached_item_is_read_from_memory_past_the_cache_lifetime_and_refreshed_behind() {
    let app = spawn_app_with(|settings| {
        settings.buy.activity_cache_ms = 50;
    })
    .await;
    let sale = open_sale(&app, 10, 1).await;
    let ops = app.caller(Role::Ops, None).await;
    let key = json!({ "kind": "item", "key": sale.item_id.to_string(), "action": "cache",
                      "hold_s": 60, "reason": "front page" });
    let (status, added) = json(app.post_json("/admin/api/hotkeys", Some(&ops), &key).await).await;
    assert_eq!(status, 201, "{added}");
    let sre = app.caller(Role::Sre, None).await;
    until("the cache applies", Duration::from_secs(5), || async {
        listed(&view(&app, &sre).await, "item", &sale.item_id.to_string()).is_some()
    })
    .await;
    let path = format!("/api/activities/{}", sale.activity_id);
    let (status, first) = json(app.get(&path, None).await).await;
    assert_eq!(status, 200, "{first}");
    // The title changes in the database; reads past the 50 ms lifetime are answered from
    // memory (counted) and the copy is refreshed in the background.
    sqlx::query("UPDATE activities SET title = 'Renamed' WHERE id = $1")
        .bind(sale.activity_id)
        .execute(&app.db)
        .await
        .expect("rename");
    let cached = "seckill_hotkey_reactions_total{action=\"cache\",kind=\"item\"}";
    until(
        "the renamed title is served",
        Duration::from_secs(5),
        || async { json(app.get(&path, None).await).await.1["title"] == "Renamed" },
    )
    .await;
    assert!(
        app.metric(cached).await > 0.0,
        "reads were served from memory"
    );
    // The status's stock is read from memory too, and follows Redis behind.
    let status_path = format!("/api/activities/{}/status", sale.activity_id);
    let (status, live) = json(app.get(&status_path, None).await).await;
    assert_eq!(
        (status, &live["items"][0]["sold_out"]),
        (200, &json!(false)),
        "{live}"
    );
    let mut redis = app.state.redis.connection();
    let _: () = redis::AsyncCommands::set(
        &mut redis,
        app.state
            .redis
            .stock_key(contract::SaleItem::new(sale.activity_id, sale.item_id)),
        0,
    )
    .await
    .expect("empty the stock");
    until(
        "the status follows Redis",
        Duration::from_secs(5),
        || async {
            json(app.get(&status_path, None).await).await.1["items"][0]["sold_out"] == true
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_instance_reports_its_top_keys_and_the_view_adds_them_up() {
    let first = spawn_app_with(settings).await;
    let second = first.spawn_sibling(|_| {}).await;
    let sale = open_sale(&first, 1_000, 1_000).await;
    let body = buy_body(&sale, 1);
    let sre = first.caller(Role::Sre, None).await;
    // Bursts of ten buys on each instance at once, until the view counts more than one
    // instance's ten in a second: only the sum of both reports gives that. (Sequential
    // buys on a loaded box can spread past the one-second window and never add up.)
    let bursts = std::sync::atomic::AtomicUsize::new(0);
    until(
        "the top adds up both instances",
        Duration::from_secs(30),
        || async {
            let burst = bursts.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let buys: FuturesUnordered<_> = [&first, &second]
                .into_iter()
                .enumerate()
                .flat_map(|(n, app)| {
                    let body = &body;
                    (0..10).map(move |i| async move {
                        app.buy(9, &format!("top-{burst}-{n}-{i}"), body).await
                    })
                })
                .collect();
            for (status, answer) in buys.collect::<Vec<_>>().await {
                assert_eq!(status, 200, "{answer}");
            }
            let seen_within = Instant::now() + Duration::from_millis(700);
            while Instant::now() < seen_within {
                let seen = view(&first, &sre).await;
                if seen["top"]["user"][0]["key"] == "9"
                    && seen["top"]["user"][0]["rate_per_s"].as_u64() > Some(10)
                    && seen["reporting_nodes"].as_u64() == Some(2)
                {
                    return true;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            false
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_page_lists_the_keys_in_force_and_gives_the_forms_to_ops_only() {
    use app::api::{AddHotKey, RemoveHotKey};
    use leptos::server_fn::ServerFn;
    let app = spawn_app_with(settings).await;
    let ops = app.caller(Role::Ops, None).await;
    let sre = app.caller(Role::Sre, None).await;
    let session = app.console_session(&ops).await;
    let form = [
        ("kind", "ip"),
        ("key", "10.9.8.7"),
        ("action", "block"),
        ("limit_per_s", ""),
        ("hold_s", "60"),
        ("reason", "console test"),
    ];
    let response = app.console_call(AddHotKey::PATH, &session, &form).await;
    assert_eq!(
        response.status().as_u16(),
        200,
        "{:?}",
        response.text().await
    );
    until("the key is in force", Duration::from_secs(5), || async {
        listed(&view(&app, &sre).await, "ip", "10.9.8.7").is_some()
    })
    .await;
    let html = app.console_page("/hotkeys", &session).await;
    for shown in [
        "10.9.8.7",
        "console test",
        "id=\"add-hotkey\"",
        "Top keys, cluster-wide",
    ] {
        assert!(html.contains(shown), "{shown} missing from:\n{html}");
    }
    let watcher = app.console_session(&sre).await;
    let html = app.console_page("/hotkeys", &watcher).await;
    assert!(html.contains("10.9.8.7"), "{html}");
    assert!(
        !html.contains("id=\"add-hotkey\""),
        "no form for SRE: {html}"
    );
    // A number that is not one is refused with its name, after the role is checked.
    let response = app.console_call(AddHotKey::PATH, &watcher, &form).await;
    assert_eq!(response.status().as_u16(), 403);
    let mut bad = form;
    bad[4] = ("hold_s", "soon");
    let response = app.console_call(AddHotKey::PATH, &session, &bad).await;
    assert_eq!(response.status().as_u16(), 400);
    assert!(response.text().await.unwrap_or_default().contains("hold_s"));
    let remove = [("kind", "ip"), ("key", "10.9.8.7"), ("reason", "done")];
    let response = app
        .console_call(RemoveHotKey::PATH, &session, &remove)
        .await;
    assert_eq!(response.status().as_u16(), 200);
    until("the key is gone", Duration::from_secs(5), || async {
        listed(&view(&app, &sre).await, "ip", "10.9.8.7").is_none()
    })
    .await;
}

/// `seckill hotkeys ...` against the test's deployment; its stdout, or a panic with stderr.
async fn cli(app: &TestApp, args: &[&str]) -> String {
    use secrecy::ExposeSecret;
    let settings = &app.state.settings;
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_seckill-under-test"))
        .arg("hotkeys")
        .args(args)
        .env("DATABASE_URL", settings.database_url.expose_secret())
        .env("ETCD_ENDPOINTS", settings.etcd_endpoints.join(","))
        .env("SECKILL_ETCD_PREFIX", &settings.etcd_prefix)
        .env("USER", "ops-at-the-keyboard")
        .env_remove("SECKILL_CONFIG")
        .output()
        .await
        .expect("the seckill binary runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "seckill hotkeys {args:?}: {}\n{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_line_adds_lists_and_removes_a_hot_key_audited_under_the_os_user() {
    let app = spawn_app_with(settings).await;
    let sre = app.caller(Role::Sre, None).await;
    let added = cli(
        &app,
        &[
            "add", "user", "55", "--action", "block", "--hold-s", "30", "--reason", "scalper",
        ],
    )
    .await;
    let added: Value = serde_json::from_str(&added).expect("json");
    assert_eq!(
        (&added["key"], &added["source"]),
        (&json!("55"), &json!("manual"))
    );
    until(
        "the instance applies it",
        Duration::from_secs(5),
        || async {
            listed(&view(&app, &sre).await, "user", "55")
                .is_some_and(|hot| hot["actor"] == "ops-at-the-keyboard")
        },
    )
    .await;
    let listed_by_cli: Value = serde_json::from_str(&cli(&app, &[]).await).expect("json");
    assert_eq!(listed_by_cli[0]["key"], "55", "{listed_by_cli}");
    cli(&app, &["remove", "user", "55", "--reason", "done"]).await;
    assert_eq!(
        app.count("switch_audit WHERE path = 'hotkeys/user/55' AND source = 'cli'")
            .await,
        2
    );
    until("the instance drops it", Duration::from_secs(5), || async {
        listed(&view(&app, &sre).await, "user", "55").is_none()
    })
    .await;
}

/// Settings of a deployment behind a proxy on loopback: the test's own address is trusted,
/// so `X-Forwarded-For` names each simulated client.
fn behind_a_proxy(settings: &mut Settings) {
    self::settings(settings);
    settings.trusted_proxies = ["127.0.0.1".parse().expect("network")]
        .into_iter()
        .collect();
}

/// Sends `count` requests from `client` (by its forwarded address), `per_s` a second:
/// anonymous reads of the activity and its status, and buys with a forged token.
async fn anonymous_traffic(app: &TestApp, sale: &Sale, client: &str, count: u32, per_s: u32) {
    let mut tick = tokio::time::interval(Duration::from_secs(1) / per_s);
    for n in 0..count {
        tick.tick().await;
        let request = match n % 3 {
            0 => app.client.get(format!(
                "{}/api/activities/{}",
                app.address, sale.activity_id
            )),
            1 => app.client.get(format!(
                "{}/api/activities/{}/status",
                app.address, sale.activity_id
            )),
            _ => app
                .client
                .post(format!("{}/api/seckill/buy", app.address))
                .bearer_auth("not.a.token")
                .header("X-Request-ID", format!("forged-{n}"))
                .json(&buy_body(sale, 1)),
        };
        request
            .header("X-Forwarded-For", client)
            .send()
            .await
            .expect("sent");
    }
}

/// Buys of `user` from `client` (by its forwarded address), `per_s` a second, each with a
/// fresh request id, until `stop` resolves.
async fn buys_from(app: &TestApp, sale: &Sale, user: i64, client: &str, per_s: u32) {
    let mut tick = tokio::time::interval(Duration::from_secs(1) / per_s);
    loop {
        tick.tick().await;
        let _ = forwarded_buy(app, sale, user, client).await;
    }
}

async fn forwarded_buy(app: &TestApp, sale: &Sale, user: i64, client: &str) -> (u16, Value) {
    json(
        app.client
            .post(format!("{}/api/seckill/buy", app.address))
            .bearer_auth(crate::support::fixtures::token(app, user))
            .header("X-Request-ID", uuid::Uuid::new_v4().simple().to_string())
            .header("X-Forwarded-For", client)
            .json(&buy_body(sale, 1))
            .send()
            .await
            .expect("sent"),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anonymous_reads_and_forged_tokens_heat_no_address_while_a_buyers_address_is_blocked() {
    let app = spawn_app_with(behind_a_proxy).await;
    let sale = open_sale(&app, 100_000, 1_000).await;
    let ops = app.caller(Role::Ops, None).await;
    rule(
        &app,
        &ops,
        "ip",
        json!({ "threshold_per_s": 20, "action": "block", "hold_s": 30 }),
    )
    .await;
    let (stranger, buyer) = ("198.51.100.1", "198.51.100.2");
    // The stranger sends anonymous traffic at twice the threshold while a real buyer from
    // another address buys at twice it too: only the buyer's address may become hot.
    let anonymous = anonymous_traffic(&app, &sale, stranger, 400, 40);
    let buying = buys_from(&app, &sale, 31, buyer, 40);
    let published = until(
        "the buyer's address is published as hot",
        Duration::from_secs(15),
        || async { listed(&view(&app, &ops).await, "ip", buyer).is_some() },
    );
    tokio::select! {
        () = async { tokio::join!(anonymous, published); } => {}
        () = buying => unreachable!("buys go on until the key is published"),
    }
    let seen = view(&app, &ops).await;
    assert!(listed(&seen, "ip", stranger).is_none(), "{seen}");
    let top_ips: Vec<&Value> = seen["top"]["ip"].as_array().into_iter().flatten().collect();
    assert!(
        top_ips.iter().all(|top| top["key"] != stranger),
        "anonymous requests are not counted for addresses: {seen}"
    );
    let (status, answer) = forwarded_buy(&app, &sale, 32, stranger).await;
    assert_eq!(
        status, 200,
        "a real buyer from the stranger's address: {answer}"
    );
    let periods: i64 = sqlx::query_scalar("SELECT count(*) FROM hotkey_periods WHERE key = $1")
        .bind(stranger)
        .fetch_one(&app.db)
        .await
        .expect("periods");
    assert_eq!(periods, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ipv6_buyers_are_counted_and_blocked_by_their_64() {
    let app = spawn_app_with(|settings| {
        behind_a_proxy(settings);
        settings.buy.per_ip_per_window = 3;
    })
    .await;
    let sale = open_sale(&app, 100, 1).await;
    let mut answers = Vec::new();
    for (user, client) in (41..).zip(["2001:db8:1:2::a", "2001:db8:1:2::b", "2001:db8:1:2:ffff::c"])
    {
        answers.push(forwarded_buy(&app, &sale, user, client).await.0);
    }
    assert_eq!(answers, [200, 200, 200]);
    let (status, answer) = forwarded_buy(&app, &sale, 44, "2001:db8:1:2::d").await;
    assert_eq!(status, 429, "a fourth buyer of the same /64: {answer}");
    let (status, answer) = forwarded_buy(&app, &sale, 45, "2001:db8:1:3::a").await;
    assert_eq!(
        status, 200,
        "a buyer of the next /64 has a window of his own: {answer}"
    );
    // A manual block of any address of a /64 blocks the /64, as the funnel counts it.
    let ops = app.caller(Role::Ops, None).await;
    let (status, body) = add(
        &app,
        &ops,
        &json!({ "kind": "ip", "key": "2001:db8:1:3::77", "action": "block", "hold_s": 60, "reason": "scalper" }),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["key"], "2001:db8:1:3::");
    let (status, answer) = forwarded_buy(&app, &sale, 46, "2001:db8:1:3::b").await;
    assert_eq!(status, 429, "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lifted_block_stays_lifted_for_its_hold_though_the_buyer_stays_hot() {
    let app = spawn_app_with(settings).await;
    let sale = open_sale(&app, 100_000, 1_000).await;
    let ops = app.caller(Role::Ops, None).await;
    rule(
        &app,
        &ops,
        "user",
        json!({ "threshold_per_s": 20, "action": "block", "hold_s": 60 }),
    )
    .await;
    let body = buy_body(&sale, 1);
    let (lifted, other) = (6_161, 6_262);
    let keep_buying = |user: i64| {
        let (app, body) = (&app, &body);
        async move {
            let mut tick = tokio::time::interval(Duration::from_millis(20));
            for n in 0.. {
                tick.tick().await;
                let _ = app.buy(user, &format!("hot-{user}-{n}"), body).await;
            }
        }
    };
    let lifted_user = lifted.to_string();
    let scenario = async {
        until(
            "the buyer is published as hot",
            Duration::from_secs(15),
            || async { listed(&view(&app, &ops).await, "user", &lifted_user).is_some() },
        )
        .await;
        let (status, answer) = remove(
            &app,
            &ops,
            &format!("/admin/api/hotkeys/user/{lifted}?reason=false%20positive"),
        )
        .await;
        assert_eq!(status, 204, "{answer}");
        // The lifted buyer keeps sending; another one heats up after the lift. Once the
        // leader has published the other and renewed it three times (a renewal a second),
        // it has had three rounds to renew or publish the lifted one too.
        let renewed = "seckill_hotkey_publishes_total{kind=\"user\",outcome=\"renewed\"}";
        let published = "seckill_hotkey_publishes_total{kind=\"user\",outcome=\"published\"}";
        tokio::select! {
            () = async {
                until("the other buyer is published", Duration::from_secs(15), || async {
                    listed(&view(&app, &ops).await, "user", &other.to_string()).is_some()
                })
                .await;
                let before = app.metric(renewed).await;
                let published_before = app.metric(published).await;
                until("three more renewals", Duration::from_secs(15), || async {
                    app.metric(renewed).await >= before + 3.0
                })
                .await;
                // Nor tried: the leader asks etcd nothing about a key while its lift lasts
                // (before, it took a lease, was refused and gave the lease back every round,
                // each counted as published).
                assert_eq!(app.metric(published).await, published_before);
            } => {}
            () = keep_buying(other) => unreachable!(),
        }
        let key = format!("{}/hotkeys/user/{lifted}", app.state.settings.etcd_prefix);
        let stored = etcd(&app).await.get(key, None).await.expect("etcd get");
        assert!(
            stored.kvs().is_empty(),
            "a lifted key is not published again"
        );
        assert!(listed(&view(&app, &ops).await, "user", &lifted_user).is_none());
        // An operator may decide again.
        let (status, body) = add(
            &app,
            &ops,
            &json!({ "kind": "user", "key": lifted_user, "action": "block", "hold_s": 60, "reason": "after all" }),
        )
        .await;
        assert_eq!(status, 201, "{body}");
    };
    tokio::select! {
        () = scenario => {}
        () = keep_buying(lifted) => unreachable!(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limit_is_the_clusters_total_whatever_instance_a_buy_reaches() {
    let apps = std::sync::Arc::new(
        cluster(|s| {
            settings(s);
            s.buy.local_rate_per_s = 1_000_000;
            // Three instances and the buyers share this test's two worker threads, beside
            // the rest of the suite: a Redis answer read more than the default 2 s after it
            // was asked (the task not polled in time) answered the buy 503 DEGRADED, as it
            // should when Redis is that slow, and failed the test, whose subject is the
            // quota, not the dependency's latency.
            s.redis_timeout_ms = 15_000;
        })
        .await,
    );
    let sale = open_sale(&apps[0], 100_000, 1).await;
    let ops = apps[0].caller(Role::Ops, None).await;
    let key = json!({ "kind": "item", "key": sale.item_id.to_string(), "action": "limit",
                      "limit_per_s": 60, "hold_s": 120, "reason": "flash crowd" });
    let (status, added) = json(
        apps[0]
            .post_json("/admin/api/hotkeys", Some(&ops), &key)
            .await,
    )
    .await;
    assert_eq!(status, 201, "{added}");
    let sre = apps[0].caller(Role::Sre, None).await;
    for app in apps.iter() {
        until(
            "the limit applies everywhere",
            Duration::from_secs(5),
            || async {
                listed(&view(app, &sre).await, "item", &sale.item_id.to_string()).is_some()
            },
        )
        .await;
    }

    // 300 buys a second (five times the quota) for six seconds, one to each instance every
    // 10 ms, each from a buyer of its own; counted by the second their answer came back in, the nearest the
    // test gets to when the instance took a token (a debug build under this load answers
    // in tens of milliseconds, so the second they were sent in would blur the seconds).
    const SECONDS: u64 = 6;
    let body = buy_body(&sale, 1);
    let start = Instant::now();
    let mut ticks = tokio::time::interval(Duration::from_millis(10));
    let mut sent = Vec::new();
    let mut user = 10_000;
    while start.elapsed() < Duration::from_secs(SECONDS) {
        ticks.tick().await;
        for n in 0..3 {
            user += 1;
            let (apps, body) = (apps.clone(), body.clone());
            sent.push(tokio::spawn(async move {
                let (status, answer) = apps[n % 3].buy(user, &format!("q{user}"), &body).await;
                let at = start.elapsed();
                (at, status, answer["code"].as_str().map(str::to_owned))
            }));
        }
    }
    let mut admitted = vec![0_u32; SECONDS as usize + 2];
    let mut refused = 0;
    let mut last = Duration::ZERO;
    for answer in sent {
        let (at, status, code) = answer.await.expect("buy task");
        last = last.max(at);
        let second = at.as_secs();
        match (status, code.as_deref()) {
            (200, _) => admitted[(second as usize).min(SECONDS as usize + 1)] += 1,
            (429, Some("RATE_LIMITED")) => refused += 1,
            other => panic!("unexpected answer {other:?}"),
        }
    }
    println!("admitted per second: {admitted:?}; refused {refused}");
    // Each instance's bucket starts with one second of its share: 60 at once across the
    // cluster, then 60 a second for as long as buys keep arriving, which on a loaded
    // machine is until the last answer, past the six seconds of sending. The run's total
    // over that span is exact whatever the answers' latency; a single second's count is
    // not (an admitted buy waits for its group commit, a refused one does not, so answers
    // cross the seconds' edges: printed, not held).
    let total: u32 = admitted.iter().sum();
    let per_second = f64::from(total - 60) / last.as_secs_f64();
    println!(
        "{total} admitted until the last answer at {last:?}: {per_second:.1} a second after \
         the starting burst"
    );
    assert!(
        (54.0..=66.0).contains(&per_second),
        "{per_second} a second, not 60 ± 10 %"
    );
}
