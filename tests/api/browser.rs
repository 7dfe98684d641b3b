//! The hydrated console in a real browser: Debian's headless Chromium, driven by
//! playwright-core (`tests/browser/`), as each role lives in it, with the browser's errors
//! watched in every scenario: a merchant in Shanghai creates an item and an activity (its
//! times typed in the viewer's zone), publishes, edits and republishes; ops pre-warms,
//! rehearses, reads readiness, flips a switch, sets a hot-key rule and repairs lost stock, and
//! flips a switch with the keyboard alone; SRE watches the live dashboard lose its stream (a
//! proxy cut) and reconnect, and follows a storm of `seckill-load` on it, then reads the audit;
//! every role visits every page of the console it may use, at a desktop's and a phone's
//! width; the switch board says what each key does; two operators schedule, approve, roll
//! back and stage changes on it; an ended session signs in again and comes back.

use crate::sale_page::{open_page, said_value, when_said};
use crate::support::{
    app::{json, spawn_app, spawn_app_with, TestApp},
    fixtures::{
        buy_body, open_for_sale, open_sale, shop, storm_settings, token, upcoming_activity, Listing,
    },
    proxy::{target_of, through, Proxy},
};
use contract::Role;
use std::{path::Path, process::Command};

/// Runs `tests/browser/{script}` with `args` under node; fails the test with its output.
/// Returns what the scenario printed.
pub(crate) async fn run_scenario(script: &str, args: Vec<String>) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("browser")
        .join(script);
    let output = tokio::task::spawn_blocking(move || {
        Command::new("node")
            .arg(script)
            .args(args)
            .output()
            .expect("node runs (scripts/setup.sh installs it)")
    })
    .await
    .expect("browser task");
    // The scenario's own summary, for `--nocapture` runs.
    print!("{}", String::from_utf8_lossy(&output.stdout));
    assert!(
        output.status.success(),
        "browser test failed\nstdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Starts `tests/browser/{script}` with `args` for a test that talks to it while it runs:
/// it reads the scenario's stdout line by line and may write to its stdin.
pub(crate) fn start_scenario(script: &str, args: Vec<String>) -> tokio::process::Child {
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("browser")
        .join(script);
    tokio::process::Command::new("node")
        .arg(script)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("node runs (scripts/setup.sh installs it)")
}

/// Waits for a started scenario to end; fails the test with what it `said` and its stderr.
pub(crate) async fn finish_scenario(child: tokio::process::Child, said: &[String]) {
    let output = child.wait_with_output().await.expect("the scenario ends");
    assert!(
        output.status.success(),
        "browser test failed\nstdout:\n{}\nstderr:\n{}",
        said.join("\n"),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The merchant's flow, as a merchant in Shanghai: item → activity (its times typed in the
/// viewer's zone) → publish → edit → republish.
#[tokio::test]
async fn a_merchant_in_shanghai_creates_an_item_and_an_activity_publishes_edits_and_republishes() {
    let app = spawn_app().await;
    let merchant = app.caller(Role::Merchant, Some("acme")).await;
    let item_name = format!("Browser item {}", &merchant.username[9..]);
    // Two days ahead, to the minute (a `datetime-local` input has no seconds).
    let starts_at_ms = (chrono::Utc::now().timestamp_millis() / 60_000 + 2 * 24 * 60) * 60_000;
    let said = run_scenario(
        "console_merchant_flow.mjs",
        vec![
            app.address.clone(),
            merchant.username.clone(),
            merchant.password.clone(),
            item_name.clone(),
            starts_at_ms.to_string(),
            shots(),
        ],
    )
    .await;
    let (price, merchant_name): (i64, String) = sqlx::query_as(
        "SELECT i.price_cents, m.name FROM items i JOIN merchants m ON m.id = i.merchant_id WHERE i.name = $1",
    )
    .bind(&item_name)
    .fetch_one(&app.db)
    .await
    .expect("the item the browser created");
    assert_eq!(price, 1250);
    assert_eq!(merchant_name, "acme");
    let activity: i64 = said
        .lines()
        .find_map(|line| line.strip_prefix("activity="))
        .and_then(|id| id.parse().ok())
        .unwrap_or_else(|| panic!("no activity in {said}"));
    // The times typed as Shanghai's wall clock are the intended instants.
    let (starts_at, ends_at): (chrono::DateTime<chrono::Utc>, chrono::DateTime<chrono::Utc>) =
        sqlx::query_as("SELECT starts_at, ends_at FROM activities WHERE id = $1")
            .bind(activity)
            .fetch_one(&app.db)
            .await
            .expect("the activity the browser created");
    assert_eq!(starts_at.timestamp_millis(), starts_at_ms);
    assert_eq!(ends_at.timestamp_millis(), starts_at_ms + 3_600_000);
    // The sale page buyers get is the republished one, at the edited price.
    let html = app
        .client
        .get(format!("{}/sale/{activity}/", app.address))
        .send()
        .await
        .expect("page")
        .text()
        .await
        .expect("page text");
    assert!(html.contains("99.00"), "{html}");
}

/// A merchant's bad input in the item and the activity forms is refused in the forms' words
/// (with the admin API's code for the server's refusals), never naming a wire field.
#[tokio::test]
async fn a_merchant_reads_every_refusal_of_the_item_and_activity_forms_in_their_labels() {
    let app = spawn_app().await;
    let merchant = app.caller(Role::Merchant, Some("acme")).await;
    let (status, item) = json(
        app.post_json(
            "/admin/api/items",
            Some(&merchant),
            &serde_json::json!({ "name": "Refusal phone", "price_cents": 4990 }),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{item}");
    run_scenario(
        "console_form_refusals.mjs",
        vec![
            app.address.clone(),
            merchant.username.clone(),
            merchant.password.clone(),
            "Refusal phone".into(),
            "-5".into(),
            "abc".into(),
            "12.345".into(),
        ],
    )
    .await;
    assert_eq!(app.count("items").await, 1);
    assert_eq!(app.count("activities").await, 0);
}

#[tokio::test]
async fn ops_flips_a_switch_with_the_keyboard_alone() {
    let app = spawn_app().await;
    let ops = app.caller(Role::Ops, None).await;
    let reason = format!("keyboard drill {}", &ops.username[4..]);
    run_scenario(
        "console_flip_switch.mjs",
        vec![
            app.address.clone(),
            ops.username.clone(),
            ops.password.clone(),
            reason.clone(),
            "keyboard".to_owned(),
        ],
    )
    .await;
    // One flip only (the unconfirmed submit never reached the server), audited as the console's.
    assert_eq!(
        switch_flips(&app).await,
        [(
            ops.username.clone(),
            "console".into(),
            "switches/entry".into(),
            None,
            "closed".into(),
            reason
        )]
    );
    assert!(!app.state.switches.current().entry_open);
}

/// Every flip in the switch audit, oldest first: who, from where, the key, old, new, why.
async fn switch_flips(
    app: &TestApp,
) -> Vec<(String, String, String, Option<String>, String, String)> {
    sqlx::query_as(
        "SELECT actor, source, path, old_value, new_value, reason FROM switch_audit ORDER BY id",
    )
    .fetch_all(&app.db)
    .await
    .expect("switch audit")
}

/// The operator's flow in the console: pre-warm → rehearsal → readiness → flip → hot-key
/// rule → reconciliation, each step audited as the console's.
#[tokio::test]
async fn ops_prewarms_rehearses_reads_readiness_flips_sets_a_hot_key_rule_and_repairs() {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

    // Without the leader's pass, which would repair the lost stock before the operator.
    let app = spawn_app_with(|settings| settings.reconcile.interval_ms = 0).await;
    let shop = shop(&app, "acme", "Ops flow").await;
    let activity = shop.sale.activity_id;
    let ops = app.caller(Role::Ops, None).await;
    let reason = format!("ops drill {}", &ops.username[4..]);
    let rule = r#"{"threshold_per_s":50,"action":"watch","hold_s":10}"#;
    let mut child = start_scenario(
        "console_ops_flow.mjs",
        vec![
            app.address.clone(),
            ops.username.clone(),
            ops.password.clone(),
            activity.to_string(),
            reason.clone(),
            rule.to_owned(),
            shots(),
        ],
    );
    let mut stdin = child.stdin.take().expect("stdin");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut said = Vec::new();
    while let Some(line) = lines.next_line().await.expect("the scenario's output") {
        if line == "break" {
            // The sale opens, and the item's stock key goes, as in a Redis restart without
            // persistence.
            sqlx::query(
                "UPDATE activities SET starts_at = now() - interval '1 minute' WHERE id = $1",
            )
            .bind(activity)
            .execute(&app.db)
            .await
            .expect("open the sale");
            let key = app
                .state
                .redis
                .stock_key(contract::SaleItem::new(activity, shop.sale.item_id));
            let _: i64 = redis::cmd("DEL")
                .arg(&key)
                .query_async(&mut app.state.redis.connection())
                .await
                .expect("del");
            stdin.write_all(b"go\n").await.expect("tell the scenario");
        }
        said.push(line);
    }
    finish_scenario(child, &said).await;

    let (source, sqlx::types::Json(detail)): (String, sqlx::types::Json<serde_json::Value>) = sqlx::query_as(
        "SELECT source, detail FROM ops_audit WHERE action = 'activity.prewarm' AND target = $1",
    )
    .bind(format!("activity:{activity}"))
    .fetch_one(&app.db)
    .await
    .expect("the pre-warm audited");
    assert_eq!(
        (source.as_str(), &detail["outcome"]),
        ("console", &serde_json::json!("loaded"))
    );
    let (rehearsal_source, rehearsal_reason): (String, String) =
        sqlx::query_as("SELECT source, reason FROM rehearsals WHERE activity_id = $1")
            .bind(activity)
            .fetch_one(&app.db)
            .await
            .expect("one rehearsal");
    assert_eq!(
        (rehearsal_source.as_str(), rehearsal_reason.as_str()),
        ("console", reason.as_str())
    );
    let flips = switch_flips(&app).await;
    assert_eq!(
        flips
            .iter()
            .map(|(actor, source, path, _, _, why)| (actor, source.as_str(), path.as_str(), why))
            .collect::<Vec<_>>(),
        [
            (&ops.username, "console", "switches/entry", &reason),
            (&ops.username, "console", "rules/hotkeys/item", &reason),
        ]
    );
    let stored: serde_json::Value = serde_json::from_str(&flips[1].4).expect("a JSON rule");
    assert_eq!(
        stored,
        serde_json::from_str::<serde_json::Value>(rule).expect("rule")
    );
    let (status, runs) = json(
        app.get(
            &format!("/admin/api/reconciliations?activity_id={activity}"),
            Some(&ops),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{runs}");
    let runs = runs.as_array().expect("runs");
    assert_eq!(runs.len(), 1, "one run started: {runs:?}");
    assert_eq!(runs[0]["repair"], true);
    assert_eq!(runs[0]["trigger"], "console");
    assert_eq!(runs[0]["actor"], ops.username.as_str());
}

#[tokio::test]
async fn sre_watches_the_dashboard_lose_its_stream_and_reconnect_in_the_hydrated_console() {
    use tokio::io::{AsyncBufReadExt, BufReader};

    let app = spawn_app().await;
    let mut proxy = Proxy::start(&target_of(&app.address)).await;
    let base = through(&app.address, &proxy);
    let sre = app.caller(Role::Sre, None).await;
    let mut child = start_scenario(
        "console_dashboard.mjs",
        vec![base, sre.username.clone(), sre.password.clone()],
    );
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut said = Vec::new();
    // The scenario says where it is; the test cuts and restores the connection in step.
    while let Some(line) = lines.next_line().await.expect("the scenario's output") {
        match line.as_str() {
            "live" => proxy.stop().await,
            "reconnecting" => proxy.resume().await,
            _ => {}
        }
        said.push(line);
    }
    finish_scenario(child, &said).await;
    assert_eq!(&said[..2], ["live", "reconnecting"], "{said:?}");
}

#[tokio::test]
async fn sre_follows_a_storm_on_the_dashboard_agreeing_with_the_metrics_then_reads_the_audit() {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

    const STOCK: i64 = 150;
    let app = spawn_app_with(storm_settings).await;
    let sale = open_sale(&app, STOCK, 1).await;
    let sre = app.caller(Role::Sre, None).await;
    // Sixty operator actions after the sale's pre-warm: the audit's first page has no room
    // for it, so only the server's filter finds it.
    sqlx::query(
        "INSERT INTO ops_audit (actor, source, action, target)
         SELECT 'ops', 'api', 'dead_letter.requeue', 'dead_letter:' || n FROM generate_series(1, 60) n",
    )
    .execute(&app.db)
    .await
    .expect("newer operator actions");
    let item_key = format!("{}-{}", sale.activity_id, sale.item_id);
    let mut child = start_scenario(
        "console_dashboard_storm.mjs",
        vec![
            app.address.clone(),
            sre.username.clone(),
            sre.password.clone(),
            item_key,
            STOCK.to_string(),
        ],
    );
    let mut stdin = child.stdin.take().expect("stdin");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut said = Vec::new();
    while let Some(line) = lines.next_line().await.expect("the scenario's output") {
        let watching = line == "watching";
        said.push(line);
        if !watching {
            continue;
        }
        // 600 buyers for 150 units, three tries each: sold, then sold out.
        let load = tokio::process::Command::new(env!("CARGO_BIN_EXE_seckill-load-under-test"))
            .args(["--base-url", &app.address])
            .args(["--activity", &sale.activity_id.to_string()])
            .args(["--item", &sale.item_id.to_string()])
            .args([
                "--users",
                "600",
                "--retries-per-user",
                "3",
                "--requests",
                "1800",
            ])
            .args(["--concurrency", "16"])
            .env(
                "SECKILL_REDIS_PREFIX",
                app.state.settings.redis_prefix.as_str(),
            )
            .output()
            .await
            .expect("seckill-load runs");
        assert!(
            load.status.success(),
            "seckill-load failed: {}",
            String::from_utf8_lossy(&load.stderr)
        );
        // Every request answered: the counters are final.
        let funnel = |stage: &'static str| {
            let series =
                format!(r#"seckill_funnel_requests_total{{outcome="pass",stage="{stage}"}}"#);
            let app = &app;
            async move { app.metric(&series).await as u64 }
        };
        let (deduction, admission) = (funnel("deduction").await, funnel("admission").await);
        assert_eq!(deduction, STOCK as u64);
        assert!(admission >= 1800, "{admission} admitted");
        stdin
            .write_all(format!("deduction={deduction} admission={admission} stock=0\n").as_bytes())
            .await
            .expect("tell the scenario");
    }
    finish_scenario(child, &said).await;
    assert_eq!(said[0], "watching", "{said:?}");
    // The Redis stock the page showed is the business gauge's too.
    let figure = |figure: &str| {
        format!(
            r#"seckill_item_units{{activity="{}",figure="{figure}",item="{}"}}"#,
            sale.activity_id, sale.item_id
        )
    };
    assert_eq!(app.metric(&figure("total")).await, STOCK as f64);
    assert_eq!(app.metric(&figure("redis_stock")).await, 0.0);
    assert_eq!(app.metric(&figure("allocated")).await, STOCK as f64);
}

/// The menu a role's console shows: the pages the permission table lets it use, in the
/// menu's order.
fn menu_of(role: Role) -> String {
    use contract::Permission::*;
    [
        ("/activities", ReadCatalog),
        ("/items", ReadCatalog),
        ("/prewarm", Prewarm),
        ("/rehearsals", WatchOperations),
        ("/readiness", WatchOperations),
        ("/draw", WatchOperations),
        ("/switches", ReadSwitches),
        ("/dashboard", WatchOperations),
        ("/hotkeys", WatchOperations),
        ("/baselines", WatchOperations),
        ("/reconciliations", Reconcile),
        ("/dead-letters", WatchOperations),
        ("/orders", ReadOrders),
        ("/audit", WatchOperations),
    ]
    .into_iter()
    .filter(|(_, permission)| role.may(*permission))
    .map(|(href, _)| href)
    .collect::<Vec<_>>()
    .join(",")
}

/// One role visits every console page it may use, at a desktop and a phone width
/// (`console_every_page.mjs`), in an app of its own: about fifty full page loads each.
async fn visits_every_console_page_it_may_use(role: Role) {
    let app = spawn_app().await;
    let shop = shop(&app, "acme", "Every page").await;
    let ops = app.caller(Role::Ops, None).await;
    open_for_sale(&app, &shop, &ops).await;
    let order = app.bought(7, "every-page", &buy_body(&shop.sale, 1)).await;
    let (status, run) = json(
        app.post_json(
            "/admin/api/reconciliations",
            Some(&ops),
            &serde_json::json!({ "activity_id": shop.sale.activity_id }),
        )
        .await,
    )
    .await;
    assert_eq!(status, 202, "{run}");
    let (activity, item) = (shop.sale.activity_id, shop.sale.item_id);
    // What each role's pages must not show (controls it may not use), and must.
    const OPS_ONLY: &str = "#prewarm-form";
    const LEDGER: &str = "#ledger";
    let caller = match role {
        Role::Merchant => app.caller(Role::Merchant, Some("acme")).await,
        Role::Ops => app.caller(Role::Ops, None).await,
        other => app.caller(other, None).await,
    };
    let activity_page = match role {
        Role::Merchant => format!("/activities/{activity}|absent={OPS_ONLY};{LEDGER}"),
        Role::Sre => format!("/activities/{activity}|absent={OPS_ONLY}|present={LEDGER}"),
        Role::Ops | Role::Admin => {
            format!("/activities/{activity}|present={OPS_ONLY};{LEDGER}")
        }
    };
    let mut args = vec![
        app.address.clone(),
        caller.username.clone(),
        caller.password.clone(),
        menu_of(role),
        activity_page,
        format!("/items/{item}"),
        format!("/orders/{order}"),
    ];
    // The pages the menu does not link to, for the roles that may use them.
    if role.may(contract::Permission::WriteCatalog) {
        args.extend(["/activities/new".to_owned(), "/items/new".to_owned()]);
    }
    if role.may(contract::Permission::Reconcile) {
        args.extend([
            format!("/reconciliations/{}", run["id"]),
            format!("/reconciliations?activity_id={activity}"),
        ]);
    }
    if role.may(contract::Permission::WatchOperations) {
        args.extend([
            format!("/baselines?activity_id={activity}"),
            format!("/readiness?activity_id={activity}"),
        ]);
    }
    run_scenario("console_every_page.mjs", args).await;
}

#[tokio::test]
async fn a_merchant_visits_every_console_page_it_may_use_at_desktop_and_phone_widths() {
    visits_every_console_page_it_may_use(Role::Merchant).await;
}

#[tokio::test]
async fn ops_visit_every_console_page_they_may_use_at_desktop_and_phone_widths() {
    visits_every_console_page_it_may_use(Role::Ops).await;
}

#[tokio::test]
async fn sre_visit_every_console_page_they_may_use_at_desktop_and_phone_widths() {
    visits_every_console_page_it_may_use(Role::Sre).await;
}

#[tokio::test]
async fn an_admin_visits_every_console_page_it_may_use_at_desktop_and_phone_widths() {
    visits_every_console_page_it_may_use(Role::Admin).await;
}

/// Runs `script` as an operator of a fresh app: `BASE_URL USERNAME PASSWORD SHOTS_DIR`.
async fn as_ops(script: &str) {
    let app = spawn_app().await;
    let ops = app.caller(Role::Ops, None).await;
    run_scenario(
        script,
        vec![
            app.address.clone(),
            ops.username.clone(),
            ops.password.clone(),
            shots(),
        ],
    )
    .await;
}

#[tokio::test]
async fn the_switch_board_says_what_each_key_does_and_its_forms_fit_the_page() {
    as_ops("console_switch_board_plain.mjs").await;
}

/// Change management on the switch board: one operator schedules (in her zone) and cancels,
/// flips and proposes a four-eyes key; a second approves it, rolls a key back from its
/// history, stages a key on the instance and promotes it.
#[tokio::test]
async fn two_operators_schedule_approve_roll_back_and_stage_on_the_switch_board() {
    let app = std::sync::Arc::new(spawn_app().await);
    crate::control::etcd(&app)
        .await
        .put(
            crate::control::key(&app, "policy/approval"),
            r#"["switches/deduction"]"#,
            None,
        )
        .await
        .expect("policy written");
    let (alice, bob) = (
        app.caller(Role::Ops, None).await,
        app.caller(Role::Ops, None).await,
    );
    // Buyers early for a sale not started yet (refused, but its traffic): a flip's
    // confirmation shows that activity's buy rate.
    let merchant = app.caller(Role::Merchant, Some("acme")).await;
    let early = upcoming_activity(&app, &merchant, &Listing::storm(5, 1, &[])).await;
    let buyers = tokio::spawn({
        let app = app.clone();
        async move {
            for n in 0.. {
                app.buy(9_000 + n % 100, &format!("early-{n}"), &buy_body(&early, 1))
                    .await;
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
        }
    });
    run_scenario(
        "console_change_management.mjs",
        vec![
            app.address.clone(),
            alice.username.clone(),
            alice.password.clone(),
            bob.username.clone(),
            bob.password.clone(),
            shots(),
        ],
    )
    .await;
    buyers.abort();
    let decided: Vec<(String, String, String)> = sqlx::query_as(
        "SELECT path, state, COALESCE(decided_by, '') FROM switch_changes ORDER BY id",
    )
    .fetch_all(&app.db)
    .await
    .expect("changes");
    assert_eq!(
        decided,
        [
            (
                "limits/max_in_flight".into(),
                "cancelled".into(),
                alice.username.clone()
            ),
            (
                "switches/deduction".into(),
                "applied".into(),
                bob.username.clone()
            ),
            (
                "limits/local_rate_per_s".into(),
                "applied".into(),
                String::new()
            ),
        ],
        "the rollback of a key without four eyes is a plain flip"
    );
    let values = app.state.switches.current();
    assert_eq!(values.limits.max_in_flight, 300);
    assert_eq!(values.deduction, base::config::DeductionMode::Db);
}

#[tokio::test]
async fn an_ended_session_asks_to_sign_in_and_comes_back_to_the_page_asked_for() {
    as_ops("console_session_expired.mjs").await;
}

/// Where the scenarios save their screenshots (`SECKILL_SHOTS`), when the run asks for them.
pub(crate) fn shots() -> String {
    std::env::var("SECKILL_SHOTS").unwrap_or_default()
}

/// The console's first load on a 10 Mbit/s link crosses the wire compressed (the plain wasm
/// module alone is about 3 MB), and a repeat visit takes the content-named bundle from the
/// browser's cache without asking the server (the scenario fails when it fetches it again).
/// How long either takes is measured by `bench` (see BENCHMARKS.md), not asserted here.
#[tokio::test]
async fn the_console_loads_compressed_and_a_repeat_visit_takes_the_bundle_from_the_cache() {
    let app = spawn_app().await;
    let said = run_scenario("console_first_load.mjs", vec![app.address.clone()]).await;
    let first_bytes: u64 = said
        .split_whitespace()
        .find_map(|field| field.strip_prefix("first_bytes="))
        .and_then(|value| value.parse().ok())
        .unwrap_or_else(|| panic!("no first_bytes in {said}"));
    assert!(
        first_bytes < 1_200_000,
        "the first load moved {first_bytes} bytes: {said}"
    );
}

/// A buyer on the sale page of an open sale whose orders are recorded until the test replays
/// them (`async` on `record`), so that the page's order stays `PRE_CREATED` for as long as the
/// scenario needs: the scenario `script`, reached at `base` (the app, or a proxy in front of
/// it); when it says `cue`, the test does `act`, replays the orders and tells it `reply`.
/// What the scenario said, and the buyer's orders (id, status).
async fn pushed_or_polled<F, Fut>(
    app: &TestApp,
    base: String,
    script: &str,
    (cue, reply): (&str, &str),
    act: F,
) -> (Vec<String>, Vec<(String, String)>)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    const BUYER: i64 = 801;
    let shop = open_page(app, 10).await;
    let ops = app.caller(Role::Ops, None).await;
    let child = start_scenario(
        script,
        vec![
            base,
            shop.sale.activity_id.to_string(),
            token(app, BUYER),
            shots(),
        ],
    );
    let mut act = act;
    let said = when_said(child, cue, reply, || {
        let acted = act();
        let ops = &ops;
        async move {
            acted.await;
            let (status, body) = json(
                app.post_json(
                    "/admin/api/recordings/replay",
                    Some(ops),
                    &serde_json::json!({ "reason": "the pipeline is back" }),
                )
                .await,
            )
            .await;
            assert_eq!(status, 200, "{body}");
        }
    })
    .await;
    let orders = sqlx::query_as("SELECT id::TEXT, status FROM orders WHERE user_id = $1")
        .bind(BUYER)
        .fetch_all(&app.db)
        .await
        .expect("orders");
    (said, orders)
}

fn recording(settings: &mut base::config::Settings) {
    settings.buy.async_mode = base::config::AsyncMode::Record;
}

#[tokio::test]
async fn the_sale_page_learns_its_orders_states_from_the_event_stream_without_polling() {
    let app = spawn_app_with(recording).await;
    let base = app.address.clone();
    let (said, orders) = pushed_or_polled(
        &app,
        base,
        "sale_page_pushed.mjs",
        ("preparing", "replayed"),
        || async {},
    )
    .await;
    let shown = said_value(&said, "order").expect("order shown");
    assert_eq!(orders, [(shown.to_owned(), "PAID".to_owned())]);
    // One read, for the amount and the time to pay by, once the stream said ready to pay.
    assert_eq!(said_value(&said, "reads"), Some("1"), "{said:?}");
}

#[tokio::test]
async fn with_its_event_stream_cut_the_sale_page_polls_and_still_ends_paid() {
    let app = spawn_app_with(recording).await;
    let proxy = tokio::sync::Mutex::new(Proxy::start(&target_of(&app.address)).await);
    let base = through(&app.address, &*proxy.lock().await);
    let (said, orders) = pushed_or_polled(
        &app,
        base,
        "sale_page_stream_cut.mjs",
        ("cut", "cut"),
        || async {
            // Every connection in flight cut, the stream's among them; the page's next
            // requests find the proxy listening again.
            let mut proxy = proxy.lock().await;
            proxy.stop().await;
            proxy.resume().await;
        },
    )
    .await;
    let shown = said_value(&said, "order").expect("order shown");
    assert_eq!(orders, [(shown.to_owned(), "PAID".to_owned())]);
}
