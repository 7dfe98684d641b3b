//! The stores as a benchmark sets them up and cleans them: a database of its own (dropped
//! and created again at the start, and dropped at the end when it is large), its Redis keys,
//! RabbitMQ and etcd connections, and the removal of its AMQP topology and etcd keys at the
//! end.

use anyhow::Context;
use lapin::{
    options::{ExchangeDeleteOptions, QueueDeleteOptions},
    Connection, ConnectionProperties,
};
use sqlx::{Connection as _, Executor, PgConnection};

/// The URL of database `name` on the server of `base` (its last path segment replaced).
pub fn database_url(base: &str, name: &str) -> String {
    let server = base.rsplit_once('/').map_or(base, |(server, _)| server);
    format!("{server}/{name}")
}

/// Drops database `name` (whoever is connected) and creates it empty.
pub async fn recreate_database(base: &str, name: &str) -> anyhow::Result<String> {
    anyhow::ensure!(
        name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
        "database name {name:?}: letters, digits and _ only"
    );
    let mut admin = PgConnection::connect(&database_url(base, "postgres"))
        .await
        .context("connecting to PostgreSQL")?;
    admin
        .execute(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)").as_str())
        .await?;
    admin
        .execute(format!("CREATE DATABASE {name}").as_str())
        .await?;
    Ok(database_url(base, name))
}

/// Drops database `name` (whoever is connected), when a benchmark's data is too large to
/// leave behind.
pub async fn drop_database(base: &str, name: &str) -> anyhow::Result<()> {
    anyhow::ensure!(
        name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
        "database name {name:?}: letters, digits and _ only"
    );
    let mut admin = PgConnection::connect(&database_url(base, "postgres"))
        .await
        .context("connecting to PostgreSQL")?;
    admin
        .execute(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)").as_str())
        .await?;
    Ok(())
}

/// Deletes every Redis key under `prefix`.
pub async fn flush_redis_prefix(url: &str, prefix: &str) -> anyhow::Result<()> {
    let mut redis = redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await
        .context("connecting to Redis")?;
    let mut cursor: u64 = 0;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{prefix}*"))
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut redis)
            .await?;
        if !keys.is_empty() {
            redis::cmd("UNLINK")
                .arg(&keys)
                .query_async::<()>(&mut redis)
                .await?;
        }
        if next == 0 {
            return Ok(());
        }
        cursor = next;
    }
}

pub async fn amqp(url: &str) -> anyhow::Result<Connection> {
    let properties = ConnectionProperties::default()
        .with_executor(tokio_executor_trait::Tokio::current())
        .with_reactor(tokio_reactor_trait::Tokio);
    Connection::connect(url, properties)
        .await
        .context("connecting to RabbitMQ")
}

/// Deletes the order pipeline's queues and exchanges of AMQP prefix `prefix`, as the
/// server names them (`{prefix}.order`, `.create`, `.pay-timeout`, `.dead`, `.dlx` and one
/// `.pay-delay.{N}s` per pay timeout among `delays_s`).
pub async fn delete_topology(
    amqp: &Connection,
    prefix: &str,
    delays_s: &[u32],
) -> anyhow::Result<()> {
    let channel = amqp.create_channel().await?;
    let exchange = format!("{prefix}.order");
    let mut queues = vec![
        format!("{exchange}.create"),
        format!("{exchange}.pay-timeout"),
        format!("{exchange}.dead"),
    ];
    queues.extend(
        delays_s
            .iter()
            .map(|s| format!("{exchange}.pay-delay.{s}s")),
    );
    for queue in queues {
        channel
            .queue_delete(&queue, QueueDeleteOptions::default())
            .await
            .with_context(|| format!("deleting queue {queue}"))?;
    }
    for exchange in [format!("{exchange}.dlx"), exchange] {
        channel
            .exchange_delete(&exchange, ExchangeDeleteOptions::default())
            .await
            .with_context(|| format!("deleting exchange {exchange}"))?;
    }
    Ok(())
}

/// Deletes every etcd key under `prefix` (the node and election keys a run leaves).
pub async fn delete_etcd_prefix(endpoints: &[String], prefix: &str) -> anyhow::Result<()> {
    let mut etcd = etcd_client::Client::connect(endpoints, None)
        .await
        .context("connecting to etcd")?;
    etcd.delete(
        format!("{prefix}/"),
        Some(etcd_client::DeleteOptions::new().with_prefix()),
    )
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_database_name_replaces_the_last_segment() {
        assert_eq!(
            database_url(
                "postgres://postgres@127.0.0.1:5432/seckill",
                "seckill_bench"
            ),
            "postgres://postgres@127.0.0.1:5432/seckill_bench"
        );
    }
}
