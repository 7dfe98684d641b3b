//! The load loops. Closed loop (the default): `concurrency` workers claim request numbers
//! from one shared counter and send them one after another, so the server's pace sets the
//! rate. Open loop (`--rate`): requests are due at a fixed rate whatever the server's pace,
//! as a sale's crowd arrives, each sent by a task of its own; one due while `concurrency`
//! are in flight is shed (counted, not sent) rather than waited for, which would close the
//! loop again. Either way a run stops when the plan has no request left or the deadline
//! has passed, so it always ends by itself.

use std::{
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};
use tokio::{task::JoinSet, time::MissedTickBehavior};

use super::{
    http::{BuyBody, Sample, Target},
    plan::{Plan, Slot},
    tally::Tally,
};

/// How requests are paced.
#[derive(Clone, Copy, Debug)]
pub enum Pace {
    /// This many requests in flight, each sent once the one before it is answered.
    Closed { concurrency: u64 },
    /// This many requests due a second, at most `max_in_flight` of them in flight.
    Open {
        schedule: Schedule,
        max_in_flight: u64,
    },
}

/// When each request of an open-loop run is due, from the run's start.
#[derive(Clone, Copy, Debug)]
pub struct Schedule {
    per_s: u64,
}

impl Schedule {
    pub fn new(per_s: u64) -> Self {
        Self {
            per_s: per_s.max(1),
        }
    }

    /// When request `k` is due.
    fn due(self, k: u64) -> Duration {
        let nanos = u128::from(k) * 1_000_000_000 / u128::from(self.per_s);
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }
}

/// Runs the plan against the target; returns the merged tally and the wall time.
pub async fn run(
    target: Target,
    plan: Plan,
    pace: Pace,
    duration: Option<Duration>,
) -> anyhow::Result<(Tally, Duration)> {
    let started = Instant::now();
    let shared = Arc::new(Shared {
        target,
        plan,
        next: AtomicU64::new(0),
        deadline: duration.map(|d| started + d),
    });
    let tally = match pace {
        Pace::Closed { concurrency } => {
            let workers: Vec<_> = (0..concurrency)
                .map(|_| tokio::spawn(worker(Arc::clone(&shared))))
                .collect();
            let mut tally = Tally::default();
            for worker in workers {
                tally.merge(worker.await?);
            }
            tally
        }
        Pace::Open {
            schedule,
            max_in_flight,
        } => open(shared, schedule, max_in_flight, started).await?,
    };
    Ok((tally, started.elapsed()))
}

struct Shared {
    target: Target,
    plan: Plan,
    next: AtomicU64,
    deadline: Option<Instant>,
}

impl Shared {
    fn past(&self, at: Instant) -> bool {
        self.deadline.is_some_and(|deadline| at >= deadline)
    }

    /// Sends `slot`, its latency counted from `due`.
    async fn send(&self, slot: Slot, due: Instant) -> Sample {
        let order = BuyBody {
            activity_id: self.plan.activity_id,
            item_id: slot.item_id,
            quantity: self.plan.quantity,
        };
        self.target.send(order, self.plan.buyer(slot), due).await
    }
}

async fn worker(shared: Arc<Shared>) -> Tally {
    let mut tally = Tally::default();
    while !shared.past(Instant::now()) {
        let Some(slot) = shared
            .plan
            .slot(shared.next.fetch_add(1, Ordering::Relaxed))
        else {
            break;
        };
        tally.record(shared.send(slot, Instant::now()).await);
    }
    tally
}

/// The open loop: every millisecond, sends what has fallen due since the last tick (a
/// timer cannot wake for each request of a fast rate), each with the time it was due, so a
/// server that falls behind shows in the latencies instead of slowing the arrivals.
async fn open(
    shared: Arc<Shared>,
    schedule: Schedule,
    max_in_flight: u64,
    started: Instant,
) -> anyhow::Result<Tally> {
    let mut tally = Tally::default();
    let mut in_flight = JoinSet::new();
    let mut tick = tokio::time::interval(Duration::from_millis(1));
    tick.set_missed_tick_behavior(MissedTickBehavior::Skip);
    let mut k = 0_u64;
    'sending: loop {
        tick.tick().await;
        while let Some(done) = in_flight.try_join_next() {
            tally.record(done?);
        }
        let now = Instant::now();
        loop {
            let due = started + schedule.due(k);
            if due > now {
                break;
            }
            let Some(slot) = shared.plan.slot(k).filter(|_| !shared.past(due)) else {
                break 'sending;
            };
            if in_flight.len() as u64 >= max_in_flight {
                tally.shed();
            } else {
                let shared = Arc::clone(&shared);
                in_flight.spawn(async move { shared.send(slot, due).await });
            }
            k += 1;
        }
    }
    while let Some(done) = in_flight.join_next().await {
        tally.record(done?);
    }
    Ok(tally)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_fall_due_evenly_from_the_start() {
        let schedule = Schedule::new(4000);
        assert_eq!(schedule.due(0), Duration::ZERO);
        assert_eq!(schedule.due(1), Duration::from_micros(250));
        assert_eq!(schedule.due(4000), Duration::from_secs(1));
        assert_eq!(Schedule::new(3).due(1), Duration::from_nanos(333_333_333));
    }

    #[test]
    fn a_rate_of_zero_is_read_as_one_a_second() {
        assert_eq!(Schedule::new(0).due(2), Duration::from_secs(2));
    }
}
