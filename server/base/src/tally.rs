//! The path counters: what one buy request costs the stores, counted where each call is
//! made, and added up per outcome (a successful buy, a refused one) in
//! `seckill_buy_path_calls_total` and `seckill_buy_path_requests_total`.
//!
//! A buy carries a [`Tally`] in a task-local for as long as it runs (its own task and the
//! task its steps 7–12 run in); the Redis connection, the PostgreSQL statements of the buy
//! path and the pre-order writer add to the tally in scope, and do nothing outside a buy.
//! Work shared by many buys is counted per batch and divided: a group-commit batch's
//! statement goes to its members in equal shares ([`Share`]), and the background
//! publisher's publishes and its one outbox update per batch go straight to the successful
//! buys' totals, since only a committed pre-order is published.
//!
//! Counting is a relaxed atomic add on the request's own tally; nothing locks.

use std::{
    future::Future,
    sync::atomic::{AtomicU64, Ordering},
    sync::Arc,
};

use prometheus::{Counter, IntCounter};

use crate::metrics::Metrics;

/// What a buy can cost, each counted in calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Call {
    /// A request sent to Redis and its answer awaited (a pipeline is one).
    RedisRoundTrip,
    /// A command sent to Redis (each of a pipeline's; a script's call is one).
    RedisCommand,
    /// A statement sent to PostgreSQL.
    DbStatement,
    /// A PostgreSQL transaction, a statement in its own included.
    DbTransaction,
    /// A message published to RabbitMQ.
    MqPublish,
}

impl Call {
    pub const ALL: [Call; 5] = [
        Call::RedisRoundTrip,
        Call::RedisCommand,
        Call::DbStatement,
        Call::DbTransaction,
        Call::MqPublish,
    ];

    /// The `call` label of `seckill_buy_path_calls_total`.
    pub fn label(self) -> &'static str {
        match self {
            Call::RedisRoundTrip => "redis_round_trip",
            Call::RedisCommand => "redis_command",
            Call::DbStatement => "db_statement",
            Call::DbTransaction => "db_transaction",
            Call::MqPublish => "mq_publish",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// How a buy request ended, for the totals it is added to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Answered 200: a pre-order was written (or replayed).
    Success,
    /// Answered anything else.
    Refused,
}

impl Outcome {
    pub const ALL: [Outcome; 2] = [Outcome::Success, Outcome::Refused];

    pub fn label(self) -> &'static str {
        match self {
            Outcome::Success => "success",
            Outcome::Refused => "refused",
        }
    }

    pub fn of_status(status: u16) -> Self {
        if status == 200 {
            Outcome::Success
        } else {
            Outcome::Refused
        }
    }
}

/// Calls are kept in millionths, so a batch's statement can be shared by its members.
const UNIT: u64 = 1_000_000;

/// One request's (or one batch's) calls so far.
#[derive(Debug, Default)]
pub struct Tally([AtomicU64; 5]);

impl Tally {
    fn add_units(&self, call: Call, millionths: u64) {
        self.0[call.index()].fetch_add(millionths, Ordering::Relaxed);
    }

    /// The calls of `call` counted so far.
    pub fn calls(&self, call: Call) -> f64 {
        self.0[call.index()].load(Ordering::Relaxed) as f64 / UNIT as f64
    }

    /// Each member's part of this batch's calls when `members` share them.
    pub fn share(&self, members: usize) -> Share {
        let members = members.max(1) as u64;
        Share(Call::ALL.map(|call| self.0[call.index()].load(Ordering::Relaxed) / members))
    }
}

/// One member's part of a batch's calls, in millionths.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Share([u64; 5]);

impl Share {
    /// Adds this share to the tally of the buy in scope, if any.
    pub fn count(self) {
        let _ = TALLY.try_with(|tally| {
            for call in Call::ALL {
                tally.add_units(call, self.0[call.index()]);
            }
        });
    }
}

tokio::task_local! {
    static TALLY: Arc<Tally>;
}

/// Counts `calls` of `call` on the tally in scope; nothing outside a buy or a batch.
pub fn count(call: Call, calls: u64) {
    let _ = TALLY.try_with(|tally| tally.add_units(call, calls * UNIT));
}

/// One Redis round trip carrying `commands` commands.
pub fn redis(commands: usize) {
    count(Call::RedisRoundTrip, 1);
    count(Call::RedisCommand, commands as u64);
}

/// One statement run in a transaction of its own.
pub fn db_statement_alone() {
    count(Call::DbStatement, 1);
    count(Call::DbTransaction, 1);
}

/// Each of `members`' part of the calls counted so far on the batch's tally in scope.
pub fn current_share(members: usize) -> Share {
    TALLY
        .try_with(|tally| tally.share(members))
        .unwrap_or_default()
}

/// Runs `work` with `tally` in scope.
pub fn scoped<F: Future>(tally: Arc<Tally>, work: F) -> impl Future<Output = F::Output> {
    TALLY.scope(tally, work)
}

/// `work` for a task of its own, counting on the tally of the buy that spawns it (when a
/// buy does).
pub fn carried<F: Future>(work: F) -> impl Future<Output = F::Output> {
    let tally = TALLY.try_with(Arc::clone).unwrap_or_default();
    TALLY.scope(tally, work)
}

/// The totals per outcome, as `seckill_buy_path_*` count them; every label resolved once.
#[derive(Clone)]
pub struct PathTotals {
    requests: [IntCounter; 2],
    calls: [[Counter; 5]; 2],
}

impl PathTotals {
    pub fn of(metrics: &Metrics) -> Self {
        let path = &metrics.buy_path;
        Self {
            requests: Outcome::ALL
                .map(|outcome| path.requests.with_label_values(&[outcome.label()])),
            calls: Outcome::ALL.map(|outcome| {
                Call::ALL.map(|call| {
                    path.calls
                        .with_label_values(&[outcome.label(), call.label()])
                })
            }),
        }
    }

    /// Adds a finished request's tally to its outcome's totals.
    pub fn finished(&self, outcome: Outcome, tally: &Tally) {
        self.requests[outcome as usize].inc();
        for call in Call::ALL {
            let calls = tally.calls(call);
            if calls > 0.0 {
                self.calls[outcome as usize][call.index()].inc_by(calls);
            }
        }
    }

    /// Calls made for the successful buys as a whole, after their answer (the publishes,
    /// the stored answers).
    pub fn after_success(&self, call: Call, calls: u64) {
        self.calls[Outcome::Success as usize][call.index()].inc_by(calls as f64);
    }

    /// Requests finished with `outcome` so far.
    pub fn requests(&self, outcome: Outcome) -> u64 {
        self.requests[outcome as usize].get()
    }

    /// Calls of `call` counted for `outcome` so far.
    pub fn calls(&self, outcome: Outcome, call: Call) -> f64 {
        self.calls[outcome as usize][call.index()].get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn calls_count_on_the_tally_in_scope_and_nowhere_else() {
        redis(3);
        let tally = Arc::new(Tally::default());
        scoped(tally.clone(), async {
            redis(1);
            redis(4);
            db_statement_alone();
            tokio::spawn(carried(async { count(Call::MqPublish, 1) }))
                .await
                .expect("joined");
        })
        .await;
        assert_eq!(tally.calls(Call::RedisRoundTrip), 2.0);
        assert_eq!(tally.calls(Call::RedisCommand), 5.0);
        assert_eq!(tally.calls(Call::DbStatement), 1.0);
        assert_eq!(tally.calls(Call::DbTransaction), 1.0);
        assert_eq!(tally.calls(Call::MqPublish), 1.0);
    }

    #[tokio::test]
    async fn a_batch_statement_is_shared_by_its_members() {
        let batch = Arc::new(Tally::default());
        scoped(batch.clone(), async { db_statement_alone() }).await;
        let share = batch.share(4);
        let members: Vec<_> = (0..4).map(|_| Arc::new(Tally::default())).collect();
        for member in &members {
            scoped(member.clone(), async move { share.count() }).await;
        }
        let total: f64 = members.iter().map(|m| m.calls(Call::DbStatement)).sum();
        assert!((total - 1.0).abs() < 1e-5, "{total}");
        assert!((members[0].calls(Call::DbTransaction) - 0.25).abs() < 1e-9);
    }

    #[test]
    fn totals_are_kept_per_outcome() {
        let metrics = Metrics::new();
        let totals = PathTotals::of(&metrics);
        let tally = Tally::default();
        tally.add_units(Call::RedisCommand, 2 * UNIT);
        totals.finished(Outcome::of_status(200), &tally);
        totals.finished(Outcome::of_status(200), &tally);
        totals.finished(Outcome::of_status(429), &Tally::default());
        totals.after_success(Call::MqPublish, 2);
        assert_eq!(totals.requests(Outcome::Success), 2);
        assert_eq!(totals.requests(Outcome::Refused), 1);
        assert_eq!(totals.calls(Outcome::Success, Call::RedisCommand), 4.0);
        assert_eq!(totals.calls(Outcome::Refused, Call::RedisCommand), 0.0);
        assert_eq!(totals.calls(Outcome::Success, Call::MqPublish), 2.0);
        let text = metrics.render();
        assert!(text
            .contains(r#"seckill_buy_path_calls_total{call="redis_command",outcome="success"} 4"#));
        assert!(text.contains(r#"seckill_buy_path_requests_total{outcome="refused"} 1"#));
    }
}
