//! The open-loop dispatcher: hands each arrival to a task when it is due.
//!
//! tokio's timer wheel has a resolution of one millisecond and rounds every sleep up,
//! which alone would make the median arrival almost a millisecond late. So the dispatcher
//! sleeps on an OS timer instead. On Linux that is a timerfd the runtime's own reactor
//! waits on (`alarm`): the dispatcher is a task among the requests it starts, a wake-up
//! costs one worker's return from `epoll_wait`, and the tasks it spawns start on that
//! worker. Elsewhere, or when no timerfd can be made, it is a thread of its own sleeping
//! on `nanosleep`, whose every wake-up also wakes a worker to take the tasks over; at a
//! few thousand requests a second those wake-ups were most of the harness's CPU
//! (docs/benchmarks.md).

use std::iter::Peekable;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::{Shared, drive};
use crate::schedule::Arrival;

/// The shortest time between two wake-ups of the dispatcher. Every wake-up costs a
/// sleep and a worker's wake-up, and at a few thousand req/s those are most of what the
/// harness spends: at 5,000 req/s on the timerfd, 200 µs (about one wake-up per arrival)
/// cost 8.2 CPU-s per 100k requests and 500 µs 6.4 (docs/benchmarks.md). The price is lag,
/// at most this much more, which the report's `arrival_lag_ms` counts like any other; at
/// 500 µs its p99 stays under a millisecond, the bar `just bench` holds it to.
const WAKE_GAP: Duration = Duration::from_micros(500);

/// What both dispatchers share: the arrivals still to come and when it last woke.
struct Due<I: Iterator<Item = Arrival>> {
    shared: Arc<Shared>,
    arrivals: Peekable<I>,
    woke: Option<Instant>,
}

impl<I: Iterator<Item = Arrival>> Due<I> {
    fn new(shared: &Arc<Shared>, arrivals: I) -> Self {
        Due {
            shared: Arc::clone(shared),
            arrivals: arrivals.peekable(),
            woke: None,
        }
    }

    /// When to wake next: the next arrival's time, but not sooner than [`WAKE_GAP`] after
    /// the last wake-up; `None` when every arrival has been handed over.
    fn next_wake(&mut self) -> Option<Instant> {
        let due = self.shared.start.into_std() + self.arrivals.peek()?.at;
        Some(self.woke.map_or(due, |woke| due.max(woke + WAKE_GAP)))
    }

    /// Hands every arrival due by now to a task from `spawn`, or counts it as dropped when
    /// `max_in_flight` requests are already running.
    fn hand_over(&mut self, mut spawn: impl FnMut(Arc<Shared>, Arrival)) {
        let now = Instant::now();
        self.woke = Some(now);
        let max_in_flight = self.shared.plan.load.max_in_flight;
        let start = self.shared.start.into_std();
        while let Some(arrival) = self.arrivals.next_if(|a| start + a.at <= now) {
            if self.shared.in_flight.load(Ordering::Relaxed) >= max_in_flight {
                self.shared.recorders.record(|r| r.dropped(arrival.at));
                continue;
            }
            self.shared.in_flight.fetch_add(1, Ordering::Relaxed);
            spawn(Arc::clone(&self.shared), arrival);
        }
    }
}

/// What the dispatcher sleeps on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Timer {
    /// A timerfd where there is one (Linux), else [`Timer::Thread`].
    Os,
    /// A thread of its own.
    #[cfg_attr(
        not(test),
        expect(
            dead_code,
            reason = "runs choose `Os`; the tests take the fallback directly"
        )
    )]
    Thread,
}

/// Runs the arrivals to their end on the current runtime, on a timerfd when `timer` says
/// so and one can be made, else on a thread of its own. Returns whether it was halted (the
/// user aborted, or the target is gone); an error is a panic of the dispatcher.
pub(super) async fn dispatch<I>(
    shared: &Arc<Shared>,
    arrivals: I,
    tasks: &TaskTracker,
    stop: &CancellationToken,
    timer: Timer,
) -> Result<bool, tokio::task::JoinError>
where
    I: Iterator<Item = Arrival> + Send + 'static,
{
    let due = Due::new(shared, arrivals);
    let (tasks, stop) = (tasks.clone(), stop.clone());
    #[cfg(target_os = "linux")]
    if timer == Timer::Os
        && let Ok(alarm) = alarm::Alarm::new()
    {
        return tokio::spawn(on_alarm(due, alarm, tasks, stop)).await;
    }
    let handle = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || on_thread(due, &tasks, &stop, &handle)).await
}

/// The dispatcher as a task of the runtime, sleeping on `alarm`.
#[cfg(target_os = "linux")]
async fn on_alarm<I: Iterator<Item = Arrival>>(
    mut due: Due<I>,
    alarm: alarm::Alarm,
    tasks: TaskTracker,
    stop: CancellationToken,
) -> bool {
    let halt = due.shared.halt.clone();
    while let Some(wake) = due.next_wake() {
        if Instant::now() < wake {
            tokio::select! {
                biased;
                () = halt.cancelled() => return true,
                slept = alarm.sleep_until(wake) => {
                    if slept.is_err() {
                        // A timerfd that cannot be read: the coarse timer still keeps time.
                        tokio::time::sleep_until(wake.into()).await;
                    }
                }
            }
        }
        if halt.is_cancelled() {
            return true;
        }
        due.hand_over(|shared, arrival| {
            tasks.spawn(drive(shared, arrival, stop.clone()));
        });
    }
    false
}

/// The dispatcher on a thread of its own, handing tasks to the runtime behind `handle`.
fn on_thread<I: Iterator<Item = Arrival>>(
    mut due: Due<I>,
    tasks: &TaskTracker,
    stop: &CancellationToken,
    handle: &tokio::runtime::Handle,
) -> bool {
    // The check interval for an abort while waiting for a distant arrival.
    const POLL: Duration = Duration::from_millis(50);
    while let Some(wake) = due.next_wake() {
        loop {
            if due.shared.halt.is_cancelled() {
                return true;
            }
            let now = Instant::now();
            if now >= wake {
                break;
            }
            std::thread::sleep((wake - now).min(POLL));
        }
        due.hand_over(|shared, arrival| {
            tasks.spawn_on(drive(shared, arrival, stop.clone()), handle);
        });
    }
    false
}

#[cfg(target_os = "linux")]
mod alarm {
    //! A one-shot timer with the OS's resolution that the tokio reactor waits on.

    use std::io;
    use std::os::fd::OwnedFd;
    use std::time::Instant;

    use rustix::time::{Itimerspec, TimerfdClockId, TimerfdFlags, TimerfdTimerFlags, Timespec};
    use rustix::time::{timerfd_create, timerfd_settime};
    use tokio::io::unix::AsyncFd;

    #[derive(Debug)]
    pub(super) struct Alarm {
        fd: AsyncFd<OwnedFd>,
    }

    impl Alarm {
        /// Fails outside a runtime with a reactor, or where timerfds are not allowed.
        pub(super) fn new() -> io::Result<Alarm> {
            let fd = timerfd_create(
                TimerfdClockId::Monotonic,
                TimerfdFlags::NONBLOCK | TimerfdFlags::CLOEXEC,
            )?;
            // Deprecated for types whose descriptor could change or close under the
            // reactor; an `OwnedFd` keeps one descriptor for its life and closes it only
            // when dropped, after `AsyncFd` has deregistered it, which is what the
            // `unsafe` replacement asks its caller to promise (and `unsafe` is forbidden).
            #[allow(deprecated)]
            let fd = AsyncFd::new(fd)?;
            Ok(Alarm { fd })
        }

        /// Returns at `deadline` or just after (at once when it has passed).
        pub(super) async fn sleep_until(&self, deadline: Instant) -> io::Result<()> {
            let Some(wait) = deadline.checked_duration_since(Instant::now()) else {
                return Ok(());
            };
            // An all-zero value would disarm the timer instead of firing it.
            let wait = wait.max(std::time::Duration::from_nanos(1));
            let zero = Timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            let value = Timespec {
                tv_sec: i64::try_from(wait.as_secs()).unwrap_or(i64::MAX),
                tv_nsec: i64::from(wait.subsec_nanos()),
            };
            // Setting the timer also forgets an expiry not yet read.
            timerfd_settime(
                self.fd.get_ref(),
                TimerfdTimerFlags::empty(),
                &Itimerspec {
                    it_interval: zero,
                    it_value: value,
                },
            )?;
            loop {
                let mut ready = self.fd.readable().await?;
                let mut expiries = [0u8; 8];
                match rustix::io::read(self.fd.get_ref(), &mut expiries) {
                    Ok(_) => return Ok(()),
                    // Readiness left from an earlier expiry that the new setting forgot.
                    Err(rustix::io::Errno::AGAIN) => ready.clear_ready(),
                    Err(e) => return Err(e.into()),
                }
            }
        }
    }

    #[cfg(test)]
    mod tests {
        use std::time::{Duration, Instant};

        use super::Alarm;

        #[tokio::test]
        async fn it_never_wakes_before_its_deadline_and_a_past_one_returns_at_once() {
            let alarm = Alarm::new().expect("a timerfd");
            for micros in [50, 300, 1_500, 0] {
                let deadline = Instant::now() + Duration::from_micros(micros);
                alarm.sleep_until(deadline).await.expect("slept");
                assert!(Instant::now() >= deadline, "woke before {micros} µs");
            }
            let past = Instant::now();
            std::thread::sleep(Duration::from_micros(100));
            alarm.sleep_until(past).await.expect("no wait");
            // Reused after an expiry that was never waited for.
            let deadline = Instant::now() + Duration::from_micros(200);
            alarm.sleep_until(deadline).await.expect("slept");
            assert!(Instant::now() >= deadline);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::Duration;

    use tokio_util::sync::CancellationToken;

    use super::Timer;
    use crate::engine::{EngineConfig, run_on};
    use crate::schedule::Arrival;

    /// Both timers hand over every arrival: the fallback is what runs off Linux, and no
    /// CI machine would take it otherwise.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn either_timer_sends_every_arrival_once() {
        let plan = crate::plan::parse(
            Path::new("dispatch.yaml"),
            "name: dispatch\nduration: 1s\ndrain: 2s\n\
             load: { rate: 10, requests: [ { name: r, path: /items/1 } ] }\n\
             policies: [ { name: once, max_attempts: 1 } ]\n",
        )
        .expect("plan");
        let server = fault_server::start(fault_server::ServerConfig::default())
            .await
            .expect("start a fault-server");
        for timer in [Timer::Thread, Timer::Os] {
            // Bunched and spread: some fall due together, some each alone.
            let arrivals = (0..40u64).map(|index| Arrival {
                index,
                at: Duration::from_micros(index / 4 * 3_000),
                kind: 0,
                n: index,
            });
            let config = EngineConfig {
                plan: &plan,
                policy: &plan.policies[0],
                base_url: server.url(),
                abort: CancellationToken::new(),
                progress: None,
                telemetry: None,
            };
            let run = run_on(config, arrivals, timer).await.expect("a run");
            let r = &run.recorder;
            assert_eq!(
                (r.logical, r.dropped, r.succeeded, r.attempts, r.lag.len()),
                (40, 0, 40, 40, 40),
                "{timer:?}"
            );
            assert!(!run.aborted, "{timer:?}");
        }
        server.shutdown().await;
    }
}
