//! One instance's counts over a sliding second: per kind, four Space-Saving sketches of a
//! quarter second each. Every quarter the oldest is cleared for the next quarter. A report
//! goes out every eighth of a second: at the end of a quarter, the sum of the four (the
//! second just ended); half-way through one, the last three and the half filled so far, as
//! a rate over those 875 ms. Reporting twice a quarter halves the wait between a key
//! crossing its threshold and the leader hearing of it (up to 250 ms otherwise), without the
//! memory of twice the quarters.
//!
//! The sum's error per key stays within `n / CAPACITY` for the `n` keys of the kind the
//! second counted: each quarter's estimate is off by at most its own `n_q / CAPACITY`, up
//! (a counter that inherited another key's count) or down (a key without a counter in that
//! quarter counts nothing there). A key at twice its threshold is always reported and one
//! at half never, as long as `n / CAPACITY` stays below half the threshold: with 4,096
//! counters and a threshold of 50/s, up to about 100,000 counted requests per second of one
//! kind on one instance.

use contract::{HotKeyId, HotKeyKind};
use std::{collections::HashMap, net::IpAddr};

use crate::hotkeys::sketch::SpaceSaving;

/// Counters per quarter and kind.
pub(crate) const CAPACITY: usize = 4096;
/// Quarters in the window.
pub(crate) const QUARTERS: usize = 4;
/// Milliseconds per quarter.
pub(crate) const QUARTER_MS: u64 = 250;
/// The report period: twice a quarter.
pub(crate) const REPORT_MS: u64 = QUARTER_MS / 2;
/// The window every rate is counted over.
pub(crate) const WINDOW_MS: u64 = QUARTER_MS * QUARTERS as u64;
/// Keys per kind an instance reports: the leader adds up the instances' tops, so a key
/// hot only in the sum must be in each instance's top; 64 keys per kind is room for every
/// key above threshold / 64 when the instances' traffic is alike.
pub(crate) const REPORTED: usize = 64;

/// What one request names: an item, a buyer, an address; absent parts are not counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Sample {
    pub(crate) item: Option<i64>,
    pub(crate) user: Option<i64>,
    pub(crate) ip: Option<IpAddr>,
}

impl Sample {
    fn keys(self) -> impl Iterator<Item = HotKeyId> {
        [
            self.item.map(HotKeyId::Item),
            self.user.map(HotKeyId::User),
            self.ip.map(HotKeyId::Ip),
        ]
        .into_iter()
        .flatten()
    }
}

/// The sliding second of one instance.
pub(crate) struct Window {
    /// Per kind (in `HotKeyKind::ALL` order), a ring of quarters; `current` is being filled.
    quarters: [Vec<SpaceSaving<HotKeyId>>; 3],
    current: usize,
}

/// One instance's top keys per kind over the last second, with their rates per second.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Tops {
    pub(crate) keys: Vec<(HotKeyId, u64)>,
}

fn slot(kind: HotKeyKind) -> usize {
    match kind {
        HotKeyKind::Item => 0,
        HotKeyKind::User => 1,
        HotKeyKind::Ip => 2,
    }
}

impl Window {
    pub(crate) fn new() -> Self {
        let ring = || (0..QUARTERS).map(|_| SpaceSaving::new(CAPACITY)).collect();
        Self {
            quarters: [ring(), ring(), ring()],
            current: 0,
        }
    }

    pub(crate) fn record(&mut self, sample: Sample) {
        for key in sample.keys() {
            self.quarters[slot(key.kind())][self.current].add(key, 1);
        }
    }

    /// The top keys per kind over what the quarters hold, as rates per second: the
    /// counts cover the last `covered_ms` (the window at the end of a quarter; 125 ms less
    /// half-way through one).
    pub(crate) fn report(&self, covered_ms: u64) -> Tops {
        let covered_ms = covered_ms.max(1);
        let mut keys = Vec::new();
        for ring in &self.quarters {
            let mut summed: HashMap<HotKeyId, u64> = HashMap::new();
            for quarter in ring {
                for counter in quarter.counters() {
                    *summed.entry(counter.key).or_default() += counter.count;
                }
            }
            let mut top: Vec<(HotKeyId, u64)> = summed.into_iter().collect();
            top.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
            top.truncate(REPORTED);
            keys.extend(
                top.into_iter()
                    .map(|(key, count)| (key, (count * 1000 + covered_ms / 2) / covered_ms)),
            );
        }
        Tops { keys }
    }

    /// Ends the current quarter: the oldest is cleared to be the next one.
    pub(crate) fn rotate(&mut self) {
        self.current = (self.current + 1) % QUARTERS;
        for ring in &mut self.quarters {
            ring[self.current].clear();
        }
    }

    /// The most memory the window can hold, whatever it is fed.
    pub(crate) fn bound_bytes(&self) -> usize {
        self.quarters
            .iter()
            .flatten()
            .map(SpaceSaving::bound_bytes)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(id: i64) -> Sample {
        Sample {
            item: Some(7),
            user: Some(id),
            ip: None,
        }
    }

    fn count_of(tops: &Tops, key: HotKeyId) -> Option<u64> {
        tops.keys.iter().find(|(k, _)| *k == key).map(|(_, n)| *n)
    }

    #[test]
    fn a_report_covers_the_last_four_quarters_only() {
        let mut window = Window::new();
        for quarter in 0..6 {
            for _ in 0..10 {
                window.record(user(1));
            }
            let tops = window.report(WINDOW_MS);
            window.rotate();
            let expected = 10 * (quarter + 1).min(QUARTERS as u64);
            assert_eq!(count_of(&tops, HotKeyId::User(1)), Some(expected));
            assert_eq!(count_of(&tops, HotKeyId::Item(7)), Some(expected));
        }
        // Nothing more: the key fades out quarter by quarter.
        for left in (0..QUARTERS as u64).rev() {
            let tops = window.report(WINDOW_MS);
            window.rotate();
            assert_eq!(
                count_of(&tops, HotKeyId::User(1)),
                (left > 0).then_some(10 * left)
            );
        }
    }

    #[test]
    fn half_way_through_a_quarter_the_rate_covers_what_the_quarters_hold() {
        // 40 a second, steadily: 10 a quarter, 5 in the half quarter so far.
        let mut window = Window::new();
        for _ in 0..QUARTERS {
            for _ in 0..10 {
                window.record(user(1));
            }
            window.rotate();
        }
        for _ in 0..5 {
            window.record(user(1));
        }
        let tops = window.report(WINDOW_MS - REPORT_MS);
        assert_eq!(count_of(&tops, HotKeyId::User(1)), Some(40));
    }

    #[test]
    fn a_million_distinct_users_in_ten_seconds_keep_the_memory_bounded_and_the_hot_one_found() {
        let mut window = Window::new();
        let bound = window.bound_bytes();
        let hot = HotKeyId::User(-1);
        // 100,000 requests a second, 40 of them a second by the hot user (twice a threshold
        // of 20/s), the rest by a million distinct users; a report at the end of every quarter.
        let mut next_user = 0i64;
        let mut last = Tops::default();
        for _quarter in 0..40 {
            for n in 0..25_000 {
                if n % 2_500 == 0 {
                    window.record(Sample {
                        item: None,
                        user: Some(-1),
                        ip: None,
                    });
                } else {
                    window.record(Sample {
                        item: None,
                        user: Some(next_user),
                        ip: None,
                    });
                    next_user += 1;
                }
            }
            last = window.report(WINDOW_MS);
            window.rotate();
            assert_eq!(window.bound_bytes(), bound, "the memory never grows");
        }
        assert!(next_user > 990_000, "{next_user} distinct users");
        let top = last.keys.first().copied().expect("a top key");
        assert_eq!(top.0, hot, "the hot user leads: {:?}", &last.keys[..3]);
        let error = 100_000 / CAPACITY as u64;
        assert!(top.1 >= 40 && top.1 <= 40 + error, "{top:?}");
        // Three kinds, four quarters, 4,096 counters each: about 8.5 MB whatever the traffic.
        assert!(bound < 9_000_000, "{bound} bytes");
    }
}
