//! Holder sets: the buyers who hold units of an item, kept by each instance for the items
//! it refuses from memory (the sold-out flag, an ended or closed activity).
//!
//! A local refusal may only answer a buyer who cannot have won. A holder may be a winner
//! retrying a request whose answer he never got, so he is sent on to the stored answer of
//! his request id instead; everyone else is refused without touching Redis. A set is at
//! most the item's stock in size, refreshed once per `fresh_for` per item however many
//! requests ask, and dropped when nobody asked for a minute.
//!
//! A set joins two records. Redis's buyer records hold every buyer a Redis deduction
//! counted, committed or still on its way. PostgreSQL's holdings hold every buyer whose
//! pre-order committed, whichever layer deducted it: a winner on the database path, or one
//! from before a deduction switch flip, is found only there, since only the Redis
//! deduction writes buyer records. Every buyer answered 200 is in PostgreSQL's half.
//!
//! Each half comes with a version its store moves whenever the item may gain a holder there
//! (every Redis deduction, every allocation in PostgreSQL). A refresh reads the versions and
//! reads a half whole again only when its version moved: a sold-out item is refused for as
//! long as the storm lasts, and its holders, up to its whole stock, rarely change meanwhile.

use contract::SaleItem;
use prometheus::IntCounterVec;
use redis::AsyncCommands;
use sqlx::PgPool;
use std::{
    collections::{HashMap, HashSet},
    sync::{Arc, PoisonError, RwLock},
    time::{Duration, Instant},
};

use base::{quiet_log::quiet, redis::RedisStore};

/// How long a set nobody asked for is kept.
const IDLE: Duration = Duration::from_secs(60);

/// How long a refresh waits for PostgreSQL's half: every request refused from memory for
/// the item waits with it, so a slow database must not hold back the storm it is shielded
/// from.
const DB_PATIENCE: Duration = Duration::from_millis(250);

/// One store's half of a set: the holders it named, at the version it had then.
#[derive(Clone)]
struct Half {
    /// `None` when the store had none: nothing deducted there yet (Redis on the database
    /// path), or its data lost. A deduction sets one, and a version never comes back to a
    /// value it had, so a half read at none is current while there is still none.
    version: Option<i64>,
    holders: Arc<HashSet<i64>>,
}

impl Half {
    /// No holders, at no version.
    fn none() -> Self {
        Self {
            version: None,
            holders: Arc::default(),
        }
    }

    /// Whether the store still holds this half when its version reads `version`.
    fn current_at(&self, version: Option<i64>) -> bool {
        self.version == version
    }
}

/// An item's set: both halves, each refreshed on its own.
struct Holders {
    redis: Half,
    postgres: Half,
}

impl Holders {
    fn contains(&self, buyer: i64) -> bool {
        self.redis.holders.contains(&buyer) || self.postgres.holders.contains(&buyer)
    }
}

/// One item's set, and the lock that lets one request refresh it while the others wait.
#[derive(Default)]
struct Slot {
    loaded: RwLock<Option<(Instant, Arc<Holders>)>>,
    loading: tokio::sync::Mutex<()>,
}

impl Slot {
    fn fresh(&self, fresh_for: Duration) -> Option<Arc<Holders>> {
        let loaded = self.loaded.read().unwrap_or_else(PoisonError::into_inner);
        loaded
            .as_ref()
            .filter(|(at, _)| at.elapsed() < fresh_for)
            .map(|(_, set)| set.clone())
    }

    /// The set refreshed last, however old.
    fn last(&self) -> Option<Arc<Holders>> {
        let loaded = self.loaded.read().unwrap_or_else(PoisonError::into_inner);
        loaded.as_ref().map(|(_, set)| set.clone())
    }

    fn idle(&self) -> bool {
        let loaded = self.loaded.read().unwrap_or_else(PoisonError::into_inner);
        loaded.as_ref().is_some_and(|(at, _)| at.elapsed() > IDLE)
    }
}

/// How a refresh found one half, counted by store (`seckill_holder_set_refreshes_total`).
#[derive(Clone, Copy)]
enum Refresh {
    /// Its version had not moved: nothing more was read.
    Unchanged,
    /// Read whole: its version moved, or there was none.
    ReadWhole,
    /// PostgreSQL did not answer: the half read before stands in.
    KeptLast,
}

impl Refresh {
    fn label(self) -> &'static str {
        match self {
            Self::Unchanged => "unchanged",
            Self::ReadWhole => "read_whole",
            Self::KeptLast => "kept_last",
        }
    }
}

pub(crate) struct HolderSets {
    redis: RedisStore,
    db: PgPool,
    fresh_for: Duration,
    refreshes: IntCounterVec,
    slots: RwLock<HashMap<SaleItem, Arc<Slot>>>,
}

impl HolderSets {
    pub(crate) fn new(
        redis: RedisStore,
        db: PgPool,
        fresh_for: Duration,
        refreshes: IntCounterVec,
    ) -> Self {
        Self {
            redis,
            db,
            fresh_for,
            refreshes,
            slots: RwLock::default(),
        }
    }

    /// Whether `buyer` holds units of `sale`, as Redis and PostgreSQL had it at most
    /// `fresh_for` ago.
    pub(crate) async fn holds(&self, sale: SaleItem, buyer: i64) -> redis::RedisResult<bool> {
        let slot = self.slot(sale);
        if let Some(set) = slot.fresh(self.fresh_for) {
            return Ok(set.contains(buyer));
        }
        let _loading = match slot.loading.try_lock() {
            Ok(loading) => loading,
            // Another request is refreshing the set: the set before answers meanwhile, so
            // that a storm refused from memory never queues behind that read.
            Err(_) => match slot.last() {
                Some(set) => return Ok(set.contains(buyer)),
                None => slot.loading.lock().await,
            },
        };
        if let Some(set) = slot.fresh(self.fresh_for) {
            return Ok(set.contains(buyer));
        }
        let last = slot.last();
        let (redis, postgres) = tokio::join!(
            self.redis_half(sale, last.as_ref().map(|set| &set.redis)),
            self.postgres_half(sale, last.as_ref().map(|set| &set.postgres))
        );
        let set = Arc::new(Holders {
            redis: redis?,
            postgres,
        });
        let holds = set.contains(buyer);
        *slot.loaded.write().unwrap_or_else(PoisonError::into_inner) = Some((Instant::now(), set));
        Ok(holds)
    }

    /// Redis's half: `last` while the item's holders' version has not moved, else the
    /// buyer records read whole. The version is read first: a deduction between the two
    /// reads is in the records, and moves the version past the one kept with them, so the
    /// next refresh reads them again, which costs a read and misses nobody.
    async fn redis_half(&self, sale: SaleItem, last: Option<&Half>) -> redis::RedisResult<Half> {
        let mut redis = self.redis.connection();
        let version: Option<i64> = redis.get(self.redis.holders_version_key(sale)).await?;
        if let Some(last) = last.filter(|last| last.current_at(version)) {
            self.count("redis", Refresh::Unchanged);
            return Ok(last.clone());
        }
        let records: HashMap<i64, i64> = redis.hgetall(self.redis.bought_key(sale)).await?;
        self.count("redis", Refresh::ReadWhole);
        Ok(Half {
            version,
            holders: Arc::new(held(records)),
        })
    }

    /// PostgreSQL's half: `last` while the item row's holders' version has not moved, else
    /// the committed holdings read whole; `last` too when PostgreSQL does not answer within
    /// [`DB_PATIENCE`]. Refusing the whole item until PostgreSQL is back would turn a
    /// database outage into a storm of 503s: an item refused from memory gains holders
    /// rarely, and a holder too many is only sent to the lookup.
    async fn postgres_half(&self, sale: SaleItem, last: Option<&Half>) -> Half {
        let seen = last.and_then(|last| last.version);
        let read = tokio::time::timeout(DB_PATIENCE, committed_holders(&self.db, sale, seen))
            .await
            .map_err(|_| format!("no answer within {DB_PATIENCE:?}"))
            .and_then(|read| read.map_err(|error| error.to_string()));
        match read {
            // A version was asked about only when a half was read at it.
            Ok(Committed::Unchanged) => {
                self.count("postgres", Refresh::Unchanged);
                last.cloned().unwrap_or_else(Half::none)
            }
            Ok(Committed::Read { version, holders }) => {
                self.count("postgres", Refresh::ReadWhole);
                Half {
                    version,
                    holders: Arc::new(holders.into_iter().collect()),
                }
            }
            Err(error) => {
                quiet!(warn, "buy.holders", error = %error, "PostgreSQL's holders could not be read; keeping the ones read before");
                self.count("postgres", Refresh::KeptLast);
                last.cloned().unwrap_or_else(Half::none)
            }
        }
    }

    fn count(&self, store: &str, refresh: Refresh) {
        self.refreshes
            .with_label_values(&[store, refresh.label()])
            .inc();
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

/// What PostgreSQL said of an item's committed holders.
enum Committed {
    /// The item row's holders' version is still the one asked about.
    Unchanged,
    /// The holders, at the version read with them (`None`: the item has no row).
    Read {
        version: Option<i64>,
        holders: Vec<i64>,
    },
}

/// The buyers of an item's committed pre-orders who still hold units of it, unless the
/// item row's holders' version is still `seen`. One statement: the version and the
/// holdings come from one snapshot.
async fn committed_holders(
    db: &PgPool,
    sale: SaleItem,
    seen: Option<i64>,
) -> Result<Committed, sqlx::Error> {
    let row: Option<(i64, Option<Vec<i64>>)> = sqlx::query_as(
        "SELECT ai.holders_version,
                CASE WHEN ai.holders_version IS DISTINCT FROM $3 THEN ARRAY(
                    SELECT h.user_id FROM buyer_holdings h
                    WHERE h.activity_id = $1 AND h.item_id = $2 AND h.units > 0) END
         FROM activity_items ai
         WHERE ai.activity_id = $1 AND ai.item_id = $2",
    )
    .bind(sale.activity.0)
    .bind(sale.item.0)
    .bind(seen)
    .fetch_optional(db)
    .await?;
    Ok(match row {
        Some((_, None)) => Committed::Unchanged,
        Some((version, Some(holders))) => Committed::Read {
            version: Some(version),
            holders,
        },
        None => Committed::Read {
            version: None,
            holders: Vec::new(),
        },
    })
}

/// The buyers of an item's Redis records who hold at least one unit (a give-back leaves a
/// 0).
fn held(records: HashMap<i64, i64>) -> HashSet<i64> {
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
        assert_eq!(held(records), HashSet::from([1, 3]));
    }

    #[test]
    fn a_buyer_only_one_store_names_is_a_holder() {
        let half = |version, holders: &[i64]| Half {
            version,
            holders: Arc::new(holders.iter().copied().collect()),
        };
        let set = Holders {
            redis: half(Some(1), &[1]),
            postgres: half(Some(7), &[1, 4]),
        };
        assert!(set.contains(1) && set.contains(4));
        assert!(!set.contains(2));
    }

    #[test]
    fn a_half_is_current_only_at_the_version_it_was_read_at() {
        let read_at = |version| Half {
            version,
            ..Half::none()
        };
        assert!(read_at(Some(5)).current_at(Some(5)));
        assert!(!read_at(Some(5)).current_at(Some(6)));
        // The store lost its version (Redis's data gone): read whole.
        assert!(!read_at(Some(5)).current_at(None));
        // Still nothing deducted there (Redis on the database path): nothing to read again.
        assert!(read_at(None).current_at(None));
        // The first deduction there: read whole.
        assert!(!read_at(None).current_at(Some(5)));
    }
}
