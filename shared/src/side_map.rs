//! A map keyed by (connection, side), for the analysis' per-event lookups.
//!
//! The probe numbers connections from 0, so the keys of a recorded run are small and dense: a
//! vector indexed by them answers without hashing (SipHash on every event was a large share of
//! opening a million-request file). Ids past [`DENSE_CONNS`] (an import's, or a hostile file's)
//! go to a hash map whose secret keys keep crafted ids from colliding ([`crate::keyed_hash`]).

use crate::event::{ConnId, Side};
use crate::keyed_hash::KeyedMap;

/// Connections below this id are kept in the vector: 8,192 slots at most.
pub const DENSE_CONNS: u32 = 4096;

#[derive(Clone, Debug)]
pub struct SideMap<V> {
    dense: Vec<Option<V>>,
    sparse: KeyedMap<(ConnId, Side), V>,
}

impl<V> Default for SideMap<V> {
    fn default() -> Self {
        SideMap { dense: Vec::new(), sparse: KeyedMap::default() }
    }
}

fn slot((conn, side): (ConnId, Side)) -> Option<usize> {
    (conn.0 < DENSE_CONNS).then(|| conn.0 as usize * 2 + side.index())
}

impl<V> SideMap<V> {
    pub fn get(&self, key: &(ConnId, Side)) -> Option<&V> {
        match slot(*key) {
            Some(slot) => self.dense.get(slot)?.as_ref(),
            None => self.sparse.get(key),
        }
    }

    pub fn get_mut(&mut self, key: &(ConnId, Side)) -> Option<&mut V> {
        match slot(*key) {
            Some(slot) => self.dense.get_mut(slot)?.as_mut(),
            None => self.sparse.get_mut(key),
        }
    }

    pub fn remove(&mut self, key: &(ConnId, Side)) -> Option<V> {
        match slot(*key) {
            Some(slot) => self.dense.get_mut(slot)?.take(),
            None => self.sparse.remove(key),
        }
    }

    /// The value of `key`, made with `make` if there is none yet.
    pub fn get_or_insert_with(&mut self, key: (ConnId, Side), make: impl FnOnce() -> V) -> &mut V {
        match slot(key) {
            Some(slot) => self.dense_slot(slot).get_or_insert_with(make),
            None => self.sparse.entry(key).or_insert_with(make),
        }
    }

    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut V> {
        self.dense.iter_mut().flatten().chain(self.sparse.values_mut())
    }

    fn dense_slot(&mut self, slot: usize) -> &mut Option<V> {
        if slot >= self.dense.len() {
            self.dense.resize_with(slot + 1, || None);
        }
        &mut self.dense[slot]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dense_and_sparse_keys_behave_alike() {
        let mut map = SideMap::default();
        for conn in [0, 1, 4095, 4096, u32::MAX] {
            for side in [Side::Client, Side::Server] {
                let key = (ConnId(conn), side);
                assert_eq!(map.get(&key), None);
                assert_eq!(*map.get_or_insert_with(key, || conn), conn);
                assert_eq!(*map.get_or_insert_with(key, || 0), conn, "made once");
                let value = map.get_mut(&key).unwrap();
                *value = value.wrapping_add(1);
                let value = map.get_or_insert_with(key, || 0);
                *value = value.wrapping_add(1);
                assert_eq!(map.get(&key), Some(&conn.wrapping_add(2)));
            }
        }
        assert_eq!(map.values_mut().count(), 10);
        assert_eq!(map.remove(&(ConnId(4096), Side::Server)), Some(4098));
        assert_eq!(map.remove(&(ConnId(4096), Side::Server)), None);
        assert_eq!(map.remove(&(ConnId(7), Side::Client)), None, "never there");
        assert!(map.dense.len() <= 2 * DENSE_CONNS as usize, "the vector is bounded");
    }
}
