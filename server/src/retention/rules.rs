//! The retention's decisions as plain functions: before when a table's rows may go.

use chrono::{DateTime, Duration, Utc};

/// Rows written before this may be pruned: older than `days` by `now`, and, for rows a
/// sale that is not over may still need, older than `needed_since` too.
pub(crate) fn cutoff(
    now: DateTime<Utc>,
    days: u32,
    needed_since: Option<DateTime<Utc>>,
    serves_live_sales: bool,
) -> DateTime<Utc> {
    let aged = now - Duration::days(days.into());
    match needed_since {
        Some(needed) if serves_live_sales => aged.min(needed),
        _ => aged,
    }
}

/// Seconds from `oldest` to `now`, never below zero (a clock a little behind the database's).
pub(crate) fn age_s(now: DateTime<Utc>, oldest: DateTime<Utc>) -> i64 {
    (now - oldest).num_seconds().max(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_go_after_their_retention_unless_a_live_sale_needs_them() {
        let now = DateTime::from_timestamp(100 * 86_400, 0).expect("a time");
        let week_ago = now - Duration::days(7);
        assert_eq!(cutoff(now, 7, None, true), week_ago);
        let sale_start = now - Duration::days(30);
        assert_eq!(cutoff(now, 7, Some(sale_start), true), sale_start);
        assert_eq!(cutoff(now, 7, Some(sale_start), false), week_ago);
        // A sale that starts later than the retention needs nothing older.
        assert_eq!(
            cutoff(now, 7, Some(now - Duration::days(1)), true),
            week_ago
        );
        assert_eq!(age_s(now, week_ago), 7 * 86_400);
        assert_eq!(age_s(week_ago, now), 0);
    }
}
