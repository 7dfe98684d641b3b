//! The fenced re-derivation of one item: how Redis is rebuilt from PostgreSQL while the
//! sale is live (a pre-warm, a repair, Redis lost) without selling a unit twice and without
//! giving back a unit an in-flight request is about to commit.
//!
//! 1. **Fence**: a key the stock scripts check; from the moment it is set no deduction of
//!    the item runs (buyers get 503 `DEGRADED` for that moment). It carries a TTL, so a run
//!    that dies cannot hold the sale.
//! 2. **Quiesce**: every deduction made before the fence left a marker. Each marker's
//!    pre-order either commits (it is then in `allocated`) or is voided
//!    (`settle::void_and_release`: once the void row exists the pre-order can never commit).
//!    The run waits a moment for markers to commit, then voids the rest. Afterwards no
//!    request can still take or commit a unit of the item.
//! 3. **Snapshot under the item row's lock**: `allocated`, the buyers' holdings, the seat
//!    map and the restore journal are read `FOR UPDATE` on the item row, which every
//!    transaction moving the item's stock takes (pre-order batches of the database path,
//!    cancels, failures), so none of them lands between the read and the write.
//! 4. **Write** the derived state in one MULTI (stock = total − allocated, buyer records =
//!    holdings, restore set = the journal's orders, no markers), commit, lower the fence.
//!    A cancel committed before the snapshot is in the restore set, so its retried
//!    give-back gives nothing; one committed after gives its units back as it should.

use std::{collections::HashMap, time::Duration};
use uuid::Uuid;

use contract::{SaleItem, UserId};

use crate::{
    buy::preorders,
    catalog::store::StoredActivity,
    reconcile::{
        redis_state::Derived,
        settle::{self, Deduction, Settled},
    },
    state::AppState,
};

/// How long a fence may hold an item if its run dies.
const FENCE_TTL_MS: u64 = 10_000;
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

/// Re-derives one item of `activity` from PostgreSQL behind the fence.
pub(crate) async fn rederive_item(
    state: &AppState,
    activity: &StoredActivity,
    item_id: i64,
) -> anyhow::Result<Rederived> {
    let sale = SaleItem::new(activity.id, item_id);
    let run = Uuid::new_v4().to_string();
    state.redis.raise_fence(sale, &run, FENCE_TTL_MS).await?;
    let rederived = fenced(state, activity, sale).await;
    if let Err(error) = state.redis.lower_fence(sale).await {
        tracing::warn!(error = %error, activity = activity.id, item = item_id, "could not lower the fence; it expires by itself");
    }
    rederived
}

async fn fenced(
    state: &AppState,
    activity: &StoredActivity,
    sale: SaleItem,
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
    let (before, _) = state.redis.item_counters(sale).await?;
    let recorded: HashMap<i64, i64> = all_buyers(state, sale).await?;
    let stock = i64::from(total - allocated);
    state
        .redis
        .rederive(
            sale,
            &Derived {
                stock,
                holders: &holders,
                seats: &seats,
                restored: &restored,
                expires_at: crate::prewarm::expiry::keys_expire_at(activity.ends_at),
            },
        )
        .await?;
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
        let (counters, _) = state.redis.item_counters(sale).await?;
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
        let (next, chunk) = state.redis.scan_buyers(sale, cursor).await?;
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
