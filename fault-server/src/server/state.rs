//! The state every connection and the handle share: the script in force with its run
//! clock and live capacity model, the ledger, the metrics and the stop signals.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use tokio::sync::{Semaphore, oneshot};
use tokio::time::Instant;

use super::config::ServerConfig;
use super::conn::Stop;
use crate::capacity::{Admission, CapacityLimits, CapacityModel, Ticket};
use crate::ledger::Ledger;
use crate::metrics::{CapacityGauges, Metrics};
use crate::otel::ServerTracing;
use crate::script::Script;
use crate::wire;

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
    fn new(limits: CapacityLimits, epoch: Instant) -> LiveCapacity {
        LiveCapacity {
            limits,
            epoch,
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
    /// Where the script came from: [`wire::ORIGIN_STARTUP`], [`wire::ORIGIN_HARNESS`] or
    /// [`wire::ORIGIN_CONTROL`]. A reset keeps it.
    pub(crate) origin: &'static str,
    pub(crate) seed: u64,
    pub(crate) epoch: Instant,
    /// Present when the script has a `server:` block with a finite capacity.
    pub(crate) capacity: Option<Arc<LiveCapacity>>,
}

impl Active {
    /// The script in force from `epoch` on its run clock: requests before it see time 0.
    fn new(script: Arc<Script>, seed: u64, origin: &'static str, epoch: Instant) -> Active {
        let capacity = script
            .capacity()
            .filter(|limits| limits.capacity.is_some())
            .map(|limits| Arc::new(LiveCapacity::new(*limits, epoch)));
        Active {
            script,
            origin,
            seed,
            epoch,
            capacity,
        }
    }
}

/// The state and the script in force as a connection's requests read them: taken once
/// per connection and again only when the script changes, so a request neither takes the
/// script's lock nor counts references on lines every connection shares.
#[derive(Debug)]
pub(crate) struct View {
    pub(crate) shared: Arc<Shared>,
    pub(crate) active: Arc<Active>,
    /// [`Shared::generation`] when `active` was read.
    generation: u64,
}

impl View {
    /// The state and the script in force now.
    pub(crate) fn now(shared: &Arc<Shared>) -> View {
        let slot = shared
            .active
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        View {
            shared: Arc::clone(shared),
            active: Arc::clone(&slot),
            // Read under the lock it changes under: the two agree.
            generation: shared.generation.load(Ordering::Relaxed),
        }
    }

    /// Whether the script in force is still the one this view holds.
    pub(crate) fn is_current(&self) -> bool {
        self.generation == self.shared.generation.load(Ordering::Acquire)
    }
}

/// State shared by every connection and the handle.
#[derive(Debug)]
pub(crate) struct Shared {
    active: RwLock<Arc<Active>>,
    /// Counts the replacements of `active` (a script installed, a reset), made under its
    /// write lock: a [`View`] is current while this has not moved.
    generation: AtomicU64,
    pub(crate) ledger: Ledger,
    pub(crate) metrics: Metrics,
    pub(crate) token: Option<String>,
    pub(crate) hang_cap: Duration,
    pub(crate) max_body: usize,
    /// Epoch of the ledger's TTL clock (never reset).
    pub(crate) started: Instant,
    /// Graceful shutdown (stop accepting, end held requests), then the end of its grace
    /// period (close every connection).
    pub(crate) stop: Stop,
    /// Seeds the RNG of requests without an `x-request-id`.
    pub(crate) anonymous: AtomicU64,
    /// One script parse at a time: concurrent `PUT /__chaos/script`s wait their turn
    /// rather than take a core each.
    pub(crate) script_parse: Semaphore,
    /// Where each request's SERVER span goes, when tracing is on.
    pub(crate) tracing: Option<Arc<ServerTracing>>,
    /// Told of every script installed over the control API.
    pub(crate) script_log: Option<super::config::ScriptLog>,
    /// The user's service and the client that reaches it, with `--upstream`.
    pub(crate) upstream: Option<super::upstream::Proxy>,
}

impl Shared {
    /// The state of a server starting with `config` (its script counts as the first
    /// load).
    pub(super) fn new(config: ServerConfig) -> Shared {
        let shared = Shared {
            active: RwLock::new(Arc::new(Active::new(
                Arc::new(config.script),
                config.seed,
                wire::ORIGIN_STARTUP,
                Instant::now(),
            ))),
            generation: AtomicU64::new(0),
            ledger: match config.judging {
                Some(judging) => Ledger::presized(config.ledger).judging(judging),
                None => Ledger::presized(config.ledger),
            },
            metrics: Metrics::default(),
            token: config.token,
            hang_cap: config.hang_cap,
            max_body: config.max_body,
            started: Instant::now(),
            stop: Stop::default(),
            anonymous: AtomicU64::new(0),
            script_parse: Semaphore::new(1),
            tracing: config.tracing,
            script_log: config.script_log,
            upstream: config.upstream.map(super::upstream::Proxy::new),
        };
        shared.metrics.script_loads.fetch_add(1, Ordering::Relaxed);
        shared
    }

    pub(crate) fn active(&self) -> Arc<Active> {
        Arc::clone(
            &self
                .active
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    fn replace_active(&self, active: Active) {
        let mut slot = self
            .active
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *slot = Arc::new(active);
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// Installs a script (from `origin`) and restarts the run clock. A script with a
    /// `seed:` sets the seed; otherwise the current seed stays.
    pub(crate) fn install(&self, script: Script, origin: &'static str) {
        let seed = script.seed().unwrap_or_else(|| self.active().seed);
        self.replace_active(Active::new(Arc::new(script), seed, origin, Instant::now()));
        self.metrics.script_loads.fetch_add(1, Ordering::Relaxed);
    }

    /// Clears the ledger and restarts the run clock (and the capacity model).
    pub(crate) fn reset(&self) {
        self.reset_clock_in(Duration::ZERO);
    }

    /// Clears the ledger now and starts the run clock (and the capacity model) `delay`
    /// from now: the shards of a sharded run start their schedules at an agreed instant,
    /// and the one that resets the server does so ahead of it, so no shard's first
    /// request can reach the old ledger.
    pub(crate) fn reset_clock_in(&self, delay: Duration) {
        let current = self.active();
        self.replace_active(Active::new(
            Arc::clone(&current.script),
            current.seed,
            current.origin,
            Instant::now() + delay,
        ));
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
        self.ledger_time(Instant::now())
    }

    /// The ledger's clock at `at`, for a caller that read the time already.
    pub(crate) fn ledger_time(&self, at: Instant) -> Duration {
        at.saturating_duration_since(self.started)
    }
}
