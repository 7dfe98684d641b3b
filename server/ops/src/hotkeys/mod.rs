//! Hot keys: which items, buyers and addresses carry more than their share of the traffic,
//! found cluster-wide within about a second, and what every instance does about them.
//!
//! * Counting ([`window`], [`sketch`]): the buy path appends each request's item, buyer and
//!   address to a bounded buffer ([`HotKeys::sample`], never waiting, waking nobody); one
//!   task per instance takes the buffer every 10 ms and counts them in Space-Saving sketches over a sliding second.
//! * Aggregation ([`report`], [`cluster`]): every eighth of a second each instance publishes its
//!   top keys on a Redis channel; every instance adds up the latest report of each, so
//!   every console shows the cluster-wide top, and the leader ([`publish`]) applies the
//!   rules of `rules/hotkeys/{kind}` and writes each hot key to etcd under
//!   `hotkeys/{kind}/{key}` with a lease of `hold_s`, renewed while it stays hot.
//! * Reactions ([`table`], [`HotKeys::refusal`], [`HotKeys::limited`],
//!   [`HotKeys::caches_item`]): the control plane's watcher keeps the keys in force in
//!   memory; the buy path reads them with one atomic load.
//! * Manual keys, the history and the view ([`service`], [`store`], [`routes`]).
//!
//! The reports go through Redis rather than etcd: they are four writes a second per
//! instance that nobody needs a second later, and in etcd each would be a Raft write
//! fsynced on every member, kept in the revision history until compaction, and pushed to
//! every watcher of the prefix. Only decisions (a key becoming hot) go to etcd.

use contract::{HotKeyAction, HotKeyId, HotKeyKind, TopKeys};
use std::{
    collections::HashMap,
    net::IpAddr,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex,
    },
};

use base::{metrics::Metrics, token_bucket::TokenBucket};
use sale::buy::hot_keys::{HotKeyGate, Refusal};

mod cluster;
mod publish;
mod report;
pub(crate) mod routes;
pub mod service;
mod sketch;
pub(crate) mod store;
pub(crate) mod table;
mod window;

pub use report::{spawn, spawn_aggregator};
use table::HotKeyTable;
use window::Sample;

/// Samples waiting for the counting task at most; beyond, they are dropped and counted.
const QUEUE: usize = 65_536;

/// Requests' samples waiting for the counting task. A buffer the task takes on a timer,
/// rather than a channel: a channel wakes the task for every sample, and at a few thousand
/// requests a second each wake-up (a thread unparked, a futex) cost more than the counting.
#[derive(Default)]
pub(crate) struct Samples(Mutex<Vec<Sample>>);

impl Samples {
    /// Appends a sample unless the buffer is full; false when it was dropped.
    fn push(&self, sample: Sample) -> bool {
        let mut pending = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if pending.len() >= QUEUE {
            return false;
        }
        pending.push(sample);
        true
    }

    /// Swaps the waiting samples with `into` (emptied first), keeping both allocations.
    pub(crate) fn take(&self, into: &mut Vec<Sample>) {
        into.clear();
        let mut pending = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        std::mem::swap(&mut *pending, into);
    }
}

/// The hot-key side of one instance, shared by the buy path, the watcher and the routes.
pub struct HotKeys {
    /// Absent when detection is off: nothing is counted.
    samples: Option<Arc<Samples>>,
    /// The keys in force, from etcd.
    pub(crate) table: HotKeyTable,
    /// The token buckets of `limit` keys, made when first needed, dropped with their key.
    buckets: Mutex<HashMap<HotKeyId, Arc<TokenBucket>>>,
    /// Live instances sharing each `limit` (1 until the watcher has counted them).
    instances: AtomicU64,
    /// The latest cluster-wide top per kind and how many instances it adds up.
    top: Mutex<(TopKeys, u32)>,
    metrics: Metrics,
}

impl HotKeys {
    pub(crate) fn new(detection: bool, metrics: Metrics) -> Self {
        Self {
            samples: detection.then(Arc::default),
            table: HotKeyTable::default(),
            buckets: Mutex::default(),
            instances: AtomicU64::new(1),
            top: Mutex::default(),
            metrics,
        }
    }

    /// The number of live instances, as the watcher counts their node keys: a `limit` is
    /// the cluster's total, and each instance takes its share.
    pub(crate) fn set_instances(&self, live: usize) {
        self.instances
            .store(u64::try_from(live.max(1)).unwrap_or(1), Ordering::Relaxed);
    }

    fn react(&self, kind: HotKeyKind, action: HotKeyAction) {
        self.metrics
            .hotkeys
            .reactions
            .with_label_values(&[kind.as_str(), action.as_str()])
            .inc();
    }

    fn bucket(&self, id: HotKeyId) -> Arc<TokenBucket> {
        let mut buckets = self
            .buckets
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        buckets
            .entry(id)
            .or_insert_with(|| Arc::new(TokenBucket::new()))
            .clone()
    }

    /// Called by the watcher after the table changed: buckets of keys no longer limited go.
    pub(crate) fn table_changed(&self) {
        let table = self.table.snapshot();
        self.metrics
            .hotkeys
            .in_force
            .set(i64::try_from(table.len()).unwrap_or(i64::MAX));
        let mut buckets = self
            .buckets
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        buckets.retain(|id, _| {
            table
                .get(id)
                .is_some_and(|hot| hot.value.action == HotKeyAction::Limit)
        });
    }

    pub(crate) fn top(&self) -> (TopKeys, u32) {
        self.top
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    fn set_top(&self, top: TopKeys, nodes: u32) {
        *self
            .top
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = (top, nodes);
    }

    /// The buffer the counting task drains; none with detection off.
    fn samples(&self) -> Option<Arc<Samples>> {
        self.samples.clone()
    }
}

impl HotKeyGate for HotKeys {
    /// Never waits: a sample the counting task has no room for is dropped and counted.
    fn sample(&self, item: Option<i64>, user: Option<i64>, ip: Option<IpAddr>) {
        let Some(samples) = &self.samples else {
            return;
        };
        if !samples.push(Sample { item, user, ip }) {
            self.metrics.hotkeys.samples_dropped.inc();
        }
    }

    fn refusal(&self, user: Option<i64>, ip: IpAddr) -> Option<Refusal> {
        if self.table.is_empty() {
            return None;
        }
        let keys = [user.map(HotKeyId::User), Some(HotKeyId::Ip(ip))];
        keys.into_iter().flatten().find_map(|id| {
            let (action, _, expires_ms) = self.table.action(&id)?;
            (action == HotKeyAction::Block).then(|| {
                self.react(id.kind(), action);
                let left_ms = expires_ms - chrono::Utc::now().timestamp_millis();
                Refusal {
                    kind: id.kind(),
                    retry_after_s: u64::try_from(left_ms.max(0))
                        .unwrap_or(0)
                        .div_ceil(1000)
                        .max(1),
                }
            })
        })
    }

    /// The limit is the cluster's total: each limited key has its own bucket on this
    /// instance, refilled at the limit divided among the live instances (rounded up, so the
    /// cluster may admit up to one more per instance and second, never fewer).
    fn limited(&self, item: i64, user: i64, ip: IpAddr) -> Option<HotKeyKind> {
        if self.table.is_empty() {
            return None;
        }
        [HotKeyId::Item(item), HotKeyId::User(user), HotKeyId::Ip(ip)]
            .into_iter()
            .find(|id| {
                let Some((HotKeyAction::Limit, Some(rate), _)) = self.table.action(id) else {
                    return false;
                };
                let share = rate.div_ceil(self.instances.load(Ordering::Relaxed).max(1));
                let taken = self.bucket(*id).try_take(share);
                if !taken {
                    self.react(id.kind(), HotKeyAction::Limit);
                }
                !taken
            })
            .map(|id| id.kind())
    }

    fn caches_item(&self, item: i64) -> bool {
        matches!(
            self.table.action(&HotKeyId::Item(item)),
            Some((HotKeyAction::Cache, _, _))
        )
    }

    fn served_from_cache(&self) {
        self.react(HotKeyKind::Item, HotKeyAction::Cache);
    }
}
