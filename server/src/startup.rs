//! Building and running the application: connect the stores, assemble the router, bind.
//! Tests call [`Application::build`] with port 0 and talk to the port it reports.

use axum::{extract::DefaultBodyLimit, middleware, routing::get, serve::ListenerExt, Router};
use std::{net::SocketAddr, time::Duration};
use tower_http::{
    limit::RequestBodyLimitLayer,
    trace::{DefaultOnFailure, TraceLayer},
};

use crate::console;
use crate::web::connections::{CappedListener, ConnectionGauges};
use base::{client_address::ClientAddress, config::Settings, db};
use ops::{
    admin,
    control::{self, ControlPlane},
    state::{assemble, AppState},
};
use sale::{buy, orders};

/// Largest body a JSON extractor reads (answered `413 PAYLOAD_TOO_LARGE` beyond); the buyer
/// API caps its own far lower.
const MAX_JSON_BYTES: usize = 1024 * 1024;
/// Backstop for every route, including the console's server functions.
const MAX_BODY_BYTES: usize = 4 * MAX_JSON_BYTES;

pub struct Application {
    listener: tokio::net::TcpListener,
    router: Router,
    state: AppState,
    control: ControlPlane,
}

impl Application {
    /// Refuses secrets anyone could know on a non-loopback address (before touching any
    /// store), connects PostgreSQL and Redis (required to serve), prepares the lazy RabbitMQ
    /// and etcd links, migrates, and binds the listener.
    pub async fn build(settings: Settings) -> anyhow::Result<Self> {
        settings.check_secrets()?;
        let (state, election) = assemble(settings).await?;
        db::migrate(&state.db).await?;
        sale::sale_page::load_all(&state).await?;
        sale::sale_page::spawn_refresher(&state);
        ops::prewarm::handover::spawn(state.clone());
        let listener = tokio::net::TcpListener::bind(state.settings.bind).await?;
        state.payment.listening_on(listener.local_addr()?);
        // Set once, by the one place that binds.
        let _ = state.address.set(listener.local_addr()?);
        let router = router(state.clone());
        let control = control::start(&state, election, listener.local_addr()?).await;
        ops::dashboard::spawn(&state);
        sale::events::hub::spawn(&state);
        sale::events::units::spawn(&state);
        ops::hotkeys::spawn(&state);
        ops::changes::spawn(&state);
        ops::baselines::spawn(&state);
        if state.settings.workers {
            workers(&state);
        }
        Ok(Self {
            listener,
            router,
            state,
            control,
        })
    }

    pub fn port(&self) -> u16 {
        self.listener
            .local_addr()
            .map(|addr| addr.port())
            .unwrap_or(0)
    }

    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// The control plane's tasks (tests stop one instance's with it).
    pub fn control(&self) -> &ControlPlane {
        &self.control
    }

    pub async fn run_until_stopped(self) -> std::io::Result<()> {
        tracing::info!(address = %self.listener.local_addr()?, "serving");
        let metrics = &self.state.metrics;
        let listener = CappedListener::new(
            self.listener,
            self.state.settings.max_connections,
            Some(Duration::from_secs(self.state.settings.connection_idle_s))
                .filter(|idle| !idle.is_zero()),
            ConnectionGauges {
                open: metrics.http_connections_open.clone(),
                waited: metrics.http_connections_waited.clone(),
                idle_closed: metrics.http_connections_idle_closed.clone(),
            },
        )
        // axum hands a listener's peer address to `ConnectInfo` for its own listeners and
        // for this wrapper of any other; the tap itself does nothing.
        .tap_io(|_| {});
        axum::serve(
            listener,
            self.router
                .into_make_service_with_connect_info::<SocketAddr>(),
        )
        .with_graceful_shutdown(shutdown_signal())
        .await?;
        // Hand the election and the node key back at once rather than after a lease TTL.
        self.control.shutdown().await;
        Ok(())
    }
}

/// Opens every store and assembles the shared state, for the CLI: it runs no election,
/// so it never leads.
pub(crate) async fn connect(settings: Settings) -> anyhow::Result<AppState> {
    let (state, _no_election) = assemble(settings).await?;
    Ok(state)
}

/// `seckill worker`: the pipeline's workers and the control plane (which elects the leader
/// of the singleton jobs), without the HTTP server, until SIGINT or SIGTERM.
pub(crate) async fn run_workers(settings: Settings) -> anyhow::Result<()> {
    // Workers sign the simulated center's callbacks: the same rule as serving.
    settings.check_secrets()?;
    let (state, election) = assemble(settings).await?;
    db::migrate(&state.db).await?;
    let control = control::start(&state, election, state.settings.bind).await;
    ops::hotkeys::spawn_aggregator(&state);
    // Its cost is the sale's too, and it may be the leader that computes the runs.
    ops::baselines::spawn(&state);
    let workers = workers(&state);
    tracing::info!("workers running");
    shutdown_signal().await;
    control.shutdown().await;
    for worker in workers {
        worker.abort();
    }
    Ok(())
}

/// Every background worker: the order pipeline's, and the leader's reconciliation and
/// rehearsal clean-ups and retention.
fn workers(state: &AppState) -> Vec<tokio::task::JoinHandle<()>> {
    let mut workers = orders::workers::spawn(state);
    workers.push(ops::reconcile::auto::spawn(state));
    workers.push(ops::rehearsal::service::spawn_leader(state));
    workers.push(ops::retention::spawn(state));
    workers.push(sale::lottery::draw::spawn(state));
    workers
}

pub(crate) fn router(state: AppState) -> Router {
    Router::new()
        .route("/healthz", get(crate::web::health::healthz))
        .route("/readyz", get(crate::web::health::readyz))
        .route("/metrics", get(crate::web::http_metrics::render))
        .route("/api/openapi.json", get(crate::openapi::serve))
        .nest("/api", crate::openapi::buyer_routes().into_router())
        .nest("/admin/api", admin::routes::router())
        .merge(sale::sale_page::routes::router())
        .merge(console::router(&state))
        .layer(middleware::from_fn_with_state(
            Duration::from_millis(state.settings.body_patience_ms),
            base::slow_bodies::patience,
        ))
        .layer(middleware::from_fn_with_state(state.clone(), console::csrf::guard))
        .layer(middleware::from_fn_with_state(state.clone(), crate::web::http_metrics::track))
        .layer(DefaultBodyLimit::max(MAX_JSON_BYTES))
        .layer(RequestBodyLimitLayer::new(MAX_BODY_BYTES))
        // The span carries the client's X-Request-ID when it is a valid one, else an id made
        // up for the span alone: the request keeps its headers, because the buyer API must
        // see whether the client sent one.
        .layer(TraceLayer::new_for_http().make_span_with(move |request: &axum::http::Request<_>| {
            let request_id = request
                .headers()
                .get("x-request-id")
                .and_then(|v| v.to_str().ok())
                .filter(|id| buy::rules::valid_request_id(id))
                .map_or_else(|| format!("gen-{}", uuid::Uuid::new_v4().simple()), str::to_owned);
            // The client as every limit counts it, so a log line names the buyer's address
            // rather than the balancer's (resolved once, by the layer outside this one).
            let client = request
                .extensions()
                .get::<ClientAddress>()
                .map(|client| tracing::field::display(client.0));
            // At info, so that the warnings written inside it name the request; a span
            // writes no line of its own.
            tracing::info_span!("http", method = %request.method(), uri = %request.uri(), request_id, client)
        })
        // A 5xx is logged (rate-limited) where its cause is known; one line per failed
        // response here would let a storm fill the disk.
        .on_failure(DefaultOnFailure::new().level(tracing::Level::DEBUG)))
        .layer(middleware::map_request_with_state(state.clone(), crate::web::client_address::remember))
        .with_state(state)
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = terminate => {},
    }
}
