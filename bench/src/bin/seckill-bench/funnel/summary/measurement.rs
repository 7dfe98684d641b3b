//! One funnel measurement reduced to numbers ([`Measurement::new`]): the tool's output
//! (`seckill-load`'s JSON, `redis-benchmark`'s CSV, `pgbench`'s text) and what the probes
//! saw around it (CPU ticks, Redis command counts, `/metrics` deltas, the perf profile,
//! PostgreSQL's waits). Apart from the result block, which only reads these figures.

use regex::Regex;
use serde::Serialize;
use serde_json::Value;
use std::{collections::BTreeMap, sync::LazyLock, time::Duration};

use crate::cpu::{self, Ticks};

/// Which tool took a measurement, and so how its output reads.
#[derive(Clone, Copy, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    Load,
    RedisBenchmark,
    Pgbench,
}

impl Kind {
    pub(super) fn tool(self) -> &'static str {
        match self {
            Self::Load => "seckill-load",
            Self::RedisBenchmark => "redis-benchmark",
            Self::Pgbench => "pgbench",
        }
    }
}

/// The stores and the server at one moment.
pub struct Snapshot {
    pub ticks: Ticks,
    /// Redis `INFO commandstats`.
    pub commandstats: String,
    /// The server's `/metrics` (empty without a server).
    pub metrics: String,
    /// PostgreSQL's WAL insert position, in bytes (the whole cluster's WAL).
    pub wal_bytes: Option<u64>,
    /// The server's memory (`None` without a server).
    pub server_memory: Option<cpu::Memory>,
}

/// What the probes saw around one measurement.
pub struct Probed {
    pub wall: Duration,
    pub before: Snapshot,
    pub after: Snapshot,
    pub ticks_per_s: f64,
    /// `perf report --sort dso,sym` of the server (empty without perf).
    pub profile: String,
    /// PostgreSQL wait samples, one busy backend each.
    pub waits: Vec<String>,
    /// EVALSHA calls of the Redis baseline (redis-benchmark does not print them).
    pub redis_n: u64,
}

/// CPU seconds used during a measurement.
#[derive(Default, Serialize)]
pub struct CpuSeconds {
    pub(super) busy: f64,
    pub(super) server: f64,
    pub(super) redis: f64,
    pub(super) postgres: f64,
    pub(super) postgres_other_dbs: f64,
    pub(super) rabbitmq: f64,
    pub(super) tool: f64,
}

#[derive(Default, Serialize)]
pub struct Measurement {
    pub(super) name: String,
    pub(super) tool: &'static str,
    pub(super) rps: Option<f64>,
    pub(super) requests: Option<f64>,
    /// The tool's own timing of its run; else the wall time around it.
    pub(super) wall: Option<f64>,
    pub(super) tool_wall: f64,
    pub(super) p50: Option<f64>,
    pub(super) p99: Option<f64>,
    /// The machine's busy share while the load tool sent its requests, by its own reading.
    pub(super) machine_busy: Option<f64>,
    pub(super) outcomes: String,
    pub(super) transport: String,
    pub(super) checks: Vec<String>,
    pub(super) error: Option<String>,
    pub(super) cpu: CpuSeconds,
    pub(super) redis_cmds: Vec<(String, u64)>,
    pub(super) funnel: BTreeMap<String, i64>,
    pub(super) batches: Option<(u64, f64)>,
    /// Calls of `lua/lottery_register.lua` and their mean size (registrations per call).
    pub(super) registration_calls: Option<(u64, f64)>,
    pub(super) perf_areas: Vec<(String, f64)>,
    pub(super) pgwait: Vec<(String, usize)>,
    /// WAL PostgreSQL wrote during the measurement, every database's (`None`: not read).
    pub(super) wal_bytes: Option<u64>,
    /// The server's memory once the measurement ended.
    pub(super) server_memory: Option<cpu::Memory>,
    /// Hot-key samples the server dropped (its counting task behind).
    pub(super) hotkey_samples_dropped: f64,
    /// The server's own path counters per successful buy, by call (`redis_round_trip`,
    /// `db_statement`, `mq_publish` ...).
    pub(super) path_per_success: BTreeMap<String, f64>,
    /// RabbitMQ publishes the broker confirmed, by publishing role (`offer`: create-order
    /// messages; `scheduler`: pay timeouts; `relay`).
    pub(super) mq_confirmed: BTreeMap<String, f64>,
    /// Successful buys, by the server's count.
    pub(super) successes: f64,
    /// Successful buys, by the load tool's count.
    pub(super) ok: Option<f64>,
    /// Open loop: requests due a second, and those shed (due while the most were in flight).
    pub(super) due_per_s: Option<f64>,
    pub(super) shed: Option<f64>,
}

impl Measurement {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Requests per second the tool reported.
    pub fn rps(&self) -> Option<f64> {
        self.rps
    }

    /// Successful buys per second, over the whole run (the open loop's drain included).
    pub(super) fn ok_per_s(&self) -> Option<f64> {
        let wall = self.wall.filter(|&wall| wall > 0.0)?;
        Some(self.ok? / wall)
    }

    /// The server's CPU time per request, in microseconds.
    pub fn server_us_per_request(&self) -> Option<f64> {
        let requests = self.requests.filter(|&n| n > 0.0)?;
        Some(self.cpu.server * 1e6 / requests)
    }

    /// CPU time per request of every process (server, Redis, PostgreSQL, RabbitMQ, load
    /// tool), in microseconds: for the load tool's measurements only, where a request is a
    /// buy or a `/healthz`.
    pub(super) fn cpu_us_per_request(&self) -> Option<f64> {
        let requests = self
            .requests
            .filter(|n| *n > 0.0 && self.tool == Kind::Load.tool())?;
        let c = &self.cpu;
        Some(1e6 * (c.server + c.redis + c.postgres + c.rabbitmq + c.tool) / requests)
    }

    /// The server's, Redis's and the load tool's CPU time per request, in microseconds.
    pub fn cpu_us_by_process(&self) -> Option<[f64; 3]> {
        let requests = self.requests.filter(|&n| n > 0.0)?;
        let c = &self.cpu;
        Some([c.server, c.redis, c.tool].map(|seconds| seconds * 1e6 / requests))
    }

    /// Calls of `lua/lottery_register.lua` and their mean size (registrations per call).
    pub fn registration_calls(&self) -> Option<(u64, f64)> {
        self.registration_calls
    }

    /// Hot-key samples the server dropped during the measurement.
    pub fn hotkey_samples_dropped(&self) -> f64 {
        self.hotkey_samples_dropped
    }

    pub fn new(name: &str, kind: Kind, out: &str, probed: Probed) -> Self {
        let mut m = Self {
            name: name.to_owned(),
            tool: kind.tool(),
            tool_wall: probed.wall.as_secs_f64(),
            ..Self::default()
        };
        let parsed = match kind {
            Kind::Load => m.read_load(out),
            Kind::RedisBenchmark => m.read_redis_benchmark(out, probed.redis_n),
            Kind::Pgbench => m.read_pgbench(out),
        };
        // A broken run shows up in the table, not as an error of the whole benchmark.
        if let Err(error) = parsed {
            m.rps = None;
            m.error = Some(error.to_string());
        }
        let tick = |t: u64| t as f64 / probed.ticks_per_s;
        let d = probed.after.ticks - probed.before.ticks;
        m.cpu = CpuSeconds {
            busy: tick(d.busy),
            server: tick(d.server),
            redis: tick(d.redis),
            postgres: tick(d.postgres),
            postgres_other_dbs: tick(d.postgres_other_dbs),
            rabbitmq: tick(d.rabbitmq),
            tool: tick(d.waited_children),
        };
        m.redis_cmds = command_deltas(&probed.before.commandstats, &probed.after.commandstats);
        m.read_metrics(&probed.before.metrics, &probed.after.metrics);
        m.perf_areas = perf_areas(&probed.profile);
        m.pgwait = counted(&probed.waits);
        m.wal_bytes = probed
            .after
            .wal_bytes
            .zip(probed.before.wal_bytes)
            .map(|(after, before)| after.saturating_sub(before));
        m.server_memory = probed.after.server_memory;
        m
    }

    pub(super) fn read_load(&mut self, out: &str) -> anyhow::Result<()> {
        let report: Value = serde_json::from_str(out)?;
        let s = &report["summary"];
        let number = |v: &Value| v.as_f64();
        self.rps = number(&s["throughput_rps"]);
        self.requests = number(&s["requests"]);
        self.wall = number(&s["wall_s"]);
        self.p50 = number(&s["latency_ms"]["p50"]);
        self.p99 = number(&s["latency_ms"]["p99"]);
        self.machine_busy = number(&s["machine_busy"]);
        self.ok = number(&s["ok"]);
        self.due_per_s = number(&report["setup"]["rate"]);
        self.shed = self.due_per_s.and(number(&s["shed"]));
        anyhow::ensure!(self.rps.is_some(), "no throughput in the report");
        self.outcomes = s["outcomes"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|o| format!("{} {} {}", o["status"], text(&o["code"]), o["count"]))
            .collect::<Vec<_>>()
            .join(", ");
        self.transport = s["transport_errors"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(kind, count)| format!("{kind} {count}"))
            .collect::<Vec<_>>()
            .join(", ");
        self.checks = report["checks"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| {
                format!(
                    "{}  {}: {}",
                    text(&c["verdict"]),
                    text(&c["name"]),
                    text(&c["detail"])
                )
            })
            .collect();
        Ok(())
    }

    fn read_redis_benchmark(&mut self, out: &str, calls: u64) -> anyhow::Result<()> {
        let mut lines = out.lines().filter(|l| !l.trim().is_empty());
        let header = csv_row(lines.next().unwrap_or_default());
        let row = csv_row(lines.next_back().unwrap_or_default());
        let field = |name: &str| -> anyhow::Result<f64> {
            let at = header
                .iter()
                .position(|h| h == name)
                .ok_or_else(|| anyhow::anyhow!("no {name} column"))?;
            Ok(row
                .get(at)
                .map(String::as_str)
                .unwrap_or_default()
                .parse()?)
        };
        self.rps = Some(field("rps")?);
        self.p50 = Some(field("p50_latency_ms")?);
        self.p99 = Some(field("p99_latency_ms")?);
        self.requests = Some(calls as f64);
        self.outcomes = "all EVALSHA replies counted (script always deducts)".into();
        Ok(())
    }

    fn read_pgbench(&mut self, out: &str) -> anyhow::Result<()> {
        static TPS: LazyLock<Regex> = LazyLock::new(|| {
            Regex::new(r"tps = ([\d.]+) \(without initial connection time\)").expect("regex")
        });
        static LATENCY: LazyLock<Regex> =
            LazyLock::new(|| Regex::new(r"latency average = ([\d.]+) ms").expect("regex"));
        static DONE: LazyLock<Regex> = LazyLock::new(|| {
            Regex::new(r"number of transactions actually processed: (\d+)").expect("regex")
        });
        let capture = |re: &Regex| re.captures(out).map(|c| c[1].to_owned());
        self.rps = Some(
            capture(&TPS)
                .ok_or_else(|| anyhow::anyhow!("no tps line"))?
                .parse()?,
        );
        self.requests = capture(&DONE).and_then(|n| n.parse().ok());
        if let Some(latency) = capture(&LATENCY) {
            self.outcomes = format!("latency average {latency} ms");
        }
        Ok(())
    }

    /// Funnel stages and pre-order batches, from the `/metrics` deltas.
    fn read_metrics(&mut self, before: &str, after: &str) {
        static STAGE: LazyLock<Regex> = LazyLock::new(|| {
            Regex::new(r#"^seckill_funnel_requests_total\{outcome="([^"]*)",stage="([^"]*)"\}$"#)
                .expect("regex")
        });
        let (before, after) = (metrics(before), metrics(after));
        let delta = |key: &str| {
            after.get(key).copied().unwrap_or(0.0) - before.get(key).copied().unwrap_or(0.0)
        };
        for key in after.keys() {
            if let Some(c) = STAGE.captures(key) {
                let d = delta(key);
                if d > 0.0 {
                    self.funnel.insert(format!("{}:{}", &c[2], &c[1]), d as i64);
                }
            }
        }
        self.hotkey_samples_dropped = delta("seckill_hotkey_samples_dropped_total");
        static PATH: LazyLock<Regex> = LazyLock::new(|| {
            Regex::new(r#"^seckill_buy_path_calls_total\{call="([^"]*)",outcome="success"\}$"#)
                .expect("regex")
        });
        static PUBLISHED: LazyLock<Regex> = LazyLock::new(|| {
            Regex::new(r#"^seckill_mq_published_total\{outcome="confirmed",role="([^"]*)"\}$"#)
                .expect("regex")
        });
        let successes = delta(r#"seckill_buy_path_requests_total{outcome="success"}"#);
        self.successes = successes;
        for key in after.keys() {
            if let Some(c) = PATH.captures(key).filter(|_| successes > 0.0) {
                self.path_per_success
                    .insert(c[1].to_owned(), delta(key) / successes);
            } else if let Some(c) = PUBLISHED.captures(key) {
                self.mq_confirmed.insert(c[1].to_owned(), delta(key));
            }
        }
        let mean = |histogram: &str| {
            let count = delta(&format!("{histogram}_count"));
            (count > 0.0).then(|| (count as u64, delta(&format!("{histogram}_sum")) / count))
        };
        self.batches = mean("seckill_preorder_batch_size");
        self.registration_calls = mean("seckill_lottery_registration_call_size");
    }
}

/// A JSON string as text, anything else as JSON.
fn text(value: &Value) -> String {
    value
        .as_str()
        .map_or_else(|| value.to_string(), str::to_owned)
}

/// One line of redis-benchmark's CSV (every field quoted, none holding a comma or quote).
fn csv_row(line: &str) -> Vec<String> {
    line.split(',')
        .map(|f| f.trim().trim_matches('"').to_owned())
        .collect()
}

/// Prometheus text exposition: series → value.
fn metrics(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|line| {
            let (key, value) = line.rsplit_once(' ')?;
            Some((key.to_owned(), value.parse().ok()?))
        })
        .collect()
}

/// Commands Redis ran between two `INFO commandstats`, busiest first (INFO itself left out).
fn command_deltas(before: &str, after: &str) -> Vec<(String, u64)> {
    static CALLS: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"cmdstat_(\S+):calls=(\d+)").expect("regex"));
    let calls = |text: &str| -> BTreeMap<String, u64> {
        CALLS
            .captures_iter(text)
            .filter_map(|c| Some((c[1].to_owned(), c[2].parse().ok()?)))
            .collect()
    };
    let before = calls(before);
    let mut deltas: Vec<(String, u64)> = calls(after)
        .into_iter()
        .filter(|(name, _)| name != "info")
        .filter_map(|(name, n)| {
            let d = n.saturating_sub(before.get(&name).copied().unwrap_or(0));
            (d > 0).then_some((name, d))
        })
        .collect();
    deltas.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    deltas
}

/// Where the server's samples go, by symbol.
static AREAS: LazyLock<Vec<(&str, Regex)>> = LazyLock::new(|| {
    [
        (
            "HTTP (hyper, axum, tower)",
            r"hyper|httparse|\bhttp::|axum|tower|bytes::|h2::",
        ),
        ("Redis client", r"\bredis::|combine::"),
        ("PostgreSQL client (sqlx)", r"sqlx"),
        ("JSON (serde)", r"serde"),
        (
            "JWT (HMAC-SHA256, base64)",
            r"jsonwebtoken|sha2|hmac|base64|ring::|aws_lc",
        ),
        ("metrics (prometheus)", r"prometheus"),
        (
            "per-request AppState/LeptosOptions clone+drop",
            r"AppState|LeptosOptions",
        ),
        ("tokio runtime", r"tokio::"),
    ]
    .into_iter()
    .map(|(label, pattern)| (label, Regex::new(pattern).expect("regex")))
    .collect()
});

fn area(dso: &str, symbol: &str) -> String {
    if dso.starts_with("[kernel") {
        return "kernel (TCP, syscalls, scheduler)".into();
    }
    if dso.starts_with("libc") {
        return "libc (malloc/free, memmove)".into();
    }
    if dso.starts_with("[vdso]") {
        return "clock_gettime".into();
    }
    AREAS
        .iter()
        .find(|(_, pattern)| pattern.is_match(symbol))
        .map_or_else(
            || {
                if dso == "seckill" {
                    "funnel and other server code".into()
                } else {
                    dso.to_owned()
                }
            },
            |(label, _)| (*label).to_owned(),
        )
}

/// The profile's shares summed by area, largest first.
fn perf_areas(report: &str) -> Vec<(String, f64)> {
    static ROW: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"^\s+([\d.]+)%\s+(\S+)\s+\[.\]\s+(.*)").expect("regex"));
    let mut areas: BTreeMap<String, f64> = BTreeMap::new();
    for row in report.lines().filter_map(|line| ROW.captures(line)) {
        let share: f64 = row[1].parse().unwrap_or(0.0);
        *areas.entry(area(&row[2], &row[3])).or_default() += share;
    }
    let mut areas: Vec<(String, f64)> = areas.into_iter().collect();
    areas.sort_by(|a, b| b.1.total_cmp(&a.1));
    areas
}

/// Distinct samples with their counts, most frequent first.
fn counted(samples: &[String]) -> Vec<(String, usize)> {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for sample in samples.iter().map(|s| s.trim()).filter(|s| !s.is_empty()) {
        *counts.entry(sample).or_default() += 1;
    }
    let mut counts: Vec<(String, usize)> =
        counts.into_iter().map(|(s, n)| (s.to_owned(), n)).collect();
    counts.sort_by_key(|c| std::cmp::Reverse(c.1));
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_benchmark_csv_and_pgbench_output_are_read() {
        let mut m = Measurement::default();
        m.read_redis_benchmark(
            "\"test\",\"rps\",\"avg_latency_ms\",\"min_latency_ms\",\"p50_latency_ms\",\"p95_latency_ms\",\"p99_latency_ms\",\"max_latency_ms\"\n\
             \"EVALSHA abc 2 k b __rand_int__ 1 1000000\",\"58173.05\",\"0.7\",\"0.1\",\"0.66\",\"1.2\",\"1.92\",\"5.0\"\n",
            200_000,
        )
        .expect("csv");
        assert_eq!(
            (m.rps, m.p50, m.p99),
            (Some(58173.05), Some(0.66), Some(1.92))
        );
        let mut m = Measurement::default();
        m.read_pgbench(
            "number of transactions actually processed: 19500\nlatency average = 25.433 ms\n\
             tps = 1966.1 (without initial connection time)\n",
        )
        .expect("pgbench");
        assert_eq!((m.rps, m.requests), (Some(1966.1), Some(19500.0)));
        assert_eq!(m.outcomes, "latency average 25.433 ms");
    }

    #[test]
    fn funnel_stages_and_batches_come_from_metric_deltas() {
        let before = "seckill_funnel_requests_total{outcome=\"OK\",stage=\"preorder\"} 5\n\
                      seckill_preorder_batch_size_sum 10\nseckill_preorder_batch_size_count 2\n";
        let after =
            "# HELP x\nseckill_funnel_requests_total{outcome=\"OK\",stage=\"preorder\"} 105\n\
                     seckill_preorder_batch_size_sum 110\nseckill_preorder_batch_size_count 6\n";
        let mut m = Measurement::default();
        m.read_metrics(before, after);
        assert_eq!(m.funnel.get("preorder:OK"), Some(&100));
        assert_eq!(m.batches, Some((4, 25.0)));
    }

    #[test]
    fn perf_samples_are_grouped_by_area() {
        let report = "    40.00%  seckill  [.] hyper::proto::h1::role::parse\n\
                      \x20   10.00%  [kernel.kallsyms]  [k] tcp_sendmsg\n\
                      \x20   5.00%  seckill  [.] sale::buy::funnel::Funnel::buy\n";
        let areas = perf_areas(report);
        assert_eq!(areas[0], ("HTTP (hyper, axum, tower)".to_owned(), 40.0));
        assert!(areas.contains(&("funnel and other server code".to_owned(), 5.0)));
    }
}
