//! Rehearsals: a sale's load through the real buy path against a shadow copy of an
//! activity, the invariant check at its end, and nothing of the copy left behind.

use crate::dashboard::Frames;
use crate::support::{
    app::{json, spawn_app_with, TestApp},
    fixtures::{open_sale, prewarm, token, Caller, Sale},
    wait,
};
use contract::Role;
use seckill::infra::config::Settings;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

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
    let starts = chrono::Utc::now() + chrono::Duration::days(1);
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
