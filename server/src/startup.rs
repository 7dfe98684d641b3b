//! Building and running the application: connect the stores, assemble the router, bind.
//! Tests call [`Application::build`] with port 0 and talk to the port it reports.

use axum::{extract::DefaultBodyLimit, middleware, routing::get, serve::ListenerExt, Router};
use leptos::config::LeptosOptions;
use std::{net::SocketAddr, sync::Arc, time::Duration};
use tower_http::{
    limit::RequestBodyLimitLayer,
    trace::{DefaultOnFailure, TraceLayer},
};

use crate::web::connections::{CappedListener, ConnectionGauges};
use crate::{
    admin,
    control::{self, status::ControlStatus, ControlPlane},
    hotkeys::HotKeys,
    state::{AppState, Shared},
};
use base::{
    amqp::AmqpLink,
    client_address::ClientAddress,
    config::Settings,
    db::{self, MeteredPool},
    etcd::EtcdLink,
    leadership::{Leadership, LeadershipSignal},
    metrics::Metrics,
    redis::RedisStore,
};
use sale::{
    buy,
    buy::{
        activity_cache::Catalogue,
        deduction::DeductionGate,
        funnel::{Funnel, FunnelParts},
        preorders::PreorderWriter,
    },
    events::{BuyerEvents, Hub},
    identity::{authenticate::Authenticator, buyer_token::BuyerTokens},
    orders::{self, Pipeline},
    payment::simulated::SimulatedCenter,
    switches::{SwitchValues, Switches},
    {SaleShared, SaleState},
};

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
        crate::prewarm::handover::spawn(state.clone());
        let listener = tokio::net::TcpListener::bind(state.settings.bind).await?;
        state.payment.listening_on(listener.local_addr()?);
        // Set once, by the one place that binds.
        let _ = state.address.set(listener.local_addr()?);
        let router = router(state.clone());
        let control = control::start(&state, election, listener.local_addr()?).await;
        crate::dashboard::spawn(&state);
        sale::events::hub::spawn(&state);
        sale::events::units::spawn(&state);
        crate::hotkeys::spawn(&state);
        crate::changes::spawn(&state);
        crate::baselines::spawn(&state);
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

/// Opens every store and assembles the shared state. The election's signal is handed
/// back apart, for the control plane alone: no handler can set the leadership.
async fn assemble(settings: Settings) -> anyhow::Result<(AppState, LeadershipSignal)> {
    let db = db::connect(&settings).await?;
    let metrics = Metrics::new();
    let redis = RedisStore::connect(&settings, &metrics).await?;
    let auth = Authenticator::new(db.clone(), redis.clone(), metrics.clone(), &settings);
    let buy = &settings.buy;
    let switches = Switches::new(SwitchValues::from_settings(buy));
    let (election, leadership) = Leadership::channel();
    let control = ControlStatus::new(&settings.control);
    let amqp = AmqpLink::new(settings.amqp_url.clone());
    let pipeline = Pipeline::new(&amqp, &settings, &db, &metrics);
    let preorders = PreorderWriter::spawn(
        MeteredPool::new(db.clone(), &metrics, "preorder_batch"),
        pipeline.publisher.clone(),
        buy.preorder_batch_max,
        Duration::from_micros(buy.preorder_batch_wait_us),
        metrics.preorder_batch_size.clone(),
        metrics.dependency_calls.clone(),
    );
    let hotkeys = Arc::new(HotKeys::new(buy.hotkey_detection, metrics.clone()));
    let buyer_tokens = Arc::new(BuyerTokens::new(&settings.jwt_secret));
    let catalogue = Arc::new(Catalogue::new(
        db.clone(),
        redis.clone(),
        buy,
        hotkeys.clone(),
        metrics.catalogue_reads.clone(),
    ));
    let deduction = Arc::new(DeductionGate::new(switches.current().deduction));
    let lottery = sale::lottery::Lottery::new(
        redis.clone(),
        buy.registration_call_max,
        metrics.lottery.registration_call_size.clone(),
    );
    let funnel = Arc::new(Funnel::new(FunnelParts {
        settings: buy.clone(),
        switches: switches.clone(),
        catalogue: catalogue.clone(),
        deduction: deduction.clone(),
        hotkeys: hotkeys.clone(),
        tokens: buyer_tokens.clone(),
        preorders,
        redis: redis.clone(),
        db: db.clone(),
        metrics: metrics.clone(),
        lottery_clock: lottery.clock(),
    }));
    // A bundle built with content-named files is named through its hash file; a site root
    // without one (a bundle built by an older script) keeps the plain names.
    let hash_file = crate::admin::console_site::hash_file(&settings.site_root);
    let leptos = LeptosOptions::builder()
        .output_name(app::BUNDLE_NAME)
        .site_root(settings.site_root.to_string_lossy().into_owned())
        .site_pkg_dir("pkg")
        .site_addr(settings.bind)
        .hash_files(hash_file.is_some())
        .hash_file(
            hash_file
                .map(|path| path.to_string_lossy().into_owned())
                .unwrap_or_else(|| "hash.txt".to_owned())
                .into(),
        )
        .build();
    let payment = Arc::new(SimulatedCenter::new(
        db.clone(),
        settings.pay_secret.clone(),
        settings.payment.clone(),
        metrics.clone(),
    ));
    let sale_pages = sale::sale_page::SalePages::new(&settings.sale_page);
    let events = BuyerEvents::spawn(redis.clone(), &settings.events, metrics.clone());
    let event_hub = Hub::new(settings.events.max_streams, metrics.clone());
    let sale = SaleState::new(SaleShared {
        amqp,
        pipeline,
        settings: Arc::new(settings),
        db,
        redis,
        metrics,
        auth,
        buyer_tokens,
        catalogue,
        deduction,
        funnel,
        switches,
        leadership,
        payment,
        sale_pages,
        hotkeys: hotkeys.clone(),
        lottery,
        events,
        event_hub,
    });
    let state = AppState::new(Shared {
        etcd: EtcdLink::new(sale.settings.etcd_endpoints.clone(), &sale.metrics),
        sale,
        leptos,
        control,
        dashboard: crate::dashboard::Hub::default(),
        ledgers: Default::default(),
        hotkeys,
        address: std::sync::OnceLock::new(),
        retention: Default::default(),
        changes: Default::default(),
    });
    Ok((state, election))
}

/// `seckill worker`: the pipeline's workers and the control plane (which elects the leader
/// of the singleton jobs), without the HTTP server, until SIGINT or SIGTERM.
pub(crate) async fn run_workers(settings: Settings) -> anyhow::Result<()> {
    // Workers sign the simulated center's callbacks: the same rule as serving.
    settings.check_secrets()?;
    let (state, election) = assemble(settings).await?;
    db::migrate(&state.db).await?;
    let control = control::start(&state, election, state.settings.bind).await;
    crate::hotkeys::spawn_aggregator(&state);
    // Its cost is the sale's too, and it may be the leader that computes the runs.
    crate::baselines::spawn(&state);
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
    workers.push(crate::reconcile::auto::spawn(state));
    workers.push(crate::rehearsal::service::spawn_leader(state));
    workers.push(crate::retention::spawn(state));
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
        .merge(admin::console::router(state.clone()))
        .layer(middleware::from_fn_with_state(
            Duration::from_millis(state.settings.body_patience_ms),
            base::slow_bodies::patience,
        ))
        .layer(middleware::from_fn_with_state(state.clone(), admin::csrf::guard))
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
