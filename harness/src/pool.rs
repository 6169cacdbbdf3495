//! The engine's own HTTP client: a pool of hyper connections to the one target a run
//! sends to; over HTTP/2, a fixed number of connections every attempt is multiplexed
//! over, as a gRPC channel keeps them.
//!
//! Why not a general client: the engine sends to one origin over plain HTTP, and what it
//! must know of every attempt is exact: was it written or not. A general pool races a new
//! connection against one of its own coming free and hands the request to whichever wins,
//! so an attempt stopped meanwhile may or may not have been written; this pool decides
//! itself (an idle connection if there is one, else a new one), so an attempt stopped
//! before it was handed to a connection surely never left, and one handed to a
//! connection that closed before writing it is handed to another. It also spares every
//! attempt what a general client pays for (its connector stack cloned, the URL parsed
//! again, a task to watch each connection come free): the harness's CPU per request is
//! what `just bench` holds against oha's.
//!
//! Over HTTP/2 (h2c, prior knowledge) there is no pool to choose from: attempts are dealt
//! round-robin over the connections, each made on first use and made again once it has
//! closed (a GOAWAY, a reset). An attempt beyond the server's
//! `SETTINGS_MAX_CONCURRENT_STREAMS` waits in hyper for a stream, on the wire already as
//! far as the pool can tell; hyper does not say what the server allows, so the pool reads
//! it from the server's first SETTINGS frame as it passes ([`Sniffed`]) and counts the
//! attempts handed to a connection with every stream it may open taken
//! ([`Pool::streams_waited`]).

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{self, SendRequest};
use hyper::client::conn::http2;
use hyper::{HeaderMap, Request, body::Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// How long a new connection may take before the attempt it is for gives up.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a connection may sit idle before it is closed rather than reused: below the
/// fault-server's 30 s idle cut-off, so an attempt is never handed to a connection the
/// server is closing (an attempt the server would never see).
const IDLE_TIMEOUT: Duration = Duration::from_secs(20);

/// A request body: the plan's, or none.
pub type Body = Full<Bytes>;

/// Connections to one target, shared by every task of a run; cloning shares them.
#[derive(Clone)]
pub struct Pool(Arc<Inner>);

struct Inner {
    /// Where to connect: an address, or a name to look up on each new connection.
    at: Address,
    /// Connections with nothing on them, the most recently used last.
    idle: Mutex<Vec<(SendRequest<Body>, Instant)>>,
    max_idle: usize,
    /// Over HTTP/2: the connections, and the one the next attempt goes on.
    h2: Option<Multiplexed>,
    /// TCP connections made, of either protocol.
    opened: AtomicU64,
}

/// HTTP/2 connections, each `None` until first used and after it closed. An async lock:
/// attempts that find a connection being made wait for it rather than make another.
struct Multiplexed {
    connections: Vec<tokio::sync::Mutex<Option<H2Connection>>>,
    next: AtomicUsize,
    /// Attempts handed to a connection whose streams were all taken.
    waited: AtomicU64,
}

/// One HTTP/2 connection and its streams.
#[derive(Clone)]
struct H2Connection {
    send: http2::SendRequest<Body>,
    streams: Arc<Streams>,
}

/// The streams of one HTTP/2 connection: how many the server lets the client open (its
/// `SETTINGS_MAX_CONCURRENT_STREAMS`; unlimited until its SETTINGS came, and when it sets
/// none), and how many are open.
#[derive(Debug)]
struct Streams {
    limit: AtomicU32,
    open: AtomicUsize,
}

/// A stream counted open until its answer has been read or given up on.
#[derive(Debug)]
struct OpenStream(Arc<Streams>);

impl Drop for OpenStream {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
    }
}

enum Address {
    Ip(SocketAddr),
    Name(String, u16),
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("max_idle", &self.0.max_idle)
            .finish_non_exhaustive()
    }
}

/// A base URL the pool cannot send to.
#[derive(Debug, thiserror::Error)]
#[error("cannot send to `{url}`: {why}")]
pub struct BadTarget {
    url: String,
    why: String,
}

/// How far a send got, for an attempt stopped or timed out on the way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Waiting for a connection, pooled or new: nothing of it is on the wire.
    Connecting,
    /// Handed to a connection, which writes it straight away.
    Handed,
}

/// Why a send failed, and how far it got.
#[derive(Debug)]
pub enum Failure {
    /// No connection could be made (its error), or one made could not take the request.
    Connect(io::Error),
    /// A new connection took longer than [`CONNECT_TIMEOUT`].
    ConnectTimeout,
    /// Handed to a connection, which failed before the whole answer came.
    Wire(hyper::Error),
}

/// An answer whose head came: read its body with [`Answering::finish`], which gives the
/// connection back to the pool for the next attempt.
#[derive(Debug)]
pub struct Answering<'p> {
    pub head: hyper::http::response::Parts,
    body: Incoming,
    /// An HTTP/1.1 connection, to give back; an HTTP/2 one is never taken.
    connection: Option<SendRequest<Body>>,
    /// The HTTP/2 stream it came on, open until this is read or dropped.
    _stream: Option<OpenStream>,
    pool: &'p Pool,
}

impl Answering<'_> {
    /// Reads the body to its end (and drops it), and gives its trailers (a gRPC call's
    /// status); an error is the connection's or the stream's, which failed before the
    /// whole body came.
    pub async fn finish(mut self) -> Result<Option<HeaderMap>, hyper::Error> {
        let mut trailers = None;
        while let Some(frame) = self.body.frame().await {
            if let Ok(t) = frame?.into_trailers() {
                trailers = Some(t);
            }
        }
        if let Some(connection) = self.connection {
            self.pool.give_back(connection);
        }
        Ok(trailers)
    }
}

impl Pool {
    /// A pool for `base_url` (`http://host[:port][/prefix]`) that keeps at most
    /// `max_idle` idle connections; with `multiplexed: Some(n)`, `n` HTTP/2 connections
    /// instead.
    pub fn new(
        base_url: &str,
        max_idle: usize,
        multiplexed: Option<usize>,
    ) -> Result<Pool, BadTarget> {
        let bad = |why: String| BadTarget {
            url: base_url.to_owned(),
            why,
        };
        let url = reqwest::Url::parse(base_url).map_err(|e| bad(e.to_string()))?;
        if url.scheme() != "http" {
            return Err(bad("only http:// is supported".into()));
        }
        let port = url.port_or_known_default().unwrap_or(80);
        let Some(host) = url.host_str() else {
            return Err(bad("it has no host".into()));
        };
        // An IPv6 host comes in brackets.
        let at = match host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
        {
            Ok(ip) => Address::Ip(SocketAddr::new(ip, port)),
            Err(_) => Address::Name(host.to_owned(), port),
        };
        let h2 = multiplexed.map(|n| Multiplexed {
            connections: (0..n.max(1))
                .map(|_| tokio::sync::Mutex::new(None))
                .collect(),
            next: AtomicUsize::new(0),
            waited: AtomicU64::new(0),
        });
        Ok(Pool(Arc::new(Inner {
            at,
            idle: Mutex::new(Vec::new()),
            max_idle,
            h2,
            opened: AtomicU64::new(0),
        })))
    }

    /// How many TCP connections the pool has made so far.
    pub fn opened(&self) -> u64 {
        self.0.opened.load(Ordering::Relaxed)
    }

    /// Over HTTP/2: how many attempts were handed to a connection that had as many streams
    /// open as the server allows, so waited in the client for one to end; 0 over HTTP/1.1.
    pub fn streams_waited(&self) -> u64 {
        self.0
            .h2
            .as_ref()
            .map_or(0, |h2| h2.waited.load(Ordering::Relaxed))
    }

    /// Sends `request` and waits for its answer's head. `stage` is kept up to date, so
    /// that whoever stops this future knows whether the request was handed to a
    /// connection.
    pub async fn send(
        &self,
        mut request: Request<Body>,
        stage: &(dyn Fn(Stage) + Sync),
    ) -> Result<Answering<'_>, Failure> {
        stage(Stage::Connecting);
        if let Some(h2) = &self.0.h2 {
            return self.send_multiplexed(h2, request, stage).await;
        }
        let mut fresh = false;
        loop {
            let mut connection = match self.idle_connection().await {
                Some(connection) => connection,
                None if fresh => {
                    // A connection just made closed before it could take the request.
                    return Err(Failure::Connect(io::ErrorKind::ConnectionAborted.into()));
                }
                None => {
                    fresh = true;
                    self.connect().await?
                }
            };
            stage(Stage::Handed);
            match connection.try_send_request(request).await {
                Ok(response) => {
                    let (head, body) = response.into_parts();
                    return Ok(Answering {
                        head,
                        body,
                        connection: Some(connection),
                        _stream: None,
                        pool: self,
                    });
                }
                Err(mut error) => match error.take_message() {
                    // Never written: the connection closed first. Another takes it.
                    Some(unsent) => {
                        stage(Stage::Connecting);
                        request = unsent;
                    }
                    None => return Err(Failure::Wire(error.into_error())),
                },
            }
        }
    }

    /// [`Pool::send`] over HTTP/2: on the next connection round-robin, made if it is not
    /// open; a request the connection closed before taking goes on a new one, once.
    async fn send_multiplexed(
        &self,
        h2: &Multiplexed,
        mut request: Request<Body>,
        stage: &(dyn Fn(Stage) + Sync),
    ) -> Result<Answering<'_>, Failure> {
        let at = h2.next.fetch_add(1, Ordering::Relaxed);
        let slot = &h2.connections[at % h2.connections.len()];
        let mut fresh = false;
        loop {
            let H2Connection {
                send: mut connection,
                streams,
            } = {
                let mut open = slot.lock().await;
                match open.as_ref().filter(|c| !c.send.is_closed()) {
                    Some(connection) => connection.clone(),
                    None if fresh => {
                        return Err(Failure::Connect(io::ErrorKind::ConnectionAborted.into()));
                    }
                    None => {
                        fresh = true;
                        let connection = self.connect_h2().await?;
                        *open = Some(connection.clone());
                        connection
                    }
                }
            };
            if connection.ready().await.is_err() {
                continue;
            }
            let before = streams.open.fetch_add(1, Ordering::Relaxed);
            let stream = OpenStream(Arc::clone(&streams));
            if before >= streams.limit.load(Ordering::Relaxed) as usize {
                h2.waited.fetch_add(1, Ordering::Relaxed);
            }
            stage(Stage::Handed);
            match connection.try_send_request(request).await {
                Ok(response) => {
                    let (head, body) = response.into_parts();
                    return Ok(Answering {
                        head,
                        body,
                        connection: None,
                        _stream: Some(stream),
                        pool: self,
                    });
                }
                Err(mut error) => match error.take_message() {
                    Some(unsent) => {
                        stage(Stage::Connecting);
                        request = unsent;
                    }
                    None => return Err(Failure::Wire(error.into_error())),
                },
            }
        }
    }

    fn give_back(&self, connection: SendRequest<Body>) {
        if connection.is_closed() {
            return;
        }
        let mut idle = self.idle();
        if idle.len() < self.0.max_idle {
            idle.push((connection, Instant::now()));
        }
    }

    /// The most recently used idle connection that is still open, once it can take a
    /// request.
    async fn idle_connection(&self) -> Option<SendRequest<Body>> {
        loop {
            let (mut connection, since) = self.idle().pop()?;
            if since.elapsed() >= IDLE_TIMEOUT {
                // Every connection below it has been idle longer still.
                self.idle().clear();
                return None;
            }
            // Given back as soon as its answer was read, a connection is ready once its
            // own task has seen the answer end: at most a turn of the runtime.
            if connection.ready().await.is_ok() {
                return Some(connection);
            }
        }
    }

    async fn connect(&self) -> Result<SendRequest<Body>, Failure> {
        let stream = self.tcp().await?;
        let (connection, driver) = http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| Failure::Connect(io::Error::other(e)))?;
        // The connection's own task: it ends when the connection closes or the pool lets
        // go of it. Its error, if any, reaches the request it was writing or reading.
        tokio::spawn(async move {
            let _ = driver.await;
        });
        Ok(connection)
    }

    /// A new HTTP/2 connection, by prior knowledge: the preface, then SETTINGS.
    async fn connect_h2(&self) -> Result<H2Connection, Failure> {
        let streams = Arc::new(Streams {
            limit: AtomicU32::new(u32::MAX),
            open: AtomicUsize::new(0),
        });
        let stream = Sniffed::new(self.tcp().await?, Arc::clone(&streams));
        let handshake = http2::Builder::new(TokioExecutor::new()).handshake(TokioIo::new(stream));
        let (connection, driver) = tokio::time::timeout(CONNECT_TIMEOUT, handshake)
            .await
            .map_err(|_| Failure::ConnectTimeout)?
            .map_err(|e| Failure::Connect(io::Error::other(e)))?;
        tokio::spawn(async move {
            let _ = driver.await;
        });
        Ok(H2Connection {
            send: connection,
            streams,
        })
    }

    async fn tcp(&self) -> Result<TcpStream, Failure> {
        let connect = async {
            match &self.0.at {
                Address::Ip(addr) => TcpStream::connect(addr).await,
                Address::Name(name, port) => TcpStream::connect((name.as_str(), *port)).await,
            }
        };
        let stream = tokio::time::timeout(CONNECT_TIMEOUT, connect)
            .await
            .map_err(|_| Failure::ConnectTimeout)?
            .map_err(Failure::Connect)?;
        self.0.opened.fetch_add(1, Ordering::Relaxed);
        stream.set_nodelay(true).map_err(Failure::Connect)?;
        Ok(stream)
    }

    fn idle(&self) -> MutexGuard<'_, Vec<(SendRequest<Body>, Instant)>> {
        // A panic under this lock cannot leave the list half changed.
        self.0.idle.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// An HTTP/2 connection's socket, which reads the server's first frame as it passes: its
/// SETTINGS (RFC 9113 §3.4: a server's preface), for `SETTINGS_MAX_CONCURRENT_STREAMS`.
/// Nothing else is looked at, and nothing is changed.
struct Sniffed {
    inner: TcpStream,
    streams: Arc<Streams>,
    /// The first frame's bytes so far; `None` once it has been read.
    first: Option<Vec<u8>>,
}

/// A frame's header: length (3), type, flags, stream id (4).
const FRAME_HEADER: usize = 9;
/// A SETTINGS frame longer than this is not read (a server sends a handful of settings).
const MAX_SETTINGS: usize = 6 * 32;

impl Sniffed {
    fn new(inner: TcpStream, streams: Arc<Streams>) -> Sniffed {
        Sniffed {
            inner,
            streams,
            first: Some(Vec::with_capacity(FRAME_HEADER + 36)),
        }
    }

    fn saw(&mut self, bytes: &[u8]) {
        let Some(first) = self.first.as_mut() else {
            return;
        };
        first.extend_from_slice(bytes);
        if first.len() < FRAME_HEADER {
            return;
        }
        let len = u32::from_be_bytes([0, first[0], first[1], first[2]]) as usize;
        if first[3] != 0x4 || len > MAX_SETTINGS {
            self.first = None;
            return;
        }
        if first.len() < FRAME_HEADER + len {
            return;
        }
        let limit = max_concurrent_streams(&first[FRAME_HEADER..FRAME_HEADER + len]);
        if let Some(limit) = limit {
            self.streams.limit.store(limit, Ordering::Relaxed);
        }
        self.first = None;
    }
}

/// `SETTINGS_MAX_CONCURRENT_STREAMS` (0x3) in a SETTINGS frame's payload, if set.
fn max_concurrent_streams(payload: &[u8]) -> Option<u32> {
    // The last of a setting given twice wins (RFC 9113 §6.5.3: processed in order).
    payload
        .chunks_exact(6)
        .rev()
        .find(|s| u16::from_be_bytes([s[0], s[1]]) == 0x3)
        .map(|s| u32::from_be_bytes([s[2], s[3], s[4], s[5]]))
}

impl AsyncRead for Sniffed {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let read = Pin::new(&mut self.inner).poll_read(cx, buf);
        if self.first.is_some() {
            let filled = buf.filled()[before..].to_vec();
            self.saw(&filled);
        }
        read
    }
}

impl AsyncWrite for Sniffed {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::max_concurrent_streams;

    #[test]
    fn the_stream_limit_is_read_from_a_settings_payload() {
        // HEADER_TABLE_SIZE 4096, MAX_CONCURRENT_STREAMS 3, INITIAL_WINDOW_SIZE 65535.
        let payload = [
            0, 1, 0, 0, 16, 0, //
            0, 3, 0, 0, 0, 3, //
            0, 4, 0, 0, 255, 255,
        ];
        assert_eq!(max_concurrent_streams(&payload), Some(3));
        assert_eq!(max_concurrent_streams(&payload[..6]), None);
        assert_eq!(max_concurrent_streams(&[]), None);
    }
}
