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
use chaos_policy::{Attempt, Outcome, ResetPhase};
use hyper::header::{CONTENT_TYPE, HOST, HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};
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
    pub fn new(base_url: &str, kind: &RequestKind, policy: &str) -> Result<Prepared, Unbuildable> {
        let unbuildable = |why: String| Unbuildable {
            kind: kind.name.clone(),
            why,
        };
        let base = reqwest::Url::parse(base_url).ok();
        let prefix = base
            .as_ref()
            .map_or("", |url| url.path().trim_end_matches('/'));
        let path = format!("{prefix}{}", kind.path);
        let fixed = match kind.path.contains("{n}") {
            true => None,
            false => Some(
                Uri::try_from(path.as_str())
                    .map_err(|e| unbuildable(format!("`{path}` is not a request target: {e}")))?,
            ),
        };
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
            body: kind.body.clone().map(Bytes::from),
            idempotency_key: kind.idempotency_key,
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
        headers.insert(HOST, self.host.clone());
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
        if let Some(timeout) = spec.timeout.filter(|_| spec.propagate_deadline) {
            headers.insert(
                DEADLINE_MS,
                HeaderValue::from(u64::try_from(timeout.as_millis().max(1)).unwrap_or(u64::MAX)),
            );
        }
        let body = match &self.body {
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
}

/// What came back: the outcome, the server's `Retry-After` if it sent one, and whether
/// the fault-server said it ran this request's side effect again (`x-chaos-duplicate`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Answer {
    pub outcome: Outcome,
    pub retry_after: Option<Duration>,
    pub duplicate: bool,
    /// The answer came from a relay tier that gave up (`x-chaos-no-retry`).
    pub no_retry: bool,
}

impl Answer {
    /// An answer that is only an outcome: no headers came back.
    pub fn of(outcome: Outcome) -> Answer {
        Answer {
            outcome,
            retry_after: None,
            duplicate: false,
            no_retry: false,
        }
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

/// The shortest timeout an attempt is sent with: tokio's timers tick by the millisecond,
/// so an attempt with less left would time out before it could be answered, perhaps
/// before it was written.
const SHORTEST_TIMEOUT: Duration = Duration::from_millis(1);

/// What is left of an attempt's `timeout` after it `waited` for a connection, for the
/// send: `None` when too little is left to send it at all ([`SHORTEST_TIMEOUT`]), so it
/// ends unsent; `Some(None)` when it has no timeout. The live engine and the simulator
/// both decide by it.
pub fn left_after_wait(timeout: Option<Duration>, waited: Duration) -> Option<Option<Duration>> {
    match timeout.map(|t| t.saturating_sub(waited)) {
        Some(left) if left < SHORTEST_TIMEOUT => None,
        left => Some(left),
    }
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
        let retry_after = headers
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(parse_retry_after);
        let duplicated = headers.contains_key(DUPLICATE);
        duplicate.store(duplicated, Ordering::Relaxed);
        let no_retry = headers.contains_key(NO_RETRY);
        match answering.finish().await {
            Ok(()) => Answer {
                outcome: Outcome::Status(status),
                retry_after,
                duplicate: duplicated,
                no_retry,
            },
            // The status line and headers came; the body did not, in full.
            Err(_) => Answer {
                outcome: Outcome::TruncatedBody,
                retry_after: None,
                duplicate: duplicated,
                no_retry: false,
            },
        }
    };
    let Some(timeout) = spec.timeout else {
        return exchange.await;
    };
    match tokio::time::timeout(timeout, exchange).await {
        Ok(answer) => answer,
        Err(_) if handed.load(Ordering::Relaxed) => Answer {
            outcome: Outcome::AttemptTimeout,
            retry_after: None,
            duplicate: duplicate.load(Ordering::Relaxed),
            no_retry: false,
        },
        // Still waiting for a connection: nothing of it was written.
        Err(_) => Answer::of(Outcome::ConnectTimeout),
    }
}

/// `Retry-After` in delay-seconds (RFC 9110 §10.2.3). An HTTP-date is not honoured: its
/// meaning depends on the clocks of two machines.
pub fn parse_retry_after(value: &str) -> Option<Duration> {
    value.trim().parse::<u64>().ok().map(Duration::from_secs)
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
    #[test]
    fn a_kind_that_cannot_be_sent_is_named_not_counted_as_refused() {
        let kind = RequestKind {
            name: "odd".to_owned(),
            method: "GET".to_owned(),
            path: "/a b".to_owned(),
            n: Default::default(),
            weight: 1.0,
            body: None,
            headers: Default::default(),
            idempotency_key: false,
        };
        let e = Prepared::new("http://127.0.0.1:1", &kind, "p").expect_err("a space");
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
        let e = Prepared::new("http://127.0.0.1:1", &kind, "p").expect_err("a bad header");
        assert!(e.why.contains("header `bad name`"), "{e}");
    }

    use std::time::Duration;

    use super::{Prepared, RequestKind, left_after_wait, parse_retry_after};

    #[test]
    fn a_wait_leaves_the_rest_of_the_timeout_or_nothing_worth_sending() {
        let ms = Duration::from_millis;
        assert_eq!(left_after_wait(Some(ms(100)), ms(40)), Some(Some(ms(60))));
        assert_eq!(left_after_wait(Some(ms(100)), ms(99)), Some(Some(ms(1))));
        assert_eq!(
            left_after_wait(Some(ms(100)), Duration::from_micros(99_500)),
            None
        );
        assert_eq!(left_after_wait(Some(ms(100)), ms(150)), None);
        assert_eq!(left_after_wait(None, ms(150)), Some(None));
    }

    #[test]
    fn retry_after_takes_delay_seconds_only() {
        assert_eq!(parse_retry_after("3"), Some(Duration::from_secs(3)));
        assert_eq!(parse_retry_after(" 0 "), Some(Duration::ZERO));
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), None);
        assert_eq!(parse_retry_after("-1"), None);
    }
}
