//! Every Prometheus metric of the process, declared in one place (names start with
//! `seckill_`). Later capabilities add their metrics here, not where they are used.

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
    /// Buy requests per funnel stage (SPEC §3.1): `outcome` is `pass` or the code that stopped them.
    pub funnel: IntCounterVec,
    /// Pre-orders per group-commit batch.
    pub preorder_batch_size: prometheus::Histogram,
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
        for collector in [
            Box::new(http_requests.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(http_duration.clone()),
            Box::new(admin_logins.clone()),
            Box::new(dependency_up.clone()),
            Box::new(funnel.clone()),
            Box::new(preorder_batch_size.clone()),
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

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let text = metrics.render();
        for name in [
            "seckill_http_requests_total",
            "seckill_http_request_duration_seconds_bucket",
            "seckill_admin_logins_total",
            "seckill_dependency_up",
            "seckill_funnel_requests_total",
            "seckill_preorder_batch_size_bucket",
        ] {
            assert!(text.contains(name), "{name} missing from:\n{text}");
        }
    }
}
