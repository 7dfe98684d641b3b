//! The reconciliation benchmark's figures, and its result block for BENCHMARKS.md's
//! "Reconciliation report run" section.

use serde_json::Value;
use std::time::Duration;

use super::{
    buys,
    probes::{self, Activity},
    seed::Shape,
};
use crate::{cpu::Ticks, run::grouped};

/// The server's resident memory around one run, in kB.
pub struct Memory {
    pub before_kb: u64,
    /// The highest `VmRSS` of the 10 ms samples.
    pub peak_kb: u64,
    /// The kernel's high-water mark after it was reset before the run (`None`: no reset).
    pub hwm_kb: Option<u64>,
}

impl Memory {
    pub fn sampled_growth(&self) -> f64 {
        mib(self.peak_kb.saturating_sub(self.before_kb))
    }

    pub fn hwm_growth(&self) -> Option<f64> {
        self.hwm_kb
            .map(|hwm| mib(hwm.saturating_sub(self.before_kb)))
    }

    pub fn describe(&self) -> String {
        format!(
            "server RSS {:.1} MiB before, +{:.2} MiB at the sampled peak, +{} MiB by VmHWM",
            mib(self.before_kb),
            self.sampled_growth(),
            self.hwm_growth()
                .map_or("?".to_owned(), |growth| format!("{growth:.2}"))
        )
    }
}

/// One report run.
pub struct RunFigures {
    /// From the POST to the first answer saying `done`, as this process saw it.
    pub wall: Duration,
    /// From the run's `started_at` to its `ended_at`, as the server stamped them.
    pub server: Option<Duration>,
    pub memory: Option<Memory>,
    pub findings: Vec<Value>,
}

/// Runs with the database's busy backends sampled by statement.
pub struct Profile {
    pub walls: Vec<Duration>,
    pub activity: Activity,
}

impl Profile {
    /// Adds another profiled run's samples.
    pub fn pool(&mut self, other: Profile) {
        self.walls.extend(other.walls);
        self.activity.pool(other.activity);
    }
}

/// Statements of this benchmark's own status polls (`GET /admin/api/reconciliations/{id}`:
/// the token check, which also stamps the token's last use, and the run's read), left out
/// of the profiles. Matched within the keys' first 130 characters.
const POLLS: [&str; 3] = [
    "admin_api_tokens",
    "SELECT r.id, r.activity_id, r.status, r.repair",
    "FROM reconciliation_findings WHERE run_id",
];

/// One buy window, and the report runs that ran during it.
pub struct BuyWindow {
    pub with_runs: bool,
    pub window: buys::Window,
    pub runs: Vec<RunFigures>,
    pub waits: Activity,
    pub cpu: Ticks,
}

impl BuyWindow {
    fn p(&self, p: f64) -> f64 {
        buys::percentile(&self.window.latencies, p)
    }

    /// Backend-samples waiting on a heavyweight lock (a row, a tuple, a transaction id).
    pub fn lock_waits(&self) -> u64 {
        self.waits.count(|wait| wait.starts_with("Lock:"))
    }

    /// Of those, the ones waiting behind a reconciliation run's backend.
    pub fn behind_runs(&self) -> u64 {
        self.waits
            .count(|wait| wait.starts_with("Lock:") && wait.contains(probes::RUN_BEHIND))
    }

    pub fn describe(&self) -> String {
        let with_runs = self.with_runs;
        let runs = if with_runs {
            format!(
                ", {} report runs (median {:.0} ms)",
                self.runs.len(),
                median(&self.runs.iter().map(|r| ms(r.wall)).collect::<Vec<_>>())
            )
        } else {
            String::new()
        };
        format!(
            "buys {}: {} sent, {} ok, p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms, worst send lag {:.2} ms{runs}; \
             waits sampled: {:?}",
            if with_runs { "with runs" } else { "without runs" },
            self.window.latencies.len(),
            self.window.ok,
            self.p(0.5),
            self.p(0.99),
            self.window.latencies.last().copied().unwrap_or_default(),
            self.window.worst_send_lag_ms,
            self.waits.ranked()
        )
    }
}

pub struct Figures {
    pub shape: Shape,
    pub seeded_s: f64,
    pub vacuum_s: f64,
    pub prewarm: Duration,
    /// The pre-warming server's `VmRSS` before and at its sampled peak, kB.
    pub prewarm_rss: (u64, u64),
    pub count_plan: String,
    pub holders_plan: String,
    pub counts: Vec<Duration>,
    pub runs: Vec<RunFigures>,
    pub compared: Vec<RunFigures>,
    /// Redis commands over the timed buyer-by-buyer runs: name, calls, microseconds.
    pub compare_redis: Vec<(String, u64, u64)>,
    /// CPU over all the rounds' counts, and over all their runs.
    pub count_cpu: Ticks,
    pub run_cpu: Ticks,
    pub ticks_per_s: f64,
    /// Profiled runs where the counts agree, and where they do not.
    pub profiles: [Profile; 2],
    /// Alternated: without runs, with runs, …
    pub windows: Vec<BuyWindow>,
    pub buy_rate: u64,
    pub buy_s: u64,
    pub failures: Vec<String>,
}

impl Figures {
    fn cpu(&self, ticks: &Ticks) -> String {
        let s = |t: u64| t as f64 / self.ticks_per_s;
        format!(
            "{:.2} / {:.2} / {:.2}",
            s(ticks.server),
            s(ticks.postgres),
            s(ticks.redis)
        )
    }

    /// A buy window's CPU, with RabbitMQ and the rest of the machine (busy time nobody above
    /// accounts for: this tool, other work on the machine, interrupts).
    fn window_cpu(&self, ticks: &Ticks) -> String {
        let s = |t: u64| t as f64 / self.ticks_per_s;
        let accounted = ticks.server + ticks.postgres + ticks.redis + ticks.rabbitmq;
        format!(
            "{} / {:.2} / {:.2}",
            self.cpu(ticks),
            s(ticks.rabbitmq),
            s(ticks.busy.saturating_sub(accounted))
        )
    }

    /// Median, min and max of the walls, and the medians of both memory growths.
    fn runs_row(&self, label: &str, runs: &[RunFigures], cpu: Option<&Ticks>) -> String {
        let walls: Vec<f64> = runs.iter().map(|r| ms(r.wall)).collect();
        let sampled: Vec<f64> = runs
            .iter()
            .filter_map(|r| r.memory.as_ref().map(Memory::sampled_growth))
            .collect();
        let hwm: Vec<f64> = runs
            .iter()
            .filter_map(|r| r.memory.as_ref().and_then(Memory::hwm_growth))
            .collect();
        let hwm = if hwm.is_empty() {
            "?".to_owned()
        } else {
            format!("{:.2}", median(&hwm))
        };
        format!(
            "| {label} | {:.1} | {:.1} | {:.1} | {:.2} / {hwm} | {} |",
            median(&walls),
            min(&walls),
            max(&walls),
            median(&sampled),
            cpu.map_or("–".to_owned(), |ticks| self.cpu(ticks))
        )
    }

    fn profile_line(&self, label: &str, profile: &Profile) -> String {
        let ticks = profile.activity.ticks.max(1) as f64;
        let shares: Vec<String> = profile
            .activity
            .ranked()
            .into_iter()
            .filter(|(key, _)| !POLLS.iter().any(|poll| key.contains(poll)))
            .take(5)
            .map(|(key, n)| format!("`{key}` {:.0}%", 100.0 * n as f64 / ticks))
            .collect();
        let walls: Vec<f64> = profile.walls.iter().map(|d| ms(*d)).collect();
        format!(
            "* {label} ({} run{}, median {:.0} ms, {} samples): {}.",
            walls.len(),
            if walls.len() == 1 { "" } else { "s" },
            median(&walls),
            profile.activity.ticks,
            if shares.is_empty() {
                "no busy backend seen".to_owned()
            } else {
                shares.join(", ")
            }
        )
    }

    fn window_row(&self, label: &str, window: &BuyWindow) -> String {
        let runs = if window.runs.is_empty() {
            "0".to_owned()
        } else {
            format!(
                "{} (median {:.0} ms)",
                window.runs.len(),
                median(&window.runs.iter().map(|r| ms(r.wall)).collect::<Vec<_>>())
            )
        };
        format!(
            "| {label} | {} | {} | {:.2} | {:.2} | {:.2} | {runs} | {} of {}, {} behind a run | {} |",
            grouped(window.window.latencies.len() as f64, 0),
            grouped(window.window.ok as f64, 0),
            window.p(0.5),
            window.p(0.99),
            window.window.latencies.last().copied().unwrap_or_default(),
            window.lock_waits(),
            window.waits.seen.values().sum::<u64>(),
            window.behind_runs(),
            self.window_cpu(&window.cpu)
        )
    }

    /// The result block.
    pub fn block(&self, header: &str) -> String {
        let shape = &self.shape;
        let n = |x: i64| grouped(x as f64, 0);
        let counts: Vec<f64> = self.counts.iter().map(|d| ms(*d)).collect();
        let walls: Vec<f64> = self.runs.iter().map(|r| ms(r.wall)).collect();
        let servers: Vec<f64> = self.runs.iter().filter_map(|r| r.server.map(ms)).collect();
        let ratio = median(&walls) / median(&counts);
        let per_round: Vec<f64> = walls.iter().zip(&counts).map(|(w, c)| w / c).collect();
        let p99s = |with_runs: bool| -> Vec<f64> {
            self.windows
                .iter()
                .filter(|w| w.with_runs == with_runs)
                .map(|w| w.p(0.99))
                .collect()
        };
        let (without, with) = (p99s(false), p99s(true));
        let p99_ratio = median(&with) / median(&without);
        let pair_ratios: Vec<f64> = with.iter().zip(&without).map(|(w, o)| w / o).collect();
        let rounds = self.counts.len();
        let mut lines = vec![
            header.to_owned(),
            String::new(),
            format!(
                "Seed: {} orders of one item ({} `UNPAID` or `PAID` with their deadline ahead, {} `CANCELLED` \
                 with their restore-journal rows), {} `buyer_holdings` rows ({} holding one unit), `allocated` = \
                 `sold` = {} of {}: written in {:.1} s, `VACUUM (ANALYZE)` {:.1} s. Pre-warm through the admin API \
                 ({} buyer records and the stock into Redis): {:.2} s, server RSS {:.0} → {:.0} MiB at its peak.",
                n(shape.orders),
                n(shape.active()),
                n(shape.cancelled),
                n(shape.orders),
                n(shape.active()),
                n(shape.active()),
                n(shape.total_stock),
                self.seeded_s,
                self.vacuum_s,
                n(shape.active()),
                self.prewarm.as_secs_f64(),
                mib(self.prewarm_rss.0),
                mib(self.prewarm_rss.1),
            ),
            String::new(),
            format!(
                "| measurement ({rounds} rounds, alternated) | median ms | min ms | max ms | server RSS growth, \
                 MiB: sampled peak / VmHWM (medians) | CPU s over the rounds: server / postgres / redis |"
            ),
            "|---|---|---|---|---|---|".into(),
            format!(
                "| `SELECT count(*) FROM orders WHERE activity_id = $1` ({}) | {:.1} | {:.1} | {:.1} | – | {} |",
                self.count_plan,
                median(&counts),
                min(&counts),
                max(&counts),
                self.cpu(&self.count_cpu)
            ),
            self.runs_row(
                &format!(
                    "report run, counts agree: POST → `done` (server's own stamps: median {:.1} ms)",
                    median(&servers)
                ),
                &self.runs,
                Some(&self.run_cpu),
            ),
        ];
        if !self.compared.is_empty() {
            lines.push(self.runs_row(
                &format!(
                    "report run, one buyer record missing from Redis: buyer by buyer ({} run{})",
                    self.compared.len(),
                    if self.compared.len() == 1 { "" } else { "s" }
                ),
                &self.compared,
                None,
            ));
        }
        lines.extend([
            String::new(),
            format!(
                "Ratio report run / `count(*)`: **{ratio:.2}×** by the medians (per round {:.2}–{:.2}×; aim ≤ 3×: {}).",
                min(&per_round),
                max(&per_round),
                if ratio <= 3.0 { "met" } else { "**missed**" }
            ),
            String::new(),
            format!(
                "Where the time goes: the database's busy backends sampled every 2 ms during more runs of each \
                 kind, each statement's share of the samples ≈ its share of the run's wall time (backends run side \
                 by side, so shares may add up to more than 100%; this benchmark's own status polls left out; the \
                 run's holder count gets `{}`):",
                self.holders_plan
            ),
            self.profile_line("counts agree", &self.profiles[0]),
            self.profile_line("buyer by buyer", &self.profiles[1]),
            format!(
                "* Redis over the timed buyer-by-buyer run{}: {}.",
                if self.compared.len() == 1 { "" } else { "s" },
                self.compare_redis
                    .iter()
                    .map(|(name, calls, usec)| format!(
                        "{name} {} calls, {:.0} ms",
                        grouped(*calls as f64, 0),
                        *usec as f64 / 1000.0
                    ))
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
            String::new(),
            format!(
                "| buys to the other sale, {}/s open loop for {} s, windows in the order run | buys | ok | p50 ms | \
                 p99 ms | max ms | report runs in the window | busy backend-samples waiting on a lock (every 20 ms) \
                 | CPU s: server / postgres / redis / rabbitmq / rest of the machine (this tool, other work) |",
                grouped(self.buy_rate as f64, 0),
                self.buy_s
            ),
            "|---|---|---|---|---|---|---|---|---|".into(),
        ]);
        for window in &self.windows {
            let label = if window.with_runs {
                format!(
                    "report runs back to back over the {}-order sale",
                    n(shape.orders)
                )
            } else {
                "without reconciliation".to_owned()
            };
            lines.push(self.window_row(&label, window));
        }
        lines.extend([
            String::new(),
            format!(
                "Buy p99 with runs / without: **{p99_ratio:.2}×** by the medians ({:.2} ms against {:.2} ms; per pair \
                 {}).",
                median(&with),
                median(&without),
                pair_ratios
                    .iter()
                    .map(|r| format!("{r:.2}×"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ]);
        if !self.failures.is_empty() {
            lines.push(String::new());
            lines.push(format!("**Failures**: {}", self.failures.join("; ")));
        }
        lines.join("\n")
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn mib(kb: u64) -> f64 {
    kb as f64 / 1024.0
}

fn sorted(samples: &[f64]) -> Vec<f64> {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted
}

/// The middle sample (the mean of the two middle ones for an even count); NaN for none.
fn median(samples: &[f64]) -> f64 {
    let sorted = sorted(samples);
    match sorted.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

fn min(samples: &[f64]) -> f64 {
    sorted(samples).first().copied().unwrap_or(f64::NAN)
}

fn max(samples: &[f64]) -> f64 {
    sorted(samples).last().copied().unwrap_or(f64::NAN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_take_the_middle() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
        assert_eq!((min(&[2.0, 1.0]), max(&[2.0, 1.0])), (1.0, 2.0));
    }

    #[test]
    fn memory_growth_never_goes_negative() {
        let memory = Memory {
            before_kb: 2048,
            peak_kb: 1024,
            hwm_kb: Some(3072),
        };
        assert_eq!(memory.sampled_growth(), 0.0);
        assert_eq!(memory.hwm_growth(), Some(1.0));
    }
}
