//! The event queue of a simulated run: what happens next, in virtual time.
//!
//! Events due at the same instant come out in the order they were scheduled (a sequence
//! number breaks ties), so a run never depends on how a heap orders equal keys: the same
//! plan and seed give the same run.

use std::collections::VecDeque;
use std::time::Duration;

use chaos_policy::Attempt;

use super::timers::Timers;

/// Who an event is for (the load generator, or a relay tier), where its request is in
/// that one's slab of running requests, and which step of the run it belongs to: a step
/// that is over (an attempt that timed out before its answer came) makes later events of
/// it stale.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Step {
    /// 0: the load generator; `i + 1`: the plan's tier `i`.
    pub(super) hop: u32,
    pub(super) slot: u32,
    /// Unique in the run (a slot is reused by later requests).
    pub(super) step: u64,
}

/// What one attempt carries to the next hop: enough to name it there, even when the
/// request it belongs to is over by the time it arrives.
#[derive(Debug, Clone)]
pub(super) struct Sent {
    /// Where it goes: tier `to`, or the server when `to` is the number of tiers.
    pub(super) to: u32,
    pub(super) reply: Step,
    pub(super) index: u64,
    pub(super) kind: u32,
    pub(super) n: u64,
    pub(super) attempt: Attempt,
    /// `x-chaos-upstream-attempts`: the attempt numbers of the tiers above (`2.1`).
    pub(super) chain: Option<Box<str>>,
    /// `x-chaos-deadline-ms`: how long the sender waits for it, behind tiers.
    pub(super) deadline: Option<Duration>,
    /// `x-chaos-retry-allowance`: what the hops below may spend of a shared budget.
    pub(super) allowance: Option<u32>,
    /// The peer of the next hop it goes to (1: the first; only a proxy spreads over
    /// several).
    pub(super) peer: u32,
    /// When the sender's attempt timeout fires, if the hop that receives it must schedule
    /// that (see [`Queue::answered_at`]).
    pub(super) expires: Option<Duration>,
}

/// What an attempt's answer says, as the client (or a tier) reads it off the wire.
pub(super) use crate::hop::Reply;

#[derive(Debug, Clone)]
pub(super) enum Event {
    /// An attempt reaches the next hop.
    Receive(Sent),
    /// The server's job ends its service time.
    Finish { job: u32 },
    /// A tier's delay fault is over: its request goes on.
    Delayed(Step),
    /// An answer reaches the client.
    Answer { to: Step, reply: Reply },
    /// The attempt's timeout fires on the client.
    Expire(Step),
    /// A backoff ends.
    Wake(Step),
}

struct Entry {
    at: Duration,
    seq: u64,
    event: Event,
}

/// A heap entry: the event itself waits in a slab, so a sift moves 24 bytes, not a whole
/// event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Key {
    at: Duration,
    seq: u64,
    slot: u32,
}

impl Key {
    fn before(&self, other: &Key) -> bool {
        (self.at, self.seq) < (other.at, other.seq)
    }
}

/// A four-ary min-heap of keys: half the levels of a binary heap, and the four children
/// of a node side by side in memory, so a pop touches fewer cache lines.
#[derive(Default)]
struct Heap {
    keys: Vec<Key>,
}

const ARITY: usize = 4;

impl Heap {
    fn peek(&self) -> Option<&Key> {
        self.keys.first()
    }

    fn clear(&mut self) {
        self.keys.clear();
    }

    fn push(&mut self, key: Key) {
        let mut i = self.keys.len();
        self.keys.push(key);
        while i > 0 {
            let parent = (i - 1) / ARITY;
            if !key.before(&self.keys[parent]) {
                break;
            }
            self.keys[i] = self.keys[parent];
            i = parent;
        }
        self.keys[i] = key;
    }

    fn pop(&mut self) -> Option<Key> {
        let last = self.keys.pop()?;
        let Some(&top) = self.keys.first() else {
            return Some(last);
        };
        let len = self.keys.len();
        let mut i = 0;
        loop {
            let first = i * ARITY + 1;
            if first >= len {
                break;
            }
            let mut least = first;
            for child in first + 1..(first + ARITY).min(len) {
                if self.keys[child].before(&self.keys[least]) {
                    least = child;
                }
            }
            if !self.keys[least].before(&last) {
                break;
            }
            self.keys[i] = self.keys[least];
            i = least;
        }
        self.keys[i] = last;
        Some(top)
    }
}

/// Where [`Queue::peek`] found the next event.
#[derive(Debug, Clone, Copy)]
pub(super) struct Next {
    pub(super) at: Duration,
    seq: u64,
    from: Source,
}

#[derive(Debug, Clone, Copy)]
enum Source {
    Heap,
    Lane(usize),
    Timer,
}

/// Events by time, then by the order they were scheduled.
///
/// Most events are scheduled a constant time ahead (a hop of a fixed network latency), so
/// most arrive in time order already: those go to a FIFO lane of their kind, in O(1), and
/// only the others to the heap. Attempt timeouts go to [`Timers`], which keeps one a
/// request slot. Where an event sat never changes the order it comes out in.
#[derive(Default)]
pub(super) struct Queue {
    heap: Heap,
    held: Vec<Option<Event>>,
    free: Vec<u32>,
    /// Hops, and the rest (service ends, wakes), each in time order.
    lanes: [VecDeque<Entry>; 2],
    timers: Timers,
    seq: u64,
    steps: u64,
    /// The last answer scheduled: to whom, arriving when.
    last_answer: Option<(Step, Duration)>,
    /// Events waiting, timeouts included: what the run's memory grows with.
    len: usize,
    /// The most that waited at once since the last [`Queue::clear`].
    peak: usize,
}

impl Queue {
    pub(super) fn push(&mut self, at: Duration, event: Event) {
        self.seq += 1;
        let lane = match &event {
            Event::Receive(_) => 0,
            Event::Answer { to, .. } => {
                self.last_answer = Some((*to, at));
                0
            }
            Event::Expire(step) => {
                if self.timers.set(at, self.seq, *step) {
                    self.grew();
                }
                return;
            }
            Event::Finish { .. } | Event::Delayed(_) | Event::Wake(_) => 1,
        };
        self.grew();
        let lane = &mut self.lanes[lane];
        if lane.back().is_none_or(|last| last.at <= at) {
            lane.push_back(Entry {
                at,
                seq: self.seq,
                event,
            });
            return;
        }
        let slot = match self.free.pop() {
            Some(slot) => {
                self.held[slot as usize] = Some(event);
                slot
            }
            None => {
                self.held.push(Some(event));
                u32::try_from(self.held.len() - 1).expect("fewer than 2^32 events pending")
            }
        };
        self.heap.push(Key {
            at,
            seq: self.seq,
            slot,
        });
    }

    /// Forgets which answer was scheduled last.
    pub(super) fn clear_answered(&mut self) {
        self.last_answer = None;
    }

    /// When the answer to `to` arrives, if it was the last one scheduled.
    pub(super) fn answered_at(&self, to: Step) -> Option<Duration> {
        self.last_answer.filter(|(t, _)| *t == to).map(|(_, at)| at)
    }

    /// Empties the queue for another run, keeping its room.
    pub(super) fn clear(&mut self) {
        self.heap.clear();
        self.held.clear();
        self.free.clear();
        for lane in &mut self.lanes {
            lane.clear();
        }
        self.timers.clear();
        self.seq = 0;
        self.steps = 0;
        self.last_answer = None;
        self.len = 0;
        self.peak = 0;
    }

    fn grew(&mut self) {
        self.len += 1;
        self.peak = self.peak.max(self.len);
    }

    /// A step number no other step of the run has.
    pub(super) fn next_step(&mut self) -> u64 {
        self.steps += 1;
        self.steps
    }

    /// The next event: when, and where it waits.
    pub(super) fn peek(&self) -> Option<Next> {
        let mut best = self.heap.peek().map(|e| Next {
            at: e.at,
            seq: e.seq,
            from: Source::Heap,
        });
        let mut consider = |at: Duration, seq: u64, from: Source| {
            if best.is_none_or(|b| (at, seq) < (b.at, b.seq)) {
                best = Some(Next { at, seq, from });
            }
        };
        if let Some((at, seq)) = self.timers.peek() {
            consider(at, seq, Source::Timer);
        }
        for (i, lane) in self.lanes.iter().enumerate() {
            if let Some(e) = lane.front() {
                consider(e.at, e.seq, Source::Lane(i));
            }
        }
        best
    }

    /// Takes the event `peek` found (nothing was pushed in between).
    pub(super) fn take(&mut self, next: Next) -> Option<(Duration, Event)> {
        self.len -= 1;
        match next.from {
            Source::Lane(lane) => self.lanes[lane].pop_front().map(|e| (e.at, e.event)),
            Source::Timer => self
                .timers
                .pop()
                .map(|(at, step)| (at, Event::Expire(step))),
            Source::Heap => {
                let key = self.heap.pop()?;
                self.free.push(key.slot);
                let event = self.held[key.slot as usize].take()?;
                Some((key.at, event))
            }
        }
    }

    /// Events waiting, timeouts included.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// The most events that waited at once.
    pub(super) fn peak(&self) -> usize {
        self.peak
    }

    #[cfg(test)]
    fn pop(&mut self) -> Option<(Duration, Event)> {
        let next = self.peek()?;
        self.take(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_come_out_by_time_then_in_the_order_they_were_scheduled() {
        let mut q = Queue::default();
        let step = |slot| Step {
            hop: 0,
            slot,
            step: 0,
        };
        q.push(Duration::from_millis(5), Event::Wake(step(1)));
        q.push(Duration::from_millis(1), Event::Wake(step(2)));
        q.push(Duration::from_millis(5), Event::Wake(step(3)));
        q.push(Duration::from_millis(1), Event::Wake(step(4)));
        let order: Vec<u32> = std::iter::from_fn(|| q.pop())
            .map(|(_, e)| match e {
                Event::Wake(s) => s.slot,
                _ => unreachable!(),
            })
            .collect();
        assert_eq!(order, [2, 4, 1, 3]);
    }

    #[test]
    fn the_heap_pops_in_time_then_sequence_order() {
        use rand_chacha::ChaCha8Rng;
        use rand_core::{Rng, SeedableRng};
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let mut heap = Heap::default();
        let mut keys = Vec::new();
        for seq in 0..5000u64 {
            let key = Key {
                at: Duration::from_micros(rng.next_u64() % 300),
                seq,
                slot: 0,
            };
            keys.push(key);
            heap.push(key);
            if seq % 7 == 0 {
                // Pops interleaved with pushes, as a run does.
                let popped = heap.pop().expect("not empty");
                let least = *keys
                    .iter()
                    .min_by_key(|k| (k.at, k.seq))
                    .expect("not empty");
                assert_eq!(popped, least);
                keys.retain(|k| *k != least);
            }
        }
        keys.sort_by_key(|k| (k.at, k.seq));
        let rest: Vec<Key> = std::iter::from_fn(|| heap.pop()).collect();
        assert_eq!(rest, keys);
    }

    #[test]
    fn lanes_and_heap_together_keep_time_then_schedule_order() {
        let mut q = Queue::default();
        let step = |slot| Step {
            hop: 0,
            slot,
            step: 0,
        };
        let ms = Duration::from_millis;
        // Expiries out of order (the second goes to the heap), wakes in order.
        q.push(ms(10), Event::Expire(step(1)));
        q.push(ms(3), Event::Expire(step(2)));
        q.push(ms(3), Event::Wake(step(3)));
        q.push(ms(10), Event::Wake(step(4)));
        q.push(ms(1), Event::Wake(step(5)));
        let order: Vec<(u64, u32)> = std::iter::from_fn(|| q.pop())
            .map(|(at, e)| match e {
                Event::Expire(s) | Event::Wake(s) => (at.as_millis() as u64, s.slot),
                _ => unreachable!(),
            })
            .collect();
        assert_eq!(order, [(1, 5), (3, 2), (3, 3), (10, 1), (10, 4)]);
    }
}
