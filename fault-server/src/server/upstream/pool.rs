//! The connections to the upstream: a pool of keep-alive HTTP/1.1 connections (hyper's
//! `client::conn::http1`), each driven by the request using it, on that request's task.
//!
//! Why not hyper-util's pooled client: it runs each connection on a task of its own, so a
//! request crosses tasks four times (sent to the connection's task, written, its answer
//! read there and sent back, its body fed through a channel), and its pool is a map
//! keyed by host behind a lock that every request takes twice. Measured against nginx's
//! `proxy_pass` on the bench machine (docs/benchmarks.md), that cost the proxy about a
//! fifth of nginx's throughput. Here a request takes a connection from a stack (LIFO:
//! the one used last is the warmest), polls it together with its own response, and the
//! response body polls it on: the connection goes back on the stack when the body has
//! been read to its end, and is closed if the body is dropped before.
//!
//! The timeout (the start of the answer within [`Upstream::timeout`]) is not a timer per
//! request (a timer made, armed and dropped for each request costs the server 5-12% of
//! its throughput, as the header timer did in `conn.rs`): each connection has a deadline
//! that a request arms and the answer disarms, and one sweep over the connections,
//! eight times a timeout (at most every quarter second), ends those past theirs. The
//! sweep keeps the pool's clock too, so a request reads no clock: an answer times out
//! between the timeout and the timeout plus two sweeps.

use std::collections::VecDeque;
use std::future::{Future, poll_fn};
use std::net::{IpAddr, SocketAddr};
use std::pin::{Pin, pin};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::response::Response;
use hyper::body::{Body as _, Frame, Incoming, SizeHint};
use hyper::client::conn::TrySendError;
use hyper::client::conn::http1::{self, Connection, SendRequest};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::url::Upstream;

/// How long a connection may sit idle in the pool before it is closed: below the
/// keep-alive timeouts of the servers a service runs on (Node.js closes an idle
/// connection after 5 s, nginx after 75 s), so the pool does not hand out a connection
/// the upstream is closing at that moment.
const IDLE: Duration = Duration::from_secs(4);

/// The most idle connections kept: a burst's connections beyond this are closed when
/// their request ends. As many as the harness's own pool keeps to one host.
const MAX_IDLE: usize = 1024;

/// The pool of one upstream. Cheap to share: every response body holds it, to give its
/// connection back.
#[derive(Clone)]
pub(super) struct Pool {
    inner: Arc<Inner>,
}

struct Inner {
    upstream: Upstream,
    /// The upstream's address, when its host is one (no resolver on the way).
    addr: Option<SocketAddr>,
    builder: http1::Builder,
    /// Idle connections and when each went idle, the latest at the back. Boxed, as
    /// everywhere: a connection is moved at every step of a request (taken, lent to the
    /// response body, given back), and hyper's state for one is several hundred bytes.
    idle: Mutex<VecDeque<(Box<Conn>, u64)>>,
    /// Every open connection's deadline, for the sweep.
    live: Mutex<Vec<Weak<Watch>>>,
    /// The pool's times are nanoseconds since this instant.
    epoch: Instant,
    /// The pool's clock: the time of the last sweep (or new connection).
    now: AtomicU64,
    /// How often the sweep runs.
    every: Duration,
    /// Whether the sweep runs (it starts with the first connection, on the runtime).
    sweeping: AtomicBool,
}

/// One connection: the handle to send on, the connection itself (polled by whoever uses
/// it; `None` once it has ended), and its deadline.
struct Conn {
    send: SendRequest<Body>,
    io: Option<Connection<TokioIo<TcpStream>, Body>>,
    watch: Arc<Watch>,
}

impl Conn {
    /// Polls the connection: reads and writes what it can. False once it has ended.
    fn drive(&mut self, cx: &mut Context<'_>) -> bool {
        if let Some(io) = &mut self.io
            && Pin::new(io).poll(cx).is_ready()
        {
            self.io = None;
        }
        self.io.is_some()
    }

    /// Whether the connection can take a request now: driven (it may have closed, or still
    /// be finishing the last exchange) and asked.
    fn ready(&mut self, cx: &mut Context<'_>) -> bool {
        for _ in 0..2 {
            if !self.drive(cx) {
                return false;
            }
            match self.send.poll_ready(cx) {
                Poll::Ready(Ok(())) => return true,
                Poll::Ready(Err(_)) => return false,
                Poll::Pending => {}
            }
        }
        false
    }
}

/// A connection's deadline, shared with the sweep.
#[derive(Default)]
struct Watch {
    /// Nanoseconds since [`Inner::epoch`]; 0: no request waiting for an answer.
    deadline: AtomicU64,
    expired: AtomicBool,
    /// The task waiting for the answer, woken when the deadline passes.
    waker: Mutex<Option<Waker>>,
}

impl Watch {
    fn arm(&self, deadline: u64) {
        self.expired.store(false, Ordering::Relaxed);
        self.deadline.store(deadline.max(1), Ordering::Release);
    }

    fn disarm(&self) {
        self.deadline.store(0, Ordering::Release);
    }

    fn expired(&self) -> bool {
        self.expired.load(Ordering::Acquire)
    }

    fn register(&self, waker: &Waker) {
        let mut slot = self.waker.lock().unwrap_or_else(PoisonError::into_inner);
        if !slot.as_ref().is_some_and(|w| w.will_wake(waker)) {
            *slot = Some(waker.clone());
        }
    }

    /// Ends the wait if the deadline armed is `now` or earlier.
    fn expire_by(&self, now: u64) {
        let deadline = self.deadline.load(Ordering::Acquire);
        if deadline == 0 || deadline > now {
            return;
        }
        // Only that deadline's request: one armed meanwhile has a later one.
        if self
            .deadline
            .compare_exchange(deadline, 0, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            self.expired.store(true, Ordering::Release);
            let waker = self
                .waker
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take();
            if let Some(waker) = waker {
                waker.wake();
            }
        }
    }
}

/// Why no answer came back.
#[derive(Debug)]
pub(super) enum Lost {
    /// No connection could be made.
    Connect,
    /// No answer began within the timeout (connecting included).
    Timeout,
    /// The exchange failed: hyper's error says how.
    Exchange(hyper::Error),
}

impl Pool {
    pub(super) fn new(upstream: Upstream) -> Pool {
        let addr = upstream
            .host()
            .parse::<IpAddr>()
            .ok()
            .map(|ip| SocketAddr::new(ip, upstream.port()));
        Pool {
            inner: Arc::new(Inner {
                every: (upstream.timeout() / 8).clamp(Duration::from_millis(10), IDLE / 16),
                upstream,
                addr,
                builder: http1::Builder::new(),
                idle: Mutex::new(VecDeque::new()),
                live: Mutex::new(Vec::new()),
                epoch: Instant::now(),
                now: AtomicU64::new(0),
                sweeping: AtomicBool::new(false),
            }),
        }
    }

    pub(super) fn upstream(&self) -> &Upstream {
        &self.inner.upstream
    }

    /// Sends `request`; the future waits for the start of the answer, whose body then
    /// streams from the connection as the client reads it. One retry, on a new
    /// connection, for a request a pooled connection closed under before taking it.
    ///
    /// The usual case (an idle connection takes the request) is a small future that
    /// polls that connection and the answer, made here; what is rare (a new connection,
    /// the retry) is boxed. A future of nested `async fn`s several KiB large was copied
    /// into place at each level, for every request: 0.6 us of memory copies a request.
    pub(super) fn send(
        &self,
        request: Request,
    ) -> Sending<impl Future<Output = HyperAnswer> + Send + use<>> {
        let (conn, answer, slow) = match self.idle() {
            Some(mut conn) => {
                conn.watch.arm(self.inner.deadline());
                let answer = conn.send.try_send_request(request);
                (Some(conn), Some(answer), None)
            }
            None => {
                let pool = self.clone();
                let slow: Slow = Box::pin(async move { pool.afresh(request).await });
                (None, None, Some(slow))
            }
        };
        Sending {
            pool: Arc::clone(&self.inner),
            conn,
            answer,
            slow,
        }
    }

    /// A request on a new connection, to the start of its answer.
    async fn afresh(self, request: Request) -> Result<Response, Lost> {
        let mut conn = self.inner.connect().await?;
        match self.exchange(&mut conn, request).await {
            Ok(response) => {
                conn.watch.disarm();
                Ok(lend(response, conn, &self.inner))
            }
            Err(Exchange::TimedOut) => Err(Lost::Timeout),
            Err(Exchange::Failed(error)) => Err(Lost::Exchange(error)),
            Err(Exchange::Unsent) => Err(Lost::Connect),
        }
    }

    /// One request on one connection, to the start of its answer or its deadline.
    async fn exchange(
        &self,
        conn: &mut Conn,
        request: Request,
    ) -> Result<hyper::Response<Incoming>, Exchange> {
        let Conn { send, io, watch } = conn;
        watch.arm(self.inner.deadline());
        let mut answer = pin!(send.try_send_request(request));
        let answer = poll_fn(|cx| {
            if watch.expired() {
                return Poll::Ready(Err(Exchange::TimedOut));
            }
            if let Some(connection) = io
                && Pin::new(connection).poll(cx).is_ready()
            {
                *io = None;
            }
            match answer.as_mut().poll(cx) {
                Poll::Ready(Ok(response)) => Poll::Ready(Ok(response)),
                Poll::Ready(Err(mut error)) => Poll::Ready(Err(match error.take_message() {
                    Some(_) => Exchange::Unsent,
                    None => Exchange::Failed(error.into_error()),
                })),
                Poll::Pending => {
                    watch.register(cx.waker());
                    Poll::Pending
                }
            }
        })
        .await;
        match answer {
            Err(Exchange::Failed(_)) if watch.expired() => Err(Exchange::TimedOut),
            other => other,
        }
    }

    /// An idle connection ready for a request, if there is one. Whether it is ready is
    /// asked without a task to wake (it can take the request now, or it is closed):
    /// the request's future polls it again with its own.
    fn idle(&self) -> Option<Box<Conn>> {
        let mut cx = Context::from_waker(Waker::noop());
        loop {
            let idle = {
                let now = self.inner.now();
                let mut idle = self.inner.idle();
                match idle.pop_back() {
                    // The latest went idle too long ago, and so did all the others.
                    Some((_, since)) if now.saturating_sub(since) > nanos(IDLE) => {
                        idle.clear();
                        None
                    }
                    other => other.map(|(conn, _)| conn),
                }
            };
            let mut conn = idle?;
            // Usually the connection said it wants another request as it finished the
            // last one; else it is driven first (it may be finishing, or closed).
            let ready = match conn.send.poll_ready(&mut cx) {
                Poll::Ready(Ok(())) => true,
                Poll::Ready(Err(_)) => false,
                Poll::Pending => conn.ready(&mut cx),
            };
            if ready {
                return Some(conn);
            }
        }
    }
}

/// What a request to the upstream comes to: the start of the answer, or why none came.
pub(super) type Answer = Result<Response, Lost>;

/// hyper's answer on a connection, or its error with the request if it was not sent.
type HyperAnswer = Result<hyper::Response<Incoming>, TrySendError<Request>>;

/// The slow way of a request: a new connection, or the retry on one.
type Slow = Pin<Box<dyn Future<Output = Answer> + Send>>;

/// The response, its body lending the connection until it is read.
fn lend(response: hyper::Response<Incoming>, conn: Box<Conn>, pool: &Arc<Inner>) -> Response {
    response.map(|body| {
        Body::new(PooledBody {
            body,
            conn: Some(conn),
            pool: Arc::clone(pool),
            ended: false,
        })
    })
}

pin_project_lite::pin_project! {
    /// A request on its way ([`Pool::send`]): on a pooled connection, the connection and
    /// the answer awaited on it (`A`, hyper's future for it); or the slow way, boxed.
    pub(super) struct Sending<A> {
        pool: Arc<Inner>,
        conn: Option<Box<Conn>>,
        #[pin]
        answer: Option<A>,
        slow: Option<Slow>,
    }
}

impl<A: Future<Output = HyperAnswer>> Future for Sending<A> {
    type Output = Answer;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Answer> {
        let mut this = self.project();
        loop {
            if let Some(slow) = this.slow.as_mut() {
                return slow.as_mut().poll(cx);
            }
            let (Some(conn), Some(answer)) =
                (this.conn.as_mut(), this.answer.as_mut().as_pin_mut())
            else {
                // Polled again after it ended.
                return Poll::Ready(Err(Lost::Connect));
            };
            if conn.watch.expired() {
                this.answer.set(None);
                *this.conn = None;
                return Poll::Ready(Err(Lost::Timeout));
            }
            conn.drive(cx);
            let error = match answer.poll(cx) {
                Poll::Pending => {
                    conn.watch.register(cx.waker());
                    return Poll::Pending;
                }
                Poll::Ready(Ok(response)) => {
                    this.answer.set(None);
                    let Some(conn) = this.conn.take() else {
                        return Poll::Ready(Err(Lost::Connect));
                    };
                    conn.watch.disarm();
                    return Poll::Ready(Ok(lend(response, conn, this.pool)));
                }
                Poll::Ready(Err(error)) => error,
            };
            this.answer.set(None);
            let expired = this.conn.take().is_some_and(|conn| conn.watch.expired());
            let mut error = error;
            match error.take_message() {
                // The connection closed before it took the request: the slow way, once.
                Some(request) if !expired => {
                    let pool = Pool {
                        inner: Arc::clone(this.pool),
                    };
                    *this.slow = Some(Box::pin(async move { pool.afresh(request).await }));
                }
                _ if expired => return Poll::Ready(Err(Lost::Timeout)),
                _ => return Poll::Ready(Err(Lost::Exchange(error.into_error()))),
            }
        }
    }
}

/// How one exchange ended without an answer.
enum Exchange {
    /// The connection closed before it took the request.
    Unsent,
    TimedOut,
    Failed(hyper::Error),
}

impl Inner {
    fn idle(&self) -> MutexGuard<'_, VecDeque<(Box<Conn>, u64)>> {
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The pool's clock, at most a sweep behind.
    fn now(&self) -> u64 {
        self.now.load(Ordering::Relaxed)
    }

    /// Reads the clock into the pool's.
    fn tick(&self) -> u64 {
        let now = nanos(self.epoch.elapsed());
        self.now.fetch_max(now, Ordering::Relaxed);
        now
    }

    /// The deadline of an answer asked for now: the pool's clock may be a sweep behind,
    /// and the sweep that ends it up to one after it.
    fn deadline(&self) -> u64 {
        self.now() + nanos(self.upstream.timeout() + self.every)
    }

    async fn connect(self: &Arc<Self>) -> Result<Box<Conn>, Lost> {
        let timeout = self.upstream.timeout();
        let stream = match self.addr {
            Some(addr) => tokio::time::timeout(timeout, TcpStream::connect(addr)).await,
            None => {
                let (host, port) = (self.upstream.host(), self.upstream.port());
                tokio::time::timeout(timeout, TcpStream::connect((host, port))).await
            }
        };
        let stream = stream
            .map_err(|_| Lost::Timeout)?
            .map_err(|_| Lost::Connect)?;
        self.tick();
        let _ = stream.set_nodelay(true);
        let (send, io) = self
            .builder
            .handshake(TokioIo::new(stream))
            .await
            .map_err(Lost::Exchange)?;
        let watch = Arc::new(Watch::default());
        self.live
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Arc::downgrade(&watch));
        if !self.sweeping.swap(true, Ordering::Relaxed) {
            tokio::spawn(sweep(Arc::downgrade(self)));
        }
        Ok(Box::new(Conn {
            send,
            io: Some(io),
            watch,
        }))
    }

    /// Takes a connection back whose answer was read to its end, if it can serve again.
    fn checkin(&self, conn: Box<Conn>) {
        if conn.io.is_none() || conn.send.is_closed() {
            return;
        }
        let now = self.now();
        let mut idle = self.idle();
        if idle.len() < MAX_IDLE {
            idle.push_back((conn, now));
        }
    }

    /// Ends the waits past their deadline, and closes the connections idle too long.
    fn sweep(&self) {
        let now = self.tick();
        self.live
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|watch| match watch.upgrade() {
                Some(watch) => {
                    watch.expire_by(now);
                    true
                }
                None => false,
            });
        let mut idle = self.idle();
        while idle
            .front()
            .is_some_and(|(_, since)| now.saturating_sub(*since) > nanos(IDLE))
        {
            idle.pop_front();
        }
    }
}

fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

/// Sweeps the pool every [`Inner::every`], while it exists.
async fn sweep(pool: Weak<Inner>) {
    let every = match pool.upgrade() {
        Some(pool) => pool.every,
        None => return,
    };
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        match pool.upgrade() {
            Some(pool) => pool.sweep(),
            None => return,
        }
    }
}

/// The upstream's response body, driving its connection as it is read, and giving the
/// connection back to the pool at its end.
struct PooledBody {
    body: Incoming,
    conn: Option<Box<Conn>>,
    pool: Arc<Inner>,
    ended: bool,
}

impl hyper::body::Body for PooledBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = &mut *self;
        // The body first: hyper reads a body with its head when it can, and a small one is
        // there already. Then the connection, to read more, and the body again, without a
        // wake-up of the task in between.
        for round in 0..2 {
            if round > 0
                && let Some(conn) = &mut this.conn
                && !conn.drive(cx)
            {
                this.conn = None;
            }
            match Pin::new(&mut this.body).poll_frame(cx) {
                Poll::Ready(None) => {
                    this.ended = true;
                    this.release();
                    return Poll::Ready(None);
                }
                Poll::Ready(frame) => return Poll::Ready(frame),
                Poll::Pending => {}
            }
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

impl PooledBody {
    fn release(&mut self) {
        if let Some(conn) = self.conn.take() {
            self.pool.checkin(conn);
        }
    }
}

impl Drop for PooledBody {
    /// A body read to its end (or empty, never read: a 204's, a HEAD's) gives its
    /// connection back; one dropped halfway closes it, its answer unread.
    fn drop(&mut self) {
        if self.ended || self.body.is_end_stream() {
            self.release();
        }
    }
}
