//! What the buy path asks of hot keys: count each request's item, buyer and address, and
//! react to the keys in force (refuse a blocked buyer or address, hold a limited key to its
//! share, serve a cached item's reads from memory). The hot-key capability (`crate::hotkeys`)
//! answers; the buy path holds it as a [`HotKeyGate`], so the funnel depends on what it asks,
//! not on how keys are found hot across the cluster (sketches, reports, the leader's rules).

use contract::HotKeyKind;
use std::net::IpAddr;

/// A request refused by a hot key, with what to tell the client.
pub struct Refusal {
    pub kind: HotKeyKind,
    pub retry_after_s: u64,
}

/// The hot keys as the buy path meets them; every call answers from memory, never waiting.
pub trait HotKeyGate: Send + Sync {
    /// Counts a buy's item, buyer and address, or an activity read's items and address.
    fn sample(&self, item: Option<i64>, user: Option<i64>, ip: Option<IpAddr>);
    /// A `block` on the buyer or the address: refuse until the key lapses.
    fn refusal(&self, user: Option<i64>, ip: IpAddr) -> Option<Refusal>;
    /// Which `limit` on the item, the buyer or the address has no token for this request.
    fn limited(&self, item: i64, user: i64, ip: IpAddr) -> Option<HotKeyKind>;
    /// Whether the item's activity info and status are served from memory.
    fn caches_item(&self, item: i64) -> bool;
    /// Counts a read served from memory past the cache's lifetime.
    fn served_from_cache(&self);
}
