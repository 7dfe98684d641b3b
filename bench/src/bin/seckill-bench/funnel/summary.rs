//! The funnel benchmark's result block for BENCHMARKS.md ([`render`], and [`render_spread`]
//! over several runs): the ratios against their targets, every measurement, and per
//! measurement its outcomes, checks and counters. Each measurement's raw output and probes
//! are reduced to numbers in [`measurement`].

pub mod measurement;

use super::NAMES;
use crate::run::grouped;
use measurement::Measurement;

/// `x` grouped by thousands with `decimals` places; `n/a` when absent.
fn num(x: Option<f64>, decimals: usize) -> String {
    x.map_or_else(|| "n/a".into(), |x| grouped(x, decimals))
}

/// Row 2's target: the success path's share of `/healthz` (and the open loop's rate).
pub const SUCCESS_TARGET: f64 = 0.25;

/// One side of a benchmark's ratio, read from a measurement.
#[derive(Clone, Copy)]
enum Side {
    /// Its throughput.
    Rps(&'static str),
    /// Its successful buys per second.
    Ok(&'static str),
    /// The requests due a second of an open loop.
    Due(&'static str),
}

/// A benchmark: number, title, seckill side, baseline side, target ratio (none: a reading).
type Benchmark = (&'static str, &'static str, Side, Side, Option<f64>);

const BENCHMARKS: [Benchmark; 7] = [
    (
        "1",
        "sold-out storm vs /healthz",
        Side::Rps("1b-storm"),
        Side::Rps("1a-healthz"),
        Some(0.9),
    ),
    (
        "2",
        "success path vs /healthz (same tool, same HTTP stack)",
        Side::Rps("2a-success"),
        Side::Rps("1a-healthz"),
        Some(SUCCESS_TARGET),
    ),
    (
        "2r",
        "success path vs Redis EVALSHA buy.lua",
        Side::Rps("2a-success"),
        Side::Rps("2b-redis-evalsha"),
        Some(0.5),
    ),
    (
        "2o",
        "success path, open loop: buys served vs buyers due at row 2's target rate (a reading: x 0.25 is row 2 without the closed loop)",
        Side::Ok("2c-success-open"),
        Side::Due("2c-success-open"),
        None,
    ),
    (
        "3",
        "group commit (batch 256) vs one txn per request (batch 1)",
        Side::Rps("3b-batch256"),
        Side::Rps("3a-batch1"),
        Some(3.0),
    ),
    (
        "4",
        "DB deduction path vs pgbench hot-row UPDATE",
        Side::Rps("4a-db-deduction"),
        Side::Rps("4b-pgbench-hot"),
        Some(5.0),
    ),
    (
        "4s",
        "sold-out storm with the deduction on db vs /healthz (a reading: row 1 on the DB path)",
        Side::Rps("4c-db-storm"),
        Side::Rps("1a-healthz"),
        None,
    ),
];

/// Row 2's budget of CPU per successful buy, every process counted, in microseconds.
const CPU_PER_BUY_TARGET_US: f64 = 250.0;

/// One benchmark of one run: its two sides and their ratio (`None` where a side is missing).
struct Sides {
    ours: Option<f64>,
    base: Option<f64>,
    ratio: Option<f64>,
}

/// Every benchmark of a run, in the order of [`BENCHMARKS`].
fn sides(measurements: &[Measurement]) -> Vec<Sides> {
    let find = |name: &str| measurements.iter().find(|m| m.name == name);
    let read = |side: Side| match side {
        Side::Rps(name) => find(name).and_then(|m| m.rps),
        Side::Ok(name) => find(name).and_then(Measurement::ok_per_s),
        Side::Due(name) => find(name).and_then(|m| m.due_per_s),
    };
    BENCHMARKS
        .iter()
        .map(|&(_, _, ours, base, _)| {
            let (ours, base) = (read(ours), read(base));
            let ratio = ours
                .zip(base)
                .filter(|(a, b)| *a > 0.0 && *b > 0.0)
                .map(|(a, b)| a / b);
            Sides { ours, base, ratio }
        })
        .collect()
}

/// A target as the tables write it.
fn target_text(target: Option<f64>) -> String {
    match target {
        None => "none".to_owned(),
        Some(target) if target < 1.0 => format!(">= {target}"),
        Some(target) => format!(">= {target}x"),
    }
}

/// The head of a block of several runs: each benchmark's ratio in every run, their spread,
/// and in how many runs the target was met; then the CPU per successful buy of row 2's
/// closed loop against its budget.
pub fn render_spread(runs: &[&[Measurement]]) -> Vec<String> {
    let n = runs.len();
    let numbers: Vec<String> = (1..=n).map(|i| format!("run {i}")).collect();
    let mut l = vec![
        format!(
            "{n} runs, one after the other, each with its own server, stores and baselines; every \
             ratio comes from one run. The last run's whole block follows."
        ),
        String::new(),
        format!(
            "| # | benchmark | {} | spread | target | met |",
            numbers.join(" | ")
        ),
        format!("|---|---|{}---|---|---|", "---|".repeat(n)),
    ];
    let per_run: Vec<Vec<Sides>> = runs.iter().map(|m| sides(m)).collect();
    for (i, &(number, title, _, _, target)) in BENCHMARKS.iter().enumerate() {
        let ratios: Vec<Option<f64>> = per_run.iter().map(|run| run[i].ratio).collect();
        l.push(spread_row(
            number,
            title,
            &ratios,
            2,
            target.map(Bound::AtLeast),
        ));
    }
    let cpu: Vec<Option<f64>> = runs
        .iter()
        .map(|m| {
            m.iter()
                .find(|m| m.name == "2a-success")
                .and_then(Measurement::cpu_us_per_request)
        })
        .collect();
    l.push(spread_row(
        "2 CPU",
        "CPU per successful buy in 2a, every process (µs)",
        &cpu,
        0,
        Some(Bound::AtMost(CPU_PER_BUY_TARGET_US)),
    ));
    l
}

/// Which side of a target a figure must fall on.
#[derive(Clone, Copy)]
enum Bound {
    AtLeast(f64),
    AtMost(f64),
}

impl Bound {
    fn met(self, x: f64) -> bool {
        match self {
            Self::AtLeast(target) => x >= target,
            Self::AtMost(target) => x <= target,
        }
    }

    fn text(self) -> String {
        match self {
            Self::AtLeast(target) => target_text(Some(target)),
            Self::AtMost(target) => format!("<= {target}"),
        }
    }
}

/// One row of the spread table: the figure of every run, low–high, and "k of n" met.
fn spread_row(
    number: &str,
    title: &str,
    figures: &[Option<f64>],
    decimals: usize,
    bound: Option<Bound>,
) -> String {
    let read: Vec<f64> = figures.iter().flatten().copied().collect();
    let spread = match (
        read.iter().copied().reduce(f64::min),
        read.iter().copied().reduce(f64::max),
    ) {
        (Some(low), Some(high)) => {
            format!("{}–{}", num(Some(low), decimals), num(Some(high), decimals))
        }
        _ => "n/a".to_owned(),
    };
    let (target, met) = match bound {
        None => ("none".to_owned(), "n/a".to_owned()),
        Some(bound) => {
            let met = read.iter().filter(|&&x| bound.met(x)).count();
            let verdict = format!("{met} of {}", figures.len());
            let verdict = if met == figures.len() {
                verdict
            } else {
                format!("**{verdict}**")
            };
            (bound.text(), verdict)
        }
    };
    let cells: Vec<String> = figures.iter().map(|x| num(*x, decimals)).collect();
    format!(
        "| {number} | {title} | {} | {spread} | {target} | {met} |",
        cells.join(" | ")
    )
}

/// The result block: the header line, the ratios, every measurement, and per measurement
/// its outcomes, checks and counters.
pub fn render(
    header: &str,
    measurements: &[Measurement],
    failures: &[String],
    bench_db: &str,
    cores: usize,
) -> String {
    let find = |name: &str| measurements.iter().find(|m| m.name == name);
    let mut l: Vec<String> = vec![header.to_owned(), String::new()];
    l.push("| # | benchmark | seckill side | baseline side | ratio | target | met |".into());
    l.push("|---|---|---|---|---|---|---|".into());
    for ((number, title, _, _, target), sides) in BENCHMARKS.iter().zip(sides(measurements)) {
        let met = match (sides.ratio, target) {
            (None, _) | (_, None) => "n/a",
            (Some(r), Some(target)) if r >= *target => "yes",
            (Some(_), Some(_)) => "**no**",
        };
        l.push(format!(
            "| {number} | {title} | {} /s | {} /s | {} | {} | {met} |",
            num(sides.ours, 0),
            num(sides.base, 0),
            num(sides.ratio, 2),
            target_text(*target)
        ));
    }
    l.push(String::new());
    l.push(
        "Every measurement (CPU is seconds used during the measurement; `other` is the rest of the \
         machine's busy time: other users' builds and tests, interrupts; machine busy is over the \
         requests alone for seckill-load, over the whole command for the others):"
            .into(),
    );
    l.push(String::new());
    l.push(
        "| measurement | tool | requests | wall s | throughput /s | p50 ms | p99 ms | CPU s: server / \
         redis / postgres / rabbitmq / load tool / other | machine busy |"
            .into(),
    );
    l.push("|---|---|---|---|---|---|---|---|---|".into());
    for name in NAMES {
        let Some(m) = find(name) else {
            l.push(format!("| {name} | not run | | | | | | | |"));
            continue;
        };
        let c = &m.cpu;
        let other = c.busy - c.server - c.redis - c.postgres - c.rabbitmq - c.tool;
        let wall = m.wall.unwrap_or(m.tool_wall);
        // The load tool's own reading covers its timed phase only; the probes' covers the
        // check after it as well (a second of settling on the DB path).
        let busy = match m.machine_busy {
            Some(share) => 100.0 * share,
            None if m.tool_wall > 0.0 => 100.0 * c.busy / (cores as f64 * m.tool_wall),
            None => 0.0,
        };
        l.push(format!(
            "| {name} | {} | {} | {} | {} | {} | {} | {:.1} / {:.1} / {:.1} / {:.1} / {:.1} / {:.1} | {busy:.0}% |",
            m.tool,
            num(m.requests, 0),
            num(Some(wall), 2),
            num(m.rps, 0),
            num(m.p50, 2),
            num(m.p99, 2),
            c.server,
            c.redis,
            c.postgres,
            c.rabbitmq,
            c.tool,
            other.max(0.0)
        ));
    }
    l.push(String::new());
    l.push("Outcomes, checks and counters per measurement:".into());
    l.push(String::new());
    for name in NAMES {
        let Some(m) = find(name) else { continue };
        l.extend(counters(m, bench_db));
    }
    if !failures.is_empty() {
        l.push(String::new());
        l.push("Failures in this run:".into());
        l.extend(failures.iter().map(|f| format!("* {f}")));
    }
    l.join("\n")
}

/// One measurement's bullet and its sub-bullets.
fn counters(m: &Measurement, bench_db: &str) -> Vec<String> {
    let mut l = Vec::new();
    let mut line = format!("* **{}**: {}", m.name, m.outcomes);
    if !m.transport.is_empty() {
        line.push_str(&format!("; transport errors {}", m.transport));
    }
    if let Some(error) = &m.error {
        line.push_str(&format!("; ERROR {error}"));
    }
    l.push(line);
    l.extend(m.checks.iter().map(|c| format!("  * `{c}`")));
    if let (Some(every), Some(n)) = (m.cpu_us_per_request(), m.requests) {
        let c = &m.cpu;
        let per = |seconds: f64| 1e6 * seconds / n;
        l.push(format!(
            "  * CPU per request, every process: {every:.0} µs (server {:.0}, redis {:.0}, postgres {:.0}, \
             rabbitmq {:.0}, load tool {:.0})",
            per(c.server),
            per(c.redis),
            per(c.postgres),
            per(c.rabbitmq),
            per(c.tool)
        ));
    }
    if let (Some(due), Some(shed)) = (m.due_per_s, m.shed) {
        l.push(format!(
            "  * open loop: {} buyers due a second, at most {} in flight; {} sent, {} shed (due \
             while the most were in flight); {} successful buys a second over the run, its drain included",
            num(Some(due), 0),
            super::OPEN_MAX_IN_FLIGHT,
            num(m.requests, 0),
            num(Some(shed), 0),
            num(m.ok_per_s(), 0)
        ));
    }
    if !m.funnel.is_empty() {
        let stages: Vec<String> = m.funnel.iter().map(|(k, v)| format!("{k} {v}")).collect();
        l.push(format!("  * funnel: {}", stages.join(", ")));
    }
    if let Some((count, average)) = m.batches {
        let rate = m.wall.filter(|w| *w > 0.0).map_or(String::new(), |w| {
            format!(", {:.0} commits/s", count as f64 / w)
        });
        l.push(format!(
            "  * pre-order transactions: {count}, average batch {average:.1} pre-orders{rate}"
        ));
    }
    if !m.path_per_success.is_empty() {
        let calls: Vec<String> = m
            .path_per_success
            .iter()
            .map(|(call, n)| format!("{call} {n:.3}"))
            .collect();
        l.push(format!(
            "  * the server's path counters per successful buy: {}",
            calls.join(", ")
        ));
    }
    if let (Some(n), Some(wal)) = (m.requests.filter(|n| *n > 0.0), m.wal_bytes) {
        // The whole cluster's: other databases' writes during the run count too.
        l.push(format!(
            "  * PostgreSQL WAL written, whole cluster: {:.0} bytes per request",
            wal as f64 / n
        ));
    }
    if let Some(memory) = m.server_memory {
        // The peak is the process's since it started, earlier measurements on it included.
        l.push(format!(
            "  * server memory after: {:.0} MB resident, {:.0} MB at its peak",
            memory.resident as f64 / 1e6,
            memory.peak as f64 / 1e6
        ));
    }
    if let (Some((batches, _)), Some(statements)) =
        (m.batches, m.path_per_success.get("db_statement"))
    {
        // Everything the server counts to successful buys: the batches' statements, the
        // publisher's UPDATE of the outbox rows it sent (once per publish batch) and the
        // catalogue reads of a cold cache.
        l.push(format!(
            "  * PostgreSQL statements counted to successful buys, per pre-order batch (its \
             statement, the publisher's outbox update, catalogue reads): {:.2}",
            statements * m.successes / batches.max(1) as f64
        ));
    }
    if !m.mq_confirmed.is_empty() {
        let buys = m.requests.filter(|n| *n > 0.0);
        let roles: Vec<String> = m
            .mq_confirmed
            .iter()
            .filter(|(_, n)| **n > 0.0)
            .map(|(role, n)| match buys {
                Some(buys) => format!("{role} {n:.0} ({:.3} per request)", n / buys),
                None => format!("{role} {n:.0}"),
            })
            .collect();
        l.push(format!(
            "  * RabbitMQ messages confirmed by role: {}",
            roles.join(", ")
        ));
    }
    if !m.redis_cmds.is_empty() {
        let total: u64 = m.redis_cmds.iter().map(|(_, n)| n).sum();
        // Commands the buy path sends itself; the rest of INFO commandstats ran inside
        // scripts (the buy script's MGET among them) or came from background work. The
        // kept answers' SETEX go in pipelines: the server's path counters give round trips.
        let sent: u64 = m
            .redis_cmds
            .iter()
            .filter(|(k, _)| ["evalsha", "eval", "setex", "getdel"].contains(&k.as_str()))
            .map(|(_, n)| n)
            .sum();
        let per = match m.requests.filter(|n| *n > 0.0) {
            Some(n) => format!(
                ": {:.2} commands sent (EVALSHA, SETEX, GETDEL) and {:.2} executed \
                 (scripts' inner calls included) per request",
                sent as f64 / n,
                total as f64 / n
            ),
            None => String::new(),
        };
        let top: Vec<String> = m
            .redis_cmds
            .iter()
            .take(8)
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        l.push(format!(
            "  * Redis, all clients: {sent} commands sent, {total} executed{per}; top: {}",
            top.join(", ")
        ));
    }
    if !m.perf_areas.is_empty() {
        let server_us = 1e6 * m.cpu.server / m.requests.filter(|n| *n > 0.0).unwrap_or(1.0);
        let areas: Vec<String> = m
            .perf_areas
            .iter()
            .filter(|(_, p)| *p >= 1.0)
            .map(|(a, p)| format!("{a} {p:.0}%"))
            .collect();
        l.push(format!(
            "  * perf, server CPU ({server_us:.0} us per request) by area: {}",
            areas.join(", ")
        ));
    }
    if !m.pgwait.is_empty() {
        let total: usize = m.pgwait.iter().map(|(_, n)| n).sum();
        let waits: Vec<String> = m
            .pgwait
            .iter()
            .take(7)
            .map(|(w, n)| format!("{w} {:.0}%", 100.0 * *n as f64 / total as f64))
            .collect();
        l.push(format!(
            "  * PostgreSQL busy backends of {bench_db}, sampled every 100 ms ({total} \
             backend-samples): {}",
            waits.join(", ")
        ));
    }
    l
}

#[cfg(test)]
mod tests {
    use super::*;
    use measurement::Kind;

    #[test]
    fn the_open_loop_row_is_buys_served_over_buyers_due() {
        let load = |rate: &str| {
            format!(
                r#"{{"setup": {{"rate": {rate}}}, "summary": {{"throughput_rps": 900.0, "requests": 9000,
                   "wall_s": 10.0, "ok": 8000, "shed": 1000, "latency_ms": {{"p50": 1.0, "p99": 2.0}}}}}}"#
            )
        };
        let mut open = Measurement {
            name: "2c-success-open".into(),
            ..Measurement::default()
        };
        open.read_load(&load("1000")).expect("an open-loop report");
        assert_eq!((open.due_per_s, open.shed), (Some(1000.0), Some(1000.0)));
        let mut closed = Measurement::default();
        closed
            .read_load(&load("null"))
            .expect("a closed-loop report");
        assert_eq!((closed.due_per_s, closed.shed), (None, None));
        let block = render("header", &[open], &[], "db", 2);
        let row = block
            .lines()
            .find(|line| line.starts_with("| 2o |"))
            .expect("row 2o");
        assert!(
            row.contains("| 800 /s | 1,000 /s | 0.80 | none | n/a |"),
            "{row}"
        );
        assert!(block.contains("9,000 sent, 1,000 shed"), "{block}");
    }

    /// A run whose row 1 and row 2 measurements read `storm`, `healthz` and `success`
    /// requests a second, and whose successful buys cost `cpu_s` seconds of the load
    /// tool's CPU for 1,000 requests.
    fn run(storm: f64, healthz: f64, success: f64, cpu_s: f64) -> Vec<Measurement> {
        let measured = |name: &str, rps: f64| Measurement {
            name: name.to_owned(),
            tool: Kind::Load.tool(),
            rps: Some(rps),
            requests: Some(1000.0),
            ..Measurement::default()
        };
        let mut success = measured("2a-success", success);
        success.cpu.tool = cpu_s;
        vec![
            measured("1a-healthz", healthz),
            measured("1b-storm", storm),
            success,
        ]
    }

    #[test]
    fn the_spread_gives_every_run_its_range_and_the_runs_that_met_the_target() {
        let runs = [
            run(950.0, 1000.0, 300.0, 0.2),
            run(800.0, 1000.0, 260.0, 0.3),
            run(1020.0, 1000.0, 250.0, 0.24),
        ];
        let runs: Vec<&[Measurement]> = runs.iter().map(Vec::as_slice).collect();
        let table = render_spread(&runs);
        let expected = [
            (
                "1",
                "| 0.95 | 0.80 | 1.02 | 0.80–1.02 | >= 0.9 | **2 of 3** |",
            ),
            ("2", "| 0.30 | 0.26 | 0.25 | 0.25–0.30 | >= 0.25 | 3 of 3 |"),
            // Row 3 was not measured: no figure, no spread, and not met.
            ("3", "| n/a | n/a | n/a | n/a | >= 3x | **0 of 3** |"),
            (
                "2 CPU",
                "| 200 | 300 | 240 | 200–300 | <= 250 | **2 of 3** |",
            ),
        ];
        for (number, ending) in expected {
            let row = table
                .iter()
                .find(|line| line.starts_with(&format!("| {number} |")));
            assert!(
                row.is_some_and(|row| row.ends_with(ending)),
                "{number}: {table:?}"
            );
        }
    }
}
