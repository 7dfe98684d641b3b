//! Every instance's report: its [`Figures`] read from its own metrics and from
//! `/proc/self`, written to PostgreSQL every `baselines.report_interval_ms`, so the leader
//! can compute a run from every instance's reports whoever led or restarted meanwhile.

use prometheus::{core::Collector, proto::MetricFamily};
use std::time::Duration;

use crate::{
    baselines::{
        figures::{Figures, OutcomeCounts, RouteCounts},
        store,
    },
    control::status::Complaint,
    dashboard::sample::label,
    state::AppState,
};
use base::{
    metrics::Metrics,
    tally::{Call, Outcome, PathTotals},
};

/// Reports for the life of the process.
pub(crate) fn spawn(state: &AppState) {
    let state = state.clone();
    tokio::spawn(async move {
        let interval = Duration::from_millis(state.settings.baselines.report_interval_ms.max(10));
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let path = PathTotals::of(&state.metrics);
        let mut trouble = Complaint::new(Duration::from_secs(60));
        loop {
            tick.tick().await;
            let figures = figures(&state, &path);
            let taken_at = chrono::Utc::now();
            match store::insert_report(&state.db, state.control.node_id(), taken_at, &figures).await
            {
                Ok(()) => trouble.recovered("baseline reports written again"),
                Err(error) => trouble.complain("baseline report not written", &error),
            }
        }
    });
}

/// This instance's figures now.
fn figures(state: &AppState, path: &PathTotals) -> Figures {
    let metrics = &state.metrics;
    let process = Process::read();
    let idle = u32::try_from(state.db.num_idle()).unwrap_or(u32::MAX);
    let (db_pool_waits, db_pool_wait_seconds) =
        histogram_totals(&metrics.db_pool_acquire.collect());
    let outcome = |outcome: Outcome| OutcomeCounts {
        requests: path.requests(outcome),
        calls: Call::ALL.map(|call| path.calls(outcome, call)),
    };
    Figures {
        routes: routes(metrics),
        cpu_seconds: process.cpu_seconds,
        memory_bytes: process.memory_bytes,
        peak_memory_bytes: process.peak_memory_bytes,
        db_pool_in_use: state.db.size().saturating_sub(idle),
        db_pool_waits,
        db_pool_wait_seconds,
        redis_commands: metrics.redis_commands.get(),
        mq_publishes: mq_publishes(&metrics.pipeline.published.collect()),
        success: outcome(Outcome::Success),
        refused: outcome(Outcome::Refused),
    }
}

/// Every route's latency histogram and its answers by status (whatever the method).
fn routes(metrics: &Metrics) -> std::collections::BTreeMap<String, RouteCounts> {
    let mut routes: std::collections::BTreeMap<String, RouteCounts> = Default::default();
    for metric in metrics
        .http_duration
        .collect()
        .iter()
        .flat_map(|family| family.get_metric())
    {
        let Some(route) = label(metric, "route") else {
            continue;
        };
        let histogram = metric.get_histogram();
        let counts = routes.entry(route.to_owned()).or_default();
        counts.bounds = histogram
            .get_bucket()
            .iter()
            .map(|b| b.upper_bound())
            .collect();
        counts.cumulative = (histogram.get_bucket().iter())
            .map(|b| b.cumulative_count())
            .chain([histogram.get_sample_count()])
            .collect();
    }
    for metric in metrics
        .http_requests
        .collect()
        .iter()
        .flat_map(|family| family.get_metric())
    {
        let (Some(route), Some(status)) = (label(metric, "route"), label(metric, "status")) else {
            continue;
        };
        let counts = routes.entry(route.to_owned()).or_default();
        *counts.statuses.entry(status.to_owned()).or_default() +=
            metric.get_counter().get_value() as u64;
    }
    routes
}

/// Waits counted and their seconds together, over every caller.
fn histogram_totals(families: &[MetricFamily]) -> (u64, f64) {
    families
        .iter()
        .flat_map(|family| family.get_metric())
        .map(|metric| metric.get_histogram())
        .fold((0, 0.0), |(count, sum), histogram| {
            (
                count + histogram.get_sample_count(),
                sum + histogram.get_sample_sum(),
            )
        })
}

/// Messages handed to RabbitMQ, whatever came of them (an offer dropped before it was
/// sent is not one).
fn mq_publishes(families: &[MetricFamily]) -> u64 {
    families
        .iter()
        .flat_map(|family| family.get_metric())
        .filter(|metric| label(metric, "outcome") != Some("dropped"))
        .map(|metric| metric.get_counter().get_value() as u64)
        .sum()
}

/// Clock ticks per second of `/proc/*/stat`: the kernel's `USER_HZ`, 100 on every Linux
/// architecture this runs on (`getconf CLK_TCK`).
const USER_HZ: f64 = 100.0;

/// The process's CPU time and memory, from `/proc/self` (zeros where it is missing).
#[derive(Debug, Default, PartialEq)]
struct Process {
    cpu_seconds: f64,
    memory_bytes: u64,
    peak_memory_bytes: u64,
}

impl Process {
    fn read() -> Self {
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        Self::parse(&stat, &status, USER_HZ)
    }

    /// `stat`'s utime and stime (fields 14 and 15, counted after the command's closing
    /// parenthesis, since the command may hold spaces) in clock ticks; `status`'s VmRSS and
    /// VmHWM in kB.
    fn parse(stat: &str, status: &str, ticks_per_second: f64) -> Self {
        let after_command = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
        let fields: Vec<&str> = after_command.split_whitespace().collect();
        let ticks = |i: usize| {
            fields
                .get(i)
                .and_then(|f| f.parse::<u64>().ok())
                .unwrap_or(0)
        };
        // After the command: state is field 3, so utime (14) and stime (15) are at 11, 12.
        let cpu_ticks = ticks(11) + ticks(12);
        let kb = |name: &str| {
            status
                .lines()
                .find_map(|line| line.strip_prefix(name))
                .and_then(|rest| {
                    rest.trim()
                        .trim_end_matches("kB")
                        .trim()
                        .parse::<u64>()
                        .ok()
                })
                .unwrap_or(0)
        };
        Self {
            cpu_seconds: cpu_ticks as f64 / ticks_per_second,
            memory_bytes: kb("VmRSS:") * 1024,
            peak_memory_bytes: kb("VmHWM:") * 1024,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_and_memory_are_read_from_proc() {
        let stat = "4242 (seck ill) S 1 4242 4242 0 -1 4194560 900 0 0 0 250 50 0 0 20 0 9 0 1 1 1";
        let status = "Name:\tseckill\nVmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\n";
        assert_eq!(
            Process::parse(stat, status, 100.0),
            Process {
                cpu_seconds: 3.0,
                memory_bytes: 1024 * 1024,
                peak_memory_bytes: 2048 * 1024,
            }
        );
        assert_eq!(Process::parse("", "", 100.0), Process::default());
        // This process: some CPU spent, some memory resident.
        let own = Process::read();
        assert!(own.memory_bytes > 0 && own.peak_memory_bytes >= own.memory_bytes);
    }

    #[test]
    fn figures_come_from_the_metrics() {
        let metrics = Metrics::new();
        metrics
            .http_requests
            .with_label_values(&["/api/seckill/buy", "POST", "200"])
            .inc_by(3);
        metrics
            .http_requests
            .with_label_values(&["/api/seckill/buy", "POST", "409"])
            .inc();
        for _ in 0..4 {
            metrics
                .http_duration
                .with_label_values(&["/api/seckill/buy"])
                .observe(0.0004);
        }
        let published = &metrics.pipeline.published;
        published
            .with_label_values(&["offer", "confirmed"])
            .inc_by(5);
        published.with_label_values(&["offer", "dropped"]).inc_by(2);
        let routes = routes(&metrics);
        let buy = &routes["/api/seckill/buy"];
        assert_eq!(buy.cumulative.last(), Some(&4));
        assert_eq!(buy.cumulative.len(), buy.bounds.len() + 1);
        assert_eq!(buy.statuses["409"], 1);
        assert_eq!(mq_publishes(&published.collect()), 5);
    }
}
