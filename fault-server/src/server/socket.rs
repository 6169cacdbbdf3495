//! The socket behind a connection, shared with the handlers of its requests: what makes
//! `reset`, `close` and `truncate` real on the wire.
//!
//! Each accepted stream is split ([`split_control`]) into the stream hyper serves and a
//! [`ConnControl`] holding a `try_clone()` of it (same socket, second descriptor) and the
//! connection's kill signal, which the accept loop selects on. A handler finds the control
//! of its connection with [`current_connection`], a task-local the accept loop sets
//! around each request's service future ([`scope`]; no allocation per request, unlike a
//! request extension):
//!
//! - reset: `SO_LINGER` 0 on the control handle, then the kill signal; dropping the
//!   connection closes the last descriptor and the kernel sends RST instead of FIN.
//! - close: `shutdown(Write)` sends FIN now (even if request bytes sit unread), then the
//!   kill signal.
//! - truncate: write a status line, headers and part of the body straight to the control
//!   handle (hyper has sent nothing for this request yet), then reset.
//! - drain (goaway): a second signal, on which the accept loop starts hyper's graceful
//!   shutdown of the connection.
//!
//! No `unsafe`, no libc: `socket2::SockRef` borrows the descriptor. This module knows
//! nothing of the router, the script or the ledger.

use std::future::Future;
use std::io::{self, Write};
use std::net::Shutdown;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use tokio::net::TcpStream;
use tokio::task::futures::TaskLocalFuture;
use tokio_util::sync::CancellationToken;

tokio::task_local! {
    /// The connection the request being handled came on.
    static CONNECTION: ConnControl;
}

/// The connection of the request being handled, when it runs inside [`scope`].
pub(crate) fn current_connection() -> Option<ConnControl> {
    CONNECTION.try_with(Clone::clone).ok()
}

/// The address of the client of the request being handled, as text, when it runs inside
/// [`scope`] and the OS said.
pub(crate) fn current_peer() -> Option<Bytes> {
    CONNECTION
        .try_with(|connection| connection.inner.peer.clone())
        .ok()
        .flatten()
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
    /// Asks the connection to finish what it has and go away (GOAWAY, `connection:
    /// close`), which the accept loop selects on beside `kill`.
    drain: CancellationToken,
    /// The client's address as text, written once (an upstream is told it in
    /// `X-Forwarded-For`; a clone of `Bytes` is a count, not a copy).
    peer: Option<Bytes>,
}

impl ConnControl {
    /// Ends the connection with a TCP RST: no response, and the client sees
    /// "connection reset by peer".
    pub(crate) fn reset(&self) {
        // If SO_LINGER cannot be set the connection still dies, with a FIN.
        let _ = socket2::SockRef::from(&self.inner.socket).set_linger(Some(Duration::ZERO));
        self.inner.kill.cancel();
    }

    /// Lets the requests in progress finish, then ends the connection the way the
    /// protocol says a server going away does: GOAWAY on HTTP/2, `connection: close` on
    /// HTTP/1.1.
    pub(crate) fn drain(&self) {
        self.inner.drain.cancel();
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

/// EMFILE or ENFILE: the process or the system has no descriptor to give.
pub(crate) fn out_of_descriptors(error: &io::Error) -> bool {
    matches!(error.raw_os_error(), Some(23 | 24))
}

/// Makes a request's service future with `make` and runs it, both with `control` as
/// their [`current_connection`]: the handler does part of its work in the call that makes
/// the future (the faultless hot path answers there, and a forward is built there, its
/// `X-Forwarded-For` from [`current_peer`]), not only when the future is polled.
pub(crate) fn scope<F: Future>(
    control: ConnControl,
    make: impl FnOnce() -> F,
) -> TaskLocalFuture<ConnControl, F> {
    let future = CONNECTION.sync_scope(control.clone(), make);
    CONNECTION.scope(control, future)
}

/// Splits an accepted stream into the stream hyper serves and the control handle, whose
/// reset and close fire `kill`.
///
/// Out of descriptors, it waits a little for some to be freed (connections the budget
/// just closed release theirs as their tasks end) rather than drop the connection.
pub(crate) async fn split_control(
    stream: TcpStream,
    kill: CancellationToken,
    drain: CancellationToken,
) -> io::Result<(TcpStream, ConnControl)> {
    /// How long to wait for a descriptor, in steps of [`DESCRIPTOR_WAIT_STEP`].
    const DESCRIPTOR_WAIT: u32 = 100;
    const DESCRIPTOR_WAIT_STEP: Duration = Duration::from_millis(10);
    let peer = stream
        .peer_addr()
        .ok()
        .map(|addr| Bytes::from(addr.ip().to_string()));
    let std_stream = stream.into_std()?;
    let mut tries = 0;
    let socket = loop {
        match std_stream.try_clone() {
            Ok(socket) => break socket,
            Err(e) if out_of_descriptors(&e) && tries < DESCRIPTOR_WAIT => {
                tries += 1;
                tokio::time::sleep(DESCRIPTOR_WAIT_STEP).await;
            }
            Err(e) => return Err(e),
        }
    };
    let stream = TcpStream::from_std(std_stream)?;
    Ok((
        stream,
        ConnControl {
            inner: Arc::new(ConnInner {
                socket,
                kill,
                drain,
                peer,
            }),
        },
    ))
}
