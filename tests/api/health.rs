//! Health and observability endpoints: `/healthz` without dependencies, `/readyz` probing the
//! stores (ready on PostgreSQL and Redis, degraded modes named for RabbitMQ and etcd), and
//! `/metrics` counting requests by route and method with label values the client cannot
//! choose.

use crate::support::{
    app::{json, spawn_app, spawn_app_with, TestApp},
    etcd::EtcdInstance,
    proxy::{self, Proxy},
    redis_server::RedisInstance,
    wait,
};
use base::config::Settings;
use secrecy::ExposeSecret;
use serde_json::Value;
use std::{collections::BTreeSet, time::Duration};

#[tokio::test]
async fn healthz_answers_without_touching_dependencies() {
    let app = spawn_app().await;
    let response = app.get("/healthz", None).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.text().await.expect("body"), "ok");
}

#[tokio::test]
async fn readyz_reaches_postgres_redis_rabbitmq_and_etcd() {
    let app = spawn_app().await;
    let (status, body) = json(app.get("/readyz", None).await).await;
    assert_eq!(status, 200, "not ready: {body}");
    let names: Vec<&str> = body["dependencies"]
        .as_array()
        .expect("dependencies")
        .iter()
        .map(|probe| probe["name"].as_str().expect("name"))
        .collect();
    assert_eq!(names, ["postgres", "redis", "rabbitmq", "etcd"]);
    assert!(body["dependencies"]
        .as_array()
        .expect("list")
        .iter()
        .all(|p| p["ok"] == true));
}

#[tokio::test]
async fn metrics_export_request_counts_by_route() {
    let app = spawn_app().await;
    app.get("/healthz", None).await;
    app.get("/readyz", None).await;
    let response = app.get("/metrics", None).await;
    assert_eq!(response.status(), 200);
    let text = response.text().await.expect("body");
    assert!(
        text.contains(
            r#"seckill_http_requests_total{method="GET",route="/healthz",status="200"} 1"#
        ),
        "{text}"
    );
    assert!(
        text.contains(r#"seckill_dependency_up{dependency="etcd"} 1"#),
        "{text}"
    );
    assert!(text.contains("seckill_http_request_duration_seconds_bucket"));
}

#[tokio::test]
async fn metrics_show_the_pools_the_dependency_calls_and_the_items_of_a_buy() {
    let app = spawn_app_with(crate::support::fixtures::storm_settings).await;
    let sale = crate::support::fixtures::open_sale(&app, 3, 1).await;
    app.bought(1, "use-view", &crate::support::fixtures::buy_body(&sale, 1))
        .await;
    app.answer_kept(&sale, 1, "use-view").await;
    let (activity, item) = (sale.activity_id, sale.item_id);
    let item_units = |figure: &str, units: i64| {
        format!(
            r#"seckill_item_units{{activity="{activity}",figure="{figure}",item="{item}"}} {units}"#
        )
    };
    // The item's gauges come from the dashboard sampler's next second; the paid count may
    // lag ten.
    wait::until(
        "the sampler exporting the sold unit",
        Duration::from_secs(15),
        || async {
            let text = app.get("/metrics", None).await.text().await.expect("body");
            text.contains(&item_units("allocated", 1))
        },
    )
    .await;
    let text = app.get("/metrics", None).await.text().await.expect("body");
    for present in [
        // Each Redis call is named by its script, or by its command.
        r#"seckill_dependency_call_duration_seconds_bucket{call="redis.buy",outcome="ok",le="0.0001"}"#,
        // The answer kept for replays, in a pipeline with any others waiting.
        r#"seckill_dependency_call_duration_seconds_count{call="redis.pipeline",outcome="ok"}"#,
        r#"seckill_dependency_call_duration_seconds_count{call="preorder_batch",outcome="ok"} 1"#,
        // The watcher's first read of the switches.
        r#"seckill_dependency_call_duration_seconds_count{call="etcd.get",outcome="ok"}"#,
        r#"seckill_db_pool_connections{state="max"} 8"#,
        r#"seckill_db_pool_acquire_seconds_count{caller="preorder_batch"} 1"#,
        "seckill_db_pool_waiting 0",
        "seckill_admission_in_flight 0",
        "seckill_preorder_queue_depth 0",
        &item_units("total", 3),
        &item_units("redis_stock", 2),
        &item_units("paid", 0),
    ] {
        assert!(text.contains(present), "{present} missing from:\n{text}");
    }
    let in_use = label_values(&text, "seckill_db_pool_connections", "state");
    assert_eq!(
        in_use,
        ["idle", "in_use", "max"].map(str::to_owned).into(),
        "{text}"
    );
}

/// The values `label` takes in the samples of `metric`.
fn label_values(text: &str, metric: &str, label: &str) -> BTreeSet<String> {
    let prefix = format!("{metric}{{");
    let key = format!("{label}=\"");
    text.lines()
        .filter_map(|line| line.strip_prefix(&prefix))
        .filter_map(|labels| {
            let start = labels.find(&key)? + key.len();
            let value = &labels[start..];
            Some(value[..value.find('"')?].to_owned())
        })
        .collect()
}

#[tokio::test]
async fn metrics_labels_take_no_value_the_client_chooses() {
    let app = spawn_app().await;
    for index in 0..20 {
        let method = reqwest::Method::from_bytes(format!("BREW{index}").as_bytes()).expect("token");
        let response = app
            .client
            .request(method, format!("{}/healthz", app.address))
            .send()
            .await
            .expect("sent");
        assert!(response.status().as_u16() < 500, "{}", response.status());
        let path = format!("/no/such/path/{index}-{}", uuid::Uuid::new_v4());
        app.get(&path, None).await;
    }
    app.get("/healthz", None).await;
    let text = app.get("/metrics", None).await.text().await.expect("body");
    let metric = "seckill_http_requests_total";
    let methods = label_values(&text, metric, "method");
    assert!(
        methods.is_subset(&["GET", "other"].map(str::to_owned).into()),
        "methods: {methods:?}"
    );
    assert!(
        methods.contains("other"),
        "made-up methods counted: {methods:?}"
    );
    let routes = label_values(&text, metric, "route");
    assert!(routes.contains("unmatched"), "routes: {routes:?}");
    assert!(
        routes.iter().all(|route| !route.starts_with("/no/such")),
        "a raw path became a label value: {routes:?}"
    );
    let durations = label_values(
        &text,
        "seckill_http_request_duration_seconds_count",
        "route",
    );
    assert!(
        durations.iter().all(|route| !route.starts_with("/no/such")),
        "a raw path became a label value: {durations:?}"
    );
}

/// `/readyz`'s status and the probe named `name`.
async fn readiness(app: &TestApp, name: &str) -> (u16, Value, Value) {
    let (status, body) = json(app.get("/readyz", None).await).await;
    let probe = body["dependencies"]
        .as_array()
        .and_then(|probes| probes.iter().find(|probe| probe["name"] == name))
        .cloned()
        .unwrap_or(Value::Null);
    (status, body, probe)
}

#[tokio::test]
async fn readyz_stays_ready_without_rabbitmq_or_etcd_and_names_the_mode_but_not_without_redis() {
    let amqp_url = Settings::load().expect("settings").amqp_url;
    let mut rabbit = Proxy::start(&proxy::target_of(amqp_url.expose_secret())).await;
    let through = proxy::through(amqp_url.expose_secret(), &rabbit);
    let mut redis = RedisInstance::start().await;
    let redis_url = redis.url();
    let mut etcd = EtcdInstance::start().await;
    let endpoint = etcd.endpoint();
    let app = spawn_app_with(|settings| {
        settings.amqp_url = through.into();
        settings.redis_url = redis_url.into();
        settings.etcd_endpoints = vec![endpoint];
    })
    .await;
    let (status, body, _) = readiness(&app, "rabbitmq").await;
    assert_eq!(status, 200, "{body}");

    rabbit.stop().await;
    wait::until(
        "/readyz sees RabbitMQ away",
        Duration::from_secs(20),
        || async { readiness(&app, "rabbitmq").await.2["ok"] == false },
    )
    .await;
    let (status, body, probe) = readiness(&app, "rabbitmq").await;
    assert_eq!(
        status, 200,
        "RabbitMQ away must not take the instance out: {body}"
    );
    assert_eq!(body["ready"], true, "{body}");
    assert_eq!(probe["mode"], "outbox", "{body}");
    assert_eq!(probe["required"], false, "{body}");
    assert!(probe["error"].is_string(), "{body}");
    assert_eq!(body["degraded"], serde_json::json!(["outbox"]), "{body}");

    etcd.stop().await;
    wait::until(
        "/readyz sees etcd away",
        Duration::from_secs(20),
        || async { readiness(&app, "etcd").await.2["ok"] == false },
    )
    .await;
    let (status, body, probe) = readiness(&app, "etcd").await;
    assert_eq!(
        status, 200,
        "etcd away must not take the instance out: {body}"
    );
    assert_eq!(probe["mode"], "last_known_switches", "{body}");
    assert_eq!(
        body["degraded"],
        serde_json::json!(["outbox", "last_known_switches"]),
        "{body}"
    );

    redis.kill().await;
    wait::until(
        "/readyz sees Redis away",
        Duration::from_secs(20),
        || async { readiness(&app, "redis").await.2["ok"] == false },
    )
    .await;
    let (status, body, probe) = readiness(&app, "redis").await;
    assert_eq!(status, 503, "Redis away: {body}");
    assert_eq!(body["ready"], false, "{body}");
    assert_eq!(probe["ok"], false, "{body}");
    assert_eq!(probe["required"], true, "{body}");
    assert!(probe.get("mode").is_none(), "{body}");

    rabbit.resume().await;
    etcd.restart().await;
    redis.restart().await;
    wait::until("/readyz ready again", Duration::from_secs(30), || async {
        let (status, body) = json(app.get("/readyz", None).await).await;
        status == 200 && body["degraded"] == serde_json::json!([])
    })
    .await;
}
