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
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::request::drive;
use super::{Shared, lock};
use crate::schedule::Arrival;

/// The shortest time between two wake-ups of the dispatcher. Every wake-up costs a
/// sleep and a worker's wake-up, and at a few thousand req/s those are most of what the
/// harness spends: at 5,000 req/s on the timerfd, 200 µs (about one wake-up per arrival)
/// cost 8.2 CPU-s per 100k requests and 500 µs 6.4 (docs/benchmarks.md). The price is lag,
/// at most this much more, which the report's `arrival_lag_ms` counts like any other; at
/// 500 µs its p99 stays under a millisecond, the bar `just bench` holds it to.
const WAKE_GAP: Duration = Duration::from_micros(500);

/// How late the dispatcher may wake before the tasks take over (see [`Arrivals`]): a
/// worker parked in `epoll_wait` answers its timer within tens of microseconds.
const BEHIND: Duration = Duration::from_micros(200);

/// The arrivals still to come, and who hands them over: the dispatcher when it wakes, and
/// the requests' own tasks as they run ([`Arrivals::hand_over_due`]).
///
/// Why the tasks too: a busy tokio worker looks at its I/O, the dispatcher's timerfd
/// included, only every few dozen tasks, so at 40,000 req/s the dispatcher ran about
/// 0.5 ms after its timer fired, and half its wake-ups were lost that way (a probe counted
/// 900 a second where 2,000 were due). So when the dispatcher finds itself late, the
/// tasks hand over each arrival as soon as they see it due, and arrivals start about
/// when they fall due; when the runtime has time to spare the dispatcher does it alone,
/// as before, and a task steps in only for an arrival it should already have handed
/// over.
pub(super) struct Arrivals {
    due: Mutex<Due>,
    /// When the next arrival is due, in nanoseconds from the run's start (`u64::MAX`: no
    /// arrival left): what a task compares the time with before it tries.
    next: AtomicU64,
    /// The dispatcher woke more than [`BEHIND`] after its time: the runtime is busy.
    behind: AtomicBool,
    tasks: TaskTracker,
    /// The requests' stop signal (the drain's end), given to every task handed an arrival.
    stop: CancellationToken,
}

struct Due {
    arrivals: Peekable<Box<dyn Iterator<Item = Arrival> + Send>>,
    /// When arrivals were last handed over.
    woke: Option<Instant>,
}

impl Arrivals {
    pub(super) fn new<I>(arrivals: I, tasks: TaskTracker, stop: CancellationToken) -> Arrivals
    where
        I: Iterator<Item = Arrival> + Send + 'static,
    {
        let mut due = Due {
            arrivals: (Box::new(arrivals) as Box<dyn Iterator<Item = Arrival> + Send>).peekable(),
            woke: None,
        };
        let next = due.next_at();
        Arrivals {
            due: Mutex::new(due),
            next: AtomicU64::new(next),
            behind: AtomicBool::new(false),
            tasks,
            stop,
        }
    }

    /// Hands over the arrivals due by `now` (from the run's start), unless another thread
    /// is doing it: called by request tasks as they run. While the dispatcher keeps time,
    /// only once the next arrival is late (due [`WAKE_GAP`] ago): on a runtime with time
    /// to spare the dispatcher's batches cost less CPU than a hand-over at every answer (at
    /// 5,000 req/s 4.0–5.0 CPU-s per 100k against 4.3–6.4 when tasks handed over whatever
    /// was due).
    pub(super) fn hand_over_due(&self, shared: &Arc<Shared>, now: Duration) {
        let next = self.next.load(Ordering::Relaxed);
        let step_in = if self.behind.load(Ordering::Relaxed) {
            next
        } else {
            next.saturating_add(nanos(WAKE_GAP))
        };
        if nanos(now) < step_in {
            return;
        }
        let mut due = match self.due.try_lock() {
            Ok(due) => due,
            Err(TryLockError::WouldBlock) => return,
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
        };
        if shared.halt.is_cancelled() {
            return;
        }
        self.hand_over(&mut due, shared, |shared, arrival, stop| {
            self.tasks.spawn(drive(shared, arrival, stop));
        });
    }

    /// Hands every arrival due by now to a task from `spawn`, or counts it as dropped when
    /// `max_in_flight` requests are already running.
    fn hand_over(
        &self,
        due: &mut Due,
        shared: &Arc<Shared>,
        mut spawn: impl FnMut(Arc<Shared>, Arrival, CancellationToken),
    ) {
        let now = Instant::now();
        due.woke = Some(now);
        let max_in_flight = shared.plan.load.max_in_flight;
        let start = shared.start.into_std();
        while let Some(arrival) = due.arrivals.next_if(|a| start + a.at <= now) {
            if shared.in_flight.load(Ordering::Relaxed) >= max_in_flight {
                shared.recorders.record(|r| r.dropped(arrival.at));
                continue;
            }
            shared.in_flight.fetch_add(1, Ordering::Relaxed);
            spawn(Arc::clone(shared), arrival, self.stop.clone());
        }
        self.next.store(due.next_at(), Ordering::Relaxed);
    }

    /// Notes whether the dispatcher, due to wake at `wake`, is behind.
    fn woke_late(&self, wake: Instant) {
        let late = Instant::now().saturating_duration_since(wake);
        self.behind.store(late > BEHIND, Ordering::Relaxed);
    }

    fn lock(&self) -> MutexGuard<'_, Due> {
        lock(&self.due)
    }
}

impl Due {
    /// When the dispatcher should wake next: the next arrival's time, but not sooner than
    /// [`WAKE_GAP`] after arrivals were last handed over; `None` when every arrival has
    /// been.
    fn next_wake(&mut self, start: Instant) -> Option<Instant> {
        let due = start + self.arrivals.peek()?.at;
        Some(self.woke.map_or(due, |woke| due.max(woke + WAKE_GAP)))
    }

    fn next_at(&mut self) -> u64 {
        self.arrivals.peek().map_or(u64::MAX, |a| nanos(a.at))
    }
}

fn nanos(at: Duration) -> u64 {
    u64::try_from(at.as_nanos()).unwrap_or(u64::MAX - 1)
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

/// Runs `shared`'s arrivals to their end on the current runtime, on a timerfd when `timer`
/// says so and one can be made, else on a thread of its own. Returns whether it was halted
/// (the user aborted, or the target is gone); an error is a panic of the dispatcher.
pub(super) async fn dispatch(
    shared: &Arc<Shared>,
    timer: Timer,
) -> Result<bool, tokio::task::JoinError> {
    let shared = Arc::clone(shared);
    #[cfg(target_os = "linux")]
    if timer == Timer::Os
        && let Ok(alarm) = alarm::Alarm::new()
    {
        return tokio::spawn(on_alarm(shared, alarm)).await;
    }
    let handle = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || on_thread(&shared, &handle)).await
}

/// The dispatcher as a task of the runtime, sleeping on `alarm`.
#[cfg(target_os = "linux")]
async fn on_alarm(shared: Arc<Shared>, alarm: alarm::Alarm) -> bool {
    let arrivals = &shared.arrivals;
    let halt = shared.halt.clone();
    let start = shared.start.into_std();
    loop {
        let Some(wake) = arrivals.lock().next_wake(start) else {
            return false;
        };
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
        arrivals.woke_late(wake);
        arrivals.hand_over(&mut arrivals.lock(), &shared, |shared, arrival, stop| {
            arrivals.tasks.spawn(drive(shared, arrival, stop));
        });
    }
}

/// The dispatcher on a thread of its own, handing tasks to the runtime behind `handle`.
fn on_thread(shared: &Arc<Shared>, handle: &tokio::runtime::Handle) -> bool {
    // The check interval for an abort while waiting for a distant arrival.
    const POLL: Duration = Duration::from_millis(50);
    let arrivals = &shared.arrivals;
    let start = shared.start.into_std();
    loop {
        // Its own statement: the guard of a `while let`'s condition would live through
        // the body, which takes the lock again.
        let Some(wake) = arrivals.lock().next_wake(start) else {
            return false;
        };
        loop {
            if shared.halt.is_cancelled() {
                return true;
            }
            let now = Instant::now();
            if now >= wake {
                break;
            }
            std::thread::sleep((wake - now).min(POLL));
        }
        arrivals.woke_late(wake);
        arrivals.hand_over(&mut arrivals.lock(), shared, |shared, arrival, stop| {
            arrivals
                .tasks
                .spawn_on(drive(shared, arrival, stop), handle);
        });
    }
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
    use crate::plan::Plan;
    use crate::schedule::Arrival;

    /// One request kind and one policy of a single attempt: each arrival is one request.
    fn one_attempt_plan(name: &str) -> Plan {
        crate::plan::parse(
            Path::new("dispatch.yaml"),
            &format!(
                "name: {name}\nduration: 1s\ndrain: 2s\n\
                 load: {{ rate: 10, requests: [ {{ name: r, path: /items/1 }} ] }}\n\
                 policies: [ {{ name: once, max_attempts: 1 }} ]\n"
            ),
        )
        .expect("plan")
    }

    fn config<'a>(plan: &'a Plan, server: &fault_server::ServerHandle) -> EngineConfig<'a> {
        EngineConfig {
            plan,
            policy: &plan.policies[0],
            base_url: server.url(),
            abort: CancellationToken::new(),
            progress: None,
            telemetry: None,
        }
    }

    fn arrival(index: u64, at: Duration) -> Arrival {
        Arrival {
            index,
            at,
            kind: 0,
            n: index,
        }
    }

    /// Both timers hand over every arrival: the fallback is what runs off Linux, and no
    /// CI machine would take it otherwise.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn either_timer_sends_every_arrival_once() {
        let plan = one_attempt_plan("dispatch");
        let server = fault_server::start(fault_server::ServerConfig::default())
            .await
            .expect("start a fault-server");
        for timer in [Timer::Thread, Timer::Os] {
            // Bunched and spread: some fall due together, some each alone.
            let arrivals =
                (0..40u64).map(|index| arrival(index, Duration::from_micros(index / 4 * 3_000)));
            let run = run_on(config(&plan, &server), arrivals, timer)
                .await
                .expect("a run");
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

    /// A worker kept busy makes the dispatcher late, and the request tasks then hand over
    /// arrivals beside it: each still goes out once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn arrivals_go_out_once_while_a_busy_worker_holds_the_dispatcher_back() {
        let plan = one_attempt_plan("busy");
        let server = fault_server::start(fault_server::ServerConfig::default())
            .await
            .expect("start a fault-server");
        // Holds the only worker for a millisecond at a time, twice the wake-up gap.
        let hog = tokio::spawn(async {
            for _ in 0..150 {
                std::thread::sleep(Duration::from_millis(1));
                tokio::task::yield_now().await;
            }
        });
        let arrivals = (0..600u64).map(|index| arrival(index, Duration::from_micros(index * 250)));
        let run = run_on(config(&plan, &server), arrivals, Timer::Os)
            .await
            .expect("a run");
        hog.await.expect("the hog ends");
        let r = &run.recorder;
        assert_eq!(
            (r.logical, r.dropped, r.succeeded, r.attempts, r.lag.len()),
            (600, 0, 600, 600, 600)
        );
        assert_eq!(
            server.ledger().attempts,
            600,
            "each arrival reached the server once"
        );
        server.shutdown().await;
    }
}
