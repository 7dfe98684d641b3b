//! The load loop: `concurrency` workers claim request numbers from one shared counter and
//! send them one after another. A worker stops when the plan has no request left or the
//! deadline has passed, so the run always ends by itself.

use std::{
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use super::{http::Target, plan::Plan, tally::Tally};

/// Runs the plan against the target; returns the merged tally and the wall time.
pub async fn run(
    target: Target,
    plan: Plan,
    concurrency: u64,
    duration: Option<Duration>,
) -> anyhow::Result<(Tally, Duration)> {
    let started = Instant::now();
    let shared = Arc::new(Shared {
        target,
        plan,
        next: AtomicU64::new(0),
        deadline: duration.map(|d| started + d),
    });
    let workers: Vec<_> = (0..concurrency)
        .map(|_| tokio::spawn(worker(Arc::clone(&shared))))
        .collect();
    let mut tally = Tally::default();
    for worker in workers {
        tally.merge(worker.await?);
    }
    Ok((tally, started.elapsed()))
}

struct Shared {
    target: Target,
    plan: Plan,
    next: AtomicU64,
    deadline: Option<Instant>,
}

impl Shared {
    fn past_deadline(&self) -> bool {
        self.deadline
            .is_some_and(|deadline| Instant::now() >= deadline)
    }
}

async fn worker(shared: Arc<Shared>) -> Tally {
    let mut tally = Tally::default();
    while !shared.past_deadline() {
        let Some(slot) = shared
            .plan
            .slot(shared.next.fetch_add(1, Ordering::Relaxed))
        else {
            break;
        };
        let sample = shared
            .target
            .send(shared.plan.activity_id, shared.plan.quantity, slot)
            .await;
        tally.record(sample);
    }
    tally
}
