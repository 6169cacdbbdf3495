//! The embeddable server: configuration, start, and the handle that scripts, resets and
//! stops it.
//!
//! Why a handle and not just a binary: the harness starts a fault-server in-process on
//! `127.0.0.1:0` for every policy it compares, installs the plan's script, runs the load,
//! reads the ledger and stops it, without a subprocess or a fixed port.
//!
//! The run clock: a script's windows (`from`, `until`) are measured from the moment the
//! script was installed ([`ServerHandle::set_script`], `PUT /__chaos/script`) or the
//! server was reset ([`ServerHandle::reset`], `POST /__chaos/reset`), whichever came last.

mod conn;
mod control;
mod handler;

use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use thiserror::Error;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::capacity::{Admission, CapacityLimits, CapacityModel, Ticket};
use crate::ledger::{Ledger, LedgerLimits, LedgerSnapshot};
use crate::metrics::{CapacityGauges, Metrics};
use crate::script::Script;

/// The default cap on how long a `timeout` fault holds a request: a minute, well above
/// the attempt timeouts clients use (AWS SDKs and gRPC default to seconds) and low enough
/// that hung requests cannot pile up for ever.
pub const DEFAULT_HANG_CAP: Duration = Duration::from_secs(60);

/// How long a graceful shutdown waits for requests in progress (delays, queued and
/// served requests) before it closes their connections.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// The largest request body read: 1 MiB (larger bodies get 413).
pub const DEFAULT_MAX_BODY: usize = 1 << 20;

/// How to run a server.
#[derive(Clone)]
pub struct ServerConfig {
    /// Where to listen; `127.0.0.1:0` (loopback, a free port) by default.
    pub listen: SocketAddr,
    /// The fault script.
    pub script: Script,
    /// Seed for fault decisions (a script's own `seed:` does not override this one; a
    /// script installed later with a `seed:` does).
    pub seed: u64,
    /// A bearer token required by the control API (`/__chaos/`), if any.
    pub token: Option<String>,
    /// The longest a `timeout` fault holds a request before closing its connection.
    pub hang_cap: Duration,
    /// How long [`ServerHandle::shutdown`] waits for requests in progress.
    pub shutdown_grace: Duration,
    /// The largest request body accepted.
    pub max_body: usize,
    /// How much the ledger remembers.
    pub ledger: LedgerLimits,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            script: Script::empty(),
            seed: 0,
            token: None,
            hang_cap: DEFAULT_HANG_CAP,
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
            max_body: DEFAULT_MAX_BODY,
            ledger: LedgerLimits::default(),
        }
    }
}

impl ServerConfig {
    /// The default configuration with this script (and the script's seed, if it has one).
    pub fn with_script(script: Script) -> ServerConfig {
        ServerConfig {
            seed: script.seed().unwrap_or(0),
            script,
            ..ServerConfig::default()
        }
    }
}

impl fmt::Debug for ServerConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerConfig")
            .field("listen", &self.listen)
            .field("script", &self.script)
            .field("seed", &self.seed)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("hang_cap", &self.hang_cap)
            .field("shutdown_grace", &self.shutdown_grace)
            .field("max_body", &self.max_body)
            .field("ledger", &self.ledger)
            .finish()
    }
}

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

/// The live capacity model: the pure [`CapacityModel`] under a mutex, plus the wake-up
/// channel of each queued request.
#[derive(Debug)]
pub(crate) struct LiveCapacity {
    pub(crate) limits: CapacityLimits,
    epoch: Instant,
    state: Mutex<CapacityState>,
}

#[derive(Debug)]
struct CapacityState {
    model: CapacityModel,
    waiters: std::collections::HashMap<Ticket, oneshot::Sender<()>>,
}

/// A request's place in the capacity model; leaving (drop) frees it and starts the next
/// queued request.
#[derive(Debug)]
pub(crate) struct Slot {
    capacity: Arc<LiveCapacity>,
    ticket: Ticket,
}

impl LiveCapacity {
    fn new(limits: CapacityLimits) -> LiveCapacity {
        LiveCapacity {
            limits,
            epoch: Instant::now(),
            state: Mutex::new(CapacityState {
                model: CapacityModel::new(&limits),
                waiters: std::collections::HashMap::new(),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, CapacityState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Arrives, waits in the queue if needed, and returns the slot; `None` is a rejection.
    pub(crate) async fn admit(self: &Arc<Self>) -> Option<Slot> {
        let (slot, wait) = {
            let mut state = self.lock();
            match state.model.arrive(self.epoch.elapsed()) {
                Admission::Rejected => return None,
                Admission::Serve(ticket) => (
                    Slot {
                        capacity: Arc::clone(self),
                        ticket,
                    },
                    None,
                ),
                Admission::Queued(ticket) => {
                    let (tx, rx) = oneshot::channel();
                    state.waiters.insert(ticket, tx);
                    (
                        Slot {
                            capacity: Arc::clone(self),
                            ticket,
                        },
                        Some(rx),
                    )
                }
            }
        };
        if let Some(rx) = wait {
            // The sender is dropped only when this ticket is removed from the model,
            // which happens when it starts (sent) or when this slot drops.
            let _ = rx.await;
        }
        Some(slot)
    }

    fn gauges(&self) -> CapacityGauges {
        let state = self.lock();
        CapacityGauges {
            serving: state.model.serving() as u64,
            queued: state.model.queued() as u64,
            capacity: self.limits.capacity.map(|c| u64::from(c.get())),
            queue_limit: self.limits.capacity.map(|_| u64::from(self.limits.queue)),
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut state = self.capacity.lock();
        state.waiters.remove(&self.ticket);
        if let Some(started) = state
            .model
            .finish(self.ticket, self.capacity.epoch.elapsed())
            && let Some(waiter) = state.waiters.remove(&started.ticket)
        {
            // A waiter that vanished meanwhile drops its own slot, which frees this
            // place again under the same lock.
            let _ = waiter.send(());
        }
    }
}

/// The script in force, with the run clock and capacity model that came with it.
#[derive(Debug)]
pub(crate) struct Active {
    pub(crate) script: Arc<Script>,
    pub(crate) seed: u64,
    pub(crate) epoch: Instant,
    /// Present when the script has a `server:` block with a finite capacity.
    pub(crate) capacity: Option<Arc<LiveCapacity>>,
}

impl Active {
    fn new(script: Arc<Script>, seed: u64) -> Active {
        let capacity = script
            .capacity()
            .filter(|limits| limits.capacity.is_some())
            .map(|limits| Arc::new(LiveCapacity::new(*limits)));
        Active {
            script,
            seed,
            epoch: Instant::now(),
            capacity,
        }
    }
}

/// State shared by every connection and the handle.
#[derive(Debug)]
pub(crate) struct Shared {
    active: RwLock<Arc<Active>>,
    pub(crate) ledger: Ledger,
    pub(crate) metrics: Metrics,
    pub(crate) token: Option<String>,
    pub(crate) hang_cap: Duration,
    pub(crate) max_body: usize,
    /// Epoch of the ledger's TTL clock (never reset).
    pub(crate) started: Instant,
    /// Graceful shutdown has begun: stop accepting, end held requests.
    pub(crate) shutdown: CancellationToken,
    /// The grace period is over: close every connection.
    pub(crate) force: CancellationToken,
    /// Seeds the RNG of requests without an `x-request-id`.
    pub(crate) anonymous: AtomicU64,
}

impl Shared {
    pub(crate) fn active(&self) -> Arc<Active> {
        Arc::clone(
            &self
                .active
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    fn replace_active(&self, active: Active) {
        *self
            .active
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(active);
    }

    /// Installs a script and restarts the run clock. A script with a `seed:` sets the
    /// seed; otherwise the current seed stays.
    pub(crate) fn install(&self, script: Script) {
        let seed = script.seed().unwrap_or_else(|| self.active().seed);
        self.replace_active(Active::new(Arc::new(script), seed));
        self.metrics.script_loads.fetch_add(1, Ordering::Relaxed);
    }

    /// Clears the ledger and restarts the run clock (and the capacity model).
    pub(crate) fn reset(&self) {
        let current = self.active();
        self.replace_active(Active::new(Arc::clone(&current.script), current.seed));
        self.ledger.reset();
    }

    pub(crate) fn capacity_gauges(&self) -> CapacityGauges {
        self.active()
            .capacity
            .as_ref()
            .map(|c| c.gauges())
            .unwrap_or_default()
    }

    /// Time on the ledger's clock.
    pub(crate) fn ledger_now(&self) -> Duration {
        self.started.elapsed()
    }
}

/// Starts a server: binds, then serves on a background task until
/// [`ServerHandle::shutdown`] (or until the last handle is dropped).
pub async fn start(config: ServerConfig) -> Result<ServerHandle, StartError> {
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|source| {
            if source.kind() == std::io::ErrorKind::AddrInUse {
                StartError::AddrInUse {
                    addr: config.listen,
                    source,
                }
            } else {
                StartError::Bind {
                    addr: config.listen,
                    source,
                }
            }
        })?;
    let addr = listener.local_addr().map_err(|source| StartError::Bind {
        addr: config.listen,
        source,
    })?;
    let shared = Arc::new(Shared {
        active: RwLock::new(Arc::new(Active::new(Arc::new(config.script), config.seed))),
        ledger: Ledger::new(config.ledger),
        metrics: Metrics::default(),
        token: config.token,
        hang_cap: config.hang_cap,
        max_body: config.max_body,
        started: Instant::now(),
        shutdown: CancellationToken::new(),
        force: CancellationToken::new(),
        anonymous: AtomicU64::new(0),
    });
    shared.metrics.script_loads.fetch_add(1, Ordering::Relaxed);
    let tracker = TaskTracker::new();
    let accept = tokio::spawn(conn::accept_loop(
        listener,
        Arc::clone(&shared),
        tracker.clone(),
    ));
    Ok(ServerHandle {
        inner: Arc::new(HandleInner {
            addr,
            shared,
            accept: Mutex::new(Some(accept)),
            tracker,
            shutdown_grace: config.shutdown_grace,
        }),
    })
}

/// A running server. Cheap to clone; the server stops when [`ServerHandle::shutdown`] is
/// called or the last clone is dropped (then without grace).
#[derive(Debug, Clone)]
pub struct ServerHandle {
    inner: Arc<HandleInner>,
}

#[derive(Debug)]
struct HandleInner {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: Mutex<Option<JoinHandle<()>>>,
    tracker: TaskTracker,
    shutdown_grace: Duration,
}

impl Drop for HandleInner {
    fn drop(&mut self) {
        self.shared.shutdown.cancel();
        self.shared.force.cancel();
    }
}

impl ServerHandle {
    /// The address the server listens on (the real port when asked for port 0).
    pub fn addr(&self) -> SocketAddr {
        self.inner.addr
    }

    /// `http://IP:PORT`, without a trailing slash.
    pub fn url(&self) -> String {
        format!("http://{}", self.inner.addr)
    }

    /// Replaces the script and restarts the run clock (the ledger is kept; call
    /// [`ServerHandle::reset`] too for a fresh run).
    pub fn set_script(&self, script: Script) {
        self.inner.shared.install(script);
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
        inner.shared.shutdown.cancel();
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
            inner.shared.force.cancel();
            inner.tracker.wait().await;
        }
    }
}
