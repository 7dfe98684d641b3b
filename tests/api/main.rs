//! Integration tests: the whole `seckill` server on port 0 against the real PostgreSQL,
//! Redis, RabbitMQ and etcd. Every test gets its own database, Redis key prefix, AMQP
//! name prefix and etcd prefix (see `support::app::spawn_app`), so they run in parallel.
//! The files beside `support/` hold one capability's tests each, with the private
//! helpers that only they use.

mod admin_api;
mod baselines;
mod behind_proxies;
mod browser;
mod buyer;
mod changes;
mod console;
mod console_ops;
mod console_orders;
mod console_reconcile;
mod control;
mod dashboard;
mod deduction_flip;
mod deploy;
mod events;
mod faults;
mod health;
mod hotkeys;
mod identity;
mod logging;
mod lottery;
mod openapi;
mod payment;
mod pipeline;
mod rbac;
mod readiness;
mod reconcile;
mod redis_outage;
mod rehearsal;
mod retention;
mod sale_page;
mod scale_out;
mod schema;
mod security;
mod support;
