//! The hydrated console in a real browser: Debian's headless Chromium, driven by
//! playwright-core (`tests/browser/`), logs in and creates an item; an operator flips a
//! switch on the switch board and watches it applied; an operator starts a repair run on the
//! reconciliation page and follows it to its findings; SRE watches the live dashboard lose its
//! stream (a proxy cut) and reconnect, and follows a storm of `seckill-load` on it; every role
//! visits every page of the console it may use, at a desktop's and a phone's width, with the
//! browser's errors watched; the switch board says what each key does; an edit of a
//! published activity asks for a republish; an ended session signs in again and comes back.

use crate::support::{
    app::{json, spawn_app, spawn_app_with},
    fixtures::{buy_body, open_for_sale, open_sale, shop, storm_settings},
    proxy::{target_of, through, Proxy},
};
use contract::Role;
use std::{path::Path, process::Command};

/// Runs `tests/browser/{script}` with `args` under node; fails the test with its output.
/// Returns what the scenario printed.
async fn run_scenario(script: &str, args: Vec<String>) -> String {
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

#[tokio::test]
async fn a_merchant_logs_in_and_creates_an_item_in_the_hydrated_console() {
    let app = spawn_app().await;
    let merchant = app.caller(Role::Merchant, Some("acme")).await;
    let item_name = format!("Browser item {}", &merchant.username[9..]);
    run_scenario(
        "console_login_create_item.mjs",
        vec![
            app.address.clone(),
            merchant.username.clone(),
            merchant.password.clone(),
            item_name.clone(),
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
}

#[tokio::test]
async fn a_merchant_who_types_a_bad_price_reads_why_in_the_item_form() {
    let app = spawn_app().await;
    let merchant = app.caller(Role::Merchant, Some("acme")).await;
    run_scenario(
        "console_bad_price.mjs",
        vec![
            app.address.clone(),
            merchant.username.clone(),
            merchant.password.clone(),
            "-5".into(),
            "abc".into(),
            "12.345".into(),
        ],
    )
    .await;
    assert_eq!(app.count("items").await, 0);
}

#[tokio::test]
async fn ops_flips_a_switch_with_a_reason_and_sees_it_applied_in_the_hydrated_console() {
    let app = spawn_app().await;
    let ops = app.caller(Role::Ops, None).await;
    let reason = format!("browser drill {}", &ops.username[4..]);
    run_scenario(
        "console_flip_switch.mjs",
        vec![
            app.address.clone(),
            ops.username.clone(),
            ops.password.clone(),
            reason.clone(),
        ],
    )
    .await;
    // One flip only (the unconfirmed submit never reached the server), audited as the console's.
    let flips: Vec<(String, String, Option<String>, String, String)> = sqlx::query_as(
        "SELECT actor, source, old_value, new_value, reason FROM switch_audit ORDER BY id",
    )
    .fetch_all(&app.db)
    .await
    .expect("switch audit");
    assert_eq!(
        flips,
        [(
            ops.username.clone(),
            "console".into(),
            None,
            "closed".into(),
            reason
        )]
    );
    assert!(!app.state.switches.current().entry_open);
}

#[tokio::test]
async fn ops_sets_a_hot_key_rule_from_its_row_and_sees_it_applied_in_the_hydrated_console() {
    let app = spawn_app().await;
    let ops = app.caller(Role::Ops, None).await;
    let reason = format!("rule drill {}", &ops.username[4..]);
    let rule = r#"{"threshold_per_s":50,"action":"watch","hold_s":10}"#;
    run_scenario(
        "console_set_hotkey_rule.mjs",
        vec![
            app.address.clone(),
            ops.username.clone(),
            ops.password.clone(),
            reason.clone(),
            rule.to_owned(),
        ],
    )
    .await;
    let (path, value): (String, String) =
        sqlx::query_as("SELECT path, new_value FROM switch_audit ORDER BY id DESC LIMIT 1")
            .fetch_one(&app.db)
            .await
            .expect("switch audit");
    assert_eq!(path, "rules/hotkeys/item");
    let stored: serde_json::Value = serde_json::from_str(&value).expect("a JSON rule");
    assert_eq!(
        stored,
        serde_json::from_str::<serde_json::Value>(rule).expect("rule")
    );
}

#[tokio::test]
async fn ops_starts_a_repair_run_in_the_hydrated_console_and_follows_it_to_its_findings() {
    // Without the leader's pass, which would repair the lost stock before the operator.
    let app = spawn_app_with(|settings| settings.reconcile.interval_ms = 0).await;
    let shop = shop(&app, "acme", "Browser repair").await;
    let ops = app.caller(Role::Ops, None).await;
    open_for_sale(&app, &shop, &ops).await;
    // The item's stock key goes, as in a Redis restart without persistence.
    let key = app.state.redis.stock_key(contract::SaleItem::new(
        shop.sale.activity_id,
        shop.sale.item_id,
    ));
    let _: i64 = redis::cmd("DEL")
        .arg(&key)
        .query_async(&mut app.state.redis.connection())
        .await
        .expect("del");
    let reason = format!("browser repair {}", &ops.username[4..]);
    run_scenario(
        "console_reconcile.mjs",
        vec![
            app.address.clone(),
            ops.username.clone(),
            ops.password.clone(),
            shop.sale.activity_id.to_string(),
            reason.clone(),
        ],
    )
    .await;
    let (status, runs) = json(
        app.get(
            &format!(
                "/admin/api/reconciliations?activity_id={}",
                shop.sale.activity_id
            ),
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
async fn sre_follows_a_storm_on_the_dashboard_and_it_agrees_with_the_metrics() {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

    const STOCK: i64 = 150;
    let app = spawn_app_with(storm_settings).await;
    let sale = open_sale(&app, STOCK, 1).await;
    let sre = app.caller(Role::Sre, None).await;
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

#[tokio::test]
async fn every_role_visits_every_console_page_it_may_use_at_desktop_and_phone_widths() {
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
    for role in Role::ALL {
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

#[tokio::test]
async fn an_edit_of_a_published_activity_says_saved_and_asks_for_a_republish() {
    let app = spawn_app().await;
    let shop = shop(&app, "acme", "Republish").await;
    let activity = shop.sale.activity_id;
    let (status, page) = json(
        app.post_json(
            &format!("/admin/api/activities/{activity}/publish"),
            Some(&shop.merchant),
            &serde_json::json!({}),
        )
        .await,
    )
    .await;
    assert_eq!(
        (status, &page["version"]),
        (200, &serde_json::json!(1)),
        "{page}"
    );
    run_scenario(
        "console_republish_hint.mjs",
        vec![
            app.address.clone(),
            shop.merchant.username.clone(),
            shop.merchant.password.clone(),
            activity.to_string(),
            "Republish item".to_owned(),
            "9.90".to_owned(),
            shots(),
        ],
    )
    .await;
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
