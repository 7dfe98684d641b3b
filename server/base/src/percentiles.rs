//! Percentiles of recorded samples by the nearest-rank rule: the smallest sample at or
//! above which `p` of all samples lie. Shared by the rehearsal's load report and the
//! `seckill-load` benchmark tool, so both read latencies the same way. And quantiles of a
//! histogram's cumulative buckets, as the dashboard and the baselines read them.

/// The `p` percentile (`0.0..=1.0`) of `sorted` (ascending); `None` without samples.
pub fn nearest_rank(sorted: &[u64], p: f64) -> Option<u64> {
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted.get(rank.clamp(1, sorted.len().max(1)) - 1).copied()
}
/// The `q` quantile of cumulative bucket counts, interpolated within its bucket the way
/// Prometheus's `histogram_quantile` does; the highest finite bound when it falls in `+Inf`.
pub fn quantile(buckets: &[(f64, u64)], q: f64) -> Option<f64> {
    let total = buckets.last()?.1;
    if total == 0 {
        return None;
    }
    let rank = q * total as f64;
    let mut lower = (0.0, 0u64);
    for &(bound, count) in buckets {
        if count as f64 >= rank {
            if bound.is_infinite() {
                return Some(lower.0);
            }
            let within = (count - lower.1) as f64;
            let share = if within == 0.0 {
                1.0
            } else {
                (rank - lower.1 as f64) / within
            };
            return Some(lower.0 + (bound - lower.0) * share);
        }
        lower = (bound, count);
    }
    Some(lower.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_the_nearest_rank() {
        let samples: Vec<u64> = (1..=100).collect();
        assert_eq!(nearest_rank(&samples, 0.5), Some(50));
        assert_eq!(nearest_rank(&samples, 0.99), Some(99));
        assert_eq!(nearest_rank(&samples, 0.999), Some(100));
        assert_eq!(nearest_rank(&samples, 0.0), Some(1));
        assert_eq!(nearest_rank(&[7], 0.99), Some(7));
        assert_eq!(nearest_rank(&[], 0.5), None);
    }
}
