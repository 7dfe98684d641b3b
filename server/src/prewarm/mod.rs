//! Pre-warm: load an activity's stock and buyer records from PostgreSQL into
//! Redis and add its keys to the Bloom filter. Idempotent: Redis is derived from the
//! database every time, never incremented.
//!
//! Refused while the sale is open: then Redis holds deductions whose pre-orders may not be
//! committed yet, and re-deriving would hand their stock out twice. Re-deriving during a
//! live sale is the deduction hand-over's job (`buy::deduction`), which uses [`load`].

mod load;
pub(crate) mod routes;

use contract::Actor;
use contract::{ActivityKind, PrewarmReport, PrewarmedItem, SaleItem};

use crate::{
    buy::{
        bloom, preorders,
        rules::{phase, Phase},
    },
    catalog::store::{self as catalog, StoredActivity},
    error::{ApiError, ApiResult},
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
    if phase(
        activity.starts_at,
        activity.ends_at,
        chrono::Utc::now(),
        true,
    ) == Phase::Open
    {
        return Err(ApiError::Conflict {
            code: "ACTIVITY_LIVE",
            message: "the sale is open; pre-warm before it starts".into(),
        });
    }
    let (items, bloom_bits_set) = load(state, &activity).await?;
    tracing::info!(activity_id, by = %actor.username, "pre-warmed");
    Ok(PrewarmReport {
        activity_id,
        items,
        bloom_bits_set,
    })
}

/// Derives the activity's Redis state from PostgreSQL (stock = total minus units held by
/// orders, buyer records, seat map) and adds its keys to the Bloom filter. Returns what was
/// loaded per item and the Bloom bits newly set.
pub(crate) async fn load(
    state: &AppState,
    activity: &StoredActivity,
) -> ApiResult<(Vec<PrewarmedItem>, i64)> {
    let activity_id = activity.id;
    let shape = state.funnel.catalogue.bloom();
    let mut bloom_bits_set = state
        .redis
        .bloom_add(&shape.positions(&bloom::activity_key(activity_id)))
        .await?;
    let seats = if activity.kind == ActivityKind::Seated {
        preorders::seat_holders(&state.db, activity_id).await?
    } else {
        Vec::new()
    };
    let mut items = Vec::with_capacity(activity.lines.len());
    for line in &activity.lines {
        let holders = preorders::holders(&state.db, activity_id, line.item_id).await?;
        let held_in_db: i64 = holders.iter().map(|(_, units)| units).sum();
        let total_stock = i64::from(line.total_stock);
        let redis_stock = (total_stock - held_in_db).max(0);
        state
            .redis
            .load_item(
                SaleItem::new(activity_id, line.item_id),
                redis_stock,
                &holders,
                &seats,
            )
            .await?;
        bloom_bits_set += state
            .redis
            .bloom_add(&shape.positions(&bloom::item_key(activity_id, line.item_id)))
            .await?;
        items.push(PrewarmedItem {
            item_id: line.item_id,
            total_stock,
            held_in_db,
            redis_stock,
            buyers: holders.len() as u64,
        });
    }
    state.funnel.catalogue.forget(activity_id);
    Ok((items, bloom_bits_set))
}
