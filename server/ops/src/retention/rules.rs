//! The retention's decisions as plain functions: before when a table's rows may go.

use chrono::{DateTime, Duration, Utc};

/// Rows written before this may be pruned: older than `days` by `now`. No sale moves it,
/// live or not: what a sale still needs is kept row by row by the table's owner (the outbox
/// row of a pre-order not yet completed), never by holding every table back to the start
/// of the oldest sale still open, which one sale left open for weeks would make everyone's.
pub(crate) fn cutoff(now: DateTime<Utc>, days: u32) -> DateTime<Utc> {
    now - Duration::days(days.into())
}

/// Seconds from `oldest` to `now`, never below zero (a clock a little behind the database's).
pub(crate) fn age_s(now: DateTime<Utc>, oldest: DateTime<Utc>) -> i64 {
    (now - oldest).num_seconds().max(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_go_after_their_retention() {
        let now = DateTime::from_timestamp(100 * 86_400, 0).expect("a time");
        let week_ago = now - Duration::days(7);
        assert_eq!(cutoff(now, 7), week_ago);
        assert_eq!(cutoff(now, 0), now);
        assert_eq!(age_s(now, week_ago), 7 * 86_400);
        assert_eq!(age_s(week_ago, now), 0);
    }
}
