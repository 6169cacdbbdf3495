//! The plan's cap on the client's connections (`load.max_connections`), as oha's and
//! wrk's `-c` and Envoy's `max_connections` are: an attempt takes a slot before it is
//! handed to the HTTP client and gives it back once its answer is read (or it failed), so
//! no more attempts are on the wire at once than there are slots, and the pool never
//! needs more connections than that. Attempts beyond wait, first come first served.
//!
//! Why a cap: without one, a server that holds its answers for a few milliseconds finds
//! every pooled connection busy, and each new attempt opens a connection of its own. At
//! 30,000 req/s on the bench machine that turned one stall into 90,000 connects in ten
//! seconds and a run that never recovered; with 64 slots the same run made 68.
//!
//! The wait is the attempt's: its timeout covers it (the send gets what is left), and
//! the request's latency counts it, since that runs from the scheduled time. An attempt
//! whose timeout ran out while it waited never left the process, and ends as a
//! `connect_timeout`, which proves it unsent.

use std::time::Duration;

use chaos_policy::Outcome;
use tokio::sync::{Semaphore, SemaphorePermit};
use tokio::time::Instant;

use crate::attempt::{self, Answer, AttemptSpec};
use crate::connection_wait;
use crate::pool::Pool;

pub(super) struct Connections {
    slots: Semaphore,
}

/// What waiting for a connection came to.
pub(super) enum Slot<'a> {
    /// A connection is the attempt's until the slot is dropped; what is left of its
    /// timeout is for the send.
    Taken {
        /// Held while the attempt is on the wire.
        _slot: Option<SemaphorePermit<'a>>,
        waited: Duration,
        timeout: Option<Duration>,
    },
    /// The attempt's timeout ran out before a connection came free.
    TimedOut { waited: Duration },
}

impl Connections {
    pub(super) fn new(max: u32) -> Connections {
        Connections {
            slots: Semaphore::new(max as usize),
        }
    }

    /// Waits for a connection, for at most `timeout`.
    pub(super) async fn take(&self, timeout: Option<Duration>) -> Slot<'_> {
        // Free slots mean nobody waits (the semaphore is fair): no clock read, no timer.
        if let Ok(slot) = self.slots.try_acquire() {
            return Slot::Taken {
                _slot: Some(slot),
                waited: Duration::ZERO,
                timeout,
            };
        }
        let since = Instant::now();
        let slot = match timeout {
            None => self.slots.acquire().await,
            Some(timeout) => match tokio::time::timeout(timeout, self.slots.acquire()).await {
                Ok(slot) => slot,
                Err(_) => return Slot::TimedOut { waited: timeout },
            },
        };
        let waited = since.elapsed();
        let Some(timeout) = connection_wait::left_after_wait(timeout, waited) else {
            return Slot::TimedOut { waited };
        };
        Slot::Taken {
            // The semaphore is never closed; were it, the attempt would go uncapped.
            _slot: slot.ok(),
            waited,
            timeout,
        }
    }
}

/// How long an attempt waited for a connection under the plan's cap.
#[derive(Clone, Copy)]
pub(super) struct Wait {
    pub(super) waited: Duration,
    pub(super) timed_out: bool,
}

/// Sends one attempt, first waiting for a connection if the plan caps them: what came
/// back, and the wait, if there was a cap.
pub(super) async fn send(
    http: &Pool,
    connections: Option<&Connections>,
    spec: AttemptSpec<'_>,
) -> (Answer, Option<Wait>) {
    let Some(connections) = connections else {
        return (attempt::send(http, spec).await, None);
    };
    match connections.take(spec.timeout).await {
        Slot::Taken {
            _slot,
            waited,
            timeout,
        } => {
            let answer = attempt::send(http, AttemptSpec { timeout, ..spec }).await;
            let wait = Wait {
                waited,
                timed_out: false,
            };
            (answer, Some(wait))
        }
        // Never handed to the client: the tracked send still reads as not on the wire.
        Slot::TimedOut { waited } => {
            let wait = Wait {
                waited,
                timed_out: true,
            };
            (Answer::of(Outcome::ConnectTimeout), Some(wait))
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{Connections, Slot};

    fn waited(slot: &Slot<'_>) -> (Duration, bool) {
        match slot {
            Slot::Taken { waited, .. } => (*waited, false),
            Slot::TimedOut { waited } => (*waited, true),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn attempts_beyond_the_cap_wait_in_turn_within_their_timeout() {
        let connections = Connections::new(2);
        let first = connections.take(None).await;
        let second = connections.take(Some(Duration::from_millis(10))).await;
        assert_eq!(waited(&first), (Duration::ZERO, false));
        assert_eq!(waited(&second), (Duration::ZERO, false));

        // A third finds no slot and gives up when its timeout runs out.
        let third = connections.take(Some(Duration::from_millis(30))).await;
        assert_eq!(waited(&third), (Duration::from_millis(30), true));

        // A fourth gets the first's slot when it is given back, with what is left of its
        // timeout for the send.
        let fourth = async {
            tokio::time::sleep(Duration::from_millis(40)).await;
            drop(first);
        };
        let (slot, ()) = tokio::join!(connections.take(Some(Duration::from_millis(100))), fourth);
        match slot {
            Slot::Taken {
                waited, timeout, ..
            } => {
                assert_eq!(waited, Duration::from_millis(40));
                assert_eq!(timeout, Some(Duration::from_millis(60)));
            }
            Slot::TimedOut { .. } => panic!("the slot came free in time"),
        }
        drop(second);
    }
}
