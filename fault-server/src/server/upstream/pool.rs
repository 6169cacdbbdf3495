//! The connections to the upstream: a pool of keep-alive HTTP/1.1 connections, each used
//! by one request at a time, on that request's task.
//!
//! Why its own: hyper-util's pooled client runs each connection on a task of its own, so
//! a request crosses tasks four times (sent to the connection's task, written, its answer
//! read there and sent back, its body fed through a channel), and its pool is a map keyed
//! by host behind a lock every request takes twice: against nginx's `proxy_pass` on the
//! bench machine (docs/benchmarks.md) that cost the proxy about a fifth of nginx's
//! throughput. Here a request takes a connection from a stack (LIFO: the one used last is
//! the warmest), writes its head and body and reads the answer's head itself
//! (`exchange.rs`, with the codec of `h1.rs`), and the response body reads on: the
//! connection goes back on the stack when the body has been read to its end, and is
//! closed if the body is dropped before.
//!
//! The timeout (the start of the answer within [`Upstream::timeout`]) is not a timer per
//! request (a timer made, armed and dropped for each request costs the server 5-12% of
//! its throughput, as the header timer did in `conn.rs`): each connection has a deadline
//! that a request arms and the answer disarms, and one sweep over the connections,
//! eight times a timeout (at most every quarter second), ends those past theirs. The
//! sweep keeps the pool's clock too, so a request reads no clock: an answer times out
//! between the timeout and the timeout plus two sweeps.

use std::collections::VecDeque;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use axum::extract::Request;
use bytes::BytesMut;
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::exchange::Sending;
use crate::upstream_url::Upstream;

/// How long a connection may sit idle in the pool before it is closed: below the
/// keep-alive timeouts of the servers a service runs on (Node.js closes an idle
/// connection after 5 s, nginx after 75 s), so the pool does not hand out a connection
/// the upstream is closing at that moment.
const IDLE: Duration = Duration::from_secs(4);

/// The most idle connections kept: a burst's connections beyond this are closed when
/// their request ends. As many as the harness's own pool keeps to one host.
const MAX_IDLE: usize = 1024;

/// What a connection reads into at first: a response head and a small body.
const READ_BUFFER: usize = 8 * 1024;

/// The pool of one upstream. Cheap to share: every response body holds it, to give its
/// connection back.
#[derive(Clone)]
pub(super) struct Pool {
    pub(super) inner: Arc<Inner>,
}

pub(super) struct Inner {
    upstream: Upstream,
    /// The upstream's address, when its host is one (no resolver on the way).
    addr: Option<SocketAddr>,
    /// Idle connections and when each went idle, the latest at the back. Boxed, as
    /// everywhere: a connection is moved at every step of a request (taken, lent to the
    /// response body, given back).
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

/// One connection: the socket, what was read from it and not yet taken, its deadline.
pub(super) struct Conn {
    pub(super) io: TcpStream,
    pub(super) read: BytesMut,
    pub(super) watch: Arc<Watch>,
}

impl Conn {
    /// Whether an idle connection is still open and quiet: no readiness since its last
    /// read (no system call), or a read that would block. Closed (a read of nothing), or
    /// with bytes nobody asked for, it is not.
    fn alive(&mut self) -> bool {
        let mut cx = Context::from_waker(Waker::noop());
        match self.io.poll_read_ready(&mut cx) {
            Poll::Pending => true,
            Poll::Ready(Err(_)) => false,
            Poll::Ready(Ok(())) => matches!(
                self.io.try_read_buf(&mut self.read),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock
            ),
        }
    }

    /// Reads what the socket has into the buffer: `Ok(0)` at its end.
    pub(super) fn poll_read(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        if self.read.capacity() - self.read.len() < 1024 {
            self.read.reserve(READ_BUFFER.max(self.read.len()));
        }
        loop {
            match self.io.poll_read_ready(cx) {
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
            match self.io.try_read_buf(&mut self.read) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                done => return Poll::Ready(done),
            }
        }
    }
}

/// A connection's deadline, shared with the sweep.
#[derive(Default)]
pub(super) struct Watch {
    /// Nanoseconds since [`Inner::epoch`]; 0: no request waiting for an answer.
    deadline: AtomicU64,
    expired: AtomicBool,
    /// The task waiting for the answer, woken when the deadline passes.
    waker: Mutex<Option<Waker>>,
}

impl Watch {
    pub(super) fn arm(&self, deadline: u64) {
        self.expired.store(false, Ordering::Relaxed);
        self.deadline.store(deadline.max(1), Ordering::Release);
    }

    pub(super) fn disarm(&self) {
        self.deadline.store(0, Ordering::Release);
    }

    pub(super) fn expired(&self) -> bool {
        self.expired.load(Ordering::Acquire)
    }

    pub(super) fn register(&self, waker: &Waker) {
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

/// What a request to the upstream comes to: the start of the answer, or why none came.
pub(super) type Answer = Result<axum::response::Response, Lost>;

/// Why no answer came back.
#[derive(Debug)]
pub(super) enum Lost {
    /// No connection could be made.
    Connect,
    /// No answer began within the timeout (connecting included).
    Timeout,
    /// The connection broke, or what came back was not HTTP/1.1.
    Failed,
    /// The upstream answered `101 Switching Protocols` (seen by [`super::answered`]).
    Switched,
    /// The client's own body failed (cut off, malformed, or past the body deadline:
    /// `timed_out`), so the request could not be sent whole.
    ClientBody { timed_out: bool },
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

    /// Sends `request` (already in the upstream's form): the future waits for the start
    /// of the answer, whose body then streams from the connection as the client reads it.
    pub(super) fn send(&self, request: Request) -> Sending {
        Sending::new(Arc::clone(&self.inner), request)
    }
}

impl Inner {
    fn idle(&self) -> MutexGuard<'_, VecDeque<(Box<Conn>, u64)>> {
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// An idle connection that is still open, if there is one.
    pub(super) fn take_idle(&self) -> Option<Box<Conn>> {
        loop {
            let now = self.now();
            let mut conn = {
                let mut idle = self.idle();
                match idle.pop_back() {
                    // The latest went idle too long ago, and so did all the others.
                    Some((_, since)) if now.saturating_sub(since) > nanos(IDLE) => {
                        idle.clear();
                        return None;
                    }
                    other => other?.0,
                }
            };
            if conn.alive() {
                return Some(conn);
            }
        }
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
    pub(super) fn deadline(&self) -> u64 {
        self.now() + nanos(self.upstream.timeout() + self.every)
    }

    /// A new connection, within the timeout.
    pub(super) async fn connect(self: Arc<Self>) -> Result<Box<Conn>, Lost> {
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
        let watch = Arc::new(Watch::default());
        self.live
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Arc::downgrade(&watch));
        if !self.sweeping.swap(true, Ordering::Relaxed) {
            tokio::spawn(sweep(Arc::downgrade(&self)));
        }
        Ok(Box::new(Conn {
            io: stream,
            read: BytesMut::with_capacity(READ_BUFFER),
            watch,
        }))
    }

    /// Takes back a connection whose answer was read to its end and that may serve
    /// again (nothing left over in its buffer).
    pub(super) fn checkin(&self, conn: Box<Conn>) {
        if !conn.read.is_empty() {
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
