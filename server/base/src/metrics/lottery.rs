//! Lottery sales' metrics (docs/lottery.md): registrations, draws, codes by outcome, the
//! waitlist's moves.

use prometheus::{Histogram, IntCounter, IntCounterVec};

use super::{buckets, Registrar};

/// Lottery sales (docs/lottery.md): registrations, draws, codes by outcome, the waitlist's moves.
pub struct LotteryMetrics {
    /// Registrations by `outcome`: `registered`, `again`, `rate_limited`, `closed`,
    /// `challenge_failed`.
    pub registrations: IntCounterVec,
    /// Registrations per call of `lua/lottery_register.lua` (those of an item that reach an
    /// instance together go in one call).
    pub registration_call_size: Histogram,
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
    pub(super) fn register(add: &Registrar) -> Self {
        Self {
            registrations: add.counters(
                "seckill_lottery_registrations_total",
                "Lottery registrations by outcome",
                &["outcome"],
            ),
            registration_call_size: add.histogram(
                "seckill_lottery_registration_call_size",
                "Lottery registrations per Redis call",
                buckets(1.0, 11),
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
