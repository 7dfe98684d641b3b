//! Health and observability endpoints: `/healthz` without dependencies, `/readyz` probing the
//! stores, and `/metrics` counting requests by route.

use crate::support::app::{json, spawn_app};

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
