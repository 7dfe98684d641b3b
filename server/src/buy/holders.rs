//! Holder sets: the buyers who hold units of an item, as Redis's buyer records have them,
//! kept by each instance for the items it refuses from memory (the sold-out flag, an ended
//! or closed activity).
//!
//! A local refusal may only answer a buyer who cannot have won. A holder may be a winner
//! retrying a request whose answer he never got, so he is sent on to the stored answer of
//! his request id instead; everyone else is refused without touching Redis. A set is at
//! most the item's stock in size, loaded once per `fresh_for` per item however many
//! requests ask, and dropped when nobody asked for a minute.

use contract::SaleItem;
use redis::AsyncCommands;
use std::{
    collections::{HashMap, HashSet},
    sync::{Arc, PoisonError, RwLock},
    time::{Duration, Instant},
};

use crate::infra::redis::RedisStore;

/// How long a set nobody asked for is kept.
const IDLE: Duration = Duration::from_secs(60);

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

    fn idle(&self) -> bool {
        let loaded = self.loaded.read().unwrap_or_else(PoisonError::into_inner);
        loaded.as_ref().is_some_and(|(at, _)| at.elapsed() > IDLE)
    }
}

pub(crate) struct HolderSets {
    redis: RedisStore,
    fresh_for: Duration,
    slots: RwLock<HashMap<SaleItem, Arc<Slot>>>,
}

impl HolderSets {
    pub(crate) fn new(redis: RedisStore, fresh_for: Duration) -> Self {
        Self {
            redis,
            fresh_for,
            slots: RwLock::default(),
        }
    }

    /// Whether `buyer` holds units of `sale`, as Redis had it at most `fresh_for` ago.
    pub(crate) async fn holds(&self, sale: SaleItem, buyer: i64) -> redis::RedisResult<bool> {
        let slot = self.slot(sale);
        if let Some(set) = slot.fresh(self.fresh_for) {
            return Ok(set.contains(&buyer));
        }
        let _loading = slot.loading.lock().await;
        if let Some(set) = slot.fresh(self.fresh_for) {
            return Ok(set.contains(&buyer));
        }
        let records: HashMap<i64, i64> = self
            .redis
            .connection()
            .hgetall(self.redis.bought_key(sale))
            .await?;
        let set: Arc<HashSet<i64>> = Arc::new(holders(records));
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

/// The buyers of an item's records who hold at least one unit (a give-back leaves a 0).
fn holders(records: HashMap<i64, i64>) -> HashSet<i64> {
    records
        .into_iter()
        .filter(|(_, units)| *units > 0)
        .map(|(buyer, _)| buyer)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buyer_whose_units_were_given_back_holds_nothing() {
        let records = HashMap::from([(1, 2), (2, 0), (3, 1)]);
        assert_eq!(holders(records), HashSet::from([1, 3]));
    }
}
