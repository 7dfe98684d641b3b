//! Rules of the order pipeline apart from I/O: which pre-orders of a batch the
//! database stock still covers, and how long the outbox relay waits before a row's next
//! attempt.

use std::time::Duration;

/// A pre-order the create-order consumer wants to complete, in arrival order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Claim {
    pub quantity: i64,
}

/// Splits one item's claims (oldest first) into those `left` units cover and those they do
/// not, first come first served: an order that does not fit fails, a later smaller one
/// may still fit. Returns the indexes of the fitting claims.
pub fn fit_within_stock(claims: &[Claim], left: i64) -> Vec<usize> {
    let mut left = left;
    let mut fitting = Vec::with_capacity(claims.len());
    for (index, claim) in claims.iter().enumerate() {
        if claim.quantity > 0 && claim.quantity <= left {
            left -= claim.quantity;
            fitting.push(index);
        }
    }
    fitting
}

/// Longest wait between two relay attempts at one outbox row.
pub const MAX_RELAY_BACKOFF: Duration = Duration::from_secs(300);

/// Wait before the next attempt after `attempts` failed ones: `base`, doubled per failure,
/// at most [`MAX_RELAY_BACKOFF`], so a broker outage is not hammered by every pending row.
pub fn relay_backoff(attempts: i32, base: Duration) -> Duration {
    let doublings = attempts.saturating_sub(1).clamp(0, 20) as u32;
    base.saturating_mul(1 << doublings).min(MAX_RELAY_BACKOFF)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims(quantities: &[i64]) -> Vec<Claim> {
        quantities
            .iter()
            .map(|&quantity| Claim { quantity })
            .collect()
    }

    #[test]
    fn stock_covers_claims_first_come_first_served() {
        assert_eq!(fit_within_stock(&claims(&[1, 2, 1]), 10), vec![0, 1, 2]);
        assert_eq!(fit_within_stock(&claims(&[2, 2, 1]), 3), vec![0, 2]);
        assert_eq!(fit_within_stock(&claims(&[1, 1]), 0), Vec::<usize>::new());
        assert_eq!(fit_within_stock(&claims(&[3]), 3), vec![0]);
    }

    #[test]
    fn a_claim_without_units_never_fits() {
        assert_eq!(fit_within_stock(&claims(&[0, -1, 1]), 5), vec![2]);
    }

    #[test]
    fn relay_backoff_doubles_up_to_a_ceiling() {
        let base = Duration::from_secs(1);
        assert_eq!(relay_backoff(0, base), base);
        assert_eq!(relay_backoff(1, base), base);
        assert_eq!(relay_backoff(2, base), Duration::from_secs(2));
        assert_eq!(relay_backoff(4, base), Duration::from_secs(8));
        assert_eq!(relay_backoff(30, base), MAX_RELAY_BACKOFF);
        assert_eq!(relay_backoff(i32::MAX, base), MAX_RELAY_BACKOFF);
    }
}
