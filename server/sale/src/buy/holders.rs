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
//! A refresh reads of each half only what changed since the refresh before: a sold-out item
//! is refused for as long as the storm lasts, its holders are up to its whole stock, and a
//! new one comes at a time (stock given back and sold again), so a read of every holder at
//! each new deduction would cost the shared stores most for the items they are shielded from.
//! Every Redis deduction appends its buyer and order id to the item's holders' log: the
//! Redis half reads the entries after the last one it read, which it finds again first. An
//! entry names its order, so a different one (or none) where it was means that Redis lost
//! or went back on its data, and the records are read whole again. PostgreSQL's half comes
//! with a version every allocation moves; when it moved, only the holdings that gained units
//! after the largest gain number read are read (an item's holdings are numbered in the order
//! their transactions commit, `migrations/20261206130000_holdings_gained.sql`).

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

/// One store's half of a set: the holders it named, and how far it had read them.
#[derive(Clone)]
struct Half<At> {
    at: At,
    holders: Arc<HashSet<i64>>,
}

impl<At: Default> Half<At> {
    /// No holders, nothing read.
    fn none() -> Self {
        Self {
            at: At::default(),
            holders: Arc::default(),
        }
    }
}

impl<At: Clone> Half<At> {
    /// This half with `added` holders, read up to `at`.
    fn with(&self, at: At, added: impl IntoIterator<Item = i64>) -> Self {
        let mut holders = HashSet::clone(&self.holders);
        holders.extend(added);
        Self {
            at,
            holders: Arc::new(holders),
        }
    }
}

/// How far a PostgreSQL half read the item's holdings.
#[derive(Clone, Copy, Debug, PartialEq)]
struct HoldingsAt {
    /// The item row's holders' version (`None`: the item had no row).
    version: Option<i64>,
    /// The largest gain number of the holdings read (0: none had one).
    gained: i64,
}

/// How far a Redis half read the item's holders' log.
#[derive(Clone, Debug, Default, PartialEq)]
struct LogAt {
    /// Entries read: the log's length then.
    read: usize,
    /// The last of them (`None` when there was none).
    last: Option<String>,
}

impl LogAt {
    /// Where a read of the log from its entry `read - 1` starts (from its first entry when
    /// nothing was read): the last entry read is read again to find it still there.
    fn from(&self) -> isize {
        isize::try_from(self.read.saturating_sub(1)).unwrap_or(isize::MAX)
    }

    /// The entries appended since this read, out of `entries` read from [`Self::from`];
    /// `None` when the last entry read is not where it was (Redis lost or went back on its
    /// data): the log no longer continues what was read.
    fn appended<'a>(&self, entries: &'a [String]) -> Option<&'a [String]> {
        match &self.last {
            None => Some(entries),
            Some(last) => match entries.split_first() {
                Some((first, appended)) if first == last => Some(appended),
                _ => None,
            },
        }
    }

    /// This read followed by `appended`.
    fn then(&self, appended: &[String]) -> Self {
        Self {
            read: self.read + appended.len(),
            last: appended.last().or(self.last.as_ref()).cloned(),
        }
    }
}

/// An item's set: both halves, each refreshed on its own.
struct Holders {
    redis: Half<LogAt>,
    /// `None` until PostgreSQL answered once.
    postgres: Half<Option<HoldingsAt>>,
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
    /// Nothing changed: nothing more was read.
    Unchanged,
    /// Only the holders added since the refresh before were read (Redis's log).
    ReadNew,
    /// Read whole: the first read, PostgreSQL's version moved, or Redis's log no longer
    /// continues what was read.
    ReadWhole,
    /// PostgreSQL did not answer: the half read before stands in.
    KeptLast,
}

impl Refresh {
    fn label(self) -> &'static str {
        match self {
            Self::Unchanged => "unchanged",
            Self::ReadNew => "read_new",
            Self::ReadWhole => "read_whole",
            Self::KeptLast => "kept_last",
        }
    }
}

pub struct HolderSets {
    redis: RedisStore,
    db: PgPool,
    fresh_for: Duration,
    refreshes: IntCounterVec,
    read: IntCounterVec,
    slots: RwLock<HashMap<SaleItem, Arc<Slot>>>,
}

impl HolderSets {
    pub fn new(
        redis: RedisStore,
        db: PgPool,
        fresh_for: Duration,
        refreshes: IntCounterVec,
        read: IntCounterVec,
    ) -> Self {
        Self {
            redis,
            db,
            fresh_for,
            refreshes,
            read,
            slots: RwLock::default(),
        }
    }

    /// Whether `buyer` holds units of `sale`, as Redis and PostgreSQL had it at most
    /// `fresh_for` ago.
    pub async fn holds(&self, sale: SaleItem, buyer: i64) -> redis::RedisResult<bool> {
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

    /// Redis's half: `last` with the buyers of the holders' log entries appended since it
    /// was read, else the buyer records read whole, after the log's length and last entry,
    /// so that the next refresh reads on from there. A buyer the log
    /// names who has since given his units back stays in the set until a whole read: he is
    /// only sent to the lookup of his request id.
    async fn redis_half(
        &self,
        sale: SaleItem,
        last: Option<&Half<LogAt>>,
    ) -> redis::RedisResult<Half<LogAt>> {
        let mut redis = self.redis.connection();
        let log = self.redis.holders_log_key(sale);
        if let Some(last) = last {
            let entries: Vec<String> = redis.lrange(&log, last.at.from(), -1).await?;
            if let Some(appended) = last.at.appended(&entries) {
                if appended.is_empty() {
                    self.count("redis", Refresh::Unchanged);
                    return Ok(last.clone());
                }
                self.count("redis", Refresh::ReadNew);
                self.read("redis", appended.len());
                return Ok(last.with(
                    last.at.then(appended),
                    appended.iter().filter_map(|entry| logged_buyer(entry)),
                ));
            }
        }
        // No MULTI (the buy path sends plain commands, which its call tally and Redis count
        // alike): the log's place is read before the records, so a deduction that lands in
        // between is in the records and is met again in the log next time (a holder named
        // twice), and one between the length and the last entry makes them disagree, which
        // the next refresh takes for a lost log and reads whole. Either way no holder is
        // missed. A whole read is rare (the first refresh of an item, or Redis's data lost),
        // so its three round trips do not matter.
        let read: usize = redis.llen(&log).await?;
        let last_entry: Option<String> = redis.lindex(&log, -1).await?;
        let records: HashMap<i64, i64> = redis.hgetall(self.redis.bought_key(sale)).await?;
        self.count("redis", Refresh::ReadWhole);
        self.read("redis", records.len());
        Ok(Half {
            at: LogAt {
                read,
                last: last_entry,
            },
            holders: Arc::new(held(records)),
        })
    }

    /// PostgreSQL's half: `last` while the item row's holders' version has not moved, else
    /// `last` with the holdings that gained units since (all of them at the first read);
    /// `last` too when PostgreSQL does not answer within [`DB_PATIENCE`]. Refusing the
    /// whole item until PostgreSQL is back would turn a database outage into a storm of
    /// 503s: an item refused from memory gains holders rarely, and a holder too many is
    /// only sent to the lookup.
    async fn postgres_half(
        &self,
        sale: SaleItem,
        last: Option<&Half<Option<HoldingsAt>>>,
    ) -> Half<Option<HoldingsAt>> {
        let seen = last.and_then(|last| last.at);
        let read = tokio::time::timeout(DB_PATIENCE, committed_holders(&self.db, sale, seen))
            .await
            .map_err(|_| format!("no answer within {DB_PATIENCE:?}"))
            .and_then(|read| read.map_err(|error| error.to_string()));
        let kept = || last.cloned().unwrap_or_else(Half::none);
        match read {
            Ok(Committed::Unchanged) => {
                self.count("postgres", Refresh::Unchanged);
                kept()
            }
            Ok(Committed::Read { at, holders }) => {
                self.read("postgres", holders.len());
                match last.filter(|last| last.at.is_some()) {
                    Some(last) => {
                        self.count("postgres", Refresh::ReadNew);
                        last.with(Some(at), holders)
                    }
                    None => {
                        self.count("postgres", Refresh::ReadWhole);
                        Half::none().with(Some(at), holders)
                    }
                }
            }
            Err(error) => {
                quiet!(warn, "buy.holders", error = %error, "PostgreSQL's holders could not be read; keeping the ones read before");
                self.count("postgres", Refresh::KeptLast);
                kept()
            }
        }
    }

    fn count(&self, store: &str, refresh: Refresh) {
        self.refreshes
            .with_label_values(&[store, refresh.label()])
            .inc();
    }

    /// Counts `entries` a refresh read of `store`'s holders (`seckill_holder_set_entries_read_total`).
    fn read(&self, store: &str, entries: usize) {
        self.read
            .with_label_values(&[store])
            .inc_by(u64::try_from(entries).unwrap_or(u64::MAX));
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
    /// The holders read, and how far.
    Read { at: HoldingsAt, holders: Vec<i64> },
}

/// The statement of [`committed_holders`]: `$moved`, whether the holdings are read;
/// `$rows`, which of them. The version and the holdings come from one snapshot.
macro_rules! committed_holders_statement {
    ($moved:literal, $rows:literal) => {
        concat!(
            "WITH item AS (
                 SELECT ai.holders_version AS version, ",
            $moved,
            " AS moved
                 FROM activity_items ai
                 WHERE ai.activity_id = $1 AND ai.item_id = $2
             ), read AS (
                 SELECT h.user_id, h.units, h.gained
                 FROM buyer_holdings h, item
                 WHERE item.moved AND h.activity_id = $1 AND h.item_id = $2",
            $rows,
            "
             )
             SELECT item.version, item.moved,
                    ARRAY(SELECT read.user_id FROM read WHERE read.units > 0),
                    (SELECT max(read.gained) FROM read)
             FROM item"
        )
    };
}

/// Every holding of the item.
const EVERY_HOLDING: &str = committed_holders_statement!("TRUE", "");

/// The holdings that gained units after number `$4`, if the version moved from `$3`.
const HOLDINGS_GAINED: &str = committed_holders_statement!(
    "ai.holders_version IS DISTINCT FROM $3",
    " AND h.gained > $4"
);

/// The buyers of an item's committed pre-orders who still hold units of it: all of them
/// when nothing was `seen` before, else those whose holding gained units since, unless the
/// item row's holders' version is still the one seen.
async fn committed_holders(
    db: &PgPool,
    sale: SaleItem,
    seen: Option<HoldingsAt>,
) -> Result<Committed, sqlx::Error> {
    let query = match seen {
        None => sqlx::query_as(EVERY_HOLDING)
            .bind(sale.activity.0)
            .bind(sale.item.0),
        Some(seen) => sqlx::query_as(HOLDINGS_GAINED)
            .bind(sale.activity.0)
            .bind(sale.item.0)
            .bind(seen.version)
            .bind(seen.gained),
    };
    let row: Option<(i64, bool, Vec<i64>, Option<i64>)> = query.fetch_optional(db).await?;
    let gained_before = seen.map_or(0, |seen| seen.gained);
    Ok(match row {
        Some((_, false, _, _)) => Committed::Unchanged,
        None if seen.is_some_and(|seen| seen.version.is_none()) => Committed::Unchanged,
        Some((version, true, holders, gained)) => Committed::Read {
            at: HoldingsAt {
                version: Some(version),
                gained: gained.unwrap_or(gained_before).max(gained_before),
            },
            holders,
        },
        None => Committed::Read {
            at: HoldingsAt {
                version: None,
                gained: gained_before,
            },
            holders: Vec::new(),
        },
    })
}

/// The buyer of a holders' log entry (`<buyer> <order id>`, `lua/buy.lua`).
fn logged_buyer(entry: &str) -> Option<i64> {
    entry.split_once(' ')?.0.parse().ok()
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
        let set = Holders {
            redis: Half {
                at: LogAt::default(),
                holders: Arc::new(HashSet::from([1])),
            },
            postgres: Half {
                at: None,
                holders: Arc::new(HashSet::from([1, 4])),
            },
        };
        assert!(set.contains(1) && set.contains(4));
        assert!(!set.contains(2));
    }

    fn entries(entries: &[&str]) -> Vec<String> {
        entries.iter().map(|entry| (*entry).to_owned()).collect()
    }

    #[test]
    fn a_log_read_goes_on_from_its_last_entry_found_where_it_was() {
        let at = LogAt {
            read: 2,
            last: Some("7 o2".to_owned()),
        };
        assert_eq!(at.from(), 1, "the last entry is read again");
        let read = entries(&["7 o2", "9 o3", "4 o4"]);
        let appended = at.appended(&read).expect("continues");
        assert_eq!(appended, &read[1..]);
        assert_eq!(
            at.then(appended),
            LogAt {
                read: 4,
                last: Some("4 o4".to_owned()),
            }
        );
        assert_eq!(at.appended(&read[..1]), Some(&[][..]), "nothing new");
        assert_eq!(at.then(&[]), at);
    }

    #[test]
    fn a_log_that_does_not_continue_the_last_read_is_not_read_on() {
        let at = LogAt {
            read: 2,
            last: Some("7 o2".to_owned()),
        };
        // Redis lost its data: the log is gone, or shorter.
        assert_eq!(at.appended(&[]), None);
        // Redis went back to a copy from before, and other deductions came since.
        assert_eq!(at.appended(&entries(&["8 o5", "9 o6"])), None);
    }

    #[test]
    fn a_log_read_empty_is_read_on_from_its_first_entry() {
        let at = LogAt::default();
        assert_eq!(at.from(), 0);
        let read = entries(&["3 o1"]);
        assert_eq!(at.appended(&read), Some(&read[..]));
    }

    #[test]
    fn a_log_entry_names_its_buyer() {
        assert_eq!(
            logged_buyer("42 0b7d9c52-7e1f-4c3a-9d55-3d1a9f1e0c11"),
            Some(42)
        );
        assert_eq!(logged_buyer("42"), None);
    }
}
