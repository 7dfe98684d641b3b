//! The console's reconciliation pages through their server functions and server-rendered
//! HTML: who gets the start form and the repair control, a run's page with its findings
//! grouped by class, the runs list, starting runs from the console (a repair needs a reason
//! and a role that may repair), and the live stock ledger on the activity page.

use crate::support::{
    app::{json, spawn_app_with, TestApp},
    fixtures::{open_for_sale, shop, Caller, Sale},
    wait,
};
use contract::{ReconciliationRun, Role, RunStatus, StartedRun};
use leptos::server_fn::ServerFn;
use std::time::Duration;

/// How long a run of one small activity may take at most.
const PATIENCE: Duration = Duration::from_secs(30);

/// Starts a run through the admin API as `caller`; its id.
async fn start_run(app: &TestApp, caller: &Caller, body: serde_json::Value) -> i64 {
    let (status, started) = json(
        app.post_json("/admin/api/reconciliations", Some(caller), &body)
            .await,
    )
    .await;
    assert_eq!(status, 202, "{started}");
    started["id"].as_i64().expect("run id")
}

/// The run once it is over, as the admin API answers it.
async fn finished(app: &TestApp, caller: &Caller, id: i64) -> ReconciliationRun {
    let path = format!("/admin/api/reconciliations/{id}");
    wait::until("the run is over", PATIENCE, || async {
        let (status, run) = json(app.get(&path, Some(caller)).await).await;
        if status == 200 && run["status"] != "running" {
            Ok(())
        } else {
            Err(format!("{status} {run}"))
        }
    })
    .await;
    app.get(&path, Some(caller))
        .await
        .json()
        .await
        .expect("run")
}

/// `detail` as the page's HTML writes text.
fn text(detail: &str) -> String {
    detail
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The leader's automatic pass would repair what a test breaks before the test's own run.
fn without_the_leaders_pass(settings: &mut base::config::Settings) {
    settings.reconcile.interval_ms = 0;
}

/// Drops the sale item's stock key, as a Redis restart without persistence would.
async fn lose_redis_stock(app: &TestApp, sale: &Sale) {
    let key = app
        .state
        .redis
        .stock_key(contract::SaleItem::new(sale.activity_id, sale.item_id));
    let _: i64 = redis::cmd("DEL")
        .arg(&key)
        .query_async(&mut app.state.redis.connection())
        .await
        .expect("del");
}

#[tokio::test]
async fn sre_gets_the_report_form_ops_also_the_repair_control_and_a_merchant_neither() {
    let app = spawn_app_with(without_the_leaders_pass).await;
    let shop = shop(&app, "acme", "Spring sale").await;
    let activity = shop.sale.activity_id;
    let mut sessions = Vec::new();
    for (role, merchant) in [
        (Role::Sre, None),
        (Role::Ops, None),
        (Role::Merchant, Some("acme")),
    ] {
        let caller = app.caller(role, merchant).await;
        sessions.push(app.console_session(&caller).await);
    }
    let [sre, ops, merchant] = <[String; 3]>::try_from(sessions).expect("three sessions");

    let html = app.console_page("/reconciliations", &sre).await;
    assert!(html.contains(r#"id="start-run""#), "{html}");
    assert!(
        html.contains(&format!("#{activity} Spring sale")),
        "the activity to pick: {html}"
    );
    assert!(
        !html.contains(r#"name="repair""#),
        "sre may not repair: {html}"
    );
    assert!(html.contains("No reconciliation runs yet."), "{html}");
    assert!(
        !html.contains("Not built yet"),
        "the placeholder is gone: {html}"
    );

    let html = app.console_page("/reconciliations", &ops).await;
    assert!(
        html.contains(r#"id="start-run""#) && html.contains(r#"name="repair""#),
        "{html}"
    );
    assert!(html.contains(r#"name="reason""#), "{html}");

    let html = app.console_page("/reconciliations", &merchant).await;
    assert!(!html.contains(r#"id="start-run""#), "{html}");
    assert!(html.contains("your role may not do this"), "{html}");
}

#[tokio::test]
async fn a_runs_page_shows_its_findings_by_class_and_the_list_links_it() {
    let app = spawn_app_with(without_the_leaders_pass).await;
    let shop = shop(&app, "acme", "Lost stock").await;
    let ops = app.caller(Role::Ops, None).await;
    open_for_sale(&app, &shop, &ops).await;
    lose_redis_stock(&app, &shop.sale).await;
    let activity = shop.sale.activity_id;

    let id = start_run(
        &app,
        &ops,
        serde_json::json!({ "activity_id": activity, "repair": false }),
    )
    .await;
    let run = finished(&app, &ops, id).await;
    assert_eq!(run.status, RunStatus::Done, "{run:?}");
    assert!(
        run.findings.iter().any(
            |finding| finding.class == contract::FindingClass::RedisMissing
                && finding.item_id == shop.sale.item_id
        ),
        "{run:?}"
    );

    let sre = app
        .console_session(&app.caller(Role::Sre, None).await)
        .await;
    let html = app
        .console_page(&format!("/reconciliations/{id}"), &sre)
        .await;
    assert!(
        html.contains(&format!("Reconciliation run #<!>{id}"))
            || html.contains(&format!("Reconciliation run #{id}")),
        "{html}"
    );
    assert!(html.contains(r#"data-status="done""#), "{html}");
    assert!(html.contains(r#"id="finding-summary""#), "{html}");
    for finding in &run.findings {
        let class = finding.class.as_str();
        assert_eq!(
            html.matches(&format!(r#"data-class="{class}""#)).count(),
            2,
            "{class}: a summary line and a table: {html}"
        );
        assert!(
            html.contains(&format!("<td>{}</td>", text(&finding.detail))),
            "{}: {html}",
            finding.detail
        );
        assert!(
            html.contains(&format!("status-{}", finding.action.as_str())),
            "{html}"
        );
    }
    let done = run.progress.done.to_string();
    let total = run.progress.total.to_string();
    assert!(
        html.contains(&format!(r#"data-done="{done}" data-total="{total}""#)),
        "{html}"
    );
    assert!(
        html.contains(r#"id="rerun""#),
        "sre re-runs a report: {html}"
    );

    let html = app.console_page("/reconciliations", &sre).await;
    assert!(html.contains(&format!(r#"data-id="{id}""#)), "{html}");
    assert!(
        html.contains(&format!(r#"href="/reconciliations/{id}""#)),
        "{html}"
    );
    let html = app
        .console_page(
            &format!("/reconciliations?activity_id={}", activity + 1),
            &sre,
        )
        .await;
    assert!(
        !html.contains(&format!(r#"data-id="{id}""#)),
        "another activity's filter lists it: {html}"
    );
}

#[tokio::test]
async fn runs_start_from_the_console_and_a_repair_needs_a_reason_and_a_role_that_may_repair() {
    let app = spawn_app_with(without_the_leaders_pass).await;
    let shop = shop(&app, "acme", "Console runs").await;
    let ops_caller = app.caller(Role::Ops, None).await;
    open_for_sale(&app, &shop, &ops_caller).await;
    let activity = shop.sale.activity_id.to_string();
    let ops = app.console_session(&ops_caller).await;
    let sre = app
        .console_session(&app.caller(Role::Sre, None).await)
        .await;
    let start = |session: String, form: Vec<(&'static str, &'static str)>| {
        let (app, activity) = (&app, activity.clone());
        async move {
            let mut fields = vec![("activity_id", activity.as_str())];
            fields.extend(form);
            app.console_call(app::api::StartReconciliation::PATH, &session, &fields)
                .await
        }
    };
    let runs = || async {
        let (status, runs) = json(
            app.get(
                &format!(
                    "/admin/api/reconciliations?activity_id={}",
                    shop.sale.activity_id
                ),
                Some(&ops_caller),
            )
            .await,
        )
        .await;
        assert_eq!(status, 200, "{runs}");
        runs.as_array().expect("a list").len()
    };

    let refused = start(sre.clone(), vec![("repair", "true"), ("reason", "mine")]).await;
    assert_eq!(refused.status(), 403);
    let blank = start(ops.clone(), vec![("repair", "true"), ("reason", "  ")]).await;
    assert_eq!(blank.status(), 400, "a repair without a reason");
    assert_eq!(runs().await, 0, "refusals start nothing");

    let report = start(sre.clone(), vec![]).await;
    assert_eq!(report.status(), 200);
    let report: StartedRun = report.json().await.expect("started");
    let repair = start(
        ops.clone(),
        vec![
            ("repair", "true"),
            ("reason", "drill: repair from the console"),
        ],
    )
    .await;
    assert_eq!(repair.status(), 200);
    let repair: StartedRun = repair.json().await.expect("started");

    let run = finished(&app, &ops_caller, report.id).await;
    assert!(!run.repair && run.trigger == contract::RunTrigger::Console);
    let run = finished(&app, &ops_caller, repair.id).await;
    assert!(run.repair, "{run:?}");
    assert_eq!(
        run.reason.as_deref(),
        Some("drill: repair from the console")
    );

    // A repair's page: the reason, and a re-run that asks for one again; only for ops.
    let path = format!("/reconciliations/{}", repair.id);
    let html = app.console_page(&path, &ops).await;
    assert!(html.contains("drill: repair from the console"), "{html}");
    assert!(
        html.contains(r#"id="rerun""#) && html.contains(r#"name="reason""#),
        "{html}"
    );
    let html = app.console_page(&path, &sre).await;
    assert!(
        !html.contains(r#"id="rerun""#),
        "sre may not re-run a repair: {html}"
    );
}

#[tokio::test]
async fn the_activity_page_shows_the_live_ledger_to_ops_and_its_merchant_only_the_plain_figures() {
    let app = spawn_app_with(without_the_leaders_pass).await;
    let shop = shop(&app, "acme", "Ledger").await;
    let ops_caller = app.caller(Role::Ops, None).await;
    let rival = app.caller(Role::Merchant, Some("globex")).await;
    open_for_sale(&app, &shop, &ops_caller).await;
    let merchant = app.console_session(&shop.merchant).await;
    let ops = app.console_session(&ops_caller).await;
    let rival = app.console_session(&rival).await;
    let path = format!("/activities/{}", shop.sale.activity_id);
    let row = format!(r#"<tr data-item="{}">"#, shop.sale.item_id);

    // The merchant reads its stock and sales, not the Redis and pipeline columns.
    let html = app.console_page(&path, &merchant).await;
    assert!(html.contains(r#"id="activity-items""#), "{html}");
    assert!(
        !html.contains(r#"id="ledger""#) && !html.contains("Restore owed"),
        "{html}"
    );
    let html = app.console_page(&path, &ops).await;
    assert!(
        html.contains(r#"id="ledger""#) && html.contains(&row),
        "{html}"
    );
    assert!(html.contains(r#"data-drift="0""#), "a fresh sale: {html}");

    lose_redis_stock(&app, &shop.sale).await;
    // The ledger the pages above read is shared for up to a second: the loss shows within it.
    wait::until("Redis stock shows as missing", PATIENCE, || async {
        app.console_page(&path, &ops).await.contains(">missing<")
    })
    .await;

    let activity = shop.sale.activity_id.to_string();
    let call = |session: String| {
        let (app, activity) = (&app, activity.clone());
        async move {
            app.console_call(
                app::api::GetActivityLedger::PATH,
                &session,
                &[("activity_id", activity.as_str())],
            )
            .await
        }
    };
    assert_eq!(call(rival).await.status(), 404, "another merchant's ledger");
    // A ledger is shared by its viewers for up to a second: the merchant sees the loss
    // within it (a read past the caller's allowance is answered 429 meanwhile).
    wait::until(
        "the merchant's ledger shows the stock missing",
        PATIENCE,
        || async {
            let response = call(merchant.clone()).await;
            if response.status() != 200 {
                return Err(response.status().to_string());
            }
            let ledger: contract::ActivityLedger = response.json().await.expect("ledger");
            assert_eq!(ledger.activity_id, shop.sale.activity_id);
            assert_eq!(ledger.items.len(), 1);
            match ledger.items[0].redis_stock {
                None => Ok(()),
                Some(stock) => Err(stock.to_string()),
            }
        },
    )
    .await;
}
