//! The open-loop dispatcher: the thread that hands each arrival to a task when it is due.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::{Shared, drive};
use crate::schedule::Arrival;

/// The shortest time between two wake-ups of the dispatcher. Waking for every arrival
/// costs a sleep, a context switch and a worker's wake-up each; above 5,000 req/s,
/// arrivals come closer than this, and handing over those that fell due together costs
/// less CPU (docs/benchmarks.md) for at most this much more lag, which the
/// report's `arrival_lag_ms` counts like any other.
const WAKE_GAP: Duration = Duration::from_micros(200);

/// The open-loop dispatcher: sleeps until each arrival is due and hands it to a task, or
/// counts it as dropped when `max_in_flight` requests are already running. Returns whether
/// it was halted (the user aborted, or the target is gone).
///
/// It runs on a thread of its own because tokio's timer wheel has a resolution of one
/// millisecond and rounds every sleep up, which alone makes the median arrival almost a
/// millisecond late; a thread sleeping on the OS timer wakes within tens of microseconds.
/// It wakes at most once per [`WAKE_GAP`] and then hands over every arrival that is due.
pub(super) fn dispatch(
    shared: &Arc<Shared>,
    arrivals: impl Iterator<Item = Arrival>,
    tasks: &TaskTracker,
    stop: &CancellationToken,
    handle: &tokio::runtime::Handle,
) -> bool {
    // The check interval for an abort while waiting for a distant arrival.
    const POLL: Duration = Duration::from_millis(50);
    let start = shared.start.into_std();
    let max_in_flight = shared.plan.load.max_in_flight;
    let mut arrivals = arrivals.peekable();
    let mut woke: Option<std::time::Instant> = None;
    while let Some(next) = arrivals.peek() {
        let due = start + next.at;
        let wake = woke.map_or(due, |woke| due.max(woke + WAKE_GAP));
        loop {
            if shared.halt.is_cancelled() {
                return true;
            }
            let now = std::time::Instant::now();
            if now >= wake {
                break;
            }
            std::thread::sleep((wake - now).min(POLL));
        }
        let now = std::time::Instant::now();
        woke = Some(now);
        while let Some(arrival) = arrivals.next_if(|a| start + a.at <= now) {
            if shared.in_flight.load(Ordering::Relaxed) >= max_in_flight {
                shared.recorders.record(|r| r.dropped(arrival.at));
                continue;
            }
            shared.in_flight.fetch_add(1, Ordering::Relaxed);
            tasks.spawn_on(drive(Arc::clone(shared), arrival, stop.clone()), handle);
        }
    }
    false
}
