//! Buy traffic per activity on this instance, for the impact of a flip: the funnel counts
//! each buy request once the catalogue has found its activity (so only activities that
//! exist take a counter), and the heartbeat turns the counts into each activity's rate over
//! the last minute ([`Rates`]) beside its requests in flight.
//!
//! A request refused before its activity is known (admission, a bad body, no buyer token)
//! is no activity's traffic and is not counted here.

use contract::ActivityBuys;
use std::{
    collections::{BTreeMap, HashMap, VecDeque},
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, RwLock,
    },
    time::{Duration, Instant},
};

/// The counters of every activity this instance has served a buy of.
#[derive(Default)]
pub struct ActivityTraffic {
    activities: RwLock<HashMap<i64, Arc<Counters>>>,
}

#[derive(Default)]
struct Counters {
    /// Buy requests since the process started.
    requests: AtomicU64,
    in_flight: AtomicU64,
}

/// One request of an activity, in flight until dropped.
pub struct Counted(Arc<Counters>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

impl ActivityTraffic {
    /// Counts a buy request of `activity_id`, in flight while the guard lives.
    pub fn enter(&self, activity_id: i64) -> Counted {
        let known = self
            .activities
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get(&activity_id)
            .cloned();
        // The write lock is taken once per activity and process, on its first request.
        let counters = known.unwrap_or_else(|| {
            self.activities
                .write()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .entry(activity_id)
                .or_default()
                .clone()
        });
        counters.requests.fetch_add(1, Ordering::Relaxed);
        counters.in_flight.fetch_add(1, Ordering::AcqRel);
        Counted(counters)
    }

    /// Each activity's (requests since the start, requests in flight now).
    fn now(&self) -> BTreeMap<i64, (u64, u64)> {
        self.activities
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .iter()
            .map(|(id, counters)| {
                let requests = counters.requests.load(Ordering::Relaxed);
                (*id, (requests, counters.in_flight.load(Ordering::Acquire)))
            })
            .collect()
    }
}

/// How far back a rate looks.
const RATE_SPAN: Duration = Duration::from_secs(60);
/// Counts are kept at most this often, so a fast heartbeat keeps no more of them.
const SAMPLE_EVERY: Duration = Duration::from_secs(1);

/// The counts seen over the last [`RATE_SPAN`], for the rates of one heartbeat after the
/// other.
#[derive(Default)]
pub struct Rates {
    samples: VecDeque<(Instant, Sample)>,
}

/// Every buy answer of the instance, and each activity's requests, at one moment.
#[derive(Clone, Default)]
struct Sample {
    answered: u64,
    activities: BTreeMap<i64, u64>,
}

impl Rates {
    /// The instance's buy answers per second (all of them, `answered` counted now), and each
    /// activity with traffic over the span or in flight now, with its figures.
    pub fn per_s(
        &mut self,
        now: Instant,
        answered: u64,
        traffic: &ActivityTraffic,
    ) -> (f64, Vec<ActivityBuys>) {
        while self
            .samples
            .front()
            .is_some_and(|(at, _)| now.duration_since(*at) > RATE_SPAN)
        {
            self.samples.pop_front();
        }
        let counts = traffic.now();
        let sample = Sample {
            answered,
            activities: counts
                .iter()
                .map(|(id, (requests, _))| (*id, *requests))
                .collect(),
        };
        let (rate, activities) = match self.samples.front() {
            Some((at, before)) if now > *at => {
                let seconds = now.duration_since(*at).as_secs_f64();
                let per_s = |now: u64, then: u64| now.saturating_sub(then) as f64 / seconds;
                let activities = counts
                    .iter()
                    .map(|(id, (requests, in_flight))| {
                        let then = before.activities.get(id).copied().unwrap_or(0);
                        (*id, per_s(*requests, then), *in_flight)
                    })
                    .collect();
                (per_s(answered, before.answered), activities)
            }
            _ => (
                0.0,
                counts
                    .iter()
                    .map(|(id, (_, in_flight))| (*id, 0.0, *in_flight))
                    .collect::<Vec<_>>(),
            ),
        };
        if self
            .samples
            .back()
            .is_none_or(|(at, _)| now.duration_since(*at) >= SAMPLE_EVERY)
        {
            self.samples.push_back((now, sample));
        }
        let activities = activities
            .into_iter()
            .filter(|(_, rate_per_s, in_flight)| *rate_per_s > 0.0 || *in_flight > 0)
            .map(|(activity_id, rate_per_s, in_flight)| ActivityBuys {
                activity_id,
                rate_per_s,
                in_flight,
            })
            .collect();
        (rate, activities)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_activity_has_its_rate_over_the_span_and_its_requests_in_flight() {
        let traffic = ActivityTraffic::default();
        let mut rates = Rates::default();
        let start = Instant::now();
        let held = traffic.enter(7);
        assert_eq!(
            rates.per_s(start, 1, &traffic),
            (
                0.0,
                vec![ActivityBuys {
                    activity_id: 7,
                    rate_per_s: 0.0,
                    in_flight: 1
                }]
            ),
            "no rate before a second look, but the request in flight"
        );
        drop(held);
        for _ in 0..20 {
            drop(traffic.enter(7));
        }
        drop(traffic.enter(8));
        let (rate, activities) = rates.per_s(start + Duration::from_secs(10), 31, &traffic);
        assert_eq!(rate, 3.0);
        assert_eq!(
            activities,
            [
                ActivityBuys {
                    activity_id: 7,
                    rate_per_s: 2.0,
                    in_flight: 0
                },
                ActivityBuys {
                    activity_id: 8,
                    rate_per_s: 0.1,
                    in_flight: 0
                },
            ]
        );
        // A minute on, the early requests are out of the span, and an idle activity is
        // not reported.
        drop(traffic.enter(8));
        let (rate, activities) = rates.per_s(start + Duration::from_secs(65), 86, &traffic);
        assert_eq!(
            rate, 1.0,
            "55 answers over the 55 s since the sample at 10 s"
        );
        assert_eq!(
            activities,
            [ActivityBuys {
                activity_id: 8,
                rate_per_s: 1.0 / 55.0,
                in_flight: 0
            }]
        );
    }
}
