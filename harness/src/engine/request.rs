//! One logical request's task: from its arrival to its verdict, a [`Session`] fed the
//! answers of its attempts, on the wire through the engine's pool.
//!
//! [`Session`]: chaos_policy::Session

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use chaos_policy::{Action, BreakerState, Client, GiveUp, Outcome, Session, Verdict};
use opentelemetry::KeyValue;
use tokio::time::sleep_until;
use tokio_util::sync::CancellationToken;

use super::{Shared, Traced, connections, lock, request_rng};
use crate::attempt::{self, AttemptSpec};
use crate::plan::RequestKind;
use crate::schedule::Arrival;
use crate::stats::{Reached, Recorder};
use crate::telemetry::trace::attr;
use crate::telemetry::{About, LogicalTrace};

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

pub(super) async fn drive(shared: Arc<Shared>, arrival: Arrival, stop: CancellationToken) {
    let mut running = Running {
        shared: &shared,
        scheduled: arrival.at,
        done: false,
        reached: Reached::No,
    };
    let kind = &shared.plan.load.requests[arrival.kind];
    let id = format!("{}-{:07}", shared.policy, arrival.index);
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
