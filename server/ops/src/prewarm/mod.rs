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
//! expires some time after the activity's end (`sale::catalog::expiry`).

pub mod handover;
pub(crate) mod routes;

use contract::{Actor, PrewarmReport, PrewarmedItem, Source};
use sale::buy::bloom::BloomClient;
use serde_json::json;

use crate::{
    reconcile::{
        fence,
        service::{ActivityLock, LOCK_WAIT},
        store as reconcile_store,
    },
    state::AppState,
};
use base::error::{ApiError, ApiResult};
use sale::{
    audit::ops_audit::{self, OpsAction},
    buy::bloom,
    catalog::copies,
    catalog::store::StoredActivity,
};

/// An operator's pre-warm of an activity, audited (`activity.prewarm` in the audit log,
/// with what it loaded, or why it failed): it rewrites what buyers are sold from, so who
/// did it and when is what an operator asks first when a sale misbehaves.
pub async fn prewarm(
    state: &AppState,
    actor: &Actor,
    source: Source,
    activity_id: i64,
) -> ApiResult<PrewarmReport> {
    sale::identity::authorize(actor, contract::Permission::Prewarm)?;
    let activity = copies::real_activity(&state.db, activity_id, None).await?;
    let loaded = load(state, &activity).await;
    let detail = match &loaded {
        Ok((items, bloom_bits_set)) => json!({
            "outcome": "loaded",
            "items": items.len(),
            "redis_stock": items.iter().map(|item| item.redis_stock).sum::<i64>(),
            "bloom_bits_set": bloom_bits_set,
        }),
        Err(error) => json!({ "outcome": "failed", "error": error.to_string() }),
    };
    ops_audit::record(
        &state.db,
        &OpsAction {
            actor: &actor.username,
            source,
            action: "activity.prewarm",
            target: &format!("activity:{activity_id}"),
            detail,
        },
    )
    .await?;
    let (items, bloom_bits_set) = loaded?;
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
    let shape = state.catalogue.bloom();
    let mut bloom_bits_set = BloomClient(&state.redis)
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
        bloom_bits_set += BloomClient(&state.redis)
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
    state.catalogue.forget(activity_id);
    Ok((items, bloom_bits_set))
}
