//! Bloom filter arithmetic: how many bits and hashes a false-positive rate needs, and
//! which bits a key sets (double hashing over SHA-256). The bits live in Redis.

use sha2::{Digest, Sha256};

use base::{lua::BLOOM, redis::RedisStore};

/// Size of a filter: `bits` in the bitmap, `hashes` bits per key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BloomShape {
    pub bits: u64,
    pub hashes: u32,
}

impl BloomShape {
    /// The classic sizing: m = -n·ln p / (ln 2)², k = (m/n)·ln 2.
    pub fn for_capacity(expected_keys: u64, false_positive_rate: f64) -> Self {
        let n = expected_keys.max(1) as f64;
        let p = false_positive_rate.clamp(1e-9, 0.5);
        let ln2 = std::f64::consts::LN_2;
        let bits = (-n * p.ln() / (ln2 * ln2)).ceil().max(64.0);
        let hashes = ((bits / n) * ln2).round().clamp(1.0, 30.0);
        Self {
            bits: bits as u64,
            hashes: hashes as u32,
        }
    }

    /// The bit positions of `key`: h1 + i·h2 (mod m), Kirsch–Mitzenmacher double hashing.
    pub fn positions(&self, key: &str) -> Vec<u64> {
        let digest = Sha256::digest(key.as_bytes());
        let word = |range: std::ops::Range<usize>| {
            let mut bytes = [0u8; 8];
            bytes.copy_from_slice(&digest[range]);
            u64::from_le_bytes(bytes)
        };
        let (h1, h2) = (word(0..8), word(8..16) | 1);
        (0..u64::from(self.hashes))
            .map(|i| h1.wrapping_add(i.wrapping_mul(h2)) % self.bits)
            .collect()
    }
}

/// The key of an activity in the filter; pre-warm adds it, the buy path tests it before
/// an activity that is not in memory may be looked up in PostgreSQL.
pub fn activity_key(activity_id: i64) -> String {
    format!("activity:{activity_id}")
}

/// The key of one item of one activity; the buy path tests it.
pub fn item_key(activity_id: i64, item_id: i64) -> String {
    format!("item:{activity_id}:{item_id}")
}

/// What the filter says of a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BloomAnswer {
    MaybePresent,
    Absent,
    /// The bitmap is gone from Redis.
    FilterGone,
}

/// A typed client over the Redis connection for the Bloom filter of known items: these scripts and keys are
/// reached only through it.
#[derive(Clone, Copy)]
pub struct BloomClient<'a>(pub &'a RedisStore);

impl BloomClient<'_> {
    /// Sets a Bloom filter's bits; returns how many were new.
    pub async fn bloom_add(&self, positions: &[u64]) -> redis::RedisResult<i64> {
        BLOOM
            .key(self.0.bloom_key())
            .arg("add")
            .arg(positions)
            .invoke_async(&mut self.0.connection())
            .await
    }

    /// Whether every bit is set (the key may be present) or not (it certainly is not). A
    /// filter that is gone altogether (Redis lost its data) answers "may be present": it
    /// must never make an existing item look absent.
    pub async fn bloom_test(&self, positions: &[u64]) -> redis::RedisResult<bool> {
        Ok(self.bloom_lookup(positions).await? != BloomAnswer::Absent)
    }

    /// The filter's full answer, telling a lost filter apart (reconciliation re-adds it).
    pub async fn bloom_lookup(&self, positions: &[u64]) -> redis::RedisResult<BloomAnswer> {
        let answer: i64 = BLOOM
            .key(self.0.bloom_key())
            .arg("test")
            .arg(positions)
            .invoke_async(&mut self.0.connection())
            .await?;
        Ok(match answer {
            1 => BloomAnswer::MaybePresent,
            0 => BloomAnswer::Absent,
            _ => BloomAnswer::FilterGone,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn sizing_matches_the_textbook() {
        let shape = BloomShape::for_capacity(1_000_000, 0.01);
        assert!((9_500_000..9_700_000).contains(&shape.bits), "{shape:?}");
        assert_eq!(shape.hashes, 7);
    }

    #[test]
    fn the_measured_false_positive_rate_stays_near_the_target() {
        let shape = BloomShape::for_capacity(2_000, 0.01);
        let mut bits = HashSet::new();
        for i in 0..2_000 {
            bits.extend(shape.positions(&item_key(1, i)));
        }
        let false_positives = (0..20_000)
            .filter(|i| {
                shape
                    .positions(&item_key(2, *i))
                    .iter()
                    .all(|p| bits.contains(p))
            })
            .count();
        assert!(false_positives < 600, "{false_positives} of 20000");
        for i in 0..2_000 {
            assert!(shape
                .positions(&item_key(1, i))
                .iter()
                .all(|p| bits.contains(p)));
        }
    }
}
