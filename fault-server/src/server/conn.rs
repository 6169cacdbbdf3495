//! The accept loop: hyper's HTTP/1 connections served with a router, each one in a
//! `select!` with its kill signal and the server's shutdown signals.
//!
//! Why a custom accept loop instead of `axum::serve`: a handler must be able to kill the
//! very connection its request came on, with an RST or a FIN of its choosing, and axum
//! does not hand a handler its socket. So each accepted stream is split into the stream
//! hyper serves and a [`ConnControl`](super::socket::ConnControl), which every request on
//! the connection reaches while it is handled.
//!
//! The loop takes what serves each request as an argument (a [`Serve`]: any router, or
//! the server's dispatch) and knows nothing of what it routes to, so it is tested here
//! with a trivial router.
//!
//! Two guards against clients that hold resources without using them. Slow clients: a
//! request's headers must arrive within [`HEADER_READ_TIMEOUT`] of the connection's last
//! response (or its opening), and its body within [`Limits::body_timeout`] of the headers
//! (a body trickled a byte a second is cut, its handler sees [`BodyTimedOut`]). Idle
//! clients: open connections are bounded by a budget ([`Limits::max_connections`], from
//! the descriptor limit); past it the connection idle longest is closed, as nginx and
//! Envoy do under overload, and when every connection is busy the newcomer is served one
//! request, and only if it is one that must stay reachable ([`Limits::always_serve`]: the
//! control API and health checks); others get 503. So 5,000 idle connections cannot make
//! `/healthz` unreachable. Those newcomers are bounded too ([`Limits::over_budget`]), and
//! the budget counts a connection until its descriptors are closed, not until it is told
//! to close: past both, the accept loop accepts nothing until some are closed, so a burst
//! cannot spend the descriptors the control API needs; it waits in the listen backlog.

use std::error::Error as StdError;
use std::fmt;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::response::{IntoResponse, Response};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::server::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

use super::socket;

mod budget;

use budget::{Admission, Budget, Open};

/// What the accept loop hands each request to: a router, or anything that answers.
pub(crate) trait Serve: Clone + Send + 'static {
    fn serve(
        &self,
        request: hyper::Request<DeadlineBody>,
    ) -> impl Future<Output = Response> + Send + use<Self>;

    /// A connection was accepted, whatever it then sends (HTTP or not).
    fn accepted(&self) {}
}

impl Serve for Router {
    fn serve(
        &self,
        request: hyper::Request<DeadlineBody>,
    ) -> impl Future<Output = Response> + Send + use<> {
        let answer = self.clone().oneshot(request);
        async move {
            match answer.await {
                Ok(response) => response,
                Err(never) => match never {},
            }
        }
    }
}

/// How long a client may take to send a request's headers after the connection's last
/// response or its opening (slowloris guard; also how an idle keep-alive connection ends).
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// How often the accept loop looks for connections past [`HEADER_READ_TIMEOUT`]: one is
/// closed between the timeout and the timeout plus this.
///
/// Why not hyper's own header timer: it makes, arms and drops a timer for every request
/// (a boxed `Sleep` registered in and removed from tokio's timer wheel under its lock),
/// about 0.6 µs of CPU a request and 5-12% of the faultless server's throughput under
/// wrk on the bench machine. One look a second at every open connection costs nothing a
/// request; the busy-connection accounting it reads is kept anyway, for the budget.
const HEADER_SWEEP: Duration = Duration::from_secs(1);

/// How long a connection served over budget may take to send its one request.
const OVER_BUDGET_HEADER_TIMEOUT: Duration = Duration::from_secs(2);

/// What the accept loop bounds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Connections open at once before the one idle longest is closed.
    pub(crate) max_connections: usize,
    /// Connections served at once past `max_connections` when every one is busy.
    pub(crate) over_budget: usize,
    /// Paths served even to a connection over budget.
    pub(crate) always_serve: fn(&str) -> bool,
    /// How long a request's body may take once its headers are in.
    pub(crate) body_timeout: Duration,
    /// What an HTTP/2 connection advertises as `SETTINGS_MAX_CONCURRENT_STREAMS`.
    pub(crate) max_concurrent_streams: u32,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_connections: usize::MAX,
            over_budget: crate::fd_limit::OVER_BUDGET,
            always_serve: |_| false,
            body_timeout: super::config::DEFAULT_BODY_TIMEOUT,
            max_concurrent_streams: super::config::DEFAULT_MAX_CONCURRENT_STREAMS,
        }
    }
}

/// A request body that did not arrive within [`Limits::body_timeout`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BodyTimedOut(pub(crate) Duration);

impl fmt::Display for BodyTimedOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the request body did not arrive within {}",
            crate::duration::format_duration(self.0)
        )
    }
}

impl StdError for BodyTimedOut {}

/// A body with a deadline for all of it, not for each frame: a trickle still ends.
pub(crate) struct DeadlineBody {
    inner: Incoming,
    limit: Duration,
    /// None for a body that is over before it starts (a GET's): no timer to arm.
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl DeadlineBody {
    fn new(inner: Incoming, limit: Duration) -> DeadlineBody {
        let deadline = (!inner.is_end_stream()).then(|| Box::pin(tokio::time::sleep(limit)));
        DeadlineBody {
            inner,
            limit,
            deadline,
        }
    }
}

impl Body for DeadlineBody {
    type Data = Bytes;
    type Error = Box<dyn StdError + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(frame) => Poll::Ready(frame.map(|f| f.map_err(Into::into))),
            Poll::Pending => match self.deadline.as_mut().map(|d| d.as_mut().poll(cx)) {
                Some(Poll::Ready(())) => Poll::Ready(Some(Err(Box::new(BodyTimedOut(self.limit))))),
                Some(Poll::Pending) | None => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// The server's two stop signals, as the accept loop and its connections see them.
#[derive(Debug, Clone, Default)]
pub(crate) struct Stop {
    /// Graceful shutdown has begun: stop accepting, finish the requests in progress.
    pub(crate) shutdown: CancellationToken,
    /// The grace period is over: close every connection.
    pub(crate) force: CancellationToken,
}

/// The peer a request arrived at, numbered from 1, as a request extension: the listening
/// socket its connection was accepted on, when the server listens as several peers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer(pub u32);

/// A connection accepted and not yet admitted.
struct Newcomer {
    stream: TcpStream,
    id: u64,
    open: Arc<Open>,
    peer: Option<Peer>,
}

/// The next connection on any of `listeners`, with the index of the one it came in on.
/// The listener first looked at turns with every call, so a busy peer cannot keep the
/// others' connections waiting.
async fn accept_any(
    listeners: &[TcpListener],
    turn: &mut usize,
) -> (usize, io::Result<(TcpStream, SocketAddr)>) {
    let start = *turn;
    *turn = turn.wrapping_add(1);
    std::future::poll_fn(|cx| {
        for k in 0..listeners.len() {
            let i = (start + k) % listeners.len();
            if let Poll::Ready(accepted) = listeners[i].poll_accept(cx) {
                return Poll::Ready((i, accepted));
            }
        }
        Poll::Pending
    })
    .await
}

/// Accepts until shutdown; each connection runs on its own task, tracked for shutdown.
/// With several `listeners` (peers), each connection's requests carry its [`Peer`], the
/// listener's place in the list plus one; with one, none do.
///
/// While a newcomer waits for room ([`Admission::Wait`]) nothing else is accepted: the
/// clients behind it wait in the listen backlog, in the order they came, rather than be
/// refused for descriptors about to be free. It is admitted once a connection has
/// closed its descriptors, or at the next sweep, which may have closed some, or found
/// a busy connection idle again.
pub(crate) async fn accept_loop(
    listeners: Vec<TcpListener>,
    service: impl Serve,
    stop: Stop,
    tracker: TaskTracker,
    limits: Limits,
) {
    let mut builder = bounded_builder();
    // The header timeout is the sweep's below, not hyper's (see `HEADER_SWEEP`).
    builder.header_read_timeout(None).keep_alive(true);
    let builder = Arc::new(builder);
    // Rare, and served one request: hyper's own timer, of seconds, suits them.
    let mut over = bounded_builder();
    over.timer(TokioTimer::new())
        .header_read_timeout(OVER_BUDGET_HEADER_TIMEOUT)
        .keep_alive(false);
    let over = Arc::new(over);
    let h2 = Arc::new(h2_builder(limits.max_concurrent_streams));
    let budget = Arc::new(Budget::new(limits.max_connections, limits.over_budget));
    let mut sweep = tokio::time::interval_at(Instant::now() + HEADER_SWEEP, HEADER_SWEEP);
    sweep.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut waiting: Option<Newcomer> = None;
    let mut turn = 0;
    let peers = listeners.len() > 1;
    loop {
        tokio::select! {
            biased;
            () = stop.shutdown.cancelled() => break,
            _ = sweep.tick() => {
                budget.close_stalled(HEADER_READ_TIMEOUT);
            }
            () = budget.left.notified(), if waiting.is_some() => {}
            (index, accepted) = accept_any(&listeners, &mut turn), if waiting.is_none() => match accepted {
                Ok((stream, _address)) => {
                    service.accepted();
                    let open = Arc::new(Open {
                        busy: AtomicUsize::new(0),
                        last_active: AtomicU64::new(Open::now(budget.epoch)),
                        epoch: budget.epoch,
                        kill: stop.force.child_token(),
                    });
                    let id = budget.next_id.fetch_add(1, Ordering::Relaxed);
                    let peer = peers.then(|| Peer(u32::try_from(index + 1).unwrap_or(u32::MAX)));
                    waiting = Some(Newcomer { stream, id, open, peer });
                }
                Err(error) if is_per_connection(&error) => {}
                Err(_) => {
                    // Out of descriptors or memory: back off instead of spinning; the
                    // connections already open keep being served.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
        }
        let Some(newcomer) = waiting.take() else {
            continue;
        };
        let within = match budget.admit(newcomer.id, &newcomer.open) {
            Admission::Within => true,
            Admission::Over => false,
            Admission::Wait => {
                waiting = Some(newcomer);
                continue;
            }
        };
        let connection = Connection {
            id: newcomer.id,
            open: newcomer.open,
            budget: Arc::clone(&budget),
            // Over budget with nothing idle to close: one request, and only one that
            // must stay reachable.
            only: (!within).then_some(limits.always_serve),
            body_timeout: limits.body_timeout,
            peer: newcomer.peer,
        };
        tracker.spawn(serve_connection(
            newcomer.stream,
            stop.shutdown.child_token(),
            service.clone(),
            Builders {
                h1: Arc::clone(if within { &builder } else { &over }),
                h2: Arc::clone(&h2),
            },
            connection,
        ));
    }
}

/// How many connections the kernel queues for the accept loop. The standard library's
/// and tokio's 128 is short of a burst: the accept loop stops accepting while the budget
/// has no room, and a client the queue has no room for has its SYN dropped and retries
/// it a second later. At 1,024 a burst of 700 queues whole, and a health check behind it
/// is answered in milliseconds rather than a second (Linux caps it at `somaxconn`, 4,096
/// by default).
const LISTEN_BACKLOG: u32 = 1024;

/// Binds a listener with [`LISTEN_BACKLOG`].
pub(crate) fn listen(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    // As `TcpListener::bind` does: a restarted server rebinds at once.
    #[cfg(not(windows))]
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// hyper's HTTP/1 builder with the request head bounded: at most
/// [`MAX_HEADER_BYTES`](super::config::MAX_HEADER_BYTES) bytes and
/// [`MAX_HEADERS`](super::config::MAX_HEADERS) fields, else 431 and the connection closed.
///
/// `max_header_size` must be set: hyper's read buffer (`max_buf_size`, 417,792 bytes by
/// default) is checked only while a head is incomplete, and one read may run past it, so
/// a head complete after that read was served whatever its size. The field count is
/// hyper's default, left unset: setting it makes hyper fill its header arrays for every
/// request (`tests/limits.rs` pins the figure).
fn bounded_builder() -> http1::Builder {
    let mut builder = http1::Builder::new();
    builder.max_header_size(super::config::MAX_HEADER_BYTES);
    builder
}

/// HTTP/2 with prior knowledge (h2c), as gRPC and `curl --http2-prior-knowledge` speak it.
/// Its keep-alive pings are off: an idle connection ends by the same sweep as HTTP/1.1's.
fn h2_builder(max_concurrent_streams: u32) -> http2::Builder<TokioExecutor> {
    let mut builder = http2::Builder::new(TokioExecutor::new());
    builder
        .timer(TokioTimer::new())
        .max_concurrent_streams(max_concurrent_streams)
        .max_header_list_size(super::config::MAX_HEADER_BYTES as u32);
    builder
}

/// The builders a connection is served with, by the protocol its first bytes name.
struct Builders {
    h1: Arc<http1::Builder>,
    h2: Arc<http2::Builder<TokioExecutor>>,
}

/// What a client speaking HTTP/2 with prior knowledge sends first (RFC 9113 §3.4).
const H2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Whether the connection opens with the HTTP/2 preface, read without consuming it: one
/// `peek` per connection, never per request. `false` as soon as a byte differs, so an
/// HTTP/1.1 request is never held back for more bytes.
async fn opens_with_h2_preface(stream: &TcpStream) -> bool {
    let mut seen = [0_u8; 24];
    loop {
        match stream.peek(&mut seen).await {
            Ok(0) | Err(_) => return false,
            Ok(n) if seen[..n] != H2_PREFACE[..n] => return false,
            Ok(24) => return true,
            // A preface split across segments: peek again once more has come.
            Ok(_) => tokio::time::sleep(Duration::from_millis(1)).await,
        }
    }
}

/// Errors that concern one half-open connection, not the listener.
fn is_per_connection(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

/// A connection's place in the budget; leaves it when dropped, which must be after its
/// descriptors are closed.
struct Connection {
    id: u64,
    open: Arc<Open>,
    budget: Arc<Budget>,
    /// Served over budget: only requests whose path passes this.
    only: Option<fn(&str) -> bool>,
    body_timeout: Duration,
    peer: Option<Peer>,
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.budget.leave(self.id);
    }
}

/// Marks a connection busy while a request is handled.
struct Busy(Arc<Open>);

impl Busy {
    fn new(open: &Arc<Open>) -> Busy {
        open.busy.fetch_add(1, Ordering::Relaxed);
        Busy(Arc::clone(open))
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0
            .last_active
            .store(Open::now(self.0.epoch), Ordering::Relaxed);
        self.0.busy.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What a handler answers to have its stream refused: the response is never sent.
#[derive(Debug, Clone, Copy)]
struct RefuseMarker;

/// An answer that makes the accept loop refuse the request's stream: on HTTP/2 an
/// `RST_STREAM` with `REFUSED_STREAM` (RFC 9113 §8.7: the server did not process it, the
/// client may retry it even when it is not idempotent); on HTTP/1.1, where nothing says
/// so, the connection is closed without an answer.
pub(crate) fn refuse_stream() -> Response {
    let mut response = Response::default();
    response.extensions_mut().insert(RefuseMarker);
    response
}

/// Whether `response` is [`refuse_stream`]'s.
pub(crate) fn refuses(response: &Response) -> bool {
    response.extensions().get::<RefuseMarker>().is_some()
}

/// The service error hyper turns into `RST_STREAM` `REFUSED_STREAM`: it resets a stream
/// whose service failed with the reason of an `h2::Error` found in the error's sources.
#[derive(Debug)]
struct RefusedStream(h2::Error);

impl fmt::Display for RefusedStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a `refuse` fault refused the stream")
    }
}

impl StdError for RefusedStream {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        Some(&self.0)
    }
}

/// Serves one connection until it ends, is killed, or shutdown is over. `shutdown` is
/// this connection's child of [`Stop::shutdown`]: waiting on the server's own token
/// would take a lock every connection shares each time one wakes.
async fn serve_connection(
    stream: TcpStream,
    shutdown: CancellationToken,
    service: impl Serve,
    builder: Builders,
    connection: Connection,
) {
    serve_until_closed(stream, shutdown, service, builder, &connection).await;
    // Only now are the stream and its control handle closed, every request's future
    // (which may hold the handle) dropped with hyper's connection: the budget counts
    // the connection's descriptors until here.
    drop(connection);
}

async fn serve_until_closed(
    stream: TcpStream,
    shutdown: CancellationToken,
    service: impl Serve,
    builders: Builders,
    connection: &Connection,
) {
    let _ = stream.set_nodelay(true);
    let kill = connection.open.kill.clone();
    let drain = shutdown.child_token();
    let Ok((stream, control)) = socket::split_control(stream, kill.clone(), drain.clone()).await
    else {
        // Could not duplicate the descriptor (out of descriptors): drop the connection.
        return;
    };
    let (open, only, body_timeout, peer) = (
        Arc::clone(&connection.open),
        connection.only,
        connection.body_timeout,
        connection.peer,
    );
    let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
        let busy = Busy::new(&open);
        let refused = only.is_some_and(|serve| !serve(request.uri().path()));
        let mut request = request.map(|body| DeadlineBody::new(body, body_timeout));
        if let Some(peer) = peer {
            request.extensions_mut().insert(peer);
        }
        let response = socket::scope(control.clone(), || service.serve(request));
        async move {
            let _busy = busy;
            if refused {
                return Ok::<_, RefusedStream>(
                    (
                        axum::http::StatusCode::SERVICE_UNAVAILABLE,
                        [(axum::http::header::CONNECTION, "close")],
                        "the server is at its connection limit: every connection is busy\n",
                    )
                        .into_response(),
                );
            }
            let response = response.await;
            if refuses(&response) {
                return Err(RefusedStream(h2::Reason::REFUSED_STREAM.into()));
            }
            Ok(response)
        }
    });
    let h2 = tokio::select! {
        biased;
        () = kill.cancelled() => return,
        h2 = opens_with_h2_preface(&stream) => h2,
    };
    // A kill (a `reset` or `close` fault, the budget) ends the whole connection: on
    // HTTP/2, every stream in flight on it fails at once.
    if h2 {
        let served = builders.h2.serve_connection(TokioIo::new(stream), service);
        tokio::pin!(served);
        tokio::select! {
            biased;
            () = kill.cancelled() => return,
            _ = served.as_mut() => return,
            () = drain.cancelled() => served.as_mut().graceful_shutdown(),
        }
        tokio::select! {
            biased;
            () = kill.cancelled() => {}
            _ = served.as_mut() => {}
        }
        return;
    }
    let served = builders.h1.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(served);
    tokio::select! {
        biased;
        () = kill.cancelled() => return,
        _ = served.as_mut() => return,
        () = drain.cancelled() => served.as_mut().graceful_shutdown(),
    }
    tokio::select! {
        biased;
        () = kill.cancelled() => {}
        _ = served.as_mut() => {}
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error;
    use std::future;
    use std::net::SocketAddr;

    use axum::routing::get;
    use tokio::task::JoinHandle;

    use super::*;
    use crate::server::socket::current_connection;

    /// A router that knows nothing of faults: a greeting, and two routes that kill their
    /// own connection through the control handle the accept loop provides.
    fn trivial_router() -> Router {
        Router::new()
            .route("/", get(|| async { "hello" }))
            .route(
                "/reset",
                get(|| async {
                    current_connection()
                        .expect("requests through the accept loop have a connection")
                        .reset();
                    future::pending::<&'static str>().await
                }),
            )
            .route(
                "/close",
                get(|| async {
                    current_connection()
                        .expect("requests through the accept loop have a connection")
                        .close();
                    future::pending::<&'static str>().await
                }),
            )
    }

    async fn serve(router: Router) -> (SocketAddr, Stop, TaskTracker, JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binds port 0");
        let addr = listener.local_addr().expect("a bound address");
        let stop = Stop::default();
        let tracker = TaskTracker::new();
        let accept = tokio::spawn(accept_loop(
            vec![listener],
            router,
            stop.clone(),
            tracker.clone(),
            Limits::default(),
        ));
        (addr, stop, tracker, accept)
    }

    fn client() -> reqwest::Client {
        reqwest::Client::builder()
            .retry(reqwest::retry::never())
            .pool_max_idle_per_host(0)
            .no_proxy()
            .timeout(Duration::from_secs(30))
            .build()
            .expect("client builds")
    }

    /// The error of a request that gets no response.
    async fn no_response(url: &str) -> reqwest::Error {
        client()
            .get(url)
            .send()
            .await
            .expect_err("a killed connection is not a response")
    }

    /// True when some error in the chain satisfies `test`.
    fn chain_has(
        error: &(dyn Error + 'static),
        test: impl Fn(&(dyn Error + 'static)) -> bool,
    ) -> bool {
        let mut current = Some(error);
        while let Some(e) = current {
            if test(e) {
                return true;
            }
            current = e.source();
        }
        false
    }

    #[test]
    fn outside_the_accept_loop_there_is_no_connection() {
        assert!(current_connection().is_none());
    }

    #[tokio::test]
    async fn the_accept_loop_serves_a_router_and_kills_connections_on_demand() {
        let (addr, stop, tracker, accept) = serve(trivial_router()).await;
        let url = |path: &str| format!("http://{addr}{path}");

        let hello = client().get(url("/")).send().await.expect("a response");
        assert_eq!(hello.status().as_u16(), 200);
        assert_eq!(hello.text().await.expect("a body"), "hello");

        let reset = no_response(&url("/reset")).await;
        assert!(
            chain_has(&reset, |e| e
                .downcast_ref::<io::Error>()
                .is_some_and(|io| io.kind() == io::ErrorKind::ConnectionReset)),
            "expected a connection reset: {reset:?}"
        );

        let closed = no_response(&url("/close")).await;
        assert!(
            chain_has(&closed, |e| e
                .downcast_ref::<hyper::Error>()
                .is_some_and(hyper::Error::is_incomplete_message)),
            "expected an empty reply: {closed:?}"
        );

        // The connections killed above are gone, and the loop still serves.
        let again = client().get(url("/")).send().await.expect("a response");
        assert_eq!(again.status().as_u16(), 200);

        stop.shutdown.cancel();
        accept.await.expect("the accept loop ends on shutdown");
        tracker.close();
        tracker.wait().await;
        assert!(
            client().get(url("/")).send().await.is_err(),
            "nothing accepts after shutdown"
        );
    }

    fn open_at(epoch: Instant) -> Arc<Open> {
        Arc::new(Open {
            busy: AtomicUsize::new(0),
            last_active: AtomicU64::new(Open::now(epoch)),
            epoch,
            kill: CancellationToken::new(),
        })
    }

    /// A connection that last finished a request `at` nanoseconds into the budget.
    fn open_since(budget: &Budget, at: u64) -> Arc<Open> {
        let open = open_at(budget.epoch);
        open.last_active.store(at, Ordering::Relaxed);
        open
    }

    #[test]
    fn the_budget_never_gives_more_than_max_plus_over_connections_descriptors() {
        let budget = Budget::new(2, 1);
        let held = |budget: &Budget| budget.lock().held();
        let (a, b, c) = (
            open_since(&budget, 1),
            open_since(&budget, 2),
            open_since(&budget, 3),
        );
        assert_eq!(budget.admit(0, &a), Admission::Within);
        assert_eq!(budget.admit(1, &b), Admission::Within);
        assert_eq!(
            budget.admit(2, &c),
            Admission::Within,
            "a, the idlest, makes room"
        );
        assert!(a.kill.is_cancelled() && !b.kill.is_cancelled());
        assert_eq!(
            held(&budget),
            3,
            "a holds its descriptors until its task ends"
        );

        let d = open_since(&budget, 4);
        assert_eq!(budget.admit(3, &d), Admission::Wait);
        assert!(
            !b.kill.is_cancelled(),
            "a is closing already: room is coming"
        );
        budget.leave(0);
        assert_eq!(budget.admit(3, &d), Admission::Within, "b makes room");
        assert!(b.kill.is_cancelled());
        budget.leave(1);

        let (_c_busy, _d_busy) = (Busy::new(&c), Busy::new(&d));
        let e = open_since(&budget, 5);
        assert_eq!(
            budget.admit(4, &e),
            Admission::Over,
            "every connection is busy"
        );
        assert_eq!(held(&budget), 3);
        let f = open_since(&budget, 6);
        assert_eq!(budget.admit(5, &f), Admission::Wait);
        assert!(
            e.kill.is_cancelled(),
            "e, over budget and still waiting for its request, makes room"
        );
        budget.leave(4);
        assert_eq!(budget.admit(5, &f), Admission::Over);

        let _f_busy = Busy::new(&f);
        let g = open_since(&budget, 7);
        assert_eq!(budget.admit(6, &g), Admission::Wait);
        assert_eq!(
            held(&budget),
            3,
            "nothing to close: every connection is busy"
        );
        assert!(![&c, &d, &f].iter().any(|o| o.kill.is_cancelled()));
        budget.leave(5);
        assert_eq!(budget.admit(6, &g), Admission::Over, "f's request is over");
    }

    #[tokio::test(start_paused = true)]
    async fn the_sweep_closes_only_connections_waiting_for_headers_past_the_timeout() {
        let budget = Budget::new(10, 0);
        let (idle, busy) = (open_at(budget.epoch), open_at(budget.epoch));
        budget.admit(0, &idle);
        budget.admit(1, &busy);
        let _serving = Busy::new(&busy);
        tokio::time::advance(Duration::from_secs(20)).await;
        // Answered a request at 20 s: its wait for the next one starts there.
        let answered = open_at(budget.epoch);
        drop(Busy::new(&answered));
        budget.admit(2, &answered);

        tokio::time::advance(Duration::from_secs(9)).await;
        assert_eq!(
            budget.close_stalled(Duration::from_secs(30)),
            0,
            "29 s: none yet"
        );
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(budget.close_stalled(Duration::from_secs(30)), 1);
        assert!(idle.kill.is_cancelled(), "no request for 30 s: closed");
        assert!(
            !busy.kill.is_cancelled(),
            "a request in progress is not a stall"
        );
        assert!(
            !answered.kill.is_cancelled(),
            "10 s since its last response"
        );
        assert_eq!(budget.lock().within.len(), 2);

        tokio::time::advance(Duration::from_secs(20)).await;
        assert_eq!(budget.close_stalled(Duration::from_secs(30)), 1);
        assert!(answered.kill.is_cancelled());
        assert!(
            !busy.kill.is_cancelled(),
            "busy for 50 s and still not a stall"
        );
    }

    /// True once the server has ended the connection (end of stream or reset), false
    /// while it is open with nothing to read.
    fn ended(stream: &TcpStream) -> bool {
        let mut byte = [0u8; 1];
        match stream.try_read(&mut byte) {
            Ok(0) => true,
            Ok(_) => panic!("the server sent something unasked"),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => false,
            Err(_) => true,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn connections_without_a_request_for_the_header_timeout_are_closed_others_stay() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};

        let (addr, stop, _tracker, accept) = serve(trivial_router()).await;
        let idle = TcpStream::connect(addr).await.expect("connects");
        let mut slow = TcpStream::connect(addr).await.expect("connects");
        // Headers begun and never finished: the slowloris.
        slow.write_all(b"GET / HTTP/1.1\r\nhost: t\r\n")
            .await
            .expect("writes");
        let mut steady = TcpStream::connect(addr).await.expect("connects");
        let ask = async |steady: &mut TcpStream| {
            steady
                .write_all(b"GET / HTTP/1.1\r\nhost: t\r\n\r\n")
                .await
                .expect("writes");
            let mut answer = Vec::new();
            let mut chunk = [0u8; 512];
            while !answer.ends_with(b"hello") {
                let n = steady.read(&mut chunk).await.expect("an answer");
                assert!(n > 0, "the steady connection was closed");
                answer.extend_from_slice(&chunk[..n]);
            }
        };
        // A request every 10 s keeps a connection open however long it lives.
        for _ in 0..2 {
            ask(&mut steady).await;
            tokio::time::sleep(Duration::from_secs(10)).await;
        }
        ask(&mut steady).await;
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(!ended(&idle) && !ended(&slow), "25 s: both still open");
        ask(&mut steady).await;
        tokio::time::sleep(HEADER_READ_TIMEOUT - Duration::from_secs(25) + 2 * HEADER_SWEEP).await;
        assert!(ended(&idle), "no request within the timeout: closed");
        assert!(
            ended(&slow),
            "headers unfinished within the timeout: closed"
        );
        ask(&mut steady).await;

        stop.shutdown.cancel();
        accept.await.expect("the accept loop ends on shutdown");
    }
}
