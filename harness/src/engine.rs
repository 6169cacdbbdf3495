//! The live engine: one open-loop load loop, driving each logical request through the
//! shared policy core over real HTTP.
//!
//! The loop sleeps until each arrival's scheduled time and hands it to a task; it never
//! waits for responses, so a slow server cannot slow the offered load (no coordinated
//! omission). Beyond `max_in_flight` an arrival is dropped and counted; beyond
//! `max_connections` an attempt waits for a connection (see [`connections`]). Each task
//! feeds a [`Session`] the outcomes of its attempts and acts on what comes out; the budget
//! and breaker, shared by all requests of the policy, sit in one [`Client`] behind a mutex
//! that is held only for a decision. The schedule runs on an OS timer (see [`dispatch`]),
//! against the real clock, so the engine is not meant for paused tokio time; the
//! schedule's own timing is tested purely.
//!
//! Two clocks, each for one thing. Latency (and a session's place in the time series)
//! counts from the arrival's scheduled time, so a dispatcher that falls behind cannot hide
//! its own delay. Every decision of the policy's [`Client`] is made at the time the engine
//! reads when it asks (`now`, from the run's start): a request that dispatch reached late
//! starts on the client's timeline when it really starts, and the client itself never lets
//! that timeline run backwards (see [`Client`]).
//!
//! [`Session`]: chaos_policy::Session

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use std::time::SystemTime;

use chaos_policy::{Client, Outcome, RunCounts};
use opentelemetry::KeyValue;
use tokio::time::{Instant, sleep_until};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

mod connections;
mod dispatch;
mod recorders;
mod request;

use connections::Connections;
use dispatch::{Arrivals, Timer, dispatch};
use recorders::Recorders;

use crate::attempt;
use crate::plan::{NamedPolicy, Plan};
use crate::pool::{BadTarget, Pool};
use crate::schedule::{Arrival, Schedule};
pub use crate::stats::PolicyRun;
use crate::stats::{Connects, Recorder};
use crate::telemetry::{Counts, Target, Telemetry};

/// Why a policy's run could not be carried out.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("the load dispatcher failed: {0}")]
    Dispatcher(String),
    #[error(transparent)]
    Target(#[from] BadTarget),
    #[error(transparent)]
    Unbuildable(#[from] attempt::Unbuildable),
}

/// A target that refused every connection for this long is gone: the policy stops rather
/// than keep offering load to nothing.
pub const GONE_AFTER: Duration = Duration::from_secs(2);

/// Called once a second with the second just finished and the counts so far.
pub type Progress = Arc<dyn Fn(u64, &Recorder) + Send + Sync>;

pub struct EngineConfig<'a> {
    pub plan: &'a Plan,
    pub policy: &'a NamedPolicy,
    pub base_url: String,
    /// Cancelled when the user interrupts the run.
    pub abort: CancellationToken,
    pub progress: Option<Progress>,
    /// Traces and metrics, when the run exports them.
    pub telemetry: Option<Arc<Telemetry>>,
}

impl std::fmt::Debug for EngineConfig<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineConfig")
            .field("plan", &self.plan.name)
            .field("policy", &self.policy.name)
            .field("base_url", &self.base_url)
            .finish_non_exhaustive()
    }
}

struct Shared {
    client: Mutex<Client>,
    /// The most retries a request takes out of the client's budget for its chain, when
    /// the policy shares its budget with its relay tiers (`share_budget`).
    share_budget: Option<u32>,
    recorders: Recorders,
    in_flight: AtomicU32,
    start: Instant,
    base_url: String,
    policy: String,
    /// The plan's request kinds, ready to send.
    kinds: Vec<attempt::Prepared>,
    http: Pool,
    /// The plan's cap on connections, if it sets one.
    connections: Option<Connections>,
    plan: Arc<Plan>,
    seed: u64,
    /// Since when (µs from the start, plus one; 0: not) every attempt failed to connect.
    refusing_since: AtomicU64,
    /// Connections the pool had opened at the last per-second sample, and the most
    /// opened between two samples.
    connects_sampled: AtomicU64,
    connects_peak: AtomicU64,
    /// Cancelled when the user aborts or the target is gone: stops dispatch, then all.
    halt: CancellationToken,
    gone: OnceLock<String>,
    telemetry: Option<Traced>,
    /// The arrivals still to come, for the dispatcher and the tasks to hand over.
    arrivals: Arrivals,
}

/// What a traced run needs besides the telemetry: the wall-clock time of the run's start
/// (spans carry wall-clock times; the engine counts from a monotonic start), where the
/// attempts go, and the attributes every duration measurement carries.
struct Traced {
    telemetry: Arc<Telemetry>,
    wall: SystemTime,
    target: Target,
    base: Vec<KeyValue>,
}

impl Traced {
    fn wall(&self, at: Duration) -> SystemTime {
        self.wall + at
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A task that panicked mid-decision leaves consistent counters behind: keep going.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Shared {
    fn now(&self) -> Duration {
        self.start.elapsed()
    }

    /// Watches for a target that refuses every connection: an outcome that proves the
    /// request unsent extends the streak, any other ends it.
    fn watch_target(&self, outcome: Outcome, now: Duration) {
        if !outcome.proves_unsent() {
            self.refusing_since.store(0, Ordering::Relaxed);
            return;
        }
        let stamp = u64::try_from(now.as_micros()).unwrap_or(u64::MAX - 1) + 1;
        let since = match self.refusing_since.compare_exchange(
            0,
            stamp,
            Ordering::Relaxed,
            Ordering::Relaxed,
        ) {
            Ok(_) => return,
            Err(since) => Duration::from_micros(since - 1),
        };
        if now.saturating_sub(since) >= GONE_AFTER {
            let _ = self.gone.set(format!(
                "the target at {} refused every connection from {:.1} s to {:.1} s into the run ({outcome}): it is gone, so policy `{}` stopped early",
                self.base_url,
                since.as_secs_f64(),
                now.as_secs_f64(),
                self.policy
            ));
            self.halt.cancel();
        }
    }
}

/// Runs the plan's load through one policy against `base_url`, then drains.
pub async fn run(config: EngineConfig<'_>) -> Result<PolicyRun, EngineError> {
    let arrivals = Schedule::new(&config.plan.load, config.plan.seed);
    run_arrivals(config, arrivals).await
}

/// [`run`] with the arrivals given: the plan's schedule, or any other sequence due in order.
pub async fn run_arrivals<A>(
    config: EngineConfig<'_>,
    arrivals: A,
) -> Result<PolicyRun, EngineError>
where
    A: Iterator<Item = Arrival> + Send + 'static,
{
    run_on(config, arrivals, Timer::Os).await
}

/// [`run_arrivals`] with the dispatcher's timer chosen (the tests take the fallback too).
async fn run_on<A>(
    config: EngineConfig<'_>,
    arrivals: A,
    timer: Timer,
) -> Result<PolicyRun, EngineError>
where
    A: Iterator<Item = Arrival> + Send + 'static,
{
    let plan = Arc::new(config.plan.clone());
    // Idle connections kept for the next attempts: as many as may be busy at once.
    let cap = plan.load.connection_cap();
    let pooled = cap.unwrap_or(plan.load.max_in_flight).min(1024);
    let multiplexed = plan.load.multiplexed_over().map(|n| n as usize);
    let http = Pool::new(&config.base_url, pooled as usize, multiplexed)?;
    let start = Instant::now();
    let telemetry = config
        .telemetry
        .map(|telemetry| Traced::new(telemetry, &config.base_url, &config.policy.name));
    let tasks = TaskTracker::new();
    let halt = config.abort.child_token();
    // Cancelled when the drain ends: requests still running stop and count as unfinished.
    let stop = halt.child_token();
    let shared = Arc::new(Shared {
        client: Mutex::new(Client::new(config.policy.policy.clone())),
        recorders: Recorders::new(plan.fault_window),
        in_flight: AtomicU32::new(0),
        start,
        kinds: plan
            .load
            .requests
            .iter()
            .map(|kind| {
                attempt::Prepared::new(
                    &config.base_url,
                    kind,
                    &config.policy.name,
                    plan.load.protocol,
                )
            })
            .collect::<Result<_, _>>()?,
        base_url: config.base_url,
        policy: config.policy.name.clone(),
        share_budget: config.policy.share_budget,
        http,
        connections: cap.map(Connections::new),
        plan: Arc::clone(&plan),
        seed: plan.seed,
        refusing_since: AtomicU64::new(0),
        connects_sampled: AtomicU64::new(0),
        connects_peak: AtomicU64::new(0),
        halt: halt.clone(),
        gone: OnceLock::new(),
        telemetry,
        arrivals: Arrivals::new(arrivals, tasks.clone(), stop.clone()),
    });

    let sampler = tokio::spawn(sample_every_second(
        Arc::clone(&shared),
        stop.clone(),
        config.progress,
    ));

    let (stop_all, all_tasks) = (&stop, &tasks);
    let halted = match dispatch(&shared, timer).await {
        Ok(halted) => halted,
        Err(e) => {
            // Stop what was started, then say what went wrong: a crash is no interruption.
            stop_all.cancel();
            all_tasks.close();
            all_tasks.wait().await;
            sampler.abort();
            return Err(EngineError::Dispatcher(panic_message(e)));
        }
    };
    tasks.close();
    wait_out(&shared, &tasks, halted).await;
    stop.cancel();
    tasks.wait().await;
    let _ = sampler.await;
    Ok(conclude(&shared, &config.abort))
}

impl Traced {
    fn new(telemetry: Arc<Telemetry>, base_url: &str, policy: &str) -> Traced {
        let target = Target::new(base_url);
        let base = vec![
            KeyValue::new("chaos.policy", policy.to_owned()),
            KeyValue::new("server.address", target.host.clone()),
            KeyValue::new("server.port", target.port),
        ];
        Traced {
            telemetry,
            wall: SystemTime::now(),
            target,
            base,
        }
    }
}

/// Once every arrival is handed over: the rest of the plan's duration, then the drain,
/// each cut short by a halt.
async fn wait_out(shared: &Shared, tasks: &TaskTracker, mut halted: bool) {
    // Arrivals run for the plan's whole duration even when the last one came early (a slow
    // Poisson tail), so late fault phases and the recovery after them are observed.
    if !halted {
        tokio::select! {
            () = shared.halt.cancelled() => halted = true,
            () = sleep_until(shared.start + shared.plan.duration) => {}
        }
    }
    // Drain: in-flight requests get `drain` to finish, then are stopped.
    if !halted {
        tokio::select! {
            () = tasks.wait() => {}
            () = tokio::time::sleep(shared.plan.drain) => {}
            () = shared.halt.cancelled() => {}
        }
    }
}

/// The run's figures, once its tasks are done; the final counts go to the telemetry too.
fn conclude(shared: &Shared, abort: &CancellationToken) -> PolicyRun {
    let elapsed = shared.now();
    let mut recorder = shared.recorders.take();
    recorder.streams_waited = shared.http.streams_waited();
    let opened = shared.http.opened();
    // The last second of the run (perhaps part of one) has had no sample.
    let last = opened - shared.connects_sampled.load(Ordering::Relaxed);
    recorder.connects = Some(Connects {
        opened,
        peak_per_second: shared.connects_peak.load(Ordering::Relaxed).max(last),
    });
    let client = lock(&shared.client);
    if let Some(traced) = &shared.telemetry {
        let now = client.clock().max(elapsed);
        traced.telemetry.meters().publish(
            &shared.policy,
            Counts::of(
                &recorder,
                client.breaker_trips(),
                client.breaker_state(now),
                client.budget_level(now),
            ),
        );
    }
    let run = RunCounts {
        logical: recorder.logical,
        duration: recorder.last_send,
    };
    PolicyRun {
        budget_bound: client.budget_bound(run),
        breaker_trips: client.breaker_trips(),
        recorder,
        elapsed,
        aborted: abort.is_cancelled(),
        gone: shared.gone.get().cloned(),
    }
}

fn panic_message(e: tokio::task::JoinError) -> String {
    match e.try_into_panic() {
        Ok(payload) => payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .map_or_else(|| "it panicked".to_owned(), |m| format!("it panicked: {m}")),
        Err(e) => e.to_string(),
    }
}

async fn sample_every_second(
    shared: Arc<Shared>,
    stop: CancellationToken,
    progress: Option<Progress>,
) {
    let mut second = 0u64;
    loop {
        second += 1;
        let at = shared.start + Duration::from_secs(second);
        // Sample just before the second ends, so the row holds the state it ended in.
        let sample_at = at - Duration::from_millis(1);
        tokio::select! {
            () = stop.cancelled() => return,
            () = sleep_until(sample_at) => {}
        }
        let now = shared.now();
        let opened = shared.http.opened();
        let before = shared.connects_sampled.swap(opened, Ordering::Relaxed);
        shared
            .connects_peak
            .fetch_max(opened - before, Ordering::Relaxed);
        let (budget, breaker, trips) = {
            let client = lock(&shared.client);
            (
                client.budget_level(now),
                client.breaker_state(now),
                client.breaker_trips(),
            )
        };
        shared.recorders.merged(|recorder| {
            // The row of the second that is ending, even if this wake-up came late.
            recorder.sample_state(Duration::from_secs(second - 1), budget, breaker);
            if let Some(traced) = &shared.telemetry {
                let counts = Counts::of(recorder, trips, breaker, budget);
                traced.telemetry.meters().publish(&shared.policy, counts);
            }
            if let Some(progress) = &progress {
                progress(second, recorder);
            }
        });
    }
}
