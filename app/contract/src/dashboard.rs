//! The live dashboard's frame: what one instance measured over one second, as the
//! `GET /admin/api/dashboard/stream` events carry it and the console draws it.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One second of one instance. Counts are deltas over the second before `at_ms`; stock,
/// queues and pool are levels at `at_ms`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DashboardFrame {
    /// Wall-clock milliseconds since the epoch when the frame was taken.
    pub at_ms: i64,
    /// The instance that measured it.
    pub node_id: String,
    /// Buy requests per funnel stage, in the order the funnel runs them.
    pub funnel: Vec<StageFigures>,
    pub buy: BuyFigures,
    /// Every item of every live activity.
    pub items: Vec<ItemStock>,
    pub pipeline: PipelineFigures,
    pub db_pool: PoolFigures,
    /// Buy requests in flight on this instance, against the admission limit.
    pub admission: AdmissionFigures,
    /// Live instances as their heartbeats in etcd describe them.
    pub instances: Vec<InstanceHealth>,
    /// Whether etcd answered for this frame (else instances are the last known ones).
    pub etcd_reachable: bool,
    /// Every switch and limit as this instance applies it: path → value.
    pub switches: BTreeMap<String, String>,
    /// Every live activity that has a baseline run: this second against it.
    #[serde(default)]
    pub against_baseline: Vec<crate::AgainstBaseline>,
}

/// One funnel stage over the second.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StageFigures {
    pub stage: String,
    pub passed: u64,
    /// Requests stopped (or otherwise counted) here, by the code they were answered with.
    pub stopped: BTreeMap<String, u64>,
}

impl StageFigures {
    /// Every request this stage saw in the second.
    pub fn total(&self) -> u64 {
        self.passed + self.stopped.values().sum::<u64>()
    }
}

/// The buy routes (`/api/seckill/buy`, `/api/seckill/seats`) over the second.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BuyFigures {
    /// Requests answered in the second.
    pub requests: u64,
    /// The 99th percentile latency in milliseconds, from the latency histogram's buckets;
    /// absent when no request was answered.
    pub p99_ms: Option<f64>,
}

/// One live item's stock.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ItemStock {
    pub activity_id: i64,
    pub item_id: i64,
    pub name: String,
    /// Units the activity put on sale.
    pub total: i64,
    /// What Redis has left to sell (absent: not pre-warmed).
    pub redis_stock: Option<i64>,
    /// Units held by pre-orders and orders (unpaid or paid).
    pub allocated: i64,
    /// Units of orders the pipeline completed (unpaid or paid).
    pub sold: i64,
    /// Units of paid orders (read every few seconds, not every frame).
    pub paid: i64,
}

#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PipelineFigures {
    /// Messages ready in the order pipeline's queues, by queue role.
    pub queue_depth: BTreeMap<String, i64>,
    /// Outbox rows by status (`pending`, `failed`, ...).
    pub outbox: BTreeMap<String, i64>,
    /// Dead letters not requeued yet.
    pub dead_letters: i64,
}

#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolFigures {
    /// Connections open.
    pub size: u32,
    /// Connections open and idle.
    pub idle: u32,
    /// The most the pool opens.
    pub max: u32,
}

#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdmissionFigures {
    pub in_flight: u64,
    pub limit: u64,
}

/// One live instance.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceHealth {
    pub node_id: String,
    pub address: String,
    /// Its watch on etcd is open.
    pub connected: bool,
    pub leader: bool,
    pub applied_revision: i64,
    /// Milliseconds since its last heartbeat was written.
    pub heartbeat_age_ms: i64,
    /// Milliseconds since etcd last confirmed it had every switch change.
    pub synced_ago_ms: Option<u64>,
}
