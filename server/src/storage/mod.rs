//! Everything that talks to a store: PostgreSQL queries, Redis keys and scripts, and the
//! links to RabbitMQ and etcd. Callers get typed results; SQL stays in this module and in
//! `migrations/`.

pub mod amqp;
pub mod catalog;
pub mod db;
pub mod etcd;
pub mod orders;
pub mod redis;
pub mod users;
