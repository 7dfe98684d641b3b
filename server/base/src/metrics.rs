//! Every Prometheus metric of the process, declared in one place (names start with
//! `seckill_`; listed in docs/metrics.md). New metrics go here, not where they are used.

use prometheus::{
    core::Collector, exponential_buckets, CounterVec, Encoder, Gauge, Histogram, HistogramOpts,
    HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry, TextEncoder,
};
use std::sync::Arc;

mod events;
pub use events::EventMetrics;

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

/// The control plane's metrics.
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
    fn register(add: &Registrar) -> Self {
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

/// The path counters of `baselines::path`.
pub struct BuyPathMetrics {
    /// Buy requests answered, by `outcome` (`success`: 200, `refused`: anything else).
    pub requests: IntCounterVec,
    /// Calls buy requests made, by `outcome` and `call` (`redis_round_trip`,
    /// `redis_command`, `db_statement`, `db_transaction`, `mq_publish`); a batch's call
    /// counts in equal shares for its members, so the values are fractional.
    pub calls: CounterVec,
}

impl BuyPathMetrics {
    fn register(add: &Registrar) -> Self {
        Self {
            requests: add.counters(
                "seckill_buy_path_requests_total",
                "Buy requests answered, by outcome (success, refused)",
                &["outcome"],
            ),
            calls: add.registered(CounterVec::new(
                Opts::new(
                    "seckill_buy_path_calls_total",
                    "Redis, PostgreSQL and RabbitMQ calls made by buy requests, by outcome and call",
                ),
                &["outcome", "call"],
            )),
        }
    }
}

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
    fn register(add: &Registrar) -> Self {
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
    fn register(add: &Registrar) -> Self {
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

/// The tables' sizes and the retention job's work, set by the leader at each of its passes.
pub struct RetentionMetrics {
    /// Completed passes of the retention job.
    pub passes: IntCounter,
    /// Rows (and sale-page files, `table` `sale_pages_dir`/`sale_assets`) pruned, by `table`.
    pub pruned: IntCounterVec,
    /// Rows of each table: the planner's estimate, counted exactly on small tables.
    pub table_rows: IntGaugeVec,
    /// Age of each pruned table's oldest row, in seconds.
    pub oldest_age: IntGaugeVec,
}

impl RetentionMetrics {
    fn register(add: &Registrar) -> Self {
        Self {
            passes: add.counter(
                "seckill_retention_passes_total",
                "Passes of the leader's retention job",
            ),
            pruned: add.counters(
                "seckill_retention_pruned_total",
                "Rows and sale-page files the retention job removed, by table",
                &["table"],
            ),
            table_rows: add.gauges(
                "seckill_table_rows",
                "Rows of each table (estimate; exact on small tables)",
                &["table"],
            ),
            oldest_age: add.gauges(
                "seckill_table_oldest_age_seconds",
                "Age of the oldest row of each table the retention job prunes, in seconds",
                &["table"],
            ),
        }
    }
}

/// Lottery sales (docs/lottery.md): registrations, draws, codes by outcome, the waitlist's moves.
pub struct LotteryMetrics {
    /// Registrations by `outcome`: `registered`, `again`, `rate_limited`, `closed`,
    /// `challenge_failed`.
    pub registrations: IntCounterVec,
    /// Draws made, one per item.
    pub draws: IntCounter,
    /// Codes by `outcome`: `issued` (draw and waitlist), and at the settling `used`, `expired`,
    /// `revoked`.
    pub codes: IntCounterVec,
    /// Codes handed to the next on a waitlist.
    pub waitlist_advances: IntCounter,
    /// Drawn items whose state Redis had lost, written again from PostgreSQL.
    pub rederived: IntCounter,
}

impl LotteryMetrics {
    fn register(add: &Registrar) -> Self {
        Self {
            registrations: add.counters(
                "seckill_lottery_registrations_total",
                "Lottery registrations by outcome",
                &["outcome"],
            ),
            draws: add.counter("seckill_lottery_draws_total", "Lottery draws made, one per item"),
            codes: add.counters(
                "seckill_lottery_codes_total",
                "Lottery codes by outcome (issued; used, expired, revoked when the sale is settled)",
                &["outcome"],
            ),
            waitlist_advances: add.counter(
                "seckill_lottery_waitlist_advances_total",
                "Codes handed to the next on a lottery waitlist",
            ),
            rederived: add.counter(
                "seckill_lottery_rederived_total",
                "Drawn lottery items whose state Redis had lost, written again from PostgreSQL",
            ),
        }
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
