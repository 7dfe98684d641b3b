//! What came back: each worker keeps its own [`Tally`] (no locks in the hot loop); the
//! merged tally becomes the run's [`Summary`] and the set of order ids the check looks up.

use base::percentiles::nearest_rank;
use serde::Serialize;
use std::{
    collections::{BTreeMap, HashSet},
    time::Duration,
};
use uuid::Uuid;

use super::http::{Sample, TransportError};

#[derive(Default)]
pub struct Tally {
    latencies_us: Vec<u64>,
    outcomes: BTreeMap<(u16, String), u64>,
    transport_errors: BTreeMap<TransportError, u64>,
    order_ids: Vec<Uuid>,
    shed: u64,
}

/// The run in numbers.
#[derive(Serialize)]
pub struct Summary {
    /// Requests sent, and how many of them got an HTTP answer (any status).
    pub requests: u64,
    pub answered: u64,
    pub wall_s: f64,
    pub throughput_rps: f64,
    /// Over the requests that got an HTTP answer; `None` when none did.
    pub latency_ms: Option<Latency>,
    pub outcomes: Vec<Outcome>,
    pub transport_errors: BTreeMap<TransportError, u64>,
    /// Successful buys (`OK`), and how many distinct order ids they carried.
    pub ok: u64,
    pub distinct_order_ids: usize,
    /// Open loop: requests that fell due while the most allowed were in flight, not sent.
    pub shed: u64,
    /// The share of the whole machine (every core, every process) that was busy while the
    /// requests were sent (0 to 1), the check after them left out; `None` without
    /// `/proc/stat`.
    pub machine_busy: Option<f64>,
}

#[derive(Serialize)]
pub struct Latency {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

#[derive(Serialize)]
pub struct Outcome {
    pub status: u16,
    pub code: String,
    pub count: u64,
}

impl Tally {
    pub fn record(&mut self, sample: Sample) {
        match sample.result {
            Ok(reply) => {
                self.latencies_us
                    .push(u64::try_from(sample.latency.as_micros()).unwrap_or(u64::MAX));
                *self.outcomes.entry((reply.status, reply.code)).or_default() += 1;
                self.order_ids.extend(reply.order_id);
            }
            Err(kind) => *self.transport_errors.entry(kind).or_default() += 1,
        }
    }

    /// A request that fell due and was not sent.
    pub fn shed(&mut self) {
        self.shed += 1;
    }

    pub fn merge(&mut self, other: Tally) {
        self.shed += other.shed;
        self.latencies_us.extend(other.latencies_us);
        for (key, count) in other.outcomes {
            *self.outcomes.entry(key).or_default() += count;
        }
        for (kind, count) in other.transport_errors {
            *self.transport_errors.entry(kind).or_default() += count;
        }
        self.order_ids.extend(other.order_ids);
    }

    /// The summary of a run that took `wall` with the machine `machine_busy`, and the
    /// distinct order ids it received.
    pub fn summarize(
        mut self,
        wall: Duration,
        machine_busy: Option<f64>,
    ) -> (Summary, HashSet<Uuid>) {
        self.latencies_us.sort_unstable();
        let answered = self.latencies_us.len() as u64;
        let requests = answered + self.transport_errors.values().sum::<u64>();
        let wall_s = wall.as_secs_f64();
        let ok = self.order_ids.len() as u64;
        let order_ids: HashSet<Uuid> = self.order_ids.into_iter().collect();
        let summary = Summary {
            requests,
            answered,
            wall_s,
            throughput_rps: if wall_s > 0.0 {
                requests as f64 / wall_s
            } else {
                0.0
            },
            latency_ms: latency(&self.latencies_us),
            outcomes: self
                .outcomes
                .into_iter()
                .map(|((status, code), count)| Outcome {
                    status,
                    code,
                    count,
                })
                .collect(),
            transport_errors: self.transport_errors,
            ok,
            distinct_order_ids: order_ids.len(),
            shed: self.shed,
            machine_busy,
        };
        (summary, order_ids)
    }
}

/// Nearest-rank percentiles of sorted microsecond samples, in milliseconds.
fn latency(sorted_us: &[u64]) -> Option<Latency> {
    let &max = sorted_us.last()?;
    let at = |p: f64| millis(nearest_rank(sorted_us, p).unwrap_or(max));
    Some(Latency {
        p50: at(0.50),
        p90: at(0.90),
        p99: at(0.99),
        max: millis(max),
    })
}

fn millis(us: u64) -> f64 {
    us as f64 / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::Reply;

    fn answered(ms: u64, status: u16, code: &str, order_id: Option<Uuid>) -> Sample {
        Sample {
            latency: Duration::from_millis(ms),
            result: Ok(Reply {
                status,
                code: code.to_owned(),
                order_id,
            }),
        }
    }

    #[test]
    fn percentiles_use_the_nearest_rank() {
        let samples: Vec<u64> = (1..=100).map(|ms| ms * 1000).collect();
        let latency = latency(&samples).expect("samples");
        assert_eq!(
            (latency.p50, latency.p90, latency.p99, latency.max),
            (50.0, 90.0, 99.0, 100.0)
        );
        assert!(super::latency(&[]).is_none());
    }

    #[test]
    fn merged_tallies_count_outcomes_errors_and_distinct_orders() {
        let id = Uuid::new_v4();
        let mut first = Tally::default();
        first.record(answered(5, 200, "OK", Some(id)));
        first.record(answered(7, 409, "SOLD_OUT", None));
        let mut second = Tally::default();
        second.record(answered(9, 409, "SOLD_OUT", None));
        second.record(Sample {
            latency: Duration::from_secs(10),
            result: Err(TransportError::Timeout),
        });
        second.record(answered(3, 200, "OK", Some(id)));
        second.shed();
        first.merge(second);
        let (summary, ids) = first.summarize(Duration::from_secs(1), None);
        assert_eq!((summary.requests, summary.answered), (5, 4));
        assert_eq!(summary.shed, 1, "a shed request is counted, not sent");
        assert_eq!(summary.throughput_rps, 5.0);
        assert_eq!((summary.ok, summary.distinct_order_ids), (2, 1));
        assert_eq!(ids.len(), 1);
        let sold_out = summary.outcomes.iter().find(|o| o.code == "SOLD_OUT");
        assert_eq!(sold_out.map(|o| o.count), Some(2));
        assert_eq!(summary.transport_errors[&TransportError::Timeout], 1);
        assert_eq!(summary.latency_ms.map(|l| l.max), Some(9.0));
    }
}
