//! The state every handler and server function shares. Cloning is cheap: each field is a
//! pool, a multiplexed connection or an `Arc`.

use leptos::config::LeptosOptions;
use sqlx::PgPool;
use std::sync::Arc;

use crate::{
    config::Settings,
    identity::authenticate::Authenticator,
    metrics::Metrics,
    services::buy::Funnel,
    storage::{amqp::AmqpLink, etcd::EtcdLink, redis::RedisStore},
};

#[derive(Clone, axum::extract::FromRef)]
pub struct AppState {
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
    pub leptos: LeptosOptions,
    /// The buy funnel with its in-memory catalogue, limits and pre-order writer.
    pub funnel: Arc<Funnel>,
}
