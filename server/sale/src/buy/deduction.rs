//! The deduction switch hand-over (`switches/deduction`): flipping between Redis
//! pre-deduction and PostgreSQL deduction in the middle of a storm without overselling in
//! either direction, and without taking a buyer past the per-user limit.
//!
//! The design rests on one fact: PostgreSQL is the arbiter of every pre-order, whichever
//! layer deducted it (`buy::preorders`). Each group-commit batch allocates its members
//! against `activity_items.allocated` and `buyer_holdings` under the item row's lock, and the
//! CHECKs on both tables refuse what would still slip through. So the database always knows
//! every committed deduction, and an in-flight Redis deduction that would oversell once the
//! database path has handed the units out is refused (`SOLD_OUT`) when its batch commits.
//!
//! * **redis → db**: takes effect with the next request. Redis deductions already made are
//!   either committed (and counted in `allocated`) or still in a batch that the arbiter
//!   decides against the same row. Nothing to wait for.
//! * **db → redis**: Redis has not seen the database path's allocations, so it must not
//!   serve again before it is re-derived. On seeing the flip, this instance keeps deducting
//!   in PostgreSQL while it (1) waits for its own database-path pre-orders in flight to
//!   commit, then (2) re-derives stock, buyer records and seats of every unfinished,
//!   pre-warmed activity from PostgreSQL (`prewarm::load`), and only then (3) opens the
//!   Redis path. Another instance that flips later, or whose Redis deductions are still in
//!   flight during the re-derivation, can make Redis overstate the stock for a moment; the
//!   arbiter refuses those buys (the unit so spent in Redis brings it back to the truth),
//!   so the cost is a few `SOLD_OUT` answers, never an oversell.
//!
//! If the re-derivation fails (Redis sick, which is why one flips to `db`), the instance
//! stays on the database path and retries, so a flip back can never open a stale Redis.
//!
//! The gate is here; the task that runs the hand-over re-derives every live activity as a
//! pre-warm does, so it is the pre-warm's (`crate::prewarm::handover`).

use std::{
    sync::atomic::{AtomicBool, AtomicU64, Ordering},
    time::Duration,
};
use tokio::sync::Notify;

use base::config::DeductionMode;

/// How long the hand-over waits for this instance's database-path pre-orders to commit.
const DRAIN_WAIT: Duration = Duration::from_secs(10);

/// Which layer this instance deducts in now, given the switch.
pub struct DeductionGate {
    /// Redis has been re-derived since the last `db` period and may serve.
    redis_serving: AtomicBool,
    /// Database-path pre-orders of this instance not yet answered.
    database_in_flight: AtomicU64,
    /// Rung when a request closes the Redis path, so the hand-over looks again even if the
    /// switch's watch coalesced the `db` value away (redis → db → redis in quick succession).
    pub closed: Notify,
}

/// A database-path pre-order in flight; dropping it counts it out.
pub struct DatabaseDeduction<'a>(&'a AtomicU64);

impl Drop for DatabaseDeduction<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl DeductionGate {
    pub fn new(initial: DeductionMode) -> Self {
        Self {
            redis_serving: AtomicBool::new(initial == DeductionMode::Redis),
            database_in_flight: AtomicU64::new(0),
            closed: Notify::new(),
        }
    }

    /// The layer a request deducts in: Redis only once it has been re-derived. A request
    /// that sees `db` closes the Redis path itself, so no database-path allocation can
    /// happen while Redis still counts as current.
    pub fn mode(&self, switched: DeductionMode) -> DeductionMode {
        match switched {
            DeductionMode::Redis if self.is_redis_serving() => DeductionMode::Redis,
            DeductionMode::Redis => DeductionMode::Db,
            DeductionMode::Db => {
                if self.redis_serving.swap(false, Ordering::AcqRel) {
                    self.closed.notify_one();
                }
                DeductionMode::Db
            }
        }
    }

    /// Whether Redis deducts now, without closing anything (for readers such as
    /// reconciliation, which must not judge Redis while the database path deducts).
    pub fn redis_serves(&self, switched: DeductionMode) -> bool {
        switched == DeductionMode::Redis && self.is_redis_serving()
    }

    /// Counts a database-path pre-order until the returned guard drops.
    pub fn enter_database(&self) -> DatabaseDeduction<'_> {
        self.database_in_flight.fetch_add(1, Ordering::AcqRel);
        DatabaseDeduction(&self.database_in_flight)
    }

    pub fn open_redis(&self) {
        self.redis_serving.store(true, Ordering::Release);
    }

    fn is_redis_serving(&self) -> bool {
        self.redis_serving.load(Ordering::Acquire)
    }

    pub async fn drained(&self) -> bool {
        let started = tokio::time::Instant::now();
        while self.database_in_flight.load(Ordering::Acquire) > 0 {
            if started.elapsed() > DRAIN_WAIT {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_serves_only_once_opened() {
        let gate = DeductionGate::new(DeductionMode::Db);
        assert_eq!(gate.mode(DeductionMode::Redis), DeductionMode::Db);
        gate.open_redis();
        assert_eq!(gate.mode(DeductionMode::Redis), DeductionMode::Redis);
        assert_eq!(gate.mode(DeductionMode::Db), DeductionMode::Db);
        assert_eq!(gate.mode(DeductionMode::Db), DeductionMode::Db);
        assert_eq!(
            gate.mode(DeductionMode::Redis),
            DeductionMode::Db,
            "a db request closed it"
        );
    }

    #[tokio::test]
    async fn the_drain_waits_for_database_deductions() {
        let gate = DeductionGate::new(DeductionMode::Db);
        let guard = gate.enter_database();
        assert_eq!(gate.database_in_flight.load(Ordering::Acquire), 1);
        drop(guard);
        assert!(gate.drained().await);
    }
}
