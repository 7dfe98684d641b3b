//! A reconciliation report run over a sale of a million orders, against a plain
//! `SELECT count(*)` over the same orders in the same run, and the buy latency beside it.
//! With a database, Redis prefix, AMQP prefix, etcd prefix and port of its own:
//!
//! 1. Seeds the sale in SQL ([`seed`]): `--reconcile-orders` orders of one item (some
//!    cancelled, with their restore-journal rows), the buyers' holdings and the item's
//!    counters, all consistent; and an empty second sale for the buy load.
//! 2. Starts the release server and pre-warms both sales through the admin API (timed: it
//!    loads every buyer record into Redis), then restarts the server so the measured runs
//!    start from a process that never held the pre-warm's buffers.
//! 3. Alternates, `--reconcile-rounds` times, the count (timed from this process) and a
//!    report run through the admin API (timed from the POST to `done`), sampling the
//!    server's resident memory every 10 ms and reading its kernel high-water mark. Then runs
//!    where one buyer record is missing from Redis, so the run compares buyer by buyer; then
//!    more runs of each kind with PostgreSQL's busy backends sampled every 2 ms, to see which
//!    statement the time goes to.
//! 4. Sends buys to the second sale at a fixed rate ([`buys`]), in alternated windows: one
//!    with no run, one with report runs over the big sale back to back; their p50/p99 side
//!    by side, with the lock waits PostgreSQL's backends were seen in and whom they waited
//!    behind.
//!
//! The leader's automatic pass is off (`reconcile.interval_ms = 0`), so only the runs the
//! benchmark starts read the sale. [`figures`] renders the result block.

mod api;
mod buys;
mod figures;
mod probes;
mod seed;

use anyhow::Context;
use base::config::Settings;
use clap::Args;
use secrecy::{ExposeSecret, SecretString};
use serde_json::{json, Value};
use sqlx::{Connection, PgConnection};
use std::{
    net::SocketAddr,
    path::PathBuf,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use crate::{
    binaries, cpu, doc,
    process::{self, Daemon},
    run::Run,
    stores, Common,
};
use api::Api;
use figures::{BuyWindow, Figures, Memory, Profile, RunFigures};
use probes::{Key, PgSampler, RssSampler};

#[derive(Args)]
pub struct ReconcileArgs {
    /// Orders of the reconciled sale, one buyer each.
    #[arg(long, env = "BENCH_RECONCILE_ORDERS", default_value_t = 1_000_000)]
    reconcile_orders: i64,
    /// Of those, orders cancelled at their deadline (with restore-journal rows).
    #[arg(long, env = "BENCH_RECONCILE_CANCELLED", default_value_t = 5_000)]
    reconcile_cancelled: i64,
    /// The reconciled item's total stock.
    #[arg(long, env = "BENCH_RECONCILE_STOCK", default_value_t = 1_200_000)]
    reconcile_stock: i64,
    /// Rounds of count(*) then report run, each timed.
    #[arg(long, env = "BENCH_RECONCILE_ROUNDS", default_value_t = 5)]
    reconcile_rounds: usize,
    /// Timed report runs with one buyer record missing (buyer-by-buyer comparison).
    #[arg(long, env = "BENCH_RECONCILE_COMPARE_RUNS", default_value_t = 1)]
    reconcile_compare_runs: usize,
    /// Buys per second in each buy window.
    #[arg(long, env = "BENCH_RECONCILE_BUY_RATE", default_value_t = 1_000)]
    reconcile_buy_rate: u64,
    /// Seconds of each buy window.
    #[arg(long, env = "BENCH_RECONCILE_BUY_S", default_value_t = 5)]
    reconcile_buy_s: u64,
    /// Pairs of buy windows, each one without runs then one with runs (short windows, many
    /// pairs: the rest of the machine's load moves less within a pair).
    #[arg(long, env = "BENCH_RECONCILE_BUY_PAIRS", default_value_t = 6)]
    reconcile_buy_pairs: usize,
    /// Profiled report runs where the counts agree (their samples pooled).
    #[arg(long, env = "BENCH_RECONCILE_PROFILED", default_value_t = 3)]
    reconcile_profiled: usize,
    /// The benchmark's database (dropped and recreated; dropped again at the end).
    #[arg(
        long = "reconcile-db",
        env = "BENCH_RECONCILE_DB",
        default_value = "seckill_bench_reconcile"
    )]
    db: String,
    /// Where its server listens, on 127.0.0.1.
    #[arg(long, env = "BENCH_RECONCILE_PORT", default_value_t = 3910)]
    reconcile_port: u16,
}

/// How often a timed run's status is asked for while it runs (each ask also commits the
/// API token's `last_used_at`, so not more often).
const POLL: Duration = Duration::from_millis(10);
/// How often the runs beside the buy load are asked for: an operator's pace, so the
/// polling is not what the buys feel.
const POLL_BESIDE_BUYS: Duration = Duration::from_millis(50);
/// How often the server's resident memory is read during a run.
const RSS_EVERY: Duration = Duration::from_millis(10);
/// How often the profiled runs' database backends are sampled.
const PROFILE_EVERY: Duration = Duration::from_millis(2);
/// How often the buy windows' backends are sampled for lock waits.
const LOCK_EVERY: Duration = Duration::from_millis(20);
/// The unmeasured buys before the windows (connections, caches, the pipeline's batches).
const BUY_WARM_UP: Duration = Duration::from_secs(2);
/// The first buyer of the buy load: far above the seeded buyers.
const FIRST_BUYER: i64 = 50_000_000;

pub async fn run(common: &Common, args: &ReconcileArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.reconcile_rounds > 0 && args.reconcile_buy_pairs > 0 && args.reconcile_profiled > 0,
        "--reconcile-rounds, --reconcile-buy-pairs and --reconcile-profiled must be positive"
    );
    let mut bench = Bench::prepare(common, args).await?;
    let measured = bench.measure().await;
    let cleaned = bench.clean_up().await;
    let figures = measured?;
    cleaned?;
    let finished = bench.run.finish();
    let header = bench.run.header(&finished, Some("release"), "");
    let block = figures.block(&header);
    bench.run.say(&block);
    if common.update_doc {
        doc::replace_block(
            &common.root.join("BENCHMARKS.md"),
            "bench-reconcile",
            &block,
        )?;
    }
    anyhow::ensure!(
        figures.failures.is_empty(),
        "{} failure(s): {}",
        figures.failures.len(),
        figures.failures.join("; ")
    );
    Ok(())
}

struct Bench<'a> {
    args: &'a ReconcileArgs,
    run: Run,
    seckill: PathBuf,
    /// What every `seckill` it starts gets on top of the caller's environment.
    env: Vec<(String, String)>,
    db_url: String,
    base_db_url: String,
    redis_url: String,
    redis_prefix: String,
    amqp_url: String,
    amqp_prefix: String,
    etcd_endpoints: Vec<String>,
    etcd_prefix: String,
    jwt_secret: SecretString,
    base_url: String,
    http: reqwest::Client,
    server: Option<Daemon>,
    failures: Vec<String>,
}

impl<'a> Bench<'a> {
    async fn prepare(common: &Common, args: &'a ReconcileArgs) -> anyhow::Result<Self> {
        let address = SocketAddr::from(([127, 0, 0, 1], args.reconcile_port));
        process::ensure_free(address)?;
        let settings = Settings::load()?;
        let bins = binaries::prepare(&common.root, common.build, &["seckill"])?;
        let run = Run::start(&common.root, "reconcile-")?;
        let base_db_url = settings.database_url.expose_secret().to_owned();
        let db_url = stores::database_url(&base_db_url, &args.db);
        let id = std::process::id();
        let (redis_prefix, amqp_prefix, etcd_prefix) = (
            format!("bench-reconcile.{id}:"),
            format!("bench-reconcile.{id}"),
            format!("/bench-reconcile-{id}"),
        );
        let env = [
            ("DATABASE_URL", db_url.clone()),
            ("SECKILL_REDIS_PREFIX", redis_prefix.clone()),
            ("SECKILL_AMQP_PREFIX", amqp_prefix.clone()),
            ("SECKILL_ETCD_PREFIX", etcd_prefix.clone()),
            ("SECKILL_BIND", address.to_string()),
            ("RUST_LOG", common.rust_log.clone()),
        ]
        .map(|(k, v)| (k.to_owned(), v))
        .to_vec();
        Ok(Self {
            args,
            run,
            seckill: bins[0].clone(),
            env,
            db_url,
            base_db_url,
            redis_url: settings.redis_url.expose_secret().to_owned(),
            redis_prefix,
            amqp_url: settings.amqp_url.expose_secret().to_owned(),
            amqp_prefix,
            etcd_endpoints: settings.etcd_endpoints.clone(),
            etcd_prefix,
            jwt_secret: settings.jwt_secret.clone(),
            base_url: format!("http://{address}"),
            http: reqwest::Client::builder().no_proxy().build()?,
            server: None,
            failures: Vec::new(),
        })
    }

    fn fail(&mut self, what: String) {
        self.run.progress(format!("FAILED: {what}"));
        self.failures.push(what);
    }

    fn pid(&self) -> anyhow::Result<u32> {
        self.server
            .as_ref()
            .map(Daemon::pid)
            .context("no server runs")
    }

    async fn measure(&mut self) -> anyhow::Result<Figures> {
        let args = self.args;
        let shape = seed::Shape {
            orders: args.reconcile_orders,
            cancelled: args.reconcile_cancelled,
            total_stock: args.reconcile_stock,
        };
        self.run
            .progress(format!("recreating database {}", args.db));
        stores::recreate_database(&self.base_db_url, &args.db).await?;
        stores::flush_redis_prefix(&self.redis_url, &self.redis_prefix).await?;
        process::output(
            process::seckill(&self.seckill, &["migrate"], &self.env),
            None,
        )
        .await?;
        let token = process::api_token(&self.seckill, &self.env, "bench-ops", "ops", None).await?;
        let api = Api {
            http: self.http.clone(),
            base_url: self.base_url.clone(),
            token,
        };

        self.run.progress(format!(
            "seeding {} orders ({} cancelled)",
            shape.orders, shape.cancelled
        ));
        let seeded = seed::seed(&self.db_url, shape).await?;
        let (activity, item) = seeded.reconciled;
        self.run.say(format!(
            "seckill-bench reconcile: sale {activity} (item {item}) with {} orders seeded in {:.1} s, \
             VACUUM (ANALYZE) {:.1} s; buy load on sale {}",
            shape.orders,
            seeded.written.as_secs_f64(),
            seeded.vacuumed.as_secs_f64(),
            seeded.bought.0
        ));
        let config = self.write_config()?;

        // The pre-warm, on a server of its own.
        self.start_server("prewarm", &config).await?;
        let pid = self.pid()?;
        let rss_before = probes::status_kb(pid, "VmRSS").unwrap_or(0);
        let sampler = RssSampler::start(pid, RSS_EVERY);
        let started = Instant::now();
        let report = api
            .post(
                &format!("/admin/api/activities/{activity}/prewarm"),
                json!({}),
            )
            .await?;
        let prewarm = started.elapsed();
        let prewarm_peak = sampler.finish().await;
        std::fs::write(
            self.run.file("prewarm.json"),
            serde_json::to_string_pretty(&report)?,
        )?;
        let loaded = &report["items"][0];
        if loaded["buyers"].as_i64() != Some(shape.active())
            || loaded["redis_stock"].as_i64() != Some(shape.total_stock - shape.active())
        {
            self.fail(format!("the pre-warm loaded {loaded}"));
        }
        api.post(
            &format!("/admin/api/activities/{}/prewarm", seeded.bought.0),
            json!({}),
        )
        .await?;
        self.run.say(format!(
            "pre-warm of sale {activity}: {:.2} s, {} buyer records, server RSS {:.0} -> peak {:.0} MiB",
            prewarm.as_secs_f64(),
            loaded["buyers"],
            mib(rss_before),
            mib(prewarm_peak)
        ));
        self.stop_server().await?;

        self.start_server("measure", &config).await?;
        let pid = self.pid()?;
        let mut db = PgConnection::connect(&self.db_url).await?;
        let plan = count_plan(&mut db, activity).await?;
        // Unmeasured: the server's first run and the count's first statement (prepared, the
        // pages read into the caches).
        self.count(&mut db, activity, shape.orders).await?;
        let warm = api.report_run(activity, None, POLL).await?;
        self.expect_no_findings("the warm-up run", &warm);

        self.run.progress(format!(
            "measuring {} rounds: count(*), then a report run",
            args.reconcile_rounds
        ));
        let mut counts = Vec::new();
        let mut runs = Vec::new();
        let (mut count_cpu, mut run_cpu) = (cpu::Ticks::default(), cpu::Ticks::default());
        for round in 0..args.reconcile_rounds {
            let before = cpu::snapshot(Some(pid), &args.db);
            let counted = self.count(&mut db, activity, shape.orders).await?;
            let after = cpu::snapshot(Some(pid), &args.db);
            count_cpu = add(count_cpu, after - before);
            let before = cpu::snapshot(Some(pid), &args.db);
            let report = api.report_run(activity, Some(pid), POLL).await?;
            let after = cpu::snapshot(Some(pid), &args.db);
            run_cpu = add(run_cpu, after - before);
            self.expect_no_findings(&format!("round {round}'s run"), &report);
            self.run.say(format!(
                "round {round}: count(*) {:.1} ms, report run {:.1} ms (server {:.1} ms), {}",
                ms(counted),
                ms(report.wall),
                report.server.map_or(f64::NAN, ms),
                report
                    .memory
                    .as_ref()
                    .map_or(String::new(), Memory::describe)
            ));
            counts.push(counted);
            runs.push(report);
        }

        // One buyer record missing: the counts disagree and the run compares buyer by buyer.
        let missing = shape.cancelled + (shape.active() / 2).max(1);
        let mut compared = Vec::new();
        let redis_before = probes::redis_commands(&self.redis_url).await?;
        for attempt in 0..args.reconcile_compare_runs {
            let report = self
                .without_buyer(activity, item, missing, || {
                    api.report_run(activity, Some(pid), POLL)
                })
                .await?;
            self.expect_missing_buyer(&report, missing);
            self.run.say(format!(
                "buyer-by-buyer run {attempt}: {:.1} ms (server {:.1} ms), {}",
                ms(report.wall),
                report.server.map_or(f64::NAN, ms),
                report
                    .memory
                    .as_ref()
                    .map_or(String::new(), Memory::describe)
            ));
            compared.push(report);
        }
        let redis_after = probes::redis_commands(&self.redis_url).await?;
        let compare_redis: Vec<(String, u64, u64)> = ["hscan", "hmget"]
            .into_iter()
            .map(|name| {
                let (calls, usec) = redis_after.get(name).copied().unwrap_or_default();
                let (calls0, usec0) = redis_before.get(name).copied().unwrap_or_default();
                (name.to_uppercase(), calls - calls0, usec - usec0)
            })
            .collect();

        // Where a run's database time goes, on runs of their own (the sampling costs time).
        self.run.progress("profiling runs of each kind");
        let mut profile_agree = self
            .profiled(|| api.report_run(activity, None, POLL))
            .await?;
        for _ in 1..args.reconcile_profiled {
            let more = self
                .profiled(|| api.report_run(activity, None, POLL))
                .await?;
            profile_agree.pool(more);
        }
        let profile_compare = self
            .profiled(|| {
                self.without_buyer(activity, item, missing, || {
                    api.report_run(activity, None, POLL)
                })
            })
            .await?;
        let holders_plan = holders_plan(&mut db, activity, item).await?;
        drop(db);

        let windows = self.buy_windows(&api, activity, seeded.bought).await?;
        self.stop_server().await?;
        Ok(Figures {
            shape,
            seeded_s: seeded.written.as_secs_f64(),
            vacuum_s: seeded.vacuumed.as_secs_f64(),
            prewarm,
            prewarm_rss: (rss_before, prewarm_peak),
            count_plan: plan,
            holders_plan,
            counts,
            runs,
            compared,
            compare_redis,
            count_cpu,
            run_cpu,
            ticks_per_s: cpu::ticks_per_second(),
            profiles: [profile_agree, profile_compare],
            windows,
            buy_rate: args.reconcile_buy_rate,
            buy_s: args.reconcile_buy_s,
            failures: std::mem::take(&mut self.failures),
        })
    }

    /// One timed `count(*)` of the sale's orders.
    async fn count(
        &mut self,
        db: &mut PgConnection,
        activity: i64,
        expected: i64,
    ) -> anyhow::Result<Duration> {
        let started = Instant::now();
        let counted: i64 = sqlx::query_scalar("SELECT count(*) FROM orders WHERE activity_id = $1")
            .bind(activity)
            .fetch_one(&mut *db)
            .await?;
        let took = started.elapsed();
        if counted != expected {
            self.fail(format!("count(*) found {counted} orders, not {expected}"));
        }
        Ok(took)
    }

    /// `measure` while buyer `buyer`'s record is gone from Redis; put back afterwards.
    async fn without_buyer<F, Fut, T>(
        &self,
        activity: i64,
        item: i64,
        buyer: i64,
        measure: F,
    ) -> anyhow::Result<T>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = anyhow::Result<T>>,
    {
        let mut redis = redis::Client::open(self.redis_url.as_str())?
            .get_multiplexed_async_connection()
            .await?;
        // The server's key of the item's buyer records (`RedisStore::bought_key`).
        let bought = format!("{}{{a{activity}.i{item}}}:bought", self.redis_prefix);
        let units: Option<i64> = redis::cmd("HGET")
            .arg(&bought)
            .arg(buyer)
            .query_async(&mut redis)
            .await?;
        let units = units.with_context(|| format!("buyer {buyer} has no record in {bought}"))?;
        redis::cmd("HDEL")
            .arg(&bought)
            .arg(buyer)
            .query_async::<i64>(&mut redis)
            .await?;
        let measured = measure().await;
        redis::cmd("HSET")
            .arg(&bought)
            .arg(buyer)
            .arg(units)
            .query_async::<i64>(&mut redis)
            .await?;
        measured
    }

    /// `measure` with the database's busy backends sampled by statement.
    async fn profiled<F, Fut>(&self, measure: F) -> anyhow::Result<Profile>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = anyhow::Result<RunFigures>>,
    {
        let sampler = PgSampler::start(
            self.db_url.clone(),
            self.args.db.clone(),
            PROFILE_EVERY,
            Key::Statement,
        );
        let run = measure().await?;
        let activity = sampler.finish().await;
        Ok(Profile {
            walls: vec![run.wall],
            activity,
        })
    }

    fn expect_no_findings(&mut self, what: &str, run: &RunFigures) {
        if !run.findings.is_empty() {
            self.fail(format!(
                "{what} found {} finding(s) in a consistent sale: {}",
                run.findings.len(),
                Value::Array(run.findings.clone())
            ));
        }
    }

    fn expect_missing_buyer(&mut self, run: &RunFigures, buyer: i64) {
        let found = run.findings.len() == 1
            && run.findings[0]["class"] == "ORDER_NOT_IN_REDIS"
            && run.findings[0]["user_id"].as_i64() == Some(buyer);
        if !found {
            self.fail(format!(
                "the run without buyer {buyer}'s record found {}",
                Value::Array(run.findings.clone())
            ));
        }
    }

    /// The buy windows on the second sale: a warm-up, then pairs of one window without runs
    /// and one with report runs over the big sale back to back.
    async fn buy_windows(
        &mut self,
        api: &Api,
        reconciled: i64,
        (activity_id, item_id): (i64, i64),
    ) -> anyhow::Result<Vec<BuyWindow>> {
        let (rate, length) = (
            self.args.reconcile_buy_rate,
            Duration::from_secs(self.args.reconcile_buy_s),
        );
        let windows = u32::try_from(self.args.reconcile_buy_pairs * 2)?;
        let buys = (rate as f64 * (BUY_WARM_UP + length * windows).as_secs_f64()).ceil() as usize;
        self.run.progress(format!("minting {buys} buyer tokens"));
        let mut buyers = buys::Buyers::mint(&self.jwt_secret, FIRST_BUYER, buys)?;
        let target = buys::Target {
            http: buys::client()?,
            url: format!("{}/api/seckill/buy", self.base_url),
            activity_id,
            item_id,
        };
        self.run.progress(format!(
            "buys at {rate}/s: warm-up, then {} pairs of {length:?} without runs, {length:?} with runs",
            self.args.reconcile_buy_pairs
        ));
        buys::window(&target, &mut buyers, rate, BUY_WARM_UP).await?;
        let pid = self.pid()?;
        let mut windows = Vec::new();
        for with_runs in (0..self.args.reconcile_buy_pairs).flat_map(|_| [false, true]) {
            let stop = Arc::new(AtomicBool::new(false));
            let runner = with_runs.then(|| {
                let (api, stop) = (api.clone(), stop.clone());
                tokio::spawn(async move {
                    let mut runs = Vec::new();
                    while !stop.load(Ordering::Relaxed) {
                        runs.push(api.report_run(reconciled, None, POLL_BESIDE_BUYS).await?);
                    }
                    anyhow::Ok(runs)
                })
            });
            let locks = PgSampler::start(
                self.db_url.clone(),
                self.args.db.clone(),
                LOCK_EVERY,
                Key::Wait,
            );
            let before = cpu::snapshot(Some(pid), &self.args.db);
            let window = buys::window(&target, &mut buyers, rate, length).await?;
            let after = cpu::snapshot(Some(pid), &self.args.db);
            stop.store(true, Ordering::Relaxed);
            let waits = locks.finish().await;
            let runs = match runner {
                Some(runner) => runner.await??,
                None => Vec::new(),
            };
            let window = BuyWindow {
                with_runs,
                window,
                runs,
                waits,
                cpu: after - before,
            };
            self.run.say(window.describe());
            if window.window.ok != window.window.latencies.len() as u64 {
                self.fail(format!(
                    "buys that did not pre-create an order: {:?}",
                    window.window.failed
                ));
            }
            windows.push(window);
        }
        Ok(windows)
    }

    /// The server's settings: every buy comes from 127.0.0.1 (the per-address and per-item
    /// windows and the local bucket opened wide), no automatic reconciliation, queues that
    /// expire if the run dies before deleting them.
    fn write_config(&self) -> anyhow::Result<PathBuf> {
        let path = self.run.file("server.toml");
        std::fs::write(
            &path,
            format!(
                "[buy]\nper_ip_per_window = 1000000000\nper_item_per_window = 1000000000\n\
                 local_rate_per_s = 1000000000\nper_user_per_window = 1000\n\n\
                 [reconcile]\ninterval_ms = 0\n\n[pipeline]\nidle_queue_expiry_ms = 600000\n\n\
                 [control]\nsnapshot_path = {:?}\n",
                self.run.file("control-snapshot.json").display().to_string()
            ),
        )?;
        Ok(path)
    }

    async fn start_server(&mut self, label: &str, config: &std::path::Path) -> anyhow::Result<()> {
        let mut command = process::seckill(&self.seckill, &["serve"], &self.env);
        command.env("SECKILL_CONFIG", config);
        let log = self.run.file(&format!("server-{label}.log"));
        let mut server = Daemon::spawn(command, &format!("the server ({label})"), &log)?;
        let health = format!("{}/healthz", self.base_url);
        let http = self.http.clone();
        server
            .wait_until(Duration::from_secs(30), || {
                let request = http.get(&health).send();
                async move { request.await.is_ok_and(|r| r.status().is_success()) }
            })
            .await?;
        self.run
            .progress(format!("server ({label}) up, pid {}", server.pid()));
        self.server = Some(server);
        Ok(())
    }

    async fn stop_server(&mut self) -> anyhow::Result<()> {
        match self.server.take() {
            Some(server) => server.stop().await,
            None => Ok(()),
        }
    }

    /// Stops the server; removes its Redis keys, queues (with the buys' pay timeouts), etcd
    /// keys and the database (a million orders is not worth keeping).
    async fn clean_up(&mut self) -> anyhow::Result<()> {
        self.stop_server().await?;
        stores::flush_redis_prefix(&self.redis_url, &self.redis_prefix).await?;
        let amqp = stores::amqp(&self.amqp_url).await?;
        stores::delete_topology(&amqp, &self.amqp_prefix, &[seed::PAY_TIMEOUT_S as u32]).await?;
        stores::delete_etcd_prefix(&self.etcd_endpoints, &self.etcd_prefix).await?;
        stores::drop_database(&self.base_db_url, &self.args.db).await
    }
}

/// The scan `count(*)` gets, as EXPLAIN names it.
async fn count_plan(db: &mut PgConnection, activity: i64) -> anyhow::Result<String> {
    let lines: Vec<String> =
        sqlx::query_scalar("EXPLAIN SELECT count(*) FROM orders WHERE activity_id = $1")
            .bind(activity)
            .fetch_all(&mut *db)
            .await?;
    Ok(scan_of(&lines))
}

/// The scan of the run's holder count (`reconcile::store::holder_count`), as EXPLAIN names it.
async fn holders_plan(db: &mut PgConnection, activity: i64, item: i64) -> anyhow::Result<String> {
    let lines: Vec<String> = sqlx::query_scalar(
        "EXPLAIN SELECT COUNT(*) FROM buyer_holdings WHERE activity_id = $1 AND item_id = $2 AND units > 0",
    )
    .bind(activity)
    .bind(item)
    .fetch_all(&mut *db)
    .await?;
    Ok(scan_of(&lines))
}

/// `Index Only Scan using orders_by_buyer on orders` out of an EXPLAIN.
fn scan_of(lines: &[String]) -> String {
    lines
        .iter()
        .find(|line| line.contains(" Scan"))
        .map(|line| {
            let node = line.trim().trim_start_matches("->").trim();
            node.split("  (").next().unwrap_or(node).to_owned()
        })
        .unwrap_or_else(|| "?".into())
}

fn add(a: cpu::Ticks, b: cpu::Ticks) -> cpu::Ticks {
    cpu::Ticks {
        busy: a.busy + b.busy,
        server: a.server + b.server,
        redis: a.redis + b.redis,
        postgres: a.postgres + b.postgres,
        postgres_other_dbs: a.postgres_other_dbs + b.postgres_other_dbs,
        rabbitmq: a.rabbitmq + b.rabbitmq,
        waited_children: a.waited_children + b.waited_children,
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn mib(kb: u64) -> f64 {
    kb as f64 / 1024.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scan_is_read_out_of_the_plan() {
        let plan = [
            "Finalize Aggregate  (cost=1.00..2.00 rows=1 width=8)".to_owned(),
            "  ->  Parallel Index Only Scan using orders_by_buyer on orders  (cost=0.42..1.00 rows=1 width=0)"
                .to_owned(),
        ];
        assert_eq!(
            scan_of(&plan),
            "Parallel Index Only Scan using orders_by_buyer on orders"
        );
        assert_eq!(scan_of(&[]), "?");
    }
}
