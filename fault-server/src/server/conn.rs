//! The accept loop: hyper's HTTP/1 connections served with a router, each one in a
//! `select!` with its kill signal and the server's shutdown signals.
//!
//! Why a custom accept loop instead of `axum::serve`: a handler must be able to kill the
//! very connection its request came on, with an RST or a FIN of its choosing, and axum
//! does not hand a handler its socket. So each accepted stream is split into the stream
//! hyper serves and a [`ConnControl`](super::socket::ConnControl), which every request on
//! the connection reaches while it is handled.
//!
//! The loop takes the router as an argument and knows nothing of what it routes to, so
//! it is tested here with a trivial router.

use std::io;
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

use super::socket;

/// How long a client may take to send a request's headers (slowloris guard).
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// The server's two stop signals, as the accept loop and its connections see them.
#[derive(Debug, Clone, Default)]
pub(crate) struct Stop {
    /// Graceful shutdown has begun: stop accepting, finish the requests in progress.
    pub(crate) shutdown: CancellationToken,
    /// The grace period is over: close every connection.
    pub(crate) force: CancellationToken,
}

/// Accepts until shutdown; each connection runs on its own task, tracked for shutdown.
pub(crate) async fn accept_loop(
    listener: TcpListener,
    router: Router,
    stop: Stop,
    tracker: TaskTracker,
) {
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .keep_alive(true);
    let builder = Arc::new(builder);
    loop {
        let accepted = tokio::select! {
            biased;
            () = stop.shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, _peer)) => {
                tracker.spawn(serve_connection(
                    stream,
                    stop.clone(),
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
    stop: Stop,
    router: Router,
    builder: Arc<http1::Builder>,
) {
    let _ = stream.set_nodelay(true);
    let Ok((stream, control)) = socket::split_control(stream) else {
        // Could not duplicate the descriptor (out of descriptors): drop the connection.
        return;
    };
    let kill = control.kill_signal();
    let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
        socket::scope(control.clone(), router.clone().oneshot(request))
    });
    let connection = builder.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(connection);
    tokio::select! {
        biased;
        () = kill.cancelled() => return,
        () = stop.force.cancelled() => return,
        _ = connection.as_mut() => return,
        () = stop.shutdown.cancelled() => connection.as_mut().graceful_shutdown(),
    }
    tokio::select! {
        biased;
        () = kill.cancelled() => {}
        () = stop.force.cancelled() => {}
        _ = connection.as_mut() => {}
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
        let accept = tokio::spawn(accept_loop(listener, router, stop.clone(), tracker.clone()));
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
}
