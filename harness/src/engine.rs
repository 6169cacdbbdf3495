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

use chaos_policy::{Action, BreakerState, Client, GiveUp, Outcome, RunCounts, Session, Verdict};
use opentelemetry::KeyValue;
use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;
use tokio::time::{Instant, sleep_until};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

mod connections;
mod dispatch;
mod recorders;

use connections::Connections;
use dispatch::{Arrivals, Timer, dispatch};
use recorders::Recorders;

use crate::attempt::{self, AttemptSpec};
use crate::plan::{NamedPolicy, Plan, RequestKind};
use crate::pool::{BadTarget, Pool};
use crate::schedule::{Arrival, Schedule};
use crate::stats::{Reached, Recorder};
use crate::telemetry::trace::attr;
use crate::telemetry::{About, Counts, LogicalTrace, Target, Telemetry};

/// Why a policy's run could not be carried out.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("the load dispatcher failed: {0}")]
    Dispatcher(String),
    #[error(transparent)]
    Target(#[from] BadTarget),
}

/// What one policy's run produced.
#[derive(Debug)]
pub struct PolicyRun {
    pub recorder: Recorder,
    /// The amplification the policy's budget permits for this run's counts.
    pub budget_bound: Option<f64>,
    pub breaker_trips: u64,
    /// How long the run took, arrivals and drain.
    pub elapsed: Duration,
    /// Stopped by the user before the end.
    pub aborted: bool,
    /// Stopped early because the target is plainly gone: why.
    pub gone: Option<String>,
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
    let pooled = plan
        .load
        .max_connections
        .unwrap_or(plan.load.max_in_flight)
        .min(1024);
    let http = Pool::new(&config.base_url, pooled as usize)?;
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
            .map(|kind| attempt::Prepared::new(&config.base_url, kind, &config.policy.name))
            .collect(),
        base_url: config.base_url,
        policy: config.policy.name.clone(),
        http,
        connections: plan.load.max_connections.map(Connections::new),
        plan: Arc::clone(&plan),
        seed: plan.seed,
        refusing_since: AtomicU64::new(0),
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
    let recorder = std::mem::take(&mut *shared.recorders.merged());
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
        let (budget, breaker, trips) = {
            let client = lock(&shared.client);
            (
                client.budget_level(now),
                client.breaker_state(now),
                client.breaker_trips(),
            )
        };
        let mut recorder = shared.recorders.merged();
        // The row of the second that is ending, even if this wake-up came late.
        recorder.sample_state(Duration::from_secs(second - 1), budget, breaker);
        if let Some(traced) = &shared.telemetry {
            let counts = Counts::of(&recorder, trips, breaker, budget);
            traced.telemetry.meters().publish(&shared.policy, counts);
        }
        if let Some(progress) = &progress {
            progress(second, &recorder);
        }
    }
}

/// Per-request randomness (jitter) from the seed and the request's index, so a request's
/// decisions do not depend on how the others interleave.
pub(crate) fn request_rng(seed: u64, index: u64) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(request_rng_seed(seed, index))
}

/// What [`request_rng`] is seeded with.
pub(crate) fn request_rng_seed(seed: u64, index: u64) -> u64 {
    fault_server::seed::splitmix64(seed ^ 0x6a09_e667_f3bc_c908) ^ index
}

/// Holds a logical request's place in `max_in_flight` and makes sure it ends counted: a
/// request that never reaches a verdict (stopped, or a panic) is recorded as unfinished,
/// with the time it had been running as a lower bound of its latency. It also counts
/// whether the request reached the server, for the ledger to agree with.
struct Running<'a> {
    shared: &'a Shared,
    scheduled: Duration,
    done: bool,
    reached: Reached,
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        let ran = (!self.done).then(|| self.shared.now().saturating_sub(self.scheduled));
        self.shared.recorders.record(|recorder| {
            if let Some(ran) = ran {
                recorder.unfinished(self.scheduled, ran);
            }
            recorder.reached(self.reached);
        });
        self.shared.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

async fn drive(shared: Arc<Shared>, arrival: Arrival, stop: CancellationToken) {
    let mut running = Running {
        shared: &shared,
        scheduled: arrival.at,
        done: false,
        reached: Reached::No,
    };
    let kind = &shared.plan.load.requests[arrival.kind];
    let id = fault_server::wire::request_id(&shared.policy, arrival.index);
    let mut rng = request_rng(shared.seed, arrival.index);
    // The lag is measured where the request really starts: on a worker, after the spawn.
    let started = shared.now();
    shared.arrivals.hand_over_due(&shared, started);
    let lag = started.saturating_sub(arrival.at);
    shared.recorders.record(|r| r.arrived(arrival.at, lag));
    let traced = shared.telemetry.as_ref();
    let mut trace = traced.map(|t| {
        t.telemetry.begin(
            shared.seed,
            arrival.index,
            t.wall(arrival.at),
            About {
                policy: &shared.policy,
                kind: &kind.name,
                method: &kind.method,
                route: &kind.path,
                request_id: &id,
            },
        )
    });
    // The time is read under the lock, so the client hears of times in the order they
    // were read.
    let (mut session, mut action) = {
        let mut client = lock(&shared.client);
        let now = shared.now();
        // Read only for a trace: an untraced request pays nothing for it.
        let before = trace.as_ref().and_then(|_| client.breaker_state(now));
        let (session, action) = client.start(kind.policy_request(), now);
        if let (Some(trace), Some(t)) = (&mut trace, traced) {
            note(trace, t, &client, before, &session, &action);
        }
        (session, action)
    };
    loop {
        match action {
            Action::Send { attempt, timeout } => {
                let sent = shared.now();
                let traceparent = match (&mut trace, traced) {
                    (Some(trace), Some(t)) => Some(trace.send(
                        t.telemetry.span_id(),
                        attempt,
                        t.wall(sent),
                        attempt::path_of(kind, arrival.n),
                        session.violations(),
                    )),
                    _ => None,
                };
                let spec = AttemptSpec {
                    kind: &shared.kinds[arrival.kind],
                    id: &id,
                    n: arrival.n,
                    attempt,
                    timeout,
                    traceparent: traceparent.as_deref(),
                    propagate_deadline: !shared.plan.tiers.is_empty(),
                };
                let record_sent = |recorder: &mut Recorder| {
                    recorder.sent(
                        sent,
                        arrival.at,
                        attempt.is_retry(),
                        &id,
                        session.violations(),
                    );
                };
                // Boxed: the send is most of a request's state, and a task's whole state is
                // moved when it is spawned; a request that never sends never pays for it.
                let mut send = Box::pin(attempt::tracked(connections::send(
                    &shared.http,
                    shared.connections.as_ref(),
                    spec,
                )));
                let (answer, wait) = tokio::select! {
                    biased;
                    answer = &mut send => answer,
                    () = stop.cancelled() => {
                        let left = attempt::left_process(send.as_mut());
                        shared.recorders.record(|recorder| {
                            if left {
                                record_sent(recorder);
                                recorder.abandoned += 1;
                            } else {
                                recorder.cut();
                            }
                        });
                        if left {
                            running.reached = running.reached.max(Reached::Maybe);
                        }
                        if let (Some(mut trace), Some(t)) = (trace.take(), traced) {
                            let now = t.wall(shared.now());
                            if left {
                                trace.abandon(now);
                            } else {
                                // Never on the wire: not an attempt, in the trace either.
                                trace.cut();
                            }
                            t.telemetry.finish(trace, None, now, &t.target);
                        }
                        return;
                    }
                };
                let now = shared.now();
                shared.arrivals.hand_over_due(&shared, now);
                if !answer.outcome.proves_unsent() {
                    running.reached = Reached::Yes;
                }
                // A wait for one of the client's own connections says nothing of the target.
                if !wait.is_some_and(|w| w.timed_out) {
                    shared.watch_target(answer.outcome, now);
                }
                shared.recorders.record(|recorder| {
                    if let Some(wait) = wait {
                        recorder.waited(wait.waited, wait.timed_out);
                    }
                    record_sent(recorder);
                    recorder.attempt_done(
                        answer.outcome,
                        now.saturating_sub(sent),
                        attempt.is_retry(),
                    );
                });
                if let (Some(trace), Some(t)) = (&mut trace, traced) {
                    trace.answer(t.wall(now), answer.outcome, answer.duplicate);
                    t.telemetry.meters().attempt(
                        now.saturating_sub(sent),
                        &duration_attributes(t, kind, answer.outcome),
                    );
                }
                action = decide(&shared, &mut trace, &mut session, |client, session, now| {
                    client.on_answer(
                        session,
                        now,
                        answer.outcome,
                        answer.retry_after,
                        answer.no_retry,
                        &mut rng,
                    )
                });
            }
            Action::Wait { until } => {
                tokio::select! {
                    () = stop.cancelled() => {
                        if let (Some(trace), Some(t)) = (trace.take(), traced) {
                            t.telemetry.finish(trace, None, t.wall(shared.now()), &t.target);
                        }
                        return;
                    }
                    () = sleep_until(shared.start + until) => {}
                }
                action = decide(&shared, &mut trace, &mut session, |client, session, now| {
                    client.on_timer(session, now)
                });
            }
            Action::Done(verdict) => {
                let end = shared.now();
                let latency = end.saturating_sub(arrival.at);
                shared
                    .recorders
                    .record(|r| r.finished(arrival.at, latency, &verdict));
                running.done = true;
                if let (Some(trace), Some(t)) = (trace.take(), traced) {
                    t.telemetry
                        .finish(trace, Some(&verdict), t.wall(end), &t.target);
                }
                return;
            }
        }
    }
}

/// One decision of the client for `session`, under the client's lock and at the time read
/// there; a traced request notes what was decided.
fn decide(
    shared: &Shared,
    trace: &mut Option<LogicalTrace>,
    session: &mut Session,
    decision: impl FnOnce(&mut Client, &mut Session, Duration) -> Action,
) -> Action {
    let mut client = lock(&shared.client);
    let now = shared.now();
    // Read only for a trace: an untraced request pays nothing for it.
    let before = trace.as_ref().and_then(|_| client.breaker_state(now));
    let action = decision(&mut client, session, now);
    if let (Some(trace), Some(traced)) = (trace, &shared.telemetry) {
        note(trace, traced, &client, before, session, &action);
    }
    action
}

/// What the policy just decided, on the trace: a breaker that changed state, the wait
/// before a retry, or why a retry was refused.
fn note(
    trace: &mut LogicalTrace,
    traced: &Traced,
    client: &Client,
    before: Option<BreakerState>,
    session: &Session,
    action: &Action,
) {
    let now = client.clock();
    let at = traced.wall(now);
    let after = client.breaker_state(now);
    if let (Some(from), Some(to)) = (before, after)
        && from != to
    {
        trace.event(
            "breaker transition",
            at,
            vec![
                attr("chaos.breaker.from", breaker_name(from)),
                attr("chaos.breaker.to", breaker_name(to)),
            ],
        );
    }
    match *action {
        Action::Wait { .. } => {
            if let Some(wait) = session.last_wait() {
                trace.wait(at, wait);
            }
        }
        Action::Done(Verdict::GaveUp { reason, last, .. }) => {
            let mut attributes = vec![attr("chaos.give_up", reason.name())];
            if let Some(last) = last {
                attributes.push(attr("chaos.outcome", last.to_string()));
            }
            let name = match reason {
                GiveUp::BudgetExhausted => {
                    if let Some(level) = client.budget_level(now) {
                        attributes.push(attr("chaos.budget.level", level));
                    }
                    "retry refused by the budget"
                }
                GiveUp::Permanent => "retry refused: permanent outcome",
                GiveUp::NonIdempotent => "retry refused: not idempotent",
                GiveUp::BreakerOpen => "attempt refused by the open breaker",
                GiveUp::Deadline => "retry refused: past the deadline",
                GiveUp::MaxAttempts => "retry refused: max attempts reached",
                GiveUp::NoRetry => "retry refused: the tier behind gave up",
            };
            trace.event(name, at, attributes);
        }
        Action::Send { .. } | Action::Done(Verdict::Succeeded { .. }) => {}
    }
}

fn breaker_name(state: BreakerState) -> &'static str {
    match state {
        BreakerState::Closed => "closed",
        BreakerState::Open => "open",
        BreakerState::HalfOpen => "half_open",
    }
}

/// The attributes of `http.client.request.duration`, as the semantic conventions give them.
fn duration_attributes(traced: &Traced, kind: &RequestKind, outcome: Outcome) -> Vec<KeyValue> {
    let mut attributes = traced.base.clone();
    attributes.push(KeyValue::new("http.request.method", kind.method.clone()));
    attributes.push(KeyValue::new("url.template", kind.path.clone()));
    match outcome {
        Outcome::Status(code) => {
            attributes.push(KeyValue::new("http.response.status_code", i64::from(code)));
            if code >= 400 {
                attributes.push(KeyValue::new("error.type", code.to_string()));
            }
        }
        other => attributes.push(KeyValue::new("error.type", other.kind())),
    }
    attributes
}
