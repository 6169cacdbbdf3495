//! The table of remembered request ids: open addressing with linear probing, one 16-byte
//! slot per id (its keyed hash and its entry side by side).
//!
//! Why not a `HashMap`: every new id is one insert and, once the ledger is full, one
//! eviction, each at a random place in a table of `max_ids` entries that no cache holds.
//! A SwissTable reads a control group and then the bucket, two cache misses per
//! operation; a slot that holds the key itself costs one. The keys are already uniform
//! (a SipHash under random keys, [`super::Ledger::id_key`]), so their low bits are the
//! index, and the table stays under half full, so probes are short. Deletion shifts the
//! following slots back (no tombstones), so a table that churns for hours never degrades.

use super::ids::IdEntry;

/// A key of 0 marks an empty slot; the hash that happens to be 0 is stored as 1 (two ids
/// sharing a hash is already the 2⁻⁶⁴ risk the ledger takes, [`super::Ledger::id_key`]).
const EMPTY: u64 = 0;

fn stored(key: u64) -> u64 {
    key.max(1)
}

#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    key: u64,
    entry: IdEntry,
}

#[derive(Debug, Default)]
pub(super) struct IdTable {
    slots: Vec<Slot>,
    len: usize,
}

/// The least number of slots a table that holds anything has.
const MIN_SLOTS: usize = 1024;

impl IdTable {
    /// A table that holds `ids` ids without growing.
    pub(super) fn with_room(ids: usize) -> IdTable {
        let slots = ids
            .saturating_add(1)
            .saturating_mul(2)
            .next_power_of_two()
            .max(MIN_SLOTS);
        IdTable {
            slots: vec![Slot::default(); slots],
            len: 0,
        }
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// How many slots it has.
    #[cfg(test)]
    pub(super) fn slots(&self) -> usize {
        self.slots.len()
    }

    /// Forgets every id, keeping the room.
    pub(super) fn clear(&mut self) {
        self.slots.fill(Slot::default());
        self.len = 0;
    }

    fn mask(&self) -> usize {
        self.slots.len() - 1
    }

    fn home(&self, key: u64) -> usize {
        (key as usize) & self.mask()
    }

    /// Where `key` is, or the empty slot where it would go.
    fn probe(&self, key: u64) -> (usize, bool) {
        let mut i = self.home(key);
        loop {
            match self.slots[i].key {
                EMPTY => return (i, false),
                k if k == key => return (i, true),
                _ => i = (i + 1) & self.mask(),
            }
        }
    }

    /// Reads the slot where `key` would be found, so that the cache miss of an operation
    /// on it starts now, beside another's, instead of after it (a prefetch, without the
    /// `unsafe` an intrinsic needs: the load's value is unused, so nothing waits on it).
    pub(super) fn touch(&self, key: u64) {
        if !self.slots.is_empty() {
            std::hint::black_box(self.slots[self.home(stored(key))].key);
        }
    }

    pub(super) fn get_mut(&mut self, key: u64) -> Option<&mut IdEntry> {
        if self.slots.is_empty() {
            return None;
        }
        match self.probe(stored(key)) {
            (i, true) => Some(&mut self.slots[i].entry),
            (_, false) => None,
        }
    }

    /// Inserts `key` unless it is there; says whether it inserted. One probe either way.
    pub(super) fn insert_new(&mut self, key: u64, entry: IdEntry) -> bool {
        // At most half full: linear probes stay a slot or two long.
        if (self.len + 1) * 2 > self.slots.len() {
            self.grow();
        }
        let key = stored(key);
        match self.probe(key) {
            (_, true) => false,
            (i, false) => {
                self.slots[i] = Slot { key, entry };
                self.len += 1;
                true
            }
        }
    }

    /// Inserts or replaces `key`'s entry.
    pub(super) fn insert(&mut self, key: u64, entry: IdEntry) {
        if !self.insert_new(key, entry)
            && let Some(slot) = self.get_mut(key)
        {
            *slot = entry;
        }
    }

    /// Removes `key` if its entry satisfies `current`; says whether it did.
    pub(super) fn remove_if(&mut self, key: u64, current: impl Fn(&IdEntry) -> bool) -> bool {
        if self.slots.is_empty() {
            return false;
        }
        let (mut hole, found) = self.probe(stored(key));
        if !found || !current(&self.slots[hole].entry) {
            return false;
        }
        // Backward shift: pull each following slot of the run into the hole unless its
        // home lies cyclically after the hole (then it is where it must be).
        let mut j = hole;
        loop {
            j = (j + 1) & self.mask();
            let k = self.slots[j].key;
            if k == EMPTY {
                break;
            }
            let home = self.home(k);
            let stays = if hole <= j {
                hole < home && home <= j
            } else {
                hole < home || home <= j
            };
            if !stays {
                self.slots[hole] = self.slots[j];
                hole = j;
            }
        }
        self.slots[hole] = Slot::default();
        self.len -= 1;
        true
    }

    fn grow(&mut self) {
        let size = (self.slots.len() * 2).max(MIN_SLOTS);
        let old = std::mem::replace(&mut self.slots, vec![Slot::default(); size]);
        self.len = 0;
        for slot in old.into_iter().filter(|s| s.key != EMPTY) {
            let (i, _) = self.probe(slot.key);
            self.slots[i] = slot;
            self.len += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use rand_chacha::ChaCha8Rng;
    use rand_core::{Rng, SeedableRng};

    use super::*;

    fn entry(generation: u32) -> IdEntry {
        IdEntry {
            generation,
            side_effects: 0,
        }
    }

    #[test]
    fn the_table_agrees_with_a_hash_map_through_a_long_random_churn() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let mut table = IdTable::default();
        let mut model: HashMap<u64, u32> = HashMap::new();
        // Few distinct keys with colliding low bits, so probe runs wrap and shift.
        let keys: Vec<u64> = (0..3000)
            .map(|i| {
                if i % 3 == 0 {
                    (i << 20) | 5
                } else {
                    rng.next_u64()
                }
            })
            .chain([0, 1, u64::MAX])
            .collect();
        for step in 0..200_000u32 {
            let key = keys[(rng.next_u64() % keys.len() as u64) as usize];
            match rng.next_u32() % 3 {
                0 => {
                    let inserted = table.insert_new(key, entry(step));
                    let expected = !model.contains_key(&key.max(1));
                    assert_eq!(inserted, expected, "insert {key} at {step}");
                    model.entry(key.max(1)).or_insert(step);
                }
                1 => {
                    let removed = table.remove_if(key, |_| true);
                    assert_eq!(removed, model.remove(&key.max(1)).is_some(), "remove {key}");
                }
                _ => {
                    let got = table.get_mut(key).map(|e| e.generation);
                    assert_eq!(got, model.get(&key.max(1)).copied(), "get {key}");
                }
            }
            assert_eq!(table.len(), model.len());
        }
        // Everything still there is still found after all that shifting.
        for (key, generation) in &model {
            assert_eq!(table.get_mut(*key).map(|e| e.generation), Some(*generation));
        }
    }

    #[test]
    fn a_removal_that_is_not_current_keeps_the_entry() {
        let mut table = IdTable::default();
        assert!(table.insert_new(42, entry(3)));
        assert!(!table.remove_if(42, |e| e.generation == 2));
        assert!(table.get_mut(42).is_some());
        assert!(table.remove_if(42, |e| e.generation == 3));
        assert!(table.get_mut(42).is_none());
        table.insert(42, entry(9));
        table.insert(42, entry(10));
        assert_eq!(table.get_mut(42).map(|e| e.generation), Some(10));
        table.clear();
        assert_eq!(table.len(), 0);
        assert!(table.get_mut(42).is_none());
    }
}
