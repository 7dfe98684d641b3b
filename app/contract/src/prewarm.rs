//! What a pre-warm loaded into Redis, next to the database figures it came from.

use serde::{Deserialize, Serialize};

/// What pre-warm loaded into Redis for one item, next to the database figures it came from.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrewarmedItem {
    pub item_id: i64,
    pub total_stock: i64,
    /// Units held by orders in PostgreSQL (every state but cancelled and failed).
    pub held_in_db: i64,
    /// Stock loaded into Redis: total minus held.
    pub redis_stock: i64,
    /// Buyers whose holdings were loaded for the per-user limit.
    pub buyers: u64,
}

/// What one pre-warm run loaded; the same JSON as `POST /admin/api/activities/{id}/prewarm`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrewarmReport {
    pub activity_id: i64,
    pub items: Vec<PrewarmedItem>,
    /// Bloom filter bits this run newly set (0 on a repeat run).
    pub bloom_bits_set: i64,
}
