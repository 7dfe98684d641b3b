//! The figures of a run, as plain values: what an instance reports (its counters since it
//! started, and a few levels), and the run computed from the reports of every instance
//! over the run's window: counters as the difference between the report at the start and
//! the one at the end, levels as the most any report in the window saw, latencies as
//! quantiles of the summed histograms, the path as calls divided by buys.

use contract::{EndpointFigures, InstanceCost, PathFigures, RunCost, RunPath, RunPerf};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use base::percentiles::quantile;
use base::tally::Call;

/// One instance's figures since it started, as it reports them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Figures {
    /// Per matched route.
    pub(crate) routes: BTreeMap<String, RouteCounts>,
    pub(crate) cpu_seconds: f64,
    /// Resident memory now, and the most it has been since the process started.
    pub(crate) memory_bytes: u64,
    pub(crate) peak_memory_bytes: u64,
    /// PostgreSQL connections in use now.
    pub(crate) db_pool_in_use: u32,
    pub(crate) db_pool_waits: u64,
    pub(crate) db_pool_wait_seconds: f64,
    pub(crate) redis_commands: u64,
    pub(crate) mq_publishes: u64,
    pub(crate) success: OutcomeCounts,
    pub(crate) refused: OutcomeCounts,
}

/// A route's latency histogram and its answers by status.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct RouteCounts {
    /// The histogram's finite upper bounds, in seconds.
    pub(crate) bounds: Vec<f64>,
    /// Requests at or under each bound, then every request.
    pub(crate) cumulative: Vec<u64>,
    pub(crate) statuses: BTreeMap<String, u64>,
}

/// The buys of one outcome and their calls, by [`Call`] in its order.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct OutcomeCounts {
    pub(crate) requests: u64,
    pub(crate) calls: [f64; 5],
}

impl OutcomeCounts {
    pub(crate) fn since(&self, earlier: &Self) -> Self {
        Self {
            requests: self.requests.saturating_sub(earlier.requests),
            calls: std::array::from_fn(|i| (self.calls[i] - earlier.calls[i]).max(0.0)),
        }
    }

    fn add(&mut self, other: &Self) {
        self.requests += other.requests;
        for (sum, calls) in self.calls.iter_mut().zip(other.calls) {
            *sum += calls;
        }
    }

    /// Calls per buy.
    pub(crate) fn per_buy(&self) -> PathFigures {
        let per = |call: Call| {
            if self.requests == 0 {
                0.0
            } else {
                self.calls[call as usize] / self.requests as f64
            }
        };
        PathFigures {
            requests: self.requests,
            redis_round_trips: per(Call::RedisRoundTrip),
            redis_commands: per(Call::RedisCommand),
            db_statements: per(Call::DbStatement),
            db_transactions: per(Call::DbTransaction),
            mq_publishes: per(Call::MqPublish),
        }
    }
}

impl RouteCounts {
    fn since(&self, earlier: &Self) -> Self {
        let before = |i: usize| {
            if earlier.bounds == self.bounds {
                earlier.cumulative.get(i).copied().unwrap_or(0)
            } else {
                0
            }
        };
        Self {
            bounds: self.bounds.clone(),
            cumulative: (self.cumulative.iter().enumerate())
                .map(|(i, count)| count.saturating_sub(before(i)))
                .collect(),
            statuses: (self.statuses.iter())
                .map(|(status, count)| {
                    let before = earlier.statuses.get(status).copied().unwrap_or(0);
                    (status.clone(), count.saturating_sub(before))
                })
                .collect(),
        }
    }

    fn add(&mut self, other: &Self) {
        if self.bounds.is_empty() {
            *self = other.clone();
            return;
        }
        for (sum, count) in self.cumulative.iter_mut().zip(&other.cumulative) {
            *sum += count;
        }
        for (status, count) in &other.statuses {
            *self.statuses.entry(status.clone()).or_default() += count;
        }
    }

    fn requests(&self) -> u64 {
        self.cumulative.last().copied().unwrap_or(0)
    }

    /// A latency quantile in milliseconds.
    fn quantile_ms(&self, q: f64) -> Option<f64> {
        let buckets: Vec<(f64, u64)> = (self.bounds.iter().copied())
            .chain([f64::INFINITY])
            .zip(self.cumulative.iter().copied())
            .collect();
        quantile(&buckets, q).map(|seconds| seconds * 1000.0)
    }
}

impl Figures {
    /// What the counters counted since `earlier` (a report of the same instance); levels
    /// as they are now.
    pub(crate) fn since(&self, earlier: &Figures) -> Figures {
        Figures {
            routes: (self.routes.iter())
                .map(|(route, counts)| {
                    let since = match earlier.routes.get(route) {
                        Some(before) => counts.since(before),
                        None => counts.clone(),
                    };
                    (route.clone(), since)
                })
                .collect(),
            cpu_seconds: (self.cpu_seconds - earlier.cpu_seconds).max(0.0),
            db_pool_waits: self.db_pool_waits.saturating_sub(earlier.db_pool_waits),
            db_pool_wait_seconds: (self.db_pool_wait_seconds - earlier.db_pool_wait_seconds)
                .max(0.0),
            redis_commands: self.redis_commands.saturating_sub(earlier.redis_commands),
            mq_publishes: self.mq_publishes.saturating_sub(earlier.mq_publishes),
            success: self.success.since(&earlier.success),
            refused: self.refused.since(&earlier.refused),
            ..self.clone()
        }
    }
}

/// One instance over a run: its last report at or before the start (none: it started
/// during the run, from zero), its first report at or after the end (else its last one),
/// and every report in between.
pub(crate) struct InstanceWindow {
    pub(crate) node_id: String,
    pub(crate) at_start: Option<Figures>,
    pub(crate) at_end: Figures,
    pub(crate) during: Vec<Figures>,
}

impl InstanceWindow {
    fn counted(&self) -> Figures {
        self.at_end
            .since(&self.at_start.clone().unwrap_or_default())
    }

    /// The most resident memory of the run: the highest report, or the process's own
    /// high-water mark when it rose during the run.
    fn peak_memory_bytes(&self) -> u64 {
        let reported = (self.during.iter().chain([&self.at_end]))
            .map(|figures| figures.memory_bytes)
            .max()
            .unwrap_or(0);
        let mark_before = self.at_start.as_ref().map_or(0, |f| f.peak_memory_bytes);
        if self.at_end.peak_memory_bytes > mark_before {
            reported.max(self.at_end.peak_memory_bytes)
        } else {
            reported
        }
    }

    fn peak_pool_in_use(&self) -> u32 {
        (self.during.iter().chain([&self.at_end]))
            .map(|figures| figures.db_pool_in_use)
            .max()
            .unwrap_or(0)
    }
}

/// The run's figures from its instances' windows, over `seconds`.
pub(crate) fn run_figures(windows: &[InstanceWindow], seconds: f64) -> (RunPerf, RunCost, RunPath) {
    let mut routes: BTreeMap<String, RouteCounts> = BTreeMap::new();
    let (mut success, mut refused) = (OutcomeCounts::default(), OutcomeCounts::default());
    let mut cost = RunCost::default();
    for window in windows {
        let counted = window.counted();
        for (route, counts) in &counted.routes {
            routes.entry(route.clone()).or_default().add(counts);
        }
        success.add(&counted.success);
        refused.add(&counted.refused);
        cost.instances.push(InstanceCost {
            node_id: window.node_id.clone(),
            cpu_seconds: counted.cpu_seconds,
            peak_memory_bytes: window.peak_memory_bytes(),
        });
        cost.cpu_seconds += counted.cpu_seconds;
        cost.db_pool_peak_in_use = cost.db_pool_peak_in_use.max(window.peak_pool_in_use());
        cost.db_pool_waits += counted.db_pool_waits;
        cost.db_pool_wait_ms += counted.db_pool_wait_seconds * 1000.0;
        cost.redis_commands += counted.redis_commands;
        cost.mq_publishes += counted.mq_publishes;
    }
    let endpoints = routes
        .into_iter()
        .filter(|(_, counts)| counts.requests() > 0)
        .map(|(route, counts)| endpoint(route, &counts, seconds))
        .collect();
    let path = RunPath {
        success: success.per_buy(),
        refused: refused.per_buy(),
    };
    (RunPerf { endpoints }, cost, path)
}

fn endpoint(route: String, counts: &RouteCounts, seconds: f64) -> EndpointFigures {
    let requests = counts.requests();
    let errors: BTreeMap<String, u64> = (counts.statuses.iter())
        .filter(|(status, count)| **count > 0 && status.starts_with(['4', '5']))
        .map(|(status, count)| (status.clone(), *count))
        .collect();
    // Refusals are the sale working as meant (409 SOLD_OUT, 429 RATE_LIMITED...): only
    // answers where the server failed count against the error rate.
    let failed: u64 = (errors.iter())
        .filter(|(status, _)| status.starts_with('5'))
        .map(|(_, count)| count)
        .sum();
    let answered: u64 = counts.statuses.values().sum();
    EndpointFigures {
        route,
        requests,
        qps: if seconds > 0.0 {
            requests as f64 / seconds
        } else {
            0.0
        },
        p50_ms: counts.quantile_ms(0.5),
        p99_ms: counts.quantile_ms(0.99),
        p999_ms: counts.quantile_ms(0.999),
        error_rate: if answered == 0 {
            0.0
        } else {
            failed as f64 / answered as f64
        },
        errors,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(cumulative: [u64; 3], statuses: &[(&str, u64)]) -> RouteCounts {
        RouteCounts {
            bounds: vec![0.001, 0.002],
            cumulative: cumulative.to_vec(),
            statuses: statuses
                .iter()
                .map(|(status, count)| (status.to_string(), *count))
                .collect(),
        }
    }

    fn figures(buy: RouteCounts, cpu: f64, success: (u64, f64), refused: (u64, f64)) -> Figures {
        let calls = |commands: f64| {
            let mut calls = [0.0; 5];
            calls[Call::RedisCommand as usize] = commands;
            calls
        };
        Figures {
            routes: [("/api/seckill/buy".to_owned(), buy)].into(),
            cpu_seconds: cpu,
            success: OutcomeCounts {
                requests: success.0,
                calls: calls(success.1),
            },
            refused: OutcomeCounts {
                requests: refused.0,
                calls: calls(refused.1),
            },
            ..Figures::default()
        }
    }

    #[test]
    fn a_run_counts_what_happened_between_its_start_and_its_end() {
        // Before the start: 100 buys answered; by the end 300 (200 in the run: 190 under
        // 1 ms, 8 more under 2 ms, 2 slower; 150 of them 200, 50 of them 409).
        let start = figures(
            route([100, 100, 100], &[("200", 100)]),
            5.0,
            (100, 200.0),
            (0, 0.0),
        );
        let end = figures(
            route([290, 298, 300], &[("200", 240), ("409", 50), ("503", 10)]),
            7.5,
            (250, 500.0),
            (50, 50.0),
        );
        let window = InstanceWindow {
            node_id: "a".into(),
            at_start: Some(start),
            at_end: end,
            during: vec![],
        };
        let (perf, cost, path) = run_figures(&[window], 10.0);
        let buy = &perf.endpoints[0];
        assert_eq!(buy.requests, 200);
        assert_eq!(buy.qps, 20.0);
        assert_eq!(
            buy.errors,
            [("409".to_owned(), 50), ("503".to_owned(), 10)].into()
        );
        // SOLD_OUT (409) is the sale working; only the 503s are errors.
        assert_eq!(buy.error_rate, 0.05);
        // The 100th of 200 is under 1 ms; the 198th is the last under 2 ms.
        assert!(buy.p50_ms.is_some_and(|ms| ms <= 1.0));
        assert!(buy.p99_ms.is_some_and(|ms| (ms - 2.0).abs() < 1e-9));
        assert_eq!(buy.p999_ms, Some(2.0));
        assert_eq!(cost.cpu_seconds, 2.5);
        assert_eq!(path.success.requests, 150);
        assert_eq!(path.success.redis_commands, 2.0);
        assert_eq!(path.refused.redis_commands, 1.0);
        assert_eq!(path.refused.db_statements, 0.0);
    }

    #[test]
    fn instances_add_up_and_one_started_during_the_run_counts_from_zero() {
        let report = |buys: u64, commands: f64| {
            figures(
                route([buys, buys, buys], &[("200", buys)]),
                1.0,
                (buys, commands),
                (0, 0.0),
            )
        };
        let windows = [
            InstanceWindow {
                node_id: "a".into(),
                at_start: Some(report(10, 20.0)),
                at_end: report(30, 60.0),
                during: vec![],
            },
            InstanceWindow {
                node_id: "b".into(),
                at_start: None,
                at_end: report(20, 60.0),
                during: vec![],
            },
        ];
        let (perf, cost, path) = run_figures(&windows, 4.0);
        assert_eq!(perf.endpoints[0].requests, 40);
        assert_eq!(cost.instances.len(), 2);
        assert_eq!(cost.cpu_seconds, 1.0);
        // (40 + 60) commands over 40 buys.
        assert_eq!(path.success.redis_commands, 2.5);
    }

    #[test]
    fn peaks_are_the_most_seen_during_the_run() {
        let level = |memory: u64, mark: u64, in_use: u32| Figures {
            memory_bytes: memory,
            peak_memory_bytes: mark,
            db_pool_in_use: in_use,
            ..Figures::default()
        };
        let risen = InstanceWindow {
            node_id: "a".into(),
            at_start: Some(level(100, 120, 1)),
            at_end: level(110, 180, 2),
            during: vec![level(150, 150, 7)],
        };
        assert_eq!(risen.peak_memory_bytes(), 180);
        assert_eq!(risen.peak_pool_in_use(), 7);
        // The high-water mark is older than the run: only the reports count.
        let flat = InstanceWindow {
            node_id: "a".into(),
            at_start: Some(level(100, 500, 1)),
            at_end: level(110, 500, 1),
            during: vec![level(150, 500, 1)],
        };
        assert_eq!(flat.peak_memory_bytes(), 150);
    }
}
