//! An instance whose Redis dies: every buy and every status read answers 503 within the
//! Redis timeout instead of hanging (holding its admission slot), `/readyz` names Redis,
//! and the connection is back within about a second of Redis returning.

use crate::support::{
    app::{json, spawn_app_with, TestApp},
    fixtures::{buy_body, open_sale, storm_settings, Sale},
    redis_server::RedisInstance,
    wait,
};
use futures::future::join_all;
use serde_json::Value;
use std::{
    future::Future,
    time::{Duration, Instant},
};

/// The longest any answer may take with Redis away: the default Redis timeout (2 s) and
/// some slack. A request that takes longer is hanging.
const ANSWER_BOUND: Duration = Duration::from_secs(3);

/// `request`'s outcome, failing the test if it is not there within [`ANSWER_BOUND`].
async fn answered<T>(what: &str, request: impl Future<Output = T>) -> T {
    let started = Instant::now();
    let outcome = tokio::time::timeout(ANSWER_BOUND, request)
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer within {ANSWER_BOUND:?}"));
    let elapsed = started.elapsed();
    assert!(elapsed < ANSWER_BOUND, "{what}: answered after {elapsed:?}");
    outcome
}

async fn buy_degraded(app: &TestApp, sale: &Sale, user: i64, what: &str) {
    let request_id = format!("outage-{user}");
    let (status, body) = answered(what, app.buy(user, &request_id, &buy_body(sale, 1))).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (503, Some("DEGRADED")),
        "{what}: {body}"
    );
}

async fn status_unavailable(app: &TestApp, sale: &Sale, what: &str) {
    let path = format!("/api/activities/{}/status", sale.activity_id);
    let (status, body) = answered(what, async { json(app.get(&path, None).await).await }).await;
    assert_eq!(status, 503, "{what}: {body}");
}

/// The `redis` probe of `/readyz`.
async fn redis_probe(app: &TestApp) -> Value {
    let (_, body) = json(app.get("/readyz", None).await).await;
    body["dependencies"]
        .as_array()
        .and_then(|probes| probes.iter().find(|probe| probe["name"] == "redis"))
        .cloned()
        .unwrap_or(Value::Null)
}

#[tokio::test]
async fn a_redis_outage_answers_degraded_at_once_and_reconnects_when_redis_returns() {
    let mut redis = RedisInstance::start().await;
    let url = redis.url();
    let app = spawn_app_with(|settings| {
        storm_settings(settings);
        settings.redis_url = url.into();
    })
    .await;
    let sale = open_sale(&app, 100, 5).await;
    let (status, body) = app.buy(1, "before", &buy_body(&sale, 1)).await;
    assert_eq!(status, 200, "a buy before the outage: {body}");

    redis.kill().await;
    for user in 100..120 {
        buy_degraded(&app, &sale, user, &format!("sequential buy {user}")).await;
        status_unavailable(&app, &sale, &format!("status after buy {user}")).await;
    }
    let buys = (200..220).map(|user| {
        let what = format!("concurrent buy {user}");
        let sale = &sale;
        let app = &app;
        async move { buy_degraded(app, sale, user, &what).await }
    });
    let reads = (0..10).map(|read| {
        let what = format!("concurrent status {read}");
        let sale = &sale;
        let app = &app;
        async move { status_unavailable(app, sale, &what).await }
    });
    tokio::join!(join_all(buys), join_all(reads));
    let probe = answered("/readyz with Redis down", redis_probe(&app)).await;
    assert_eq!(probe["ok"], false, "{probe}");

    // The restarted Redis is empty: what is asserted is that it is reached again, by the
    // instance itself, so that the first request after Redis returned already gets through.
    redis.restart().await;
    wait::until(
        "the instance connected to the restarted Redis on its own",
        Duration::from_secs(2),
        || async { matches!(redis.other_clients().await, Ok(clients) if clients > 0) },
    )
    .await;
    let probe = answered("/readyz with Redis back", redis_probe(&app)).await;
    assert_eq!(probe["ok"], true, "{probe}");
    let path = format!("/api/activities/{}/status", sale.activity_id);
    let (status, body) = answered("status with Redis back", async {
        json(app.get(&path, None).await).await
    })
    .await;
    assert_ne!(status, 503, "status with Redis back: {body}");
}
