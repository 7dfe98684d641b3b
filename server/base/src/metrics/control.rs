//! The etcd control plane's metrics: how fresh this instance's switches are, refused values,
//! watch resyncs, propagation, leadership and the leader's waiting changes.

use prometheus::{Gauge, Histogram, IntCounterVec, IntGauge};

use super::{buckets, Registrar};

/// The etcd control plane's metrics.
pub struct ControlMetrics {
    /// Seconds since etcd last confirmed this instance had every switch change; grows
    /// while etcd is unreachable (the last values stay in force meanwhile).
    pub sync_age: Gauge,
    /// 1 while the watch on the prefix is open.
    pub etcd_connected: IntGauge,
    /// The etcd revision up to which this instance applied every change.
    pub applied_revision: IntGauge,
    /// Values in etcd refused (unknown key or malformed value), by setting.
    pub invalid_values: IntCounterVec,
    /// Watch re-establishments: `resume` (from the last revision seen) or `reload` (full read).
    pub resyncs: IntCounterVec,
    /// From a control-plane write to this instance applying it, in seconds.
    pub propagation: Histogram,
    /// 1 while this instance holds the etcd election (runs the singleton jobs).
    pub leader: IntGauge,
    /// Changes written straight into etcd that this instance offered to the audit, by
    /// outcome: `recorded`, `known` (another instance recorded it first), or `failed` for
    /// every attempt the database refused (the change is retried until its row commits).
    pub external_audits: IntCounterVec,
    /// Steps of waiting changes the leader took, by step (`apply`, `revert`) and outcome
    /// (`applied`, `reverted`, `dropped`: the key was changed meanwhile).
    pub change_steps: IntCounterVec,
}

impl ControlMetrics {
    pub(super) fn register(add: &Registrar) -> Self {
        Self {
            sync_age: add.gauge(
                "seckill_control_sync_age_seconds",
                "Seconds since etcd last confirmed this instance had every switch change",
            ),
            etcd_connected: add.int_gauge(
                "seckill_control_etcd_connected",
                "Whether the watch on the etcd prefix is open",
            ),
            applied_revision: add.int_gauge(
                "seckill_control_applied_revision",
                "The etcd revision up to which this instance applied every change",
            ),
            invalid_values: add.counters(
                "seckill_control_invalid_values_total",
                "Switch and limit values in etcd refused, by setting",
                &["setting"],
            ),
            resyncs: add.counters(
                "seckill_control_resyncs_total",
                "Watch re-establishments by kind (resume, reload)",
                &["kind"],
            ),
            propagation: add.histogram(
                "seckill_control_propagation_seconds",
                "From a control-plane write to this instance applying it",
                buckets(0.000_25, 16),
            ),
            leader: add.int_gauge(
                "seckill_control_leader",
                "Whether this instance holds the etcd election",
            ),
            external_audits: add.counters(
                "seckill_control_external_audits_total",
                "Changes written straight into etcd offered to the audit, by outcome (failed: per attempt, retried)",
                &["outcome"],
            ),
            change_steps: add.counters(
                "seckill_control_change_steps_total",
                "Steps of waiting switch changes the leader took, by step and outcome",
                &["step", "outcome"],
            ),
        }
    }
}
