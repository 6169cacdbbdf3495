//! The accept loop and per-connection control: what makes `reset`, `close` and `truncate`
//! real on the wire.
//!
//! Why a custom accept loop instead of `axum::serve`: a handler must be able to kill the
//! very connection its request came on, with an RST or a FIN of its choosing, and axum
//! does not hand a handler its socket. So each accepted stream is turned `into_std()`, a
//! `try_clone()` of it (same socket, second descriptor) is kept as the control handle,
//! and the original goes back to tokio and is served by hyper's HTTP/1 connection inside a
//! `select!` with a per-connection kill signal. A handler finds the [`ConnControl`] of its
//! connection with [`current_connection`] (a task-local set around each request's
//! service future: no allocation per request, unlike a request extension):
//!
//! - reset: `SO_LINGER` 0 on the control handle, then the kill signal; dropping the
//!   connection closes the last descriptor and the kernel sends RST instead of FIN.
//! - close: `shutdown(Write)` sends FIN now (even if request bytes sit unread), then the
//!   kill signal.
//! - truncate: write a status line, headers and part of the body straight to the control
//!   handle (hyper has sent nothing for this request yet), then reset.
//!
//! No `unsafe`, no libc: `socket2::SockRef` borrows the descriptor.

use std::io::{self, Write};
use std::net::Shutdown;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

use super::Shared;

/// How long a client may take to send a request's headers (slowloris guard).
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

tokio::task_local! {
    /// The connection the request being handled came on.
    static CONNECTION: ConnControl;
}

/// The connection of the request being handled, when it came through [`accept_loop`].
pub(crate) fn current_connection() -> Option<ConnControl> {
    CONNECTION.try_with(Clone::clone).ok()
}

/// Control of one connection, shared with the handlers of its requests.
#[derive(Debug, Clone)]
pub(crate) struct ConnControl {
    inner: Arc<ConnInner>,
}

#[derive(Debug)]
struct ConnInner {
    /// A second descriptor of the connection's socket.
    socket: std::net::TcpStream,
    kill: CancellationToken,
}

impl ConnControl {
    /// Ends the connection with a TCP RST: no response, and the client sees
    /// "connection reset by peer".
    pub(crate) fn reset(&self) {
        // If SO_LINGER cannot be set the connection still dies, with a FIN.
        let _ = socket2::SockRef::from(&self.inner.socket).set_linger(Some(Duration::ZERO));
        self.inner.kill.cancel();
    }

    /// Ends the connection with a FIN and no response.
    pub(crate) fn close(&self) {
        let _ = self.inner.socket.shutdown(Shutdown::Write);
        self.inner.kill.cancel();
    }

    /// Writes raw bytes to the socket, bypassing hyper. Stops early (without error) if
    /// the socket buffer is full: the bytes are a truncated response anyway.
    pub(crate) fn write_raw(&self, bytes: &[u8]) -> io::Result<usize> {
        let mut written = 0;
        let mut socket = &self.inner.socket;
        while written < bytes.len() {
            match socket.write(&bytes[written..]) {
                Ok(0) => break,
                Ok(n) => written += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e),
            }
        }
        Ok(written)
    }
}

/// Accepts until shutdown; each connection runs on its own task, tracked for shutdown.
pub(crate) async fn accept_loop(listener: TcpListener, shared: Arc<Shared>, tracker: TaskTracker) {
    let router = super::control::router(Arc::clone(&shared));
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .keep_alive(true);
    let builder = Arc::new(builder);
    loop {
        let accepted = tokio::select! {
            biased;
            () = shared.shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, _peer)) => {
                tracker.spawn(serve_connection(
                    stream,
                    Arc::clone(&shared),
                    router.clone(),
                    Arc::clone(&builder),
                ));
            }
            Err(error) if is_per_connection(&error) => {}
            Err(_) => {
                // Out of descriptors or memory: back off instead of spinning; the
                // connections already open keep being served.
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
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

async fn serve_connection(
    stream: TcpStream,
    shared: Arc<Shared>,
    router: Router,
    builder: Arc<http1::Builder>,
) {
    let _ = stream.set_nodelay(true);
    let Ok((stream, control)) = split_control(stream) else {
        // Could not duplicate the descriptor (out of descriptors): drop the connection.
        return;
    };
    let kill = control.inner.kill.clone();
    let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
        CONNECTION.scope(control.clone(), router.clone().oneshot(request))
    });
    let connection = builder.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(connection);
    tokio::select! {
        biased;
        () = kill.cancelled() => return,
        () = shared.force.cancelled() => return,
        _ = connection.as_mut() => return,
        () = shared.shutdown.cancelled() => connection.as_mut().graceful_shutdown(),
    }
    tokio::select! {
        biased;
        () = kill.cancelled() => {}
        () = shared.force.cancelled() => {}
        _ = connection.as_mut() => {}
    }
}

/// Splits an accepted stream into the stream hyper serves and the control handle.
fn split_control(stream: TcpStream) -> io::Result<(TcpStream, ConnControl)> {
    let std_stream = stream.into_std()?;
    let socket = std_stream.try_clone()?;
    let stream = TcpStream::from_std(std_stream)?;
    Ok((
        stream,
        ConnControl {
            inner: Arc::new(ConnInner {
                socket,
                kill: CancellationToken::new(),
            }),
        },
    ))
}
