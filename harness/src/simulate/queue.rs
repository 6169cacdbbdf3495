//! The event queue of a simulated run: what happens next, in virtual time.
//!
//! Events due at the same instant come out in the order they were scheduled (a sequence
//! number breaks ties), so a run never depends on how a heap orders equal keys: the same
//! plan and seed give the same run.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::time::Duration;

use chaos_policy::{Attempt, Outcome};

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
}

/// What an attempt's answer says, as the client reads it off the wire.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Reply {
    pub(super) outcome: Outcome,
    pub(super) retry_after: Option<Duration>,
    /// `x-chaos-no-retry`: a tier behind gave up.
    pub(super) no_retry: bool,
}

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

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.at == other.at && self.seq == other.seq
    }
}

impl Eq for Entry {}

impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Entry {
    // Reversed: the heap's greatest is the earliest event.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

/// Events by time, then by the order they were scheduled.
#[derive(Default)]
pub(super) struct Queue {
    heap: BinaryHeap<Entry>,
    seq: u64,
    steps: u64,
}

impl Queue {
    pub(super) fn push(&mut self, at: Duration, event: Event) {
        self.seq += 1;
        self.heap.push(Entry {
            at,
            seq: self.seq,
            event,
        });
    }

    /// A step number no other step of the run has.
    pub(super) fn next_step(&mut self) -> u64 {
        self.steps += 1;
        self.steps
    }

    /// When the next event is due.
    pub(super) fn next_at(&self) -> Option<Duration> {
        self.heap.peek().map(|e| e.at)
    }

    pub(super) fn pop(&mut self) -> Option<(Duration, Event)> {
        self.heap.pop().map(|e| (e.at, e.event))
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
}
