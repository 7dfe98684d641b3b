//! Hot-key detection's metrics: the counting task's drops, the reports between instances,
//! what the leader publishes and what the keys in force do to requests.

use prometheus::{IntCounter, IntCounterVec, IntGauge};

use super::Registrar;

/// Hot-key detection and its reactions.
pub struct HotKeyMetrics {
    /// Samples the counting task could not take (its queue was full): counts run low by this.
    pub samples_dropped: IntCounter,
    /// This instance's reports of its top keys, by `outcome` (`sent`, `failed`), and the
    /// reports it received from every instance (`received`, `malformed`).
    pub reports: IntCounterVec,
    /// Hot keys the leader wrote to etcd by `kind` and `outcome` (`published`, `renewed`,
    /// `lost`: no longer under its lease, lifted or replaced by an operator; `failed`).
    pub publishes: IntCounterVec,
    /// Requests a hot key acted on, by `kind` and `action` (`block`, `limit`: refused;
    /// `cache`: served from memory past the cache's lifetime).
    pub reactions: IntCounterVec,
    /// Hot keys in force on this instance.
    pub in_force: IntGauge,
    /// The most memory the counting sketches can hold, whatever the traffic.
    pub sketch_bytes: IntGauge,
}

impl HotKeyMetrics {
    pub(super) fn register(add: &Registrar) -> Self {
        Self {
            samples_dropped: add.counter(
                "seckill_hotkey_samples_dropped_total",
                "Hot-key samples dropped because the counting task was behind",
            ),
            reports: add.counters(
                "seckill_hotkey_reports_total",
                "Top-key reports sent and received, by outcome",
                &["outcome"],
            ),
            publishes: add.counters(
                "seckill_hotkey_publishes_total",
                "Hot keys written to etcd by the leader, by kind and outcome",
                &["kind", "outcome"],
            ),
            reactions: add.counters(
                "seckill_hotkey_reactions_total",
                "Requests a hot key acted on, by kind and action",
                &["kind", "action"],
            ),
            in_force: add.int_gauge(
                "seckill_hotkeys_in_force",
                "Hot keys in force on this instance",
            ),
            sketch_bytes: add.int_gauge(
                "seckill_hotkey_sketch_bytes",
                "The most memory the hot-key counting sketches can hold, whatever the traffic",
            ),
        }
    }
}
