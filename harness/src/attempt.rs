//! One attempt on the wire: build the request with the design's headers, send it, and turn
//! what came back into a typed [`Outcome`].
//!
//! Errors are classified by walking the error's `source()` chain to an `io::Error` kind or a
//! hyper error, never by their text.
//!
//! An attempt counts when it left the process. [`tracked`] runs a send with a marker that
//! says how far it got: a connection from the pool was handed the request, or a new
//! connection was still being made (the connector layer, [`MarkConnect`], reports that). An
//! attempt stopped while connecting never reached the wire; one stopped after it was handed
//! to a connection did (hyper writes it at once).

use std::cell::Cell;
use std::error::Error as StdError;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use chaos_policy::{Attempt, Outcome, ResetPhase};

use reqwest::header::{HeaderName, HeaderValue};

use crate::plan::RequestKind;

/// What every attempt of one request kind shares, built once per run rather than once
/// per attempt: the method, the URL when the path has no `{n}` (parsing a URL is a
/// good part of what a request costs the client), and the header values that never
/// change.
#[derive(Debug, Clone)]
pub struct Prepared {
    method: reqwest::Method,
    /// The base URL and the path, joined: the path itself when it has a `{n}`.
    url: String,
    /// `url`, parsed, when it is fixed and well formed.
    parsed: Option<reqwest::Url>,
    policy: HeaderValue,
    /// The kind's own headers, with names and values parsed; one that does not parse is
    /// left to the HTTP client to refuse, as it would be without preparation.
    headers: Vec<(HeaderName, HeaderValue)>,
    raw_headers: Vec<(String, String)>,
    body: Option<String>,
    idempotency_key: bool,
}

impl Prepared {
    pub fn new(base_url: &str, kind: &RequestKind, policy: &str) -> Prepared {
        let url = format!("{base_url}{}", kind.path);
        let parsed = (!kind.path.contains("{n}"))
            .then(|| reqwest::Url::parse(&url).ok())
            .flatten();
        let mut headers = Vec::new();
        let mut raw_headers = Vec::new();
        for (name, value) in &kind.headers {
            match (
                HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_str(value),
            ) {
                (Ok(name), Ok(value)) => headers.push((name, value)),
                _ => raw_headers.push((name.clone(), value.clone())),
            }
        }
        Prepared {
            method: reqwest::Method::from_bytes(kind.method.as_bytes())
                .unwrap_or(reqwest::Method::GET),
            url,
            parsed,
            policy: HeaderValue::from_str(policy)
                .unwrap_or_else(|_| HeaderValue::from_static("(invalid)")),
            headers,
            raw_headers,
            body: kind.body.clone(),
            idempotency_key: kind.idempotency_key,
        }
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
    /// Not yet handed to the HTTP client.
    Idle,
    /// A new connection is being made for it: nothing of it is on the wire yet.
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

/// Whether a tracked send that ended was still waiting for a new connection when it did.
/// A timeout then is no proof either way: the pool races a new connection against one of
/// its own coming free, and may have handed the request to the latter just before.
pub fn was_connecting<F: Future>(send: Pin<&mut Tracked<F>>) -> bool {
    send.take_value()
        .is_some_and(|reach| reach.get() == Reach::Connecting)
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

/// The connector layer that tells a tracked send a new connection is being made for it.
#[derive(Debug, Clone, Copy, Default)]
pub struct MarkConnect;

impl<S> tower::Layer<S> for MarkConnect {
    type Service = MarkConnectService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        MarkConnectService(inner)
    }
}

#[derive(Debug, Clone)]
pub struct MarkConnectService<S>(S);

impl<S: tower::Service<R>, R> tower::Service<R> for MarkConnectService<S> {
    type Response = S::Response;
    type Error = S::Error;
    type Future = Connecting<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> Self::Future {
        mark(Reach::Connecting);
        Connecting(Box::pin(self.0.call(request)))
    }
}

/// A connection being made; once made, the request it was made for is handed to it.
#[derive(Debug)]
pub struct Connecting<F>(Pin<Box<F>>);

impl<F: Future<Output = Result<T, E>>, T, E> Future for Connecting<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let done = self.0.as_mut().poll(cx);
        if let Poll::Ready(Ok(_)) = done {
            mark(Reach::Handed);
        }
        done
    }
}

/// A client that never retries on its own: the only retries are the policy's.
pub fn http_client(max_idle_per_host: usize) -> reqwest::Result<reqwest::Client> {
    reqwest::Client::builder()
        .connector_layer(MarkConnect)
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

pub fn path_of(kind: &RequestKind, n: u64) -> String {
    kind.path.replace("{n}", &n.to_string())
}

const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
const ATTEMPT: HeaderName = HeaderName::from_static("x-chaos-attempt");
const POLICY: HeaderName = HeaderName::from_static("x-chaos-policy");
const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");
const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");

pub async fn send(client: &reqwest::Client, spec: AttemptSpec<'_>) -> Answer {
    let kind = spec.kind;
    let request = match &kind.parsed {
        Some(url) => client.request(kind.method.clone(), url.clone()),
        None => client.request(
            kind.method.clone(),
            kind.url.replace("{n}", &spec.n.to_string()),
        ),
    };
    let mut headers = reqwest::header::HeaderMap::with_capacity(8);
    match HeaderValue::from_str(spec.id) {
        Ok(id) => {
            if kind.idempotency_key {
                headers.insert(IDEMPOTENCY_KEY, id.clone());
            }
            headers.insert(REQUEST_ID, id);
        }
        // Ids are the policy's name and a number, and the plan refuses a name that cannot
        // be sent in a header: this attempt could not be built, so it never left.
        Err(_) => return Answer::of(Outcome::ConnectRefused),
    }
    headers.insert(ATTEMPT, HeaderValue::from(spec.attempt.get()));
    headers.insert(POLICY, kind.policy.clone());
    if let Some(traceparent) = spec.traceparent.and_then(|t| HeaderValue::from_str(t).ok()) {
        headers.insert(TRACEPARENT, traceparent);
    }
    for (name, value) in &kind.headers {
        headers.append(name.clone(), value.clone());
    }
    let mut request = request.headers(headers);
    for (name, value) in &kind.raw_headers {
        request = request.header(name.as_str(), value.as_str());
    }
    if let Some(body) = &kind.body {
        request = request
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.clone());
    }
    if let Some(timeout) = spec.timeout {
        request = request.timeout(timeout);
        if spec.propagate_deadline {
            request = request.header(
                crate::relay::DEADLINE_MS,
                timeout.as_millis().max(1).to_string(),
            );
        }
    }
    // The pool hands the request to an idle connection within this first poll, unless a
    // new connection must be made first (then the connector marks it as connecting).
    mark(Reach::Handed);
    match request.send().await {
        Ok(response) => {
            let status = response.status().as_u16();
            let retry_after = response
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .and_then(parse_retry_after);
            let duplicate = response.headers().contains_key("x-chaos-duplicate");
            let no_retry = response.headers().contains_key(crate::relay::NO_RETRY);
            match response.bytes().await {
                Ok(_) => Answer {
                    outcome: Outcome::Status(status),
                    retry_after,
                    duplicate,
                    no_retry,
                },
                Err(e) if e.is_timeout() => Answer {
                    outcome: Outcome::AttemptTimeout,
                    retry_after: None,
                    duplicate,
                    no_retry: false,
                },
                // The status line and headers came; the body did not, in full.
                Err(_) => Answer {
                    outcome: Outcome::TruncatedBody,
                    retry_after: None,
                    duplicate,
                    no_retry: false,
                },
            }
        }
        Err(e) => Answer::of(classify(&e)),
    }
}

/// `Retry-After` in delay-seconds (RFC 9110 §10.2.3). An HTTP-date is not honoured: its
/// meaning depends on the clocks of two machines.
pub fn parse_retry_after(value: &str) -> Option<Duration> {
    value.trim().parse::<u64>().ok().map(Duration::from_secs)
}

/// Classifies a failed send by what its source chain holds.
pub fn classify(error: &reqwest::Error) -> Outcome {
    let io_kind = io_kind(error);
    if error.is_timeout() {
        return if error.is_connect() {
            Outcome::ConnectTimeout
        } else {
            Outcome::AttemptTimeout
        };
    }
    match io_kind {
        Some(io::ErrorKind::ConnectionRefused) => return Outcome::ConnectRefused,
        Some(io::ErrorKind::TimedOut) if error.is_connect() => return Outcome::ConnectTimeout,
        Some(io::ErrorKind::TimedOut) => return Outcome::AttemptTimeout,
        Some(
            io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe,
        ) => {
            return Outcome::Reset(ResetPhase::Unknown);
        }
        _ => {}
    }
    if error.is_connect() {
        return Outcome::ConnectRefused;
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
    use std::time::Duration;

    use super::{left_after_wait, parse_retry_after};

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
