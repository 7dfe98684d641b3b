//! What the buy path knows about activities without asking anyone: a short-lived copy of
//! each activity in memory, a null cache for ids that do not exist, and the local
//! sold-out flags (funnel stages 4–6 in docs/buyer-api.md).
//!
//! A miss of an id without a copy is let through to PostgreSQL only if the Bloom filter in
//! Redis says the id may exist, so a flood of made-up ids never reaches the database; an
//! expired copy is read again without asking it (the id is known).
//!
//! Lookups that miss the same activity at once share one read of it: when a copy expires
//! under a flood, each request would otherwise send its own.
//!
//! An activity with an item under a `cache` hot key is served from memory past its
//! lifetime, refreshed in the background (one refresh at a time per activity), and so is
//! its items' stock for `/status`: a hot item's readers cost no I/O at all. While
//! PostgreSQL cannot be read, every activity is served from its last copy (up to ten
//! minutes old), so a database restart does not refuse the sale.

use crate::buy::bloom::BloomClient;
use chrono::{DateTime, Utc};
use contract::ActivityKind;
use futures::future::{BoxFuture, FutureExt, Shared};
use sqlx::PgPool;
use std::{
    collections::{HashMap, HashSet},
    sync::{Arc, Mutex, PoisonError, RwLock},
    time::{Duration, Instant},
};

use crate::{
    buy::{
        bloom::{self, BloomShape},
        hot_keys::HotKeyGate,
        rules,
    },
    catalog::store as catalog,
};
use base::{config::BuySettings, quiet_log::quiet, redis::RedisStore};

/// How old a hot item's stock for `/status` may be before a background refresh.
const STOCK_MEMO: Duration = Duration::from_millis(100);
/// How old a copy may be to be served while PostgreSQL cannot be read.
const STALE_WHILE_DATABASE_AWAY: Duration = Duration::from_secs(600);
/// How long a reload may take before a copy within that age is served instead.
const STALE_PATIENCE: Duration = Duration::from_millis(250);

/// An activity as the buy path needs it.
#[derive(Debug)]
pub struct CachedActivity {
    pub id: i64,
    pub title: String,
    pub kind: ActivityKind,
    pub starts_at: DateTime<Utc>,
    pub ends_at: DateTime<Utc>,
    pub items: Vec<CachedItem>,
    /// Set on a rehearsal's shadow copy: the activity it copies.
    pub rehearsal_of: Option<i64>,
    /// A lottery's terms and its draw's commitment (and seed, once drawn); `None`: first come.
    pub lottery: Option<catalog::StoredLottery>,
    loaded_at: Instant,
}

#[derive(Debug)]
pub struct CachedItem {
    pub item_id: i64,
    pub name: String,
    pub price_cents: i64,
    pub per_user_limit: i64,
    pub total_stock: i64,
    /// Units PostgreSQL had not allocated to pre-orders when the copy was read. With the
    /// deduction on `db` this is the stock; Redis's stock key is not moved then.
    pub units_left: i64,
}

impl CachedActivity {
    pub fn item(&self, item_id: i64) -> Option<&CachedItem> {
        self.items.iter().find(|item| item.item_id == item_id)
    }

    /// Whether the buyer API shows and sells it to a caller whose token names
    /// `caller_rehearsal` (`None`: a buyer, or no token).
    pub fn shown_to(&self, caller_rehearsal: Option<i64>) -> bool {
        rules::shown_to(self.id, self.rehearsal_of, caller_rehearsal)
    }
}

/// Why an activity could not be produced.
#[derive(Debug, thiserror::Error)]
pub enum LookupError {
    #[error("no such activity")]
    Missing,
    #[error(transparent)]
    Redis(#[from] redis::RedisError),
    /// Shared by every lookup that waited for the same load.
    #[error(transparent)]
    Database(#[from] Arc<sqlx::Error>),
}

type Expiries<K> = RwLock<HashMap<K, Instant>>;

type Activities = Arc<RwLock<HashMap<i64, Arc<CachedActivity>>>>;
/// A read of one activity from PostgreSQL, awaited by every lookup that missed it meanwhile.
type Load = Shared<BoxFuture<'static, Result<Option<Arc<CachedActivity>>, Arc<sqlx::Error>>>>;
type Loads = Arc<Mutex<HashMap<i64, Load>>>;
/// Per activity, its items' Redis stock in item order, and when it was read.
type StockMemos = Arc<RwLock<HashMap<i64, (Arc<Vec<Option<i64>>>, Instant)>>>;

pub struct Catalogue {
    db: PgPool,
    redis: RedisStore,
    bloom: BloomShape,
    activities: Activities,
    /// Reads in flight, by activity. When a copy expires under a flood, every request that
    /// misses it joins the one read instead of sending its own: each would otherwise hold a
    /// connection of the pool the pre-order batches need, and the slower the database, the
    /// more requests miss while it answers.
    loads: Loads,
    /// Counts the reads sent.
    reads: prometheus::IntCounter,
    /// Hot activities whose stock is being refreshed in the background.
    refreshing: Arc<Mutex<HashSet<i64>>>,
    stock: StockMemos,
    hotkeys: Arc<dyn HotKeyGate>,
    missing: Expiries<i64>,
    sold_out: Expiries<(i64, i64)>,
    activity_ttl: Duration,
    null_ttl: Duration,
    sold_out_ttl: Duration,
}

fn still_flagged<K: std::hash::Hash + Eq>(map: &Expiries<K>, key: &K) -> bool {
    map.read()
        .map(|flags| flags.get(key).is_some_and(|until| *until > Instant::now()))
        .unwrap_or(false)
}

fn flag<K: std::hash::Hash + Eq>(map: &Expiries<K>, key: K, ttl: Duration) {
    if let Ok(mut flags) = map.write() {
        let now = Instant::now();
        flags.retain(|_, until| *until > now);
        flags.insert(key, now + ttl);
    }
}

/// Forgets that a stock refresh runs, however it ends.
struct Refreshing(Arc<Mutex<HashSet<i64>>>, i64);

impl Drop for Refreshing {
    fn drop(&mut self) {
        if let Ok(mut running) = self.0.lock() {
            running.remove(&self.1);
        }
    }
}

/// Reads an activity from PostgreSQL into its cached form.
async fn load(db: &PgPool, id: i64) -> Result<Option<CachedActivity>, sqlx::Error> {
    let Some(stored) = catalog::get_activity(db, id, None).await? else {
        return Ok(None);
    };
    Ok(Some(CachedActivity {
        id: stored.id,
        title: stored.title,
        kind: stored.kind,
        starts_at: stored.starts_at,
        ends_at: stored.ends_at,
        rehearsal_of: stored.rehearsal_of,
        lottery: stored.lottery,
        items: stored
            .lines
            .into_iter()
            .map(|line| CachedItem {
                item_id: line.item_id,
                name: line.name,
                price_cents: line.price_cents,
                per_user_limit: line.per_user_limit.into(),
                total_stock: line.total_stock.into(),
                units_left: i64::from(line.total_stock) - i64::from(line.allocated),
            })
            .collect(),
        loaded_at: Instant::now(),
    }))
}

impl Catalogue {
    pub fn new(
        db: PgPool,
        redis: RedisStore,
        settings: &BuySettings,
        hotkeys: Arc<dyn HotKeyGate>,
        reads: prometheus::IntCounter,
    ) -> Self {
        Self {
            db,
            reads,
            redis,
            refreshing: Arc::default(),
            stock: Arc::default(),
            hotkeys,
            bloom: BloomShape::for_capacity(
                settings.bloom_capacity,
                settings.bloom_false_positive_rate,
            ),
            activities: Arc::default(),
            loads: Arc::default(),
            missing: RwLock::default(),
            sold_out: RwLock::default(),
            activity_ttl: Duration::from_millis(settings.activity_cache_ms),
            null_ttl: Duration::from_millis(settings.null_cache_ms),
            sold_out_ttl: Duration::from_millis(settings.sold_out_flag_ms),
        }
    }

    pub fn bloom(&self) -> BloomShape {
        self.bloom
    }

    /// The activity (public pages, status): from memory, else through the Bloom filter on
    /// the activity key.
    pub async fn activity(&self, id: i64) -> Result<Arc<CachedActivity>, LookupError> {
        self.lookup(id, || bloom::activity_key(id)).await
    }

    /// The activity a buy names, guarded on a miss by the Bloom filter on the item key, so
    /// made-up item ids of a real activity are stopped as cheaply as made-up activities
    /// (with a copy in memory, by the copy's item list).
    pub async fn activity_for_item(
        &self,
        id: i64,
        item_id: i64,
    ) -> Result<Arc<CachedActivity>, LookupError> {
        self.lookup(id, || bloom::item_key(id, item_id)).await
    }

    /// From memory; on a miss, through the Bloom filter and the null cache to PostgreSQL.
    async fn lookup(
        &self,
        id: i64,
        bloom_key: impl FnOnce() -> String,
    ) -> Result<Arc<CachedActivity>, LookupError> {
        if let Some(cached) = self.cached(id) {
            return Ok(cached);
        }
        if let Some(hot) = self.stale_but_hot(id) {
            self.hotkeys.served_from_cache();
            self.refresh_in_background(id);
            return Ok(hot);
        }
        if still_flagged(&self.missing, &id) {
            return Err(LookupError::Missing);
        }
        // A copy, however old, says the id is not a made-up one: the Bloom filter, which
        // keeps those from the database, has nothing to add (and the one read its misses
        // share bounds what a made-up item id of a real activity costs meanwhile).
        let stale = self.copy(id, STALE_WHILE_DATABASE_AWAY);
        if stale.is_none()
            && !BloomClient(&self.redis)
                .bloom_test(&self.bloom.positions(&bloom_key()))
                .await?
        {
            return Err(LookupError::Missing);
        }
        // PostgreSQL away (a restart, a fail-over): the copy it gave a moment ago is better
        // than refusing the sale, whose stock is in Redis and whose pre-orders wait for the
        // database anyway (an activity is not edited during its sale). With such a copy the
        // database gets a moment, not the pool's whole acquire timeout, to answer.
        let load = self.load_once(id);
        let loaded = match stale {
            None => load.await?,
            Some(stale) => match tokio::time::timeout(STALE_PATIENCE, load).await {
                Ok(Ok(loaded)) => loaded,
                Ok(Err(error)) => {
                    quiet!(warn, "buy.catalogue_stale", activity = id, error = %error, "PostgreSQL unreachable; serving the activity from memory");
                    return Ok(stale);
                }
                Err(_) => {
                    quiet!(
                        warn,
                        "buy.catalogue_stale",
                        activity = id,
                        "PostgreSQL slow to answer; serving the activity from memory"
                    );
                    return Ok(stale);
                }
            },
        };
        let Some(activity) = loaded else {
            flag(&self.missing, id, self.null_ttl);
            return Err(LookupError::Missing);
        };
        Ok(activity)
    }

    /// The read of activity `id` in flight, or a new one. The read keeps its copy (or
    /// drops it, the activity gone) and then leaves the table, so a lookup after it finds
    /// either the copy or a read of its own. It runs on a task of its own: a lookup may stop
    /// waiting (its patience spent, its client gone) and the read still ends, its connection
    /// back in the pool.
    fn load_once(&self, id: i64) -> Load {
        let mut loads = self.loads.lock().unwrap_or_else(PoisonError::into_inner);
        loads
            .entry(id)
            .or_insert_with(|| {
                self.reads.inc();
                let (db, activities, loads) =
                    (self.db.clone(), self.activities.clone(), self.loads.clone());
                let read = async move {
                    let loaded = load(&db, id).await.map(|loaded| loaded.map(Arc::new));
                    if let Err(error) = &loaded {
                        // Its waiters say what they did instead (a copy kept, a 503).
                        tracing::debug!(activity = id, error = %error, "an activity read failed");
                    }
                    if let (Ok(loaded), Ok(mut activities)) = (&loaded, activities.write()) {
                        match loaded {
                            Some(activity) => activities.insert(id, activity.clone()),
                            // Deleted: no copy to serve, even while the database is away.
                            None => activities.remove(&id),
                        };
                    }
                    loads
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .remove(&id);
                    loaded.map_err(Arc::new)
                }
                .boxed()
                .shared();
                tokio::spawn(read.clone());
                read
            })
            .clone()
    }

    /// The copy of an activity past its lifetime, if one of its items is a `cache` hot key.
    fn stale_but_hot(&self, id: i64) -> Option<Arc<CachedActivity>> {
        let activities = self.activities.read().ok()?;
        activities
            .get(&id)
            .filter(|activity| self.is_hot(activity))
            .cloned()
    }

    /// Whether an item of the activity is a `cache` hot key.
    pub fn is_hot(&self, activity: &CachedActivity) -> bool {
        activity
            .items
            .iter()
            .any(|item| self.hotkeys.caches_item(item.item_id))
    }

    /// Starts a refresh of activity `id`'s stock unless one runs; the guard it returns
    /// travels into the task.
    fn start_refresh(&self, id: i64) -> Option<Refreshing> {
        let mut running = self.refreshing.lock().ok()?;
        running
            .insert(id)
            .then(|| Refreshing(self.refreshing.clone(), id))
    }

    /// A read of the activity unless one runs (its lookups keep being served the copy).
    /// Every lookup of a hot activity past its lifetime comes here: joining a running read
    /// costs a lock and a clone, and nothing waits for it.
    fn refresh_in_background(&self, id: i64) {
        drop(self.load_once(id));
    }

    /// The items' Redis stock of a hot activity for `/status`: from memory, refreshed in
    /// the background once older than [`STOCK_MEMO`]; read at once the first time.
    pub async fn hot_stock(
        &self,
        activity_id: i64,
        keys: Vec<String>,
    ) -> redis::RedisResult<Arc<Vec<Option<i64>>>> {
        let memo = self
            .stock
            .read()
            .ok()
            .and_then(|memos| memos.get(&activity_id).cloned());
        if let Some((stock, read_at)) = memo {
            if read_at.elapsed() > STOCK_MEMO {
                if let Some(guard) = self.start_refresh(activity_id) {
                    let (redis, memos) = (self.redis.clone(), self.stock.clone());
                    tokio::spawn(async move {
                        let _guard = guard;
                        if let Ok(stock) = redis.get_integers(&keys).await {
                            if let Ok(mut memos) = memos.write() {
                                memos.insert(activity_id, (Arc::new(stock), Instant::now()));
                            }
                        }
                    });
                }
            }
            self.hotkeys.served_from_cache();
            return Ok(stock);
        }
        let stock = Arc::new(self.redis.get_integers(&keys).await?);
        if let Ok(mut memos) = self.stock.write() {
            memos.retain(|_, (_, read_at)| {
                read_at.elapsed() < self.activity_ttl.max(STOCK_MEMO) * 60
            });
            memos.insert(activity_id, (stock.clone(), Instant::now()));
        }
        Ok(stock)
    }

    fn cached(&self, id: i64) -> Option<Arc<CachedActivity>> {
        self.copy(id, self.activity_ttl)
    }

    /// The copy in memory if it is younger than `max_age`.
    fn copy(&self, id: i64, max_age: Duration) -> Option<Arc<CachedActivity>> {
        let activities = self.activities.read().ok()?;
        activities
            .get(&id)
            .filter(|activity| activity.loaded_at.elapsed() < max_age)
            .cloned()
    }

    /// Whether this instance saw the item sell out a moment ago.
    pub fn is_sold_out(&self, activity_id: i64, item_id: i64) -> bool {
        still_flagged(&self.sold_out, &(activity_id, item_id))
    }

    pub fn mark_sold_out(&self, activity_id: i64, item_id: i64) {
        flag(&self.sold_out, (activity_id, item_id), self.sold_out_ttl);
    }

    /// Forgets what this instance cached about an activity (after a pre-warm).
    pub fn forget(&self, activity_id: i64) {
        if let Ok(mut activities) = self.activities.write() {
            activities.remove(&activity_id);
        }
        if let Ok(mut missing) = self.missing.write() {
            missing.remove(&activity_id);
        }
        if let Ok(mut stock) = self.stock.write() {
            stock.remove(&activity_id);
        }
        if let Ok(mut sold_out) = self.sold_out.write() {
            sold_out.retain(|(activity, _), _| *activity != activity_id);
        }
    }
}
