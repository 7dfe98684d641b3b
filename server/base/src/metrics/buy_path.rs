//! The path counters of `baselines::path`: what buy requests cost Redis, PostgreSQL and
//! RabbitMQ, per outcome (read by the funnel benchmark as calls per successful buy).

use prometheus::{CounterVec, IntCounterVec, Opts};

use super::Registrar;

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
    pub(super) fn register(add: &Registrar) -> Self {
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
