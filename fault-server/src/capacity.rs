//! The finite-capacity model: `capacity` requests served at once, `queue` waiting in
//! FIFO order, every other arrival rejected.
//!
//! Why it exists: a retry storm only sustains itself against a server that runs out of
//! room. With infinite capacity the storm ends when the trigger ends; with a queue that
//! fills, retries keep the server saturated after the outage, which is what a harness
//! must be able to show (and what a good retry budget prevents).
//!
//! Why it is pure: the live server drives this state machine under a mutex, its tests
//! drive it step by step without a clock, and the harness's simulator drives it in
//! virtual time; all get the same "serve, queue or reject" from the same calls. Time
//! comes in as an argument (`now`, an offset from the start of the run); the model never
//! sleeps and never reads a clock. Driving it is two
//! calls: [`CapacityModel::arrive`] when a request arrives, [`CapacityModel::finish`]
//! when it leaves (served, or abandoned while queued), which says which queued request,
//! if any, starts now.

use std::collections::{HashSet, VecDeque};
use std::num::NonZeroU32;
use std::time::Duration;

use crate::dist::Distribution;

/// The default status answered to a request the model rejects: 503 Service Unavailable,
/// the status load shedders (Envoy's overload manager, nginx `limit_conn`) answer.
pub const DEFAULT_REJECT_STATUS: u16 = 503;

/// The resolved `server:` block of a script.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CapacityLimits {
    /// Requests served concurrently; `None` is unlimited.
    pub capacity: Option<NonZeroU32>,
    /// Requests that may wait for a slot (ignored when capacity is unlimited).
    pub queue: u32,
    /// How long a served request holds its slot.
    pub service_time: Distribution,
    /// The status of a rejected request.
    pub reject_status: u16,
}

impl Default for CapacityLimits {
    fn default() -> Self {
        CapacityLimits {
            capacity: None,
            queue: 0,
            service_time: Distribution::ZERO,
            reject_status: DEFAULT_REJECT_STATUS,
        }
    }
}

/// Names one request inside a [`CapacityModel`]; tickets are never reused by a model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ticket(u64);

impl Ticket {
    /// The ticket's number (increasing in arrival order).
    pub fn id(self) -> u64 {
        self.0
    }
}

/// What happens to an arriving request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// A slot was free: service starts now.
    Serve(Ticket),
    /// Every slot is busy: the request waits in the queue until a
    /// [`CapacityModel::finish`] returns it as [`Started`].
    Queued(Ticket),
    /// Every slot and every queue place is taken: answer the reject status.
    Rejected,
}

/// A queued request that starts service now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Started {
    /// The request.
    pub ticket: Ticket,
    /// How long it waited in the queue.
    pub waited: Duration,
}

/// The state machine: slots in use and the FIFO queue.
#[derive(Debug, Clone)]
pub struct CapacityModel {
    capacity: Option<u32>,
    queue_limit: usize,
    serving: HashSet<Ticket>,
    waiting: VecDeque<(Ticket, Duration)>,
    next_ticket: u64,
}

impl CapacityModel {
    /// An empty model with these limits.
    pub fn new(limits: &CapacityLimits) -> CapacityModel {
        CapacityModel {
            capacity: limits.capacity.map(NonZeroU32::get),
            queue_limit: if limits.capacity.is_some() {
                usize::try_from(limits.queue).unwrap_or(usize::MAX)
            } else {
                0
            },
            serving: HashSet::new(),
            waiting: VecDeque::new(),
            next_ticket: 0,
        }
    }

    /// A request arrives at `now`.
    pub fn arrive(&mut self, now: Duration) -> Admission {
        let ticket = Ticket(self.next_ticket);
        self.next_ticket += 1;
        let has_slot = self
            .capacity
            .is_none_or(|capacity| self.serving.len() < capacity as usize);
        if has_slot {
            self.serving.insert(ticket);
            Admission::Serve(ticket)
        } else if self.waiting.len() < self.queue_limit {
            self.waiting.push_back((ticket, now));
            Admission::Queued(ticket)
        } else {
            Admission::Rejected
        }
    }

    /// The request `ticket` leaves at `now`: its service is done, or it was abandoned
    /// (its client gave up) while served or while still queued. Returns the queued
    /// request that takes the freed slot, if any. An unknown ticket changes nothing.
    pub fn finish(&mut self, ticket: Ticket, now: Duration) -> Option<Started> {
        if self.serving.remove(&ticket) {
            let (next, arrived) = self.waiting.pop_front()?;
            self.serving.insert(next);
            Some(Started {
                ticket: next,
                waited: now.saturating_sub(arrived),
            })
        } else {
            if let Some(index) = self.waiting.iter().position(|(t, _)| *t == ticket) {
                self.waiting.remove(index);
            }
            None
        }
    }

    /// Requests being served.
    pub fn serving(&self) -> usize {
        self.serving.len()
    }

    /// Requests waiting in the queue.
    pub fn queued(&self) -> usize {
        self.waiting.len()
    }

    /// True while `ticket` holds a slot.
    pub fn is_serving(&self, ticket: Ticket) -> bool {
        self.serving.contains(&ticket)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn limits(capacity: u32, queue: u32) -> CapacityLimits {
        CapacityLimits {
            capacity: NonZeroU32::new(capacity),
            queue,
            ..CapacityLimits::default()
        }
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn admits_capacity_plus_queue_then_rejects() {
        let mut model = CapacityModel::new(&limits(3, 2));
        let admissions: Vec<Admission> = (0..6).map(|_| model.arrive(ms(0))).collect();
        assert!(matches!(admissions[0], Admission::Serve(_)));
        assert!(matches!(admissions[1], Admission::Serve(_)));
        assert!(matches!(admissions[2], Admission::Serve(_)));
        assert!(matches!(admissions[3], Admission::Queued(_)));
        assert!(matches!(admissions[4], Admission::Queued(_)));
        assert_eq!(admissions[5], Admission::Rejected);
        assert_eq!((model.serving(), model.queued()), (3, 2));
    }

    #[test]
    fn finishing_starts_the_oldest_queued_request() {
        let mut model = CapacityModel::new(&limits(1, 2));
        let Admission::Serve(first) = model.arrive(ms(0)) else {
            panic!("first arrival is served")
        };
        let Admission::Queued(second) = model.arrive(ms(10)) else {
            panic!("second arrival queues")
        };
        let Admission::Queued(third) = model.arrive(ms(20)) else {
            panic!("third arrival queues")
        };
        assert_eq!(
            model.finish(first, ms(100)),
            Some(Started {
                ticket: second,
                waited: ms(90)
            })
        );
        assert!(model.is_serving(second));
        assert_eq!(
            model.finish(second, ms(150)),
            Some(Started {
                ticket: third,
                waited: ms(130)
            })
        );
        assert_eq!(model.finish(third, ms(200)), None);
        assert_eq!((model.serving(), model.queued()), (0, 0));
    }

    #[test]
    fn an_abandoned_queued_request_frees_its_place_without_taking_a_slot() {
        let mut model = CapacityModel::new(&limits(1, 1));
        let Admission::Serve(first) = model.arrive(ms(0)) else {
            panic!("served")
        };
        let Admission::Queued(second) = model.arrive(ms(0)) else {
            panic!("queued")
        };
        assert_eq!(model.arrive(ms(0)), Admission::Rejected);
        assert_eq!(model.finish(second, ms(5)), None);
        assert_eq!((model.serving(), model.queued()), (1, 0));
        assert!(matches!(model.arrive(ms(6)), Admission::Queued(_)));
        assert!(model.finish(first, ms(7)).is_some());
    }

    #[test]
    fn unknown_or_repeated_finish_changes_nothing() {
        let mut model = CapacityModel::new(&limits(1, 1));
        let Admission::Serve(first) = model.arrive(ms(0)) else {
            panic!("served")
        };
        assert_eq!(model.finish(first, ms(1)), None);
        assert_eq!(model.finish(first, ms(2)), None);
        assert_eq!((model.serving(), model.queued()), (0, 0));
    }

    #[test]
    fn unlimited_capacity_serves_everything() {
        let mut model = CapacityModel::new(&CapacityLimits {
            queue: 5,
            ..CapacityLimits::default()
        });
        for _ in 0..10_000 {
            assert!(matches!(model.arrive(ms(0)), Admission::Serve(_)));
        }
        assert_eq!(model.queued(), 0);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Arrive,
        Finish(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![Just(Op::Arrive), (0usize..64).prop_map(Op::Finish)]
    }

    proptest! {
        /// Whatever the order of arrivals and departures: never more than `capacity`
        /// served or `queue` waiting, never a waiting request while a slot is free, and
        /// queued requests start in arrival order.
        #[test]
        fn model_invariants_hold(capacity in 1u32..6, queue in 0u32..6, ops in prop::collection::vec(op(), 0..200)) {
            let mut model = CapacityModel::new(&limits(capacity, queue));
            let mut live: Vec<Ticket> = Vec::new();
            let mut last_started: Option<Ticket> = None;
            for (step, op) in ops.into_iter().enumerate() {
                let now = ms(step as u64);
                match op {
                    Op::Arrive => match model.arrive(now) {
                        Admission::Serve(t) | Admission::Queued(t) => live.push(t),
                        Admission::Rejected => {
                            prop_assert_eq!(model.serving(), capacity as usize);
                            prop_assert_eq!(model.queued(), queue as usize);
                        }
                    },
                    Op::Finish(i) if !live.is_empty() => {
                        let ticket = live.remove(i % live.len());
                        if let Some(started) = model.finish(ticket, now) {
                            prop_assert!(model.is_serving(started.ticket));
                            if let Some(previous) = last_started {
                                prop_assert!(started.ticket > previous);
                            }
                            last_started = Some(started.ticket);
                        }
                    }
                    Op::Finish(_) => {}
                }
                prop_assert!(model.serving() <= capacity as usize);
                prop_assert!(model.queued() <= queue as usize);
                if model.queued() > 0 {
                    prop_assert_eq!(model.serving(), capacity as usize);
                }
                prop_assert_eq!(model.serving() + model.queued(), live.len());
            }
        }
    }
}
