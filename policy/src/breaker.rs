//! A client-wide circuit breaker: closed, open, half-open.
//!
//! Closed, it counts attempts and server failures over a sliding `window`; when at least
//! `min_requests` were seen and the failure share reaches `failure_ratio`, it opens. Open, it
//! refuses every attempt for `open_for`. Then it lets `half_open_probes` attempts through:
//! if they all succeed it closes with a clean window; the first failure opens it again.
//!
//! A 4xx other than 408/429 counts as a success here: it says the request was wrong, not
//! that the server is sick (resilience4j's `ignoreExceptions`, Envoy's outlier detection
//! on 5xx), and a server that answers it is up.

use std::ops::AddAssign;
use std::time::Duration;

use crate::error::{ConfigError, fraction, positive};
use crate::outcome::Outcome;
use crate::window::Window;

/// The breaker's parameters, validated by [`Breaker::new`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BreakerConfig {
    /// The failure share (0–1] at which it opens.
    pub failure_ratio: f64,
    /// Attempts the window must hold before the ratio means anything.
    pub min_requests: u32,
    /// How far back the ratio looks.
    pub window: Duration,
    /// How long it stays open before probing.
    pub open_for: Duration,
    /// Probe attempts let through half-open; all must succeed to close.
    pub half_open_probes: u32,
}

impl BreakerConfig {
    /// Checks every parameter can work (a ratio in (0, 1], positive durations, at least
    /// one request and one probe), naming the first that cannot.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let ratio = fraction("breaker.failure_ratio", self.failure_ratio)?;
        if ratio == 0.0 {
            return Err(ConfigError::TooSmall {
                field: "breaker.failure_ratio",
                value: ratio,
                min: f64::MIN_POSITIVE,
            });
        }
        positive("breaker.window", self.window)?;
        positive("breaker.open_for", self.open_for)?;
        if self.min_requests == 0 {
            return Err(ConfigError::TooSmall {
                field: "breaker.min_requests",
                value: 0.0,
                min: 1.0,
            });
        }
        if self.half_open_probes == 0 {
            return Err(ConfigError::TooSmall {
                field: "breaker.half_open_probes",
                value: 0.0,
                min: 1.0,
            });
        }
        Ok(())
    }
}

/// Where the breaker stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BreakerState {
    /// Attempts go through, and their outcomes are counted over the window.
    Closed,
    /// Too many failures: every attempt is refused until `open_for` has passed.
    Open,
    /// Probing: a few attempts go through to find out whether the server is back.
    HalfOpen,
}

#[derive(Debug, Clone, Copy, Default)]
struct Calls {
    total: u64,
    failures: u64,
}

impl AddAssign for Calls {
    fn add_assign(&mut self, other: Calls) {
        self.total += other.total;
        self.failures += other.failures;
    }
}

/// The breaker's leave for one attempt, handed back with its outcome. Half-open, only the
/// probes admitted since the breaker last opened decide whether it closes; attempts that
/// were already out when it opened report into nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Permit {
    epoch: u64,
    probe: bool,
}

#[derive(Debug, Clone, Copy)]
enum Phase {
    Closed,
    Open { until: Duration },
    HalfOpen { admitted: u32, succeeded: u32 },
}

/// A client-wide circuit breaker: it stops every attempt for a while once enough of them
/// fail, so a failing server gets time to recover instead of the client's full load.
#[derive(Debug, Clone)]
pub struct Breaker {
    config: BreakerConfig,
    calls: Window<Calls>,
    phase: Phase,
    /// Times it has opened, for reports; also the epoch that tells stale permits apart.
    trips: u64,
}

impl Breaker {
    /// A closed breaker with an empty window, if `config` is valid.
    pub fn new(config: BreakerConfig) -> Result<Breaker, ConfigError> {
        config.validate()?;
        Ok(Breaker {
            calls: Window::new(config.window),
            config,
            phase: Phase::Closed,
            trips: 0,
        })
    }

    /// The state at `now`: an open breaker whose time is up reads half-open.
    pub fn state(&self, now: Duration) -> BreakerState {
        match self.phase {
            Phase::Closed => BreakerState::Closed,
            Phase::Open { until } if now >= until => BreakerState::HalfOpen,
            Phase::Open { .. } => BreakerState::Open,
            Phase::HalfOpen { .. } => BreakerState::HalfOpen,
        }
    }

    /// Times it has opened, for reports.
    pub fn trips(&self) -> u64 {
        self.trips
    }

    /// Asks to send an attempt at `now`; half-open, this takes one of the probe slots.
    pub fn try_admit(&mut self, now: Duration) -> Option<Permit> {
        if let Phase::Open { until } = self.phase {
            if now < until {
                return None;
            }
            self.phase = Phase::HalfOpen {
                admitted: 0,
                succeeded: 0,
            };
        }
        let epoch = self.trips;
        match &mut self.phase {
            Phase::Closed => Some(Permit {
                epoch,
                probe: false,
            }),
            Phase::HalfOpen { admitted, .. } if *admitted < self.config.half_open_probes => {
                *admitted += 1;
                Some(Permit { epoch, probe: true })
            }
            Phase::HalfOpen { .. } | Phase::Open { .. } => None,
        }
    }

    /// Records what an attempt admitted with `permit` produced.
    pub fn record(&mut self, now: Duration, outcome: Outcome, permit: Permit) {
        let failed = outcome.is_server_failure();
        let current_probe = permit.probe && permit.epoch == self.trips;
        match &mut self.phase {
            // A probe of an earlier half-open period, or an attempt admitted before the last
            // trip, reporting late: it says nothing of the window that began since.
            Phase::Closed if permit.probe || permit.epoch != self.trips => {}
            Phase::Closed => {
                self.calls.add(
                    now,
                    Calls {
                        total: 1,
                        failures: u64::from(failed),
                    },
                );
                let seen = self.calls.sum(now);
                let tripped = seen.total >= u64::from(self.config.min_requests)
                    && seen.failures as f64 >= self.config.failure_ratio * seen.total as f64;
                if tripped {
                    self.open(now);
                }
            }
            Phase::HalfOpen { .. } if !current_probe => {}
            Phase::HalfOpen { succeeded, .. } => {
                if failed {
                    self.open(now);
                } else {
                    *succeeded += 1;
                    if *succeeded >= self.config.half_open_probes {
                        self.calls.clear();
                        self.phase = Phase::Closed;
                    }
                }
            }
            // Attempts admitted before it opened still report; the open period stands.
            Phase::Open { .. } => {}
        }
    }

    fn open(&mut self, now: Duration) {
        self.trips += 1;
        self.phase = Phase::Open {
            until: now + self.config.open_for,
        };
    }
}
