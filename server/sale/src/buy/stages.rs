//! The funnel's stages as `seckill_funnel_requests_total` counts them: every request is
//! counted at each stage it passes, and at the stage that stops it, by the code it is
//! answered with.
//!
//! A buy passes a dozen stages, so each (stage, outcome) counter is looked up in the metric
//! family once, on its first use, and kept: counting is then an index and an atomic add,
//! where the family's lookup hashes both label values and takes a lock every time. Only
//! counters used are created, so `/metrics` shows the series it always showed.
//!
//! A rehearsal's synthetic buyers are counted apart, in
//! `seckill_rehearsal_funnel_requests_total`: a buy runs with its traffic in a task-local
//! ([`scoped`], carried into the task of its steps 7–12 by [`carried`]), said to be a
//! rehearsal's once its token is read ([`mark_rehearsal`]); what it passed before is counted
//! from then on, so no stage of a rehearsal's request reaches the real sale's counters.

use prometheus::{IntCounter, IntCounterVec};
use std::{cell::Cell, future::Future, sync::OnceLock};

use crate::buy::rules::Outcome;
use base::metrics::Metrics;

/// A stage of the funnel, in the order a request meets them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    Admission,
    Validate,
    Auth,
    HotkeyBlock,
    Catalogue,
    Phase,
    SoldOutFlag,
    Idempotency,
    HotkeyLimit,
    RateLimit,
    Challenge,
    Deduction,
    Preorder,
}

impl Stage {
    const ALL: [Stage; 13] = [
        Stage::Admission,
        Stage::Validate,
        Stage::Auth,
        Stage::HotkeyBlock,
        Stage::Catalogue,
        Stage::Phase,
        Stage::SoldOutFlag,
        Stage::Idempotency,
        Stage::HotkeyLimit,
        Stage::RateLimit,
        Stage::Challenge,
        Stage::Deduction,
        Stage::Preorder,
    ];

    /// The `stage` label.
    fn label(self) -> &'static str {
        match self {
            Stage::Admission => "admission",
            Stage::Validate => "validate",
            Stage::Auth => "auth",
            Stage::HotkeyBlock => "hotkey_block",
            Stage::Catalogue => "catalogue",
            Stage::Phase => "phase",
            Stage::SoldOutFlag => "sold_out_flag",
            Stage::Idempotency => "idempotency",
            Stage::HotkeyLimit => "hotkey_limit",
            Stage::RateLimit => "rate_limit",
            Stage::Challenge => "challenge",
            Stage::Deduction => "deduction",
            Stage::Preorder => "preorder",
        }
    }
}

/// What a stage counts of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mark {
    Pass,
    /// Stopped, answered with this outcome.
    Stop(Outcome),
    /// Answered with the stored answer of its request id.
    Replay,
    /// PostgreSQL refused a pre-order Redis had granted.
    Overruled,
    /// A request id that had an order already.
    Duplicate,
}

impl Mark {
    const COUNT: usize = Outcome::ALL.len() + 4;

    fn index(self) -> usize {
        let outcomes = Outcome::ALL.len();
        match self {
            Mark::Pass => 0,
            Mark::Stop(outcome) => 1 + outcome as usize,
            Mark::Replay => outcomes + 1,
            Mark::Overruled => outcomes + 2,
            Mark::Duplicate => outcomes + 3,
        }
    }

    /// The `outcome` label.
    fn label(self) -> &'static str {
        match self {
            Mark::Pass => "pass",
            Mark::Stop(outcome) => outcome.code(),
            Mark::Replay => "REPLAY",
            Mark::Overruled => "OVERRULED",
            Mark::Duplicate => "DUPLICATE",
        }
    }
}

tokio::task_local! {
    /// Whether the buy in scope is a rehearsal's.
    static REHEARSAL: Cell<bool>;
}

/// Runs a buy's `work` as a sale's traffic until [`mark_rehearsal`] says otherwise.
pub fn scoped<F: Future>(work: F) -> impl Future<Output = F::Output> {
    REHEARSAL.scope(Cell::new(false), work)
}

/// `work` for a task of its own, counted as the buy that spawns it is.
pub fn carried<F: Future>(work: F) -> impl Future<Output = F::Output> {
    REHEARSAL.scope(Cell::new(is_rehearsal()), work)
}

/// The buy in scope is a rehearsal's: its stages are counted apart from now on.
pub fn mark_rehearsal() {
    let _ = REHEARSAL.try_with(|rehearsal| rehearsal.set(true));
}

fn is_rehearsal() -> bool {
    REHEARSAL.try_with(Cell::get).unwrap_or(false)
}

type Counters = [[OnceLock<IntCounter>; Mark::COUNT]; Stage::ALL.len()];

/// The counters of `seckill_funnel_requests_total` (and of a rehearsal's requests), each
/// resolved on its first use.
pub struct StageCounters {
    metrics: Metrics,
    counters: Counters,
    rehearsal: Counters,
}

impl StageCounters {
    pub fn new(metrics: Metrics) -> Self {
        Self {
            metrics,
            counters: std::array::from_fn(|_| std::array::from_fn(|_| OnceLock::new())),
            rehearsal: std::array::from_fn(|_| std::array::from_fn(|_| OnceLock::new())),
        }
    }

    pub fn count(&self, stage: Stage, mark: Mark) {
        let (counters, family): (&Counters, &IntCounterVec) = if is_rehearsal() {
            (&self.rehearsal, &self.metrics.rehearsal_funnel)
        } else {
            (&self.counters, &self.metrics.funnel)
        };
        counters[stage as usize][mark.index()]
            .get_or_init(|| family.with_label_values(&[stage.label(), mark.label()]))
            .inc();
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn marks() -> Vec<Mark> {
        let mut marks = vec![Mark::Pass, Mark::Replay, Mark::Overruled, Mark::Duplicate];
        marks.extend(Outcome::ALL.map(Mark::Stop));
        marks
    }

    #[test]
    fn every_stage_and_mark_has_a_counter_of_its_own() {
        for (index, stage) in Stage::ALL.into_iter().enumerate() {
            assert_eq!(stage as usize, index, "{stage:?} out of place");
        }
        let mut indexes: Vec<usize> = marks().into_iter().map(Mark::index).collect();
        indexes.sort_unstable();
        assert_eq!(indexes, (0..Mark::COUNT).collect::<Vec<_>>());
    }

    #[test]
    fn a_kept_counter_counts_in_the_series_it_always_did() {
        let counters = StageCounters::new(Metrics::new());
        counters.count(Stage::Admission, Mark::Pass);
        counters.count(Stage::Admission, Mark::Pass);
        counters.count(Stage::SoldOutFlag, Mark::Stop(Outcome::SoldOut));
        counters.count(Stage::Idempotency, Mark::Replay);
        let text = counters.metrics().render();
        for counted in [
            r#"seckill_funnel_requests_total{outcome="pass",stage="admission"} 2"#,
            r#"seckill_funnel_requests_total{outcome="SOLD_OUT",stage="sold_out_flag"} 1"#,
            r#"seckill_funnel_requests_total{outcome="REPLAY",stage="idempotency"} 1"#,
        ] {
            assert!(text.contains(counted), "{counted} missing from:\n{text}");
        }
        // Only what was counted is a series.
        assert_eq!(text.matches("seckill_funnel_requests_total{").count(), 3);
    }
}
