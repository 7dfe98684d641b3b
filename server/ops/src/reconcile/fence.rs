//! The fenced re-derivation of one item: how Redis is rebuilt from PostgreSQL while the
//! sale is live (a pre-warm, a repair, Redis lost) without selling a unit twice and without
//! giving back a unit an in-flight request is about to commit.
//!
//! 0. **Lock**: a re-derivation runs only under the activity's [`ActivityLock`], so the
//!    pre-warm, the deduction hand-over of every instance and the leader's pass take turns
//!    on an activity instead of rewriting an item over each other.
//! 1. **Fence**: a key the stock scripts check, holding the run's id; from the moment it is
//!    set no deduction of the item runs (buyers get 503 `DEGRADED` for that moment). It
//!    carries a short TTL, renewed in the background while the run works (up to
//!    [`MAX_HOLD`]), so a run that dies or hangs cannot hold the sale. Only its run renews
//!    or lowers it (`lua/fence_renew.lua`, `lua/fence_lower.lua`): a run whose fence
//!    expired and was raised again by another can no longer lower that one, and learns it
//!    lost the item.
//! 2. **Quiesce**: every deduction made before the fence left a marker. Each marker's
//!    pre-order either commits (it is then in `allocated`) or is voided
//!    (`settle::void_and_release`: once the void row exists the pre-order can never commit).
//!    The run waits a moment for markers to commit, then voids the rest. Afterwards no
//!    request can still take or commit a unit of the item.
//! 3. **Snapshot under the item row's lock**: `allocated`, the buyers' holdings, the seat
//!    map and the restore journal are read `FOR UPDATE` on the item row, which every
//!    transaction moving the item's stock takes (pre-order batches of the database path,
//!    cancels, failures), so none of them lands between the read and the write.
//! 4. **Write** the derived state in chunks into staging keys of the run's own, then swap
//!    them in with the stock in one short script that writes nothing unless the fence is
//!    still the run's (`lua/rederive_commit.lua`); commit, lower the fence. A large item
//!    never stalls Redis for the other sales, and never outlives its fence unseen.
//!    A cancel committed before the snapshot is in the restore set, so its retried
//!    give-back gives nothing; one committed after gives its units back as it should.

use crate::reconcile::redis_state::ItemStateClient;
use std::{collections::HashMap, time::Duration};
use tokio::task::JoinHandle;
use uuid::Uuid;

use contract::{SaleItem, UserId};

use crate::{
    reconcile::{redis_state::Derived, service::ActivityLock},
    state::AppState,
};
use base::redis::RedisStore;
use sale::{
    buy::{
        preorders,
        settle::{self, Deduction, Settled},
    },
    catalog::store::StoredActivity,
};

/// How long a fence holds an item after its last renewal, if its run dies.
const FENCE_TTL_MS: u64 = 10_000;
/// How often a working run renews its fence: well within its TTL.
const RENEW_EVERY: Duration = Duration::from_millis(FENCE_TTL_MS / 4);
/// The longest a run keeps its fence up by renewing it; a run still working then loses the
/// item (its write is refused) rather than hold the sale any longer. Re-deriving an item of
/// a million buyers takes a few seconds.
const MAX_HOLD: Duration = Duration::from_secs(120);
/// How long the run waits for pre-orders deducted before the fence to commit.
const QUIESCE_WAIT: Duration = Duration::from_millis(300);

/// What a re-derivation changed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Rederived {
    /// Redis stock before (`None`: missing) and after.
    pub(crate) stock_before: Option<i64>,
    pub(crate) stock_after: i64,
    /// Buyers holding units, as loaded.
    pub(crate) buyers: u64,
    /// Deductions voided because their pre-order had not committed.
    pub(crate) voided: Vec<Deduction>,
    /// Buyers whose Redis record differed from their holding: (buyer, Redis, PostgreSQL).
    pub(crate) buyers_changed: Vec<(i64, i64, i64)>,
}

/// Re-derives one item of `activity` from PostgreSQL behind the fence, under the
/// activity's `lock`.
pub(crate) async fn rederive_item(
    state: &AppState,
    lock: &ActivityLock,
    activity: &StoredActivity,
    item_id: i64,
) -> anyhow::Result<Rederived> {
    anyhow::ensure!(
        lock.activity_id() == activity.id,
        "re-deriving activity {} under the lock of activity {}",
        activity.id,
        lock.activity_id()
    );
    let sale = SaleItem::new(activity.id, item_id);
    let fence = Fence::raise(&state.redis, sale).await?;
    let rederived = fenced(state, activity, sale, &fence.run).await;
    fence.lower(state).await;
    rederived
}

/// A fence this process raised: renewed in the background until it is lowered or
/// dropped (a cancelled run stops renewing, and its fence expires).
struct Fence {
    sale: SaleItem,
    run: String,
    renewer: JoinHandle<()>,
}

impl Fence {
    async fn raise(redis: &RedisStore, sale: SaleItem) -> redis::RedisResult<Fence> {
        let run = Uuid::new_v4().to_string();
        ItemStateClient(redis)
            .raise_fence(sale, &run, FENCE_TTL_MS)
            .await?;
        let renewer = tokio::spawn(keep_up(redis.clone(), sale, run.clone()));
        Ok(Fence { sale, run, renewer })
    }

    /// Lowers the fence if it is still this run's; counts it when it was not.
    async fn lower(self, state: &AppState) {
        self.renewer.abort();
        let (activity, item) = (self.sale.activity.0, self.sale.item.0);
        match ItemStateClient(&state.redis)
            .lower_fence(self.sale, &self.run)
            .await
        {
            Ok(true) => {}
            Ok(false) => {
                refused(state, "lower");
                tracing::warn!(activity, item, run = %self.run, "the fence was no longer this run's; left as it is");
            }
            Err(error) => {
                tracing::warn!(error = %error, activity, item, "could not lower the fence; it expires by itself");
            }
        }
    }
}

impl Drop for Fence {
    fn drop(&mut self) {
        self.renewer.abort();
    }
}

/// Renews `run`'s fence until it is no longer the run's or [`MAX_HOLD`] has passed. A
/// renewal that fails on a Redis error is tried again: the TTL covers a few misses.
async fn keep_up(redis: RedisStore, sale: SaleItem, run: String) {
    let started = tokio::time::Instant::now();
    loop {
        tokio::time::sleep(RENEW_EVERY).await;
        if started.elapsed() >= MAX_HOLD {
            tracing::warn!(
                activity = sale.activity.0,
                item = sale.item.0,
                "a re-derivation held its fence too long; letting it expire"
            );
            return;
        }
        match ItemStateClient(&redis)
            .renew_fence(sale, &run, FENCE_TTL_MS)
            .await
        {
            Ok(true) => {}
            Ok(false) => return,
            Err(error) => {
                tracing::warn!(error = %error, activity = sale.activity.0, item = sale.item.0, "could not renew the fence");
            }
        }
    }
}

/// Counts a step of a run that found the fence another run's (or gone).
fn refused(state: &AppState, step: &str) {
    state.metrics.fence_refused.with_label_values(&[step]).inc();
}

async fn fenced(
    state: &AppState,
    activity: &StoredActivity,
    sale: SaleItem,
    run: &str,
) -> anyhow::Result<Rederived> {
    let voided = quiesce(state, sale).await?;
    let mut tx = state.db.begin().await?;
    let (allocated, total): (i32, i32) = sqlx::query_as(
        "SELECT allocated, total_stock FROM activity_items
         WHERE activity_id = $1 AND item_id = $2 FOR UPDATE",
    )
    .bind(sale.activity.0)
    .bind(sale.item.0)
    .fetch_one(&mut *tx)
    .await?;
    let holders: Vec<(i64, i64)> = sqlx::query_as(
        "SELECT user_id, units::BIGINT FROM buyer_holdings
         WHERE activity_id = $1 AND item_id = $2 AND units > 0 ORDER BY user_id",
    )
    .bind(sale.activity.0)
    .bind(sale.item.0)
    .fetch_all(&mut *tx)
    .await?;
    let seats = if activity.kind == contract::ActivityKind::Seated {
        preorders::seat_holders(&mut *tx, sale.activity.0).await?
    } else {
        Vec::new()
    };
    let restored = super::store::restored_orders(&mut tx, sale.activity.0, sale.item.0).await?;
    let (before, _) = ItemStateClient(&state.redis).item_counters(sale).await?;
    let recorded: HashMap<i64, i64> = all_buyers(state, sale).await?;
    let stock = i64::from(total - allocated);
    let committed = ItemStateClient(&state.redis)
        .rederive(
            sale,
            run,
            &Derived {
                stock,
                holders: &holders,
                seats: &seats,
                restored: &restored,
                expires_at: sale::catalog::expiry::keys_expire_at(activity.ends_at),
            },
        )
        .await?;
    if !committed {
        refused(state, "commit");
        anyhow::bail!("the fence expired or was taken over before the write; nothing written");
    }
    tx.commit().await?;
    Ok(Rederived {
        stock_before: before.stock,
        stock_after: stock,
        buyers: holders.len() as u64,
        voided,
        buyers_changed: buyer_differences(&recorded, &holders),
    })
}

/// Waits for the item's markers to commit, then voids and releases the rest.
async fn quiesce(state: &AppState, sale: SaleItem) -> anyhow::Result<Vec<Deduction>> {
    let started = tokio::time::Instant::now();
    loop {
        let (counters, _) = ItemStateClient(&state.redis).item_counters(sale).await?;
        let ids: Vec<Uuid> = counters.markers.iter().map(|m| m.order).collect();
        let committed = settle::existing_orders(&state.db, &ids).await?;
        let open: Vec<_> = counters
            .markers
            .iter()
            .filter(|marker| !committed.contains(&marker.order))
            .collect();
        if open.is_empty() {
            return Ok(Vec::new());
        }
        if started.elapsed() >= QUIESCE_WAIT {
            let mut voided = Vec::with_capacity(open.len());
            for marker in open {
                let deduction = Deduction {
                    sale,
                    order: marker.order,
                    buyer: UserId(marker.buyer),
                    units: marker.units,
                };
                if settle::void_and_release(&state.db, &state.redis, &deduction).await?
                    != Settled::OrderExists
                {
                    voided.push(deduction);
                }
            }
            return Ok(voided);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Every buyer record of the item (the fence is up: nothing changes them meanwhile).
async fn all_buyers(state: &AppState, sale: SaleItem) -> anyhow::Result<HashMap<i64, i64>> {
    let mut recorded = HashMap::new();
    let mut cursor = 0;
    loop {
        let (next, chunk) = ItemStateClient(&state.redis)
            .scan_buyers(sale, cursor)
            .await?;
        recorded.extend(chunk);
        if next == 0 {
            return Ok(recorded);
        }
        cursor = next;
    }
}

/// Buyers whose Redis record (`recorded`) differs from their holding: (buyer, Redis, DB).
pub(crate) fn buyer_differences(
    recorded: &HashMap<i64, i64>,
    holders: &[(i64, i64)],
) -> Vec<(i64, i64, i64)> {
    let held: HashMap<i64, i64> = holders.iter().copied().collect();
    let mut differences: Vec<(i64, i64, i64)> = recorded
        .iter()
        .filter(|(buyer, units)| held.get(buyer).copied().unwrap_or(0) != **units)
        .map(|(buyer, units)| (*buyer, *units, held.get(buyer).copied().unwrap_or(0)))
        .chain(
            held.iter()
                .filter(|(buyer, _)| !recorded.contains_key(buyer))
                .map(|(buyer, units)| (*buyer, 0, *units)),
        )
        .collect();
    differences.sort_unstable();
    differences
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buyer_differences_cover_both_directions() {
        let recorded = HashMap::from([(1, 1), (2, 2), (3, 1)]);
        let holders = [(1, 1), (2, 1), (4, 1)];
        assert_eq!(
            buyer_differences(&recorded, &holders),
            vec![(2, 2, 1), (3, 1, 0), (4, 0, 1)]
        );
        assert!(buyer_differences(&HashMap::from([(1, 1)]), &[(1, 1)]).is_empty());
    }
}
