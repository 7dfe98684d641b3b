//! Every Prometheus metric of the process, declared in one place (names start with
//! `seckill_`; listed in docs/metrics.md). New metrics go here, not where they are used:
//! the process-wide ones in [`Inner`], a capability's family in a file of its own under
//! `metrics/`, each registered through the one `Registrar`.

use prometheus::{
    core::Collector, exponential_buckets, Encoder, Gauge, Histogram, HistogramOpts, HistogramVec,
    IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry, TextEncoder,
};
use std::sync::Arc;

mod buy_path;
mod control;
mod events;
mod hotkeys;
mod lottery;
mod pipeline;
mod retention;
pub use buy_path::BuyPathMetrics;
pub use control::ControlMetrics;
pub use events::EventMetrics;
pub use hotkeys::HotKeyMetrics;
pub use lottery::LotteryMetrics;
pub use pipeline::PipelineMetrics;
pub use retention::RetentionMetrics;

/// Cheap to clone; all clones share one registry.
#[derive(Clone)]
pub struct Metrics(Arc<Inner>);

pub struct Inner {
    registry: Registry,
    /// HTTP requests by matched route, method and status.
    pub http_requests: IntCounterVec,
    /// HTTP connections open now, those accepted only after the listener waited at its
    /// cap (`max_connections`) for one to close, and those closed after waiting
    /// `connection_idle_s` for a request's head to arrive whole.
    pub http_connections_open: IntGauge,
    pub http_connections_waited: IntCounter,
    pub http_connections_idle_closed: IntCounter,
    /// HTTP latency by matched route; buckets from 50 µs, since the buy path lives below a millisecond.
    pub http_duration: HistogramVec,
    /// Console logins by outcome: accepted, rejected, rate_limited.
    pub admin_logins: IntCounterVec,
    /// 1 when the last readiness probe reached the dependency, else 0.
    pub dependency_up: IntGaugeVec,
    /// Buy requests per funnel stage: `outcome` is `pass` or the code that stopped them.
    pub funnel: IntCounterVec,
    /// The same for a rehearsal's synthetic buyers, apart from the real sale's.
    pub rehearsal_funnel: IntCounterVec,
    /// Pre-orders per group-commit batch.
    pub preorder_batch_size: Histogram,
    /// Duration of calls to a dependency, by `call` (`redis`: every Redis command, script
    /// or pipeline; `preorder_batch`: one group-commit transaction in PostgreSQL) and
    /// `outcome` (`ok`, `error`); buckets from 100 µs.
    pub dependency_calls: HistogramVec,
    /// The USE view of the instance's pools, refreshed on every scrape: PostgreSQL
    /// connections by `state` (`in_use`, `idle`, `max`), buy requests holding an admission
    /// slot, pre-orders waiting for the group-commit writer.
    pub db_pool_connections: IntGaugeVec,
    pub admission_in_flight: IntGauge,
    pub preorder_queue_depth: IntGauge,
    /// Hot callers waiting for a PostgreSQL connection now, and how long each wait took
    /// (`caller`: `preorder_batch`, `create_order`); buckets from 10 µs.
    pub db_pool_waiting: IntGauge,
    pub db_pool_acquire: HistogramVec,
    /// Stock script answers outside the codes the scripts document, by script
    /// (`buy`): the script and the server are out of step.
    pub stock_script_unknown_answers: IntCounterVec,
    /// Money recorded against orders, by where it was learnt (`notify`, `timeout_check`) and
    /// outcome (`paid`, `refund_pending`, `repeated`, `refused`, `amount_mismatch`).
    pub payments: IntCounterVec,
    /// Payment callbacks refused before changing anything, by reason (`bad_signature`, ...).
    pub pay_notify_rejected: IntCounterVec,
    /// Callback attempts of the simulated payment center: `delivered` or `failed`.
    pub pay_callbacks: IntCounterVec,
    /// Trades the simulated payment center settled once the buyer's delay was over:
    /// `paid`, `failed`, or `closed` (closed unpaid before the money came).
    pub pay_center_settlements: IntCounterVec,
    /// Unpaid orders cancelled at their pay deadline, by what found them (`message`, `scan`).
    pub order_cancellations: IntCounterVec,
    /// Redis give-backs of cancelled orders that failed every attempt (left to the scanner:
    /// `stock_restore_journal.redis_restored_at` stays NULL).
    pub redis_giveback_failures: IntCounter,
    /// Per live activity item: units missing from `total = Redis stock + allocated + in
    /// flight + restores owed` (positive: nobody holds them; negative: Redis would sell
    /// units orders hold). Items leave the gauge when their activity stops being live.
    pub stock_drift: IntGaugeVec,
    /// Per live activity item, its units by `figure`: `total` on sale, `redis_stock` left
    /// to sell (absent before the pre-warm), `allocated` to pre-orders and orders, `sold`
    /// (orders completed), `paid`. Refreshed every second by the dashboard sampler of
    /// every instance; items leave it when their activity stops being live.
    pub item_units: IntGaugeVec,
    /// Reconciliation findings by class and what was done (`repaired`, `flagged`, `none`).
    pub reconcile_findings: IntCounterVec,
    /// The leader's automatic reconciliation passes that completed: the drift gauge is as
    /// fresh as the last of them.
    pub reconcile_passes: IntCounter,
    /// Steps of a re-derivation (`commit`, `lower`) that found the item's fence no longer
    /// its run's (expired, or raised again by another run), and so did nothing.
    pub fence_refused: IntCounterVec,
    /// Times an instance computed an activity's live ledger (shared by every viewer for
    /// a second).
    pub ledger_computations: IntCounter,
    /// The etcd control plane: sync, propagation, invalid values, leadership.
    pub control: ControlMetrics,
    /// The RabbitMQ order pipeline: publishing, consuming, outbox, dead letters.
    pub pipeline: PipelineMetrics,
    /// Hot-key detection and reactions.
    pub hotkeys: HotKeyMetrics,
    /// What buys cost the stores, per outcome (`baselines::path`).
    pub buy_path: BuyPathMetrics,
    /// Every command this instance sent to Redis (each of a pipeline's), whoever sent it.
    pub redis_commands: IntCounter,
    /// Activity reads the buy path's catalogue sent to PostgreSQL (a copy missing or
    /// expired); lookups that miss the same activity at once share one read.
    pub catalogue_reads: IntCounter,
    /// Refreshes of the holder sets of items refused from memory, by `store` (`redis`,
    /// `postgres`) and `outcome`: `unchanged` (nothing changed), `read_new` (only the
    /// holders added since), `read_whole`, `kept_last` (PostgreSQL did not answer; the
    /// holders read before stand in).
    pub holder_set_refreshes: IntCounterVec,
    /// Holders those refreshes read, by `store`: buyer records or holders' log entries
    /// (`redis`), holdings (`postgres`).
    pub holder_set_entries_read: IntCounterVec,
    /// The growing tables and what the leader's retention job prunes of them.
    pub retention: RetentionMetrics,
    pub lottery: LotteryMetrics,
    /// The buyers' event streams (`GET /api/events`).
    pub events: EventMetrics,
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
        let add = Registrar(&registry);
        let inner = Inner {
            http_requests: add.counters(
                "seckill_http_requests_total",
                "HTTP requests by route, method and status",
                &["route", "method", "status"],
            ),
            http_connections_open: add.int_gauge(
                "seckill_http_connections_open",
                "HTTP connections open now",
            ),
            http_connections_waited: add.counter(
                "seckill_http_connections_waited_total",
                "HTTP connections accepted only after the listener waited at max_connections",
            ),
            http_connections_idle_closed: add.counter(
                "seckill_http_connections_idle_closed_total",
                "HTTP connections closed after waiting connection_idle_s for a request head to arrive whole",
            ),
            http_duration: add.histograms(
                "seckill_http_request_duration_seconds",
                "HTTP request latency by route",
                buckets(0.000_05, 18),
                &["route"],
            ),
            admin_logins: add.counters(
                "seckill_admin_logins_total",
                "Console login attempts by outcome",
                &["outcome"],
            ),
            dependency_up: add.gauges(
                "seckill_dependency_up",
                "Whether the last readiness probe reached the dependency",
                &["dependency"],
            ),
            funnel: add.counters(
                "seckill_funnel_requests_total",
                "Buy requests per funnel stage, passed or stopped by reason",
                &["stage", "outcome"],
            ),
            rehearsal_funnel: add.counters(
                "seckill_rehearsal_funnel_requests_total",
                "A rehearsal's buy requests per funnel stage, passed or stopped by reason",
                &["stage", "outcome"],
            ),
            dependency_calls: add.histograms(
                "seckill_dependency_call_duration_seconds",
                "Duration of calls to Redis and PostgreSQL by call and outcome",
                buckets(0.000_1, 17),
                &["call", "outcome"],
            ),
            db_pool_connections: add.gauges(
                "seckill_db_pool_connections",
                "PostgreSQL connections of this instance by state (in_use, idle, max)",
                &["state"],
            ),
            admission_in_flight: add.int_gauge(
                "seckill_admission_in_flight",
                "Buy requests holding an admission slot on this instance",
            ),
            db_pool_waiting: add.int_gauge(
                "seckill_db_pool_waiting",
                "Hot callers waiting for a PostgreSQL connection of this instance",
            ),
            db_pool_acquire: add.histograms(
                "seckill_db_pool_acquire_seconds",
                "Waits for a PostgreSQL connection by caller",
                buckets(0.000_01, 20),
                &["caller"],
            ),
            preorder_queue_depth: add.int_gauge(
                "seckill_preorder_queue_depth",
                "Pre-orders waiting for the group-commit writer on this instance",
            ),
            preorder_batch_size: add.histogram(
                "seckill_preorder_batch_size",
                "Pre-orders written per PostgreSQL transaction",
                buckets(1.0, 10),
            ),
            stock_script_unknown_answers: add.counters(
                "seckill_stock_script_unknown_answers_total",
                "Stock script answers outside the documented codes, by script",
                &["script"],
            ),
            payments: add.counters(
                "seckill_payments_total",
                "Payments recorded against orders, by source and outcome",
                &["via", "outcome"],
            ),
            pay_notify_rejected: add.counters(
                "seckill_pay_notify_rejected_total",
                "Payment callbacks refused without any change, by reason",
                &["reason"],
            ),
            pay_callbacks: add.counters(
                "seckill_pay_callbacks_total",
                "Callback attempts of the simulated payment center, by outcome",
                &["outcome"],
            ),
            pay_center_settlements: add.counters(
                "seckill_pay_center_settlements_total",
                "Trades the simulated payment center settled after the buyer's delay, by outcome",
                &["outcome"],
            ),
            order_cancellations: add.counters(
                "seckill_order_cancellations_total",
                "Unpaid orders cancelled at their pay deadline, by trigger",
                &["trigger"],
            ),
            redis_giveback_failures: add.counter(
                "seckill_redis_giveback_failures_total",
                "Redis give-backs of cancelled orders that failed every attempt",
            ),
            stock_drift: add.gauges(
                "seckill_stock_drift_units",
                "Units missing from the stock ledger of a live activity item",
                &["activity", "item"],
            ),
            item_units: add.gauges(
                "seckill_item_units",
                "Units of a live activity item by figure (total, redis_stock, allocated, sold, paid)",
                &["activity", "item", "figure"],
            ),
            reconcile_findings: add.counters(
                "seckill_reconcile_findings_total",
                "Reconciliation findings by class and action",
                &["class", "action"],
            ),
            reconcile_passes: add.counter(
                "seckill_reconcile_passes_total",
                "Automatic reconciliation passes the leader completed",
            ),
            fence_refused: add.counters(
                "seckill_reconcile_fence_refused_total",
                "Re-derivation steps refused because the item's fence was no longer their run's",
                &["step"],
            ),
            ledger_computations: add.counter(
                "seckill_ledger_computations_total",
                "Live ledgers of an activity computed by this instance",
            ),
            control: ControlMetrics::register(&add),
            pipeline: PipelineMetrics::register(&add),
            hotkeys: HotKeyMetrics::register(&add),
            buy_path: BuyPathMetrics::register(&add),
            redis_commands: add.counter(
                "seckill_redis_commands_total",
                "Commands this instance sent to Redis, each of a pipeline's counted",
            ),
            catalogue_reads: add.counter(
                "seckill_catalogue_reads_total",
                "Activity reads the buy path sent to PostgreSQL; concurrent misses share one",
            ),
            holder_set_refreshes: add.counters(
                "seckill_holder_set_refreshes_total",
                "Holder set refreshes of items refused from memory, by store and outcome",
                &["store", "outcome"],
            ),
            holder_set_entries_read: add.counters(
                "seckill_holder_set_entries_read_total",
                "Holders the holder set refreshes read, by store",
                &["store"],
            ),
            retention: RetentionMetrics::register(&add),
            lottery: LotteryMetrics::register(&add),
            events: EventMetrics::register(&add),
            // Last: the fields above borrow it through `add`.
            registry,
        };
        Self(Arc::new(inner))
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

/// Makes each metric and registers it at once. Names and help texts are fixed in the
/// code, so a failure here is a programming error that the first test building
/// [`Metrics`] finds.
struct Registrar<'a>(&'a Registry);

impl Registrar<'_> {
    fn registered<M: Collector + Clone + 'static>(&self, made: prometheus::Result<M>) -> M {
        let metric = made.expect("valid metric");
        self.0
            .register(Box::new(metric.clone()))
            .expect("metric names are unique");
        metric
    }

    fn counter(&self, name: &str, help: &str) -> IntCounter {
        self.registered(IntCounter::new(name, help))
    }

    fn counters(&self, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
        self.registered(IntCounterVec::new(Opts::new(name, help), labels))
    }

    fn gauge(&self, name: &str, help: &str) -> Gauge {
        self.registered(Gauge::new(name, help))
    }

    fn int_gauge(&self, name: &str, help: &str) -> IntGauge {
        self.registered(IntGauge::new(name, help))
    }

    fn gauges(&self, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
        self.registered(IntGaugeVec::new(Opts::new(name, help), labels))
    }

    fn histogram(&self, name: &str, help: &str, buckets: Vec<f64>) -> Histogram {
        self.registered(Histogram::with_opts(
            HistogramOpts::new(name, help).buckets(buckets),
        ))
    }

    fn histograms(
        &self,
        name: &str,
        help: &str,
        buckets: Vec<f64>,
        labels: &[&str],
    ) -> HistogramVec {
        self.registered(HistogramVec::new(
            HistogramOpts::new(name, help).buckets(buckets),
            labels,
        ))
    }
}

/// `count` buckets from `start`, each twice the one before.
fn buckets(start: f64, count: usize) -> Vec<f64> {
    exponential_buckets(start, 2.0, count).expect("valid buckets")
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
        pipeline
            .preorders_stuck
            .with_label_values(&["pending"])
            .set(2);
        pipeline.queue_depth.with_label_values(&["create"]).set(5);
        pipeline.relay_passes.inc();
        pipeline
            .pay_timeout_messages
            .with_label_values(&["acked"])
            .inc();
        let text = metrics.render();
        for name in [
            "seckill_mq_publish_confirm_seconds_bucket",
            "seckill_mq_published_total",
            "seckill_order_consumer_lag_seconds_bucket",
            "seckill_order_batch_size_bucket",
            "seckill_orders_completed_total",
            "seckill_outbox_rows",
            "seckill_dead_letters_waiting",
            "seckill_preorders_stuck",
            "seckill_mq_queue_depth",
            "seckill_outbox_relay_passes_total",
            "seckill_pay_timeout_messages_total",
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
            .with_label_values(&["buy"])
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
            .pay_center_settlements
            .with_label_values(&["closed"])
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
            "seckill_pay_center_settlements_total",
            "seckill_order_cancellations_total",
            "seckill_redis_giveback_failures_total",
        ] {
            assert!(text.contains(name), "{name} missing from:\n{text}");
        }
    }
}
