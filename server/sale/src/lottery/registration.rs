//! Keeping a lottery's registration reachable. The buyer API looks an activity up in
//! PostgreSQL only when the Bloom filter says it may exist (a flood of made-up ids never
//! reaches the database), and an activity's keys enter the filter with its pre-warm. A
//! lottery's registration opens hours before its sale, long before anyone pre-warms it: with
//! the filter alone, every registration would be answered 404.
//!
//! So the leader, in its lottery pass, adds the keys of every lottery activity (and of its
//! items) from [`RegistrationReach::PREPARED_AHEAD_MS`] before its registration opens until
//! it closes. Adding a key is idempotent, so doing it every pass costs one Redis call per
//! activity and also puts back keys a Redis restart lost. Ops see whether it worked: the
//! draw report and readiness read the filter as the buyer API does ([`reachable`]).

use chrono::{DateTime, Utc};
use contract::RegistrationReach;

use crate::{
    buy::bloom::{self, BloomClient},
    lottery::store,
    SaleState,
};

/// The filter's keys of an activity and its items: the ones a registration and the sale
/// page's reads are checked against.
fn keys(activity_id: i64, item_ids: &[i64]) -> Vec<String> {
    std::iter::once(bloom::activity_key(activity_id))
        .chain(
            item_ids
                .iter()
                .map(|item| bloom::item_key(activity_id, *item)),
        )
        .collect()
}

/// The leader's step: the keys of every lottery whose registration opens soon or is open.
pub async fn prepare(state: &SaleState, now: DateTime<Utc>) -> anyhow::Result<()> {
    let horizon = now + chrono::Duration::milliseconds(RegistrationReach::PREPARED_AHEAD_MS);
    let shape = state.catalogue.bloom();
    for lottery in store::registering(&state.db, now, horizon).await? {
        let positions: Vec<u64> = keys(lottery.activity_id, &lottery.item_ids)
            .iter()
            .flat_map(|key| shape.positions(key))
            .collect();
        let added = BloomClient(&state.redis).bloom_add(&positions).await?;
        if added > 0 {
            // This instance may have remembered the id as missing a moment ago.
            state.catalogue.forget(lottery.activity_id);
            tracing::info!(
                activity = lottery.activity_id,
                items = lottery.item_ids.len(),
                "lottery registration made reachable on the buyer API"
            );
        }
    }
    Ok(())
}

/// Whether the buyer API finds lottery activity `activity_id` and its items `item_ids`: the
/// filter asked as the buyer API asks it.
pub async fn reachable(
    state: &SaleState,
    activity_id: i64,
    item_ids: &[i64],
) -> redis::RedisResult<bool> {
    let shape = state.catalogue.bloom();
    for key in keys(activity_id, item_ids) {
        if !BloomClient(&state.redis)
            .bloom_test(&shape.positions(&key))
            .await?
        {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Whether buyers can register for a lottery at `at_ms`, its window being
/// `opens_at..closes_at`.
pub async fn reach(
    state: &SaleState,
    activity_id: i64,
    item_ids: &[i64],
    (opens_at, closes_at): (DateTime<Utc>, DateTime<Utc>),
    at_ms: i64,
) -> redis::RedisResult<RegistrationReach> {
    Ok(RegistrationReach {
        opens_at,
        closes_at,
        at_ms,
        reachable: reachable(state, activity_id, item_ids).await?,
    })
}
