//! The buyer event streams' metrics (`GET /api/events`, docs/buyer-events.md), beside `metrics.rs` so
//! that file stays one screenful per family.

use prometheus::{IntCounterVec, IntGauge};

use super::Registrar;

/// What the buyer event streams carry and hold.
pub struct EventMetrics {
    /// Event streams open on this instance now.
    pub streams_open: IntGauge,
    /// Asks for a stream by `outcome`: `opened`, `replaced` (a buyer's earlier stream on this
    /// instance was ended for it), `overloaded` (refused 503 at `[events] max_streams`).
    pub streams: IntCounterVec,
    /// Events this instance published, by `kind` (`order`, `registration`) and `outcome`
    /// (`published`: in the buyer's log and announced; `dropped`: the queue to Redis was full;
    /// `failed`: Redis did not take it).
    pub published: IntCounterVec,
    /// Events written to a stream this instance holds, by `kind` and `via` (`live`: as
    /// announced; `resumed`: read back from the buyer's log for a `Last-Event-ID`).
    pub delivered: IntCounterVec,
}

impl EventMetrics {
    pub(super) fn register(add: &Registrar) -> Self {
        Self {
            streams_open: add.int_gauge(
                "seckill_event_streams_open",
                "Buyer event streams open on this instance",
            ),
            streams: add.counters(
                "seckill_event_streams_total",
                "Asks for a buyer event stream, by outcome",
                &["outcome"],
            ),
            published: add.counters(
                "seckill_buyer_events_published_total",
                "Buyer events this instance published, by kind and outcome",
                &["kind", "outcome"],
            ),
            delivered: add.counters(
                "seckill_buyer_events_delivered_total",
                "Buyer events written to a stream this instance holds, by kind and how",
                &["kind", "via"],
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::metrics::Metrics;

    #[test]
    fn the_event_metrics_are_exported_under_their_names() {
        let metrics = Metrics::new();
        let events = &metrics.events;
        events.streams_open.set(2);
        events.streams.with_label_values(&["opened"]).inc();
        events
            .published
            .with_label_values(&["order", "published"])
            .inc();
        events.delivered.with_label_values(&["order", "live"]).inc();
        let text = metrics.render();
        for name in [
            "seckill_event_streams_open 2",
            "seckill_event_streams_total{outcome=\"opened\"} 1",
            "seckill_buyer_events_published_total{kind=\"order\",outcome=\"published\"} 1",
            "seckill_buyer_events_delivered_total{kind=\"order\",via=\"live\"} 1",
        ] {
            assert!(text.contains(name), "{name} missing from:\n{text}");
        }
    }
}
