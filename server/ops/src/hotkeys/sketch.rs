//! Space-Saving (Metwally, Agrawal, El Abbadi, 2005): the top keys of a stream in a fixed
//! number of counters, whatever the number of distinct keys.
//!
//! With `capacity` counters over a stream of `n` keys, every estimate is an upper bound
//! that exceeds the true count by at most `n / capacity` (the `error` kept beside it), and
//! every key seen more than `n / capacity` times holds a counter. So a key is never missed
//! for being rare among many: a newcomer takes the smallest counter's place and inherits
//! its count as its possible error.
//!
//! The counters sit in a binary min-heap indexed by key: one update costs a hash lookup
//! and O(log capacity) swaps, and the heap's root is the counter a newcomer replaces.

use std::collections::HashMap;
use std::hash::Hash;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Counter<K> {
    pub(crate) key: K,
    /// An upper bound of the key's count.
    pub(crate) count: u64,
    /// How much of `count` may belong to the keys this counter held before.
    pub(crate) error: u64,
}

pub(crate) struct SpaceSaving<K> {
    capacity: usize,
    /// A min-heap on `count`.
    heap: Vec<Counter<K>>,
    /// Where each key's counter sits in `heap`.
    slots: HashMap<K, usize>,
}

impl<K: Copy + Eq + Hash> SpaceSaving<K> {
    pub(crate) fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        Self {
            capacity,
            heap: Vec::with_capacity(capacity),
            // Twice the counters: a key replaced leaves a tombstone in the table, and with
            // this much room the table is only ever cleaned in place, never grown.
            slots: HashMap::with_capacity(2 * capacity),
        }
    }

    pub(crate) fn add(&mut self, key: K, n: u64) {
        if let Some(&slot) = self.slots.get(&key) {
            self.heap[slot].count += n;
            self.sift_down(slot);
        } else if self.heap.len() < self.capacity {
            self.heap.push(Counter {
                key,
                count: n,
                error: 0,
            });
            let slot = self.heap.len() - 1;
            self.slots.insert(key, slot);
            self.sift_up(slot);
        } else {
            let smallest = self.heap[0];
            self.slots.remove(&smallest.key);
            self.heap[0] = Counter {
                key,
                count: smallest.count + n,
                error: smallest.count,
            };
            self.slots.insert(key, 0);
            self.sift_down(0);
        }
    }

    /// Every counter, in no order.
    pub(crate) fn counters(&self) -> &[Counter<K>] {
        &self.heap
    }

    /// Forgets everything, keeping the memory for the next window.
    pub(crate) fn clear(&mut self) {
        self.heap.clear();
        self.slots.clear();
    }

    /// Bytes this sketch holds on the heap: allocated once, never grown.
    pub(crate) fn bound_bytes(&self) -> usize {
        // The map's table: a power of two of buckets, each a (key, slot) pair and a control
        // byte, filled to 7/8 at most.
        let buckets = (self.slots.capacity() * 8 / 7).next_power_of_two();
        self.heap.capacity() * std::mem::size_of::<Counter<K>>()
            + buckets * (std::mem::size_of::<(K, usize)>() + 1)
    }

    fn sift_up(&mut self, mut slot: usize) {
        while slot > 0 {
            let parent = (slot - 1) / 2;
            if self.heap[parent].count <= self.heap[slot].count {
                break;
            }
            self.swap(slot, parent);
            slot = parent;
        }
    }

    fn sift_down(&mut self, mut slot: usize) {
        loop {
            let (left, right) = (2 * slot + 1, 2 * slot + 2);
            let mut smallest = slot;
            if left < self.heap.len() && self.heap[left].count < self.heap[smallest].count {
                smallest = left;
            }
            if right < self.heap.len() && self.heap[right].count < self.heap[smallest].count {
                smallest = right;
            }
            if smallest == slot {
                break;
            }
            self.swap(slot, smallest);
            slot = smallest;
        }
    }

    fn swap(&mut self, a: usize, b: usize) {
        self.heap.swap(a, b);
        self.slots.insert(self.heap[a].key, a);
        self.slots.insert(self.heap[b].key, b);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn estimate(sketch: &SpaceSaving<u64>, key: u64) -> Option<Counter<u64>> {
        sketch.counters().iter().copied().find(|c| c.key == key)
    }

    #[test]
    fn below_capacity_the_counts_are_exact() {
        let mut sketch = SpaceSaving::new(8);
        for key in [1, 2, 2, 3, 3, 3] {
            sketch.add(key, 1);
        }
        assert_eq!(
            estimate(&sketch, 3).map(|c| (c.count, c.error)),
            Some((3, 0))
        );
        assert_eq!(estimate(&sketch, 1).map(|c| c.count), Some(1));
    }

    #[test]
    fn a_heavy_key_among_a_million_distinct_ones_is_found_within_the_bound() {
        // One hot key at 1 in 100 of a stream of a million otherwise distinct keys.
        let capacity = 4096;
        let mut sketch = SpaceSaving::new(capacity);
        let before = sketch.bound_bytes();
        let hot = u64::MAX;
        let mut true_hot = 0;
        for n in 0..1_000_000u64 {
            if n % 100 == 0 {
                sketch.add(hot, 1);
                true_hot += 1;
            } else {
                sketch.add(n, 1);
            }
        }
        let bound = 1_000_000 / capacity as u64;
        let found = estimate(&sketch, hot).expect("the hot key holds a counter");
        assert!(found.count >= true_hot && found.count <= true_hot + bound);
        assert!(found.count - found.error <= true_hot);
        assert_eq!(sketch.counters().len(), capacity);
        assert_eq!(sketch.bound_bytes(), before, "the memory never grows");
        // The bytes a sketch of 4096 counters of u64 keys holds: under 400 kB.
        assert!(before < 400_000, "{before}");
    }

    #[test]
    fn every_estimate_is_an_upper_bound_within_n_over_capacity() {
        let capacity = 16;
        let mut sketch = SpaceSaving::new(capacity);
        let mut truth: HashMap<u64, u64> = HashMap::new();
        let mut total = 0;
        // A skewed stream: key k appears about 1000 / (k + 1) times, interleaved.
        for round in 0..1000u64 {
            for key in 0..200u64 {
                if round % (key + 1) == 0 {
                    sketch.add(key, 1);
                    *truth.entry(key).or_default() += 1;
                    total += 1;
                }
            }
        }
        let bound = total / capacity as u64;
        for counter in sketch.counters() {
            let real = truth[&counter.key];
            assert!(counter.count >= real, "{counter:?} real {real}");
            assert!(counter.count - real <= bound, "{counter:?} real {real}");
            assert!(counter.error <= bound);
        }
        for (key, real) in truth {
            if real > bound {
                assert!(
                    estimate(&sketch, key).is_some(),
                    "key {key} seen {real} times"
                );
            }
        }
    }

    #[test]
    fn clearing_starts_a_new_window() {
        let mut sketch = SpaceSaving::new(2);
        sketch.add(1, 5);
        sketch.clear();
        sketch.add(2, 1);
        assert!(estimate(&sketch, 1).is_none());
        assert_eq!(sketch.counters().len(), 1);
    }
}
