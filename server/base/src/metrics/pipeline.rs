//! The RabbitMQ order pipeline's metrics: publishing and confirms, the create-order
//! consumer, the outbox and its relay, dead letters, stuck pre-orders, queue depths and pay
//! timeouts.

use prometheus::{
    Gauge, Histogram, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec,
};

use super::{buckets, Registrar};

/// The order pipeline's metrics.
pub struct PipelineMetrics {
    /// From a publish to its broker confirm, by publishing role (`offer`, `scheduler`, `relay`).
    pub publish_confirm_seconds: HistogramVec,
    /// Publishes by role and outcome: `confirmed`, `nacked`, `returned` (unroutable),
    /// `unconfirmed` (no confirm in time), `failed`, `dropped` (offer not taken: the relay resends).
    pub published: IntCounterVec,
    /// From a pre-order's commit to the create-order consumer completing it.
    pub consumer_lag_seconds: Histogram,
    /// Deliveries per create-order batch (one DB transaction each).
    pub order_batch_size: Histogram,
    /// Create-order events by outcome: `unpaid` (completed), `failed` (stock no longer
    /// covered it), `duplicate` (processed before or repeated: nothing changed).
    pub orders_completed: IntCounterVec,
    /// Outbox rows by status (`pending`, `failed`, `recorded`).
    pub outbox_rows: IntGaugeVec,
    /// Seconds since the oldest outbox row still to be published was written (0: none).
    pub outbox_oldest_pending: Gauge,
    /// Dead letters not requeued yet (the DLQ depth as ops see it).
    pub dead_letters_waiting: IntGauge,
    /// Pre-orders still `PRE_CREATED` past `fail_stuck_after_s` since their event last
    /// reached RabbitMQ (or since they were written), by their outbox row's status
    /// (`recorded`, `pending`, `sent`, `failed`, `missing`): answered orders a person has to
    /// look at, since no timer fails them.
    pub preorders_stuck: IntGaugeVec,
    /// Messages ready in the pipeline's queues (the MQ backlog), by queue role.
    pub queue_depth: IntGaugeVec,
    /// Passes of the outbox relay completed (whatever each found to resend).
    pub relay_passes: IntCounter,
    /// Pay-timeout messages the consumer is done with, by outcome: `acked` (settled, or put
    /// back into a delay queue when early), `requeued` (failed) or `rejected` (malformed).
    pub pay_timeout_messages: IntCounterVec,
}

impl PipelineMetrics {
    pub(super) fn register(add: &Registrar) -> Self {
        Self {
            publish_confirm_seconds: add.histograms(
                "seckill_mq_publish_confirm_seconds",
                "From a RabbitMQ publish to its confirm, by publishing role",
                buckets(0.000_1, 17),
                &["role"],
            ),
            published: add.counters(
                "seckill_mq_published_total",
                "RabbitMQ publishes by role and outcome",
                &["role", "outcome"],
            ),
            consumer_lag_seconds: add.histogram(
                "seckill_order_consumer_lag_seconds",
                "From a pre-order's commit to its completion by the create-order consumer",
                buckets(0.001, 18),
            ),
            order_batch_size: add.histogram(
                "seckill_order_batch_size",
                "Create-order deliveries completed per PostgreSQL transaction",
                buckets(1.0, 11),
            ),
            orders_completed: add.counters(
                "seckill_orders_completed_total",
                "Orders completed by the create-order consumer, by outcome",
                &["outcome"],
            ),
            outbox_rows: add.gauges("seckill_outbox_rows", "Outbox rows by status", &["status"]),
            outbox_oldest_pending: add.gauge(
                "seckill_outbox_oldest_pending_seconds",
                "Seconds since the oldest outbox row still to be published was written",
            ),
            dead_letters_waiting: add.int_gauge(
                "seckill_dead_letters_waiting",
                "Dead letters not requeued yet",
            ),
            preorders_stuck: add.gauges(
                "seckill_preorders_stuck",
                "Pre-orders waiting past fail_stuck_after_s since their event was last sent, by outbox status",
                &["outbox"],
            ),
            queue_depth: add.gauges(
                "seckill_mq_queue_depth",
                "Messages ready in the order pipeline's queues",
                &["queue"],
            ),
            relay_passes: add.counter(
                "seckill_outbox_relay_passes_total",
                "Passes of the outbox relay completed",
            ),
            pay_timeout_messages: add.counters(
                "seckill_pay_timeout_messages_total",
                "Pay-timeout messages the consumer is done with, by outcome",
                &["outcome"],
            ),
        }
    }
}
