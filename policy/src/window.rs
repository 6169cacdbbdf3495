//! A time window of counters, in slots: what a ttl budget and a breaker count over.
//!
//! Memory is fixed (`SLOTS + 1` counters) whatever the rate, so a million requests a second
//! cost the same memory as ten. Entries expire a whole slot at a
//! time, never early: at time `t` the window covers at least `[t - span, t]`, and at most
//! one slot more. For a budget that is the conservative side: a longer window renews its
//! reserve less often, so the bound computed for an exact window still holds.

use std::ops::AddAssign;
use std::time::Duration;

/// Slots per window: expiry is exact to a tenth of the span.
const SLOTS: usize = 10;

#[derive(Debug, Clone)]
pub(crate) struct Window<T> {
    slot: Duration,
    /// `SLOTS + 1` counters; slot index `i` lives at `i % len`.
    counters: Vec<T>,
    /// Absolute index of the newest slot written or cleared.
    head: u64,
}

impl<T: Copy + Default + AddAssign> Window<T> {
    /// A window over `span` (validated positive by the caller).
    pub(crate) fn new(span: Duration) -> Window<T> {
        let slot = (span / SLOTS as u32).max(Duration::from_nanos(1));
        Window {
            slot,
            counters: vec![T::default(); SLOTS + 1],
            head: 0,
        }
    }

    fn index(&self, now: Duration) -> u64 {
        u64::try_from(now.as_nanos() / self.slot.as_nanos()).unwrap_or(u64::MAX)
    }

    /// Moves the head to `now`, clearing the slots that fell out. Time that goes backwards
    /// (shells on several threads report slightly out of order) counts in the head slot.
    fn advance(&mut self, now: Duration) -> usize {
        let len = self.counters.len() as u64;
        let index = self.index(now);
        if index > self.head {
            let stale = (index - self.head).min(len);
            for i in 0..stale {
                let at = (index - i) % len;
                self.counters[at as usize] = T::default();
            }
            self.head = index;
        }
        (self.head % len) as usize
    }

    pub(crate) fn add(&mut self, now: Duration, value: T) {
        let at = self.advance(now);
        self.counters[at] += value;
    }

    /// The total over the window as seen at `now`, without moving it.
    pub(crate) fn sum(&self, now: Duration) -> T {
        let len = self.counters.len() as u64;
        let index = self.index(now).max(self.head);
        let oldest_live = index.saturating_sub(len - 1);
        let mut total = T::default();
        for back in 0..len {
            let Some(slot) = self.head.checked_sub(back) else {
                break;
            };
            if slot < oldest_live {
                break;
            }
            total += self.counters[(slot % len) as usize];
        }
        total
    }

    pub(crate) fn clear(&mut self) {
        self.counters.fill(T::default());
    }
}
