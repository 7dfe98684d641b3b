//! Integration tests: the whole `seckill` server on port 0 against the real PostgreSQL,
//! Redis, RabbitMQ and etcd. Every test gets its own database, Redis key prefix, AMQP
//! name prefix and etcd prefix (see `helpers::spawn_app`), so they run in parallel.

mod admin_api;
mod browser;
mod buyer;
mod console;
mod console_ops;
mod console_orders;
mod control;
mod deduction_flip;
mod etcd_instance;
mod health;
mod helpers;
mod identity;
mod payment;
mod pipeline;
mod proxy;
