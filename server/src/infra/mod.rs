//! Generic plumbing every capability shares: configuration, telemetry, who a request comes
//! from (behind trusted proxies), the clock rules read, the HTTP listener's
//! cap on open connections, the patience with slow request bodies, the store clients
//! (PostgreSQL pool and migrations, Redis connection and key layout, RabbitMQ and etcd links),
//! metrics and their HTTP routes, health probes, the fault points tests crash a process at, percentiles of samples, the paging window of admin listings, the
//! route table routers are built from, the rate limit on warning lines and the token bucket of local rate limits.
//! Nothing here knows what a buy, an order or a switch is.

pub(crate) mod amqp;
pub mod client_address;
pub(crate) mod clock;
pub mod config;
pub(crate) mod connections;
pub(crate) mod db;
pub(crate) mod etcd;
pub mod fault;
pub(crate) mod health;
pub(crate) mod http_metrics;
pub(crate) mod lua;
pub(crate) mod metrics;
pub(crate) mod paging;
pub mod percentiles;
pub(crate) mod quiet_log;
pub mod redis;
pub(crate) mod route_table;
pub(crate) mod slow_bodies;
pub mod telemetry;
pub(crate) mod token_bucket;
