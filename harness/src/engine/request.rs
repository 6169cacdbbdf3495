//! One logical request's task: from its arrival to its verdict, a [`Session`] fed the
//! answers of its attempts, on the wire through the engine's pool.
//!
//! [`Session`]: chaos_policy::Session

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use chaos_policy::{Action, Attempt, BreakerState, Client, GiveUp, Outcome, Session, Verdict};
use opentelemetry::KeyValue;
use rand_chacha::ChaCha8Rng;
use tokio::time::sleep_until;
use tokio_util::sync::CancellationToken;

use super::connections::{self, Wait};
use super::{Shared, Traced, lock};
use crate::attempt::{self, Answer, AttemptSpec};
use crate::plan::RequestKind;
use crate::schedule::{Arrival, request_rng};
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

/// The task of one logical request: its start, then what the client decides, an attempt or
/// a wait at a time, to the end.
pub(super) async fn drive(shared: Arc<Shared>, arrival: Arrival, stop: CancellationToken) {
    let id = fault_server::wire::request_id(&shared.policy, arrival.index);
    let (mut request, mut action) = Request::start(&shared, &arrival, &id, &stop);
    loop {
        action = match action {
            Action::Send { attempt, timeout } => match request.send(attempt, timeout).await {
                Some(next) => next,
                None => return,
            },
            // Awaited here rather than in a helper, whose future would hold copies of its
            // arguments in every task's state.
            Action::Wait { until } => {
                tokio::select! {
                    () = stop.cancelled() => return request.stopped_waiting(),
                    () = sleep_until(shared.start + until) => {}
                }
                request.after_wait()
            }
            Action::Done(verdict) => return request.finish(&verdict),
        };
    }
}

/// What the phases of one logical request share.
///
/// What [`drive`] holds already (the engine's state, the arrival, the id, the stop signal)
/// is borrowed from it, not copied: an attempt in flight borrows the id and the engine's
/// state without holding the request, and the task's state, moved whole when it is
/// spawned, holds each of them once.
struct Request<'a> {
    shared: &'a Arc<Shared>,
    arrival: &'a Arrival,
    kind: &'a RequestKind,
    id: &'a str,
    stop: &'a CancellationToken,
    rng: ChaCha8Rng,
    session: Session,
    traced: Option<&'a Traced>,
    /// Kept only when the run is traced.
    trace: Option<LogicalTrace>,
    running: Running<'a>,
}

impl<'a> Request<'a> {
    /// The start: the arrival counted with its lag, the trace begun, and the client's first
    /// decision.
    fn start(
        shared: &'a Arc<Shared>,
        arrival: &'a Arrival,
        id: &'a str,
        stop: &'a CancellationToken,
    ) -> (Request<'a>, Action) {
        let running = Running {
            shared,
            scheduled: arrival.at,
            done: false,
            reached: Reached::No,
        };
        let kind = &shared.plan.load.requests[arrival.kind];
        let rng = request_rng(shared.seed, arrival.index);
        // The lag is measured where the request really starts: on a worker, after the spawn.
        let started = shared.now();
        shared.arrivals.hand_over_due(shared, started);
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
                    request_id: id,
                    rpc: kind.rpc.as_ref(),
                },
            )
        });
        // The time is read under the lock, so the client hears of times in the order they
        // were read.
        let (session, action) = {
            let mut client = lock(&shared.client);
            let now = shared.now();
            // Read only for a trace: an untraced request pays nothing for it.
            let before = trace.as_ref().and_then(|_| client.breaker_state(now));
            let (session, action) = crate::plan::start_request(
                &mut client,
                shared.share_budget,
                kind.policy_request(),
                now,
            );
            if let (Some(trace), Some(t)) = (&mut trace, traced) {
                note(trace, t, &client, before, &session, &action);
            }
            (session, action)
        };
        let request = Request {
            shared,
            arrival,
            kind,
            id,
            stop,
            rng,
            session,
            traced,
            trace,
            running,
        };
        (request, action)
    }

    /// One attempt sent and answered, then the client's decision on the answer; `None`
    /// when the run stopped first.
    async fn send(&mut self, attempt: Attempt, timeout: Option<Duration>) -> Option<Action> {
        let shared = self.shared;
        let sent = shared.now();
        let traceparent = match (&mut self.trace, self.traced) {
            (Some(trace), Some(t)) => Some(trace.send(
                t.telemetry.span_id(),
                attempt,
                t.wall(sent),
                self.kind.path_for(self.arrival.n),
                self.session.violations(),
            )),
            _ => None,
        };
        let spec = AttemptSpec {
            kind: &shared.kinds[self.arrival.kind],
            id: self.id,
            n: self.arrival.n,
            attempt,
            timeout,
            traceparent: traceparent.as_deref(),
            propagate_deadline: !shared.plan.tiers.is_empty(),
            allowance: self.session.allowance(),
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
            () = self.stop.cancelled() => {
                self.stopped_sending(attempt::left_process(send.as_mut()), sent, attempt);
                return None;
            }
        };
        Some(self.answered(answer, wait, sent, attempt))
    }

    /// An attempt's answer counted (and traced), then the client's decision on it.
    fn answered(
        &mut self,
        answer: Answer,
        wait: Option<Wait>,
        sent: Duration,
        attempt: Attempt,
    ) -> Action {
        let shared = self.shared;
        let now = shared.now();
        shared.arrivals.hand_over_due(shared, now);
        self.running.reached = self.running.reached.after(answer.outcome);
        // A wait for one of the client's own connections says nothing of the target.
        if !wait.is_some_and(|w| w.timed_out) {
            shared.watch_target(answer.outcome, now);
        }
        shared.recorders.record(|recorder| {
            if let Some(wait) = wait {
                recorder.waited(wait.waited, wait.timed_out);
            }
            self.record_sent(recorder, sent, attempt);
            recorder.attempt_done(answer.outcome, now.saturating_sub(sent), attempt.is_retry());
        });
        if let (Some(trace), Some(t)) = (&mut self.trace, self.traced) {
            trace.answer(t.wall(now), answer.outcome, answer.duplicate);
            t.telemetry.meters().attempt(
                now.saturating_sub(sent),
                &duration_attributes(t, self.kind, answer.outcome),
            );
        }
        let rng = &mut self.rng;
        decide(
            shared,
            &mut self.trace,
            &mut self.session,
            |client, session, now| client.on_reply(session, now, answer.reply(), rng),
        )
    }

    /// The end of a request stopped with an attempt out: the attempt is counted abandoned
    /// if it had left the process (it may have reached the server), else cut.
    fn stopped_sending(&mut self, left: bool, sent: Duration, attempt: Attempt) {
        let shared = self.shared;
        shared.recorders.record(|recorder| {
            if left {
                self.record_sent(recorder, sent, attempt);
                recorder.abandoned += 1;
            } else {
                recorder.cut();
            }
        });
        if left {
            self.running.reached = self.running.reached.max(Reached::Maybe);
        }
        if let (Some(mut trace), Some(t)) = (self.trace.take(), self.traced) {
            let now = t.wall(shared.now());
            if left {
                trace.abandon(now);
            } else {
                // Never on the wire: not an attempt, in the trace either.
                trace.cut();
            }
            t.telemetry.finish(trace, None, now, &t.target);
        }
    }

    /// Counts the attempt sent at `sent`: once it is answered, or when the run stops after it
    /// left the process.
    fn record_sent(&self, recorder: &mut Recorder, sent: Duration, attempt: Attempt) {
        recorder.sent(
            sent,
            self.arrival.at,
            attempt.is_retry(),
            self.id,
            self.session.violations(),
        );
    }

    /// The end of a request stopped while it waited to retry.
    fn stopped_waiting(&mut self) {
        if let (Some(trace), Some(t)) = (self.trace.take(), self.traced) {
            t.telemetry
                .finish(trace, None, t.wall(self.shared.now()), &t.target);
        }
    }

    /// The client's decision once the wait before a retry is over.
    fn after_wait(&mut self) -> Action {
        decide(
            self.shared,
            &mut self.trace,
            &mut self.session,
            |client, session, now| client.on_timer(session, now),
        )
    }

    /// The end: the verdict counted, with the latency from the scheduled time.
    fn finish(&mut self, verdict: &Verdict) {
        let shared = self.shared;
        let end = shared.now();
        let latency = end.saturating_sub(self.arrival.at);
        shared
            .recorders
            .record(|r| r.finished(self.arrival.at, latency, verdict));
        self.running.done = true;
        if let (Some(trace), Some(t)) = (self.trace.take(), self.traced) {
            t.telemetry
                .finish(trace, Some(verdict), t.wall(end), &t.target);
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
        Outcome::Grpc(code) => {
            attributes.push(KeyValue::new("rpc.grpc.status_code", i64::from(code)));
        }
        other => attributes.push(KeyValue::new("error.type", other.kind())),
    }
    attributes
}
