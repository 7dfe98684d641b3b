//! The pre-sale readiness check against real services: a pre-warmed, open activity is
//! ready; each check fails when exactly its own thing is broken (Redis stock edited, a buyer
//! record or the Bloom filter lost, the scripts flushed, a switch flipped, an instance behind
//! the latest switch or with its clock ahead, the consumers stopped, a message
//! dead-lettered, an event the relay has not sent, no leader elected, no rehearsal or one that
//! left the baseline) and passes again after
//! the fix; the console's readiness page shows the same verdicts.

use crate::support::{
    app::{json, spawn_app_with, TestApp},
    fixtures::{buy_body, order_id, prewarm, upcoming_activity, Caller, Listing, Sale},
    redis_server::RedisInstance,
    wait::{self, PATIENCE},
};
use base::config::{DeductionMode, Settings};
use contract::{Readiness, ReadinessCheckName as Name, Role, SaleItem};
use etcd_client::{Client, GetOptions};
use sale::orders::{create_order, mq::topology::Outgoing, pay_timeout, relay};
use serde_json::{json, Value};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

impl TestApp {
    async fn readiness(&self, caller: &Caller, sale: &Sale) -> Readiness {
        let path = format!("/admin/api/readiness?activity_id={}", sale.activity_id);
        let (status, body) = json(self.get(&path, Some(caller)).await).await;
        assert_eq!(status, 200, "{body}");
        serde_json::from_value(body).expect("a readiness report")
    }

    /// Waits until exactly the checks in `failing` fail (none: ready); returns the report.
    async fn readiness_failing(&self, caller: &Caller, sale: &Sale, failing: &[Name]) -> Readiness {
        let last = std::sync::Mutex::new(None);
        wait::until(&format!("exactly {failing:?} failing"), PATIENCE, || {
            let last = &last;
            async move {
                let report = self.readiness(caller, sale).await;
                let seen: Vec<Name> = report
                    .checks
                    .iter()
                    .filter(|check| !check.ok)
                    .map(|check| check.name)
                    .collect();
                let verdict = if seen == failing {
                    Ok(())
                } else {
                    Err(format!("{:#?}", report.checks))
                };
                *last.lock().expect("not poisoned") = Some(report);
                verdict
            }
        })
        .await;
        let report = last.into_inner().expect("not poisoned").expect("a report");
        assert_eq!(report.ready, failing.is_empty());
        report
    }

    /// Waits until `broken` alone fails, saying `said`; then pre-warms, as its detail
    /// advises, and waits until the sale is ready again.
    async fn mended_by_prewarm(
        &self,
        (ops, sre): (&Caller, &Caller),
        sale: &Sale,
        broken: Name,
        said: &str,
    ) {
        let failing = self.readiness_failing(sre, sale, &[broken]).await;
        let seen = detail(&failing, broken);
        assert!(seen.contains(said), "{seen}");
        self.prewarm(ops, sale).await;
        self.readiness_failing(sre, sale, &[]).await;
    }

    async fn prewarm(&self, ops: &Caller, sale: &Sale) {
        let path = format!("/admin/api/activities/{}/prewarm", sale.activity_id);
        let (status, body) = json(self.post_json(&path, Some(ops), &json!({})).await).await;
        assert_eq!(status, 200, "{body}");
    }

    async fn mark_baseline(&self, ops: &Caller, run_id: i64) {
        let path = format!("/admin/api/baselines/{run_id}/mark");
        let body = json!({ "reason": "readiness test" });
        let (status, answer) = json(self.post_json(&path, Some(ops), &body).await).await;
        assert_eq!(status, 200, "{answer}");
    }

    async fn set_switch(&self, ops: &Caller, path: &str, value: &str) {
        let (status, body) = json(
            self.send_json(
                reqwest::Method::PUT,
                &format!("/admin/api/switches/{path}?wait_ms=5000"),
                Some(ops),
                &json!({ "value": value, "reason": "readiness test" }),
            )
            .await,
        )
        .await;
        assert_eq!(status, 200, "{body}");
    }
}

/// What ops do before the day: every fallback switch flipped away and back.
async fn rehearse_switches(app: &TestApp, ops: &Caller, sale: &Sale) {
    let entry = format!("switches/entry/{}", sale.activity_id);
    for (path, fallback, sale_value) in [
        (entry.as_str(), "closed", "open"),
        ("switches/deduction", "db", "redis"),
        ("switches/async", "record", "mq"),
    ] {
        app.set_switch(ops, path, fallback).await;
        app.set_switch(ops, path, sale_value).await;
    }
    // Back on `redis`, the instance re-derives Redis from PostgreSQL before Redis serves
    // again; a buy in between would deduct in PostgreSQL behind the re-derivation's back.
    wait::until("Redis deducting again", PATIENCE, || async {
        app.state.deduction.mode(DeductionMode::Redis) == DeductionMode::Redis
    })
    .await;
}

/// A rehearsal of the sale's activity, as ops run one before the day (a small one: what
/// matters here is that it passed); waits until it is over and returns it.
async fn rehearse(app: &TestApp, ops: &Caller, sale: &Sale) -> Value {
    let path = format!("/admin/api/activities/{}/rehearsals", sale.activity_id);
    let asked = json!({ "buyers": 40, "rate_per_s": 200, "reason": "the day before" });
    let (status, body) = json(app.post_json(&path, Some(ops), &asked).await).await;
    assert_eq!(status, 202, "{body}");
    let rehearsal = format!("/admin/api/rehearsals/{}", body["id"]);
    let over = std::sync::Mutex::new(Value::Null);
    wait::until("the rehearsal is over", Duration::from_secs(120), || {
        let (over, rehearsal) = (&over, &rehearsal);
        async move {
            let (status, body) = json(app.get(rehearsal, Some(ops)).await).await;
            assert_eq!(status, 200, "{body}");
            let done = body["status"] != "running";
            *over.lock().expect("not poisoned") = body;
            done
        }
    })
    .await;
    let over = over.into_inner().expect("not poisoned");
    assert_eq!(over["status"], "passed", "{over}");
    over
}

/// A sale starting in an hour, pre-warmed and rehearsed, with an ops and an SRE caller.
async fn rehearsed_upcoming_sale(app: &TestApp) -> (Sale, Caller, Caller) {
    let merchant = app.caller(Role::Merchant, Some("acme")).await;
    let ops = app.caller(Role::Ops, None).await;
    let sre = app.caller(Role::Sre, None).await;
    let sale = upcoming_activity(app, &merchant, &Listing::storm(10, 1, &[])).await;
    prewarm(app, &ops, &sale).await;
    rehearse(app, &ops, &sale).await;
    (sale, ops, sre)
}

/// Moves the sale's start into the past: the sale is open.
async fn open_now(app: &TestApp, sale: &Sale) {
    sqlx::query(
        "UPDATE activities SET starts_at = now() - interval '1 minute',
                ends_at = now() + interval '1 hour' WHERE id = $1",
    )
    .bind(sale.activity_id)
    .execute(&app.db)
    .await
    .expect("open the sale");
}

/// An open sale that was rehearsed before it opened and whose fallback switches have been
/// drilled, with an ops and an SRE caller.
async fn rehearsed_sale(app: &TestApp) -> (Sale, Caller, Caller) {
    let (sale, ops, sre) = rehearsed_upcoming_sale(app).await;
    rehearse_switches(app, &ops, &sale).await;
    open_now(app, &sale).await;
    (sale, ops, sre)
}

fn detail(report: &Readiness, name: Name) -> String {
    report.check(name).expect("the check ran").detail.clone()
}

#[tokio::test]
async fn a_prewarmed_open_activity_is_ready_until_its_stock_scripts_or_switches_are_broken() {
    // A Redis of its own: flushing the scripts of the shared one would break other tests.
    let redis = RedisInstance::start().await;
    let app = spawn_app_with(|settings| settings.redis_url = redis.url().into()).await;
    let (sale, ops, sre) = rehearsed_sale(&app).await;
    let ready = app.readiness_failing(&sre, &sale, &[]).await;
    assert_eq!(ready.checks.len(), Name::ALL.len());
    assert!(detail(&ready, Name::Switches).contains("switches/challenge = "));
    assert!(detail(&ready, Name::Bloom).contains("of 1000 made-up keys passed"));

    // Redis stock edited: the stock check names the item; a pre-warm puts it back.
    let stock_key = app
        .state
        .redis
        .stock_key(SaleItem::new(sale.activity_id, sale.item_id));
    let mut connection = app.state.redis.connection();
    let _: () = redis::cmd("SET")
        .arg(&stock_key)
        .arg(7)
        .query_async(&mut connection)
        .await
        .expect("edit the stock");
    let edited = app.readiness_failing(&sre, &sale, &[Name::Stock]).await;
    assert!(
        detail(&edited, Name::Stock).contains("Redis 7, the database leaves 10"),
        "{}",
        detail(&edited, Name::Stock)
    );
    // The console's page says the same: no-go, the stock check failing and listed first.
    let session = app.console_session(&sre).await;
    let page = format!("/readiness?activity_id={}", sale.activity_id);
    let html = app.console_page(&page, &session).await;
    assert!(html.contains(r#"data-ready="false""#), "{html}");
    assert!(html.contains("NO-GO: 1 of 16 checks fail"), "{html}");
    let first_row = html.find("<tr data-check=").expect("check rows");
    assert!(
        html[first_row..].starts_with(r#"<tr data-check="stock" data-ok="false""#),
        "{html}"
    );
    app.prewarm(&ops, &sale).await;
    app.readiness_failing(&sre, &sale, &[]).await;
    let html = app.console_page(&page, &session).await;
    assert!(html.contains("GO: all 16 checks pass"), "{html}");

    // The scripts flushed: the check lists what is missing; a pre-warm loads them again.
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut connection)
        .await
        .expect("flush the scripts");
    app.mended_by_prewarm((&ops, &sre), &sale, Name::Scripts, "buy")
        .await;

    // Deduction flipped to the database: the switches check says which flip to undo and
    // who made it; flipped back, ready again.
    app.set_switch(&ops, "switches/deduction", "db").await;
    let flipped = app.readiness_failing(&sre, &sale, &[Name::Switches]).await;
    let switches = detail(&flipped, Name::Switches);
    assert!(
        switches.starts_with("flip switches/deduction to redis"),
        "{switches}"
    );
    assert!(switches.contains("by ops"), "{switches}");
    app.set_switch(&ops, "switches/deduction", "redis").await;
    app.readiness_failing(&sre, &sale, &[]).await;

    // Merchants may not read it; a missing activity id is a 400 with a code, an unknown one 404.
    let merchant = app.caller(Role::Merchant, Some("acme")).await;
    let path = format!("/admin/api/readiness?activity_id={}", sale.activity_id);
    assert_eq!(app.get(&path, Some(&merchant)).await.status(), 403);
    let (status, body) = json(app.get("/admin/api/readiness", Some(&sre)).await).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (400, Some("BAD_REQUEST")),
        "{body}"
    );
    let unknown = app
        .get("/admin/api/readiness?activity_id=999999", Some(&sre))
        .await;
    assert_eq!(unknown.status(), 404);
}

#[tokio::test]
async fn without_consumers_the_sale_is_not_ready_until_they_attach() {
    let app = spawn_app_with(|settings| settings.workers = false).await;
    let merchant = app.caller(Role::Merchant, Some("acme")).await;
    let ops = app.caller(Role::Ops, None).await;
    let sre = app.caller(Role::Sre, None).await;
    let sale = upcoming_activity(&app, &merchant, &Listing::storm(10, 1, &[])).await;
    prewarm(&app, &ops, &sale).await;
    rehearse_switches(&app, &ops, &sale).await;
    // Nothing completes an order without consumers, so no rehearsal could pass either.
    let stopped = app
        .readiness_failing(&sre, &sale, &[Name::Rehearsal, Name::Consumers])
        .await;
    let consumers = detail(&stopped, Name::Consumers);
    assert!(consumers.contains("no consumer on"), "{consumers}");
    let _create = create_order::spawn(&app.state);
    let _pay_timeout = pay_timeout::spawn(&app.state);
    rehearse(&app, &ops, &sale).await;
    app.readiness_failing(&sre, &sale, &[]).await;
}

#[tokio::test]
async fn a_dead_letter_makes_the_sale_not_ready_until_it_is_requeued() {
    let app = spawn_app_with(|_| {}).await;
    let (sale, ops, sre) = rehearsed_sale(&app).await;
    app.readiness_failing(&sre, &sale, &[]).await;

    // A real order's create-order event, dead-lettered as the queue's delivery limit would.
    let (status, answer) = app.buy(1, "rq-1", &buy_body(&sale, 1)).await;
    assert_eq!(status, 200, "{answer}");
    let event = app.outbox_events(&[order_id(&answer)]).await.remove(0);
    let topology = &app.state.pipeline.topology;
    let dead = Outgoing {
        exchange: topology.dead_exchange.clone(),
        ..topology.orders_created(std::slice::from_ref(&event))
    };
    let confirmed = app
        .state
        .pipeline
        .control
        .publish(&[dead])
        .await
        .expect("RabbitMQ reachable");
    assert!(confirmed.iter().all(|ok| *ok));
    let waiting = app
        .readiness_failing(&sre, &sale, &[Name::DeadLetters])
        .await;
    assert!(detail(&waiting, Name::DeadLetters).starts_with("1 dead letter(s) waiting"));

    // Requeued, the consumer applies the event once more (a no-op): nothing waits.
    let (status, report) = json(
        app.post_json(
            "/admin/api/dead-letters/requeue-all",
            Some(&ops),
            &json!({ "reason": "readiness test" }),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{report}");
    app.readiness_failing(&sre, &sale, &[]).await;
}

/// The leader's reconciliation pass would mend the Redis edits below behind the test's back.
fn no_automatic_reconciliation(settings: &mut Settings) {
    settings.reconcile.interval_ms = 0;
}

#[tokio::test]
async fn a_lost_buyer_record_or_bloom_filter_makes_the_sale_not_ready_until_it_is_prewarmed() {
    let app = spawn_app_with(no_automatic_reconciliation).await;
    let (sale, ops, sre) = rehearsed_sale(&app).await;
    let (status, answer) = app.buy(1, "rq-1", &buy_body(&sale, 1)).await;
    assert_eq!(status, 200, "{answer}");
    let ready = app.readiness_failing(&sre, &sale, &[]).await;
    assert!(
        detail(&ready, Name::BuyerRecords).starts_with("1 buyer record(s)"),
        "{}",
        detail(&ready, Name::BuyerRecords)
    );

    // The buyer's record gone from Redis, the stock left as it is: only that check fails.
    let item = SaleItem::new(sale.activity_id, sale.item_id);
    let mut connection = app.state.redis.connection();
    let _: () = redis::cmd("HDEL")
        .arg(app.state.redis.bought_key(item))
        .arg(1)
        .query_async(&mut connection)
        .await
        .expect("drop the record");
    app.mended_by_prewarm(
        (&ops, &sre),
        &sale,
        Name::BuyerRecords,
        "Redis records 0 buyer(s), the database 1",
    )
    .await;

    // The Bloom filter gone: the buy path would refuse nothing it should, but the check
    // says so and a pre-warm loads it again.
    let _: () = redis::cmd("DEL")
        .arg(format!(
            "{}bloom:{{items}}",
            app.state.settings.redis_prefix
        ))
        .query_async(&mut connection)
        .await
        .expect("drop the filter");
    app.mended_by_prewarm((&ops, &sre), &sale, Name::Bloom, "the Bloom filter is gone")
        .await;
}

async fn etcd(app: &TestApp) -> Client {
    Client::connect(&app.state.settings.etcd_endpoints, None)
        .await
        .expect("etcd client")
}

fn now_us() -> i64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970");
    since.as_micros() as i64
}

/// This instance's report under `{prefix}/nodes/`, as its heartbeat last wrote it.
async fn own_report(app: &TestApp) -> Value {
    let mut etcd = etcd(app).await;
    let nodes = format!("{}/nodes/", app.state.settings.etcd_prefix);
    let response = etcd
        .get(nodes, Some(GetOptions::new().with_prefix()))
        .await
        .expect("the node reports");
    let [kv] = response.kvs() else {
        panic!("one node report, got {}", response.kvs().len());
    };
    serde_json::from_slice(kv.value()).expect("a node report")
}

/// An instance's report kept fresh in etcd by the test, as the instance's heartbeat would:
/// `report` with its heartbeat stamped every 200 ms, `clock_ahead` past the real time.
struct Reporter {
    key: String,
    task: tokio::task::JoinHandle<()>,
}

impl Reporter {
    async fn start(app: &TestApp, mut report: Value, clock_ahead: Duration) -> Self {
        let node_id = report["node_id"].as_str().expect("a node id").to_owned();
        let key = format!("{}/nodes/{node_id}", app.state.settings.etcd_prefix);
        let mut etcd = etcd(app).await;
        let task = {
            let key = key.clone();
            tokio::spawn(async move {
                loop {
                    report["heartbeat_at_us"] = (now_us() + clock_ahead.as_micros() as i64).into();
                    etcd.put(key.as_str(), report.to_string(), None)
                        .await
                        .expect("write the report");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            })
        };
        Self { key, task }
    }

    /// Stops writing and removes the report, as a lease running out would.
    async fn stop(self, app: &TestApp) {
        self.task.abort();
        let _ = self.task.await;
        etcd(app)
            .await
            .delete(self.key.as_str(), None)
            .await
            .expect("remove the report");
    }
}

#[tokio::test]
async fn an_instance_behind_the_latest_switch_or_with_its_clock_ahead_makes_the_sale_not_ready() {
    let app = spawn_app_with(|_| {}).await;
    let (sale, ops, sre) = rehearsed_sale(&app).await;
    // A flip gives the deployment a switch revision to be behind of.
    app.set_switch(&ops, "switches/deduction", "redis").await;
    app.readiness_failing(&sre, &sale, &[]).await;
    let report = own_report(&app).await;

    // Another instance that stopped applying changes at revision 1.
    let mut behind = report.clone();
    behind["node_id"] = "laggard".into();
    behind["applied_revision"] = 1.into();
    behind["leader"] = false.into();
    let laggard = Reporter::start(&app, behind, Duration::ZERO).await;
    let lagging = app
        .readiness_failing(&sre, &sale, &[Name::Propagation])
        .await;
    let propagation = detail(&lagging, Name::Propagation);
    assert!(
        propagation.contains("laggard at revision 1"),
        "{propagation}"
    );
    laggard.stop(&app).await;
    app.readiness_failing(&sre, &sale, &[]).await;

    // Another instance, up to date, whose clock runs a second ahead of the database's.
    let mut skewed = report;
    skewed["node_id"] = "fast-clock".into();
    skewed["leader"] = false.into();
    let fast = Reporter::start(&app, skewed, Duration::from_secs(1)).await;
    let ahead = app.readiness_failing(&sre, &sale, &[Name::Clocks]).await;
    let clocks = detail(&ahead, Name::Clocks);
    assert!(
        clocks.contains("fast-clock wrote its report") && clocks.contains("ahead of the database"),
        "{clocks}"
    );
    fast.stop(&app).await;
    app.readiness_failing(&sre, &sale, &[]).await;
}

#[tokio::test]
async fn an_event_the_relay_has_not_sent_makes_the_sale_not_ready_until_the_relay_runs() {
    // No workers: no relay. The consumers are started by hand, so only the relay is missing.
    let app = spawn_app_with(|settings| settings.workers = false).await;
    let _create = create_order::spawn(&app.state);
    let _pay_timeout = pay_timeout::spawn(&app.state);
    let (sale, _ops, sre) = rehearsed_sale(&app).await;
    let (status, answer) = app.buy(1, "rq-1", &buy_body(&sale, 1)).await;
    assert_eq!(status, 200, "{answer}");
    app.readiness_failing(&sre, &sale, &[]).await;
    // Ready says no row waits past the grace, not that the row is sent: the buy path's own
    // publisher may still be waiting for RabbitMQ's confirm, and marking the row sent after
    // the reopening below (which once left nothing pending to see). Reopen a sent row.
    wait::until(
        "the buy path sent its event",
        Duration::from_secs(30),
        || async {
            sqlx::query_scalar::<_, String>("SELECT status FROM outbox")
                .fetch_one(&app.db)
                .await
                .is_ok_and(|status| status == "sent")
        },
    )
    .await;

    // Its event's publish never confirmed: the row is still pending a minute later.
    let reopened = sqlx::query(
        "UPDATE outbox SET status = 'pending', sent_at = NULL,
                created_at = now() - interval '1 minute', next_attempt_at = now()",
    )
    .execute(&app.db)
    .await
    .expect("reopen the row");
    assert_eq!(reopened.rows_affected(), 1);
    let waiting = app.readiness_failing(&sre, &sale, &[Name::Outbox]).await;
    let outbox = detail(&waiting, Name::Outbox);
    assert!(outbox.contains("past the relay's grace"), "{outbox}");

    // The relay sends it again (the consumer applies it once); nothing waits any more.
    let _relay = relay::spawn(&app.state);
    app.readiness_failing(&sre, &sale, &[]).await;
}

#[tokio::test]
async fn without_a_leader_elected_the_sale_is_not_ready_until_an_instance_campaigns() {
    let app = spawn_app_with(|_| {}).await;
    let (sale, _ops, sre) = rehearsed_sale(&app).await;
    app.readiness_failing(&sre, &sale, &[]).await;

    // The instance resigns the election; its report is kept fresh as its heartbeat would,
    // so the election is all that is missing.
    let mut report = own_report(&app).await;
    report["leader"] = false.into();
    let resigned = report["node_id"].as_str().expect("a node id").to_owned();
    app.control.shutdown().await;
    let heartbeat = Reporter::start(&app, report, Duration::ZERO).await;
    let leaderless = app.readiness_failing(&sre, &sale, &[Name::Leader]).await;
    assert!(
        detail(&leaderless, Name::Leader).starts_with("no leader elected"),
        "{}",
        detail(&leaderless, Name::Leader)
    );

    // Another instance of the deployment campaigns and wins; the resigned one leaves. The
    // newcomer has not seen the switches rehearsed: that alone is left to do.
    let sibling = app.spawn_sibling(|_| {}).await;
    heartbeat.stop(&app).await;
    let led = sibling
        .readiness_failing(&sre, &sale, &[Name::SwitchesRehearsed])
        .await;
    let leader = detail(&led, Name::Leader);
    assert!(
        leader.ends_with(" leads the singleton jobs") && !leader.starts_with(&resigned),
        "{leader}"
    );
}

#[tokio::test]
async fn the_fallback_switches_must_be_rehearsed_since_the_newest_instance_started() {
    let app = spawn_app_with(|_| {}).await;
    let (sale, ops, sre) = rehearsed_upcoming_sale(&app).await;
    let fresh = app
        .readiness_failing(&sre, &sale, &[Name::SwitchesRehearsed])
        .await;
    let wanted = "flip switches/entry to closed and back, switches/deduction to db and back, switches/async to record and back";
    assert!(
        detail(&fresh, Name::SwitchesRehearsed).contains(wanted),
        "{}",
        detail(&fresh, Name::SwitchesRehearsed)
    );

    // Half a drill is no drill: the deduction falls back and comes back, the rest waits.
    app.set_switch(&ops, "switches/deduction", "db").await;
    app.set_switch(&ops, "switches/deduction", "redis").await;
    let half = app
        .readiness_failing(&sre, &sale, &[Name::SwitchesRehearsed])
        .await;
    let left = detail(&half, Name::SwitchesRehearsed);
    assert!(!left.contains("switches/deduction to db"), "{left}");
    assert!(left.contains("switches/async to record and back"), "{left}");

    rehearse_switches(&app, &ops, &sale).await;
    let drilled = app.readiness_failing(&sre, &sale, &[]).await;
    assert!(
        detail(&drilled, Name::SwitchesRehearsed).contains("switches/async record at"),
        "{}",
        detail(&drilled, Name::SwitchesRehearsed)
    );

    // A new instance joins: it has not applied the drill, so the drill is due again.
    let sibling = app.spawn_sibling(|_| {}).await;
    app.readiness_failing(&sre, &sale, &[Name::SwitchesRehearsed])
        .await;
    rehearse_switches(&sibling, &ops, &sale).await;
    app.readiness_failing(&sre, &sale, &[]).await;
}

#[tokio::test]
async fn the_last_rehearsal_must_have_passed_and_stayed_within_the_baseline() {
    let app = spawn_app_with(|settings| settings.baselines.report_interval_ms = 200).await;
    let merchant = app.caller(Role::Merchant, Some("acme")).await;
    let ops = app.caller(Role::Ops, None).await;
    let sre = app.caller(Role::Sre, None).await;
    let sale = upcoming_activity(&app, &merchant, &Listing::storm(10, 1, &[])).await;
    prewarm(&app, &ops, &sale).await;
    rehearse_switches(&app, &ops, &sale).await;
    let never = app.readiness_failing(&sre, &sale, &[Name::Rehearsal]).await;
    assert!(
        detail(&never, Name::Rehearsal).contains("seckill rehearse"),
        "{}",
        detail(&never, Name::Rehearsal)
    );

    // Rehearsed, with no baseline marked: go.
    let rehearsal = rehearse(&app, &ops, &sale).await;
    let passed = app.readiness_failing(&sre, &sale, &[]).await;
    assert!(
        detail(&passed, Name::Rehearsal).contains("no baseline run is marked"),
        "{}",
        detail(&passed, Name::Rehearsal)
    );

    // Last week's sale, recorded with one Redis round trip fewer per successful buy, is
    // the baseline: the rehearsal left it.
    let recorded = std::sync::Mutex::new(None);
    wait::until("the rehearsal's run recorded", PATIENCE, || {
        let recorded = &recorded;
        let app = &app;
        let rehearsal = &rehearsal;
        async move {
            let run: Option<i64> =
                sqlx::query_scalar("SELECT id FROM baseline_runs WHERE rehearsal_id = $1")
                    .bind(rehearsal["id"].as_i64())
                    .fetch_optional(&app.db)
                    .await
                    .expect("runs");
            *recorded.lock().expect("not poisoned") = run;
            run.is_some()
        }
    })
    .await;
    let run_id = recorded.into_inner().expect("not poisoned").expect("a run");
    let leaner: i64 = sqlx::query_scalar(
        "INSERT INTO baseline_runs (activity_id, kind, started_at, ended_at, perf, cost, path)
         SELECT activity_id, 'sale', started_at - interval '7 days', ended_at - interval '7 days',
                perf, cost,
                jsonb_set(path, '{success,redis_round_trips}',
                          to_jsonb((path #>> '{success,redis_round_trips}')::float8 - 1))
           FROM baseline_runs WHERE id = $1 RETURNING id",
    )
    .bind(run_id)
    .fetch_one(&app.db)
    .await
    .expect("last week's run");
    app.mark_baseline(&ops, leaner).await;
    let left = app.readiness_failing(&sre, &sale, &[Name::Rehearsal]).await;
    let change = detail(&left, Name::Rehearsal);
    assert!(
        change.contains("+1.0 Redis round trips per successful buy"),
        "{change}"
    );

    // The change is meant: the rehearsal's own run becomes the baseline.
    app.mark_baseline(&ops, run_id).await;
    let within = app.readiness_failing(&sre, &sale, &[]).await;
    assert!(
        detail(&within, Name::Rehearsal).contains(&format!("stayed within baseline run #{run_id}")),
        "{}",
        detail(&within, Name::Rehearsal)
    );
}
