//! `/healthz` (the process answers) and `/readyz` (the instance can take buys: PostgreSQL
//! and Redis answer). RabbitMQ and etcd are probed and reported too, but an instance
//! without them still sells: pre-orders wait in the outbox for the relay, and the last
//! switch values known stay in force. Their probe then names the mode the instance is in.

use axum::{extract::State, http::StatusCode, Json};
use serde::Serialize;
use std::{future::Future, time::Instant};

use ops::state::AppState;

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
    /// Whether the instance is ready only while this answers.
    required: bool,
    /// How the instance works while an optional dependency is away.
    #[serde(skip_serializing_if = "Option::is_none")]
    mode: Option<&'static str>,
}

#[derive(Serialize)]
pub(crate) struct Readiness {
    ready: bool,
    /// The modes the instance is in because optional dependencies are away.
    degraded: Vec<&'static str>,
    dependencies: Vec<Probe>,
}

/// What a dependency is to readiness: required, or optional with the mode its absence
/// puts the instance in.
#[derive(Clone, Copy)]
enum Need {
    Required,
    Optional { mode: &'static str },
}

async fn probe<E: std::fmt::Display>(
    state: &AppState,
    name: &'static str,
    need: Need,
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
    let ok = outcome.is_none();
    let (required, mode) = match need {
        Need::Required => (true, None),
        Need::Optional { mode } => (false, (!ok).then_some(mode)),
    };
    Probe {
        name,
        ok,
        latency_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        error: outcome,
        required,
        mode,
    }
}

/// 200 when PostgreSQL and Redis answer, else 503; the body has every probe, and the modes
/// the instance is in while RabbitMQ or etcd is away.
pub(crate) async fn readyz(State(state): State<AppState>) -> (StatusCode, Json<Readiness>) {
    let (postgres, redis, rabbitmq, etcd) = tokio::join!(
        probe(&state, "postgres", Need::Required, async {
            sqlx::query("SELECT 1").execute(&state.db).await.map(|_| ())
        }),
        probe(&state, "redis", Need::Required, state.redis.ping()),
        probe(
            &state,
            "rabbitmq",
            Need::Optional { mode: "outbox" },
            async { state.amqp.connection().await.map(|_| ()) }
        ),
        probe(
            &state,
            "etcd",
            Need::Optional {
                mode: "last_known_switches"
            },
            state.etcd.probe()
        ),
    );
    let dependencies = vec![postgres, redis, rabbitmq, etcd];
    let ready = dependencies.iter().all(|probe| probe.ok || !probe.required);
    let degraded = dependencies.iter().filter_map(|probe| probe.mode).collect();
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (
        status,
        Json(Readiness {
            ready,
            degraded,
            dependencies,
        }),
    )
}
