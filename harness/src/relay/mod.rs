//! A relay tier: an HTTP service that forwards each request it receives to the next tier
//! through its own retry policy, and answers with what it finally got.
//!
//! A shell around the hop core ([`crate::hop`]), which the simulator's tier drives too:
//! every request is a [`chaos_policy::Session`] of the tier's own client (shared by all
//! its requests, as a service's client is); this module only moves bytes and time. A chain A → B → C multiplies attempts: when each
//! tier retries on its own, the deepest one receives the product of their attempts.
//!
//! What crosses each hop:
//! - `x-request-id` unchanged: the logical request is the same end to end;
//! - `x-chaos-attempt`: this hop's own attempt number (1, 2, ...), so every hop counts
//!   its logical requests and retries exactly;
//! - `x-chaos-upstream-attempts`: the attempt numbers of the hops above (`2.1`), so the
//!   fault-server's per-attempt draws stay independent behind a chain;
//! - `x-chaos-deadline-ms`: how long the caller will wait for this attempt; the tier's
//!   session ends by then (the nearer of it and its policy's own deadline);
//! - `x-chaos-retry-allowance`, when the chain shares one budget (`share_budget`): the
//!   retries the tier and the hops below may make for this request; the tier spends from
//!   it instead of its own budget, passes what is left down, and answers with
//!   `x-chaos-retry-allowance-left`;
//! - `traceparent`: the tier's own CLIENT span when the run is traced
//!   ([`crate::telemetry::tier`]), else the caller's, unchanged;
//! - `Via`: what the request carried, and the tier's own entry (`1.1 harness-relay-<id>`,
//!   [`wire::ViaName`], unique to the tier); a request that arrives carrying it has come
//!   round a loop, and is answered 508 Loop Detected at once, which no policy retries;
//! - every end-to-end header (`Idempotency-Key`, a request kind's own) and the body, both
//!   ways; never the fault-server's control API.
//!
//! A tier that gives up answers with the last status it got (a 503 when its attempts
//! ended without one, a 504 when they timed out) and, when it could have retried or was
//! told not to, `x-chaos-no-retry: 1`, the SRE book's "overloaded; don't retry": a caller
//! whose policy has `honor_no_retry` does not retry it, so only the tier next to the
//! failure retries. Each request runs to its end on a task of its own, whether or not
//! its caller is still waiting, as a real service's would.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::Response;
use chaos_policy::{Outcome, Policy};
use tokio::time::{Instant, sleep_until};
use tokio_util::sync::CancellationToken;

use fault_server::Script;
use fault_server::wire;

use crate::hop::{Admission, Forwarding, HopCounts, Incoming, Step, Tier};
use crate::telemetry::tier::{TierSpan, TierTracing};

mod answer;
mod forward;

use answer::{injected, problem, respond, say_allowance_left};
use forward::{Hop, forward};

/// The largest request body a tier forwards.
const MAX_BODY: usize = 1 << 20;

/// The most a tier reads of an answer's body, as of a request's: it holds the body to
/// pass it upstream, so a longer one (an endless chunked body) would take its memory.
/// One over the cap is an [`chaos_policy::Outcome::TruncatedBody`], not read further.
/// 1 MiB, as for requests: no answer of the fault-server comes near it.
const MAX_ANSWER: usize = 1 << 20;

/// How to run a tier.
#[derive(Debug, Clone)]
pub struct RelayConfig {
    /// The tier's name, for errors and reports.
    pub name: String,
    /// Where it forwards: the next tier or the target (`http://127.0.0.1:8080`).
    pub next: String,
    pub policy: Policy,
    /// Seeds each request's jitter, with its id.
    pub seed: u64,
    /// Where to listen (127.0.0.1:0 by default).
    pub listen: SocketAddr,
    /// The fault phases this tier injects itself (a plan's `tier:` phases): statuses
    /// and delays, chosen as the fault-server chooses them.
    pub script: Option<Script>,
    /// Where its spans go, when the run is traced.
    pub tracing: Option<Arc<TierTracing>>,
    /// How many peers it listens as (1 to [`wire::MAX_PEERS`]): one tier (one core, one
    /// count) on that many sockets, `listen` and the ports after it (each a free port
    /// when `listen`'s is 0), for a proxy in front with as many `server` lines. Each
    /// request knows the peer it came in at ([`Incoming::peer`]).
    pub peers: u32,
    /// Connections served in full before the one idle longest is closed; `None`: what
    /// the descriptor limit allows ([`fault_server::serve_bounded`]).
    pub max_connections: Option<usize>,
}

struct Shared {
    name: String,
    next: String,
    /// The tier's decisions and counts, held only for a decision.
    core: Mutex<Tier>,
    http: reqwest::Client,
    start: Instant,
    tracing: Option<Arc<TierTracing>>,
    in_flight: AtomicU64,
    /// The most bytes read of one answer's body so far.
    largest_answer: AtomicU64,
    /// The tier's own name in `Via`, drawn when it starts: a request that carries it has
    /// come round a loop back to this tier.
    via: wire::ViaName,
}

impl Shared {
    fn now(&self) -> Duration {
        self.start.elapsed()
    }

    fn note_read(&self, bytes: usize) {
        self.largest_answer
            .fetch_max(bytes as u64, Ordering::Relaxed);
    }

    fn core(&self) -> MutexGuard<'_, Tier> {
        self.core
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Why a tier could not start.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    #[error("tier `{name}`: cannot listen on {listen}: {source}")]
    Bind {
        name: String,
        listen: SocketAddr,
        source: std::io::Error,
    },
    #[error("tier `{name}`: cannot build its HTTP client: {0}", name = .1)]
    Client(String, String),
    #[error("tier `{name}`: cannot listen as {peers} peers from {listen}: a tier listens as 1 to {max} peers, on ports up to 65535", max = wire::MAX_PEERS)]
    Peers {
        name: String,
        listen: SocketAddr,
        peers: u32,
    },
}

/// A running tier.
pub struct Relay {
    /// Every peer's URL, peer 1 first.
    urls: Vec<String>,
    shared: Arc<Shared>,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for Relay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Relay")
            .field("name", &self.shared.name)
            .field("urls", &self.urls)
            .finish_non_exhaustive()
    }
}

impl Relay {
    /// Starts a tier listening on `config.listen` (and as many peers as it says).
    pub async fn start(config: RelayConfig) -> Result<Relay, RelayError> {
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .map_err(|source| RelayError::Bind {
                name: config.name.clone(),
                listen: config.listen,
                source,
            })?;
        Relay::start_on(listener, config).await
    }

    /// Starts a tier on a listener already bound (`config.listen` is then only its name
    /// in errors): its address is known before the tier starts, so another tier can
    /// forward to it first. Its other peers, if it has more than one, listen on the ports
    /// after it (free ports when it is on port 0).
    pub async fn start_on(
        listener: tokio::net::TcpListener,
        config: RelayConfig,
    ) -> Result<Relay, RelayError> {
        let bind_error = |listen, source| RelayError::Bind {
            name: config.name.clone(),
            listen,
            source,
        };
        let addr = listener
            .local_addr()
            .map_err(|source| bind_error(config.listen, source))?;
        let mut listeners = vec![(addr, listener)];
        for listen in more_peers(&config, addr)? {
            let listener = tokio::net::TcpListener::bind(listen)
                .await
                .map_err(|source| bind_error(listen, source))?;
            let addr = listener
                .local_addr()
                .map_err(|source| bind_error(listen, source))?;
            listeners.push((addr, listener));
        }
        let http = crate::attempt::http_client(256)
            .map_err(|e| RelayError::Client(e.to_string(), config.name.clone()))?;
        let shared = Arc::new(Shared {
            name: config.name,
            next: config.next.trim_end_matches('/').to_owned(),
            core: Mutex::new(Tier::new(config.policy, config.script, config.seed)),
            http,
            start: Instant::now(),
            tracing: config.tracing,
            in_flight: AtomicU64::new(0),
            largest_answer: AtomicU64::new(0),
            via: wire::ViaName::new(wire::HopKind::Relay),
        });
        let stop = CancellationToken::new();
        let urls = listeners
            .iter()
            .map(|(addr, _)| format!("http://{addr}"))
            .collect();
        // One accept loop for every peer, so one budget bounds the tier's connections
        // (with several peers, each request carries its `fault_server::Peer`).
        let app = axum::Router::new()
            .fallback(relay)
            .with_state(Arc::clone(&shared));
        let listeners = listeners.into_iter().map(|(_, l)| l).collect();
        let task = tokio::spawn(fault_server::serve_bounded(
            listeners,
            app,
            stop.clone(),
            config.max_connections,
        ));
        Ok(Relay {
            urls,
            shared,
            stop,
            task,
        })
    }

    /// The tier's URL; with several peers, peer 1's.
    pub fn url(&self) -> &str {
        &self.urls[0]
    }

    /// Every peer's URL, peer 1 first (one at a tier with one peer): the `server` lines of
    /// a proxy in front, in this order.
    pub fn peer_urls(&self) -> &[String] {
        &self.urls
    }

    pub fn name(&self) -> &str {
        &self.shared.name
    }

    pub fn counts(&self) -> HopCounts {
        self.shared.core().counts().clone()
    }

    /// The most bytes the tier has read of one answer's body: at most [`MAX_ANSWER`]
    /// (1 MiB), whatever the next hop sends.
    pub fn largest_answer(&self) -> u64 {
        self.shared.largest_answer.load(Ordering::Relaxed)
    }

    /// Requests still being forwarded.
    pub fn in_flight(&self) -> u64 {
        self.shared.in_flight.load(Ordering::Relaxed)
    }

    /// Waits until no request is in flight, at most `limit`.
    pub async fn settle(&self, limit: Duration) {
        let until = Instant::now() + limit;
        while self.in_flight() > 0 && Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Stops listening and ends the requests in flight.
    pub async fn shutdown(self) {
        self.stop.cancel();
        // Graceful shutdown waits for open connections; a client that keeps one open
        // must not keep the tier up.
        let abort = self.task.abort_handle();
        if tokio::time::timeout(Duration::from_secs(2), self.task)
            .await
            .is_err()
        {
            abort.abort();
        }
    }
}

/// The addresses of a tier's peers after the first (at `first`): the ports after it, or
/// free ports when it was asked for port 0.
fn more_peers(config: &RelayConfig, first: SocketAddr) -> Result<Vec<SocketAddr>, RelayError> {
    let too_many = || RelayError::Peers {
        name: config.name.clone(),
        listen: config.listen,
        peers: config.peers,
    };
    if config.peers == 0 || usize::try_from(config.peers).map_or(true, |p| p > wire::MAX_PEERS) {
        return Err(too_many());
    }
    (1..config.peers)
        .map(|i| {
            let port = if config.listen.port() == 0 {
                Some(0)
            } else {
                u16::try_from(i)
                    .ok()
                    .and_then(|i| first.port().checked_add(i))
            };
            port.map(|port| SocketAddr::new(first.ip(), port))
                .ok_or_else(too_many)
        })
        .collect()
}

/// Counts a request in flight until it is answered (or dropped).
struct InFlight<'a>(&'a AtomicU64);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A request arrives: answered by the tier's own fault, or forwarded through its policy.
/// The work runs on a task of its own, as a real service's does: a caller that hangs up
/// (its timeout, the end of a run) does not cut a session short, so the tier's breaker
/// and budget always hear how each attempt ended, and every request is counted to its
/// end.
async fn relay(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let received = shared.now();
    let (parts, body) = request.into_parts();
    if parts.uri.path().starts_with("/__chaos/") {
        // The fault-server's control API is for the harness, on its own address: a tier
        // must not open it to whoever can reach the tier.
        return problem(
            StatusCode::NOT_FOUND,
            &format!("tier `{}` does not forward the control API", shared.name),
        );
    }
    shared.in_flight.fetch_add(1, Ordering::Relaxed);
    let task = tokio::spawn(serve(Arc::clone(&shared), parts, body, received));
    match task.await {
        Ok(response) => response,
        Err(_) => problem(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("tier `{}`: the request's task failed", shared.name),
        ),
    }
}

/// One request, from its admission to the answer upstream: the hop core decides, this
/// moves the bytes.
async fn serve(
    shared: Arc<Shared>,
    parts: axum::http::request::Parts,
    body: Body,
    received: Duration,
) -> Response {
    let _flight = InFlight(&shared.in_flight);
    let text = |name: &str| parts.headers.get(name).and_then(|v| v.to_str().ok());
    let id = text(wire::REQUEST_ID).unwrap_or("");
    let mut span = shared.tracing.as_ref().and_then(|t| {
        TierSpan::begin(
            t,
            text(wire::TRACEPARENT),
            &shared.name,
            parts.method.as_str(),
            parts.uri.path(),
        )
    });
    let forwarding = match admit(&shared, &parts, id, received, &mut span).await {
        Ok(forwarding) => forwarding,
        Err(answered) => return answered,
    };
    let Ok(body) = axum::body::to_bytes(body, MAX_BODY).await else {
        shared.core().refuse();
        return problem(
            StatusCode::PAYLOAD_TOO_LARGE,
            &format!(
                "tier `{}`: the request body is over 1 MiB or was cut off",
                shared.name
            ),
        );
    };
    session(&shared, (&parts, &body), id, forwarding, span).await
}

/// The request's admission: counted, and answered by the tier's own fault (`Err`), held
/// by a delay fault, or let through.
async fn admit(
    shared: &Shared,
    parts: &axum::http::request::Parts,
    id: &str,
    received: Duration,
    span: &mut Option<TierSpan>,
) -> Result<Forwarding, Response> {
    let headers = &parts.headers;
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let came_back = shared
        .via
        .is_in_any(headers.get_all(wire::VIA).iter().map(|v| v.as_bytes()));
    // Built inside the call: the header view is not `Sync`, so it must not live across an
    // await.
    let (forwarding, admission) = shared.core().receive(
        received,
        &Incoming {
            method: parts.method.as_str(),
            path: parts.uri.path(),
            id,
            attempt: wire::StatedAttempt {
                chaos: text(wire::ATTEMPT),
                ..wire::StatedAttempt::default()
            }
            .number(),
            upstream: text(wire::UPSTREAM_ATTEMPTS),
            deadline: text(wire::DEADLINE_MS).and_then(wire::parse_deadline),
            allowance: text(wire::RETRY_ALLOWANCE).and_then(wire::parse_allowance),
            idempotency_key: headers.contains_key(wire::IDEMPOTENCY_KEY),
            headers,
            peer: parts.extensions.get::<fault_server::Peer>().map(|p| p.0),
            came_back,
        },
    );
    // An answer of the tier's own spent nothing of a shared allowance: all of it goes back.
    let left = forwarding.allowance();
    let own = admission.own_reply(left);
    let admitted = match admission {
        Admission::Forward => Ok(forwarding),
        Admission::Delay(d) => {
            tokio::time::sleep(d).await;
            Ok(forwarding)
        }
        Admission::Fault { phase, response } => {
            if let (Some(t), Some(span)) = (&shared.tracing, span.take()) {
                span.end(t, response.status, None);
            }
            let phase = shared.core().phase_name(phase).to_owned();
            Err(injected(&shared.name, &phase, &response))
        }
        Admission::Loop => {
            if let (Some(t), Some(span)) = (&shared.tracing, span.take()) {
                span.end(t, StatusCode::LOOP_DETECTED.as_u16(), None);
            }
            let response = problem(
                StatusCode::LOOP_DETECTED,
                &if came_back {
                    format!(
                        "tier `{}`: the request came back to this tier (its Via names it, {}): it is going round a loop; check where each tier's --to points",
                        shared.name,
                        shared.via.pseudonym(),
                    )
                } else {
                    format!(
                        "tier `{}`: the request has passed {} hops ({}), more than a call chain of at most {} tiers has: it is going round a loop of relays; check where each tier's --to points",
                        shared.name,
                        wire::chain_hops(text(wire::UPSTREAM_ATTEMPTS)),
                        wire::UPSTREAM_ATTEMPTS,
                        wire::MAX_TIERS,
                    )
                },
            );
            Err(response)
        }
        Admission::Unsupported => Err(problem(
            StatusCode::SERVICE_UNAVAILABLE,
            &format!("tier `{}` cannot inject this fault", shared.name),
        )),
    };
    admitted.map_err(|mut response| {
        // The hop core says what the tier answers; the arms above say why, in the body.
        if let Some(reply) = own {
            if let Outcome::Status(status) = reply.outcome
                && let Ok(status) = StatusCode::from_u16(status)
            {
                *response.status_mut() = status;
            }
            if reply.no_retry {
                response
                    .headers_mut()
                    .insert(wire::NO_RETRY, axum::http::HeaderValue::from_static("1"));
            }
            say_allowance_left(&mut response, reply.allowance_left);
        }
        response
    })
}

/// The request's session: each attempt forwarded and its answer fed to the core, each
/// backoff slept, until the core answers upstream.
async fn session(
    shared: &Shared,
    (parts, body): (&axum::http::request::Parts, &Bytes),
    id: &str,
    mut forwarding: Forwarding,
    mut span: Option<TierSpan>,
) -> Response {
    let mut rng = forwarding.jitter_rng();
    let mut step = shared.core().start(&mut forwarding, shared.now(), id);
    let mut last = None;
    loop {
        match step {
            Step::Send { attempt, timeout } => {
                let traceparent = match (&shared.tracing, &mut span) {
                    (Some(t), Some(span)) => {
                        Some(span.forward(t, attempt.get(), forwarding.violations()))
                    }
                    _ => None,
                };
                let hop = Hop {
                    attempt: attempt.get(),
                    timeout,
                    chain: forwarding.chain(),
                    traceparent: traceparent.as_deref(),
                    allowance: forwarding.allowance(),
                };
                let answer = forward(shared, parts, body, hop).await;
                if let Some(span) = &mut span {
                    span.answered(answer.reply.outcome);
                }
                step = shared.core().on_answer(
                    &mut forwarding,
                    shared.now(),
                    answer.reply,
                    &mut rng,
                    id,
                );
                last = Some(answer);
            }
            Step::Wait { until } => {
                sleep_until(shared.start + until).await;
                step = shared.core().on_timer(&mut forwarding, shared.now(), id);
            }
            Step::Answer(upward) => {
                let response = respond(&shared.name, upward, last);
                if let (Some(t), Some(span)) = (&shared.tracing, span) {
                    span.end(
                        t,
                        response.status().as_u16(),
                        upward.gave_up.map(|r| r.name()),
                    );
                }
                return response;
            }
        }
    }
}
