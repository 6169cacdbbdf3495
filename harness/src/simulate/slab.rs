//! The requests a simulated hop holds, each in a numbered slot that a later request reuses
//! once it is free: an event names its request by slot (and by step, which tells a stale
//! event from a live one), and a hop's memory is the most requests it held at once.

/// Slots of `T`, reused.
pub(super) struct Slab<T> {
    slots: Vec<Option<T>>,
    free: Vec<u32>,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Slab {
            slots: Vec::new(),
            free: Vec::new(),
        }
    }
}

impl<T> Slab<T> {
    /// Holds `item` in a free slot, or a new one; gives its number.
    pub(super) fn insert(&mut self, item: T) -> u32 {
        match self.free.pop() {
            Some(free) => {
                self.slots[free as usize] = Some(item);
                free
            }
            None => {
                self.slots.push(Some(item));
                u32::try_from(self.slots.len() - 1).expect("fewer than 2^32 requests at once")
            }
        }
    }

    /// What slot `slot` holds, if anything.
    pub(super) fn get_mut(&mut self, slot: u32) -> Option<&mut T> {
        self.slots.get_mut(slot as usize).and_then(Option::as_mut)
    }

    /// Frees slot `slot`.
    pub(super) fn remove(&mut self, slot: u32) {
        if let Some(s) = self.slots.get_mut(slot as usize)
            && s.take().is_some()
        {
            self.free.push(slot);
        }
    }
}
