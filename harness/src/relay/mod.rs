//! A relay tier: an HTTP service that forwards each request it receives to the next tier
//! through its own retry policy, and answers with what it finally got.
//!
//! One more shell around `chaos-policy`: every request is a [`chaos_policy::Session`] of
//! the tier's own [`Client`] (shared by all its requests, as a service's client is), the
//! same core the load generator drives. A chain A → B → C multiplies attempts: when each
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
//! - `traceparent`: the tier's own CLIENT span when the run is traced
//!   ([`crate::telemetry::tier`]), else the caller's, unchanged;
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

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::Response;
use chaos_policy::{Action, Client, Method, Policy, Verdict};
use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;
use serde::{Deserialize, Serialize};
use tokio::time::{Instant, sleep_until};
use tokio_util::sync::CancellationToken;

use fault_server::Script;
use fault_server::script::{Decision, FaultAction, RequestFacts};
use fault_server::seed::request_seed;

use crate::attempt::parse_retry_after;
use crate::telemetry::tier::{TierSpan, TierTracing};

pub(crate) mod answer;
mod forward;

use answer::{injected, problem, respond};
use forward::{Answer, Hop, forward};

/// The marker of an answer from a tier that gave up.
pub const NO_RETRY: &str = "x-chaos-no-retry";
/// How long the caller waits for this attempt, in milliseconds.
pub const DEADLINE_MS: &str = "x-chaos-deadline-ms";
/// The attempt numbers of the hops above, outermost first, joined by `.`.
pub const UPSTREAM_ATTEMPTS: &str = "x-chaos-upstream-attempts";

/// The largest request body a tier forwards.
const MAX_BODY: usize = 1 << 20;

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
}

/// What one hop received, sent and gave up: the tier's ledger.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HopCounts {
    /// Requests received (attempts of the hop above).
    pub received: u64,
    /// Of which first attempts: the logical requests of the hop above.
    pub logical: u64,
    /// Attempts sent to the next hop, and of those, retries.
    pub sent: u64,
    pub retries: u64,
    pub succeeded: u64,
    pub gave_up: u64,
    /// Answers from the next hop that carried `x-chaos-no-retry`.
    pub no_retry_received: u64,
    /// Requests this tier answered with a fault of its own, without forwarding.
    #[serde(default)]
    pub faulted: u64,
    /// Attempts sent that failed to connect: the next hop never received them.
    #[serde(default)]
    pub unsent: u64,
    /// Attempts sent in each second since the tier started.
    pub sent_per_second: Vec<u64>,
}

#[derive(Debug, Default)]
struct Counters {
    received: AtomicU64,
    logical: AtomicU64,
    sent: AtomicU64,
    retries: AtomicU64,
    succeeded: AtomicU64,
    gave_up: AtomicU64,
    no_retry_received: AtomicU64,
    faulted: AtomicU64,
    unsent: AtomicU64,
    in_flight: AtomicU64,
    /// Attempts sent per second since the start, up to a day (a longer run is counted in
    /// its totals, not here).
    per_second: Mutex<Vec<u64>>,
}

/// The most seconds a tier keeps a per-second count of.
const MAX_SECONDS: usize = 86_400;

impl Counters {
    fn snapshot(&self) -> HopCounts {
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        HopCounts {
            received: load(&self.received),
            logical: load(&self.logical),
            sent: load(&self.sent),
            retries: load(&self.retries),
            succeeded: load(&self.succeeded),
            gave_up: load(&self.gave_up),
            no_retry_received: load(&self.no_retry_received),
            faulted: load(&self.faulted),
            unsent: load(&self.unsent),
            sent_per_second: lock(&self.per_second).clone(),
        }
    }

    fn sent_at(&self, at: Duration) {
        self.sent.fetch_add(1, Ordering::Relaxed);
        let second = usize::try_from(at.as_secs()).unwrap_or(usize::MAX);
        if second < MAX_SECONDS {
            let mut series = lock(&self.per_second);
            if series.len() <= second {
                series.resize(second + 1, 0);
            }
            series[second] += 1;
        }
    }
}

struct Shared {
    name: String,
    next: String,
    client: Mutex<Client>,
    /// The tier's policy allows retries (more than one attempt): its give-ups say "don't
    /// retry" upstream.
    retries: bool,
    http: reqwest::Client,
    start: Instant,
    seed: u64,
    script: Option<Script>,
    tracing: Option<Arc<TierTracing>>,
    counts: Counters,
}

impl Shared {
    fn now(&self) -> Duration {
        self.start.elapsed()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
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
}

/// A running tier.
pub struct Relay {
    url: String,
    shared: Arc<Shared>,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for Relay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Relay")
            .field("name", &self.shared.name)
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl Relay {
    /// Starts a tier listening on `config.listen`.
    pub async fn start(config: RelayConfig) -> Result<Relay, RelayError> {
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .map_err(|source| RelayError::Bind {
                name: config.name.clone(),
                listen: config.listen,
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| RelayError::Bind {
            name: config.name.clone(),
            listen: config.listen,
            source,
        })?;
        let http = crate::attempt::http_client(256)
            .map_err(|e| RelayError::Client(e.to_string(), config.name.clone()))?;
        let shared = Arc::new(Shared {
            name: config.name,
            next: config.next.trim_end_matches('/').to_owned(),
            retries: config.policy.config().max_attempts > 1,
            client: Mutex::new(Client::new(config.policy)),
            http,
            start: Instant::now(),
            seed: config.seed,
            script: config.script.filter(|s| s.phase_count() > 0),
            tracing: config.tracing,
            counts: Counters::default(),
        });
        let app = axum::Router::new()
            .fallback(relay)
            .with_state(Arc::clone(&shared));
        let stop = CancellationToken::new();
        let task = {
            let stop = stop.clone();
            tokio::spawn(async move {
                let _ = axum::serve(listener, app)
                    .with_graceful_shutdown(async move { stop.cancelled().await })
                    .await;
            })
        };
        Ok(Relay {
            url: format!("http://{addr}"),
            shared,
            stop,
            task,
        })
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn name(&self) -> &str {
        &self.shared.name
    }

    pub fn counts(&self) -> HopCounts {
        self.shared.counts.snapshot()
    }

    /// Requests still being forwarded.
    pub fn in_flight(&self) -> u64 {
        self.shared.counts.in_flight.load(Ordering::Relaxed)
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

/// Counts a request in flight until it is answered (or dropped).
struct InFlight<'a>(&'a Counters);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A request arrives: answered by the tier's own fault, or forwarded through its policy.
/// The work runs on a task of its own, as a real service's does: a caller that hangs up
/// (its timeout, the end of a run) does not cut a session short, so the tier's breaker
/// and budget always hear how each attempt ended, and every request is counted to its
/// end.
async fn relay(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let received = Instant::now();
    let (parts, body) = request.into_parts();
    if parts.uri.path().starts_with("/__chaos/") {
        // The fault-server's control API is for the harness, on its own address: a tier
        // must not open it to whoever can reach the tier.
        return problem(
            StatusCode::NOT_FOUND,
            &format!("tier `{}` does not forward the control API", shared.name),
        );
    }
    let counts = &shared.counts;
    counts.in_flight.fetch_add(1, Ordering::Relaxed);
    counts.received.fetch_add(1, Ordering::Relaxed);
    let task = tokio::spawn(serve(Arc::clone(&shared), parts, body, received));
    match task.await {
        Ok(response) => response,
        Err(_) => problem(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("tier `{}`: the request's task failed", shared.name),
        ),
    }
}

/// The least a tier keeps back from its caller's deadline, so that its answer (a 504
/// marked `x-chaos-no-retry`) arrives before the caller's own timer fires.
const DEADLINE_MARGIN: Duration = Duration::from_millis(10);

async fn serve(
    shared: Arc<Shared>,
    parts: axum::http::request::Parts,
    body: Body,
    received: Instant,
) -> Response {
    let counts = &shared.counts;
    let _flight = InFlight(counts);
    let headers = &parts.headers;
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let upstream_attempt: Option<u32> = text("x-chaos-attempt").and_then(|a| a.trim().parse().ok());
    if upstream_attempt.is_none_or(|a| a <= 1) {
        counts.logical.fetch_add(1, Ordering::Relaxed);
    }
    let limit = text(DEADLINE_MS)
        .and_then(|ms| ms.trim().parse::<u64>().ok())
        .map(Duration::from_millis);
    let chain = match (text(UPSTREAM_ATTEMPTS), upstream_attempt) {
        (Some(above), Some(n)) => format!("{above}.{n}"),
        (None, Some(n)) => n.to_string(),
        (Some(above), None) => above.to_owned(),
        (None, None) => String::new(),
    };
    let body = match axum::body::to_bytes(body, MAX_BODY).await {
        Ok(body) => body,
        Err(_) => {
            counts.gave_up.fetch_add(1, Ordering::Relaxed);
            return problem(
                StatusCode::PAYLOAD_TOO_LARGE,
                &format!(
                    "tier `{}`: the request body is over 1 MiB or was cut off",
                    shared.name
                ),
            );
        }
    };
    let id = text("x-request-id").unwrap_or("");
    let mut span = shared.tracing.as_ref().and_then(|t| {
        TierSpan::begin(
            t,
            text("traceparent"),
            &shared.name,
            parts.method.as_str(),
            parts.uri.path(),
        )
    });
    // Requests without an id (another load tool in front of a standalone tier) each get
    // draws of their own.
    let anonymous = if id.is_empty() {
        counts.received.load(Ordering::Relaxed)
    } else {
        0
    };
    if let Some(script) = &shared.script {
        // Decided as the fault-server decides: per (seed, id, attempt, the chain above),
        // sticky phases per logical request.
        let mut rng = ChaCha8Rng::seed_from_u64(
            request_seed(shared.seed, id, upstream_attempt.unwrap_or(0))
                ^ fault_server::seed::splitmix64(
                    fault_server::seed::fnv1a([chain.as_bytes()]) ^ anonymous,
                ),
        );
        // The facts borrow the headers as a `dyn` lookup: decide before any await.
        let decision = {
            let facts = RequestFacts {
                method: parts.method.as_str(),
                path: parts.uri.path(),
                attempt: upstream_attempt,
                headers,
                sticky_seed: (!id.is_empty()).then(|| request_seed(shared.seed, id, 0)),
            };
            script.select(&facts, shared.now(), &mut rng)
        };
        if let Decision::Fault { phase, fault } = decision {
            match fault.action {
                FaultAction::Delay(d) => tokio::time::sleep(d).await,
                FaultAction::Status(response) => {
                    counts.faulted.fetch_add(1, Ordering::Relaxed);
                    if let (Some(t), Some(span)) = (&shared.tracing, span.take()) {
                        span.end(t, response.status, None);
                    }
                    return injected(
                        &shared.name,
                        script.phase_name(phase).unwrap_or("?"),
                        &response,
                    );
                }
                // The plan allows statuses and delays only at a tier.
                _ => {
                    counts.faulted.fetch_add(1, Ordering::Relaxed);
                    return problem(
                        StatusCode::SERVICE_UNAVAILABLE,
                        &format!("tier `{}` cannot inject this fault", shared.name),
                    );
                }
            }
        }
    }
    let request = chaos_policy::Request {
        method: Method::parse(parts.method.as_str()),
        idempotency_key: headers.contains_key("idempotency-key"),
    };
    let mut rng = ChaCha8Rng::seed_from_u64(fault_server::seed::splitmix64(
        shared.seed ^ fault_server::seed::fnv1a([id.as_bytes(), chain.as_bytes()]) ^ anonymous,
    ));
    // The caller's deadline counts from when it sent the request: what the body, a delay
    // fault and a margin for the answer's way back took is gone already.
    let limit = limit.map(|l| {
        let margin = DEADLINE_MARGIN.max(l / 20);
        l.saturating_sub(received.elapsed() + margin)
    });
    let (mut session, mut action) = {
        let mut client = lock(&shared.client);
        let now = shared.now();
        client.start_within(request, now, limit)
    };
    let mut last: Option<Answer> = None;
    loop {
        match action {
            Action::Send { attempt, timeout } => {
                counts.sent_at(shared.now());
                if attempt.is_retry() {
                    counts.retries.fetch_add(1, Ordering::Relaxed);
                }
                let traceparent = match (&shared.tracing, &mut span) {
                    (Some(t), Some(span)) => Some(span.forward(t, attempt.get())),
                    _ => None,
                };
                let answer = forward(
                    &shared,
                    &parts,
                    &body,
                    Hop {
                        attempt: attempt.get(),
                        timeout,
                        chain: &chain,
                        traceparent: traceparent.as_deref(),
                    },
                )
                .await;
                if let Some(span) = &mut span {
                    span.answered(answer.outcome);
                }
                if answer.outcome.proves_unsent() {
                    counts.unsent.fetch_add(1, Ordering::Relaxed);
                }
                if answer.no_retry {
                    counts.no_retry_received.fetch_add(1, Ordering::Relaxed);
                }
                action = {
                    let mut client = lock(&shared.client);
                    let now = shared.now();
                    client.on_answer(
                        &mut session,
                        now,
                        answer.outcome,
                        answer
                            .headers
                            .get("retry-after")
                            .and_then(|v| v.to_str().ok())
                            .and_then(parse_retry_after),
                        answer.no_retry,
                        &mut rng,
                    )
                };
                last = Some(answer);
            }
            Action::Wait { until } => {
                sleep_until(shared.start + until).await;
                action = lock(&shared.client).on_timer(&mut session, shared.now());
            }
            Action::Done(verdict) => {
                let response = respond(&shared, verdict, last);
                if let (Some(t), Some(span)) = (&shared.tracing, span.take()) {
                    let gave_up = match verdict {
                        Verdict::GaveUp { reason, .. } => Some(reason.name()),
                        Verdict::Succeeded { .. } => None,
                    };
                    span.end(t, response.status().as_u16(), gave_up);
                }
                return response;
            }
        }
    }
}
