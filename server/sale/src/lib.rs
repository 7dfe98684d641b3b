//! The sale storey of the seckill server: what a buyer's request touches, and the state it
//! works with. `identity` (admin logins and tokens, buyer tokens, the permission gate),
//! `catalog` (items and activities, the rule that tells a rehearsal's copy), `buy` (the buyer
//! API and its funnel: admission, Redis pre-deduction, group-committed pre-orders), `orders`
//! (the RabbitMQ pipeline, pay timeout, outbox relay, dead letters, order admin), `payment`,
//! `lottery` (qualification-code sales), `events` (buyer events pushed to the sale page),
//! `sale_page` (the static sale page: publish, serve, the button script), `audit` (the log
//! every operator action writes) and `switches` (the values this instance applies).
//!
//! The operators' storey (the `seckill-server` crate: control plane, hot-key detection,
//! reconciliation, rehearsal, readiness, dashboard...) depends on this crate and extends its
//! [`SaleState`]; Cargo keeps anything here from reaching up into it. Beneath it is `base`.
//!
//! Like the whole state, [`SaleState`] is one `Arc` around its parts: axum clones it per
//! request.

pub mod audit;
pub mod buy;
pub mod catalog;
pub mod events;
pub mod identity;
pub mod lottery;
pub mod orders;
pub mod payment;
pub mod sale_page;
pub mod switches;

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
    pub fn new(shared: SaleShared) -> Self {
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
    pub payment: Arc<dyn PaymentGateway>,
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
