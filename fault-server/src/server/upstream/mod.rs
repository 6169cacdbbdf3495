//! The fault proxy: with `--upstream URL` (a harness plan's `target: { upstream: URL }`),
//! every request the script does not fault is forwarded to the user's service, and its
//! answer comes back; the ledger counts attempts, logical requests and side effects in
//! front of it as it does in front of the built-in application.
//!
//! Why a proxy and not only a stand-in: a client's retries are tested against the faults
//! the script injects, and its service's real answers (its own 5xx, its own latency, its
//! own idempotency) are what the client meets in production; with both, the ledger shows
//! what retries did to a real service, its duplicate side effects included.
//!
//! What changes with an upstream, and what does not (the handler's order of events is
//! the same; this module is where the application would serve):
//! - a faulted request never reaches the upstream, but for a fault with `processed:
//!   true`, which is forwarded first and then fails (the work is done, the answer lost);
//! - the request body streams to the upstream as it arrives, and the response body
//!   streams back as the upstream sends it: neither is buffered, so the server's body
//!   limit (`max_body`) does not apply to them (the body deadline does); the body of a
//!   faulted request, which the upstream never sees, is read and dropped;
//! - `Idempotency-Key` is the service's business: it is forwarded, never replayed here;
//! - a forwarded POST or PATCH that the upstream answered, whatever its status, is a side
//!   effect executed (a duplicate when its `x-request-id` executed before, as in front of
//!   the built-in application);
//! - every forward, whatever its method or its caller's protocol, runs on a task of its
//!   own ([`caller`]), so the ledger learns the upstream's answer even when the caller
//!   left meanwhile: `upstream_answered` counts every answer, `upstream_caller_gone`
//!   those nobody was waiting for;
//! - an upstream's `101 Switching Protocols` is a 502 counted `upstream_failed`: this
//!   proxy tunnels nothing (nor does it take `CONNECT`: [`super::handler`]);
//! - the capacity model, when the script has one, admits, queues or rejects in front of
//!   the upstream and holds the request's slot until the upstream's answer begins;
//! - the upstream's own failures are counted apart from the injected ones
//!   ([`Disposition::Upstream`] and its kin: `upstream_<code>`, `upstream_unreachable`,
//!   `upstream_timeout`, `upstream_failed`).
//!
//! The client is a pool of keep-alive HTTP/1.1 connections made once per server
//! ([`pool`]), each used by one request at a time on that request's task ([`exchange`]),
//! speaking HTTP/1.1 through a codec without IO ([`h1`]); headers are rewritten as a
//! reverse proxy does ([`headers`]).

mod caller;
mod exchange;
mod h1;
mod headers;
mod pool;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode, Version};
use axum::response::Response;

use crate::upstream_url::Upstream;

pub(super) use caller::{Caller, detach};

use super::answer::problem;
use super::app::{Facts, execute};
use super::flight::InFlight;
use super::kept::Kept;
use super::socket::current_peer;
use super::state::{Shared, View};
use crate::ledger::{Disposition, Note};
use crate::script::{Decision, FaultAction};
use crate::wire::{DUPLICATE, HopKind, LOOP_DETECTED, ViaName};

/// The upstream and the pool of connections that reach it, made once per server.
pub(crate) struct Proxy {
    /// `Host` for every forwarded request: the upstream's `host:port`.
    host: HeaderValue,
    /// This server's own name in `Via`, drawn when it starts.
    via: ViaName,
    /// [`Proxy::via`]'s entry, as every forwarded request carries it.
    via_entry: HeaderValue,
    pool: pool::Pool,
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy")
            .field("upstream", self.pool.upstream())
            .finish_non_exhaustive()
    }
}

impl Proxy {
    pub(crate) fn new(upstream: Upstream) -> Proxy {
        let host = HeaderValue::from_str(upstream.authority().as_str())
            .unwrap_or_else(|_| HeaderValue::from_static("localhost"));
        let via = ViaName::new(HopKind::FaultServer);
        let via_entry = HeaderValue::from_str(via.entry())
            .expect("a Via entry is ASCII letters, digits, dots, dashes and a space");
        Proxy {
            host,
            via,
            via_entry,
            pool: pool::Pool::new(upstream),
        }
    }

    /// Whether a request carries this server's own `Via` entry: it has come round a loop
    /// (this server forwarding to itself, or through other proxies back to it).
    pub(super) fn came_back(&self, headers: &axum::http::HeaderMap) -> bool {
        headers::came_back(headers, &self.via)
    }

    fn upstream(&self) -> &Upstream {
        self.pool.upstream()
    }

    /// The request as the upstream gets it: its path under the upstream's base path (in
    /// origin form), HTTP/1.1, and its headers rewritten ([`headers::for_upstream`]).
    fn outgoing(&self, mut parts: Parts, body: Body) -> Request {
        // The normal form is joined to a base path (so it cannot climb out of it); with
        // none, the path goes as the client sent it.
        let as_sent = parts.extensions.remove::<super::path::AsSent>();
        if let Some(uri) = self.upstream().uri(&parts.uri) {
            parts.uri = uri;
        } else if let Some(super::path::AsSent(sent)) = as_sent {
            parts.uri = sent;
        }
        parts.version = Version::HTTP_11;
        let client = current_peer().and_then(|peer| HeaderValue::from_maybe_shared(peer).ok());
        headers::for_upstream(&mut parts.headers, &self.host, client, &self.via_entry);
        Request::from_parts(parts, body)
    }
}

/// What a request that came round a loop gets, at once and never forwarded: 508 Loop
/// Detected, which no policy retries.
pub(super) fn loop_detected() -> Response {
    problem(
        StatusCode::from_u16(LOOP_DETECTED).expect("508 is a valid status"),
        "loop detected: this request already passed this fault-server (its Via names it), so forwarding it again would go round the loop once more; check the --upstream of every proxy on its way",
    )
}

/// Whether the upstream sees a request the script decided this for: one served or
/// delayed, or faulted after `processed: true`.
pub(super) fn sees(decision: &Decision) -> bool {
    match decision {
        Decision::Serve => true,
        Decision::Fault { fault, .. } => {
            fault.processed || matches!(fault.action, FaultAction::Delay(_))
        }
    }
}

/// The proxy's hot path: a request the script serves at once, without a side effect,
/// forwarded at once in a future of its own ([`super::handler`]'s whole one is several
/// KiB, moved into place for every request), the request already on its way.
pub(super) fn forward_now(
    view: Arc<View>,
    mut flight: InFlight,
    parts: Parts,
    body: Body,
    kept: Kept,
) -> Pin<Box<dyn Future<Output = Response> + Send>> {
    let facts = Facts::new(&parts, &Bytes::new(), kept);
    let Some(proxy) = &view.shared.upstream else {
        return Box::pin(std::future::ready(no_upstream(&mut flight)));
    };
    let sending = proxy.pool.send(proxy.outgoing(parts, body));
    let caller = Caller::default();
    let watch = caller.clone();
    Box::pin(async move {
        let task = async move {
            let answer = sending.await;
            answered(&view.shared, answer, &facts, &mut flight, &watch)
        };
        detach(caller, task).await.unwrap_or_else(task_failed)
    })
}

/// What the caller of a detached request gets if its task panicked: a bug.
pub(super) fn task_failed() -> Response {
    problem(
        StatusCode::INTERNAL_SERVER_ERROR,
        "the request's task failed",
    )
}

/// The request as the upstream will get it. Made while the request is still tied to its
/// connection (whose client address goes in `X-Forwarded-For`), before it may be moved
/// to a task of its own; with no upstream, as it came.
pub(super) fn outgoing(shared: &Shared, parts: Parts, body: Body) -> Request {
    match &shared.upstream {
        Some(proxy) => proxy.outgoing(parts, body),
        None => Request::from_parts(parts, body),
    }
}

/// Forwards a request the script did not fault and answers what the upstream answered,
/// recording the request's outcome and, for a POST or PATCH the upstream answered, its
/// side effect. `request` is the [`outgoing`] one; run it [`detach`]ed, waited for by
/// `caller`.
pub(super) async fn forward(
    shared: &Shared,
    request: Request,
    facts: &Facts,
    flight: &mut InFlight,
    caller: &Caller,
) -> Response {
    let Some(proxy) = &shared.upstream else {
        return no_upstream(flight);
    };
    let answer = proxy.pool.send(request).await;
    answered(shared, answer, facts, flight, caller)
}

/// What the handler answers if it forwards without an upstream: a bug.
fn no_upstream(flight: &mut InFlight) -> Response {
    flight.outcome(Disposition::BadRequest);
    problem(
        StatusCode::INTERNAL_SERVER_ERROR,
        "no upstream to forward to",
    )
}

/// The client's response to what came back from the upstream, with the request's outcome
/// and, for a POST or PATCH the upstream answered, its side effect.
fn answered(
    shared: &Shared,
    answer: pool::Answer,
    facts: &Facts,
    flight: &mut InFlight,
    caller: &Caller,
) -> Response {
    let answer = answer.and_then(refuse_switch);
    match answer {
        Ok(response) => {
            note_answer(shared, flight, caller);
            let duplicate = facts.has_side_effect()
                && execute(shared, facts, flight).is_some_and(|e| e.duplicate);
            let (mut parts, body) = response.into_parts();
            flight.outcome(Disposition::Upstream(parts.status.as_u16()));
            headers::for_client(&mut parts.headers);
            if duplicate {
                // Tells a tracing client that this logical request broke an invariant.
                parts
                    .headers
                    .insert(DUPLICATE, HeaderValue::from_static("1"));
            }
            Response::from_parts(parts, body)
        }
        Err(lost) => {
            let failure = Failure::of(lost);
            flight.outcome(failure.disposition());
            let detail = match &shared.upstream {
                Some(proxy) => failure.describe(proxy.upstream()),
                None => "no upstream to forward to".to_string(),
            };
            problem(failure.status(), &detail)
        }
    }
}

/// Forwards a request whose fault says `processed: true`: the upstream does the work,
/// and its answer is dropped (the fault answers instead). Its side effect counts as for
/// any forwarded request; a failure to reach the upstream is not the fault's business and
/// leaves no trace but the missing side effect.
pub(super) async fn processed(
    shared: &Shared,
    request: Request,
    facts: &Facts,
    flight: &mut InFlight,
    caller: &Caller,
) {
    let Some(proxy) = &shared.upstream else {
        return;
    };
    if proxy
        .pool
        .send(request)
        .await
        .and_then(refuse_switch)
        .is_ok()
    {
        note_answer(shared, flight, caller);
        if facts.has_side_effect() {
            execute(shared, facts, flight);
        }
    }
}

/// Notes that the upstream answered a forwarded request, and whether its caller had gone.
fn note_answer(shared: &Shared, flight: &InFlight, caller: &Caller) {
    let ledger = &shared.ledger;
    ledger.record_note_in(flight.epoch(), Note::UpstreamAnswered);
    if caller.gone() {
        ledger.record_note_in(flight.epoch(), Note::CallerGone);
    }
}

/// An upstream's `101 Switching Protocols` as a failure: the connection it came on now
/// speaks another protocol, which this proxy cannot carry (its client side is HTTP
/// request and response, and the connection is dropped with the answer, never reused).
fn refuse_switch(response: Response) -> pool::Answer {
    if response.status() == StatusCode::SWITCHING_PROTOCOLS {
        return Err(pool::Lost::Switched);
    }
    Ok(response)
}

/// Why a forwarded request got no answer from the upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Failure {
    /// No connection could be made.
    Unreachable,
    /// No answer began within the timeout.
    Timeout,
    /// The connection broke, or the answer was not HTTP.
    Failed,
    /// The upstream answered `101 Switching Protocols`.
    Switched,
    /// The client's own body failed (cut off, malformed, or past the body deadline:
    /// `timed_out`), so the request could not be sent whole.
    ClientBody { timed_out: bool },
}

impl Failure {
    /// Why the pool got no answer.
    fn of(lost: pool::Lost) -> Failure {
        match lost {
            pool::Lost::Connect => Failure::Unreachable,
            pool::Lost::Timeout => Failure::Timeout,
            pool::Lost::Failed => Failure::Failed,
            pool::Lost::Switched => Failure::Switched,
            pool::Lost::ClientBody { timed_out } => Failure::ClientBody { timed_out },
        }
    }

    fn disposition(self) -> Disposition {
        match self {
            Failure::Unreachable => Disposition::UpstreamUnreachable,
            Failure::Timeout => Disposition::UpstreamTimeout,
            Failure::Failed | Failure::Switched => Disposition::UpstreamFailed,
            Failure::ClientBody { .. } => Disposition::BadRequest,
        }
    }

    fn status(self) -> StatusCode {
        match self {
            Failure::Unreachable | Failure::Failed | Failure::Switched => StatusCode::BAD_GATEWAY,
            Failure::Timeout => StatusCode::GATEWAY_TIMEOUT,
            Failure::ClientBody { timed_out: true } => StatusCode::REQUEST_TIMEOUT,
            Failure::ClientBody { timed_out: false } => StatusCode::BAD_REQUEST,
        }
    }

    /// The problem body's text, naming the upstream.
    fn describe(self, upstream: &Upstream) -> String {
        match self {
            Failure::Unreachable => format!("the upstream {upstream} could not be reached"),
            Failure::Timeout => format!(
                "the upstream {upstream} did not answer within {}",
                crate::duration::format_duration(upstream.timeout())
            ),
            Failure::Failed => format!(
                "the upstream {upstream} closed the connection or answered something other than HTTP"
            ),
            Failure::Switched => format!(
                "the upstream {upstream} answered 101 Switching Protocols: this proxy cannot tunnel another protocol, so the upgrade was refused and the connection dropped"
            ),
            Failure::ClientBody { timed_out: true } => {
                "the request body did not arrive within the body deadline".to_string()
            }
            Failure::ClientBody { timed_out: false } => {
                "the request body is malformed or was cut off".to_string()
            }
        }
    }
}
