//! One logical request's task: from its arrival to its verdict, the client core's
//! [`LogicalRequest`] fed the answers of its attempts, on the wire through the engine's
//! pool. What the recorder hears of the request is the core's to say; this shell sends,
//! waits, locks, reads the clock and traces.

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
use crate::logical::{ConnectionWait, LogicalRequest};
use crate::plan::RequestKind;
use crate::schedule::{Arrival, request_rng};
use crate::telemetry::trace::attr;
use crate::telemetry::{About, LogicalTrace};

/// Holds a logical request's place in `max_in_flight` and makes sure it ends counted: a
/// request that never reaches a verdict (stopped, or a panic) is recorded as unfinished,
/// with the time it had been running as a lower bound of its latency, and whether it
/// reached the server is counted either way, for the ledger to agree with.
struct Running<'a> {
    shared: &'a Shared,
    request: LogicalRequest,
    done: bool,
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        let now = (!self.done).then(|| self.shared.now());
        self.shared.recorders.record(|recorder| {
            if let Some(now) = now {
                self.request.unfinished(recorder, now);
            }
            self.request.count_reached(recorder);
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
        let kind = &shared.plan.load.requests[arrival.kind];
        let rng = request_rng(shared.seed, arrival.index);
        // The lag is measured where the request really starts: on a worker, after the spawn.
        let started = shared.now();
        shared.arrivals.hand_over_due(shared, started);
        let lag = started.saturating_sub(arrival.at);
        shared
            .recorders
            .record(|r| LogicalRequest::arrived(r, arrival, lag));
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
        let (logical, action) = {
            let mut client = lock(&shared.client);
            let now = shared.now();
            // Read only for a trace: an untraced request pays nothing for it.
            let before = trace.as_ref().and_then(|_| client.breaker_state(now));
            let (logical, action) =
                LogicalRequest::start(&mut client, shared.share_budget, kind, *arrival, now);
            if let (Some(trace), Some(t)) = (&mut trace, traced) {
                note(trace, t, &client, before, logical.session(), &action);
            }
            (logical, action)
        };
        let request = Request {
            shared,
            arrival,
            kind,
            id,
            stop,
            rng,
            traced,
            trace,
            running: Running {
                shared,
                request: logical,
                done: false,
            },
        };
        (request, action)
    }

    /// One attempt sent and answered, then the client's decision on the answer; `None`
    /// when the run stopped first.
    async fn send(&mut self, attempt: Attempt, timeout: Option<Duration>) -> Option<Action> {
        let shared = self.shared;
        let sent = shared.now();
        self.running.request.sending(attempt, sent);
        let session = self.running.request.session();
        let traceparent = match (&mut self.trace, self.traced) {
            (Some(trace), Some(t)) => Some(trace.send(
                t.telemetry.span_id(),
                attempt,
                t.wall(sent),
                self.kind.path_for(self.arrival.n),
                session.violations(),
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
            allowance: session.allowance(),
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
                self.stopped_sending(attempt::left_process(send.as_mut()));
                return None;
            }
        };
        Some(self.answered(answer, wait))
    }

    /// An attempt's answer counted (and traced), then the client's decision on it.
    fn answered(&mut self, answer: Answer, wait: Option<Wait>) -> Action {
        let shared = self.shared;
        let now = shared.now();
        shared.arrivals.hand_over_due(shared, now);
        // A wait for one of the client's own connections says nothing of the target.
        if !wait.is_some_and(|w| w.timed_out) {
            shared.watch_target(answer.outcome(), now);
        }
        let sent = self.running.request.out().map_or(now, |(sent, _)| sent);
        let wait = wait.map(|w| ConnectionWait {
            waited: w.waited,
            timed_out: w.timed_out,
        });
        let (request, id) = (&mut self.running.request, self.id);
        shared.recorders.record(|recorder| {
            request.answered(recorder, now, answer.outcome(), wait, id);
        });
        if let (Some(trace), Some(t)) = (&mut self.trace, self.traced) {
            trace.answer(t.wall(now), answer.outcome(), answer.duplicate);
            t.telemetry.meters().attempt(
                now.saturating_sub(sent),
                &duration_attributes(t, self.kind, answer.outcome()),
            );
        }
        let rng = &mut self.rng;
        decide(
            shared,
            &mut self.trace,
            &mut self.running.request,
            |client, request, now| request.decide_reply(client, now, answer.reply, rng),
        )
    }

    /// The end of a request stopped with an attempt out: the attempt is counted abandoned
    /// if it had left the process (it may have reached the server), else cut.
    fn stopped_sending(&mut self, left: bool) {
        let shared = self.shared;
        let (request, id) = (&mut self.running.request, self.id);
        shared
            .recorders
            .record(|recorder| request.stopped(recorder, left, id));
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
            &mut self.running.request,
            |client, request, now| request.decide_timer(client, now),
        )
    }

    /// The end: the verdict counted, with the latency from the scheduled time.
    fn finish(&mut self, verdict: &Verdict) {
        let shared = self.shared;
        let end = shared.now();
        let request = &self.running.request;
        shared
            .recorders
            .record(|r| request.finished(r, end, verdict));
        self.running.done = true;
        if let (Some(trace), Some(t)) = (self.trace.take(), self.traced) {
            t.telemetry
                .finish(trace, Some(verdict), t.wall(end), &t.target);
        }
    }
}

/// One decision of the client for `request`, under the client's lock and at the time read
/// there; a traced request notes what was decided.
fn decide(
    shared: &Shared,
    trace: &mut Option<LogicalTrace>,
    request: &mut LogicalRequest,
    decision: impl FnOnce(&mut Client, &mut LogicalRequest, Duration) -> Action,
) -> Action {
    let mut client = lock(&shared.client);
    let now = shared.now();
    // Read only for a trace: an untraced request pays nothing for it.
    let before = trace.as_ref().and_then(|_| client.breaker_state(now));
    let action = decision(&mut client, request, now);
    if let (Some(trace), Some(traced)) = (trace, &shared.telemetry) {
        note(trace, traced, &client, before, request.session(), &action);
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
