//! Numbered pages of the admin listings (orders, dead letters, audit): page 1 is the newest,
//! and a page number that cannot be a page is refused before any query runs.

/// Rows skipped before `page` (1-based) when pages hold `per_page` rows; `None` for a page
/// below 1 or one so far out that the offset would overflow.
pub fn offset(page: i64, per_page: i64) -> Option<i64> {
    page.checked_sub(1)
        .filter(|skipped| *skipped >= 0)
        .and_then(|skipped| skipped.checked_mul(per_page))
}

/// What a refused page number is told.
pub fn refusal(page: i64) -> String {
    format!("page must be 1 or more, not {page}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_start_at_one_and_never_overflow() {
        assert_eq!(offset(1, 50), Some(0));
        assert_eq!(offset(3, 50), Some(100));
        for bad in [0, -1, i64::MIN, i64::MAX] {
            assert_eq!(offset(bad, 50), None, "page {bad}");
        }
    }
}
