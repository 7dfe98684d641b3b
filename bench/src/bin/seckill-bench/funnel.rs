//! The buy funnel's benchmarks, each a ratio of two measurements taken back to back:
//!
//! 1. sold-out storm on one hot item        vs the same server's `/healthz`  (target >= 0.9)
//! 2. success path (huge stock)             vs the same server's `/healthz`  (target >= 0.25),
//!    and vs `redis-benchmark` EVALSHA of `lua/buy.lua` (target >= 0.5); row 2o, open
//!    loop: buyers due at row 2's target rate, the share of them served
//! 3. group commit (`preorder_batch_max` 256) vs one transaction per request (target >= 3x)
//! 4. DB deduction path (`SECKILL_DEDUCTION=db`) vs pgbench hot-row UPDATE   (target >= 5x)
//!
//! It drops and recreates its database, uses the Redis key prefix `bench:` (deleted before
//! and after), the AMQP prefix `bench` and the etcd prefix `/bench` (deleted after), serves
//! on its own port (refusing one that is taken), restarts its server
//! for each configuration and stops it at the end. Besides throughput and latency, each
//! measurement records CPU time per process, Redis `INFO commandstats` deltas, `/metrics`
//! deltas, optionally a `perf` profile of the server, and for the database-heavy runs what
//! the database's busy backends wait on; [`summary`] turns them into the result block.

pub mod dashboard;
pub mod hotkeys;
pub mod lottery;
pub mod proxies;
pub mod sale_page;
pub mod soak;
mod summary;

use anyhow::Context;
use base::config::Settings;
use chrono::{Duration as Span, Utc};
use clap::{builder::BoolishValueParser, ArgAction, Args};
use secrecy::ExposeSecret;
use serde_json::{json, Value};
use sqlx::{Connection, Executor, PgConnection};
use std::{
    net::SocketAddr,
    path::PathBuf,
    process::Stdio,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};
use tokio::{process::Command, task::JoinHandle};

use crate::{
    binaries, cpu, doc,
    process::{self, Daemon},
    run::Run,
    stores, Common,
};
use summary::{Kind, Measurement, Snapshot};

#[derive(Args)]
pub struct FunnelArgs {
    /// The funnel benchmark's database (dropped and recreated).
    #[arg(long, env = "BENCH_DB", default_value = "seckill_bench")]
    db: String,
    /// Where its server listens, on 127.0.0.1.
    #[arg(long, env = "BENCH_PORT", default_value_t = 3900)]
    port: u16,
    /// Requests in flight in every load measurement.
    #[arg(long, env = "BENCH_CONCURRENCY", default_value_t = 64)]
    concurrency: u64,
    /// Requests of the storm and of `/healthz` alike (ten per buyer); both run to the last
    /// request, at most 60 s.
    #[arg(long, env = "BENCH_STORM_REQUESTS", default_value_t = 100_000)]
    storm_requests: u64,
    /// Requests of every success-path measurement, one buyer each.
    #[arg(long, env = "BENCH_BUY_REQUESTS", default_value_t = 30_000)]
    buy_requests: u64,
    /// Every success-path measurement stops after this many seconds.
    #[arg(long, env = "BENCH_MAX_S", default_value_t = 10)]
    max_s: u64,
    /// EVALSHA calls of the Redis baseline.
    #[arg(long, env = "BENCH_REDIS_N", default_value_t = 200_000)]
    redis_n: u64,
    /// Seconds of the pgbench baseline.
    #[arg(long, env = "BENCH_PGBENCH_S", default_value_t = 10)]
    pgbench_s: u64,
    /// `perf record` the server during the healthz, storm, success and DB runs, when perf works.
    /// Off unless asked for: the recording takes about a core of this 2-core box during the
    /// success and DB runs (the `other` column) and slows the success path by a third, so a
    /// profiled run's ratios are not the product's.
    #[arg(long, env = "BENCH_PERF", default_value = "0", action = ArgAction::Set, value_parser = BoolishValueParser::new())]
    perf: bool,
    /// Worker threads of the server's runtime (its `TOKIO_WORKER_THREADS`); unset, tokio's
    /// default of one per core. The server shares those cores with the stores and the load
    /// tool, and every worker it wakes is a context switch.
    #[arg(long, env = "BENCH_SERVER_THREADS")]
    server_threads: Option<std::num::NonZeroUsize>,
    /// `[buy] preorder_batch_max` of every server but row 3's batch-1 side (the server's
    /// default, 256, unless asked for another).
    #[arg(long, env = "BENCH_BATCH_MAX", default_value_t = 256)]
    batch_max: usize,
    /// Whole runs, one after the other: with more than one, the result block opens with
    /// every ratio of every run, their spread and in how many runs each target was met.
    #[arg(long, env = "BENCH_RUNS", default_value_t = std::num::NonZeroUsize::MIN)]
    runs: std::num::NonZeroUsize,
}

/// The key spaces a benchmark of this family runs its server in, and the prefix of its
/// raw-output folder. A benchmark that may run beside the others has spaces of its own.
pub struct Namespace {
    /// The servers' Redis key prefix (deleted before and after).
    redis: &'static str,
    /// The pipeline's AMQP prefix (its topology deleted after).
    amqp: &'static str,
    /// The control plane's etcd prefix (deleted after).
    etcd: &'static str,
    /// The raw-output folder's name before its timestamp.
    run: &'static str,
}

/// The spaces of `funnel`, `dashboard` and `salepage`.
pub const FUNNEL: Namespace = Namespace {
    redis: "bench:",
    amqp: "bench",
    etcd: "/bench",
    run: "",
};

/// The activity's pay timeout (its pay-timeout messages wait in this delay queue).
const PAY_TIMEOUT_S: u32 = 900;
/// Stock of the success-path items: never sold out within a run.
const BIG_STOCK: i64 = 10_000_000;
/// The storm and `/healthz` run to their last request; this only bounds a pathological run.
const STORM_MAX_S: u64 = 60;
/// The first buyer of a success-path measurement's first round (`seckill-load`'s default).
const FIRST_BUYER: i64 = 1_000_000;
/// Buyers of a success-path warm-up.
const WARM_BUYERS: i64 = 1000;
/// The open loop's most requests in flight: a server that falls behind sees this many
/// waiting (its admission control lets 4,096 in), and the load tool sheds the rest.
pub const OPEN_MAX_IN_FLIGHT: u64 = 2048;

/// How a success-path measurement paces its buyers.
#[derive(Clone, Copy)]
enum Pace {
    /// `--concurrency` requests in flight, each sent once the last is answered.
    Closed,
    /// `per_s` buyers due a second, whatever the server's pace.
    Open { per_s: u64 },
}

/// The open loop's rate: row 2's target share of `/healthz`'s throughput.
fn open_rate(healthz_rps: f64) -> u64 {
    (healthz_rps * summary::SUCCESS_TARGET).round().max(1.0) as u64
}

/// The measurements, in the order of the result block.
pub const NAMES: [&str; 10] = [
    "1a-healthz",
    "1b-storm",
    "2a-success",
    "2b-redis-evalsha",
    "2c-success-open",
    "3a-batch1",
    "3b-batch256",
    "4a-db-deduction",
    "4b-pgbench-hot",
    "4c-db-storm",
];

pub async fn run(common: &Common, args: &FunnelArgs) -> anyhow::Result<()> {
    let mut runs = Vec::with_capacity(args.runs.get());
    for _ in 0..args.runs.get() {
        let mut bench = Funnel::prepare(common, args, &FUNNEL).await?;
        let result = bench.benchmarks().await;
        let cleaned = bench.clean_up().await;
        result?;
        cleaned?;
        let block = bench.report()?;
        runs.push((bench, block));
    }
    let Some((last, last_block)) = runs.last() else {
        return Ok(());
    };
    let block = if runs.len() == 1 {
        last_block.clone()
    } else {
        let measurements: Vec<&[Measurement]> = runs
            .iter()
            .map(|(bench, _)| bench.measurements.as_slice())
            .collect();
        let mut lines = summary::render_spread(&measurements);
        lines.push(String::new());
        // Each run's header line: when it ran, its load and where its raw output is.
        lines.extend(runs.iter().enumerate().map(|(i, (_, block))| {
            format!(
                "* run {}: {}",
                i + 1,
                block.lines().next().unwrap_or_default()
            )
        }));
        lines.extend([String::new(), last_block.clone()]);
        lines.join("\n")
    };
    last.show(common, "bench.sh", &block)?;
    runs.iter().try_for_each(|(bench, _)| bench.no_failures())
}

/// Where to measure the success path: the item, and the first buyer of its warm-up.
struct Item {
    id: i64,
    warm_from: i64,
}

struct Funnel<'a> {
    args: &'a FunnelArgs,
    namespace: &'a Namespace,
    run: Run,
    /// The repository, for `lua/buy.lua`.
    root: PathBuf,
    seckill: PathBuf,
    load: PathBuf,
    /// What every product binary it starts gets on top of the caller's environment.
    env: Vec<(String, String)>,
    db_url: String,
    redis_url: String,
    amqp_url: String,
    etcd_endpoints: Vec<String>,
    base_url: String,
    http: reqwest::Client,
    perf: bool,
    ticks_per_s: f64,
    server: Option<Daemon>,
    /// What loads send as `X-Forwarded-For` (`seckill-load --forwarded-for`), as behind a
    /// balancer (`proxies`); none by default.
    forwarded_for: Option<&'static str>,
    activity: i64,
    measurements: Vec<Measurement>,
    failures: Vec<String>,
}

impl<'a> Funnel<'a> {
    async fn prepare(
        common: &Common,
        args: &'a FunnelArgs,
        namespace: &'a Namespace,
    ) -> anyhow::Result<Self> {
        for tool in ["redis-benchmark", "pgbench"] {
            let found = std::process::Command::new(tool)
                .arg("--version")
                .output()
                .is_ok_and(|out| out.status.success());
            anyhow::ensure!(found, "{tool} is needed");
        }
        let address = SocketAddr::from(([127, 0, 0, 1], args.port));
        process::ensure_free(address)?;
        let perf = args.perf
            && std::process::Command::new("perf")
                .args(["record", "-a", "-o", "/dev/null", "--", "true"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
        let settings = Settings::load()?;
        let bins = binaries::prepare(&common.root, common.build, &["seckill", "seckill-load"])?;
        let run = Run::start(&common.root, namespace.run)?;
        let db_url = stores::database_url(settings.database_url.expose_secret(), &args.db);
        let mut env = vec![
            ("DATABASE_URL".into(), db_url.clone()),
            ("SECKILL_REDIS_PREFIX".into(), namespace.redis.into()),
            ("SECKILL_BIND".into(), address.to_string()),
            ("SECKILL_AMQP_PREFIX".into(), namespace.amqp.into()),
            ("SECKILL_ETCD_PREFIX".into(), namespace.etcd.into()),
            ("RUST_LOG".into(), common.rust_log.clone()),
        ];
        if let Some(threads) = args.server_threads {
            env.push(("TOKIO_WORKER_THREADS".into(), threads.to_string()));
        }
        Ok(Self {
            args,
            namespace,
            root: common.root.clone(),
            seckill: bins[0].clone(),
            load: bins[1].clone(),
            env,
            db_url,
            redis_url: settings.redis_url.expose_secret().to_owned(),
            amqp_url: settings.amqp_url.expose_secret().to_owned(),
            etcd_endpoints: settings.etcd_endpoints.clone(),
            base_url: format!("http://{address}"),
            http: reqwest::Client::builder().no_proxy().build()?,
            perf,
            ticks_per_s: cpu::ticks_per_second(),
            server: None,
            forwarded_for: None,
            activity: 0,
            measurements: Vec::new(),
            failures: Vec::new(),
            run,
        })
    }

    /// The measurement taken last.
    fn latest(&self) -> Option<&Measurement> {
        self.measurements.last()
    }

    /// The throughput of the measurement `name`, if it was taken and read.
    fn rps_of(&self, name: &str) -> Option<f64> {
        self.measurements
            .iter()
            .find(|m| m.name() == name)
            .and_then(Measurement::rps)
    }

    fn fail(&mut self, what: String) {
        self.run.progress(format!("FAILED: {what}"));
        self.failures.push(what);
    }

    fn storm_users(&self) -> u64 {
        self.args.storm_requests.div_ceil(10)
    }

    /// The run's settings, first in its `meta.txt` (the sale's ids are appended later).
    fn write_meta(&self) -> anyhow::Result<()> {
        let args = self.args;
        std::fs::write(
            self.run.file("meta.txt"),
            format!(
                "{}bench_db={}\nconcurrency={}\nstorm_requests={}\nbuy_requests={}\nmax_s={}\n\
                 redis_n={}\npgbench_s={}\nserver_threads={}\n",
                self.run.meta(),
                args.db,
                args.concurrency,
                args.storm_requests,
                args.buy_requests,
                args.max_s,
                args.redis_n,
                args.pgbench_s,
                args.server_threads
                    .map_or_else(|| "one per core".to_owned(), |n| n.to_string())
            ),
        )?;
        Ok(())
    }

    async fn benchmarks(&mut self) -> anyhow::Result<()> {
        self.write_meta()?;
        let token = self.fresh_stores().await?;
        let default_config = self.write_config("bench.toml", self.args.batch_max)?;
        let batch1_config = self.write_config("bench-batch1.toml", 1)?;

        self.start_server("default", &default_config, &[]).await?;
        let [storm, success, gc1, gc256, db] = self.open_sale(&token).await?;

        // Benchmark 1: sell the single unit, warm up, then /healthz and the storm back to back.
        self.sell_out(storm.id).await;
        self.warm_up(storm.id, &["healthz", "buy"]).await;
        let storm_run = self.storm_args();
        let mut healthz = storm_run.to_vec();
        healthz.extend(["--endpoint".into(), "healthz".into()]);
        self.load("1a-healthz", storm.id, STORM_MAX_S, Probes::PERF, &healthz)
            .await?;
        let mut buys = storm_run.to_vec();
        buys.extend(["--check".into(), "--settle-s".into(), "1".into()]);
        self.load("1b-storm", storm.id, STORM_MAX_S, Probes::PERF, &buys)
            .await?;

        // Benchmark 2: the success path, then the bare Lua deduction in Redis.
        self.success("2a-success", &success, 0, Probes::BOTH, false, Pace::Closed)
            .await?;
        self.redis_baseline().await?;
        // Row 2 as a sale's crowd comes: buyers due at row 2's target rate whatever the
        // server's pace, where the closed loop above waits for each answer. What share of
        // them is served says how far the server is from that rate.
        if let Some(per_s) = self.rps_of("1a-healthz").map(open_rate) {
            let pace = Pace::Open { per_s };
            self.success("2c-success-open", &success, 1, Probes::BOTH, false, pace)
                .await?;
        }
        self.stop_server().await?;

        // Benchmark 3: the same load, one transaction per request, then group commit.
        self.start_server("batch1", &batch1_config, &[]).await?;
        self.success("3a-batch1", &gc1, 0, Probes::PGWAIT, true, Pace::Closed)
            .await?;
        self.stop_server().await?;
        self.start_server("batch256", &default_config, &[]).await?;
        self.success("3b-batch256", &gc256, 0, Probes::PGWAIT, true, Pace::Closed)
            .await?;
        self.stop_server().await?;

        // Benchmark 4: deduction in PostgreSQL on one hot row, then pgbench on a one-row
        // table. (--check's Redis-vs-orders comparison only warns here: this path leaves
        // Redis stock alone.)
        self.start_server("db", &default_config, &[("SECKILL_DEDUCTION", "db")])
            .await?;
        self.success("4a-db-deduction", &db, 0, Probes::BOTH, true, Pace::Closed)
            .await?;
        let mut pgbench = Command::new("pgbench");
        pgbench
            .args([
                "-n",
                "-c",
                "50",
                "-j",
                "2",
                "-T",
                &self.args.pgbench_s.to_string(),
            ])
            .args(["-M", "prepared", "-f"])
            .arg(self.run.file("hot.sql"))
            .arg(&self.db_url);
        self.measure("4b-pgbench-hot", Kind::Pgbench, Probes::PGWAIT, pgbench)
            .await?;
        // Row 1's storm with the deduction in PostgreSQL: the sold-out flag and the holder
        // set must keep it off the database as they keep it off Redis.
        self.warm_up(storm.id, &["buy"]).await;
        self.load("4c-db-storm", storm.id, STORM_MAX_S, Probes::BOTH, &buys)
            .await?;
        self.stop_server().await?;
        Ok(())
    }

    /// A fresh database and key space, the bench's merchant, its API token, and the one-row
    /// table of the pgbench baseline. Returns the token.
    async fn fresh_stores(&mut self) -> anyhow::Result<String> {
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
    fn write_config(&self, name: &str, batch_max: usize) -> anyhow::Result<PathBuf> {
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
    async fn start_server(
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
    async fn spawn_server(
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

    async fn stop_server(&mut self) -> anyhow::Result<()> {
        match self.server.take() {
            Some(server) => server.stop().await,
            None => Ok(()),
        }
    }

    /// Stops the server and removes what its runs left: Redis keys, the pipeline's queues
    /// (with their pending pay timeouts) and the control plane's etcd keys.
    async fn clean_up(&mut self) -> anyhow::Result<()> {
        self.stop_server().await?;
        stores::flush_redis_prefix(&self.redis_url, self.namespace.redis).await?;
        let amqp = stores::amqp(&self.amqp_url).await?;
        stores::delete_topology(&amqp, self.namespace.amqp, &[PAY_TIMEOUT_S]).await?;
        stores::delete_etcd_prefix(&self.etcd_endpoints, self.namespace.etcd).await
    }

    /// One merchant's five items and one activity (a stock-1 item for the storm, four big
    /// ones with a limit of 1 per buyer), pre-warmed while upcoming, then opened.
    async fn open_sale(&mut self, token: &str) -> anyhow::Result<[Item; 5]> {
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
    async fn admin(&self, token: &str, path: &str, body: Value) -> anyhow::Result<Value> {
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

    /// Sells the storm item's single unit, so the storm meets a sold-out item.
    async fn sell_out(&mut self, item: i64) {
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
    async fn success(
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
    async fn redis_baseline(&mut self) -> anyhow::Result<()> {
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
    async fn warm_up(&self, item: i64, endpoints: &[&str]) {
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
    fn storm_args(&self) -> Vec<String> {
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
    fn load_command(&self, item: i64, max_s: u64) -> Command {
        self.load_command_in_flight(item, max_s, self.args.concurrency)
    }

    /// [`Self::load_command`] with `in_flight` requests in flight at most.
    fn load_command_in_flight(&self, item: i64, max_s: u64, in_flight: u64) -> Command {
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

    async fn load(
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
    async fn measure(
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
            summary::Probed {
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

    /// The run's result block, kept in its folder as `summary.md` (with `summary.json`).
    fn report(&self) -> anyhow::Result<String> {
        let finished = self.run.finish();
        let mut meta = std::fs::OpenOptions::new()
            .append(true)
            .open(self.run.file("meta.txt"))?;
        use std::io::Write;
        meta.write_all(finished.meta().as_bytes())?;
        let header = self.run.header(&finished, None, "");
        let text = summary::render(
            &header,
            &self.measurements,
            &self.failures,
            &self.args.db,
            self.run.cores(),
        );
        std::fs::write(self.run.file("summary.md"), format!("{text}\n"))?;
        std::fs::write(
            self.run.file("summary.json"),
            serde_json::to_string_pretty(&json!({
                "measurements": self.measurements,
                "failures": self.failures,
            }))?,
        )?;
        Ok(text)
    }

    fn no_failures(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.failures.is_empty(),
            "{} failure(s): {}",
            self.failures.len(),
            self.failures.join("; ")
        );
        Ok(())
    }

    /// The result block of a benchmark taken in pairs: the run's header, `table` (its head
    /// and one row per pair), the median of the pairs' `ratios` with their spread against
    /// `target`, and the failures; written to the run's `summary.md` and between `marker`'s
    /// markers in BENCHMARKS.md.
    fn report_pairs(
        &self,
        common: &Common,
        marker: &str,
        mut table: Vec<String>,
        ratios: Vec<f64>,
        target: f64,
    ) -> anyhow::Result<()> {
        if let Some(line) = ratio_line(None, ratios, target) {
            table.extend([String::new(), line]);
        }
        self.publish(common, marker, table)
    }

    /// A result block made of the run's header, `body` and the failures: printed, kept as
    /// the run's `summary.md` and written between `marker`'s markers in BENCHMARKS.md
    /// (unless told not to). Fails when anything failed on the way.
    fn publish(&self, common: &Common, marker: &str, body: Vec<String>) -> anyhow::Result<()> {
        let finished = self.run.finish();
        let mut lines = vec![self.run.header(&finished, None, ""), String::new()];
        lines.extend(body);
        if !self.failures.is_empty() {
            lines.push(String::new());
            lines.push(format!("Failures: {}", self.failures.join("; ")));
        }
        let text = lines.join("\n");
        std::fs::write(self.run.file("summary.md"), format!("{text}\n"))?;
        self.show(common, marker, &text)?;
        self.no_failures()
    }

    /// Prints a result block and writes it between `marker`'s markers in BENCHMARKS.md
    /// (unless told not to).
    fn show(&self, common: &Common, marker: &str, text: &str) -> anyhow::Result<()> {
        self.run.say(text);
        if common.update_doc {
            doc::replace_block(&common.root.join("BENCHMARKS.md"), marker, text)?;
        }
        Ok(())
    }
}

/// "Median ratio **m** over n pairs (spread low–high); target ≥ t.", after "`what`: " when
/// given; nothing without ratios.
/// The two sides of pair number `pair` in the order they run: as given for even pairs,
/// swapped for odd ones, so a drift of the machine over a run favours neither side.
fn alternating<T: Copy>(pair: usize, [first, second]: [T; 2]) -> [T; 2] {
    if pair.is_multiple_of(2) {
        [first, second]
    } else {
        [second, first]
    }
}

fn ratio_line(what: Option<&str>, mut ratios: Vec<f64>, target: f64) -> Option<String> {
    ratios.sort_by(f64::total_cmp);
    let (low, high) = (ratios.first()?, ratios.last()?);
    let median = ratios[ratios.len() / 2];
    let lead = what.map_or("Median".to_owned(), |what| format!("{what}: median"));
    Some(format!(
        "{lead} ratio **{median:.3}** over {} pairs (spread {low:.3}–{high:.3}); target ≥ {target}.",
        ratios.len()
    ))
}

/// The optional probes around a measurement.
#[derive(Clone, Copy)]
struct Probes {
    perf: bool,
    pgwait: bool,
}

impl Probes {
    const NONE: Self = Self {
        perf: false,
        pgwait: false,
    };
    const PERF: Self = Self {
        perf: true,
        pgwait: false,
    };
    const PGWAIT: Self = Self {
        perf: false,
        pgwait: true,
    };
    const BOTH: Self = Self {
        perf: true,
        pgwait: true,
    };
}

/// A sampling profile of the server process alone (its threads, user and kernel side).
struct Perf {
    child: tokio::process::Child,
    data: PathBuf,
}

impl Perf {
    fn start(run: &Run, name: &str, pid: u32) -> anyhow::Result<Self> {
        let data = run.file(&format!("{name}.perf.data"));
        let child = Command::new("perf")
            .args(["record", "-p", &pid.to_string(), "-F", "999", "-o"])
            .arg(&data)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()?;
        Ok(Self { child, data })
    }

    /// Stops the recording; returns the per-symbol report (also kept with the per-library
    /// one) and deletes the raw data.
    async fn finish(mut self, run: &Run, name: &str) -> String {
        if let Some(pid) = self.child.id() {
            let _ = Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status()
                .await;
        }
        let _ = self.child.wait().await;
        let report = |sort: &str, limit: &str| {
            let mut command = Command::new("perf");
            command
                .arg("report")
                .arg("-i")
                .arg(&self.data)
                .args(["--stdio", "--sort", sort, "--percent-limit", limit])
                .stderr(Stdio::null());
            command
        };
        let by_dso = report("dso", "1").output().await;
        let by_symbol = report("dso,sym", "0").output().await;
        let _ = std::fs::remove_file(&self.data);
        let text = |out: std::io::Result<std::process::Output>| {
            out.map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default()
        };
        let by_symbol = text(by_symbol);
        let _ = std::fs::write(run.file(&format!("{name}.perf-dso.txt")), text(by_dso));
        let _ = std::fs::write(run.file(&format!("{name}.perf-sym.txt")), &by_symbol);
        by_symbol
    }
}

/// PostgreSQL wait sampling: ten times a second, what each busy backend of the bench
/// database is doing (on CPU, waiting for a row lock, flushing WAL, waiting for the
/// client's next statement), over one connection.
struct PgWait {
    stop: Arc<AtomicBool>,
    task: JoinHandle<Vec<String>>,
}

impl PgWait {
    fn start(url: String, db: String) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn({
            let stop = stop.clone();
            async move {
                let mut samples = Vec::new();
                let Ok(mut connection) = PgConnection::connect(&url).await else {
                    return samples;
                };
                while !stop.load(Ordering::Relaxed) {
                    let busy: Vec<String> = sqlx::query_scalar(
                        "SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU') || ' (' || state || ')'
                         FROM pg_stat_activity WHERE datname = $1 AND backend_type = 'client backend'
                         AND pid <> pg_backend_pid() AND state <> 'idle'",
                    )
                    .bind(&db)
                    .fetch_all(&mut connection)
                    .await
                    .unwrap_or_default();
                    samples.extend(busy);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                samples
            }
        });
        Self { stop, task }
    }

    async fn finish(self) -> Vec<String> {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap_or_default()
    }
}
