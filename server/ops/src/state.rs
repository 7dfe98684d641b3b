//! The state every admin route, console server function and worker shares: the sale
//! storey's ([`SaleState`]) and the operators' parts over it, and [`assemble`], which opens
//! every store and puts it together (the `seckill` crate's start-up and command line call it).
//! axum clones it for every request and middleware, so it is one `Arc` around the [`Shared`]
//! parts (profiling showed the field-by-field clone at 3-5% of a request's CPU).

use axum::{extract::FromRequestParts, http::request::Parts};
use contract::Actor;
use std::{convert::Infallible, sync::Arc, time::Duration};

use crate::{control::status::ControlStatus, hotkeys::HotKeys};
use base::{
    amqp::AmqpLink,
    client_address::{self, ClientAddress},
    config::Settings,
    db::{self, MeteredPool},
    error::ApiError,
    etcd::EtcdLink,
    leadership::{Leadership, LeadershipSignal},
    metrics::Metrics,
    redis::RedisStore,
};
use sale::{
    buy::{
        activity_cache::Catalogue,
        deduction::DeductionGate,
        funnel::{Funnel, FunnelParts},
        preorders::PreorderWriter,
    },
    events::{BuyerEvents, Hub},
    identity::{authenticate::Authenticator, buyer_token::BuyerTokens},
    orders::Pipeline,
    payment::simulated::SimulatedCenter,
    switches::{SwitchValues, Switches},
    {SaleShared, SaleState},
};

#[derive(Clone)]
pub struct AppState(Arc<Shared>);

impl std::ops::Deref for AppState {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// Routes take the client's address as the outermost middleware resolved it (else from the
/// peer and, behind trusted proxies, its forwarding headers).
impl FromRequestParts<AppState> for ClientAddress {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Infallible> {
        Ok(Self(client_address::resolve(
            &state.settings.trusted_proxies,
            parts,
        )))
    }
}

/// Admin routes take an [`Actor`], authenticated from the request's credentials.
impl FromRequestParts<AppState> for Actor {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        state.auth.actor(&parts.headers).await
    }
}

/// The operators' side of the state, over the sale's: every handle the sale storey works
/// with is [`SaleState`]'s, reached through it (`state.db` is `state.sale.db`), and the
/// fields here are what only the control plane, hot-key detection, reconciliation, the
/// dashboard and the console need.
pub struct Shared {
    /// What the sale storey works with.
    pub sale: SaleState,
    /// etcd, connected lazily; handlers read switches from memory, never from here.
    pub etcd: EtcdLink,
    /// This instance in the control plane: node id, how current its switches are.
    pub(crate) control: ControlStatus,
    /// Hot-key counting, the keys in force and their reactions, with what only the
    /// operators' side asks of them (the table, the cluster's top).
    pub hotkeys: Arc<HotKeys>,
    /// The live dashboard's recent frames and their viewers (sampled only where HTTP is served).
    pub(crate) dashboard: crate::dashboard::Hub,
    /// The live ledgers computed lately, shared by their viewers, and each viewer's allowance.
    pub(crate) ledgers: Arc<crate::reconcile::viewers::Ledgers>,
    /// The address this instance serves HTTP on, once bound (a rehearsal's load goes there);
    /// set by the one place that binds.
    pub address: std::sync::OnceLock<std::net::SocketAddr>,
    /// The clock the leader's retention job reads ages by.
    pub retention: crate::retention::Retention,
    /// The clock due switch changes are read by.
    pub changes: crate::changes::Changes,
}

/// The sale storey's handles read as the state's own (`state.db`), so the operators' side
/// reads them as before, and a `&AppState` is a `&SaleState` where a sale use case asks one.
impl std::ops::Deref for Shared {
    type Target = SaleState;
    fn deref(&self) -> &SaleState {
        &self.sale
    }
}

/// Routes of the sale storey take a [`SaleState`] out of the whole state.
impl axum::extract::FromRef<AppState> for SaleState {
    fn from_ref(state: &AppState) -> Self {
        state.sale.clone()
    }
}

/// Opens every store and assembles the shared state. The election's signal is handed
/// back apart, for the control plane alone: no handler can set the leadership.
pub async fn assemble(settings: Settings) -> anyhow::Result<(AppState, LeadershipSignal)> {
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
    let state = AppState(Arc::new(Shared {
        etcd: EtcdLink::new(sale.settings.etcd_endpoints.clone(), &sale.metrics),
        sale,
        control,
        dashboard: crate::dashboard::Hub::default(),
        ledgers: Default::default(),
        hotkeys,
        address: std::sync::OnceLock::new(),
        retention: Default::default(),
        changes: Default::default(),
    }));
    Ok((state, election))
}
