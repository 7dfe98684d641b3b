//! The plan of a rehearsal's load, decided before the first request: which synthetic buyer
//! sends which buy, in which order, with which request id. Deterministic (seeded by the
//! rehearsal's id), so the clean-up can name every key the load could have made without
//! scanning Redis.
//!
//! Its shape is a flash sale's: most buyers want the hot item (the one with the most
//! stock), the rest spread over the other items by a Zipf law (the second most wanted gets
//! half the first's buyers, the third a third, ...), and one buyer in ten comes back about
//! half a second later, once with the same request id (a client retrying: the first answer
//! must come back) and once with a new one (a second click: the per-user limit decides).

/// Share of the buyers who want the hot item.
pub(crate) const HOT_SHARE: f64 = 0.7;
/// One buyer in this many comes back.
pub(crate) const REPEAT_EVERY: u32 = 10;

/// Synthetic buyers' ids come from a range real buyer ids are not issued from, below 2^53
/// (the Lua scripts see numbers as doubles), a million per rehearsal.
const SYNTHETIC_FROM: i64 = 8_000_000_000_000_000;
/// Most synthetic buyers one rehearsal has.
pub(crate) const MAX_BUYERS: i64 = 1_000_000;
/// Rehearsals whose buyers' ids are apart before the range wraps around.
const REHEARSAL_SLOTS: i64 = 1_000_000_000;

/// The user id of synthetic buyer `index` of rehearsal `rehearsal_id`.
pub(crate) fn synthetic_buyer(rehearsal_id: i64, index: u32) -> i64 {
    SYNTHETIC_FROM + rehearsal_id.rem_euclid(REHEARSAL_SLOTS) * MAX_BUYERS + i64::from(index)
}

/// The items of an activity as (id, stock), hot first: most stock first, then by id.
pub(crate) fn hot_first(items: &[(i64, i64)]) -> Vec<i64> {
    let mut items = items.to_vec();
    items.sort_by_key(|&(id, stock)| (std::cmp::Reverse(stock), id));
    items.into_iter().map(|(id, _)| id).collect()
}

/// Which time a buyer sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Attempt {
    First,
    /// The first request again, same request id: its first answer must come back.
    Replay,
    /// A new request of a buyer who tried already.
    Again,
}

/// One request of the plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PlannedBuy {
    /// The synthetic buyer's index, 0-based.
    pub(crate) buyer: u32,
    /// The item's index in the rehearsal's items, hot first.
    pub(crate) item: usize,
    pub(crate) attempt: Attempt,
}

impl PlannedBuy {
    /// The request's `X-Request-ID`; a replay shares its first request's.
    pub(crate) fn request_id(&self, rehearsal_id: i64) -> String {
        let n = match self.attempt {
            Attempt::First | Attempt::Replay => 0,
            Attempt::Again => 1,
        };
        format!("rh{rehearsal_id}-{}-{n}", self.buyer)
    }
}

/// A uniform number in [0, 1) from the seed, the buyer and a salt (splitmix64).
fn unit(seed: u64, buyer: u32, salt: u64) -> f64 {
    let mut z = seed
        .wrapping_add(u64::from(buyer).wrapping_mul(0x9E37_79B9_7F4A_7C15))
        .wrapping_add(salt.wrapping_mul(0xD1B5_4A32_D192_ED03));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 11) as f64 / (1_u64 << 53) as f64
}

/// Rank (0-based) of `n` ranks for a uniform `u` in [0, 1), rank `k` drawn with weight
/// `1 / (k + 1)` (Zipf with exponent 1).
pub(crate) fn zipf_rank(u: f64, n: usize) -> usize {
    let total: f64 = (1..=n).map(|k| 1.0 / k as f64).sum();
    let mut left = u.clamp(0.0, 1.0) * total;
    for k in 1..=n {
        left -= 1.0 / k as f64;
        if left < 0.0 {
            return k - 1;
        }
    }
    n.saturating_sub(1)
}

/// The item (index, hot first) buyer `buyer` wants of `items`.
pub(crate) fn item_for(seed: u64, buyer: u32, items: usize) -> usize {
    if items <= 1 {
        return 0;
    }
    let u = unit(seed, buyer, 1);
    if u < HOT_SHARE {
        0
    } else {
        1 + zipf_rank((u - HOT_SHARE) / (1.0 - HOT_SHARE), items - 1)
    }
}

/// How many requests [`plan`] makes for `buyers`: each buyer's first, and two more of every
/// [`REPEAT_EVERY`]th.
pub(crate) fn request_count(buyers: u32) -> u64 {
    u64::from(buyers) + 2 * u64::from(buyers / REPEAT_EVERY)
}

/// Every request of a rehearsal in sending order: each buyer's first request in buyer
/// order, and the comebacks of every tenth buyer about half a second (`rate_per_s / 2`
/// requests) after his first.
pub(crate) fn plan(seed: u64, buyers: u32, items: usize, rate_per_s: u32) -> Vec<PlannedBuy> {
    let lag = u64::from((rate_per_s / 2).max(1));
    let mut keyed: Vec<(u64, PlannedBuy)> = Vec::with_capacity(buyers as usize * 6 / 5);
    for buyer in 0..buyers {
        let item = item_for(seed, buyer, items);
        let first = u64::from(buyer) * 4;
        keyed.push((
            first,
            PlannedBuy {
                buyer,
                item,
                attempt: Attempt::First,
            },
        ));
        if buyer % REPEAT_EVERY == REPEAT_EVERY - 1 {
            let later = (u64::from(buyer) + lag) * 4;
            for (offset, attempt) in [(1, Attempt::Replay), (2, Attempt::Again)] {
                keyed.push((
                    later + offset,
                    PlannedBuy {
                        buyer,
                        item,
                        attempt,
                    },
                ));
            }
        }
    }
    keyed.sort_by_key(|(key, _)| *key);
    keyed.into_iter().map(|(_, send)| send).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_count_is_the_plans_whatever_the_seed() {
        for buyers in [1, 9, 10, 19, 20, 3_001] {
            for seed in [1, 77] {
                assert_eq!(
                    plan(seed, buyers, 3, 100).len() as u64,
                    request_count(buyers)
                );
            }
        }
    }

    #[test]
    fn the_item_with_the_most_stock_is_the_hot_one() {
        assert_eq!(hot_first(&[(5, 300), (3, 10_000), (4, 300)]), [3, 4, 5]);
        assert!(hot_first(&[]).is_empty());
    }

    #[test]
    fn zipf_ranks_are_drawn_one_over_their_rank() {
        let draws = 100_000;
        let mut counts = [0_u32; 4];
        for i in 0..draws {
            counts[zipf_rank(f64::from(i) / f64::from(draws), 4)] += 1;
        }
        // Weights 1, 1/2, 1/3, 1/4 of 25/12: 48 %, 24 %, 16 %, 12 %.
        let share = |k: usize| f64::from(counts[k]) / f64::from(draws);
        assert!((share(0) - 0.48).abs() < 0.01, "{counts:?}");
        assert!((share(1) - 0.24).abs() < 0.01, "{counts:?}");
        assert!((share(3) - 0.12).abs() < 0.01, "{counts:?}");
        assert_eq!(zipf_rank(0.0, 1), 0);
        assert_eq!(zipf_rank(0.999_999, 3), 2);
    }

    #[test]
    fn most_buyers_want_the_hot_item_and_the_tail_falls_off() {
        let mut counts = [0_u32; 3];
        for buyer in 0..10_000 {
            counts[item_for(42, buyer, 3)] += 1;
        }
        assert!((6_700..7_300).contains(&counts[0]), "{counts:?}");
        // The tail's 30 %: two thirds to the second item, one third to the third.
        assert!(counts[1] > counts[2] * 3 / 2, "{counts:?}");
        assert!(counts[2] > 0, "{counts:?}");
        assert!((0..100).all(|buyer| item_for(42, buyer, 1) == 0));
    }

    #[test]
    fn every_tenth_buyer_comes_back_later_with_the_same_and_a_new_request_id() {
        let plan = plan(7, 100, 2, 20);
        assert_eq!(plan.len(), 100 + 2 * 10);
        let firsts: Vec<u32> = plan
            .iter()
            .filter(|send| send.attempt == Attempt::First)
            .map(|send| send.buyer)
            .collect();
        assert_eq!(
            firsts,
            (0..100).collect::<Vec<_>>(),
            "first requests in order"
        );
        let position = |buyer: u32, attempt: Attempt| {
            plan.iter()
                .position(|send| send.buyer == buyer && send.attempt == attempt)
                .expect("planned")
        };
        for buyer in (9..100).step_by(10) {
            let first = position(buyer, Attempt::First);
            let replay = position(buyer, Attempt::Replay);
            // Half a second later: after the first requests of the next ten buyers (the
            // rate's half), or after the last first request for the last buyers.
            let firsts_between = plan[first + 1..replay]
                .iter()
                .filter(|send| send.attempt == Attempt::First)
                .count();
            assert_eq!(firsts_between, 10.min(99 - buyer) as usize, "buyer {buyer}");
            assert_eq!(position(buyer, Attempt::Again), replay + 1);
            let sent = |attempt| plan[position(buyer, attempt)];
            assert_eq!(
                sent(Attempt::Replay).request_id(3),
                sent(Attempt::First).request_id(3)
            );
            assert_ne!(
                sent(Attempt::Again).request_id(3),
                sent(Attempt::First).request_id(3)
            );
            assert_eq!(sent(Attempt::Again).item, sent(Attempt::First).item);
        }
    }

    #[test]
    fn request_ids_are_valid_and_synthetic_buyers_stay_in_their_range() {
        let send = PlannedBuy {
            buyer: 999_999,
            item: 0,
            attempt: Attempt::Again,
        };
        assert!(sale::buy::rules::valid_request_id(
            &send.request_id(i64::MAX)
        ));
        let last = synthetic_buyer(REHEARSAL_SLOTS - 1, (MAX_BUYERS - 1) as u32);
        assert!(last < 1 << 53, "a double holds it exactly");
        assert_ne!(synthetic_buyer(1, 0), synthetic_buyer(2, 0));
        assert_eq!(synthetic_buyer(1, 5) - synthetic_buyer(1, 0), 5);
    }
}
