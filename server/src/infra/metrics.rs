//! Every Prometheus metric of the process, declared in one place (names start with
//! `seckill_`; listed in docs/metrics.md). New metrics go here, not where they are used.

use prometheus::{
    exponential_buckets, Encoder, HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts,
    Registry, TextEncoder,
};
use std::sync::Arc;

/// Cheap to clone; all clones share one registry.
#[derive(Clone)]
pub struct Metrics(Arc<Inner>);

pub struct Inner {
    registry: Registry,
    /// HTTP requests by matched route, method and status.
    pub http_requests: IntCounterVec,
    /// HTTP latency by matched route; buckets from 50 µs, since the buy path lives below a millisecond.
    pub http_duration: HistogramVec,
    /// Console logins by outcome: accepted, rejected, rate_limited.
    pub admin_logins: IntCounterVec,
    /// 1 when the last readiness probe reached the dependency, else 0.
    pub dependency_up: IntGaugeVec,
    /// Buy requests per funnel stage: `outcome` is `pass` or the code that stopped them.
    pub funnel: IntCounterVec,
    /// Pre-orders per group-commit batch.
    pub preorder_batch_size: prometheus::Histogram,
    /// Stock script answers outside the codes the scripts document, by script
    /// (`deduct_stock`, `take_seats`): the scripts and the server are out of step.
    pub stock_script_unknown_answers: IntCounterVec,
    /// Money recorded against orders, by where it was learnt (`notify`, `timeout_check`) and
    /// outcome (`paid`, `refund_pending`, `repeated`, `refused`, `amount_mismatch`).
    pub payments: IntCounterVec,
    /// Payment callbacks refused before changing anything, by reason (`bad_signature`, ...).
    pub pay_notify_rejected: IntCounterVec,
    /// Callback attempts of the simulated payment center: `delivered` or `failed`.
    pub pay_callbacks: IntCounterVec,
    /// Unpaid orders cancelled at their pay deadline, by what found them (`message`, `scan`).
    pub order_cancellations: IntCounterVec,
    /// Redis give-backs of cancelled orders that failed every attempt (left to the scanner:
    /// `stock_restore_journal.redis_restored_at` stays NULL).
    pub redis_giveback_failures: prometheus::IntCounter,
    /// The etcd control plane: sync, propagation, invalid values, leadership.
    pub control: ControlMetrics,
    /// The RabbitMQ order pipeline: publishing, consuming, outbox, dead letters.
    pub pipeline: PipelineMetrics,
}

impl std::ops::Deref for Metrics {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.0
    }
}

impl Metrics {
    pub fn new() -> Self {
        let registry = Registry::new();
        let control = ControlMetrics::register(&registry);
        let pipeline = PipelineMetrics::register(&registry);
        let http_requests = IntCounterVec::new(
            Opts::new(
                "seckill_http_requests_total",
                "HTTP requests by route, method and status",
            ),
            &["route", "method", "status"],
        )
        .expect("valid metric");
        let http_duration = HistogramVec::new(
            HistogramOpts::new(
                "seckill_http_request_duration_seconds",
                "HTTP request latency by route",
            )
            .buckets(exponential_buckets(0.000_05, 2.0, 18).expect("valid buckets")),
            &["route"],
        )
        .expect("valid metric");
        let admin_logins = IntCounterVec::new(
            Opts::new(
                "seckill_admin_logins_total",
                "Console login attempts by outcome",
            ),
            &["outcome"],
        )
        .expect("valid metric");
        let dependency_up = IntGaugeVec::new(
            Opts::new(
                "seckill_dependency_up",
                "Whether the last readiness probe reached the dependency",
            ),
            &["dependency"],
        )
        .expect("valid metric");
        let funnel = IntCounterVec::new(
            Opts::new(
                "seckill_funnel_requests_total",
                "Buy requests per funnel stage, passed or stopped by reason",
            ),
            &["stage", "outcome"],
        )
        .expect("valid metric");
        let preorder_batch_size = prometheus::Histogram::with_opts(
            HistogramOpts::new(
                "seckill_preorder_batch_size",
                "Pre-orders written per PostgreSQL transaction",
            )
            .buckets(exponential_buckets(1.0, 2.0, 10).expect("valid buckets")),
        )
        .expect("valid metric");
        let stock_script_unknown_answers = IntCounterVec::new(
            Opts::new(
                "seckill_stock_script_unknown_answers_total",
                "Stock script answers outside the documented codes, by script",
            ),
            &["script"],
        )
        .expect("valid metric");
        let payments = IntCounterVec::new(
            Opts::new(
                "seckill_payments_total",
                "Payments recorded against orders, by source and outcome",
            ),
            &["via", "outcome"],
        )
        .expect("valid metric");
        let pay_notify_rejected = IntCounterVec::new(
            Opts::new(
                "seckill_pay_notify_rejected_total",
                "Payment callbacks refused without any change, by reason",
            ),
            &["reason"],
        )
        .expect("valid metric");
        let pay_callbacks = IntCounterVec::new(
            Opts::new(
                "seckill_pay_callbacks_total",
                "Callback attempts of the simulated payment center, by outcome",
            ),
            &["outcome"],
        )
        .expect("valid metric");
        let order_cancellations = IntCounterVec::new(
            Opts::new(
                "seckill_order_cancellations_total",
                "Unpaid orders cancelled at their pay deadline, by trigger",
            ),
            &["trigger"],
        )
        .expect("valid metric");
        let redis_giveback_failures = prometheus::IntCounter::new(
            "seckill_redis_giveback_failures_total",
            "Redis give-backs of cancelled orders that failed every attempt",
        )
        .expect("valid metric");
        for collector in [
            Box::new(http_requests.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(http_duration.clone()),
            Box::new(admin_logins.clone()),
            Box::new(dependency_up.clone()),
            Box::new(funnel.clone()),
            Box::new(preorder_batch_size.clone()),
            Box::new(stock_script_unknown_answers.clone()),
            Box::new(payments.clone()),
            Box::new(pay_notify_rejected.clone()),
            Box::new(pay_callbacks.clone()),
            Box::new(order_cancellations.clone()),
            Box::new(redis_giveback_failures.clone()),
        ] {
            registry
                .register(collector)
                .expect("metric names are unique");
        }
        Self(Arc::new(Inner {
            registry,
            http_requests,
            http_duration,
            admin_logins,
            dependency_up,
            funnel,
            preorder_batch_size,
            stock_script_unknown_answers,
            payments,
            pay_notify_rejected,
            pay_callbacks,
            order_cancellations,
            redis_giveback_failures,
            control,
            pipeline,
        }))
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        let mut buffer = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut buffer)
            .expect("text encoding into a Vec cannot fail");
        String::from_utf8(buffer).expect("the text format is UTF-8")
    }
}

/// The control plane's metrics.
pub struct ControlMetrics {
    /// Seconds since etcd last confirmed this instance had every switch change; grows
    /// while etcd is unreachable (the last values stay in force meanwhile).
    pub sync_age: prometheus::Gauge,
    /// 1 while the watch on the prefix is open.
    pub etcd_connected: prometheus::IntGauge,
    /// The etcd revision up to which this instance applied every change.
    pub applied_revision: prometheus::IntGauge,
    /// Values in etcd refused (unknown key or malformed value), by setting.
    pub invalid_values: IntCounterVec,
    /// Watch re-establishments: `resume` (from the last revision seen) or `reload` (full read).
    pub resyncs: IntCounterVec,
    /// From a control-plane write to this instance applying it, in seconds.
    pub propagation: prometheus::Histogram,
    /// 1 while this instance holds the etcd election (runs the singleton jobs).
    pub leader: prometheus::IntGauge,
}

impl ControlMetrics {
    fn register(registry: &Registry) -> Self {
        let metrics = Self {
            sync_age: prometheus::Gauge::new(
                "seckill_control_sync_age_seconds",
                "Seconds since etcd last confirmed this instance had every switch change",
            )
            .expect("valid metric"),
            etcd_connected: prometheus::IntGauge::new(
                "seckill_control_etcd_connected",
                "Whether the watch on the etcd prefix is open",
            )
            .expect("valid metric"),
            applied_revision: prometheus::IntGauge::new(
                "seckill_control_applied_revision",
                "The etcd revision up to which this instance applied every change",
            )
            .expect("valid metric"),
            invalid_values: IntCounterVec::new(
                Opts::new(
                    "seckill_control_invalid_values_total",
                    "Switch and limit values in etcd refused, by setting",
                ),
                &["setting"],
            )
            .expect("valid metric"),
            resyncs: IntCounterVec::new(
                Opts::new(
                    "seckill_control_resyncs_total",
                    "Watch re-establishments by kind (resume, reload)",
                ),
                &["kind"],
            )
            .expect("valid metric"),
            propagation: prometheus::Histogram::with_opts(
                HistogramOpts::new(
                    "seckill_control_propagation_seconds",
                    "From a control-plane write to this instance applying it",
                )
                .buckets(exponential_buckets(0.000_25, 2.0, 16).expect("valid buckets")),
            )
            .expect("valid metric"),
            leader: prometheus::IntGauge::new(
                "seckill_control_leader",
                "Whether this instance holds the etcd election",
            )
            .expect("valid metric"),
        };
        for collector in [
            Box::new(metrics.sync_age.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(metrics.etcd_connected.clone()),
            Box::new(metrics.applied_revision.clone()),
            Box::new(metrics.invalid_values.clone()),
            Box::new(metrics.resyncs.clone()),
            Box::new(metrics.propagation.clone()),
            Box::new(metrics.leader.clone()),
        ] {
            registry
                .register(collector)
                .expect("metric names are unique");
        }
        metrics
    }
}

/// The order pipeline's metrics.
pub struct PipelineMetrics {
    /// From a publish to its broker confirm, by publishing role (`offer`, `scheduler`, `relay`).
    pub publish_confirm_seconds: HistogramVec,
    /// Publishes by role and outcome: `confirmed`, `nacked`, `returned` (unroutable),
    /// `unconfirmed` (no confirm in time), `failed`, `dropped` (offer not taken: the relay resends).
    pub published: IntCounterVec,
    /// From a pre-order's commit to the create-order consumer completing it.
    pub consumer_lag_seconds: prometheus::Histogram,
    /// Deliveries per create-order batch (one DB transaction each).
    pub order_batch_size: prometheus::Histogram,
    /// Create-order events by outcome: `unpaid` (completed), `failed` (stock no longer
    /// covered it), `duplicate` (processed before or repeated: nothing changed).
    pub orders_completed: IntCounterVec,
    /// Outbox rows by status (`pending`, `failed`, `recorded`).
    pub outbox_rows: IntGaugeVec,
    /// Dead letters not requeued yet (the DLQ depth as ops see it).
    pub dead_letters_waiting: prometheus::IntGauge,
    /// Messages ready in the pipeline's queues (the MQ backlog), by queue role.
    pub queue_depth: IntGaugeVec,
}

impl PipelineMetrics {
    fn register(registry: &Registry) -> Self {
        let metrics = Self {
            publish_confirm_seconds: HistogramVec::new(
                HistogramOpts::new(
                    "seckill_mq_publish_confirm_seconds",
                    "From a RabbitMQ publish to its confirm, by publishing role",
                )
                .buckets(exponential_buckets(0.000_1, 2.0, 17).expect("valid buckets")),
                &["role"],
            )
            .expect("valid metric"),
            published: IntCounterVec::new(
                Opts::new(
                    "seckill_mq_published_total",
                    "RabbitMQ publishes by role and outcome",
                ),
                &["role", "outcome"],
            )
            .expect("valid metric"),
            consumer_lag_seconds: prometheus::Histogram::with_opts(
                HistogramOpts::new(
                    "seckill_order_consumer_lag_seconds",
                    "From a pre-order's commit to its completion by the create-order consumer",
                )
                .buckets(exponential_buckets(0.001, 2.0, 18).expect("valid buckets")),
            )
            .expect("valid metric"),
            order_batch_size: prometheus::Histogram::with_opts(
                HistogramOpts::new(
                    "seckill_order_batch_size",
                    "Create-order deliveries completed per PostgreSQL transaction",
                )
                .buckets(exponential_buckets(1.0, 2.0, 11).expect("valid buckets")),
            )
            .expect("valid metric"),
            orders_completed: IntCounterVec::new(
                Opts::new(
                    "seckill_orders_completed_total",
                    "Orders completed by the create-order consumer, by outcome",
                ),
                &["outcome"],
            )
            .expect("valid metric"),
            outbox_rows: IntGaugeVec::new(
                Opts::new("seckill_outbox_rows", "Outbox rows by status"),
                &["status"],
            )
            .expect("valid metric"),
            dead_letters_waiting: prometheus::IntGauge::new(
                "seckill_dead_letters_waiting",
                "Dead letters not requeued yet",
            )
            .expect("valid metric"),
            queue_depth: IntGaugeVec::new(
                Opts::new(
                    "seckill_mq_queue_depth",
                    "Messages ready in the order pipeline's queues",
                ),
                &["queue"],
            )
            .expect("valid metric"),
        };
        for collector in [
            Box::new(metrics.publish_confirm_seconds.clone())
                as Box<dyn prometheus::core::Collector>,
            Box::new(metrics.published.clone()),
            Box::new(metrics.consumer_lag_seconds.clone()),
            Box::new(metrics.order_batch_size.clone()),
            Box::new(metrics.orders_completed.clone()),
            Box::new(metrics.outbox_rows.clone()),
            Box::new(metrics.dead_letters_waiting.clone()),
            Box::new(metrics.queue_depth.clone()),
        ] {
            registry
                .register(collector)
                .expect("metric names are unique");
        }
        metrics
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pipeline_metrics_are_exported() {
        let metrics = Metrics::new();
        let pipeline = &metrics.pipeline;
        pipeline
            .publish_confirm_seconds
            .with_label_values(&["offer"])
            .observe(0.002);
        pipeline
            .published
            .with_label_values(&["offer", "confirmed"])
            .inc();
        pipeline.consumer_lag_seconds.observe(0.05);
        pipeline.order_batch_size.observe(64.0);
        pipeline
            .orders_completed
            .with_label_values(&["unpaid"])
            .inc();
        pipeline.outbox_rows.with_label_values(&["pending"]).set(3);
        pipeline.dead_letters_waiting.set(1);
        pipeline.queue_depth.with_label_values(&["create"]).set(5);
        let text = metrics.render();
        for name in [
            "seckill_mq_publish_confirm_seconds_bucket",
            "seckill_mq_published_total",
            "seckill_order_consumer_lag_seconds_bucket",
            "seckill_order_batch_size_bucket",
            "seckill_orders_completed_total",
            "seckill_outbox_rows",
            "seckill_dead_letters_waiting",
            "seckill_mq_queue_depth",
        ] {
            assert!(text.contains(name), "{name} missing from:\n{text}");
        }
    }

    #[test]
    fn every_metric_is_exported_under_the_seckill_prefix() {
        let metrics = Metrics::new();
        metrics
            .http_requests
            .with_label_values(&["/healthz", "GET", "200"])
            .inc();
        metrics
            .http_duration
            .with_label_values(&["/healthz"])
            .observe(0.001);
        metrics.admin_logins.with_label_values(&["accepted"]).inc();
        metrics.dependency_up.with_label_values(&["redis"]).set(1);
        metrics
            .funnel
            .with_label_values(&["admission", "pass"])
            .inc();
        metrics.preorder_batch_size.observe(3.0);
        metrics
            .stock_script_unknown_answers
            .with_label_values(&["deduct_stock"])
            .inc();
        metrics
            .payments
            .with_label_values(&["notify", "paid"])
            .inc();
        metrics
            .pay_notify_rejected
            .with_label_values(&["bad_signature"])
            .inc();
        metrics
            .pay_callbacks
            .with_label_values(&["delivered"])
            .inc();
        metrics
            .order_cancellations
            .with_label_values(&["message"])
            .inc();
        metrics.redis_giveback_failures.inc();
        let text = metrics.render();
        for name in [
            "seckill_http_requests_total",
            "seckill_http_request_duration_seconds_bucket",
            "seckill_admin_logins_total",
            "seckill_dependency_up",
            "seckill_funnel_requests_total",
            "seckill_preorder_batch_size_bucket",
            "seckill_stock_script_unknown_answers_total",
            "seckill_payments_total",
            "seckill_pay_notify_rejected_total",
            "seckill_pay_callbacks_total",
            "seckill_order_cancellations_total",
            "seckill_redis_giveback_failures_total",
        ] {
            assert!(text.contains(name), "{name} missing from:\n{text}");
        }
    }
}
