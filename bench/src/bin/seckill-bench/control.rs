//! Switch propagation: three instances of one deployment (one database, Redis prefix and
//! etcd prefix; started in this process with [`Application`], against the shared etcd)
//! take `--flips` flips of `limits/per_ip_per_window` through the admin API (audit row,
//! etcd transaction with its write note). For each flip and each instance it measures the
//! time from just before the flip is sent to the instance having the new value in force:
//! the apply time the instance reports in its node key (`{prefix}/nodes/{node}`, rewritten
//! at once after an apply, its clock the same machine's). In the same run, alternating
//! flip by flip, it measures a bare etcd put of one key to the moment a watch on that key
//! delivers the event. Targets: switch p99 within 2x of the bare p99, and under 50 ms.

use anyhow::Context;
use base::config::Settings;
use clap::Args;
use etcd_client::{EventType, GetOptions, WatchOptions};
use seckill::startup::Application;
use secrecy::ExposeSecret;
use serde_json::{json, Value};
use std::{
    collections::HashMap,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use crate::{binaries, doc, process, run::Run, stores, Common};

#[derive(Args)]
pub struct ControlArgs {
    /// Flips measured, each alternated with a bare etcd put.
    #[arg(long, env = "BENCH_FLIPS", default_value_t = 300)]
    flips: usize,
    /// The control benchmark's database (dropped and recreated).
    #[arg(
        long = "control-db",
        env = "BENCH_CONTROL_DB",
        default_value = "seckill_bench_control"
    )]
    db: String,
}

/// The switch flipped: a limit every instance applies, harmless to the idle deployment.
const PATH: &str = "limits/per_ip_per_window";
/// Instances of the deployment.
const INSTANCES: usize = 3;
/// Quiet before each measurement: a flip's follow-up writes (three node reports, the audit
/// commit, three snapshot files) would otherwise land on the next one.
const SETTLE: Duration = Duration::from_millis(25);
/// Longest one flip may take to reach every instance before the run gives up.
const GIVE_UP: Duration = Duration::from_secs(10);

pub async fn run(common: &Common, args: &ControlArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.flips > 0, "--flips must be positive");
    base::telemetry::init();
    let mut settings = Settings::load()?;
    let bins = binaries::prepare(&common.root, common.build, &["seckill"])?;
    let run = Run::start(&common.root, "control-")?;
    run.progress(format!("recreating database {}", args.db));
    let db_url = stores::recreate_database(settings.database_url.expose_secret(), &args.db).await?;
    let id = std::process::id();
    settings.database_url = db_url.clone().into();
    settings.redis_prefix = format!("bench-control.{id}:");
    settings.amqp_prefix = format!("bench-control.{id}");
    settings.etcd_prefix = format!("/bench-control-{id}");
    settings.bind = "127.0.0.1:0".parse()?;
    settings.db_max_connections = 8;
    settings.workers = false;
    let env = [
        ("DATABASE_URL".to_owned(), db_url),
        ("RUST_LOG".to_owned(), common.rust_log.clone()),
    ];
    process::output(process::seckill(&bins[0], &["migrate"], &env), None).await?;
    let token = process::api_token(&bins[0], &env, "bench-ops", "ops", None).await?;

    let measured = measure(&run, &settings, &token, args.flips).await;
    let cleaned = async {
        stores::delete_etcd_prefix(&settings.etcd_endpoints, &settings.etcd_prefix).await?;
        stores::flush_redis_prefix(settings.redis_url.expose_secret(), &settings.redis_prefix).await
    }
    .await;
    let figures = measured?;
    cleaned?;
    let finished = run.finish();
    let profile = if cfg!(debug_assertions) {
        "dev"
    } else {
        "release"
    };
    let block = figures.block(&run.header(&finished, Some(profile), ""), args.flips);
    run.say(&block);
    if common.update_doc {
        doc::replace_block(
            &common.root.join("BENCHMARKS.md"),
            "bench-control.sh",
            &block,
        )?;
    }
    Ok(())
}

/// Milliseconds of each measurement, sorted.
struct Figures {
    switch: Vec<f64>,
    bare: Vec<f64>,
}

/// Starts the instances, then measures `flips` rounds.
async fn measure(
    run: &Run,
    settings: &Settings,
    token: &str,
    flips: usize,
) -> anyhow::Result<Figures> {
    let mut ports = Vec::new();
    for instance in 0..INSTANCES {
        let mut own = settings.clone();
        own.control.snapshot_path = run.file(&format!("snapshot-{instance}.json"));
        let application = Application::build(own).await?;
        ports.push(application.port());
        // Served until this process ends; its leases then expire in etcd.
        tokio::spawn(application.run_until_stopped());
    }
    let mut etcd = etcd_client::Client::connect(&settings.etcd_endpoints, None)
        .await
        .context("connecting to etcd")?;
    let nodes = format!("{}/nodes/", settings.etcd_prefix);
    let mut reports = Reports::default();
    let started = Instant::now();
    while reports.0.len() < INSTANCES {
        anyhow::ensure!(
            started.elapsed() < GIVE_UP,
            "{INSTANCES} live nodes not within {GIVE_UP:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
        let response = etcd
            .get(nodes.as_str(), Some(GetOptions::new().with_prefix()))
            .await?;
        reports = Reports::read(response.kvs());
    }
    let mut node_events = etcd
        .watch(nodes.as_str(), Some(WatchOptions::new().with_prefix()))
        .await?;
    let bare_key = format!("{}/bench/bare", settings.etcd_prefix);
    let mut bare_events = etcd.watch(bare_key.as_str(), None).await?;
    let http = reqwest::Client::builder().no_proxy().build()?;
    let flip_url = format!("http://127.0.0.1:{}/admin/api/switches/{PATH}", ports[0]);
    let mut figures = Figures {
        switch: Vec::new(),
        bare: Vec::new(),
    };
    run.progress(format!(
        "measuring {flips} flips over {INSTANCES} instances against bare etcd put -> watch"
    ));
    for round in 0..flips {
        tokio::time::sleep(SETTLE).await;
        let sent = Instant::now();
        etcd.put(bare_key.as_str(), round.to_string(), None).await?;
        loop {
            let response = bare_events.message().await?.context("the watch closed")?;
            if !response.events().is_empty() {
                break;
            }
        }
        figures.bare.push(sent.elapsed().as_secs_f64() * 1000.0);

        tokio::time::sleep(SETTLE).await;
        let target = round % 1000 + 1;
        let sent_us = now_us();
        let response = http
            .put(&flip_url)
            .bearer_auth(token)
            .json(&json!({ "value": target, "reason": "benchmark" }))
            .send()
            .await?;
        let status = response.status();
        let change: Value = response.json().await?;
        anyhow::ensure!(status.is_success(), "the flip answered {status}: {change}");
        let revision = change["revision"].as_i64().context("the flip's revision")?;
        let deadline = Instant::now() + GIVE_UP;
        let applied = loop {
            if let Some(applied) = reports.applied(revision) {
                break applied;
            }
            let response = tokio::time::timeout_at(deadline.into(), node_events.message())
                .await
                .context("the flip did not reach every instance")??
                .context("the watch closed")?;
            reports.update(response.events());
        };
        figures
            .switch
            .extend(applied.iter().map(|at| (at - sent_us) as f64 / 1000.0));
    }
    figures.switch.sort_by(f64::total_cmp);
    figures.bare.sort_by(f64::total_cmp);
    Ok(figures)
}

/// Wall-clock microseconds since the epoch, as the instances stamp their applies.
fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

/// The latest report of each live instance, by node key.
#[derive(Default)]
struct Reports(HashMap<String, Value>);

impl Reports {
    fn read(kvs: &[etcd_client::KeyValue]) -> Self {
        let mut reports = Self::default();
        for kv in kvs {
            reports.put(kv);
        }
        reports
    }

    fn put(&mut self, kv: &etcd_client::KeyValue) {
        if let (Ok(key), Ok(report)) = (kv.key_str(), serde_json::from_slice(kv.value())) {
            self.0.insert(key.to_owned(), report);
        }
    }

    fn update(&mut self, events: &[etcd_client::Event]) {
        for event in events {
            let Some(kv) = event.kv() else { continue };
            match event.event_type() {
                EventType::Put => self.put(kv),
                EventType::Delete => {
                    if let Ok(key) = kv.key_str() {
                        self.0.remove(key);
                    }
                }
            }
        }
    }

    /// When each instance applied the write of [`PATH`] at `revision`, once all have.
    fn applied(&self, revision: i64) -> Option<Vec<i64>> {
        let applied: Vec<i64> = self
            .0
            .values()
            .filter_map(|report| {
                report["recent"]
                    .as_array()?
                    .iter()
                    .find(|apply| apply["path"] == PATH && apply["mod_revision"] == revision)?
                    ["applied_at_us"]
                    .as_i64()
            })
            .collect();
        (applied.len() == INSTANCES).then_some(applied)
    }
}

/// Nearest-rank percentile of sorted samples.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

impl Figures {
    /// The result block of BENCHMARKS.md's "Switch propagation" section.
    fn block(&self, header: &str, rounds: usize) -> String {
        let max = |samples: &[f64]| samples.last().copied().unwrap_or_default();
        let (p50, p99) = (
            percentile(&self.switch, 0.5),
            percentile(&self.switch, 0.99),
        );
        let (bare_p50, bare_p99) = (percentile(&self.bare, 0.5), percentile(&self.bare, 0.99));
        let ratio = p99 / bare_p99;
        let verdict = |met: bool| if met { "met" } else { "**missed**" };
        [
            header.to_owned(),
            String::new(),
            format!("| measurement ({rounds} rounds) | p50 ms | p99 ms | max ms |"),
            "|---|---|---|---|".into(),
            format!(
                "| switch flip → in force, each of {INSTANCES} instances | {p50:.2} | {p99:.2} | {:.2} |",
                max(&self.switch)
            ),
            format!(
                "| bare etcd put → watch event, one key | {bare_p50:.2} | {bare_p99:.2} | {:.2} |",
                max(&self.bare)
            ),
            String::new(),
            format!(
                "p99 ratio {ratio:.2} (target ≤ 2: {}); switch p99 {p99:.2} ms (target < 50 ms: {}).",
                verdict(p99 <= 2.0 * bare_p99),
                verdict(p99 < 50.0)
            ),
        ]
        .join("\n")
    }
}
