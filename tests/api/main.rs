//! Integration tests: the whole `seckill` server on port 0 against the real PostgreSQL,
//! Redis, RabbitMQ and etcd. Every test gets its own database, Redis key prefix, AMQP
//! name prefix and etcd prefix (see `helpers::spawn_app`), so they run in parallel.

mod admin_api;
mod browser;
mod buyer;
mod console;
mod health;
mod helpers;
mod identity;
