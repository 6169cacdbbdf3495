//! The handler of every request outside the control API: the thin shell that asks the
//! pure script what to do and does it on the wire.
//!
//! The order of events for one request:
//! 0. refuse it if a header the ledger keeps (`x-request-id`, `Idempotency-Key`,
//!    `x-chaos-policy`) is longer than [`crate::LedgerLimits::max_value_bytes`] (431),
//!    so the ledger's memory is bounded in bytes, not only in entries; or is not UTF-8
//!    text, or is an empty key (400), rather than read it as absent: a key dropped
//!    silently would let a retried POST execute twice;
//! 1. record its arrival in the ledger (attempts, logical requests, policy);
//! 2. ask the script ([`crate::script::Script::select`]) with the run clock and a
//!    per-request RNG seeded from (seed, `x-request-id`, `x-chaos-attempt`,
//!    `x-chaos-upstream-attempts`: `wire::attempt_seed`), or from the seed and a counter
//!    for a request without an `x-request-id` (`wire::anonymous_seed`);
//! 3. a fault other than `delay` acts now, in front of the capacity model (as a load
//!    balancer or a proxy in front of the service would): with `processed: true` the
//!    side effect executes first, instantly;
//! 4. serving, detached from the connection (it goes on if the client hangs up): the
//!    capacity model admits, queues or rejects; an admitted request checks its
//!    `Idempotency-Key` (a replay answers the stored response at once), holds its slot
//!    for the `delay` (if a delay fault fired) plus the service time, executes its side
//!    effect (POST, PATCH) and answers 200.

use std::future::{self, Future};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::header::AsHeaderName;
use axum::http::header::CONTENT_TYPE;
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use rand_chacha::ChaCha8Rng;
use tokio::time::Instant;
use tokio_util::either::Either;

use super::answer::{
    ANONYMOUS_OK, FaultBody, JSON, OkBody, WithStatus, json, problem, replay, status_response,
    truncated_bytes,
};
use super::arrival::{decide, fingerprint, has_service_time, record_arrival};
use super::body::read_body;
use super::flight::InFlight;
use super::kept::{Kept, Text, kept_headers};
use super::socket::{ConnControl, current_connection};
use super::state::{Active, Shared, View};
use crate::ledger::{
    Disposition, Epoch, Execution, KeyCheck, KeyClaim, RequestIdentity, StoredResponse,
};
use crate::script::{Decision, Fault, FaultAction, HeaderLookup};
use crate::wire::DUPLICATE;
use crate::wire::TRACEPARENT;

/// A header's value as UTF-8 text (`HeaderValue::to_str` would take visible ASCII only),
/// by a name made once or by one as text ([`HeaderLookup`]).
pub(super) fn text(headers: &HeaderMap, name: impl AsHeaderName) -> Option<&str> {
    headers
        .get(name)
        .and_then(|v| std::str::from_utf8(v.as_bytes()).ok())
}

/// The shell's header lookup, for the script's matchers and the control API alike.
impl HeaderLookup for HeaderMap {
    fn header(&self, name: &str) -> Option<&str> {
        text(self, name)
    }
}

/// Releases an idempotency key if its request is abandoned before executing.
struct ClaimGuard<'a> {
    shared: &'a Shared,
    claim: Option<KeyClaim>,
}

impl Drop for ClaimGuard<'_> {
    fn drop(&mut self) {
        if let Some(claim) = self.claim.take() {
            self.shared.ledger.release_key(claim);
        }
    }
}

/// What the application did with a request.
enum AppResult {
    /// Executed (a side effect for POST/PATCH, nothing for the others).
    Done(Response),
    /// Answered from an idempotency key.
    Replayed(Arc<StoredResponse>),
    KeyInFlight,
    KeyMismatch,
}

/// What an `Idempotency-Key` already used answers instead of executing.
enum KeyAnswer {
    Replayed(Arc<StoredResponse>),
    InFlight,
    Mismatch,
}

impl From<KeyAnswer> for AppResult {
    fn from(answer: KeyAnswer) -> AppResult {
        match answer {
            KeyAnswer::Replayed(stored) => AppResult::Replayed(stored),
            KeyAnswer::InFlight => AppResult::KeyInFlight,
            KeyAnswer::Mismatch => AppResult::KeyMismatch,
        }
    }
}

/// The facts of one request the handler needs after its body is read.
struct Facts {
    method: Method,
    request_id: Option<Text>,
    attempt: Option<u32>,
    policy: Option<Text>,
    key: Option<Text>,
    /// Identifies "the same request" for idempotency keys (computed only with a key).
    fingerprint: u64,
}

impl Facts {
    fn new(parts: &Parts, body: &Bytes, kept: Kept) -> Facts {
        Facts {
            fingerprint: if kept.key.is_some() {
                fingerprint(&parts.method, &parts.uri, body)
            } else {
                0
            },
            method: parts.method.clone(),
            request_id: kept.request_id,
            attempt: kept.attempt,
            policy: kept.policy,
            key: kept.key,
        }
    }

    fn identity(&self) -> RequestIdentity<'_> {
        RequestIdentity {
            request_id: self.request_id.as_deref(),
            policy: self.policy.as_deref(),
        }
    }

    fn has_side_effect(&self) -> bool {
        crate::wire::has_side_effect(self.method.as_str())
    }
}

/// What [`handle`] gives back: a response already made, or the rest of the work.
pub(crate) type Handled =
    Either<future::Ready<Response>, Pin<Box<dyn Future<Output = Response> + Send>>>;

/// Handles a request. Everything up to the body's read runs now, in the call: a request
/// with no body, no fault and nothing to wait for (the faultless hot path) is answered
/// right here, and the future hyper moves into place for it is a finished response, not
/// the whole handler's state (1,328 bytes, copied several times a request, which cost the
/// faultless server about 3% of its throughput). Any other request's remaining work is
/// boxed.
pub(crate) fn handle(view: Arc<View>, request: Request) -> Handled {
    let shared = &view.shared;
    let mut flight = InFlight::new(&view);
    let (parts, body) = request.into_parts();
    let headers = &parts.headers;
    if let Some(tracing) = &shared.tracing {
        flight.span = Some(Box::new(tracing.begin(
            headers.header(TRACEPARENT),
            parts.method.as_str(),
            parts.uri.path(),
        )));
    }
    let kept = match kept_headers(headers, shared.ledger.limits().max_value_bytes) {
        Ok(kept) => kept,
        Err(bad) => {
            // Counted (`requests`, `bad_header`), never tracked.
            let ledger = &shared.ledger;
            flight.arrived(ledger.record_request(RequestIdentity::default(), shared.ledger_now()));
            flight.span(|span| span.status(bad.status().as_u16()));
            flight.outcome(Disposition::BadHeader);
            return ready(problem(bad.status(), &bad.to_string()));
        }
    };
    let active = &view.active;
    // One clock read for both clocks: the script's run clock and the ledger's.
    let arrived = Instant::now();
    if shared.ledger.judges() {
        // Grouped by the body too, so read first: boxed, off the hot path.
        return Either::Right(Box::pin(super::judged::handle(
            view, flight, parts, body, kept, arrived,
        )));
    }
    let now = arrived.saturating_duration_since(active.epoch);
    record_arrival(shared, &mut flight, &kept, arrived);

    let (rng, decision) = decide(active, shared, &parts, &kept, now);

    let serves_now = matches!(decision, Decision::Serve)
        && hyper::body::Body::size_hint(&body).exact() == Some(0)
        && !waits(active, Duration::ZERO);
    if serves_now {
        let facts = Facts::new(&parts, &Bytes::new(), kept);
        return ready(respond(app_now(shared, &facts, &mut flight), &mut flight));
    }
    Either::Right(Box::pin(finish(
        view, flight, parts, body, kept, rng, decision,
    )))
}

fn ready(response: Response) -> Handled {
    Either::Left(future::ready(response))
}

/// Whether serving waits for something (a capacity model, a delay, a service time), and
/// so runs on a task of its own.
fn waits(active: &Active, delay: Duration) -> bool {
    active.capacity.is_some() || !delay.is_zero() || has_service_time(&active.script)
}

/// The rest of [`handle`]: the body's read, then the fault or the service.
async fn finish(
    view: Arc<View>,
    mut flight: InFlight,
    parts: Parts,
    body: Body,
    kept: Kept,
    rng: Option<ChaCha8Rng>,
    decision: Decision,
) -> Response {
    let body = match read_body(body, view.shared.max_body).await {
        Ok(body) => body,
        Err(error) => return bad_body(&mut flight, &error),
    };
    proceed(view, flight, parts, body, kept, rng, decision).await
}

/// A body that could not be read whole: its status (413, 400 or 408) and why.
pub(super) fn bad_body(flight: &mut InFlight, error: &super::body::BodyError) -> Response {
    flight.span(|span| span.status(error.status().as_u16()));
    flight.outcome(Disposition::BadRequest);
    problem(error.status(), &error.to_string())
}

/// The rest of [`finish`], with the body read: the fault or the service.
pub(super) async fn proceed(
    view: Arc<View>,
    mut flight: InFlight,
    parts: Parts,
    body: Bytes,
    kept: Kept,
    rng: Option<ChaCha8Rng>,
    decision: Decision,
) -> Response {
    let (shared, active) = (&view.shared, &view.active);
    let script = &active.script;
    let facts = Facts::new(&parts, &body, kept);

    let mut delay = Duration::ZERO;
    if let Decision::Fault { phase, fault } = decision {
        let phase_name = script.phase_name(phase).unwrap_or("?").to_string();
        shared
            .ledger
            .record_fault_in(flight.epoch(), fault.kind(), &phase_name);
        flight.span(|span| {
            span.set("chaos.fault.phase", phase_name.clone());
            span.set("chaos.fault.kind", fault.kind().name());
        });
        if let FaultAction::Delay(d) = fault.action {
            delay = d;
        } else {
            if fault.processed {
                // The work is done, then the answer is lost: the retry that follows is
                // the double-charge scenario (unless an Idempotency-Key saves it).
                let _ = app_now(shared, &facts, &mut flight);
            }
            if let FaultAction::Status(response) = &fault.action {
                flight.outcome(Disposition::Status(response.status));
                return status_response(response, &phase_name);
            }
            // Rare next to the rest and ending the connection: boxed, so the future of
            // every request does not carry its room.
            return Box::pin(end_connection(
                shared,
                &mut flight,
                fault,
                &phase_name,
                &facts,
            ))
            .await;
        }
    }

    // Normal service runs detached from the connection: a real server does not notice
    // that its client gave up, so the request keeps its place in the queue, holds its
    // slot for the whole service time and executes its side effect even after the client
    // timed out. That wasted work is what lets a retry storm outlive its trigger.
    // Without a capacity model, a delay or a service time, serving completes in one poll
    // and cannot be abandoned halfway: it runs inline, which keeps the faultless hot path
    // free of a task spawn.
    if !waits(active, delay) {
        return respond(app_now(shared, &facts, &mut flight), &mut flight);
    }
    let work = tokio::spawn(serve(Arc::clone(&view), facts, flight, delay, rng));
    match work.await {
        Ok(response) => response,
        Err(_) => problem(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the request's task failed",
        ),
    }
}

/// Admission through the capacity model, then the application. A `delay` fault is spent
/// inside the slot: the server is slow, so a slow request holds its worker.
async fn serve(
    view: Arc<View>,
    facts: Facts,
    mut flight: InFlight,
    delay: Duration,
    mut rng: Option<ChaCha8Rng>,
) -> Response {
    let (shared, active) = (&view.shared, &view.active);
    let script = &active.script;
    let _slot = match &active.capacity {
        Some(capacity) => match timed(capacity.admit()).await {
            (Some(slot), waited) => {
                flight.span(|span| span.set("chaos.queue_wait_ms", waited.as_secs_f64() * 1e3));
                Some(slot)
            }
            (None, _) => {
                let status = StatusCode::from_u16(capacity.limits.reject_status)
                    .unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
                flight.span(|span| {
                    span.set("chaos.capacity", "rejected");
                    span.status(status.as_u16());
                });
                flight.outcome(Disposition::Rejected);
                let body = serde_json::to_string(&FaultBody {
                    error: "over capacity",
                    status: status.as_u16(),
                    phase: "server",
                })
                .unwrap_or_default();
                return ([(CONTENT_TYPE, JSON)], body)
                    .into_response()
                    .with_status(status);
            }
        },
        None => None,
    };
    let service_time = match (script.capacity(), rng.as_mut()) {
        (Some(limits), Some(rng)) => limits.service_time.sample(rng),
        _ => Duration::ZERO,
    };
    let done = app(shared, &facts, delay + service_time, &mut flight).await;
    respond(done, &mut flight)
}

/// The response to what the application did, with its outcome.
fn respond(done: AppResult, flight: &mut InFlight) -> Response {
    match done {
        AppResult::Done(response) => {
            flight.outcome(Disposition::Served);
            response
        }
        AppResult::Replayed(stored) => {
            flight.span(|span| {
                span.set("chaos.side_effect", "replayed");
                span.status(stored.status);
            });
            flight.outcome(Disposition::Replayed);
            replay(&stored)
        }
        AppResult::KeyInFlight => {
            flight.outcome(Disposition::KeyInFlight);
            problem(
                StatusCode::CONFLICT,
                "a request with this Idempotency-Key is still being processed",
            )
        }
        AppResult::KeyMismatch => {
            flight.outcome(Disposition::KeyMismatch);
            problem(
                StatusCode::UNPROCESSABLE_ENTITY,
                "this Idempotency-Key was used with a different request",
            )
        }
    }
}

/// The application: idempotency-key check, service time, side effect, response.
async fn app(
    shared: &Shared,
    facts: &Facts,
    service_time: Duration,
    flight: &mut InFlight,
) -> AppResult {
    let guard = match claim_key(shared, facts, flight.epoch()) {
        Ok(guard) => guard,
        Err(answered) => return answered.into(),
    };
    if !service_time.is_zero() {
        tokio::time::sleep(service_time).await;
    }
    execute_and_answer(guard, facts, flight)
}

/// The application without a service time: all of it at once, nothing to wait for.
fn app_now(shared: &Shared, facts: &Facts, flight: &mut InFlight) -> AppResult {
    match claim_key(shared, facts, flight.epoch()) {
        Ok(guard) => execute_and_answer(guard, facts, flight),
        Err(answered) => answered.into(),
    }
}

/// Checks a side effect's `Idempotency-Key`: a claim on a fresh key (released if the
/// request is abandoned before it executes), or the answer for a key already used.
fn claim_key<'a>(
    shared: &'a Shared,
    facts: &Facts,
    epoch: Epoch,
) -> Result<ClaimGuard<'a>, KeyAnswer> {
    let mut guard = ClaimGuard {
        shared,
        claim: None,
    };
    if facts.has_side_effect()
        && let Some(key) = &facts.key
    {
        match shared.ledger.begin_keyed_in(
            epoch,
            key,
            facts.fingerprint,
            facts.identity(),
            shared.ledger_now(),
        ) {
            KeyCheck::Fresh(claim) => guard.claim = Some(claim),
            KeyCheck::Replay(stored) => {
                shared
                    .metrics
                    .idempotent_replays
                    .fetch_add(1, Ordering::Relaxed);
                return Err(KeyAnswer::Replayed(stored));
            }
            KeyCheck::InFlight => return Err(KeyAnswer::InFlight),
            KeyCheck::Mismatch => return Err(KeyAnswer::Mismatch),
        }
    }
    Ok(guard)
}

/// Executes the side effect (POST, PATCH) and answers 200, completing the key's claim.
fn execute_and_answer(
    mut guard: ClaimGuard<'_>,
    facts: &Facts,
    flight: &mut InFlight,
) -> AppResult {
    let shared = guard.shared;
    let effect = if facts.has_side_effect() {
        execute(shared, facts, flight.epoch())
    } else {
        None
    };
    if let Some(effect) = &effect {
        flight.span(|span| {
            span.set(
                "chaos.side_effect",
                if effect.duplicate { "duplicate" } else { "ran" },
            );
            span.set("chaos.side_effect.number", effect.number as i64);
            if effect.duplicate {
                // A side effect run twice: the trace users need, whatever the ratio.
                span.force();
            }
        });
    }
    if effect.is_none() && facts.request_id.is_none() && facts.attempt.is_none() {
        return AppResult::Done(json(Body::from(ANONYMOUS_OK)));
    }
    let body = OkBody {
        ok: true,
        id: facts.request_id.as_deref(),
        attempt: facts.attempt,
        effect: effect.map(|e| e.number),
    }
    .to_json();
    if let Some(claim) = guard.claim.take() {
        shared.ledger.complete_key(
            claim,
            StoredResponse {
                status: 200,
                body: body.clone(),
            },
        );
    }
    let mut response = json(Body::from(body));
    if effect.is_some_and(|e| e.duplicate) {
        // Tells a tracing client that this logical request broke an invariant here.
        response
            .headers_mut()
            .insert(DUPLICATE, HeaderValue::from_static("1"));
    }
    AppResult::Done(response)
}

/// Executes the side effect; the ledger's receipt, unless the request is a straggler
/// (arrived before a reset since), which only the metrics count.
fn execute(shared: &Shared, facts: &Facts, epoch: Epoch) -> Option<Execution> {
    let now = shared.ledger_now();
    let execution = shared.ledger.execute_in(epoch, facts.identity(), now);
    shared.metrics.side_effects.fetch_add(1, Ordering::Relaxed);
    if execution.is_some_and(|e| e.duplicate) {
        shared
            .metrics
            .duplicate_side_effects
            .fetch_add(1, Ordering::Relaxed);
    }
    execution
}

/// Executes a fault that ends the connection: reset, close, truncate, timeout.
async fn end_connection(
    shared: &Shared,
    flight: &mut InFlight,
    fault: Fault,
    phase: &str,
    facts: &Facts,
) -> Response {
    let Some(control): Option<ConnControl> = current_connection() else {
        // Only reachable when the router is driven without this crate's accept loop.
        flight.outcome(Disposition::BadRequest);
        return problem(
            StatusCode::INTERNAL_SERVER_ERROR,
            "this fault needs a connection served by fault-server's accept loop",
        );
    };
    match fault.action {
        FaultAction::Reset => {
            flight.outcome(Disposition::Reset);
            control.reset();
        }
        FaultAction::Close => {
            flight.outcome(Disposition::Close);
            control.close();
        }
        FaultAction::Truncate(response) => {
            flight.outcome(Disposition::Truncate);
            let _ = control.write_raw(&truncated_bytes(
                &response,
                phase,
                facts.request_id.as_deref(),
                facts.attempt,
            ));
            control.reset();
        }
        FaultAction::Timeout { hold } => {
            flight.outcome(Disposition::Timeout);
            let hold = hold.map_or(shared.hang_cap, |h| h.min(shared.hang_cap));
            tokio::select! {
                () = tokio::time::sleep(hold) => {}
                () = shared.stop.shutdown.cancelled() => {}
            }
            control.close();
        }
        FaultAction::Status(_) | FaultAction::Delay(_) => {
            unreachable!("status and delay faults are handled by the caller")
        }
    }
    // The connection task drops this future together with the connection.
    future::pending().await
}

/// Runs `work` and says how long it took.
async fn timed<T>(work: impl future::Future<Output = T>) -> (T, Duration) {
    let start = tokio::time::Instant::now();
    let out = work.await;
    (out, start.elapsed())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::super::config::ServerConfig;
    use super::*;

    /// hyper moves each request's future into place (and tokio's task-local wraps it),
    /// copying every byte of it on every request: the handler's whole state was 1,328
    /// bytes (rustc 1.95) before it answered the hot path in the call.
    #[test]
    fn the_request_future_stays_small() {
        let shared = Arc::new(Shared::new(ServerConfig::default()));
        let view = Arc::new(View::now(&shared));
        let future = handle(view, Request::new(Body::empty()));
        let size = std::mem::size_of_val(&future);
        assert!(size <= 256, "the request's future is {size} bytes");
        assert!(
            matches!(future, Either::Left(_)),
            "a faultless GET is answered in the call"
        );
    }
}
