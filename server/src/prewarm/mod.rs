//! Pre-warm: load an activity's stock and buyer records from PostgreSQL into Redis, add
//! its keys to the Bloom filter and load every Lua script. Idempotent: Redis is derived from the database every time,
//! never incremented.
//!
//! Allowed while the sale is open too (an activity that opened without a pre-warm, Redis
//! lost mid-sale): each item is re-derived behind the reconciliation fence
//! (`reconcile::fence`), so deductions in flight are committed or voided first and no unit
//! is handed out twice. The deduction hand-over and repairs use the same [`load`]. It holds
//! the activity's reconciliation lock throughout, so a pre-warm, the hand-over on every
//! instance and the leader's pass never re-derive one activity at once. Every key written
//! expires some time after the activity's end (`expiry`).

pub(crate) mod expiry;
pub(crate) mod routes;

use contract::Actor;
use contract::{PrewarmReport, PrewarmedItem};

use crate::{
    buy::bloom,
    catalog::store::{self as catalog, StoredActivity},
    error::{ApiError, ApiResult},
    reconcile::{
        fence,
        service::{ActivityLock, LOCK_WAIT},
        store as reconcile_store,
    },
    state::AppState,
};

pub(crate) async fn prewarm(
    state: &AppState,
    actor: &Actor,
    activity_id: i64,
) -> ApiResult<PrewarmReport> {
    crate::admin::authorize(actor, contract::Permission::Prewarm)?;
    let activity = catalog::get_activity(&state.db, activity_id, None)
        .await?
        .ok_or(ApiError::NotFound("activity"))?;
    let (items, bloom_bits_set) = load(state, &activity).await?;
    tracing::info!(activity_id, by = %actor.username, "pre-warmed");
    Ok(PrewarmReport {
        activity_id,
        items,
        bloom_bits_set,
    })
}

/// Loads the scripts, derives the activity's Redis state from PostgreSQL item by item behind
/// the fence (stock = total minus units allocated, buyer records, seat map) and adds its
/// keys to the Bloom filter. Returns what was loaded per item and the Bloom bits newly set.
pub(crate) async fn load(
    state: &AppState,
    activity: &StoredActivity,
) -> ApiResult<(Vec<PrewarmedItem>, i64)> {
    let activity_id = activity.id;
    state.redis.load_scripts().await?;
    let shape = state.funnel.catalogue.bloom();
    let mut bloom_bits_set = state
        .redis
        .bloom_add(&shape.positions(&bloom::activity_key(activity_id)))
        .await?;
    let lock = ActivityLock::wait(&state.db, activity_id, LOCK_WAIT)
        .await?
        .ok_or_else(|| {
            ApiError::Unavailable(anyhow::anyhow!(
                "another re-derivation of this activity is still running"
            ))
        })?;
    let mut items = Vec::with_capacity(activity.lines.len());
    for line in &activity.lines {
        let loaded = fence::rederive_item(state, &lock, activity, line.item_id)
            .await
            .map_err(ApiError::Unavailable)?;
        bloom_bits_set += state
            .redis
            .bloom_add(&shape.positions(&bloom::item_key(activity_id, line.item_id)))
            .await?;
        let total_stock = i64::from(line.total_stock);
        items.push(PrewarmedItem {
            item_id: line.item_id,
            total_stock,
            held_in_db: total_stock - loaded.stock_after,
            redis_stock: loaded.stock_after,
            buyers: loaded.buyers,
        });
    }
    lock.release().await;
    reconcile_store::mark_prewarmed(&state.db, activity_id).await?;
    state.funnel.catalogue.forget(activity_id);
    Ok((items, bloom_bits_set))
}
