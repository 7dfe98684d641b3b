//! What the server writes to its log in a storm: the real `seckill serve` binary as a
//! process of its own, its output on a pipe, counted line by line. With Redis away, ten
//! thousand failing buys and a run of failing status reads write a few dozen lines at most,
//! and the lines written inside a request name its request id.

use crate::support::{
    app::{spawn_app_with, TestApp},
    fixtures::{buy_body, open_sale, storm_settings, token, Sale},
    redis_server::RedisInstance,
    serve_process::ServeProcess,
};
use futures::{stream, StreamExt};

/// "A few dozen": what a storm may write at most, background jobs' lines included.
const MOST_LINES: usize = 48;

/// A buy sent to `address` as buyer `user` with `request_id`: its status.
async fn buy_at(app: &TestApp, address: &str, sale: &Sale, user: i64, request_id: &str) -> u16 {
    app.client
        .post(format!("{address}/api/seckill/buy"))
        .bearer_auth(token(app, user))
        .header("x-request-id", request_id)
        .json(&buy_body(sale, 1))
        .send()
        .await
        .map(|response| response.status().as_u16())
        .unwrap_or(0)
}

#[tokio::test]
async fn a_storm_of_failing_requests_writes_a_few_dozen_log_lines() {
    let mut redis = RedisInstance::start().await;
    let url = redis.url();
    let app = spawn_app_with(|settings| {
        storm_settings(settings);
        settings.redis_url = url.into();
    })
    .await;
    let sale = open_sale(&app, 100_000, 1).await;
    let serve = ServeProcess::start(&app.state.settings, &app.client).await;
    let address = serve.address.clone();
    let first = buy_at(&app, &address, &sale, 1, "before-the-storm").await;
    assert_eq!(first, 200, "a buy through the process before the storm");
    let before = serve.line_count();

    redis.kill().await;
    let statuses: Vec<u16> = stream::iter(0..10_000i64)
        .map(|n| {
            let (app, address, sale) = (&app, &address, &sale);
            async move { buy_at(app, address, sale, 1_000 + n, &format!("storm-{n}")).await }
        })
        .buffer_unordered(64)
        .collect()
        .await;
    let failed = statuses.iter().filter(|status| **status == 503).count();
    assert_eq!(failed, 10_000, "every buy fails with Redis away");
    let status_path = format!("{address}/api/activities/{}/status", sale.activity_id);
    for _ in 0..200 {
        let response = app.client.get(&status_path).send().await.expect("sent");
        assert_eq!(response.status(), 503, "status with Redis away");
    }

    let lines = serve.finish().await;
    let storm = &lines[before..];
    assert!(
        storm.len() <= MOST_LINES,
        "{} lines for a storm of 10,200 failing requests; the first ones:\n{}",
        storm.len(),
        storm[..storm.len().min(60)].join("\n")
    );
    assert!(
        storm
            .iter()
            .any(|line| line.contains("WARN") || line.contains("ERROR")),
        "the outage is not logged at all:\n{}",
        storm.join("\n")
    );
    assert!(
        storm.iter().any(|line| line.contains("storm-")),
        "no line names the request it was written in:\n{}",
        storm.join("\n")
    );
}
