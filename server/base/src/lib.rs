//! What every capability of the seckill server stands on, and nothing that knows what a buy,
//! an order or a switch is: configuration (figment: defaults, file, environment), telemetry,
//! the store clients (PostgreSQL pool and migrations, Redis connection, key layout and
//! generic commands, the Lua scripts' loader, RabbitMQ and etcd links), every metric of the
//! process, the call tally a buy's store calls are counted in, the API error every route
//! answers with, the route table routers and the OpenAPI document are built from, who a
//! request comes from (behind trusted proxies), the clock rules read, the fault points tests
//! crash a process at, whether this instance leads the singleton jobs (read-only, but for
//! the election's signal), percentiles, the paging window of admin listings, the patience with slow request bodies, the rate limit on
//! warning lines and the token bucket of local rate limits.
//!
//! The lowest storey of the server: it depends on the contract alone, and Cargo keeps it
//! from reaching up into a capability.

pub mod amqp;
pub mod client_address;
pub mod clock;
pub mod config;
pub mod db;
pub mod error;
pub mod etcd;
pub mod fault;
pub mod leadership;
pub mod lua;
pub mod metrics;
pub mod paging;
pub mod percentiles;
pub mod quiet_log;
pub mod redis;
pub mod route_table;
pub mod slow_bodies;
pub mod tally;
pub mod telemetry;
pub mod token_bucket;
