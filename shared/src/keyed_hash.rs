//! The hash of the maps keyed by small ids (connections, runs, sides): a multiply-and-fold of
//! each word with keys drawn once per map from the standard library's random source.
//!
//! The standard SipHash was a tenth of reading a session that opens a connection per request
//! (every event looks up its connection's state in several maps). Ids come from files, and a
//! crafted file could choose them: the keys are secret and differ per map, so the ids that
//! collide cannot be chosen in advance, which is what SipHash's randomness bought here too. (On
//! a platform without a random source, such as the browser's WebAssembly, the standard library
//! gives fixed keys: no worse than SipHash there.)

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher, RandomState};

/// A `HashMap` with [`KeyedHash`].
pub type KeyedMap<K, V> = HashMap<K, V, KeyedHash>;

/// Builds [`FoldHasher`]s with this map's secret keys.
#[derive(Clone, Debug)]
pub struct KeyedHash {
    keys: [u64; 2],
}

impl Default for KeyedHash {
    fn default() -> Self {
        let random = RandomState::new();
        // An odd multiplier keeps every bit of the word in the product.
        KeyedHash { keys: [random.hash_one(0u8), random.hash_one(1u8) | 1] }
    }
}

impl BuildHasher for KeyedHash {
    type Hasher = FoldHasher;

    fn build_hasher(&self) -> FoldHasher {
        FoldHasher { state: self.keys[0], multiplier: self.keys[1] }
    }
}

/// Folds each word written into its state: the 128-bit product of (state ^ word) and the
/// secret multiplier, its halves XORed, spreads every input bit over the whole result (the
/// table uses the low bits to place and the high ones to compare).
pub struct FoldHasher {
    state: u64,
    multiplier: u64,
}

impl FoldHasher {
    fn fold(&mut self, word: u64) {
        let product = u128::from(self.state ^ word) * u128::from(self.multiplier);
        self.state = (product as u64) ^ ((product >> 64) as u64);
    }
}

impl Hasher for FoldHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.fold(u64::from_le_bytes(word));
        }
        // The length, so that "ab" then "c" and "a" then "bc" differ.
        self.fold(bytes.len() as u64);
    }

    fn write_u8(&mut self, value: u8) {
        self.fold(u64::from(value));
    }

    fn write_u16(&mut self, value: u16) {
        self.fold(u64::from(value));
    }

    fn write_u32(&mut self, value: u32) {
        self.fold(u64::from(value));
    }

    fn write_u64(&mut self, value: u64) {
        self.fold(value);
    }

    fn write_usize(&mut self, value: usize) {
        self.fold(value as u64);
    }

    fn write_isize(&mut self, value: isize) {
        self.fold(value as u64);
    }

    fn finish(&self) -> u64 {
        // One more fold: a single word's hash mixes it twice.
        let mut last = FoldHasher { state: self.state, multiplier: self.multiplier };
        last.fold(self.multiplier.rotate_left(32));
        last.state
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{ConnId, Side};

    #[test]
    fn dense_ids_spread_over_the_table_and_maps_keep_their_values() {
        let hash = KeyedHash::default();
        // Consecutive ids (a reconnecting run's) land in all of a 1,024-bucket table's
        // buckets, nearly evenly.
        let mut buckets = vec![0u32; 1024];
        for conn in 0..65_536u32 {
            buckets[(hash.hash_one((ConnId(conn), Side::Server)) & 1023) as usize] += 1;
        }
        let (least, most) = (buckets.iter().min().unwrap(), buckets.iter().max().unwrap());
        assert!(*least > 20 && *most < 120, "64 per bucket expected: {least}..{most}");
        let mut map: KeyedMap<(ConnId, Side), u32> = KeyedMap::default();
        for conn in 0..10_000u32 {
            map.insert((ConnId(conn), Side::Client), conn);
        }
        assert!((0..10_000u32).all(|conn| map[&(ConnId(conn), Side::Client)] == conn));
        assert!(!map.contains_key(&(ConnId(1), Side::Server)));
    }

    #[test]
    fn two_maps_hash_differently() {
        let (one, other) = (KeyedHash::default(), KeyedHash::default());
        let differ = (0..64u32).filter(|id| one.hash_one(id) != other.hash_one(id)).count();
        assert!(differ > 60, "the keys are drawn per map: {differ} of 64 differ");
    }
}
