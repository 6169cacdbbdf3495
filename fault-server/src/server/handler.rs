//! The handler of every request outside the control API: the thin shell that asks the
//! pure script what to do and does it on the wire.
//!
//! The order of events for one request:
//! 0. refuse `CONNECT` (501), and a path that climbs above the root or holds an encoded
//!    slash (400), and normalise any other path once, for the script and the upstream
//!    ([`super::path`]); with an upstream, answer 508 Loop Detected if its `Via` names
//!    this server (it came round a loop of proxies, and is never forwarded again); refuse it if a header the ledger keeps (`x-request-id`, `Idempotency-Key`,
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
//!    effect (POST, PATCH) and answers 200 ([`super::app`]).
//!
//! With an upstream, the user's service is the application of step 4 (and does the work
//! of a `processed: true` fault in step 3): [`super::upstream`] forwards the request, its
//! body streaming, on a task of its own whatever the method (so the ledger counts the
//! service's answer when the caller left), and answers what the service answered.

use std::borrow::Cow;
use std::future::{self, Future};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::header::AsHeaderName;
use axum::http::header::CONTENT_TYPE;
use axum::http::request::Parts;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use rand_chacha::ChaCha8Rng;
use tokio::time::Instant;
use tokio_util::either::Either;

use super::answer::{FaultBody, JSON, WithStatus, problem, status_response, truncated_bytes};
use super::app::{Facts, app, app_now, respond};
use super::arrival::{decide, has_service_time, record_arrival};
use super::body::{discard_body, read_body};
use super::flight::InFlight;
use super::kept::{Kept, kept_headers};
use super::path::normalise;
use super::socket::{ConnControl, current_connection};
use super::state::{Active, Shared, View};
use super::upstream;
use crate::effect::{Effect, Ending, effect};
use crate::ledger::{Disposition, RequestIdentity};
use crate::script::{Decision, Fault, HeaderLookup, Script};
use crate::wire::{TRACEPARENT, has_side_effect};

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
    let grpc = view.shared.upstream.is_none()
        && request
            .headers()
            .get(CONTENT_TYPE)
            .is_some_and(|c| crate::wire::grpc::is_grpc(c.as_bytes()));
    let handled = handle_http(view, request);
    if !grpc {
        return handled;
    }
    match handled {
        Either::Left(answer) => ready(super::grpc::answer(answer.into_inner())),
        Either::Right(rest) => {
            Either::Right(Box::pin(async move { super::grpc::answer(rest.await) }))
        }
    }
}

/// [`handle`], answering as HTTP; a gRPC call's answer is rewritten from it
/// ([`super::grpc`]).
fn handle_http(view: Arc<View>, request: Request) -> Handled {
    let shared = &view.shared;
    let mut flight = InFlight::new(&view);
    let (mut parts, body) = request.into_parts();
    if let Some(refused) = refused_target(&mut parts) {
        // Counted (`requests`, `bad_request`), never tracked nor forwarded.
        let ledger = &shared.ledger;
        flight.arrived(ledger.record_request(RequestIdentity::default(), shared.ledger_now()));
        flight.outcome(Disposition::BadRequest);
        return ready(refused);
    }
    let headers = &parts.headers;
    if let Some(tracing) = &shared.tracing {
        flight.span = Some(Box::new(tracing.begin(
            headers.header(TRACEPARENT),
            parts.method.as_str(),
            parts.uri.path(),
        )));
    }
    if shared
        .upstream
        .as_ref()
        .is_some_and(|proxy| proxy.came_back(headers))
    {
        // Counted (`requests`, `loop_detected`), never tracked nor forwarded.
        flight.arrived(
            shared
                .ledger
                .record_request(RequestIdentity::default(), shared.ledger_now()),
        );
        flight.span(|span| span.status(crate::wire::LOOP_DETECTED));
        flight.outcome(Disposition::LoopDetected);
        return ready(upstream::loop_detected());
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
    record_arrival(shared, &mut flight, &kept, &parts, arrived);
    let (rng, decision) = decide(active, shared, &parts, &kept, flight.arrival(), now);

    let at_once = matches!(decision, Decision::Serve) && !waits(active, Duration::ZERO);
    if at_once
        && shared.upstream.is_none()
        && hyper::body::Body::size_hint(&body).exact() == Some(0)
    {
        let facts = Facts::new(&parts, &Bytes::new(), kept);
        return ready(respond(app_now(shared, &facts, &mut flight), &mut flight));
    }
    if at_once && shared.upstream.is_some() && !has_side_effect(parts.method.as_str()) {
        return Either::Right(upstream::forward_now(view, flight, parts, body, kept));
    }
    Either::Right(Box::pin(finish(
        view, flight, parts, body, kept, rng, decision,
    )))
}

/// Refuses what this server cannot serve as asked, and normalises the request's path
/// once ([`super::path`]) for the script's matchers, the upstream and the application
/// (the refusal, if any, is the answer):
/// - `CONNECT` (501): this server is an origin or a reverse proxy and opens no tunnels
///   (hyper would take a 2xx to it as the start of one);
/// - a path that climbs above the root or holds an encoded slash, and `*` but for
///   `OPTIONS` (400).
fn refused_target(parts: &mut Parts) -> Option<Response> {
    if parts.method == Method::CONNECT {
        return Some(problem(
            StatusCode::NOT_IMPLEMENTED,
            "CONNECT is not supported: this server is an origin or a reverse proxy, and opens no tunnels",
        ));
    }
    if parts.uri.path() == "*" && parts.method != Method::OPTIONS {
        return Some(problem(
            StatusCode::BAD_REQUEST,
            "the asterisk form (*) is a request target for OPTIONS only (RFC 9112 section 3.2.4)",
        ));
    }
    let normal = match normalise(parts.uri.path()) {
        Ok(Cow::Borrowed(_)) => return None,
        Ok(Cow::Owned(normal)) => normal,
        Err(refused) => return Some(problem(StatusCode::BAD_REQUEST, &refused.to_string())),
    };
    // `//__chaos/script` or `/%5F_chaos/ledger` reach the handler, not the control API
    // (which routes the path as sent): they must not be forwarded to an upstream that is
    // itself a fault-server, whose control API would answer them.
    if super::control::always_serve(&normal) {
        return Some(problem(
            StatusCode::NOT_FOUND,
            "a control or health path written another way (doubled slashes, dot segments, escapes) is not the control API: write it as /__chaos/..., /healthz or /metrics",
        ));
    }
    let normal = match parts.uri.query() {
        Some(query) => format!("{normal}?{query}"),
        None => normal,
    };
    match Uri::try_from(normal) {
        Ok(uri) => {
            let sent = std::mem::replace(&mut parts.uri, uri);
            parts.extensions.insert(super::path::AsSent(sent));
            None
        }
        Err(_) => Some(problem(
            StatusCode::BAD_REQUEST,
            "the request path is not a valid path once normalised",
        )),
    }
}

fn ready(response: Response) -> Handled {
    Either::Left(future::ready(response))
}

/// Whether serving waits for something (a capacity model, a delay, a service time), and
/// so runs on a task of its own.
fn waits(active: &Active, delay: Duration) -> bool {
    active.capacity.is_some() || !delay.is_zero() || has_service_time(&active.script)
}

/// The rest of [`handle`]: the body's read, then the fault or the service. With an
/// upstream, the body of a request the upstream will see is not read here but streamed
/// to it, and that of a faulted one is read and dropped.
async fn finish(
    view: Arc<View>,
    mut flight: InFlight,
    parts: Parts,
    body: Body,
    kept: Kept,
    rng: Option<ChaCha8Rng>,
    decision: Decision,
) -> Response {
    let shared = &view.shared;
    let (whole, stream) = match &shared.upstream {
        Some(_) if upstream::sees(&decision) => (Ok(Bytes::new()), Some(body)),
        Some(_) => (discard_body(body).await.map(|()| Bytes::new()), None),
        None => (read_body(body, shared.max_body).await, None),
    };
    let body = match whole {
        Ok(body) => body,
        Err(error) => return bad_body(&mut flight, &error),
    };
    proceed(view, flight, parts, body, stream, kept, rng, decision).await
}

/// A body that could not be read whole: its status (413, 400 or 408) and why.
pub(super) fn bad_body(flight: &mut InFlight, error: &super::body::BodyError) -> Response {
    flight.span(|span| span.status(error.status().as_u16()));
    flight.outcome(Disposition::BadRequest);
    problem(error.status(), &error.to_string())
}

/// The rest of [`finish`], with the body read (`body`) or, for the upstream to see,
/// still to stream (`stream`): the fault or the service.
#[allow(clippy::too_many_arguments)]
pub(super) async fn proceed(
    view: Arc<View>,
    mut flight: InFlight,
    parts: Parts,
    body: Bytes,
    stream: Option<Body>,
    kept: Kept,
    rng: Option<ChaCha8Rng>,
    decision: Decision,
) -> Response {
    let shared = &view.shared;
    let mut facts = Facts::new(&parts, &body, kept);

    let mut delay = Duration::ZERO;
    let mut close_after = false;
    if let Decision::Fault { phase, fault } = decision {
        let phase_name = note_fault(shared, &mut flight, &view.active.script, phase, &fault);
        match effect(
            &fault,
            shared.hang_cap,
            facts.grpc && shared.upstream.is_none(),
        ) {
            Effect::Serve { extra, drain } => {
                delay = extra;
                if drain {
                    close_after = drain_connection(parts.version);
                }
            }
            Effect::Answer { ending, processed } => {
                if processed {
                    // The work is done, then the answer is lost: the retry that follows
                    // is the double-charge scenario (unless an Idempotency-Key saves it).
                    let outcome = ending.disposition();
                    match process_anyway(&view, parts, stream, facts, flight, outcome).await {
                        Some(kept) => (facts, flight) = kept,
                        None => return upstream::task_failed(),
                    }
                }
                flight.outcome(ending.disposition());
                return answer_fault(shared, ending, &phase_name, &facts).await;
            }
        }
    }

    let mut response = serve_or_forward(&view, flight, parts, stream, facts, delay, rng).await;
    if close_after {
        response.headers_mut().insert(
            axum::http::header::CONNECTION,
            axum::http::HeaderValue::from_static("close"),
        );
    }
    response
}

/// Counts the fault in the ledger and on the request's span, and names the phase that
/// fired it.
fn note_fault(
    shared: &Shared,
    flight: &mut InFlight,
    script: &Script,
    phase: usize,
    fault: &Fault,
) -> String {
    let phase_name = script.phase_name(phase).unwrap_or("?").to_string();
    shared
        .ledger
        .record_fault_in(flight.epoch(), fault.kind(), &phase_name);
    flight.span(|span| {
        span.set("chaos.fault.phase", phase_name.clone());
        span.set("chaos.fault.kind", fault.kind().name());
    });
    phase_name
}

/// A request served as usual whose connection goes away behind it: HTTP/2's is drained
/// now; HTTP/1.1 says so in this very answer (hyper closes a connection whose response
/// says `close`), so true when the answer must carry `Connection: close`.
fn drain_connection(version: axum::http::Version) -> bool {
    if version >= axum::http::Version::HTTP_2 {
        if let Some(control) = current_connection() {
            control.drain();
        }
        false
    } else {
        true
    }
}

/// A `processed: true` fault's work, done before its answer is lost: by the upstream
/// when the request is to be forwarded (`stream`), else by the application. The forward
/// is detached as every forward is, and records the fault's `outcome` itself, so a
/// caller gone meanwhile (its connection ended by another request's fault) leaves the
/// request counted as what it was, not `abandoned`. The facts and the flight come back
/// for the fault's answer; `None` if the task failed.
async fn process_anyway(
    view: &Arc<View>,
    parts: Parts,
    stream: Option<Body>,
    facts: Facts,
    mut flight: InFlight,
    outcome: Disposition,
) -> Option<(Facts, InFlight)> {
    let shared = &view.shared;
    let Some(body) = stream else {
        drop(app_now(shared, &facts, &mut flight));
        return Some((facts, flight));
    };
    let request = upstream::outgoing(shared, parts, body);
    let caller = upstream::Caller::default();
    let (view, watch) = (Arc::clone(view), caller.clone());
    let task = async move {
        upstream::processed(&view.shared, request, &facts, &mut flight, &watch).await;
        flight.outcome(outcome);
        (facts, flight)
    };
    upstream::detach(caller, task).await
}

/// The answer of a fault that answers now: a refused stream, a scripted status (or gRPC
/// code), or the connection ended.
async fn answer_fault(
    shared: &Shared,
    ending: Ending,
    phase_name: &str,
    facts: &Facts,
) -> Response {
    match ending {
        Ending::Refuse => super::conn::refuse_stream(),
        Ending::Status { response, grpc } => {
            let answer = status_response(&response, phase_name);
            match grpc {
                Some(status) => super::grpc::scripted(answer, status),
                None => answer,
            }
        }
        // Rare next to the rest and ending the connection: boxed, so the future of every
        // request does not carry its room.
        ending => Box::pin(end_connection(shared, ending, phase_name, facts)).await,
    }
}

/// The request served (after a `delay` fault's `delay`, if one fired), by the
/// application or, when `stream` is its body, by the upstream.
///
/// Normal service runs detached from the connection: a real server does not notice
/// that its client gave up, so the request keeps its place in the queue, holds its
/// slot for the whole service time and executes its side effect even after the client
/// timed out. That wasted work is what lets a retry storm outlive its trigger.
/// Without a capacity model, a delay or a service time, serving completes in one poll
/// and cannot be abandoned halfway: it runs inline, which keeps the faultless hot path
/// free of a task spawn. Forwarding is always detached, whatever the method: the ledger
/// counts what the upstream executed, whether or not its caller stayed for the answer
/// ([`upstream::detach`]).
async fn serve_or_forward(
    view: &Arc<View>,
    mut flight: InFlight,
    parts: Parts,
    stream: Option<Body>,
    facts: Facts,
    delay: Duration,
    rng: Option<ChaCha8Rng>,
) -> Response {
    let shared = &view.shared;
    let forward = stream.map(|body| upstream::outgoing(shared, parts, body));
    if !waits(&view.active, delay) && forward.is_none() {
        return respond(app_now(shared, &facts, &mut flight), &mut flight);
    }
    let caller = upstream::Caller::default();
    let work = serve(
        Arc::clone(view),
        facts,
        flight,
        delay,
        rng,
        forward,
        caller.clone(),
    );
    upstream::detach(caller, work)
        .await
        .unwrap_or_else(upstream::task_failed)
}

/// Admission through the capacity model, then the application (or the upstream, when
/// `forward` is the request to send it). A `delay` fault is spent inside the slot: the
/// server is slow, so a slow request holds its worker.
async fn serve(
    view: Arc<View>,
    facts: Facts,
    mut flight: InFlight,
    delay: Duration,
    mut rng: Option<ChaCha8Rng>,
    forward: Option<Request>,
    caller: upstream::Caller,
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
    if let Some(request) = forward {
        let wait = delay + service_time;
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        return upstream::forward(shared, request, &facts, &mut flight, &caller).await;
    }
    let done = app(shared, &facts, delay + service_time, &mut flight).await;
    respond(done, &mut flight)
}

/// Carries out an ending that ends the connection: reset, close, truncate, hold. The
/// ledger has counted it already.
async fn end_connection(shared: &Shared, ending: Ending, phase: &str, facts: &Facts) -> Response {
    let Some(control): Option<ConnControl> = current_connection() else {
        // Only reachable when the router is driven without this crate's accept loop.
        return problem(
            StatusCode::INTERNAL_SERVER_ERROR,
            "this fault needs a connection served by fault-server's accept loop",
        );
    };
    match ending {
        Ending::Reset => control.reset(),
        Ending::Close => control.close(),
        Ending::Truncate(response) => {
            let _ = control.write_raw(&truncated_bytes(
                &response,
                phase,
                facts.request_id.as_deref(),
                facts.attempt,
            ));
            control.reset();
        }
        Ending::Hold(hold) => {
            tokio::select! {
                () = tokio::time::sleep(hold) => {}
                () = shared.stop.shutdown.cancelled() => {}
            }
            control.close();
        }
        Ending::Refuse | Ending::Status { .. } => {
            unreachable!("a refusal and a status are answered by the caller")
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
