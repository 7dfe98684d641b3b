//! `/healthz` (the process answers) and `/readyz` (every dependency answers).

use axum::{extract::State, http::StatusCode, Json};
use serde::Serialize;
use std::{future::Future, time::Instant};

use crate::state::AppState;

pub(crate) async fn healthz() -> &'static str {
    "ok"
}

#[derive(Serialize)]
pub(crate) struct Probe {
    name: &'static str,
    ok: bool,
    latency_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

#[derive(Serialize)]
pub(crate) struct Readiness {
    ready: bool,
    dependencies: Vec<Probe>,
}

async fn probe<E: std::fmt::Display>(
    state: &AppState,
    name: &'static str,
    check: impl Future<Output = Result<(), E>>,
) -> Probe {
    let started = Instant::now();
    let outcome = match tokio::time::timeout(state.settings.probe_timeout(), check).await {
        Ok(Ok(())) => None,
        Ok(Err(error)) => Some(error.to_string()),
        Err(_) => Some("timed out".to_owned()),
    };
    state
        .metrics
        .dependency_up
        .with_label_values(&[name])
        .set(i64::from(outcome.is_none()));
    Probe {
        name,
        ok: outcome.is_none(),
        latency_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        error: outcome,
    }
}

/// 200 when PostgreSQL, Redis, RabbitMQ and etcd all answer, else 503; the body says which.
pub(crate) async fn readyz(State(state): State<AppState>) -> (StatusCode, Json<Readiness>) {
    let (postgres, redis, rabbitmq, etcd) = tokio::join!(
        probe(&state, "postgres", async {
            sqlx::query("SELECT 1").execute(&state.db).await.map(|_| ())
        }),
        probe(&state, "redis", state.redis.ping()),
        probe(&state, "rabbitmq", async {
            state.amqp.connection().await.map(|_| ())
        }),
        probe(&state, "etcd", state.etcd.probe()),
    );
    let dependencies = vec![postgres, redis, rabbitmq, etcd];
    let ready = dependencies.iter().all(|probe| probe.ok);
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (
        status,
        Json(Readiness {
            ready,
            dependencies,
        }),
    )
}
