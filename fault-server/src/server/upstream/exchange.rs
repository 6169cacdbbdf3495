//! One request to the upstream, on one connection, on the request's own task: its head
//! and body written, the answer's head read ([`Sending`]), then the answer's body read as
//! the client takes it ([`UpstreamBody`]), the connection given back at its end.

use std::collections::VecDeque;
use std::future::Future;
use std::io::IoSlice;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::header::CONTENT_LENGTH;
use axum::http::{Method, Version};
use axum::response::Response;
use bytes::Buf;
use hyper::body::{Body as _, Frame, SizeHint};
use tokio::io::AsyncWrite;

use super::super::conn::BodyTimedOut;
use super::h1::{self, Decoded, Decoder, H1Error, Head};
use super::pool::{Conn, Inner, Lost};

/// A new connection on its way.
type Connecting = Pin<Box<dyn Future<Output = Result<Box<Conn>, Lost>> + Send>>;

/// What is left to write of a request.
struct Out {
    /// The head, written once whole (a retry writes it again).
    head: Vec<u8>,
    /// How much of the head is written.
    written: usize,
    /// The client's body, still to be read.
    body: Option<Body>,
    /// Whether the body goes chunked (it has no `Content-Length`).
    chunked: bool,
    /// Body bytes read and not yet written: a chunk's size line, its data, its CRLF.
    pieces: VecDeque<Bytes>,
}

impl Out {
    fn is_done(&self) -> bool {
        self.written == self.head.len() && self.body.is_none() && self.pieces.is_empty()
    }
}

/// How writing stopped short.
enum WriteError {
    /// The connection would take no more.
    Conn,
    /// The client's body failed.
    ClientBody { timed_out: bool },
}

/// A request on its way to the upstream, to the start of its answer
/// ([`super::pool::Pool::send`]).
pub(super) struct Sending {
    pool: Arc<Inner>,
    conn: Option<Box<Conn>>,
    connecting: Option<Connecting>,
    out: Out,
    method: Method,
    /// Whether the connection came from the pool: one the upstream closed while it was
    /// idle fails at once, and an idempotent request with no body is then sent again on a
    /// new connection, once (what nginx's `proxy_next_upstream` does by default).
    reused: bool,
    replayable: bool,
    retried: bool,
    armed: bool,
    /// The connection failed while the request was being written: an answer already
    /// sent (a 413 before the whole body) is still read.
    write_failed: bool,
}

impl Sending {
    pub(super) fn new(pool: Arc<Inner>, request: Request) -> Sending {
        let (mut parts, body) = request.into_parts();
        let empty = body.is_end_stream();
        // A body of no known length (the client's was chunked) goes chunked, and any
        // Content-Length it came with (beside its Transfer-Encoding) does not go.
        let chunked = !empty && body.size_hint().exact().is_none();
        if chunked {
            parts.headers.remove(CONTENT_LENGTH);
        }
        let mut head = Vec::with_capacity(256);
        let target = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        h1::encode_head(&mut head, &parts.method, target, &parts.headers, chunked);
        let conn = pool.take_idle();
        Sending {
            reused: conn.is_some(),
            replayable: empty && !crate::wire::has_side_effect(parts.method.as_str()),
            conn,
            connecting: None,
            out: Out {
                head,
                written: 0,
                body: (!empty).then_some(body),
                chunked,
                pieces: VecDeque::new(),
            },
            method: parts.method,
            retried: false,
            armed: false,
            write_failed: false,
            pool,
        }
    }

    /// Whether a failure before any answer may send the request again.
    fn may_retry(&self) -> bool {
        self.reused && self.replayable && !self.retried
    }

    /// Starts again on a new connection.
    fn retry(&mut self) {
        self.conn = None;
        self.retried = true;
        self.reused = false;
        self.armed = false;
        self.write_failed = false;
        self.out.written = 0;
    }
}

impl Future for Sending {
    type Output = Result<Response, Lost>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        loop {
            if this.conn.is_none() {
                let pool = &this.pool;
                let connecting = this
                    .connecting
                    .get_or_insert_with(|| Box::pin(Arc::clone(pool).connect()));
                match connecting.as_mut().poll(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Err(lost)) => return Poll::Ready(Err(lost)),
                    Poll::Ready(Ok(conn)) => {
                        this.connecting = None;
                        this.conn = Some(conn);
                    }
                }
            }
            let may_retry = this.may_retry();
            let Some(conn) = this.conn.as_mut() else {
                continue;
            };
            if !this.armed {
                conn.watch.arm(this.pool.deadline());
                this.armed = true;
            }
            if conn.watch.expired() {
                this.conn = None;
                return Poll::Ready(Err(Lost::Timeout));
            }
            if !this.write_failed {
                match write(conn, &mut this.out, cx) {
                    Ok(()) => {}
                    Err(WriteError::ClientBody { timed_out }) => {
                        this.conn = None;
                        return Poll::Ready(Err(Lost::ClientBody { timed_out }));
                    }
                    Err(WriteError::Conn) => {
                        if may_retry && conn.read.is_empty() {
                            this.retry();
                            continue;
                        }
                        this.write_failed = true;
                        this.out.body = None;
                    }
                }
            }
            let conn = this
                .conn
                .as_mut()
                .expect("the connection is there: checked above");
            let head = match h1::parse_head(&mut conn.read, &this.method) {
                Ok(Some(head)) => head,
                Ok(None) => match conn.poll_read(cx) {
                    Poll::Ready(Ok(n)) if n > 0 => continue,
                    Poll::Ready(_) if may_retry && conn.read.is_empty() => {
                        // Closed (or reset) before a byte of an answer.
                        this.retry();
                        continue;
                    }
                    Poll::Ready(_) => {
                        this.conn = None;
                        return Poll::Ready(Err(Lost::Failed));
                    }
                    Poll::Pending => {
                        conn.watch.register(cx.waker());
                        return Poll::Pending;
                    }
                },
                Err(_) => {
                    this.conn = None;
                    return Poll::Ready(Err(Lost::Failed));
                }
            };
            let Some(conn) = this.conn.take() else {
                continue;
            };
            conn.watch.disarm();
            // An answer before the whole request was written (a 413, a 401): the rest of
            // the body is not sent, and the connection not used again.
            let finished = this.out.is_done() && !this.write_failed;
            return Poll::Ready(Ok(respond(head, conn, finished, &this.pool)));
        }
    }
}

/// Writes what it can of the request: the head, then the body as the client sends it.
fn write(conn: &mut Conn, out: &mut Out, cx: &mut Context<'_>) -> Result<(), WriteError> {
    while out.written < out.head.len() {
        match Pin::new(&mut conn.io).poll_write(cx, &out.head[out.written..]) {
            Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => return Err(WriteError::Conn),
            Poll::Ready(Ok(n)) => out.written += n,
            Poll::Pending => return Ok(()),
        }
    }
    loop {
        while !out.pieces.is_empty() {
            let mut slices = [IoSlice::new(&[]); 4];
            for (slice, piece) in slices.iter_mut().zip(&out.pieces) {
                *slice = IoSlice::new(piece);
            }
            let count = out.pieces.len().min(slices.len());
            match Pin::new(&mut conn.io).poll_write_vectored(cx, &slices[..count]) {
                Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => return Err(WriteError::Conn),
                Poll::Ready(Ok(mut n)) => {
                    while n > 0 {
                        let Some(front) = out.pieces.front_mut() else {
                            break;
                        };
                        let take = n.min(front.len());
                        front.advance(take);
                        n -= take;
                        if front.is_empty() {
                            out.pieces.pop_front();
                        }
                    }
                }
                Poll::Pending => return Ok(()),
            }
        }
        let Some(body) = out.body.as_mut() else {
            return Ok(());
        };
        match Pin::new(body).poll_frame(cx) {
            Poll::Pending => return Ok(()),
            Poll::Ready(None) => {
                out.body = None;
                if out.chunked {
                    out.pieces.push_back(Bytes::from_static(h1::LAST_CHUNK));
                }
            }
            Poll::Ready(Some(Ok(frame))) => {
                if let Ok(data) = frame.into_data()
                    && !data.is_empty()
                {
                    if out.chunked {
                        out.pieces.push_back(h1::chunk_size_line(data.len()));
                        out.pieces.push_back(data);
                        out.pieces.push_back(Bytes::from_static(b"\r\n"));
                    } else {
                        out.pieces.push_back(data);
                    }
                }
            }
            Poll::Ready(Some(Err(error))) => {
                return Err(WriteError::ClientBody {
                    timed_out: timed_out(&error),
                });
            }
        }
    }
}

/// Whether a body error is the body deadline's.
fn timed_out(error: &axum::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = source {
        if e.downcast_ref::<BodyTimedOut>().is_some() {
            return true;
        }
        source = e.source();
    }
    false
}

/// The client's response to the upstream's head, its body reading on from `conn`.
fn respond(head: Head, conn: Box<Conn>, finished: bool, pool: &Arc<Inner>) -> Response {
    let Head {
        status,
        mut headers,
        body,
        keep_alive,
    } = head;
    if matches!(body, Decoder::Chunked(_)) {
        // Sent beside Transfer-Encoding, it does not say the length (RFC 9112 6.3):
        // the client gets the body framed anew.
        headers.remove(CONTENT_LENGTH);
    }
    let mut response = Response::new(Body::new(UpstreamBody {
        conn: Some(conn),
        decoder: body,
        keep_alive: keep_alive && finished,
        eof: false,
        pool: Arc::clone(pool),
    }));
    *response.status_mut() = status;
    *response.version_mut() = Version::HTTP_11;
    *response.headers_mut() = headers;
    response
}

/// The upstream's response body, read from its connection as the client takes it; the
/// connection goes back to the pool at its end, if it may serve again.
struct UpstreamBody {
    /// `None` once the body has ended.
    conn: Option<Box<Conn>>,
    decoder: Decoder,
    keep_alive: bool,
    /// The connection has closed: what is in its buffer is all there is.
    eof: bool,
    pool: Arc<Inner>,
}

impl UpstreamBody {
    fn end(&mut self) {
        if let Some(conn) = self.conn.take()
            && self.keep_alive
            && !self.eof
        {
            self.pool.checkin(conn);
        }
    }
}

impl hyper::body::Body for UpstreamBody {
    type Data = Bytes;
    type Error = H1Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, H1Error>>> {
        let this = &mut *self;
        loop {
            let Some(conn) = this.conn.as_mut() else {
                return Poll::Ready(None);
            };
            match this.decoder.decode(&mut conn.read, this.eof) {
                Ok(Decoded::Data(data)) => return Poll::Ready(Some(Ok(Frame::data(data)))),
                Ok(Decoded::End) => {
                    this.end();
                    return Poll::Ready(None);
                }
                Ok(Decoded::More) => match conn.poll_read(cx) {
                    Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => this.eof = true,
                    Poll::Ready(Ok(_)) => {}
                    Poll::Pending => return Poll::Pending,
                },
                Err(error) => {
                    this.conn = None;
                    return Poll::Ready(Some(Err(error)));
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.decoder.is_done()
    }

    fn size_hint(&self) -> SizeHint {
        match self.decoder.remaining() {
            Some(left) => SizeHint::with_exact(left),
            None => SizeHint::default(),
        }
    }
}

impl Drop for UpstreamBody {
    /// A body read to its end (or empty, never read: a 204's, a HEAD's) gives its
    /// connection back; one dropped halfway closes it, its answer unread.
    fn drop(&mut self) {
        if self.decoder.is_done() {
            self.end();
        }
    }
}
