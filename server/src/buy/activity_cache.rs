//! What the buy path knows about activities without asking anyone: a short-lived copy of
//! each activity in memory, a null cache for ids that do not exist, and the local
//! sold-out flags (funnel stages 4–6 in docs/buyer-api.md).
//!
//! A cache miss is let through to PostgreSQL only if the Bloom filter in Redis says the
//! id may exist, so a flood of made-up ids never reaches the database.

use chrono::{DateTime, Utc};
use contract::ActivityKind;
use sqlx::PgPool;
use std::{
    collections::HashMap,
    sync::{Arc, RwLock},
    time::{Duration, Instant},
};

use crate::{
    buy::bloom::{self, BloomShape},
    catalog::store as catalog,
    infra::{config::BuySettings, redis::RedisStore},
};

/// An activity as the buy path needs it.
#[derive(Debug)]
pub(crate) struct CachedActivity {
    pub(crate) id: i64,
    pub(crate) title: String,
    pub(crate) kind: ActivityKind,
    pub(crate) starts_at: DateTime<Utc>,
    pub(crate) ends_at: DateTime<Utc>,
    pub(crate) items: Vec<CachedItem>,
    loaded_at: Instant,
}

#[derive(Debug)]
pub(crate) struct CachedItem {
    pub(crate) item_id: i64,
    pub(crate) name: String,
    pub(crate) price_cents: i64,
    pub(crate) per_user_limit: i64,
    pub(crate) total_stock: i64,
}

impl CachedActivity {
    pub(crate) fn item(&self, item_id: i64) -> Option<&CachedItem> {
        self.items.iter().find(|item| item.item_id == item_id)
    }
}

/// Why an activity could not be produced.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LookupError {
    #[error("no such activity")]
    Missing,
    #[error(transparent)]
    Redis(#[from] redis::RedisError),
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

type Expiries<K> = RwLock<HashMap<K, Instant>>;

pub struct Catalogue {
    db: PgPool,
    redis: RedisStore,
    bloom: BloomShape,
    activities: RwLock<HashMap<i64, Arc<CachedActivity>>>,
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

impl Catalogue {
    pub(crate) fn new(db: PgPool, redis: RedisStore, settings: &BuySettings) -> Self {
        Self {
            db,
            redis,
            bloom: BloomShape::for_capacity(
                settings.bloom_capacity,
                settings.bloom_false_positive_rate,
            ),
            activities: RwLock::default(),
            missing: RwLock::default(),
            sold_out: RwLock::default(),
            activity_ttl: Duration::from_millis(settings.activity_cache_ms),
            null_ttl: Duration::from_millis(settings.null_cache_ms),
            sold_out_ttl: Duration::from_millis(settings.sold_out_flag_ms),
        }
    }

    pub(crate) fn bloom(&self) -> BloomShape {
        self.bloom
    }

    /// The activity (public pages, status): from memory, else through the Bloom filter on
    /// the activity key.
    pub(crate) async fn activity(&self, id: i64) -> Result<Arc<CachedActivity>, LookupError> {
        self.lookup(id, || bloom::activity_key(id)).await
    }

    /// The activity a buy names, guarded on a miss by the Bloom filter on the item key, so
    /// made-up item ids of a real activity are stopped as cheaply as made-up activities.
    pub(crate) async fn activity_for_item(
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
        if still_flagged(&self.missing, &id) {
            return Err(LookupError::Missing);
        }
        if !self
            .redis
            .bloom_test(&self.bloom.positions(&bloom_key()))
            .await?
        {
            return Err(LookupError::Missing);
        }
        let Some(stored) = catalog::get_activity(&self.db, id, None).await? else {
            flag(&self.missing, id, self.null_ttl);
            return Err(LookupError::Missing);
        };
        let activity = Arc::new(CachedActivity {
            id: stored.id,
            title: stored.title,
            kind: stored.kind,
            starts_at: stored.starts_at,
            ends_at: stored.ends_at,
            items: stored
                .lines
                .into_iter()
                .map(|line| CachedItem {
                    item_id: line.item_id,
                    name: line.name,
                    price_cents: line.price_cents,
                    per_user_limit: line.per_user_limit.into(),
                    total_stock: line.total_stock.into(),
                })
                .collect(),
            loaded_at: Instant::now(),
        });
        if let Ok(mut activities) = self.activities.write() {
            activities.insert(id, activity.clone());
        }
        Ok(activity)
    }

    fn cached(&self, id: i64) -> Option<Arc<CachedActivity>> {
        let activities = self.activities.read().ok()?;
        activities
            .get(&id)
            .filter(|activity| activity.loaded_at.elapsed() < self.activity_ttl)
            .cloned()
    }

    /// Whether this instance saw the item sell out a moment ago.
    pub(crate) fn is_sold_out(&self, activity_id: i64, item_id: i64) -> bool {
        still_flagged(&self.sold_out, &(activity_id, item_id))
    }

    pub(crate) fn mark_sold_out(&self, activity_id: i64, item_id: i64) {
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
        if let Ok(mut sold_out) = self.sold_out.write() {
            sold_out.retain(|(activity, _), _| *activity != activity_id);
        }
    }
}
