//! The state every handler and server function shares. axum clones it for every request
//! and middleware, so it is one `Arc` around the [`Shared`] parts (profiling showed the
//! field-by-field clone, Leptos options included, at 3-5% of a request's CPU).

use axum::{extract::FromRequestParts, http::request::Parts};
use contract::Actor;
use leptos::config::LeptosOptions;
use sqlx::PgPool;
use std::sync::Arc;

use crate::{
    buy::funnel::Funnel,
    control::{leader::Leadership, status::ControlStatus, switches::Switches},
    identity::authenticate::Authenticator,
    orders::Pipeline,
    payment::PaymentGateway,
};
use base::{
    amqp::AmqpLink, config::Settings, error::ApiError, etcd::EtcdLink, metrics::Metrics,
    redis::RedisStore,
};

#[derive(Clone)]
pub struct AppState(Arc<Shared>);

impl AppState {
    pub(crate) fn new(shared: Shared) -> Self {
        Self(Arc::new(shared))
    }
}

impl std::ops::Deref for AppState {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// Admin routes take an [`Actor`], authenticated from the request's credentials.
impl FromRequestParts<AppState> for Actor {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        state.auth.actor(&parts.headers).await
    }
}

/// The console's routes take the Leptos options out of the state.
impl axum::extract::FromRef<AppState> for LeptosOptions {
    fn from_ref(state: &AppState) -> Self {
        state.leptos.clone()
    }
}

pub struct Shared {
    /// The settings this process started with.
    pub settings: Arc<Settings>,
    /// PostgreSQL, the source of truth.
    pub db: PgPool,
    /// Redis, the traffic-bearing layer; keys under `settings.redis_prefix`.
    pub redis: RedisStore,
    /// RabbitMQ, connected lazily and re-connected when it drops.
    pub amqp: AmqpLink,
    /// etcd, connected lazily; handlers read switches from memory, never from here.
    pub etcd: EtcdLink,
    /// Every metric of the process.
    pub metrics: Metrics,
    /// Console logins, sessions and admin API tokens.
    pub auth: Authenticator,
    /// Where the console's bundle lives and what it is called.
    pub(crate) leptos: LeptosOptions,
    /// Verifies buyer tokens, for every buyer route (the funnel holds the same).
    pub buyer_tokens: Arc<crate::identity::buyer_token::BuyerTokens>,
    /// The activities and items as the buy path reads them from memory (the funnel holds the
    /// same); the pre-warm, readiness and reconciliation refresh or read it.
    pub catalogue: Arc<crate::buy::activity_cache::Catalogue>,
    /// Which layer deducts now (the funnel holds the same); the hand-over and reconciliation
    /// read it.
    pub deduction: Arc<crate::buy::deduction::DeductionGate>,
    /// The buy funnel with its limits and pre-order writer.
    pub funnel: Arc<Funnel>,
    /// Switches and limits as this instance applies them (watched from etcd).
    pub switches: Switches,
    /// Whether this instance runs the singleton jobs now: read-only, the control plane's
    /// election alone sets it.
    pub leadership: Leadership,
    /// This instance in the control plane: node id, how current its switches are.
    pub(crate) control: ControlStatus,
    /// The payment center orders are paid through (only the built-in simulated one exists).
    pub(crate) payment: Arc<dyn PaymentGateway>,
    /// The RabbitMQ order pipeline: topology and publishers (its workers run apart).
    pub pipeline: Pipeline,
    /// The published sale pages this instance serves from memory.
    pub sale_pages: crate::sale_page::SalePages,
    /// Hot-key counting, the keys in force and their reactions.
    pub hotkeys: Arc<crate::hotkeys::HotKeys>,
    /// The live dashboard's recent frames and their viewers (sampled only where HTTP is served).
    pub(crate) dashboard: crate::dashboard::Hub,
    /// The live ledgers computed lately, shared by their viewers, and each viewer's allowance.
    pub(crate) ledgers: Arc<crate::reconcile::viewers::Ledgers>,
    /// The address this instance serves HTTP on, once bound (a rehearsal's load goes there).
    pub(crate) address: std::sync::OnceLock<std::net::SocketAddr>,
    /// The clock the leader's retention job reads ages by.
    pub retention: crate::retention::Retention,
    /// Lottery sales: the clock registration windows, draws and codes' lifetimes are judged by.
    pub lottery: crate::lottery::Lottery,
    /// Publishes buyer events (an order's or a registration's new state) to their streams.
    pub events: crate::events::BuyerEvents,
    /// The buyer event streams this instance holds, fed by its one subscription.
    pub event_hub: Arc<crate::events::Hub>,
    /// The clock due switch changes are read by.
    pub changes: crate::changes::Changes,
}
