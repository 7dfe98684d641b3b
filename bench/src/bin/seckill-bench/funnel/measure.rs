//! The funnel family's loads and the measurement around each: `seckill-load`,
//! `redis-benchmark` or `pgbench` run as a child, with the stores' and the server's state
//! read before and after and the optional probes ([`super::probes`]) running beside it.

use serde_json::Value;
use sqlx::{Connection, PgConnection};
use std::{process::Stdio, time::Instant};
use tokio::process::Command;

use super::{
    probes::{Perf, PgWait, Probes},
    summary::measurement::{Kind, Measurement, Probed, Snapshot},
    Funnel, Item, Pace, OPEN_MAX_IN_FLIGHT, STORM_MAX_S,
};
use crate::{
    cpu,
    process::{self, Daemon},
};

/// The first buyer of a success-path measurement's first round (`seckill-load`'s default).
const FIRST_BUYER: i64 = 1_000_000;
/// Buyers of a success-path warm-up.
const WARM_BUYERS: i64 = 1000;

impl Funnel<'_> {
    /// Sells the storm item's single unit, so the storm meets a sold-out item.
    pub(super) async fn sell_out(&mut self, item: i64) {
        let mut sell = self.load_command(item, STORM_MAX_S);
        sell.args([
            "--users",
            "1",
            "--first-user",
            "80000000",
            "--retries-per-user",
            "1",
        ]);
        let sold = sell
            .stderr(Stdio::null())
            .output()
            .await
            .ok()
            .and_then(|out| {
                let _ = std::fs::write(self.run.file("sellout.json"), &out.stdout);
                serde_json::from_slice::<Value>(&out.stdout).ok()
            })
            .is_some_and(|report| report["summary"]["ok"] == 1);
        if !sold {
            self.fail("the storm item's single unit was not sold".into());
        }
    }

    /// A success-path measurement after a short unmeasured warm-up, so pools and caches are
    /// warm; `settle` gives the check a second for Redis and the orders to agree. `round`
    /// counts the earlier measurements on the same item: each round has buyers of its own
    /// (warm-up and measured alike), who have bought nothing yet. `pace`: closed, or buyers
    /// due `per_s` a second, one request each, for `max_s` seconds.
    pub(super) async fn success(
        &mut self,
        name: &str,
        item: &Item,
        round: u32,
        probes: Probes,
        settle: bool,
        pace: Pace,
    ) -> anyhow::Result<()> {
        let warm_from = item.warm_from + i64::from(round) * WARM_BUYERS;
        let mut warm = self.load_command(item.id, self.args.max_s);
        warm.args([
            "--users",
            &WARM_BUYERS.to_string(),
            "--retries-per-user",
            "1",
        ])
        .args(["--first-user", &warm_from.to_string()]);
        let warmed = warm.stderr(Stdio::null()).output().await;
        let _ = std::fs::write(
            self.run
                .file(&format!("warmup-{}-{warm_from}.json", item.id)),
            warmed
                .as_ref()
                .map(|out| out.stdout.as_slice())
                .unwrap_or_default(),
        );
        if !warmed.is_ok_and(|out| out.status.success()) {
            self.fail(format!("warm-up on item {} failed", item.id));
        }
        let n = match pace {
            Pace::Closed => self.args.buy_requests,
            Pace::Open { per_s } => per_s.saturating_mul(self.args.max_s),
        }
        .to_string();
        let first = (FIRST_BUYER
            + i64::from(round) * i64::try_from(self.args.buy_requests).unwrap_or(i64::MAX))
        .to_string();
        let mut args: Vec<String> = [
            "--requests",
            &n,
            "--users",
            &n,
            "--first-user",
            &first,
            "--retries-per-user",
            "1",
            "--check",
        ]
        .map(String::from)
        .to_vec();
        if settle {
            args.extend(["--settle-s".into(), "1".into()]);
        }
        let mut command = match pace {
            Pace::Closed => self.load_command(item.id, self.args.max_s),
            Pace::Open { per_s } => {
                args.extend(["--rate".into(), per_s.to_string()]);
                self.load_command_in_flight(item.id, self.args.max_s, OPEN_MAX_IN_FLIGHT)
            }
        };
        command.args(args);
        self.measure(name, Kind::Load, probes, command).await
    }

    /// The Redis baseline: `redis-benchmark` calling the deduction script on one stock key.
    pub(super) async fn redis_baseline(&mut self) -> anyhow::Result<()> {
        let client = redis::Client::open(self.redis_url.as_str())?;
        let (host, port) = match &client.get_connection_info().addr {
            redis::ConnectionAddr::Tcp(host, port) => (host.clone(), *port),
            other => anyhow::bail!("redis-benchmark needs Redis over TCP, not {other:?}"),
        };
        let mut redis = client.get_multiplexed_async_connection().await?;
        let script = std::fs::read_to_string(self.root.join("lua/buy.lua"))?;
        let sha: String = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(script)
            .query_async(&mut redis)
            .await?;
        // One whole buy per call, as the server makes it: a new buyer and request id each
        // time (`__rand_int__`), windows that never refuse, stock that never runs out.
        let prefix = self.namespace.redis;
        let key = |rest: &str| format!("{prefix}{{rb}}:{rest}");
        let (stock, bought, pending) = (key("stock"), key("bought"), key("pending"));
        redis::cmd("SET")
            .arg(&stock)
            .arg(1_000_000_000_000_i64)
            .query_async::<()>(&mut redis)
            .await?;
        let mut benchmark = Command::new("redis-benchmark");
        benchmark
            .args(["-h", &host, "-p", &port.to_string(), "-c", "50"])
            .args([
                "-n",
                &self.args.redis_n.to_string(),
                "-P",
                "1",
                "-r",
                "100000000",
                "--csv",
            ])
            .args(["EVALSHA", &sha, "10"])
            .args([
                key("idem:__rand_int__"),
                key("rl:user:__rand_int__"),
                key("rl:ip:127.0.0.1"),
                key("rl:item"),
                stock.clone(),
                bought.clone(),
                pending.clone(),
                key("fence"),
                key("seats"),
                key("holders"),
            ])
            .args([
                "wcd",
                "in-flight",
                "10000",
                "1",
                "1000000000",
                "1000000000",
                "1000000000",
                "__rand_int__",
                "1",
                "1000000",
                "__rand_int__",
            ]);
        self.measure(
            "2b-redis-evalsha",
            Kind::RedisBenchmark,
            Probes::NONE,
            benchmark,
        )
        .await?;
        // The buyer records, markers and answers go with the prefix's other keys.
        redis::cmd("DEL")
            .arg(&stock)
            .arg(&bought)
            .arg(&pending)
            .arg(key("holders"))
            .query_async::<()>(&mut redis)
            .await?;
        Ok(())
    }

    /// 5,000 requests to each of `endpoints` (`seckill-load --endpoint`), unmeasured.
    pub(super) async fn warm_up(&self, item: i64, endpoints: &[&str]) {
        for endpoint in endpoints {
            let mut warm = self.load_command(item, STORM_MAX_S);
            warm.args(["--endpoint", endpoint, "--requests", "5000"]);
            let _ = warm
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .await;
        }
    }

    /// The storm's load: `storm_requests` requests, ten per buyer.
    pub(super) fn storm_args(&self) -> Vec<String> {
        vec![
            "--requests".to_owned(),
            self.args.storm_requests.to_string(),
            "--users".into(),
            self.storm_users().to_string(),
            "--retries-per-user".into(),
            "10".into(),
        ]
    }

    /// `seckill-load` against the bench's server and activity, reporting JSON.
    pub(super) fn load_command(&self, item: i64, max_s: u64) -> Command {
        self.load_command_in_flight(item, max_s, self.args.concurrency)
    }

    /// [`Self::load_command`] with `in_flight` requests in flight at most.
    pub(super) fn load_command_in_flight(&self, item: i64, max_s: u64, in_flight: u64) -> Command {
        let mut command = process::seckill(&self.load, &[], &self.env);
        command
            .args(["--base-url", &self.base_url])
            .args(["--activity", &self.activity.to_string()])
            .args(["--item", &item.to_string()])
            .args(["--concurrency", &in_flight.to_string()])
            .args(["--duration-s", &max_s.to_string(), "--json"]);
        if let Some(forwarded) = self.forwarded_for {
            command.args(["--forwarded-for", forwarded]);
        }
        command
    }

    pub(super) async fn load(
        &mut self,
        name: &str,
        item: i64,
        max_s: u64,
        probes: Probes,
        args: &[String],
    ) -> anyhow::Result<()> {
        let mut command = self.load_command(item, max_s);
        command.args(args);
        self.measure(name, Kind::Load, probes, command).await
    }

    /// What the stores and the server say now (`phase` 0 before, 1 after); the raw text is
    /// kept in the run's folder.
    async fn snapshot(&self, name: &str, phase: u8) -> Snapshot {
        let ticks = cpu::snapshot(self.server.as_ref().map(Daemon::pid), &self.args.db);
        let commandstats = async {
            let mut redis = redis::Client::open(self.redis_url.as_str())?
                .get_multiplexed_async_connection()
                .await?;
            redis::cmd("INFO")
                .arg("commandstats")
                .query_async::<String>(&mut redis)
                .await
        }
        .await
        .unwrap_or_default();
        let metrics = match self.server {
            Some(_) => match self
                .http
                .get(format!("{}/metrics", self.base_url))
                .send()
                .await
            {
                Ok(response) => response.text().await.unwrap_or_default(),
                Err(_) => String::new(),
            },
            None => String::new(),
        };
        let _ = std::fs::write(
            self.run.file(&format!("{name}.redis{phase}")),
            &commandstats,
        );
        let _ = std::fs::write(self.run.file(&format!("{name}.metrics{phase}")), &metrics);
        let wal_bytes = async {
            let mut db = PgConnection::connect(&self.db_url).await?;
            sqlx::query_scalar::<_, i64>("SELECT (pg_current_wal_insert_lsn() - '0/0')::BIGINT")
                .fetch_one(&mut db)
                .await
        }
        .await
        .ok()
        .and_then(|bytes| u64::try_from(bytes).ok());
        Snapshot {
            ticks,
            commandstats,
            metrics,
            wal_bytes,
            server_memory: self
                .server
                .as_ref()
                .and_then(|server| cpu::memory(server.pid())),
        }
    }

    /// One timed measurement: stdout to NAME.out, stderr to NAME.err, the probes around it.
    /// A non-zero exit is recorded as a failure; the measurement still appears.
    pub(super) async fn measure(
        &mut self,
        name: &str,
        kind: Kind,
        probes: Probes,
        mut command: Command,
    ) -> anyhow::Result<()> {
        self.run.progress(format!("measuring {name}"));
        let before = self.snapshot(name, 0).await;
        let perf = match (&self.server, probes.perf && self.perf) {
            (Some(server), true) => Some(Perf::start(&self.run, name, server.pid())?),
            _ => None,
        };
        let pgwait = probes
            .pgwait
            .then(|| PgWait::start(self.db_url.clone(), self.args.db.clone()));
        command
            .stdout(std::fs::File::create(
                self.run.file(&format!("{name}.out")),
            )?)
            .stderr(std::fs::File::create(
                self.run.file(&format!("{name}.err")),
            )?);
        let started = Instant::now();
        let status = command.status().await;
        let wall = started.elapsed();
        let after = self.snapshot(name, 1).await;
        let profile = match perf {
            Some(perf) => perf.finish(&self.run, name).await,
            None => String::new(),
        };
        let waits = match pgwait {
            Some(pgwait) => pgwait.finish().await,
            None => Vec::new(),
        };
        let _ = std::fs::write(self.run.file(&format!("{name}.pgwait")), waits.join("\n"));
        match status {
            Ok(status) if status.success() => {}
            outcome => self.fail(format!(
                "{name} exited with {} (see {})",
                outcome.map_or_else(|e| e.to_string(), |s| s.to_string()),
                self.run.file(&format!("{name}.err")).display()
            )),
        }
        let out =
            std::fs::read_to_string(self.run.file(&format!("{name}.out"))).unwrap_or_default();
        self.measurements.push(Measurement::new(
            name,
            kind,
            &out,
            Probed {
                wall,
                before,
                after,
                ticks_per_s: self.ticks_per_s,
                profile,
                waits,
                redis_n: self.args.redis_n,
            },
        ));
        Ok(())
    }
}
