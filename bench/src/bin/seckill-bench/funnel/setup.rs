//! The funnel family's stage: a fresh database and key space with the bench's merchant, the
//! servers' settings files, the servers themselves, and the sale they sell; and clearing
//! it all away after. Apart from the measurements so that what a benchmark measures reads
//! without the plumbing it stands on.

use anyhow::Context;
use chrono::{Duration as Span, Utc};
use serde_json::{json, Value};
use sqlx::{Connection, Executor, PgConnection};
use std::{net::SocketAddr, path::PathBuf, time::Duration};

use super::{Funnel, Item};
use crate::{
    process::{self, Daemon},
    stores,
};

/// The activity's pay timeout (its pay-timeout messages wait in this delay queue).
const PAY_TIMEOUT_S: u32 = 900;
/// Stock of the success-path items: never sold out within a run.
const BIG_STOCK: i64 = 10_000_000;

impl Funnel<'_> {
    /// A fresh database and key space, the bench's merchant, its API token, and the one-row
    /// table of the pgbench baseline. Returns the token.
    pub(super) async fn fresh_stores(&mut self) -> anyhow::Result<String> {
        self.run
            .progress(format!("recreating database {}", self.args.db));
        let base = self.db_url.clone();
        stores::recreate_database(&base, &self.args.db).await?;
        stores::flush_redis_prefix(&self.redis_url, self.namespace.redis).await?;
        process::output(
            process::seckill(&self.seckill, &["migrate"], &self.env),
            None,
        )
        .await?;
        let token = process::api_token(
            &self.seckill,
            &self.env,
            "bench-merchant",
            "merchant",
            Some("Bench"),
        )
        .await?;
        let mut db = PgConnection::connect(&self.db_url).await?;
        db.execute(
            "CREATE TABLE bench_hot (id integer PRIMARY KEY, stock bigint NOT NULL);
             INSERT INTO bench_hot VALUES (1, 1000000000000);",
        )
        .await?;
        std::fs::write(
            self.run.file("hot.sql"),
            "UPDATE bench_hot SET stock = stock - 1 WHERE id = 1 AND stock > 0;\n",
        )?;
        Ok(token)
    }

    /// The bench's funnel settings. Every request comes from 127.0.0.1, so the per-address
    /// and per-item windows and the local bucket are opened wide. Each settings file has a
    /// control-plane snapshot of its own, so that two servers running at once never write
    /// the same file.
    pub(super) fn write_config(&self, name: &str, batch_max: usize) -> anyhow::Result<PathBuf> {
        let path = self.run.file(name);
        let stem = name.strip_suffix(".toml").unwrap_or(name);
        let snapshot = self.run.file(&format!("{stem}-control-snapshot.json"));
        std::fs::write(
            &path,
            format!(
                "[buy]\nper_ip_per_window = 1000000000\nper_item_per_window = 1000000000\n\
                 local_rate_per_s = 1000000000\nper_user_per_window = 1000\n\
                 preorder_batch_max = {batch_max}\n\n[control]\nsnapshot_path = {:?}\n",
                snapshot.display().to_string()
            ),
        )?;
        Ok(path)
    }

    /// Serves with the settings file `config` and `extra` environment as the bench's
    /// server (the one its loads and probes address); fails unless it answers /healthz
    /// within 30 s.
    pub(super) async fn start_server(
        &mut self,
        label: &str,
        config: &std::path::Path,
        extra: &[(&str, &str)],
    ) -> anyhow::Result<()> {
        let server = self
            .spawn_server(label, config, extra, self.args.port)
            .await?;
        self.server = Some(server);
        Ok(())
    }

    /// Another instance of the same deployment (same stores and prefixes) on `port`: the
    /// caller holds it and stops it. Fails unless it answers /healthz within 30 s.
    pub(super) async fn spawn_server(
        &self,
        label: &str,
        config: &std::path::Path,
        extra: &[(&str, &str)],
        port: u16,
    ) -> anyhow::Result<Daemon> {
        let address = SocketAddr::from(([127, 0, 0, 1], port));
        process::ensure_free(address)?;
        let mut command = process::seckill(&self.seckill, &["serve"], &self.env);
        command.env("SECKILL_CONFIG", config);
        command.env("SECKILL_BIND", address.to_string());
        command.envs(extra.iter().copied());
        let log = self.run.file(&format!("server-{label}.log"));
        let mut server = Daemon::spawn(command, &format!("the server ({label})"), &log)?;
        let health = format!("http://{address}/healthz");
        let http = self.http.clone();
        server
            .wait_until(Duration::from_secs(30), || {
                let request = http.get(&health).send();
                async move { request.await.is_ok_and(|r| r.status().is_success()) }
            })
            .await?;
        self.run.progress(format!(
            "server ({label}) up on {address}, pid {}",
            server.pid()
        ));
        Ok(server)
    }

    pub(super) async fn stop_server(&mut self) -> anyhow::Result<()> {
        match self.server.take() {
            Some(server) => server.stop().await,
            None => Ok(()),
        }
    }

    /// Stops the server and removes what its runs left: Redis keys, the pipeline's queues
    /// (with their pending pay timeouts) and the control plane's etcd keys.
    pub(super) async fn clean_up(&mut self) -> anyhow::Result<()> {
        self.stop_server().await?;
        stores::flush_redis_prefix(&self.redis_url, self.namespace.redis).await?;
        let amqp = stores::amqp(&self.amqp_url).await?;
        stores::delete_topology(&amqp, self.namespace.amqp, &[PAY_TIMEOUT_S]).await?;
        stores::delete_etcd_prefix(&self.etcd_endpoints, self.namespace.etcd).await
    }

    /// One merchant's five items and one activity (a stock-1 item for the storm, four big
    /// ones with a limit of 1 per buyer), pre-warmed while upcoming, then opened.
    pub(super) async fn open_sale(&mut self, token: &str) -> anyhow::Result<[Item; 5]> {
        let mut ids = Vec::new();
        for name in [
            "storm",
            "success",
            "group-commit-off",
            "group-commit-on",
            "db-deduction",
        ] {
            let item = self
                .admin(
                    token,
                    "/admin/api/items",
                    json!({ "name": name, "description": "bench", "price_cents": 100 }),
                )
                .await?;
            ids.push(item["id"].as_i64().context("an item id")?);
        }
        let line = |id: i64, stock: i64| json!({ "item_id": id, "stock": stock, "per_user_limit": 1, "price_cents": 100 });
        let now = Utc::now();
        let activity = self
            .admin(
                token,
                "/admin/api/activities",
                json!({
                    "title": "bench",
                    "starts_at": now + Span::minutes(10),
                    "ends_at": now + Span::hours(6),
                    "kind": "standard",
                    "pay_timeout_s": PAY_TIMEOUT_S,
                    "items": [line(ids[0], 1), line(ids[1], BIG_STOCK), line(ids[2], BIG_STOCK),
                              line(ids[3], BIG_STOCK), line(ids[4], BIG_STOCK)],
                }),
            )
            .await?;
        self.activity = activity["id"].as_i64().context("an activity id")?;
        let activity_id = self.activity.to_string();
        let prewarm = process::seckill(&self.seckill, &["prewarm", &activity_id], &self.env);
        std::fs::write(
            self.run.file("prewarm.json"),
            process::output(prewarm, None).await?,
        )?;
        PgConnection::connect(&self.db_url)
            .await?
            .execute(
                sqlx::query(
                    "UPDATE activities SET starts_at = now() - interval '1 minute' WHERE id = $1",
                )
                .bind(self.activity),
            )
            .await?;
        // The buy API trusts its activity cache for a second.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let names = ["storm", "success", "gc1", "gc256", "db"];
        let items: Vec<String> = names
            .iter()
            .zip(&ids)
            .map(|(name, id)| format!("{name} {id}"))
            .collect();
        let mut meta = std::fs::OpenOptions::new()
            .append(true)
            .open(self.run.file("meta.txt"))?;
        use std::io::Write;
        writeln!(
            meta,
            "activity={}\nitems={}",
            self.activity,
            items.join(", ")
        )?;
        self.run.progress(format!(
            "activity {} open: items {}",
            self.activity,
            items.join(", ")
        ));
        // Warm-ups buy from user ids far from each other's and the measurements' ranges.
        Ok([
            Item {
                id: ids[0],
                warm_from: 80_000_000,
            },
            Item {
                id: ids[1],
                warm_from: 90_000_000,
            },
            Item {
                id: ids[2],
                warm_from: 90_000_000,
            },
            Item {
                id: ids[3],
                warm_from: 90_000_000,
            },
            Item {
                id: ids[4],
                warm_from: 90_000_000,
            },
        ])
    }

    /// POSTs `body` to the admin API; the answer's JSON, or an error naming the status.
    pub(super) async fn admin(
        &self,
        token: &str,
        path: &str,
        body: Value,
    ) -> anyhow::Result<Value> {
        let response = self
            .http
            .post(format!("{}{path}", self.base_url))
            .bearer_auth(token)
            .json(&body)
            .send()
            .await?;
        let status = response.status();
        let text = response.text().await?;
        anyhow::ensure!(status.is_success(), "POST {path} answered {status}: {text}");
        Ok(serde_json::from_str(&text)?)
    }
}
