//! Holder sets: the buyers who hold units of an item, kept by each instance for the items
//! it refuses from memory (the sold-out flag, an ended or closed activity).
//!
//! A local refusal may only answer a buyer who cannot have won. A holder may be a winner
//! retrying a request whose answer he never got, so he is sent on to the stored answer of
//! his request id instead; everyone else is refused without touching Redis. A set is at
//! most the item's stock in size, loaded once per `fresh_for` per item however many
//! requests ask, and dropped when nobody asked for a minute.
//!
//! A set joins two records. Redis's buyer records hold every buyer a Redis deduction
//! counted, committed or still on its way. PostgreSQL's holdings hold every buyer whose
//! pre-order committed, whichever layer deducted it: a winner on the database path, or one
//! from before a deduction switch flip, is found only there, since only the Redis
//! deduction writes buyer records. Every buyer answered 200 is in PostgreSQL's half.

use contract::SaleItem;
use redis::AsyncCommands;
use sqlx::PgPool;
use std::{
    collections::{HashMap, HashSet},
    sync::{Arc, PoisonError, RwLock},
    time::{Duration, Instant},
};

use crate::infra::{quiet_log::quiet, redis::RedisStore};

/// How long a set nobody asked for is kept.
const IDLE: Duration = Duration::from_secs(60);

/// How long a load waits for PostgreSQL's half: every request refused from memory for the
/// item waits with it, so a slow database must not hold back the storm it is shielded from.
const DB_PATIENCE: Duration = Duration::from_millis(250);

/// One item's set, and the lock that lets one request load it while the others wait.
#[derive(Default)]
struct Slot {
    loaded: RwLock<Option<(Instant, Arc<HashSet<i64>>)>>,
    loading: tokio::sync::Mutex<()>,
}

impl Slot {
    fn fresh(&self, fresh_for: Duration) -> Option<Arc<HashSet<i64>>> {
        let loaded = self.loaded.read().unwrap_or_else(PoisonError::into_inner);
        loaded
            .as_ref()
            .filter(|(at, _)| at.elapsed() < fresh_for)
            .map(|(_, set)| set.clone())
    }

    /// The set loaded last, however old.
    fn last(&self) -> Option<Arc<HashSet<i64>>> {
        let loaded = self.loaded.read().unwrap_or_else(PoisonError::into_inner);
        loaded.as_ref().map(|(_, set)| set.clone())
    }

    fn idle(&self) -> bool {
        let loaded = self.loaded.read().unwrap_or_else(PoisonError::into_inner);
        loaded.as_ref().is_some_and(|(at, _)| at.elapsed() > IDLE)
    }
}

pub(crate) struct HolderSets {
    redis: RedisStore,
    db: PgPool,
    fresh_for: Duration,
    slots: RwLock<HashMap<SaleItem, Arc<Slot>>>,
}

impl HolderSets {
    pub(crate) fn new(redis: RedisStore, db: PgPool, fresh_for: Duration) -> Self {
        Self {
            redis,
            db,
            fresh_for,
            slots: RwLock::default(),
        }
    }

    /// Whether `buyer` holds units of `sale`, as Redis and PostgreSQL had it at most
    /// `fresh_for` ago.
    pub(crate) async fn holds(&self, sale: SaleItem, buyer: i64) -> redis::RedisResult<bool> {
        let slot = self.slot(sale);
        if let Some(set) = slot.fresh(self.fresh_for) {
            return Ok(set.contains(&buyer));
        }
        let _loading = match slot.loading.try_lock() {
            Ok(loading) => loading,
            // Another request is reading the set again: the set before answers meanwhile,
            // so that a storm refused from memory never queues behind that read.
            Err(_) => match slot.last() {
                Some(set) => return Ok(set.contains(&buyer)),
                None => slot.loading.lock().await,
            },
        };
        if let Some(set) = slot.fresh(self.fresh_for) {
            return Ok(set.contains(&buyer));
        }
        let mut redis = self.redis.connection();
        let (records, committed) = tokio::join!(
            redis.hgetall::<_, HashMap<i64, i64>>(self.redis.bought_key(sale)),
            tokio::time::timeout(DB_PATIENCE, committed_holders(&self.db, sale))
        );
        let committed = committed
            .map_err(|_| format!("no answer within {DB_PATIENCE:?}"))
            .and_then(|read| read.map_err(|error| error.to_string()));
        let committed = committed.unwrap_or_else(|error| {
            // Refusing the whole item until PostgreSQL is back would turn a database outage
            // into a storm of 503s. The set before this one stands in for PostgreSQL's half:
            // an item refused from memory gains holders rarely, and a holder too many is
            // only sent to the lookup.
            quiet!(warn, "buy.holders", error = %error, "PostgreSQL's holders could not be read; keeping the ones read before");
            slot.last().map(|set| set.iter().copied().collect()).unwrap_or_default()
        });
        let set: Arc<HashSet<i64>> = Arc::new(holders(records?, committed));
        let holds = set.contains(&buyer);
        *slot.loaded.write().unwrap_or_else(PoisonError::into_inner) = Some((Instant::now(), set));
        Ok(holds)
    }

    fn slot(&self, sale: SaleItem) -> Arc<Slot> {
        if let Some(slot) = self
            .slots
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&sale)
        {
            return slot.clone();
        }
        let mut slots = self.slots.write().unwrap_or_else(PoisonError::into_inner);
        slots.retain(|_, slot| !slot.idle());
        slots.entry(sale).or_default().clone()
    }
}

/// The buyers of an item's committed pre-orders who still hold units of it.
async fn committed_holders(db: &PgPool, sale: SaleItem) -> Result<Vec<i64>, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT user_id FROM buyer_holdings WHERE activity_id = $1 AND item_id = $2 AND units > 0",
    )
    .bind(sale.activity.0)
    .bind(sale.item.0)
    .fetch_all(db)
    .await
}

/// The buyers of an item's Redis records who hold at least one unit (a give-back leaves a
/// 0), and those PostgreSQL has.
fn holders(records: HashMap<i64, i64>, committed: Vec<i64>) -> HashSet<i64> {
    records
        .into_iter()
        .filter(|(_, units)| *units > 0)
        .map(|(buyer, _)| buyer)
        .chain(committed)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buyer_whose_units_were_given_back_holds_nothing() {
        let records = HashMap::from([(1, 2), (2, 0), (3, 1)]);
        assert_eq!(holders(records, Vec::new()), HashSet::from([1, 3]));
    }

    #[test]
    fn a_buyer_only_postgresql_has_is_a_holder() {
        let records = HashMap::from([(1, 1)]);
        assert_eq!(holders(records, vec![1, 4]), HashSet::from([1, 4]));
    }
}
