//! The live ledger as the admin API and the console serve it: computed at most once a
//! second per instance per activity and shared by every viewer, however many poll it, the
//! way the dashboard's frame is sampled once per instance. A computation reads each item's
//! markers and (up to a bound) its buyer records in the Redis that carries the sale, so
//! twenty viewers polling must cost what one does. Each caller is also held to a few reads
//! a second on this instance (`429 RATE_LIMITED` past it), which keeps the per-call
//! activity lookup and the answer's serialisation bounded too.

use std::{
    collections::HashMap,
    future::Future,
    sync::{Arc, Mutex, MutexGuard},
    time::{Duration, Instant},
};
use tokio::sync::OnceCell;

use contract::ActivityLedger;

use base::token_bucket::TokenBucket;

/// How long a computed ledger is served to every viewer before the next one is computed.
const FRESH_FOR: Duration = Duration::from_secs(1);
/// Ledger reads one caller may make per second on one instance (the console polls every
/// few seconds).
pub(crate) const READS_PER_SECOND: u64 = 5;

/// A computation's outcome, shared by everyone who waited for it.
type Computed = Result<Arc<ActivityLedger>, Arc<anyhow::Error>>;

/// One activity's latest computation: started at `started`, done once its cell is set.
struct Latest {
    started: Instant,
    cell: Arc<OnceCell<Computed>>,
}

/// This instance's latest ledger of each activity viewed, and each caller's allowance.
#[derive(Default)]
pub(crate) struct Ledgers {
    latest: Mutex<HashMap<i64, Latest>>,
    callers: Mutex<HashMap<String, Arc<TokenBucket>>>,
}

fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Ledgers {
    /// Whether `caller` may read a ledger now (one bucket per caller; callers are admin
    /// accounts, so the map is as small as their number).
    pub(crate) fn admit(&self, caller: &str) -> bool {
        let bucket = locked(&self.callers)
            .entry(caller.to_owned())
            .or_insert_with(|| Arc::new(TokenBucket::new()))
            .clone();
        bucket.try_take(READS_PER_SECOND)
    }

    /// The activity's ledger as computed less than [`FRESH_FOR`] ago, or computed now by
    /// `compute`: callers that arrive while it runs wait for the same computation. A failed
    /// computation is shared as well, for the same second, so a sick Redis is not asked
    /// again by every viewer.
    pub(crate) async fn get(
        &self,
        activity_id: i64,
        compute: impl Future<Output = anyhow::Result<ActivityLedger>>,
    ) -> Computed {
        let cell = {
            let mut latest = locked(&self.latest);
            let now = Instant::now();
            latest.retain(|_, entry| now.duration_since(entry.started) < FRESH_FOR);
            latest
                .entry(activity_id)
                .or_insert_with(|| Latest {
                    started: now,
                    cell: Arc::default(),
                })
                .cell
                .clone()
        };
        // A caller that hangs up mid-computation drops it; the next waiter computes instead.
        cell.get_or_init(|| async { compute.await.map(Arc::new).map_err(Arc::new) })
            .await
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn ledger(activity_id: i64) -> ActivityLedger {
        ActivityLedger {
            activity_id,
            deduction: "redis".to_owned(),
            items: Vec::new(),
            at_ms: 0,
        }
    }

    #[tokio::test]
    async fn concurrent_viewers_share_one_computation() {
        let ledgers = Ledgers::default();
        let computed = AtomicUsize::new(0);
        let compute = || async {
            computed.fetch_add(1, Ordering::SeqCst);
            tokio::task::yield_now().await;
            Ok(ledger(7))
        };
        let answers = futures::future::join_all((0..20).map(|_| ledgers.get(7, compute()))).await;
        assert!(answers.iter().all(|answer| answer.is_ok()));
        assert_eq!(computed.load(Ordering::SeqCst), 1);
        ledgers.get(8, compute()).await.expect("another activity");
        assert_eq!(computed.load(Ordering::SeqCst), 2, "one per activity");
    }

    #[test]
    fn a_caller_past_its_reads_is_refused_and_others_are_not() {
        let ledgers = Ledgers::default();
        let admitted = (0..READS_PER_SECOND * 3)
            .filter(|_| ledgers.admit("merchant"))
            .count() as u64;
        assert_eq!(admitted, READS_PER_SECOND);
        assert!(ledgers.admit("ops"));
    }
}
