//! Hot-key detection (`seckill-bench hotkeys`): how fast a buyer hot only in the sum of two
//! instances is refused on both, and what counting every buy costs the buy path.
//!
//! 1. Detection latency. Two `seckill serve` instances of one deployment (one database,
//!    Redis, AMQP and etcd prefix; ports `port` and `port + 1`, node ids of their own) and
//!    the rule `rules/hotkeys/user` = 50/s, `block`, hold 1 s. Each burst is a fresh buyer
//!    sending 30 buys/s to each instance, the two streams half a period apart: 60/s in the
//!    sum, neither instance at the threshold alone. The latency is the time from the
//!    burst's first buy to the moment both instances have answered that buyer 429
//!    `RATE_LIMITED`, read from the buys themselves (so up to one period of 33 ms late).
//!    Beside them, `GET /admin/api/hotkeys` of each instance is polled every 10 ms: when
//!    each lists the buyer in force, and the `since_ms` the leader stamped on finding it
//!    hot, which splits the latency into detection (the window filling up, the report
//!    period) and propagation (etcd write, watch, table). Targets: p99 ≤ 1 s, no burst
//!    undetected within 3 s.
//! 2. Overhead. The sold-out storm and the success path of `funnel`, with detection on and
//!    off (`SECKILL_HOTKEYS`; the server restarted for each side, the stores kept), in
//!    pairs taken back to back with the order alternating from pair to pair, so a drift of
//!    the machine favours neither side. Target: on / off ≥ 0.95.
//!
//! It runs in key spaces of its own (database `seckill_bench_hotkeys`, port 3950 and 3951,
//! prefixes `bench-hotkeys`), so it never meets another benchmark's server or keys.

use anyhow::Context;
use base::config::Settings;
use clap::Args;
use futures::{stream::FuturesUnordered, StreamExt};
use serde_json::{json, Value};
use std::{
    fmt::Write as _,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};
use tokio::time::MissedTickBehavior;
use uuid::Uuid;

use super::{dashboard::load, Funnel, FunnelArgs, Item, Namespace, Pace, Probes};
use crate::{control::percentile, process, run::grouped, Common};

#[derive(Args)]
#[command(
    mut_arg("db", |arg| arg
        .default_value("seckill_bench_hotkeys")
        .env("BENCH_HOTKEYS_DB")
        .help("The hot-key benchmark's database (dropped and recreated)")),
    mut_arg("port", |arg| arg
        .default_value("3950")
        .env("BENCH_HOTKEYS_PORT")
        .help("Where its first server listens, on 127.0.0.1; the second takes the next port")),
)]
pub struct HotKeysArgs {
    #[command(flatten)]
    funnel: FunnelArgs,
    /// Bursts measured for the detection latency, each by a fresh buyer.
    #[arg(long, env = "BENCH_HOTKEYS_BURSTS", default_value_t = 50)]
    bursts: usize,
    /// Pairs of loads (detection on, detection off) for the overhead.
    #[arg(long, env = "BENCH_HOTKEYS_PAIRS", default_value_t = 3)]
    pairs: usize,
}

/// Its own key spaces, so that it may run beside `funnel` and the others.
const NAMESPACE: Namespace = Namespace {
    redis: "bench-hotkeys:",
    amqp: "bench-hotkeys",
    etcd: "/bench-hotkeys",
    run: "hotkeys-",
};

/// The rule under test: a buyer at 50 buys/s or more over the cluster is blocked for 1 s.
const THRESHOLD_PER_S: u64 = 50;
const HOLD_S: u64 = 1;
/// What a burst's buyer sends to each instance, per second: together above the threshold,
/// alone below it.
const RATE_PER_INSTANCE: u32 = 30;
/// Instances of the deployment in the latency measurement.
const INSTANCES: usize = 2;
/// A burst not refused by both instances by then counts as undetected.
const GIVE_UP: Duration = Duration::from_secs(3);
/// How often each instance's view of the keys in force is read during a burst.
const VIEW_POLL: Duration = Duration::from_millis(10);
/// Longest a burst's key may take to lapse on both instances before the next burst starts
/// anyway (hold, plus the second the buyer's count takes to leave the window).
const LAPSE_WITHIN: Duration = Duration::from_secs(5);
/// The instances' report period: the bursts start at phases spread over it.
const REPORT_PERIOD_MS: u64 = 250;
/// The buyers of the bursts: far from the load tool's and the warm-ups' ranges.
const FIRST_BURST_BUYER: i64 = 70_000_000;

pub async fn run(common: &Common, args: &HotKeysArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.bursts > 0 && args.pairs > 0,
        "--bursts and --pairs must be positive"
    );
    let mut bench = Funnel::prepare(common, &args.funnel, &NAMESPACE).await?;
    let measured = measure(&mut bench, args).await;
    let cleaned = bench.clean_up().await;
    let figures = measured?;
    cleaned?;
    report(common, &bench, &figures)
}

/// Both measurements; one that fails is recorded as a failure and leaves the other be.
struct Figures {
    bursts: Vec<Burst>,
    pairs: Vec<Pair>,
}

async fn measure(bench: &mut Funnel<'_>, args: &HotKeysArgs) -> anyhow::Result<Figures> {
    bench.write_meta()?;
    let merchant = bench.fresh_stores().await?;
    let config = bench.write_config("bench.toml", 256)?;
    bench.start_server("setup", &config, &[]).await?;
    let [storm, success, ..] = bench.open_sale(&merchant).await?;
    bench.sell_out(storm.id).await;
    bench.stop_server().await?;
    let mut pairs = Vec::new();
    if let Err(error) = overhead(bench, args, &config, &storm, &success, &mut pairs).await {
        bench.fail(format!("overhead: {error:#}"));
    }
    let _ = bench.stop_server().await;
    let mut bursts = Vec::new();
    if let Err(error) = latency(bench, args, &config, storm.id, &mut bursts).await {
        bench.fail(format!("detection latency: {error:#}"));
    }
    Ok(Figures { bursts, pairs })
}

// ---- 1. Detection latency ----

/// One burst, in milliseconds from its first buy.
#[derive(Clone, Copy)]
struct Burst {
    /// When each instance first answered the buyer 429 `RATE_LIMITED`.
    refused: [Option<f64>; INSTANCES],
    /// When each instance first listed the buyer among the keys in force.
    listed: [Option<f64>; INSTANCES],
    /// When the leader found the buyer hot (its `since_ms`; one machine, one clock).
    found: Option<f64>,
    /// Buys sent.
    sent: usize,
}

impl Burst {
    /// First buy to both instances refusing; `None`: not within [`GIVE_UP`].
    fn latency(&self) -> Option<f64> {
        both(&self.refused)
    }

    /// First buy to both instances listing the key.
    fn listed_on_both(&self) -> Option<f64> {
        both(&self.listed)
    }

    /// The leader finding the key hot to both instances listing it.
    fn spread(&self) -> Option<f64> {
        Some(self.listed_on_both()? - self.found?)
    }
}

/// The later of the instances' times, once each has one.
fn both(times: &[Option<f64>; INSTANCES]) -> Option<f64> {
    times
        .iter()
        .try_fold(f64::NEG_INFINITY, |latest, t| t.map(|t| latest.max(t)))
}

/// Where and as whom the bursts are sent.
struct Cluster {
    http: reqwest::Client,
    /// Each instance's base URL.
    bases: [String; INSTANCES],
    /// An ops token: it may set rules and read the view.
    ops: String,
    settings: Settings,
    activity: i64,
    item: i64,
}

async fn latency(
    bench: &mut Funnel<'_>,
    args: &HotKeysArgs,
    config: &std::path::Path,
    item: i64,
    bursts: &mut Vec<Burst>,
) -> anyhow::Result<()> {
    let ops = process::api_token(&bench.seckill, &bench.env, "bench-ops", "ops", None).await?;
    let second_port = args
        .funnel
        .port
        .checked_add(1)
        .context("no port after --port")?;
    bench
        .start_server(
            "latency-a",
            config,
            &[
                ("SECKILL_HOTKEYS", "on"),
                ("SECKILL_NODE_ID", "bench-hotkeys-a"),
            ],
        )
        .await?;
    let second_config = bench.write_config("bench-b.toml", 256)?;
    let second = bench
        .spawn_server(
            "latency-b",
            &second_config,
            &[
                ("SECKILL_HOTKEYS", "on"),
                ("SECKILL_NODE_ID", "bench-hotkeys-b"),
            ],
            second_port,
        )
        .await?;
    let cluster = Cluster {
        http: bench.http.clone(),
        bases: [
            bench.base_url.clone(),
            format!("http://127.0.0.1:{second_port}"),
        ],
        ops,
        settings: Settings::load()?,
        activity: bench.activity,
        item,
    };
    let measured = cluster.bursts(bench, args.bursts, bursts).await;
    let stopped = second.stop().await;
    bench.stop_server().await?;
    measured?;
    stopped
}

impl Cluster {
    /// Sets the rule, waits for both instances to report, runs one unmeasured burst, then
    /// `count` measured ones; removes the rule at the end.
    async fn bursts(
        &self,
        bench: &Funnel<'_>,
        count: usize,
        bursts: &mut Vec<Burst>,
    ) -> anyhow::Result<()> {
        self.rule(json!({
            "threshold_per_s": THRESHOLD_PER_S,
            "action": "block",
            "hold_s": HOLD_S,
        }))
        .await?;
        self.until_both_report().await?;
        let mut log =
            String::from("user,sent,refused_a_ms,refused_b_ms,listed_a_ms,listed_b_ms,found_ms\n");
        bench.run.progress(format!(
            "measuring {count} bursts of {RATE_PER_INSTANCE} buys/s to each of {INSTANCES} \
             instances (rule: user >= {THRESHOLD_PER_S}/s, block, hold {HOLD_S} s)"
        ));
        // The first burst warms the connections and the leader's etcd client; not counted.
        for index in 0..=count {
            let user = FIRST_BURST_BUYER + i64::try_from(index)?;
            let burst = self.burst(user).await?;
            let cell = |t: Option<f64>| t.map_or(String::new(), |t| format!("{t:.1}"));
            let _ = writeln!(
                log,
                "{user},{},{},{},{},{},{}",
                burst.sent,
                cell(burst.refused[0]),
                cell(burst.refused[1]),
                cell(burst.listed[0]),
                cell(burst.listed[1]),
                cell(burst.found)
            );
            if index > 0 {
                bursts.push(burst);
            }
            if index % 10 == 0 {
                bench.run.progress(format!(
                    "burst {index}: both refuse at {} ms",
                    burst
                        .latency()
                        .map_or("never".into(), |t| format!("{t:.0}"))
                ));
            }
            if !self.lapsed(user).await? {
                bench.run.progress(format!(
                    "buyer {user} still in force after {LAPSE_WITHIN:?}"
                ));
            }
            // Bursts starting at the same phase of the instances' report timers would all
            // meet the same wait for the next report; spread the starts over the period.
            let phase = (index as u64 * 37) % REPORT_PERIOD_MS;
            tokio::time::sleep(Duration::from_millis(phase)).await;
        }
        std::fs::write(bench.run.file("bursts.csv"), log)?;
        self.rule(json!("off")).await
    }

    /// Sets the `user` rule and waits until every instance has it in force.
    async fn rule(&self, value: Value) -> anyhow::Result<()> {
        let response = self
            .http
            .put(format!(
                "{}/admin/api/switches/rules/hotkeys/user?wait_ms=5000",
                self.bases[0]
            ))
            .bearer_auth(&self.ops)
            .json(&json!({ "value": value, "reason": "bench" }))
            .send()
            .await?;
        let status = response.status();
        let answer: Value = response.json().await?;
        anyhow::ensure!(
            status.is_success() && answer["propagation"]["complete"] == true,
            "the rule answered {status}: {answer}"
        );
        Ok(())
    }

    /// `GET /admin/api/hotkeys` of one instance.
    async fn view(&self, instance: usize) -> anyhow::Result<Value> {
        let response = self
            .http
            .get(format!("{}/admin/api/hotkeys", self.bases[instance]))
            .bearer_auth(&self.ops)
            .send()
            .await?;
        let status = response.status();
        let view: Value = response.json().await?;
        anyhow::ensure!(status.is_success(), "the view answered {status}: {view}");
        Ok(view)
    }

    /// Until each instance's top adds up the reports of both: only then is a key hot only
    /// in the sum found.
    async fn until_both_report(&self) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let mut reporting = Vec::new();
            for instance in 0..INSTANCES {
                reporting.push(self.view(instance).await?["reporting_nodes"].as_u64());
            }
            if reporting.iter().all(|n| *n >= Some(INSTANCES as u64)) {
                return Ok(());
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "the instances report {reporting:?} nodes, not {INSTANCES}, after 10 s"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// One buy of `authorization`'s buyer at one instance: whether it was refused as hot.
    async fn buy(&self, instance: usize, authorization: &str) -> bool {
        let sent = self
            .http
            .post(format!("{}/api/seckill/buy", self.bases[instance]))
            .header("Authorization", authorization)
            .header("X-Request-ID", Uuid::new_v4().to_string())
            .json(&json!({ "activity_id": self.activity, "item_id": self.item, "quantity": 1 }))
            .send()
            .await;
        let Ok(response) = sent else { return false };
        let limited = response.status() == reqwest::StatusCode::TOO_MANY_REQUESTS;
        let body: Value = response.json().await.unwrap_or_default();
        limited && body["code"] == "RATE_LIMITED"
    }

    /// The `since_ms` of `user` in one instance's keys in force, if it is listed.
    async fn listed(&self, instance: usize, user: &str) -> Option<i64> {
        let view = self.view(instance).await.ok()?;
        view["hot"]
            .as_array()?
            .iter()
            .find(|hot| hot["kind"] == "user" && hot["key"] == user)?["since_ms"]
            .as_i64()
    }

    /// One burst of a fresh buyer, until both instances refuse it and list it in force, or
    /// [`GIVE_UP`].
    async fn burst(&self, user: i64) -> anyhow::Result<Burst> {
        let token = sale::identity::buyer_token::mint(
            &self.settings.jwt_secret,
            user,
            chrono::Duration::minutes(10),
        )?;
        let authorization = format!("Bearer {token}");
        let key = user.to_string();
        let mut burst = Burst {
            refused: [None; INSTANCES],
            listed: [None; INSTANCES],
            found: None,
            sent: 0,
        };
        // One tick per buy, to the instances in turn: each gets RATE_PER_INSTANCE a second.
        let mut buy_ticks =
            tokio::time::interval(Duration::from_secs(1) / (RATE_PER_INSTANCE * INSTANCES as u32));
        let mut view_ticks = tokio::time::interval(VIEW_POLL);
        view_ticks.set_missed_tick_behavior(MissedTickBehavior::Skip);
        let mut buys = FuturesUnordered::new();
        let mut views = FuturesUnordered::new();
        let mut viewing = [false; INSTANCES];
        let started = Instant::now();
        let started_ms = epoch_ms();
        let give_up = tokio::time::sleep(GIVE_UP);
        tokio::pin!(give_up);
        let since = |at: Instant| at.duration_since(started).as_secs_f64() * 1000.0;
        // The views may catch the key a poll after the buys did: they go on (the buys
        // stop) until both instances were seen listing it too.
        while burst.latency().is_none() || burst.listed_on_both().is_none() {
            tokio::select! {
                _ = &mut give_up => break,
                _ = buy_ticks.tick(), if burst.latency().is_none() => {
                    let instance = burst.sent % INSTANCES;
                    burst.sent += 1;
                    let authorization = &authorization;
                    buys.push(async move {
                        let refused = self.buy(instance, authorization).await;
                        (instance, refused, Instant::now())
                    });
                }
                _ = view_ticks.tick() => {
                    for (instance, viewing) in viewing.iter_mut().enumerate() {
                        if burst.listed[instance].is_none() && !*viewing {
                            *viewing = true;
                            let key = &key;
                            views.push(async move {
                                (instance, self.listed(instance, key).await, Instant::now())
                            });
                        }
                    }
                }
                Some((instance, refused, at)) = buys.next() => {
                    if refused && burst.refused[instance].is_none() {
                        burst.refused[instance] = Some(since(at));
                    }
                }
                Some((instance, listed, at)) = views.next() => {
                    viewing[instance] = false;
                    if let Some(since_ms) = listed {
                        burst.listed[instance] = Some(since(at));
                        burst.found.get_or_insert((since_ms - started_ms) as f64);
                    }
                }
            }
        }
        Ok(burst)
    }

    /// Until neither instance lists `user` any more, at most [`LAPSE_WITHIN`]; whether it
    /// lapsed.
    async fn lapsed(&self, user: i64) -> anyhow::Result<bool> {
        let key = user.to_string();
        let deadline = Instant::now() + LAPSE_WITHIN;
        while Instant::now() < deadline {
            let mut listed = false;
            for instance in 0..INSTANCES {
                listed |= self.listed(instance, &key).await.is_some();
            }
            if !listed {
                return Ok(true);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(false)
    }
}

/// Wall-clock milliseconds since the epoch, as the leader stamps `since_ms`.
fn epoch_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

// ---- 2. Overhead ----

/// Detection on or off, as `SECKILL_HOTKEYS` spells it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Detection {
    On,
    Off,
}

impl Detection {
    fn env(self) -> &'static str {
        match self {
            Self::On => "on",
            Self::Off => "off",
        }
    }
}

/// One side of a pair: throughputs, server CPU per request, samples dropped, and what the
/// view counted for the load's address right after the storm.
#[derive(Default, Clone, Copy)]
struct Side {
    storm: f64,
    storm_us: Option<f64>,
    success: f64,
    success_us: Option<f64>,
    dropped: f64,
    counted_ip_per_s: u64,
}

#[derive(Default)]
struct Pair {
    on_first: bool,
    on: Side,
    off: Side,
}

impl Pair {
    fn storm_ratio(&self) -> f64 {
        self.on.storm / self.off.storm.max(1.0)
    }

    fn success_ratio(&self) -> f64 {
        self.on.success / self.off.success.max(1.0)
    }
}

async fn overhead(
    bench: &mut Funnel<'_>,
    args: &HotKeysArgs,
    config: &std::path::Path,
    storm: &Item,
    success: &Item,
    pairs: &mut Vec<Pair>,
) -> anyhow::Result<()> {
    let sre = process::api_token(&bench.seckill, &bench.env, "bench-sre", "sre", None).await?;
    let storm_args = bench.storm_args();
    let mut round = 0;
    for pair in 0..args.pairs {
        let order = super::alternating(pair, [Detection::On, Detection::Off]);
        let mut measured = Pair {
            on_first: order[0] == Detection::On,
            ..Pair::default()
        };
        for detection in order {
            let label = format!("{pair}-{}", detection.env());
            bench
                .start_server(&label, config, &[("SECKILL_HOTKEYS", detection.env())])
                .await?;
            bench.warm_up(storm.id, &["buy"]).await;
            let mut side = Side {
                storm: load(bench, &format!("storm-{label}"), storm.id, &storm_args).await?,
                ..Side::default()
            };
            side.counted_ip_per_s = counted_ip_rate(bench, &sre).await;
            let storm_measured = bench.latest();
            side.storm_us = storm_measured.and_then(|m| m.server_us_per_request());
            side.dropped = storm_measured.map_or(0.0, |m| m.hotkey_samples_dropped());
            bench
                .success(
                    &format!("success-{label}"),
                    success,
                    round,
                    Probes::NONE,
                    false,
                    Pace::Closed,
                )
                .await?;
            round += 1;
            if let Some(m) = bench.latest() {
                side.success = m.rps().unwrap_or(0.0);
                side.success_us = m.server_us_per_request();
                side.dropped += m.hotkey_samples_dropped();
            }
            bench.stop_server().await?;
            match detection {
                Detection::On => measured.on = side,
                Detection::Off => measured.off = side,
            }
        }
        if measured.on.counted_ip_per_s == 0 || measured.off.counted_ip_per_s > 0 {
            bench.fail(format!(
                "pair {}: the view counted {}/s with detection on and {}/s with it off",
                pair + 1,
                measured.on.counted_ip_per_s,
                measured.off.counted_ip_per_s
            ));
        }
        bench.run.progress(format!(
            "pair {pair}: storm on {:.0}/s off {:.0}/s ({:.3}), success on {:.0}/s off {:.0}/s ({:.3})",
            measured.on.storm,
            measured.off.storm,
            measured.storm_ratio(),
            measured.on.success,
            measured.off.success,
            measured.success_ratio()
        ));
        pairs.push(measured);
    }
    Ok(())
}

/// The rate the cluster-wide top gives the load's address (127.0.0.1) just after a load:
/// the sliding second still holds its last requests. Zero when nothing was counted.
async fn counted_ip_rate(bench: &Funnel<'_>, token: &str) -> u64 {
    let view = async {
        bench
            .http
            .get(format!("{}/admin/api/hotkeys", bench.base_url))
            .bearer_auth(token)
            .send()
            .await?
            .json::<Value>()
            .await
    }
    .await
    .unwrap_or_default();
    view["top"]["ip"]
        .as_array()
        .and_then(|top| top.iter().find(|k| k["key"] == "127.0.0.1"))
        .and_then(|k| k["rate_per_s"].as_u64())
        .unwrap_or(0)
}

// ---- The result block ----

fn report(common: &Common, bench: &Funnel<'_>, figures: &Figures) -> anyhow::Result<()> {
    let mut lines = latency_lines(&figures.bursts);
    lines.push(String::new());
    lines.extend(overhead_lines(&figures.pairs));
    bench.publish(common, "hotkeys", lines)
}

/// Milliseconds, `> 3000` for a burst never detected.
fn ms(t: f64) -> String {
    if t.is_finite() {
        format!("{t:.0}")
    } else {
        format!("> {}", GIVE_UP.as_millis())
    }
}

fn latency_lines(bursts: &[Burst]) -> Vec<String> {
    if bursts.is_empty() {
        return vec!["Detection latency: not measured (see the failures).".into()];
    }
    let n = bursts.len();
    // Undetected bursts count as infinitely late, so they weigh on the percentiles.
    let sorted = |f: fn(&Burst) -> Option<f64>| {
        let mut samples: Vec<f64> = bursts
            .iter()
            .map(|b| f(b).unwrap_or(f64::INFINITY))
            .collect();
        samples.sort_by(f64::total_cmp);
        samples
    };
    let row = |what: &str, samples: &[f64]| {
        format!(
            "| {what} | {} | {} | {} |",
            ms(percentile(samples, 0.5)),
            ms(percentile(samples, 0.99)),
            ms(samples.last().copied().unwrap_or(f64::INFINITY))
        )
    };
    let refused = sorted(Burst::latency);
    let undetected = bursts.iter().filter(|b| b.latency().is_none()).count();
    let p99 = percentile(&refused, 0.99);
    // The earliest the rule can hold: the threshold's buy leaves (threshold - 1) periods
    // after the first.
    let floor_ms =
        (THRESHOLD_PER_S - 1) as f64 * 1000.0 / f64::from(RATE_PER_INSTANCE * INSTANCES as u32);
    let found = sorted(|b| b.found);
    let waited: Vec<f64> = found.iter().map(|t| t - floor_ms).collect();
    let verdict = |met: bool| if met { "met" } else { "**missed**" };
    vec![
        format!(
            "**Detection latency**: {INSTANCES} instances, rule `user` ≥ {THRESHOLD_PER_S}/s → \
             `block`, hold {HOLD_S} s; {n} bursts (after one unmeasured), each a fresh buyer \
             sending {RATE_PER_INSTANCE} buys/s to each instance ({}/s in the sum). Latency = \
             first buy → both instances answer it 429 `RATE_LIMITED`, read from the buys \
             themselves (each instance sees one every {:.0} ms); the views are \
             `GET /admin/api/hotkeys` of both, every {} ms.",
            RATE_PER_INSTANCE * INSTANCES as u32,
            1000.0 / f64::from(RATE_PER_INSTANCE),
            VIEW_POLL.as_millis()
        ),
        String::new(),
        format!("| from the burst's first buy ({n} bursts) | p50 ms | p99 ms | max ms |"),
        "|---|---|---|---|".into(),
        row(
            "→ both instances refuse the buyer (**the latency**)",
            &refused,
        ),
        row(
            "→ both instances list it in force (views)",
            &sorted(Burst::listed_on_both),
        ),
        row("→ the leader finds it hot (`since_ms`)", &found),
        row(
            &format!(
                "of which after the {THRESHOLD_PER_S}th buy (sent at {floor_ms:.0} ms): \
                 report period, quarter alignment, lease grant"
            ),
            &waited,
        ),
        row(
            "leader finds it hot → both list it (etcd put, watch, table)",
            &sorted(Burst::spread),
        ),
        String::new(),
        format!(
            "p99 {} ms (target ≤ 1000 ms: {}); undetected within {} s: {undetected} of {n} \
             (target 0: {}).",
            ms(p99),
            verdict(p99 <= 1000.0),
            GIVE_UP.as_secs(),
            verdict(undetected == 0)
        ),
    ]
}

fn overhead_lines(pairs: &[Pair]) -> Vec<String> {
    if pairs.is_empty() {
        return vec!["Overhead: not measured (see the failures).".into()];
    }
    let us = |t: Option<f64>| t.map_or("n/a".into(), |t| format!("{t:.1}"));
    let mut lines = vec![
        "**Overhead**: the sold-out storm and the success path of `funnel`, detection on \
         against off (`SECKILL_HOTKEYS`, the server restarted for each side, the stores kept), \
         in pairs back to back, the order alternating. Server CPU in µs per request; \
         \"counted\" is the rate the top gave 127.0.0.1 right after the storm."
            .to_owned(),
        String::new(),
        "| pair | order | storm on (req/s) | storm off (req/s) | ratio | success on (req/s) | \
         success off (req/s) | ratio | server µs/req on / off: storm, success | samples dropped \
         (on) | counted on / off (/s) |"
            .to_owned(),
        "|---|---|---|---|---|---|---|---|---|---|---|".to_owned(),
    ];
    for (index, pair) in pairs.iter().enumerate() {
        lines.push(format!(
            "| {} | {} | {} | {} | {:.3} | {} | {} | {:.3} | {} / {}, {} / {} | {} | {} / {} |",
            index + 1,
            if pair.on_first { "on, off" } else { "off, on" },
            grouped(pair.on.storm, 0),
            grouped(pair.off.storm, 0),
            pair.storm_ratio(),
            grouped(pair.on.success, 0),
            grouped(pair.off.success, 0),
            pair.success_ratio(),
            us(pair.on.storm_us),
            us(pair.off.storm_us),
            us(pair.on.success_us),
            us(pair.off.success_us),
            grouped(pair.on.dropped, 0),
            grouped(pair.on.counted_ip_per_s as f64, 0),
            grouped(pair.off.counted_ip_per_s as f64, 0),
        ));
    }
    lines.push(String::new());
    for (what, ratios) in [
        (
            "Sold-out storm on / off",
            pairs.iter().map(Pair::storm_ratio).collect(),
        ),
        (
            "Success path on / off",
            pairs.iter().map(Pair::success_ratio).collect(),
        ),
    ] {
        lines.extend(super::ratio_line(Some(what), ratios, 0.95));
        lines.push(String::new());
    }
    lines.pop();
    lines
}
