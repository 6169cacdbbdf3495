//! One attempt on the wire: build the request with the design's headers, send it, and turn
//! what came back into a typed [`Outcome`].
//!
//! Errors are classified by walking the error's `source()` chain to an `io::Error` kind or a
//! hyper error, never by their text.
//!
//! An attempt counts when it left the process. [`tracked`] runs a send with a marker that
//! says how far it got, as the engine's pool ([`crate::pool`]) reports it: still waiting
//! for a connection, or handed to one. An attempt stopped or timed out while waiting never
//! reached the wire; one stopped after it was handed to a connection did (hyper writes it
//! at once).

use std::cell::Cell;
use std::error::Error as StdError;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use chaos_policy::{Attempt, Outcome, Reply, ResetPhase, Unprocessed};
use hyper::header::{CONTENT_TYPE, HOST, HeaderMap, HeaderName, HeaderValue, RETRY_AFTER, TE};
use hyper::{Method, Request, Uri};

use fault_server::wire;

use crate::plan::RequestKind;
use crate::pool::{self, Failure, Pool, Stage};

/// What every attempt of one request kind shares, built once per run rather than once
/// per attempt: the method, the request target when the path has no `{n}`, the `Host`
/// header, and the header values that never change.
#[derive(Debug, Clone)]
pub struct Prepared {
    method: Method,
    /// The base URL's path and the kind's, joined (origin form): with a `{n}` if the
    /// kind's path has one.
    path: String,
    /// `path`, parsed, when it is fixed and well formed.
    fixed: Option<Uri>,
    /// What its `{n}` becomes.
    n: crate::plan::Numbers,
    host: HeaderValue,
    policy: HeaderValue,
    /// The kind's own headers, with names and values parsed.
    headers: Vec<(HeaderName, HeaderValue)>,
    body: Option<Bytes>,
    idempotency_key: bool,
    /// A gRPC unary call: its body framed as one message, its answer read for
    /// `grpc-status`.
    grpc: bool,
    /// Over HTTP/2 the request target is absolute (`:scheme` and `:authority` come from
    /// it) and there is no `Host`.
    http2: bool,
}

/// Why no attempt of a request kind can be built: what the plan's checks should have
/// refused. Named, so a run fails saying so instead of counting every attempt as a
/// connection that was refused.
#[derive(Debug, Clone, thiserror::Error)]
#[error("request kind `{kind}` cannot be sent: {why}")]
pub struct Unbuildable {
    pub kind: String,
    pub why: String,
}

impl Prepared {
    /// How every attempt of `kind` is sent to `base_url` over `protocol`.
    pub fn new(
        base_url: &str,
        kind: &RequestKind,
        policy: &str,
        protocol: crate::plan::Protocol,
    ) -> Result<Prepared, Unbuildable> {
        let unbuildable = |why: String| Unbuildable {
            kind: kind.name.clone(),
            why,
        };
        let base = reqwest::Url::parse(base_url).ok();
        let prefix = base
            .as_ref()
            .map_or("", |url| url.path().trim_end_matches('/'));
        let host = base.as_ref().and_then(|url| {
            let host = url.host_str()?;
            let host = match url.port() {
                Some(port) => format!("{host}:{port}"),
                None => host.to_owned(),
            };
            HeaderValue::from_str(&host).ok()
        });
        let host =
            host.ok_or_else(|| unbuildable(format!("`{base_url}` names no host to send to")))?;
        let http2 = protocol.is_http2();
        let path = match http2 {
            true => format!(
                "http://{}{prefix}{}",
                host.to_str().unwrap_or_default(),
                kind.path
            ),
            false => format!("{prefix}{}", kind.path),
        };
        let fixed = match kind.path.contains("{n}") {
            true => None,
            false => Some(
                Uri::try_from(path.as_str())
                    .map_err(|e| unbuildable(format!("`{path}` is not a request target: {e}")))?,
            ),
        };
        let mut headers = Vec::new();
        for (name, value) in &kind.headers {
            match (
                HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_str(value),
            ) {
                (Ok(name), Ok(value)) => headers.push((name, value)),
                _ => return Err(unbuildable(format!("header `{name}` cannot be sent"))),
            }
        }
        Ok(Prepared {
            method: Method::from_bytes(kind.method.as_bytes())
                .map_err(|_| unbuildable(format!("`{}` is not a method", kind.method)))?,
            path,
            fixed,
            n: kind.n.clone(),
            host,
            policy: HeaderValue::from_str(policy).map_err(|_| {
                unbuildable(format!("policy name `{policy}` cannot be sent in a header"))
            })?,
            headers,
            body: match kind.rpc {
                Some(_) => Some(grpc_message(kind.body.as_deref().unwrap_or_default())),
                None => kind.body.clone().map(Bytes::from),
            },
            idempotency_key: kind.idempotency_key,
            grpc: kind.rpc.is_some(),
            http2,
        })
    }

    /// The request for one attempt, or `None` when it cannot be built: never for a plan
    /// that validated (a `{n}` path is checked with every number it can hold, and policy
    /// names are checked as header values).
    fn request(&self, spec: &AttemptSpec<'_>) -> Option<Request<pool::Body>> {
        let uri = match &self.fixed {
            Some(uri) => uri.clone(),
            None => {
                let mut path = String::with_capacity(self.path.len() + 8);
                crate::plan::fill_path(&self.path, &self.n, spec.n, &mut path);
                Uri::try_from(path).ok()?
            }
        };
        let mut headers = HeaderMap::with_capacity(8);
        if !self.http2 {
            headers.insert(HOST, self.host.clone());
        }
        // Ids are the policy's name and a number, and the plan refuses a name that cannot
        // be sent in a header.
        let id = HeaderValue::from_str(spec.id).ok()?;
        if self.idempotency_key {
            headers.insert(IDEMPOTENCY_KEY, id.clone());
        }
        headers.insert(REQUEST_ID, id);
        headers.insert(ATTEMPT, HeaderValue::from(spec.attempt.get()));
        headers.insert(POLICY, self.policy.clone());
        if let Some(traceparent) = spec.traceparent.and_then(|t| HeaderValue::from_str(t).ok()) {
            headers.insert(TRACEPARENT, traceparent);
        }
        for (name, value) in &self.headers {
            headers.append(name.clone(), value.clone());
        }
        if let Some(deadline) =
            crate::logical::deadline_below(spec.timeout, spec.propagate_deadline)
        {
            headers.insert(DEADLINE_MS, HeaderValue::from(wire::deadline_ms(deadline)));
        }
        if let Some(allowance) = spec.allowance {
            headers.insert(RETRY_ALLOWANCE, HeaderValue::from(allowance));
        }
        let body = match &self.body {
            Some(body) if self.grpc => {
                headers.insert(
                    CONTENT_TYPE,
                    HeaderValue::from_static(wire::grpc::CONTENT_TYPE),
                );
                headers.insert(TE, HeaderValue::from_static("trailers"));
                pool::Body::new(body.clone())
            }
            Some(body) => {
                headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
                pool::Body::new(body.clone())
            }
            None => pool::Body::default(),
        };
        let mut request = Request::new(body);
        *request.method_mut() = self.method.clone();
        *request.uri_mut() = uri;
        *request.headers_mut() = headers;
        Some(request)
    }
}

/// A gRPC message as it goes on the wire: not compressed (0), its length (4 bytes, big
/// endian), the bytes.
fn grpc_message(message: &str) -> Bytes {
    let len = u32::try_from(message.len()).unwrap_or(u32::MAX);
    let mut framed = Vec::with_capacity(5 + message.len());
    framed.push(0);
    framed.extend_from_slice(&len.to_be_bytes());
    framed.extend_from_slice(message.as_bytes());
    Bytes::from(framed)
}

/// What the engine needs to send one attempt of a logical request.
#[derive(Debug, Clone, Copy)]
pub struct AttemptSpec<'a> {
    pub kind: &'a Prepared,
    pub id: &'a str,
    pub n: u64,
    pub attempt: Attempt,
    pub timeout: Option<Duration>,
    /// The W3C `traceparent` to send, when the run is traced.
    pub traceparent: Option<&'a str>,
    /// Say how long this attempt will be waited for (`x-chaos-deadline-ms`), for relay
    /// tiers to end their own retries by then.
    pub propagate_deadline: bool,
    /// `x-chaos-retry-allowance`: what the relay tiers may spend of the client's budget,
    /// when the policy shares it with them.
    pub allowance: Option<u32>,
}

/// What came back: the outcome, the server's `Retry-After` if it sent one, and whether
/// the fault-server said it ran this request's side effect again (`x-chaos-duplicate`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Answer {
    /// What the answer tells the policy ([`Reply`]: the outcome, `Retry-After` or gRPC
    /// pushback, `x-chaos-no-retry`, A6's "do not retry", the allowance left).
    pub reply: Reply,
    /// `x-chaos-duplicate`: the server had run this side effect before. Only the report
    /// counts it.
    pub duplicate: bool,
}

impl Answer {
    /// An answer that is only an outcome: no headers came back.
    pub fn of(outcome: Outcome) -> Answer {
        Answer {
            reply: Reply::bare(outcome),
            duplicate: false,
        }
    }

    /// The outcome the answer came to.
    pub fn outcome(&self) -> Outcome {
        self.reply.outcome
    }
}

/// How far an attempt got before it ended or was stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// Not yet handed to the pool.
    Idle,
    /// Waiting for a connection, pooled or new: nothing of it is on the wire yet.
    Connecting,
    /// Handed to a connection, which writes it straight away.
    Handed,
}

tokio::task_local! {
    static REACH: Cell<Reach>;
}

fn mark(reach: Reach) {
    // Outside a tracked send (a connection finishing in the background after the pool
    // served the request another way) there is nothing to mark.
    let _ = REACH.try_with(|r| r.set(reach));
}

/// A send, tracked: poll it, and when it is stopped ask [`Tracked::left_process`].
pub type Tracked<F> = tokio::task::futures::TaskLocalFuture<Cell<Reach>, F>;

/// Wraps one attempt's send so that its progress towards the wire is known.
pub fn tracked<F: Future>(send: F) -> Tracked<F> {
    REACH.scope(Cell::new(Reach::Idle), send)
}

/// Whether a tracked send that was stopped before its answer had left the process.
pub fn left_process<F: Future>(send: Pin<&mut Tracked<F>>) -> bool {
    send.take_value()
        .is_some_and(|reach| reach.get() == Reach::Handed)
}

/// A client that never retries on its own: the only retries are the policy's.
pub fn http_client(max_idle_per_host: usize) -> reqwest::Result<reqwest::Client> {
    reqwest::Client::builder()
        .retry(reqwest::retry::never())
        // A redirect followed by the client would be a second request behind the policy's
        // back (and could lead off loopback): a 3xx is the attempt's outcome.
        .redirect(reqwest::redirect::Policy::none())
        .pool_max_idle_per_host(max_idle_per_host)
        // Below the fault-server's 30 s idle cut-off, so the client never sends on a
        // connection the server is closing (an attempt the server would never see).
        .pool_idle_timeout(Duration::from_secs(20))
        .connect_timeout(Duration::from_secs(5))
        .tcp_nodelay(true)
        .no_proxy()
        .build()
}

// The contract's names (`fault_server::wire`), made once.
const REQUEST_ID: HeaderName = HeaderName::from_static(wire::REQUEST_ID);
const ATTEMPT: HeaderName = HeaderName::from_static(wire::ATTEMPT);
const POLICY: HeaderName = HeaderName::from_static(wire::POLICY);
const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static(wire::IDEMPOTENCY_KEY);
const TRACEPARENT: HeaderName = HeaderName::from_static(wire::TRACEPARENT);
const DUPLICATE: HeaderName = HeaderName::from_static(wire::DUPLICATE);
const DEADLINE_MS: HeaderName = HeaderName::from_static(wire::DEADLINE_MS);
const RETRY_ALLOWANCE: HeaderName = HeaderName::from_static(wire::RETRY_ALLOWANCE);
const RETRY_ALLOWANCE_LEFT: HeaderName = HeaderName::from_static(wire::RETRY_ALLOWANCE_LEFT);
const NO_RETRY: HeaderName = HeaderName::from_static(wire::NO_RETRY);

/// Sends one attempt through `pool` and reads its answer, within the attempt's timeout.
pub async fn send(pool: &Pool, spec: AttemptSpec<'_>) -> Answer {
    let Some(request) = spec.kind.request(&spec) else {
        // It could not be built, so it never left.
        return Answer::of(Outcome::ConnectRefused);
    };
    // Atomics, not cells: the send is part of a task that may move between threads.
    let handed = AtomicBool::new(false);
    let duplicate = AtomicBool::new(false);
    let stage = |stage: Stage| {
        let on_wire = stage == Stage::Handed;
        handed.store(on_wire, Ordering::Relaxed);
        mark(if on_wire {
            Reach::Handed
        } else {
            Reach::Connecting
        });
    };
    let exchange = async {
        let answering = match pool.send(request, &stage).await {
            Ok(answering) => answering,
            Err(failure) => return Answer::of(classify_failure(&failure)),
        };
        let headers = &answering.head.headers;
        let status = answering.head.status.as_u16();
        let http = status_reply(status, headers);
        let duplicated = headers.contains_key(DUPLICATE);
        duplicate.store(duplicated, Ordering::Relaxed);
        // A Trailers-Only answer's status is in its headers, and its trailers are none.
        let head_status = spec.kind.grpc.then(|| GrpcStatus::of(headers)).flatten();
        match answering.finish().await {
            Ok(trailers) if spec.kind.grpc => {
                let grpc = head_status.or_else(|| trailers.as_ref().and_then(GrpcStatus::of));
                match grpc {
                    Some(grpc) => Answer {
                        reply: Reply {
                            outcome: Outcome::Grpc(grpc.code),
                            retry_after: grpc.pushback.flatten(),
                            stop: grpc.pushback == Some(None),
                            ..http
                        },
                        duplicate: duplicated,
                    },
                    // No gRPC status: an intermediary's HTTP answer, which a gRPC client
                    // reads by its status (gRPC's http-grpc-status-mapping), or a 200
                    // without one, UNKNOWN.
                    None if status != 200 => Answer {
                        reply: http,
                        duplicate: duplicated,
                    },
                    None => Answer {
                        duplicate: duplicated,
                        ..Answer::of(Outcome::Grpc(wire::grpc::UNKNOWN))
                    },
                }
            }
            Ok(_) => Answer {
                reply: http,
                duplicate: duplicated,
            },
            // The status line and headers came; the body did not, in full.
            Err(_) => Answer {
                duplicate: duplicated,
                ..Answer::of(Outcome::TruncatedBody)
            },
        }
    };
    let Some(timeout) = spec.timeout else {
        return exchange.await;
    };
    match tokio::time::timeout(timeout, exchange).await {
        Ok(answer) => answer,
        Err(_) if handed.load(Ordering::Relaxed) => Answer {
            duplicate: duplicate.load(Ordering::Relaxed),
            ..Answer::of(Outcome::AttemptTimeout)
        },
        // Still waiting for a connection: nothing of it was written.
        Err(_) => Answer::of(Outcome::ConnectTimeout),
    }
}

/// What an HTTP answer's status line and headers tell the policy: its `Retry-After`, a
/// tier's `x-chaos-no-retry`, and what a shared allowance has left
/// (`x-chaos-retry-allowance-left`). The engine and the relay read answers by it.
pub fn status_reply(status: u16, headers: &HeaderMap) -> Reply {
    let text = |name: &HeaderName| headers.get(name).and_then(|v| v.to_str().ok());
    Reply {
        outcome: Outcome::Status(status),
        retry_after: text(&RETRY_AFTER).and_then(wire::retry_after),
        no_retry: headers.contains_key(NO_RETRY),
        stop: false,
        allowance_left: text(&RETRY_ALLOWANCE_LEFT).and_then(wire::parse_allowance),
    }
}

const GRPC_STATUS: HeaderName = HeaderName::from_static(wire::grpc::STATUS);
const GRPC_PUSHBACK: HeaderName = HeaderName::from_static(wire::grpc::PUSHBACK);

/// A gRPC call's status as its headers or trailers carry it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct GrpcStatus {
    code: u8,
    /// `grpc-retry-pushback-ms`: absent, a wait, or `Some(None)`: do not retry.
    pushback: Option<Option<Duration>>,
}

impl GrpcStatus {
    fn of(headers: &HeaderMap) -> Option<GrpcStatus> {
        let code = headers
            .get(GRPC_STATUS)?
            .to_str()
            .ok()?
            .trim()
            .parse::<u8>();
        Some(GrpcStatus {
            // A status that is not a code is one the client cannot read: UNKNOWN.
            code: code
                .ok()
                .filter(|c| wire::grpc::snake_name(*c).is_some())
                .unwrap_or(wire::grpc::UNKNOWN),
            pushback: headers
                .get(GRPC_PUSHBACK)
                .map(|v| wire::grpc::pushback(v.as_bytes())),
        })
    }
}

/// Classifies a failed send of the relay's client by what its source chain holds.
pub fn classify(error: &reqwest::Error) -> Outcome {
    if error.is_timeout() {
        return if error.is_connect() {
            Outcome::ConnectTimeout
        } else {
            Outcome::AttemptTimeout
        };
    }
    if error.is_connect() {
        return match io_kind(error) {
            Some(io::ErrorKind::TimedOut) => Outcome::ConnectTimeout,
            _ => Outcome::ConnectRefused,
        };
    }
    classify_wire(error)
}

/// Classifies a failed send of the engine's pool.
pub fn classify_failure(failure: &Failure) -> Outcome {
    match failure {
        Failure::ConnectTimeout => Outcome::ConnectTimeout,
        Failure::Connect(e) if e.kind() == io::ErrorKind::TimedOut => Outcome::ConnectTimeout,
        Failure::Connect(_) => Outcome::ConnectRefused,
        Failure::Wire(e) => classify_wire(e),
    }
}

/// An attempt that failed on a connection it was handed to, by its error's source chain.
fn classify_wire(error: &(dyn StdError + 'static)) -> Outcome {
    if let Some(unprocessed) = unprocessed_stream(error) {
        return Outcome::Unprocessed(unprocessed);
    }
    let io_kind = io_kind(error);
    match io_kind {
        Some(io::ErrorKind::ConnectionRefused) => return Outcome::ConnectRefused,
        Some(io::ErrorKind::TimedOut) => return Outcome::AttemptTimeout,
        Some(
            io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe,
        ) => return Outcome::Reset(ResetPhase::Unknown),
        _ => {}
    }
    if hyper_incomplete(error) || io_kind == Some(io::ErrorKind::UnexpectedEof) {
        return Outcome::Closed;
    }
    Outcome::Reset(ResetPhase::Unknown)
}

/// An HTTP/2 stream the server says it never processed (RFC 9113 §8.7): reset with
/// `REFUSED_STREAM`, or above the last stream id of a GOAWAY it sent.
fn unprocessed_stream(error: &(dyn StdError + 'static)) -> Option<Unprocessed> {
    let mut source: Option<&(dyn StdError + 'static)> = Some(error);
    while let Some(e) = source {
        if let Some(h2) = e.downcast_ref::<h2::Error>() {
            if h2.reason() == Some(h2::Reason::REFUSED_STREAM) && h2.is_remote() {
                return Some(Unprocessed::RefusedStream);
            }
            if h2.is_go_away() && h2.is_remote() {
                return Some(Unprocessed::GoAway);
            }
            return None;
        }
        source = e.source();
    }
    None
}

fn io_kind(error: &(dyn StdError + 'static)) -> Option<io::ErrorKind> {
    let mut source: Option<&(dyn StdError + 'static)> = Some(error);
    while let Some(e) = source {
        if let Some(io) = e.downcast_ref::<io::Error>() {
            return Some(io.kind());
        }
        source = e.source();
    }
    None
}

fn hyper_incomplete(error: &(dyn StdError + 'static)) -> bool {
    let mut source: Option<&(dyn StdError + 'static)> = Some(error);
    while let Some(e) = source {
        if let Some(h) = e.downcast_ref::<hyper::Error>() {
            return h.is_incomplete_message();
        }
        source = e.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::{Prepared, RequestKind};

    #[test]
    fn a_kind_that_cannot_be_sent_is_named_not_counted_as_refused() {
        let kind = RequestKind {
            rpc: None,
            name: "odd".to_owned(),
            method: "GET".to_owned(),
            path: "/a b".to_owned(),
            n: Default::default(),
            weight: 1.0,
            body: None,
            headers: Default::default(),
            idempotency_key: false,
        };
        let e = Prepared::new("http://127.0.0.1:1", &kind, "p", Default::default())
            .expect_err("a space");
        assert_eq!(e.kind, "odd");
        assert!(
            e.to_string()
                .starts_with("request kind `odd` cannot be sent: `/a b`"),
            "{e}"
        );
        let headers = [("bad name".to_owned(), "v".to_owned())]
            .into_iter()
            .collect();
        let kind = RequestKind {
            path: "/ok".to_owned(),
            n: Default::default(),
            headers,
            ..kind
        };
        let e = Prepared::new("http://127.0.0.1:1", &kind, "p", Default::default())
            .expect_err("a bad header");
        assert!(e.why.contains("header `bad name`"), "{e}");
    }
}
