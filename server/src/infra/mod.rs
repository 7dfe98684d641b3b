//! Generic plumbing every capability shares: configuration, telemetry, the store clients
//! (PostgreSQL pool and migrations, Redis connection and key layout, RabbitMQ and etcd links),
//! metrics and their HTTP routes, health probes and the paging window of admin listings.
//! Nothing here knows what a buy, an order or a switch is.

pub mod amqp;
pub mod config;
pub mod db;
pub mod etcd;
pub mod health;
pub mod http_metrics;
pub mod metrics;
pub mod paging;
pub mod redis;
pub mod telemetry;
