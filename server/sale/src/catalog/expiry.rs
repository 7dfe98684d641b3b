//! How long an activity's keys stay in Redis: until the activity's end plus a grace. Pre-warm
//! and every re-derivation set that expiry on the keys they write (stock, buyer records,
//! seat map, restore set); the scripts that create one of the item's keys later
//! (`lua/buy.lua`: buyer records, deduction markers; `lua/restore_order.lua`: the restore
//! set) copy the stock key's expiry inside the script, so a buy pays no extra round trip
//! for it. Rate windows, stored answers and the fence carry short expiries of their own.

use chrono::{DateTime, Duration, Utc};

use crate::catalog::rules::PAY_TIMEOUT_RANGE_S;

/// How long after its end an activity's keys are kept: an order placed in the last second
/// may wait the longest pay timeout before its units are given back to Redis, and a day
/// more leaves room for retried give-backs and the reconciliation runs after the sale.
pub fn grace() -> Duration {
    Duration::seconds(*PAY_TIMEOUT_RANGE_S.end()) + Duration::days(1)
}

/// When the keys of an activity ending at `ends_at` expire. Already past for an activity
/// that ended longer ago than the grace: its keys then go at once, as they would have.
pub fn keys_expire_at(ends_at: DateTime<Utc>) -> DateTime<Utc> {
    ends_at + grace()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_outlive_the_end_by_the_longest_pay_timeout_and_a_day() {
        let ends_at = "2026-11-11T01:00:00Z"
            .parse::<DateTime<Utc>>()
            .expect("time");
        assert_eq!(
            keys_expire_at(ends_at),
            "2026-11-13T01:00:00Z"
                .parse::<DateTime<Utc>>()
                .expect("time")
        );
        assert!(grace() > Duration::seconds(*PAY_TIMEOUT_RANGE_S.end()));
    }
}
