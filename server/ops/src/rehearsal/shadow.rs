//! The shadow copy of an activity a rehearsal's load runs against, and its clean-up.
//!
//! The copy has the activity's items, stock, per-user limits, prices and pay timeout under
//! an id of its own, so every Redis key of it (under the `{a<shadow>.i<item>}` hash tags)
//! is its own too. It is born marked `rehearsal_of` the real activity and naming its
//! rehearsal (`rehearsal_id`), closed, in the transaction that records it on the rehearsal:
//! the buyer API shows and sells it to the rehearsal's synthetic buyers only. It is opened
//! once pre-warmed, until the time the rehearsal must be over (before the next start of any
//! real activity) or the clean-up, whichever comes first, and it is loaded into
//! Redis by the very pre-warm of a real sale (stock, buyer records, Bloom filter keys), so
//! the load goes through every stage of the funnel as a real buyer's buy would.
//!
//! What the clean-up removes, whatever became of the rehearsal: the shadow's orders with
//! their history, outbox rows, processed events, payment trades and restore journal, its
//! seats, item rows and buyer holdings, any reconciliation run of it, then the activity
//! row; and in Redis every key of its items (stock, buyer records, seats, markers, fence,
//! give-backs, item window) and every key its requests could have made (stored answers,
//! buyer and address windows, its buyers' event logs), named from the plan, not found by a scan, so it works on a
//! cluster too. It sets no etcd key: the shadow is open because its own entry switch
//! (`switches/entry/{id}`) is absent, as for any activity nobody closed.
//!
//! What it cannot remove: the shadow's bits in the Bloom filter (a bit may be shared with
//! a real key). They cost a few of the filter's bits per rehearsal, and a lookup of the
//! deleted shadow's id passes the filter and is answered by the null cache; a shadow that
//! skipped the filter would not exercise the funnel's Bloom stage, which is the point.

use chrono::{DateTime, Utc};
use contract::{ActivityId, SaleItem, UserId};
use sale::buy::stock_scripts::StockClient;
use std::time::Duration;

use crate::{
    prewarm,
    reconcile::service::ActivityLock,
    rehearsal::plan::{synthetic_buyer, PlannedBuy},
    state::AppState,
};
use base::{fault, redis::RedisStore};
use sale::{
    catalog::store::{self as catalog, StoredActivity},
    events::log::EventLog,
};

/// How long the clean-up waits for the leader's reconciliation pass to let go of the shadow.
const LOCK_WAIT: Duration = Duration::from_secs(30);
/// Keys deleted by one command (all of one item, so of one hash slot).
const DELETED_AT_ONCE: usize = 500;
/// Copies `activity` as rehearsal `rehearsal_id`'s shadow, pre-warms it and opens it until
/// `closes_at`. Returns the shadow as stored.
///
/// The copy is born marked (`rehearsal_of`, `rehearsal_id`), closed (its sale ended a
/// second before it was made) and recorded on the rehearsal, all by one transaction: an
/// instance dying at any point leaves either nothing or a closed copy the leader's clean-up
/// finds, never a sale of the same goods.
pub(crate) async fn open(
    state: &AppState,
    activity: &StoredActivity,
    rehearsal_id: i64,
    closes_at: DateTime<Utc>,
) -> anyhow::Result<StoredActivity> {
    let mut tx = state.db.begin().await?;
    let shadow: i64 = sqlx::query_scalar(
        "INSERT INTO activities (merchant_id, title, kind, starts_at, ends_at, pay_timeout_s,
                                 rehearsal_of, rehearsal_id)
         SELECT merchant_id, $2, kind, now() - interval '2 seconds', now() - interval '1 second',
                pay_timeout_s, id, $3
         FROM activities WHERE id = $1
         RETURNING id",
    )
    .bind(activity.id)
    .bind(shadow_title(rehearsal_id, &activity.title))
    .bind(rehearsal_id)
    .fetch_one(&mut *tx)
    .await?;
    for statement in [
        "INSERT INTO activity_items (activity_id, item_id, total_stock, per_user_limit, price_cents)
         SELECT $1, item_id, total_stock, per_user_limit, price_cents
         FROM activity_items WHERE activity_id = $2",
        "INSERT INTO seats (activity_id, seat_code)
         SELECT $1, seat_code FROM seats WHERE activity_id = $2",
    ] {
        sqlx::query(statement)
            .bind(shadow)
            .bind(activity.id)
            .execute(&mut *tx)
            .await?;
    }
    sqlx::query("UPDATE rehearsals SET shadow_activity_id = $2, updated_at = now() WHERE id = $1")
        .bind(rehearsal_id)
        .bind(shadow)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    fault::point("rehearsal.copy_created");
    let stored = catalog::get_activity(&state.db, shadow, None)
        .await?
        .ok_or_else(|| anyhow::anyhow!("the shadow copy {shadow} vanished"))?;
    prewarm::load(state, &stored)
        .await
        .map_err(|error| anyhow::anyhow!("pre-warming the shadow copy: {error}"))?;
    fault::point("rehearsal.copy_prewarmed");
    // Open only until the rehearsal must be over: even a copy nobody cleaned up can never
    // sell past that.
    sqlx::query("UPDATE activities SET ends_at = $2 WHERE id = $1 AND rehearsal_id IS NOT NULL")
        .bind(shadow)
        .bind(closes_at)
        .execute(&state.db)
        .await?;
    state.catalogue.forget(shadow);
    let stored = catalog::get_activity(&state.db, shadow, None)
        .await?
        .ok_or_else(|| anyhow::anyhow!("the shadow copy {shadow} vanished"))?;
    Ok(stored)
}

/// `Rehearsal 12 of <title>`, within the catalogue's title length.
fn shadow_title(rehearsal_id: i64, title: &str) -> String {
    let text = format!("Rehearsal {rehearsal_id} of {title}");
    text.chars()
        .take(sale::catalog::rules::MAX_NAME_LEN)
        .collect()
}

/// What the clean-up of one shadow needs: its id, its items, and every request its load
/// planned (from which the keys those requests could have made are named).
pub(crate) struct Leftovers<'a> {
    pub(crate) rehearsal_id: i64,
    pub(crate) shadow: i64,
    /// Item ids, hot first, as the plan indexes them.
    pub(crate) items: &'a [i64],
    pub(crate) sends: &'a [PlannedBuy],
    /// The address the server saw the load come from.
    pub(crate) client: &'a str,
}

/// Removes everything of the shadow from PostgreSQL and Redis (see the module's header).
pub(crate) async fn clean_up(state: &AppState, leftovers: &Leftovers<'_>) -> anyhow::Result<()> {
    let shadow = leftovers.shadow;
    // The leader's reconciliation pass would re-derive the keys being deleted.
    let lock = ActivityLock::wait(&state.db, shadow, LOCK_WAIT)
        .await?
        .ok_or_else(|| anyhow::anyhow!("the shadow {shadow} stayed locked by a reconciliation"))?;
    let removed = remove(state, leftovers).await;
    lock.release().await;
    state.catalogue.forget(shadow);
    removed
}

async fn remove(state: &AppState, leftovers: &Leftovers<'_>) -> anyhow::Result<()> {
    let shadow = leftovers.shadow;
    // Closed first: nothing sells it any more, and no pass of the leader lists it again.
    sqlx::query(
        "UPDATE activities SET starts_at = LEAST(starts_at, now() - interval '1 second'),
                               ends_at = LEAST(ends_at, now())
         WHERE id = $1 AND rehearsal_of IS NOT NULL",
    )
    .bind(shadow)
    .execute(&state.db)
    .await?;
    fault::point("rehearsal.cleanup_closed");
    // Redis before PostgreSQL: once its stock key is gone, a buy still on its way (its client
    // gave up on it) is refused by the buy script, and cannot deduct for a row deleted under it.
    for (index, &item) in leftovers.items.iter().enumerate() {
        let keys = item_keys(&state.redis, leftovers, index, item);
        for chunk in keys.chunks(DELETED_AT_ONCE) {
            ShadowClient(&state.redis).delete_keys(chunk).await?;
        }
    }
    for chunk in event_logs(&state.redis, leftovers).chunks(DELETED_AT_ONCE) {
        ShadowClient(&state.redis).delete_keys(chunk).await?;
    }
    fault::point("rehearsal.cleanup_keys_deleted");
    delete_rows(&state.db, shadow).await?;
    Ok(())
}

/// The shadow's rows, children first, in one transaction. Only an activity marked a
/// shadow is deleted, whatever id is passed.
async fn delete_rows(db: &sqlx::PgPool, shadow: i64) -> Result<(), sqlx::Error> {
    let mut tx = db.begin().await?;
    let is_shadow: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM activities WHERE id = $1 AND rehearsal_of IS NOT NULL)",
    )
    .bind(shadow)
    .fetch_one(&mut *tx)
    .await?;
    if !is_shadow {
        return Ok(());
    }
    let orders: Vec<uuid::Uuid> =
        sqlx::query_scalar("SELECT id FROM orders WHERE activity_id = $1")
            .bind(shadow)
            .fetch_all(&mut *tx)
            .await?;
    for statement in [
        "DELETE FROM order_events WHERE order_id = ANY($1)",
        "DELETE FROM payment_trades WHERE order_id = ANY($1)",
        "DELETE FROM stock_restore_journal WHERE order_id = ANY($1)",
        // A batch's outbox row holds one activity's orders only: the shadow's rows go whole,
        // and so do their events' records (kept by order before they were kept by row).
        "DELETE FROM processed_events WHERE event_id = ANY($1) OR event_id IN
             (SELECT outbox_event_id FROM orders WHERE id = ANY($1))",
        "DELETE FROM outbox WHERE event_id IN
             (SELECT COALESCE(outbox_event_id, id) FROM orders WHERE id = ANY($1))",
    ] {
        sqlx::query(statement)
            .bind(&orders)
            .execute(&mut *tx)
            .await?;
    }
    for statement in [
        "DELETE FROM seats WHERE activity_id = $1",
        "DELETE FROM orders WHERE activity_id = $1",
        "DELETE FROM buyer_holdings WHERE activity_id = $1",
        // Its items, reconciliation runs and sale page go with it.
        "DELETE FROM activities WHERE id = $1",
    ] {
        sqlx::query(statement)
            .bind(shadow)
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await
}

/// Every key item `index` of the shadow has or its requests could have made.
fn item_keys(
    redis: &RedisStore,
    leftovers: &Leftovers<'_>,
    index: usize,
    item: i64,
) -> Vec<String> {
    let sale = SaleItem::new(leftovers.shadow, item);
    let mut keys = vec![
        redis.stock_key(sale),
        redis.bought_key(sale),
        redis.seats_key(sale),
        redis.restored_key(sale),
        redis.pending_key(sale),
        redis.fence_key(sale),
        redis.holders_log_key(sale),
    ];
    let mut buyers_seen = std::collections::HashSet::new();
    for send in leftovers.sends.iter().filter(|send| send.item == index) {
        let buyer = synthetic_buyer(leftovers.rehearsal_id, send.buyer);
        keys.push(redis.request_key(sale, buyer, &send.request_id(leftovers.rehearsal_id)));
        if buyers_seen.insert(buyer) {
            let windows = StockClient(redis).window_keys(sale, buyer, leftovers.client);
            keys.extend(windows);
        }
    }
    keys.sort_unstable();
    keys.dedup();
    keys
}

/// The buyer event logs the load's orders could have made (one per synthetic buyer, all
/// under the shadow's hash tag).
fn event_logs(redis: &RedisStore, leftovers: &Leftovers<'_>) -> Vec<String> {
    let mut buyers: Vec<i64> = leftovers
        .sends
        .iter()
        .map(|send| synthetic_buyer(leftovers.rehearsal_id, send.buyer))
        .collect();
    buyers.sort_unstable();
    buyers.dedup();
    buyers
        .into_iter()
        .map(|buyer| EventLog::key_of(redis, ActivityId(leftovers.shadow), UserId(buyer)))
        .collect()
}

/// A typed client over the Redis connection for the clean-up of a rehearsal copy's keys: these scripts and keys are
/// reached only through it.
#[derive(Clone, Copy)]
pub struct ShadowClient<'a>(pub &'a RedisStore);

impl ShadowClient<'_> {
    /// Deletes `keys` in one command: they must share a hash slot on a cluster.
    async fn delete_keys(&self, keys: &[String]) -> redis::RedisResult<()> {
        if keys.is_empty() {
            return Ok(());
        }
        redis::cmd("DEL")
            .arg(keys)
            .query_async(&mut self.0.connection())
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shadow_titles_name_the_rehearsal_and_fit_the_catalogue() {
        assert_eq!(shadow_title(3, "Phone day"), "Rehearsal 3 of Phone day");
        let long = "x".repeat(sale::catalog::rules::MAX_NAME_LEN);
        assert_eq!(
            shadow_title(3, &long).chars().count(),
            sale::catalog::rules::MAX_NAME_LEN
        );
    }
}
