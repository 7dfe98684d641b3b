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
//! The family's stage (stores, settings, servers, the sale) is in [`setup`], its loads and
//! the measurement around each in [`measure`], with the optional [`probes`].

pub mod dashboard;
pub mod hotkeys;
pub mod lottery;
mod measure;
mod probes;
pub mod proxies;
pub mod sale_page;
mod setup;
pub mod soak;
mod summary;

use base::config::Settings;
use clap::{builder::BoolishValueParser, ArgAction, Args};
use secrecy::ExposeSecret;
use serde_json::json;
use std::{net::SocketAddr, path::PathBuf, process::Stdio};
use tokio::process::Command;

use crate::{
    binaries, cpu, doc,
    process::{self, Daemon},
    run::Run,
    stores, Common,
};
use probes::Probes;
use summary::measurement::{Kind, Measurement};

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

/// The storm and `/healthz` run to their last request; this only bounds a pathological run.
const STORM_MAX_S: u64 = 60;
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

/// The two sides of pair number `pair` in the order they run: as given for even pairs,
/// swapped for odd ones, so a drift of the machine over a run favours neither side.
fn alternating<T: Copy>(pair: usize, [first, second]: [T; 2]) -> [T; 2] {
    if pair.is_multiple_of(2) {
        [first, second]
    } else {
        [second, first]
    }
}

/// "Median ratio **m** over n pairs (spread low–high); target ≥ t.", after "`what`: " when
/// given; nothing without ratios.
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
