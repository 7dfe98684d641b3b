//! Rehearsals: a sale's load through the real buy path against a shadow copy of an
//! activity, the invariant check at its end, and nothing of the copy left behind.

use crate::dashboard::Frames;
use crate::support::{
    app::{json, spawn_app_with, TestApp},
    fixtures::{open_sale, prewarm, token, Caller, Sale},
    serve_process::ServeProcess,
    wait,
};
use base::config::Settings;
use contract::Role;
use serde_json::{json, Value};
use std::{
    collections::HashSet,
    time::{Duration, Instant},
};

/// Instances report their figures often, so the leader records a rehearsal's run soon
/// after its load.
fn quick_reports(settings: &mut Settings) {
    settings.baselines.report_interval_ms = 200;
}

/// The run the leader recorded of the activity's rehearsal, once it is there; its buy
/// endpoint carries the rehearsal's requests.
async fn recorded_run(app: &TestApp, caller: &Caller, activity_id: i64) -> Value {
    let path = format!("/admin/api/baselines?activity_id={activity_id}");
    let found = std::sync::Mutex::new(Value::Null);
    wait::until("the rehearsal recorded as a run", wait::PATIENCE, || {
        let (found, path) = (&found, &path);
        async move {
            let (status, runs) = json(app.get(path, Some(caller)).await).await;
            assert_eq!(status, 200, "{runs}");
            let rehearsal = runs.as_array().and_then(|runs| {
                runs.iter()
                    .find(|candidate| candidate["kind"] == "rehearsal")
                    .cloned()
            });
            match rehearsal {
                Some(run) => {
                    *found.lock().expect("not poisoned") = run;
                    Ok(())
                }
                None => Err(runs.to_string()),
            }
        }
    })
    .await;
    let run = found.into_inner().expect("not poisoned");
    let buys = run["perf"]["endpoints"]
        .as_array()
        .and_then(|endpoints| {
            endpoints
                .iter()
                .find(|endpoint| endpoint["route"] == "/api/seckill/buy")
        })
        .map(|buy| buy["requests"].as_u64().unwrap_or(0))
        .unwrap_or(0);
    assert!(buys > 0, "the run counts the rehearsal's buys: {run}");
    run
}

/// A loaded 2-core box finishes a rehearsal of this size in well under this.
const REHEARSAL_PATIENCE: Duration = Duration::from_secs(120);

/// An activity starting tomorrow: a hot item of 10,000 units and a small one of 300, one
/// per buyer each; pre-warmed, as a sale is before its day.
async fn activity(app: &TestApp, merchant: &Caller, ops: &Caller) -> (i64, [Sale; 2]) {
    activity_starting(app, merchant, ops, chrono::Duration::days(1)).await
}

/// [`activity`], starting `starts_in` from now.
async fn activity_starting(
    app: &TestApp,
    merchant: &Caller,
    ops: &Caller,
    starts_in: chrono::Duration,
) -> (i64, [Sale; 2]) {
    let mut items = Vec::new();
    for (name, price) in [("Hot phone", 99_900), ("Case", 1_990)] {
        let (status, item) = json(
            app.post_json(
                "/admin/api/items",
                Some(merchant),
                &json!({ "name": name, "price_cents": price }),
            )
            .await,
        )
        .await;
        assert_eq!(status, 201, "{item}");
        items.push(item["id"].as_i64().expect("item id"));
    }
    let starts = chrono::Utc::now() + starts_in;
    let (status, created) = json(
        app.post_json(
            "/admin/api/activities",
            Some(merchant),
            &json!({
                "title": "Phone day", "kind": "standard", "pay_timeout_s": 900,
                "starts_at": starts, "ends_at": starts + chrono::Duration::hours(1),
                "items": [
                    { "item_id": items[0], "stock": 10_000, "per_user_limit": 1, "price_cents": 99_900 },
                    { "item_id": items[1], "stock": 300, "per_user_limit": 1, "price_cents": 1_990 },
                ]
            }),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{created}");
    let activity_id = created["id"].as_i64().expect("id");
    let sale = |item_id| Sale {
        activity_id,
        item_id,
    };
    prewarm(app, ops, &sale(items[0])).await;
    (activity_id, [sale(items[0]), sale(items[1])])
}

async fn rehearsal(app: &TestApp, caller: &Caller, id: i64) -> Value {
    let (status, body) = json(
        app.get(&format!("/admin/api/rehearsals/{id}"), Some(caller))
            .await,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    body
}

// The server, its workers and the load generator share the test's runtime.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rehearsal_of_a_ten_thousand_stock_sale_passes_its_check_and_leaves_nothing_behind() {
    let app = spawn_app_with(quick_reports).await;
    let merchant = app.caller(Role::Merchant, Some("acme")).await;
    let ops = app.caller(Role::Ops, None).await;
    let sre = app.caller(Role::Sre, None).await;
    let (activity_id, [hot, small]) = activity(&app, &merchant, &ops).await;
    let rows_before = app.rows_of_every_table().await;
    let keys_before = app.redis_keys("*").await;
    let etcd_before = app.switches_in_etcd().await;
    let stock_before = (app.redis_stock(&hot).await, app.redis_stock(&small).await);
    let path = format!("/admin/api/activities/{activity_id}/rehearsals");
    let asked = json!({ "buyers": 3_000, "rate_per_s": 1_500, "reason": "T-1 day drill" });

    // Roles without the permission are refused and start nothing.
    for caller in [&sre, &merchant] {
        let (status, body) = json(app.post_json(&path, Some(caller), &asked).await).await;
        assert_eq!(
            (status, body["code"].as_str()),
            (403, Some("FORBIDDEN")),
            "{body}"
        );
    }
    assert_eq!(app.count("rehearsals").await, 0);

    let started = Instant::now();
    let (status, body) = json(app.post_json(&path, Some(&ops), &asked).await).await;
    assert_eq!(status, 202, "{body}");
    let id = body["id"].as_i64().expect("rehearsal id");

    // One at a time per activity.
    let (status, body) = json(app.post_json(&path, Some(&ops), &asked).await).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (409, Some("REHEARSAL_RUNNING")),
        "{body}"
    );

    // While the load runs, the shadow exists and sells to the synthetic buyers only.
    wait::until(
        "the shadow is open and under load",
        REHEARSAL_PATIENCE,
        || async {
            let seen = rehearsal(&app, &sre, id).await;
            let loading = seen["stage"] != "preparing" && seen["shadow_activity_id"].is_i64();
            if loading || seen["status"] != "running" {
                Ok(())
            } else {
                Err(seen["stage"].clone())
            }
        },
    )
    .await;
    let shadow = rehearsal(&app, &sre, id).await["shadow_activity_id"].as_i64();
    let shadow = shadow.expect("the rehearsal named its shadow");
    assert_ne!(shadow, activity_id);
    let (status, body) = json(app.get(&format!("/api/activities/{shadow}"), None).await).await;
    assert_eq!(status, 404, "the shadow is not listed to anyone: {body}");
    let (status, _) = json(
        app.get(&format!("/api/activities/{shadow}/status"), None)
            .await,
    )
    .await;
    assert_eq!(status, 404);
    let (status, body) = app
        .buy(
            42,
            "a-real-buyer",
            &json!({ "activity_id": shadow, "item_id": hot.item_id, "quantity": 1 }),
        )
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (404, Some("ITEM_NOT_FOUND")),
        "a real buyer cannot buy the shadow: {body}"
    );
    let challenge = app
        .client
        .get(format!(
            "{}/api/challenge?activity_id={shadow}",
            app.address
        ))
        .bearer_auth(token(&app, 42))
        .send()
        .await
        .expect("challenge asked");
    assert_eq!(challenge.status(), 404);
    // Nor does the catalogue list it: it is no activity of the merchant's.
    let (status, listed) = json(app.get("/admin/api/activities", Some(&merchant)).await).await;
    assert_eq!(status, 200, "{listed}");
    let ids: Vec<i64> = listed
        .as_array()
        .expect("activities")
        .iter()
        .filter_map(|activity| activity["id"].as_i64())
        .collect();
    assert_eq!(ids, [activity_id], "{listed}");

    wait::until("the rehearsal is over", REHEARSAL_PATIENCE, || async {
        rehearsal(&app, &sre, id).await["status"] != "running"
    })
    .await;
    let took = started.elapsed();
    let done = rehearsal(&app, &sre, id).await;
    println!(
        "rehearsal {id} took {took:?}:\n{}",
        serde_json::to_string_pretty(&done).expect("json")
    );
    assert_eq!(done["status"], "passed", "{done}");
    assert_eq!(done["cleaned_up"], true, "{done}");
    let result = &done["result"];
    let checks = result["checks"].as_array().expect("checks");
    assert!(checks.iter().all(|check| check["ok"] == true), "{result}");
    // Three checks per item, three for the whole run.
    assert_eq!(checks.len(), 3 * 2 + 3, "{result}");
    let count = |code: &str| {
        result["outcomes"]
            .as_array()
            .expect("outcomes")
            .iter()
            .filter(|outcome| outcome["code"] == code)
            .map(|outcome| outcome["count"].as_i64().expect("count"))
            .sum::<i64>()
    };
    // The small item sold out, every unit of it; the hot one did not.
    assert!(count("SOLD_OUT") > 0, "{result}");
    assert!(count("ALREADY_PURCHASED") > 0, "buyers came back: {result}");
    assert!(count("OK") >= 300, "{result}");
    assert_eq!(result["requests"], 3_000 + 2 * 300, "{result}");

    // Nothing of the shadow is left: its rows, keys and switches are gone; the real sale's
    // stock did not move. What stays is the rehearsal's row and the audit of its start.
    // What stays is the rehearsal's row, the audit of its start and, once the leader has
    // read the instances' reports past the load's end, its run beside the activity's others.
    let run = recorded_run(&app, &sre, activity_id).await;
    let mut rows_expected = rows_before.clone();
    *rows_expected.entry("rehearsals".into()).or_default() += 1;
    *rows_expected.entry("ops_audit".into()).or_default() += 1;
    *rows_expected.entry("baseline_runs".into()).or_default() += 1;
    assert_eq!(app.rows_of_every_table().await, rows_expected);
    assert_eq!(app.redis_keys("*").await, keys_before);
    assert_eq!(app.switches_in_etcd().await, etcd_before);
    assert_eq!(
        (app.redis_stock(&hot).await, app.redis_stock(&small).await),
        stock_before
    );
    let (status, _) = json(app.get(&format!("/api/activities/{shadow}"), None).await).await;
    assert_eq!(status, 404);

    // The run is on the Baselines page; marked as the baseline, the dashboard holds the
    // sale against it once the sale is live.
    let run_id = run["id"].as_i64().expect("run id");
    let ops_session = app.console_session(&ops).await;
    let page = app
        .console_page(
            &format!("/baselines?activity_id={activity_id}"),
            &ops_session,
        )
        .await;
    assert!(page.contains(&format!("data-run=\"{run_id}\"")), "{page}");
    let (status, marked) = json(
        app.post_json(
            &format!("/admin/api/baselines/{run_id}/mark"),
            Some(&ops),
            &json!({ "reason": "the rehearsal is how this sale should go" }),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{marked}");
    sqlx::query("UPDATE activities SET starts_at = now() - interval '1 minute' WHERE id = $1")
        .bind(activity_id)
        .execute(&app.db)
        .await
        .expect("open the sale");
    let against = Frames::open(&app, &ops)
        .await
        .against_baseline_of(activity_id)
        .await;
    assert_eq!(against.run_id, run_id);
    assert!(
        against
            .figures
            .iter()
            .any(|figure| figure.name == "buy p99"),
        "{against:?}"
    );

    // The console shows the verdict to readers, and the start form to those who may start.
    let sre_session = app.console_session(&sre).await;
    let page = app
        .console_page(&format!("/rehearsals/{id}"), &sre_session)
        .await;
    assert!(page.contains(r#"id="rehearsal-verdict""#), "{page}");
    assert!(page.contains(r#"data-passed="true""#), "{page}");
    let listing = app.console_page("/rehearsals", &sre_session).await;
    assert!(!listing.contains(r#"id="start-rehearsal""#), "{listing}");
    let listing = app.console_page("/rehearsals", &ops_session).await;
    assert!(listing.contains(r#"id="start-rehearsal""#), "{listing}");

    // Listed under its activity, for the readers of operations.
    let (status, listed) = json(
        app.get(
            &format!("/admin/api/rehearsals?activity_id={activity_id}"),
            Some(&sre),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{listed}");
    assert_eq!(listed[0]["id"], id, "{listed}");
}

/// `seckill rehearse ...` against the test's deployment: its exit status, stdout, stderr.
async fn cli(app: &TestApp, args: &[&str]) -> (bool, String, String) {
    use secrecy::ExposeSecret;
    let settings = &app.state.settings;
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_seckill-under-test"))
        .arg("rehearse")
        .args(args)
        .env("DATABASE_URL", settings.database_url.expose_secret())
        .env("REDIS_URL", settings.redis_url.expose_secret())
        .env("SECKILL_REDIS_PREFIX", &settings.redis_prefix)
        .env("AMQP_URL", settings.amqp_url.expose_secret())
        .env("SECKILL_AMQP_PREFIX", &settings.amqp_prefix)
        .env("ETCD_ENDPOINTS", settings.etcd_endpoints.join(","))
        .env("SECKILL_ETCD_PREFIX", &settings.etcd_prefix)
        // The load goes to the deployment's server: this test's instance.
        .env("SECKILL_BIND", app.address.trim_start_matches("http://"))
        .env_remove("SECKILL_CONFIG")
        .output()
        .await
        .expect("the seckill binary runs");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_line_rehearses_shows_progress_and_exits_by_the_verdict() {
    let app = spawn_app_with(quick_reports).await;
    let merchant = app.caller(Role::Merchant, Some("acme")).await;
    let ops = app.caller(Role::Ops, None).await;
    let (activity_id, _) = activity(&app, &merchant, &ops).await;
    // A rehearsal whose instance died before it made its shadow: its progress stopped long
    // ago. It must not hold the activity's one running rehearsal forever.
    let crashed: i64 = sqlx::query_scalar(
        "INSERT INTO rehearsals (activity_id, buyers, rate_per_s, source, actor, reason, updated_at)
         VALUES ($1, 10, 10, 'api', 'ops', 'drill', now() - interval '10 minutes') RETURNING id",
    )
    .bind(activity_id)
    .fetch_one(&app.db)
    .await
    .expect("a crashed rehearsal");
    let rows_before = app.rows_of_every_table().await;

    let (ok, stdout, stderr) = cli(
        &app,
        &[&activity_id.to_string(), "--buyers", "300", "--rate", "300"],
    )
    .await;
    assert!(ok, "{stdout}\n{stderr}");
    println!("seckill rehearse:\n{stdout}");
    assert!(stderr.contains("requests"), "progress on stderr: {stderr}");
    assert!(stdout.contains("PASSED: rehearsal"), "{stdout}");
    assert!(stdout.contains("shadow removed"), "{stdout}");
    assert!(stdout.contains("ok    not_oversold"), "{stdout}");
    let crashed = rehearsal(&app, &ops, crashed).await;
    assert_eq!(crashed["status"], "error", "{crashed}");
    assert!(
        crashed["error"]
            .as_str()
            .unwrap_or("")
            .contains("abandoned"),
        "{crashed}"
    );
    recorded_run(&app, &ops, activity_id).await;
    let mut rows_expected = rows_before;
    *rows_expected.entry("rehearsals".into()).or_default() += 1;
    *rows_expected.entry("ops_audit".into()).or_default() += 1;
    *rows_expected.entry("baseline_runs".into()).or_default() += 1;
    assert_eq!(app.rows_of_every_table().await, rows_expected);

    // Not while the sale is open: its load would take the buyers' capacity.
    let open = open_sale(&app, 10, 1).await;
    let (status, body) = json(
        app.post_json(
            &format!("/admin/api/activities/{}/rehearsals", open.activity_id),
            Some(&ops),
            &json!({ "buyers": 10, "rate_per_s": 10, "reason": "during the sale" }),
        )
        .await,
    )
    .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (409, Some("SALE_OPEN")),
        "{body}"
    );

    // No such activity: refused, and the exit status says so.
    let (ok, _, stderr) = cli(&app, &["999999", "--buyers", "10", "--rate", "10"]).await;
    assert!(!ok, "{stderr}");
    assert!(stderr.contains("not found"), "{stderr}");
}

/// Starts a rehearsal of `activity_id` as `ops`; its id.
async fn start(app: &TestApp, ops: &Caller, activity_id: i64, buyers: i64, rate: i64) -> i64 {
    let (status, body) = json(
        app.post_json(
            &format!("/admin/api/activities/{activity_id}/rehearsals"),
            Some(ops),
            &json!({ "buyers": buyers, "rate_per_s": rate, "reason": "drill" }),
        )
        .await,
    )
    .await;
    assert_eq!(status, 202, "{body}");
    body["id"].as_i64().expect("rehearsal id")
}

/// The rehearsal's shadow once it has one and its load is sending.
async fn loading_shadow(app: &TestApp, caller: &Caller, id: i64) -> i64 {
    wait::until("the shadow is under load", REHEARSAL_PATIENCE, || async {
        let seen = rehearsal(app, caller, id).await;
        let loading = seen["stage"] == "loading" && seen["progress"]["done"].as_i64() > Some(0);
        if loading {
            Ok(())
        } else {
            Err(seen)
        }
    })
    .await;
    rehearsal(app, caller, id).await["shadow_activity_id"]
        .as_i64()
        .expect("the rehearsal names its shadow")
}

/// Waits until the rehearsal is `done` and its shadow removed; returns it.
async fn cleaned_up(app: &TestApp, caller: &Caller, id: i64) -> Value {
    wait::until("the rehearsal cleaned up", REHEARSAL_PATIENCE, || async {
        let seen = rehearsal(app, caller, id).await;
        if seen["stage"] == "done" && seen["cleaned_up"] == true {
            Ok(())
        } else {
            Err(seen)
        }
    })
    .await;
    rehearsal(app, caller, id).await
}

/// What is left of rehearsals' copies: activities marked as copies, their orders, and the
/// keys of `shadow`'s items.
async fn copies_left(app: &TestApp, shadow: Option<i64>) -> (i64, i64, usize) {
    let activities: i64 =
        sqlx::query_scalar("SELECT count(*) FROM activities WHERE rehearsal_of IS NOT NULL")
            .fetch_one(&app.db)
            .await
            .expect("copies");
    let orders: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM orders o JOIN activities a ON a.id = o.activity_id
         WHERE a.rehearsal_of IS NOT NULL",
    )
    .fetch_one(&app.db)
    .await
    .expect("orders of copies");
    let keys = match shadow {
        Some(shadow) => app.redis_keys(&format!("*{{a{shadow}.i*")).await.len(),
        None => 0,
    };
    (activities, orders, keys)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rehearsal_that_cannot_end_before_the_next_sale_starts_is_refused_with_the_time_it_needs_and_the_time_there_is(
) {
    let app = spawn_app_with(|_| {}).await;
    let merchant = app.caller(Role::Merchant, Some("acme")).await;
    let ops = app.caller(Role::Ops, None).await;
    let (tomorrow, _) = activity(&app, &merchant, &ops).await;
    let (soon, _) = activity_starting(&app, &merchant, &ops, chrono::Duration::minutes(10)).await;
    // 480,000 requests at 500/s: 960 s of load, 30 s to prepare, 60 to settle, 60 to clean
    // up; the next sale starts in 600 s. Rehearsing either activity runs into it.
    for rehearsed in [tomorrow, soon] {
        let (status, body) = json(
            app.post_json(
                &format!("/admin/api/activities/{rehearsed}/rehearsals"),
                Some(&ops),
                &json!({ "buyers": 400_000, "rate_per_s": 500, "reason": "the big one" }),
            )
            .await,
        )
        .await;
        assert_eq!(
            (status, body["code"].as_str()),
            (409, Some("REHEARSAL_WOULD_OVERLAP_SALE")),
            "{body}"
        );
        let message = body["message"].as_str().unwrap_or_default();
        assert!(message.contains("needs 1110 s"), "{message}");
        assert!(
            message.contains(&format!("before activity {soon} starts")),
            "{message}"
        );
        let available: u64 = message
            .split("there are ")
            .nth(1)
            .and_then(|rest| rest.split(' ').next())
            .and_then(|seconds| seconds.parse().ok())
            .expect("the time there is");
        assert!((590..=600).contains(&available), "{message}");
    }
    assert_eq!(app.count("rehearsals").await, 0, "nothing started");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rehearsal_running_when_a_sale_opens_stops_its_load_at_once_and_is_cleaned_up() {
    let app = spawn_app_with(|_| {}).await;
    let merchant = app.caller(Role::Merchant, Some("acme")).await;
    let ops = app.caller(Role::Ops, None).await;
    let (rehearsed, [hot, _]) = activity(&app, &merchant, &ops).await;
    let (other, _) = activity_starting(&app, &merchant, &ops, chrono::Duration::hours(1)).await;
    let stock_before = app.redis_stock(&hot).await;
    // 24,000 requests at 200/s: two minutes of load, far from over when the sale opens.
    let id = start(&app, &ops, rehearsed, 20_000, 200).await;
    let shadow = loading_shadow(&app, &ops, id).await;
    sqlx::query("UPDATE activities SET starts_at = now() - interval '1 second' WHERE id = $1")
        .bind(other)
        .execute(&app.db)
        .await
        .expect("the other sale opens");
    let opened = Instant::now();
    wait::until("the rehearsal stopped", Duration::from_secs(20), || async {
        let seen = rehearsal(&app, &ops, id).await;
        if seen["status"] == "running" {
            Err(seen)
        } else {
            Ok(())
        }
    })
    .await;
    let stopped = opened.elapsed();
    let done = cleaned_up(&app, &ops, id).await;
    println!("stopped {stopped:?} after the sale opened: {done}");
    assert_eq!(done["status"], "error", "{done}");
    let error = done["error"].as_str().unwrap_or_default();
    assert!(
        error.contains(&format!("activity {other} went on sale")),
        "{error}"
    );
    let progress = &done["progress"];
    assert!(
        progress["done"].as_i64() < progress["total"].as_i64(),
        "the load stopped short: {progress}"
    );
    assert_eq!(copies_left(&app, Some(shadow)).await, (0, 0, 0));
    assert_eq!(app.redis_stock(&hot).await, stock_before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_clean_up_shows_as_such_and_is_retried_by_the_leader_until_it_succeeds() {
    let app = spawn_app_with(|_| {}).await;
    let merchant = app.caller(Role::Merchant, Some("acme")).await;
    let ops = app.caller(Role::Ops, None).await;
    let (activity_id, _) = activity(&app, &merchant, &ops).await;
    let id = start(&app, &ops, activity_id, 300, 300).await;
    let shadow = loading_shadow(&app, &ops, id).await;
    // A repair holding the shadow for longer than the clean-up waits: the clean-up fails.
    let lock =
        ops::reconcile::service::ActivityLock::wait(&app.db, shadow, Duration::from_secs(10))
            .await
            .expect("lock asked")
            .expect("the shadow locked");
    wait::until("the clean-up failed", REHEARSAL_PATIENCE, || async {
        let seen = rehearsal(&app, &ops, id).await;
        if seen["stage"] == "cleanup_failed" {
            Ok(())
        } else {
            Err(seen)
        }
    })
    .await;
    let failed = rehearsal(&app, &ops, id).await;
    assert_eq!(failed["cleaned_up"], false, "{failed}");
    assert!(
        failed["error"]
            .as_str()
            .unwrap_or_default()
            .contains("the clean-up failed"),
        "{failed}"
    );
    let ops_session = app.console_session(&ops).await;
    let listing = app.console_page("/rehearsals", &ops_session).await;
    assert!(listing.contains("cleanup_failed"), "{listing}");
    assert_eq!(
        copies_left(&app, None).await.0,
        1,
        "the copy is still there"
    );

    // Once the shadow is free, the leader's next try removes it.
    lock.release().await;
    let done = cleaned_up(&app, &ops, id).await;
    assert_eq!(
        done["status"], failed["status"],
        "the verdict stays: {done}"
    );
    assert_eq!(copies_left(&app, Some(shadow)).await, (0, 0, 0));
}

/// The synthetic buyers' ids start here (see the plan).
const SYNTHETIC_FROM: i64 = 8_000_000_000_000_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rehearsals_traffic_reaches_no_real_listing_run_list_hot_key_counter_gauge_or_dashboard_item(
) {
    let app = spawn_app_with(|_| {}).await;
    let merchant = app.caller(Role::Merchant, Some("acme")).await;
    let ops = app.caller(Role::Ops, None).await;
    let (activity_id, [hot, _]) = activity(&app, &merchant, &ops).await;
    let mut frames = Frames::open(&app, &ops).await;
    let funnel_before = app.metric("seckill_funnel_requests_total").await;
    // 3,600 requests at 300/s: twelve seconds of load.
    let id = start(&app, &ops, activity_id, 3_000, 300).await;
    let shadow = loading_shadow(&app, &ops, id).await;
    wait::until("the shadow has orders", REHEARSAL_PATIENCE, || async {
        copies_left(&app, None).await.1 > 0
    })
    .await;

    // The funnel's counters: the load is counted, apart from the sale's.
    assert_eq!(
        app.metric("seckill_funnel_requests_total").await,
        funnel_before
    );
    assert!(app.metric("seckill_rehearsal_funnel_requests_total").await > 0.0);

    // No listing shows its orders, to a merchant or to ops.
    for caller in [&merchant, &ops] {
        let (status, listed) = json(app.get("/admin/api/orders", Some(caller)).await).await;
        assert_eq!(status, 200, "{listed}");
        assert_eq!(listed["orders"], json!([]), "{listed}");
    }

    // The dashboard's items: the real activity's, never the copy's.
    let passes = app.metric("seckill_reconcile_passes_total").await;
    let mut framed = 0;
    while framed < 2 {
        let frame = frames.next().await;
        if frame
            .items
            .iter()
            .any(|item| item.activity_id == activity_id)
        {
            framed += 1;
            assert!(
                frame.items.iter().all(|item| item.activity_id != shadow),
                "{:?}",
                frame.items
            );
        }
    }

    // The drift gauge: once the leader's pass has gone over both, only the real one's.
    wait::until("two reconciliation passes", REHEARSAL_PATIENCE, || async {
        app.metric("seckill_reconcile_passes_total").await >= passes + 2.0
    })
    .await;
    let metrics = app
        .client
        .get(format!("{}/metrics", app.address))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("metrics text");
    let drift = |activity: i64| format!(r#"seckill_stock_drift_units{{activity="{activity}","#);
    assert!(metrics.contains(&drift(activity_id)), "{metrics}");
    assert!(!metrics.contains(&drift(shadow)), "{metrics}");

    // The leader's runs: a run of the copy (stored as the pass stores one that found
    // something) is listed only when the copy is asked for by id.
    for activity in [activity_id, shadow] {
        sqlx::query(
            "INSERT INTO reconciliation_runs (activity_id, repair, trigger, actor, reason, status)
             VALUES ($1, true, 'auto', 'leader', 'automatic reconciliation of a live activity', 'done')",
        )
        .bind(activity)
        .execute(&app.db)
        .await
        .expect("a run");
    }
    let listed = |query: String| {
        let (app, ops) = (&app, &ops);
        async move {
            let (status, runs) = json(
                app.get(&format!("/admin/api/reconciliations{query}"), Some(ops))
                    .await,
            )
            .await;
            assert_eq!(status, 200, "{runs}");
            let activities: HashSet<i64> = runs
                .as_array()
                .expect("runs")
                .iter()
                .filter_map(|run| run["activity_id"].as_i64())
                .collect();
            activities
        }
    };
    assert_eq!(listed(String::new()).await, HashSet::from([activity_id]));
    assert_eq!(
        listed(format!("?activity_id={shadow}")).await,
        HashSet::from([shadow])
    );

    // Every tool a person points at one activity takes the copy for no activity (404), as
    // the catalogue does: its ledger (to its merchant too), its readiness, a pre-warm or a
    // repair (each would raise a fence on its items mid-load) and a sale page that would
    // sell it. The real activity's ledger is served.
    let ledger = |activity: i64| format!("/admin/api/activities/{activity}/ledger");
    let (empty, repair) = (
        json!({}),
        json!({ "activity_id": shadow, "repair": true, "reason": "drift" }),
    );
    not_found(&app, &merchant, &ledger(shadow), None).await;
    not_found(&app, &ops, &ledger(shadow), None).await;
    let readiness = format!("/admin/api/readiness?activity_id={shadow}");
    not_found(&app, &ops, &readiness, None).await;
    let prewarm = format!("/admin/api/activities/{shadow}/prewarm");
    not_found(&app, &ops, &prewarm, Some(&empty)).await;
    not_found(&app, &ops, "/admin/api/reconciliations", Some(&repair)).await;
    let publish = format!("/admin/api/activities/{shadow}/publish");
    not_found(&app, &merchant, &publish, Some(&empty)).await;
    let (status, real) = json(app.get(&ledger(activity_id), Some(&merchant)).await).await;
    assert_eq!(status, 200, "{real}");

    // Hot keys: a real buyer's requests show in the cluster's top buyers; the synthetic
    // buyers' never do.
    let mut real_seen = false;
    let mut asked = 0;
    while rehearsal(&app, &ops, id).await["stage"] == "loading" {
        asked += 1;
        app.buy(
            42,
            &format!("real-{asked}"),
            &json!({ "activity_id": activity_id, "item_id": hot.item_id, "quantity": 1 }),
        )
        .await;
        let (status, hotkeys) = json(app.get("/admin/api/hotkeys", Some(&ops)).await).await;
        assert_eq!(status, 200, "{hotkeys}");
        let users: Vec<i64> = hotkeys["top"]["user"]
            .as_array()
            .map(|users| {
                users
                    .iter()
                    .filter_map(|user| user["key"].as_str()?.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        real_seen |= users.contains(&42);
        assert!(users.iter().all(|user| *user < SYNTHETIC_FROM), "{hotkeys}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(real_seen, "the real buyer was counted while the load ran");
    cleaned_up(&app, &ops, id).await;
}

/// Asks `path` as `caller` (a POST of `body`, a GET without one): 404 `NOT_FOUND`.
async fn not_found(app: &TestApp, caller: &Caller, path: &str, body: Option<&Value>) {
    let response = match body {
        Some(body) => app.post_json(path, Some(caller), body).await,
        None => app.get(path, Some(caller)).await,
    };
    let (status, answer) = json(response).await;
    assert_eq!(
        (status, answer["code"].as_str()),
        (404, Some("NOT_FOUND")),
        "{path}: {answer}"
    );
}

/// The steps of a rehearsal's start and clean-up a process can die at, in order.
const FAULT_POINTS: [&str; 7] = [
    "rehearsal.row_inserted",
    "rehearsal.copy_created",
    "rehearsal.copy_prewarmed",
    "rehearsal.loading",
    "rehearsal.cleanup_closed",
    "rehearsal.cleanup_keys_deleted",
    "rehearsal.cleanup_rows_deleted",
];

/// Rows of the tables a copy can have rows in.
async fn sale_rows(app: &TestApp) -> Vec<(String, i64)> {
    let mut rows = Vec::new();
    for table in [
        "activities",
        "activity_items",
        "seats",
        "orders",
        "order_events",
        "buyer_holdings",
        "outbox",
        "processed_events",
        "payment_trades",
        "stock_restore_journal",
    ] {
        rows.push((table.to_owned(), app.count(table).await));
    }
    rows
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_killed_at_any_step_of_a_rehearsal_leaves_no_real_sale_and_the_leader_cleans_up()
{
    let app = spawn_app_with(|_| {}).await;
    wait::until("this instance leads", wait::PATIENCE, || async {
        app.state.leadership.is_leader()
    })
    .await;
    let merchant = app.caller(Role::Merchant, Some("acme")).await;
    let ops = app.caller(Role::Ops, None).await;
    let (activity_id, [hot, small]) = activity(&app, &merchant, &ops).await;
    let stock_before = (app.redis_stock(&hot).await, app.redis_stock(&small).await);
    let rows_before = sale_rows(&app).await;
    let client = reqwest::Client::new();
    for step in FAULT_POINTS {
        let mut process = ServeProcess::start_with_env(
            &app.state.settings,
            &client,
            &[(base::fault::VARIABLE, step)],
        )
        .await;
        let response = client
            .post(format!(
                "{}/admin/api/activities/{activity_id}/rehearsals",
                process.address
            ))
            .bearer_auth(&ops.token)
            .json(&json!({ "buyers": 40, "rate_per_s": 40, "reason": step }))
            .send()
            .await
            .map(|response| response.status().as_u16());
        // The first step dies before it answers.
        if step != FAULT_POINTS[0] {
            assert_eq!(response.ok(), Some(202), "{step}");
        }
        let status = tokio::time::timeout(REHEARSAL_PATIENCE, process.exited())
            .await
            .unwrap_or_else(|_| panic!("{step}: the process never reached its fault point"));
        assert!(!status.success(), "{step}: {status}");
        let id: i64 = sqlx::query_scalar("SELECT id FROM rehearsals ORDER BY id DESC LIMIT 1")
            .fetch_one(&app.db)
            .await
            .expect("the rehearsal row");
        // Whatever step it died at, no copy is unmarked or open past its rehearsal.
        let unmarked: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM activities
             WHERE id <> $1 AND (rehearsal_of IS NULL OR rehearsal_id IS NULL)",
        )
        .bind(activity_id)
        .fetch_one(&app.db)
        .await
        .expect("unmarked copies");
        assert_eq!(unmarked, 0, "{step}: a copy is a real activity");
        if step == "rehearsal.copy_created" {
            let open: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM activities WHERE rehearsal_id = $1 AND ends_at > now()",
            )
            .bind(id)
            .fetch_one(&app.db)
            .await
            .expect("open copies");
            assert_eq!(open, 0, "{step}: the copy is born closed");
        }
        let shadow: Option<i64> =
            sqlx::query_scalar("SELECT shadow_activity_id FROM rehearsals WHERE id = $1")
                .bind(id)
                .fetch_one(&app.db)
                .await
                .expect("its shadow");
        // The leader takes the silent rehearsal for abandoned and removes what it left.
        let done = cleaned_up(&app, &ops, id).await;
        assert_eq!(done["status"], "error", "{step}: {done}");
        assert_eq!(
            copies_left(&app, shadow).await,
            (0, 0, 0),
            "{step}: something of the copy is left"
        );
        assert_eq!(sale_rows(&app).await, rows_before, "{step}");
        assert_eq!(
            (app.redis_stock(&hot).await, app.redis_stock(&small).await),
            stock_before,
            "{step}"
        );
        println!("{step}: cleaned up by the leader ({done})");
    }
}
