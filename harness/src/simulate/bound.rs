//! How far one simulated policy run may go before it stops early: the events waiting at
//! once, and the user's interrupt.
//!
//! Why a limit on the events: a run's memory is the events waiting and the requests they
//! carry. The load generator holds at most `load.max_in_flight` requests, and each holds
//! at most a timeout and one moving event at each hop (`timers.rs`), but work can outlive
//! the request that started it: an attempt the sender gave up on is still served, or
//! forwarded and retried by the tiers below, as it is live. A plan can make that grow
//! without end (a chain of tiers each retrying behind a short timeout, a server slower
//! than the timeouts in front of it). Live, such a run exhausts the machine's
//! connections or memory; simulated, it could outgrow the machine's memory, and then no
//! report is written at all. So beyond the limit the run stops, says why, and the report of
//! what ran is written, marked incomplete, as a live run whose target is gone is.
//! Refusing the work instead (a tier turning requests away beyond a cap) would model a
//! limit the live relay tier does not have, and the simulation would stop predicting it.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::plan::Plan;

/// Events handled between two looks at the interrupt: a look takes a lock, and 4,096
/// events take well under a millisecond.
const CHECKPOINT: u64 = 4096;

/// Events waiting at once for each request `load.max_in_flight` allows, at each hop:
/// twice what a chain's requests need (a timeout and the event that moves each on).
const PER_REQUEST_AND_HOP: usize = 4;

/// The limit however small `max_in_flight` is: 65,536 events take about 8 MB.
const AT_LEAST: usize = 1 << 16;

/// Why a policy's run stopped before its end.
#[derive(Debug, Clone)]
pub(super) enum Cut {
    /// The user interrupted the simulation (Ctrl-C, SIGTERM, SIGHUP).
    Interrupted,
    /// More events waited at once than the limit.
    Overflow {
        at: Duration,
        waiting: usize,
        limit: usize,
        hops: usize,
    },
}

/// The limits of one policy's run.
pub(super) struct Bound<'a> {
    max_waiting: usize,
    hops: usize,
    stop: &'a CancellationToken,
}

impl<'a> Bound<'a> {
    pub(super) fn new(plan: &Plan, tiers: usize, stop: &'a CancellationToken) -> Bound<'a> {
        Bound {
            max_waiting: max_waiting(plan.load.max_in_flight, tiers),
            hops: tiers + 1,
            stop,
        }
    }

    /// Whether the run must stop now, at `now`, the `events`-th event handled, with
    /// `waiting` events in the queue.
    pub(super) fn check(&self, events: u64, waiting: usize, now: Duration) -> Option<Cut> {
        if waiting > self.max_waiting {
            return Some(Cut::Overflow {
                at: now,
                waiting,
                limit: self.max_waiting,
                hops: self.hops,
            });
        }
        (events.is_multiple_of(CHECKPOINT) && self.stop.is_cancelled()).then_some(Cut::Interrupted)
    }
}

/// The most events a run may hold at once.
pub(super) fn max_waiting(max_in_flight: u32, tiers: usize) -> usize {
    (max_in_flight as usize)
        .saturating_mul(tiers + 1)
        .saturating_mul(PER_REQUEST_AND_HOP)
        .max(AT_LEAST)
}

impl Cut {
    /// Why the run of `policy` stopped, for the report's `error`; `None` for an interrupt,
    /// which the report says by being aborted.
    pub(super) fn reason(&self, policy: &str, plan: &Plan) -> Option<String> {
        let Cut::Overflow {
            at,
            waiting,
            limit,
            hops,
        } = self
        else {
            return None;
        };
        Some(format!(
            "policy `{policy}` stopped at {:.3} s of simulated time: {waiting} events waited at once, over the limit of {limit} ({PER_REQUEST_AND_HOP} a request of load.max_in_flight ({}) at each of {hops} hop{}, at least {AT_LEAST}): attempts their senders gave up on were still served or retried further down and outgrew the requests in flight; a live run would hold them all as open connections",
            at.as_secs_f64(),
            plan.load.max_in_flight,
            if *hops == 1 { "" } else { "s" },
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limit_follows_max_in_flight_and_the_hops_with_a_floor() {
        assert_eq!(max_waiting(10_000, 0), 65_536);
        assert_eq!(max_waiting(10_000, 15), 640_000);
        assert_eq!(max_waiting(1_000_000, 0), 4_000_000);
        assert_eq!(max_waiting(1, 16), 65_536);
        assert!(max_waiting(u32::MAX, 16) > u32::MAX as usize);
    }
}
