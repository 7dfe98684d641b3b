//! Everything that talks to a store: PostgreSQL queries, Redis keys and scripts, and the
//! links to RabbitMQ and etcd. Callers get typed results; SQL stays in this module and in
//! `migrations/`.

pub mod amqp;
pub mod audit;
pub mod cancellations;
pub mod catalog;
pub mod completions;
pub mod db;
pub mod dead_letters;
pub mod etcd;
pub mod ops_audit;
pub mod order_admin;
pub mod orders;
pub mod outbox;
pub mod payments;
pub mod redis;
pub mod stock;
pub mod users;
