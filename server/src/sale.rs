//! The state of the sale storey: the handles the capabilities a buyer's request touches
//! (identity, catalog, buy, orders, payment, lottery, events, sale pages, the audit they
//! write) work with, and nothing of the operators' tools. Those capabilities take a
//! [`SaleState`], never the whole [`AppState`](crate::state::AppState): the operators' side
//! (control plane, hot-key detection, reconciliation, rehearsal, dashboard...) extends this
//! state, and the sale side cannot reach up into it.
//!
//! Like the whole state, it is one `Arc` around its parts: axum clones it per request.

use std::sync::Arc;

use sqlx::PgPool;

use crate::{
    buy::{
        activity_cache::Catalogue, deduction::DeductionGate, funnel::Funnel, hot_keys::HotKeyGate,
    },
    identity::{authenticate::Authenticator, buyer_token::BuyerTokens},
    orders::Pipeline,
    payment::PaymentGateway,
    switches::Switches,
};
use base::{amqp::AmqpLink, config::Settings, metrics::Metrics, redis::RedisStore};

#[derive(Clone)]
pub struct SaleState(Arc<SaleShared>);

impl SaleState {
    pub(crate) fn new(shared: SaleShared) -> Self {
        Self(Arc::new(shared))
    }
}

impl std::ops::Deref for SaleState {
    type Target = SaleShared;
    fn deref(&self) -> &SaleShared {
        &self.0
    }
}

pub struct SaleShared {
    /// The settings this process started with.
    pub settings: Arc<Settings>,
    /// PostgreSQL, the source of truth.
    pub db: PgPool,
    /// Redis, the traffic-bearing layer; keys under `settings.redis_prefix`.
    pub redis: RedisStore,
    /// RabbitMQ, connected lazily and re-connected when it drops.
    pub amqp: AmqpLink,
    /// Every metric of the process.
    pub metrics: Metrics,
    /// Console logins, sessions and admin API tokens.
    pub auth: Authenticator,
    /// Verifies buyer tokens, for every buyer route (the funnel holds the same).
    pub buyer_tokens: Arc<BuyerTokens>,
    /// The activities and items as the buy path reads them from memory (the funnel holds the
    /// same); the pre-warm, readiness and reconciliation refresh or read it.
    pub catalogue: Arc<Catalogue>,
    /// Which layer deducts now (the funnel holds the same); the hand-over and reconciliation
    /// read it.
    pub deduction: Arc<DeductionGate>,
    /// The buy funnel with its limits and pre-order writer.
    pub funnel: Arc<Funnel>,
    /// Switches and limits as this instance applies them (the control plane's watcher
    /// writes them from etcd).
    pub switches: Switches,
    /// Whether this instance runs the singleton jobs now: read-only, the control plane's
    /// election alone sets it.
    pub leadership: base::leadership::Leadership,
    /// The payment center orders are paid through (only the built-in simulated one exists).
    pub(crate) payment: Arc<dyn PaymentGateway>,
    /// The RabbitMQ order pipeline: topology and publishers (its workers run apart).
    pub pipeline: Pipeline,
    /// The published sale pages this instance serves from memory.
    pub sale_pages: crate::sale_page::SalePages,
    /// The hot keys as the buy path meets them: counted, and reacted to.
    pub hotkeys: Arc<dyn HotKeyGate>,
    /// Lottery sales: the clock registration windows, draws and codes' lifetimes are judged by.
    pub lottery: crate::lottery::Lottery,
    /// Publishes buyer events (an order's or a registration's new state) to their streams.
    pub events: crate::events::BuyerEvents,
    /// The buyer event streams this instance holds, fed by its one subscription.
    pub event_hub: Arc<crate::events::Hub>,
}
