//! The attempt timeouts of a simulated run: at most one for each request slot of a hop.
//!
//! Why they are kept apart from the other events: most attempts are answered before their
//! timeout, and a timeout left in the queue after its attempt was answered waits there
//! for nothing until it fires. Behind relay tiers every attempt to a tier leaves one, and
//! attempts come far faster than a long timeout runs out, so those dead timeouts piled up
//! with the attempts sent, not with the requests in flight: a chain of 15 tiers retrying
//! behind a 30 s timeout held tens of millions of them and died on the queue's growth
//! (issue 26, bug 5). A slot runs one step at a time and a newer step makes an older
//! one's events stale (each handler drops them), so a slot keeps only its newest step's
//! timeout: the timeouts held are at most the slots, which the requests in flight bound.
//!
//! Dropping a timeout that would have been stale changes nothing a run computes: the
//! others keep their time and sequence number, so events come out in the same order.

use std::time::Duration;

use super::queue::Step;

/// One pending timeout: when, its place in the queue's order, and whose.
#[derive(Debug, Clone, Copy)]
struct Timer {
    at: Duration,
    seq: u64,
    step: Step,
}

impl Timer {
    fn before(&self, other: &Timer) -> bool {
        (self.at, self.seq) < (other.at, other.seq)
    }
}

/// Where a slot's timer sits in the heap: none.
const NONE: u32 = u32::MAX;

/// A binary min-heap by `(at, seq)` that knows where each slot's timer is, so a newer step
/// can take its place.
#[derive(Debug, Default)]
pub(super) struct Timers {
    heap: Vec<Timer>,
    /// `place[hop][slot]`: the index in `heap` of that slot's timer, or [`NONE`].
    place: Vec<Vec<u32>>,
}

impl Timers {
    /// Schedules the timeout of `step` at `at` (`seq`: its order among events due at the
    /// same instant). It replaces the slot's timeout of an older step; a timeout of a step
    /// older than the slot's is stale already and is not kept. Whether one more is held.
    pub(super) fn set(&mut self, at: Duration, seq: u64, step: Step) -> bool {
        let timer = Timer { at, seq, step };
        let hop = step.hop as usize;
        let slot = step.slot as usize;
        if self.place.len() <= hop {
            self.place.resize_with(hop + 1, Vec::new);
        }
        let places = &mut self.place[hop];
        if places.len() <= slot {
            places.resize(slot + 1, NONE);
        }
        let i = places[slot];
        if i == NONE {
            let at = self.heap.len();
            self.heap.push(timer);
            self.place_at(at);
            self.up(at);
            return true;
        }
        let i = i as usize;
        let old = self.heap[i];
        let newer = old.step.step < step.step;
        // The same step twice: the earlier fires first and ends the step.
        let earlier = old.step.step == step.step && timer.before(&old);
        if newer || earlier {
            self.heap[i] = timer;
            self.up(i);
            self.down(i);
        }
        false
    }

    /// When the next timeout fires, and its sequence number.
    pub(super) fn peek(&self) -> Option<(Duration, u64)> {
        self.heap.first().map(|t| (t.at, t.seq))
    }

    /// The next timeout: when, and whose.
    pub(super) fn pop(&mut self) -> Option<(Duration, Step)> {
        let top = *self.heap.first()?;
        self.unplace(top.step);
        let last = self.heap.pop().expect("not empty");
        if !self.heap.is_empty() {
            self.heap[0] = last;
            self.place_at(0);
            self.down(0);
        }
        Some((top.at, top.step))
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.heap.len()
    }

    /// Empties it for another run, keeping its room.
    pub(super) fn clear(&mut self) {
        self.heap.clear();
        for places in &mut self.place {
            places.fill(NONE);
        }
    }

    fn place_at(&mut self, i: usize) {
        let step = self.heap[i].step;
        self.place[step.hop as usize][step.slot as usize] =
            u32::try_from(i).expect("fewer than 2^32 timeouts pending");
    }

    fn unplace(&mut self, step: Step) {
        self.place[step.hop as usize][step.slot as usize] = NONE;
    }

    fn up(&mut self, mut i: usize) {
        while i > 0 {
            let parent = (i - 1) / 2;
            if !self.heap[i].before(&self.heap[parent]) {
                break;
            }
            self.heap.swap(i, parent);
            self.place_at(i);
            self.place_at(parent);
            i = parent;
        }
    }

    fn down(&mut self, mut i: usize) {
        loop {
            let left = 2 * i + 1;
            if left >= self.heap.len() {
                break;
            }
            let right = left + 1;
            let least = if right < self.heap.len() && self.heap[right].before(&self.heap[left]) {
                right
            } else {
                left
            };
            if !self.heap[least].before(&self.heap[i]) {
                break;
            }
            self.heap.swap(i, least);
            self.place_at(i);
            self.place_at(least);
            i = least;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(hop: u32, slot: u32, step: u64) -> Step {
        Step { hop, slot, step }
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_slot_keeps_only_its_newest_steps_timeout() {
        let mut t = Timers::default();
        t.set(ms(30), 1, step(1, 0, 1));
        t.set(ms(40), 2, step(1, 0, 2));
        // An older step's timeout is stale on arrival.
        t.set(ms(5), 3, step(1, 0, 1));
        t.set(ms(10), 4, step(0, 0, 3));
        assert_eq!(t.len(), 2);
        assert_eq!(t.pop(), Some((ms(10), step(0, 0, 3))));
        assert_eq!(t.pop(), Some((ms(40), step(1, 0, 2))));
        assert_eq!(t.pop(), None);
    }

    #[test]
    fn timeouts_come_out_by_time_then_sequence_whatever_was_replaced() {
        use rand_chacha::ChaCha8Rng;
        use rand_core::{Rng, SeedableRng};
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let mut t = Timers::default();
        // What each slot's newest step wants: the order they must come out in.
        let mut newest = std::collections::HashMap::new();
        for seq in 0..4000u64 {
            let s = step(
                (rng.next_u64() % 3) as u32,
                (rng.next_u64() % 50) as u32,
                seq,
            );
            let at = ms(rng.next_u64() % 500);
            t.set(at, seq, s);
            newest.insert((s.hop, s.slot), (at, seq, s));
        }
        let mut expected: Vec<(Duration, u64, Step)> = newest.into_values().collect();
        expected.sort_by_key(|(at, seq, _)| (*at, *seq));
        let got: Vec<(Duration, Step)> = std::iter::from_fn(|| t.pop()).collect();
        let expected: Vec<(Duration, Step)> =
            expected.into_iter().map(|(at, _, s)| (at, s)).collect();
        assert_eq!(got, expected);
    }
}
