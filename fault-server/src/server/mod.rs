//! The embeddable server: configuration, start, and the handle that scripts, resets and
//! stops it.
//!
//! Why a handle and not just a binary: the harness starts one fault-server in-process on
//! `127.0.0.1:0`, and for every policy it compares installs the plan's script, resets the
//! ledger, runs the load and reads the ledger; then it stops the server. No subprocess,
//! no fixed port.
//!
//! The run clock: a script's windows (`from`, `until`) are measured from the moment the
//! script was installed ([`ServerHandle::set_script`], `PUT /__chaos/script`) or the
//! server was reset ([`ServerHandle::reset`], `POST /__chaos/reset`), whichever came last.
//!
//! The shell's modules depend one way, leaves first: `config`, `socket` (a connection's
//! control handle), `conn` (the accept loop, given what serves each request), `body`
//! (reading a request body), `state` (what every request shares), `flight` (a request in
//! flight), `kept` (the headers the ledger keeps), `answer` (the bodies and headers of
//! the handler's answers), `app` (the built-in application: idempotency keys, side
//! effects), `upstream` (the user's service instead, behind `--upstream`), `handler` (the
//! fault handler), `control` (the control API, its
//! router, and the dispatch between it and the fault handler), and this module, whose
//! [`start`] hands that dispatch to the accept loop.

mod answer;
mod app;
mod arrival;
mod body;
mod bounded;
mod config;
mod conn;
mod control;
mod flight;
mod grpc;
mod handler;
mod judged;
mod kept;
mod path;
mod socket;
mod state;
mod upstream;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use thiserror::Error;
use tokio::task::JoinHandle;
use tokio_util::task::TaskTracker;

use crate::ledger::LedgerSnapshot;
use crate::script::Script;
pub use bounded::{Peer, serve_bounded};
pub use config::{
    DEFAULT_BODY_TIMEOUT, DEFAULT_MAX_BODY, DEFAULT_MAX_CONCURRENT_STREAMS, DEFAULT_SHUTDOWN_GRACE,
    MAX_HEADER_BYTES, MAX_HEADERS, ScriptLog, ServerConfig, TokenError, check_token,
};
use state::Shared;

/// Why the server could not start.
#[derive(Debug, Error)]
pub enum StartError {
    /// Another socket holds the address.
    #[error(
        "cannot listen on {addr}: the port is already in use (another server is running there?)"
    )]
    AddrInUse {
        /// The address asked for.
        addr: SocketAddr,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A non-loopback address without a token would open the control API to the network.
    #[error(
        "refusing to listen on {addr} without a token: anyone who can reach it could script, reset and read the server; give it a token (--token or FAULT_SERVER_TOKEN), or accept an open control API with --allow-open-control"
    )]
    OpenControl {
        /// The address asked for.
        addr: SocketAddr,
    },
    /// The control token is empty or blank ([`check_token`]): checked before the
    /// non-loopback rule, which an empty token would otherwise satisfy.
    #[error("refusing to start: {0}")]
    Token(#[from] TokenError),
    /// A peer count out of `1..=MAX_PEERS`.
    #[error("cannot listen as {peers} peers: a server listens as 1 to {max} peers", max = crate::wire::MAX_PEERS)]
    Peers {
        /// The count asked for.
        peers: u32,
    },
    /// The ports after `listen` run past 65535.
    #[error("cannot listen as {peers} peers from {addr}: the ports after it run past 65535")]
    PeerPorts {
        /// The first address.
        addr: SocketAddr,
        /// The count asked for.
        peers: u32,
    },
    /// `--upstream` is this server's own address: every request it forwards would come
    /// back to it, and be forwarded again.
    #[error(
        "the upstream {upstream} is this server's own address ({addr}): every request it forwards would come back to it; point --upstream at the service, or listen on another port"
    )]
    UpstreamIsSelf {
        /// The address the server listens on.
        addr: SocketAddr,
        /// The upstream as given.
        upstream: String,
    },
    /// Any other bind failure (permission denied, address not available …).
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// Starts a server: binds, then serves on a background task until
/// [`ServerHandle::shutdown`] (or until the last handle is dropped).
pub async fn start(config: ServerConfig) -> Result<ServerHandle, StartError> {
    if let Some(token) = &config.token {
        check_token(token)?;
    }
    if !config.listen.ip().is_loopback() && config.token.is_none() && !config.allow_open_control {
        return Err(StartError::OpenControl {
            addr: config.listen,
        });
    }
    let addrs = peer_addrs(config.listen, config.peers)?;
    let upstream_addrs = match &config.upstream {
        Some(upstream) => upstream.socket_addrs().await,
        None => Vec::new(),
    };
    refuse_self_upstream(&config, &addrs, &upstream_addrs)?;
    let mut listeners = Vec::with_capacity(addrs.len());
    let mut bound = Vec::with_capacity(addrs.len());
    for addr in addrs {
        let listener = conn::listen(addr).map_err(|source| bind_error(addr, source))?;
        bound.push(
            listener
                .local_addr()
                .map_err(|source| StartError::Bind { addr, source })?,
        );
        listeners.push(listener);
    }
    // A port 0 is known once bound.
    refuse_self_upstream(&config, &bound, &upstream_addrs)?;
    let shutdown_grace = config.shutdown_grace;
    let limits = conn::Limits {
        max_connections: config
            .max_connections
            .unwrap_or_else(|| crate::fd_limit::default_budget(config.upstream.is_some())),
        over_budget: crate::fd_limit::OVER_BUDGET,
        always_serve: control::always_serve,
        body_timeout: config.body_timeout,
        max_concurrent_streams: config.max_concurrent_streams,
    };
    let shared = Arc::new(Shared::new(config));
    let tracker = TaskTracker::new();
    let accept = tokio::spawn(conn::accept_loop(
        listeners,
        control::Dispatch::new(Arc::clone(&shared)),
        shared.stop.clone(),
        tracker.clone(),
        limits,
    ));
    Ok(ServerHandle {
        inner: Arc::new(HandleInner {
            addrs: bound,
            shared,
            accept: Mutex::new(Some(accept)),
            tracker,
            shutdown_grace,
        }),
    })
}

/// [`StartError::UpstreamIsSelf`] when the upstream (which resolves to `upstream`) is one
/// of `listening` ([`crate::wire::forwards_to_itself`]). Proxies forwarding to each
/// other are found per request instead, by `Via`: a 508.
fn refuse_self_upstream(
    config: &ServerConfig,
    listening: &[SocketAddr],
    upstream: &[SocketAddr],
) -> Result<(), StartError> {
    let Some(given) = &config.upstream else {
        return Ok(());
    };
    match listening
        .iter()
        .find(|addr| crate::wire::forwards_to_itself(**addr, upstream))
    {
        Some(addr) => Err(StartError::UpstreamIsSelf {
            addr: *addr,
            upstream: given.to_string(),
        }),
        None => Ok(()),
    }
}

/// The addresses the `peers` of a server listening at `listen` bind: `listen`, then the
/// ports after it; each port 0 (a free port of its own) when `listen`'s is.
fn peer_addrs(listen: SocketAddr, peers: u32) -> Result<Vec<SocketAddr>, StartError> {
    if peers == 0 || usize::try_from(peers).map_or(true, |p| p > crate::wire::MAX_PEERS) {
        return Err(StartError::Peers { peers });
    }
    (0..peers)
        .map(|i| {
            let port = if listen.port() == 0 {
                Some(0)
            } else {
                u16::try_from(i)
                    .ok()
                    .and_then(|i| listen.port().checked_add(i))
            };
            port.map(|port| SocketAddr::new(listen.ip(), port))
                .ok_or(StartError::PeerPorts {
                    addr: listen,
                    peers,
                })
        })
        .collect()
}

fn bind_error(addr: SocketAddr, source: std::io::Error) -> StartError {
    if source.kind() == std::io::ErrorKind::AddrInUse {
        StartError::AddrInUse { addr, source }
    } else {
        StartError::Bind { addr, source }
    }
}

/// A running server. Cheap to clone; the server stops when [`ServerHandle::shutdown`] is
/// called or the last clone is dropped (then without grace).
#[derive(Debug, Clone)]
pub struct ServerHandle {
    inner: Arc<HandleInner>,
}

#[derive(Debug)]
struct HandleInner {
    /// Every peer's address, in order: at least one.
    addrs: Vec<SocketAddr>,
    shared: Arc<Shared>,
    accept: Mutex<Option<JoinHandle<()>>>,
    tracker: TaskTracker,
    shutdown_grace: Duration,
}

impl Drop for HandleInner {
    fn drop(&mut self) {
        self.shared.stop.shutdown.cancel();
        self.shared.stop.force.cancel();
    }
}

impl ServerHandle {
    /// The address the server listens on (the real port when asked for port 0); with
    /// several peers, the first's.
    pub fn addr(&self) -> SocketAddr {
        self.inner.addrs[0]
    }

    /// `http://IP:PORT`, without a trailing slash; with several peers, the first's.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr())
    }

    /// Every peer's address, peer 1 first (one for a server with one peer).
    pub fn peer_addrs(&self) -> &[SocketAddr] {
        &self.inner.addrs
    }

    /// Every peer's `http://IP:PORT`, peer 1 first: the `server` lines of a proxy in
    /// front, in this order, so that its peer numbers are the script's.
    pub fn peer_urls(&self) -> Vec<String> {
        self.inner
            .addrs
            .iter()
            .map(|a| format!("http://{a}"))
            .collect()
    }

    /// Replaces the script and restarts the run clock (the ledger is kept; call
    /// [`ServerHandle::reset`] too for a fresh run).
    pub fn set_script(&self, script: Script) {
        self.inner
            .shared
            .install(script, crate::wire::ORIGIN_HARNESS);
    }

    /// Clears the ledger and restarts the run clock; the script stays.
    pub fn reset(&self) {
        self.inner.shared.reset();
    }

    /// The ledger's current totals.
    pub fn ledger(&self) -> LedgerSnapshot {
        self.inner.shared.ledger.snapshot()
    }

    /// Requests in progress, those whose client already left included (`fault_server_in_flight`
    /// in `/metrics`). A harness waits for zero before it reads the ledger, so late side
    /// effects of abandoned requests are not missed.
    pub fn in_flight(&self) -> u64 {
        u64::try_from(
            self.inner
                .shared
                .metrics
                .in_flight
                .load(std::sync::atomic::Ordering::Relaxed),
        )
        .unwrap_or(0)
    }

    /// Connections accepted since the server started (never reset), whatever they sent:
    /// with no request in the ledger, they tell a client that sent no HTTP from one
    /// that never connected.
    pub fn connections_accepted(&self) -> u64 {
        self.inner
            .shared
            .metrics
            .connections_accepted
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The script in force.
    pub fn script(&self) -> Arc<Script> {
        Arc::clone(&self.inner.shared.active().script)
    }

    /// The seed in force.
    pub fn seed(&self) -> u64 {
        self.inner.shared.active().seed
    }

    /// Graceful shutdown: stops accepting, ends held (`timeout`) requests, lets requests
    /// in progress finish for up to the grace period, then closes what is left. Returns
    /// when every connection is closed.
    pub async fn shutdown(self) {
        let inner = &self.inner;
        inner.shared.stop.shutdown.cancel();
        let accept = inner
            .accept
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(accept) = accept {
            let _ = accept.await;
        }
        inner.tracker.close();
        if tokio::time::timeout(inner.shutdown_grace, inner.tracker.wait())
            .await
            .is_err()
        {
            inner.shared.stop.force.cancel();
            inner.tracker.wait().await;
        }
    }
}
