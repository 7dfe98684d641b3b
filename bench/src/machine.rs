//! The whole machine's CPU time, from the first line of `/proc/stat`.

use std::fs;

/// Ticks of every core since boot.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct MachineTicks {
    /// user, nice, system, irq, softirq and steal.
    pub busy: u64,
    /// `busy` plus idle and iowait.
    pub total: u64,
}

impl MachineTicks {
    /// Now; zero where `/proc/stat` cannot be read (not Linux).
    pub fn now() -> Self {
        Self::parse(&fs::read_to_string("/proc/stat").unwrap_or_default())
    }

    fn parse(stat: &str) -> Self {
        let fields: Vec<u64> = stat
            .lines()
            .next()
            .unwrap_or_default()
            .split_whitespace()
            .skip(1)
            .map(|field| field.parse().unwrap_or(0))
            .collect();
        let sum = |indices: &[usize]| -> u64 {
            indices
                .iter()
                .map(|&i| fields.get(i).copied().unwrap_or(0))
                .sum()
        };
        let busy = sum(&[0, 1, 2, 5, 6, 7]);
        Self {
            busy,
            total: busy + sum(&[3, 4]),
        }
    }

    /// The share of the machine that was busy from `before` to now (0 to 1); `None` when
    /// no tick passed.
    pub fn busy_share_since(self, before: Self) -> Option<f64> {
        let total = self.total.checked_sub(before.total).filter(|&t| t > 0)?;
        Some(self.busy.saturating_sub(before.busy) as f64 / total as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_counts_every_field_but_idle_and_iowait() {
        let ticks = MachineTicks::parse("cpu  10 1 5 100 7 2 3 4 0 0\ncpu0 1 2 3\n");
        assert_eq!(
            ticks,
            MachineTicks {
                busy: 10 + 1 + 5 + 2 + 3 + 4,
                total: 25 + 100 + 7
            }
        );
    }

    #[test]
    fn the_share_is_of_the_ticks_that_passed() {
        let before = MachineTicks {
            busy: 100,
            total: 400,
        };
        let after = MachineTicks {
            busy: 175,
            total: 500,
        };
        assert_eq!(after.busy_share_since(before), Some(0.75));
        assert_eq!(before.busy_share_since(before), None);
    }
}
