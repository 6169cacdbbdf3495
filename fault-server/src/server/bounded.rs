//! The accept loop for another crate's router: the harness's relay tiers are served by
//! it, so they bound their connections by the same budget as this server (the idlest
//! closed to make room, a newcomer over budget answered, a burst held in the backlog
//! while no descriptor is free) rather than by a second copy of its rules. Before it, a
//! relay served by `axum::serve` had no budget: 1,140 idle connections against a
//! descriptor limit of 1,024 left it unreachable for 6 to 8 s (issue 50).

use axum::Router;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::conn::{self, Limits, Stop};

/// Serves `router` on `listeners` until `shutdown` is cancelled, then lets the requests
/// in progress finish. With several listeners each request carries its [`Peer`]
/// extension, the listener's place in the list plus one.
///
/// `max_connections` connections are served in full (by default what the descriptor
/// limit allows, [`crate::fd_limit::connection_budget`], three descriptors a
/// connection: a router that forwards holds one of its own per request); past them the
/// connection idle longest is closed to make room, and when every one is busy a
/// newcomer gets `503` `the server is at its connection limit`, at most
/// [`crate::fd_limit::OVER_BUDGET`] of them at once.
///
/// Dropping the future (an aborted task) closes every connection it serves.
pub async fn serve_bounded(
    listeners: Vec<TcpListener>,
    router: Router,
    shutdown: CancellationToken,
    max_connections: Option<usize>,
) {
    let stop = Stop {
        shutdown,
        force: CancellationToken::new(),
    };
    // Connections run on tasks of their own: an abort of this future must end them too.
    let _force = stop.force.clone().drop_guard();
    let limits = Limits {
        max_connections: max_connections.unwrap_or_else(|| crate::fd_limit::default_budget(true)),
        ..Limits::default()
    };
    let tracker = TaskTracker::new();
    conn::accept_loop(listeners, router, stop, tracker.clone(), limits).await;
    tracker.close();
    tracker.wait().await;
}

pub use conn::Peer;
