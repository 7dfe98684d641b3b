//! The pre-sale readiness check against real services: a pre-warmed, open activity is
//! ready; each check fails when exactly its own thing is broken (Redis stock edited, the
//! scripts flushed, a switch flipped, the consumers stopped, a message dead-lettered) and
//! passes again after the fix; the console's readiness page shows the same verdicts.

use crate::support::{
    app::{json, spawn_app_with, TestApp},
    fixtures::{buy_body, open_sale, Caller, Sale},
    redis_server::RedisInstance,
    wait::{self, PATIENCE},
};
use contract::{Readiness, ReadinessCheckName as Name, Role, SaleItem};
use seckill::orders::{
    create_order,
    mq::{message::OrderCreated, topology::Outgoing},
    pay_timeout,
};
use serde_json::{json, Value};

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

    async fn prewarm(&self, ops: &Caller, sale: &Sale) {
        let path = format!("/admin/api/activities/{}/prewarm", sale.activity_id);
        let (status, body) = json(self.post_json(&path, Some(ops), &json!({})).await).await;
        assert_eq!(status, 200, "{body}");
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

fn detail(report: &Readiness, name: Name) -> String {
    report.check(name).expect("the check ran").detail.clone()
}

#[tokio::test]
async fn a_prewarmed_open_activity_is_ready_until_its_stock_scripts_or_switches_are_broken() {
    // A Redis of its own: flushing the scripts of the shared one would break other tests.
    let redis = RedisInstance::start().await;
    let app = spawn_app_with(|settings| settings.redis_url = redis.url().into()).await;
    let sale = open_sale(&app, 10, 1).await;
    let ops = app.caller(Role::Ops, None).await;
    let sre = app.caller(Role::Sre, None).await;
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
    assert!(html.contains("NO-GO: 1 of 11 checks fail"), "{html}");
    let first_row = html.find("<tr data-check=").expect("check rows");
    assert!(
        html[first_row..].starts_with(r#"<tr data-check="stock" data-ok="false""#),
        "{html}"
    );
    app.prewarm(&ops, &sale).await;
    app.readiness_failing(&sre, &sale, &[]).await;
    let html = app.console_page(&page, &session).await;
    assert!(html.contains("GO: all 11 checks pass"), "{html}");

    // The scripts flushed: the check lists what is missing; a pre-warm loads them again.
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut connection)
        .await
        .expect("flush the scripts");
    let flushed = app.readiness_failing(&sre, &sale, &[Name::Scripts]).await;
    assert!(
        detail(&flushed, Name::Scripts).contains("buy"),
        "{}",
        detail(&flushed, Name::Scripts)
    );
    app.prewarm(&ops, &sale).await;
    app.readiness_failing(&sre, &sale, &[]).await;

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
    let sale = open_sale(&app, 10, 1).await;
    let sre = app.caller(Role::Sre, None).await;
    let stopped = app.readiness_failing(&sre, &sale, &[Name::Consumers]).await;
    let consumers = detail(&stopped, Name::Consumers);
    assert!(consumers.contains("no consumer on"), "{consumers}");
    let _create = create_order::spawn(&app.state);
    let _pay_timeout = pay_timeout::spawn(&app.state);
    app.readiness_failing(&sre, &sale, &[]).await;
}

#[tokio::test]
async fn a_dead_letter_makes_the_sale_not_ready_until_it_is_requeued() {
    let app = spawn_app_with(|_| {}).await;
    let sale = open_sale(&app, 10, 1).await;
    let ops = app.caller(Role::Ops, None).await;
    let sre = app.caller(Role::Sre, None).await;
    app.readiness_failing(&sre, &sale, &[]).await;

    // A real order's create-order event, dead-lettered as the queue's delivery limit would.
    let (status, answer) = app.buy(1, "rq-1", &buy_body(&sale, 1)).await;
    assert_eq!(status, 200, "{answer}");
    let payload: Value = sqlx::query_scalar("SELECT payload FROM outbox LIMIT 1")
        .fetch_one(&app.db)
        .await
        .expect("the outbox row");
    let event: OrderCreated = serde_json::from_value(payload).expect("an event");
    let topology = &app.state.pipeline.topology;
    let dead = Outgoing {
        exchange: topology.dead_exchange.clone(),
        ..topology.order_created(&event)
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
