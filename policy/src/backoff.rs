//! How long to wait before a retry.
//!
//! Why jitter: failures are correlated, so clients that fail together and wait the same
//! time retry together. Exponential backoff lowers the pace but keeps them in phase;
//! jitter breaks the phase. The formulas are those of "Exponential Backoff And Jitter"
//! (AWS Architecture Blog, 2015), with `exp = min(cap, base · multiplier^(k-1))` for the
//! k-th retry, so base 100 ms × 2 waits 100, 200, 400, 800 ms, … up to the cap.

use std::time::Duration;

use rand_core::Rng;

use crate::error::{ConfigError, positive};
use crate::random::uniform_duration;

/// How the computed delay is randomised.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum Jitter {
    /// `exp`: every client waits the same, and stays in phase.
    #[default]
    None,
    /// `U(0, exp)`.
    Full,
    /// `exp/2 + U(0, exp/2)`.
    Equal,
    /// `min(cap, U(base, 3 · previous))`, starting from `previous = base`.
    Decorrelated,
    /// `min(cap, exp + U(0, factor · exp))`: tower's `ExponentialBackoff` adds jitter on top.
    Additive(f64),
    /// `exp · U(1 − spread, 1 + spread)`, after the cap, so it may exceed the cap by
    /// `spread`: gRPC's retry backoff since gRFC A6 was amended (grpc/proposal#452, 2024),
    /// `min(initialBackoff · multiplier^(n−1), maxBackoff) · random(0.8, 1.2)`, i.e. 0.2.
    Proportional(f64),
}

/// A backoff's shape before jitter, as plans write it (`none`, `fixed`, `exponential`,
/// `envoy`): what a report or `harness validate --explain` writes out, and what a plan's
/// partial `backoff:` keeps from the policy it overrides.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum BackoffShape {
    /// No wait: a retry goes out as soon as the failure is known.
    None,
    /// The same wait before every retry.
    Fixed(Duration),
    /// `min(cap, base · multiplier^(k-1))` before the k-th retry: the pace falls as an
    /// outage lasts.
    Exponential {
        /// The first retry's wait, before jitter.
        base: Duration,
        /// How much each wait grows over the one before (at least 1).
        multiplier: f64,
        /// The longest wait, however many retries came before.
        cap: Duration,
    },
    /// Envoy's `(2^k - 1) · base`, capped: 25, 75, 175 ms … for a 25 ms base.
    Envoy {
        /// Envoy's `base_interval`: the first retry's wait before jitter, and the unit of
        /// every later one.
        base: Duration,
        /// Envoy's `max_interval`: the longest wait.
        cap: Duration,
    },
}

/// A validated backoff: a shape (none, fixed, exponential) and a jitter.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    shape: BackoffShape,
    jitter: Jitter,
}

impl Backoff {
    /// Retry at once.
    pub fn none() -> Backoff {
        Backoff {
            shape: BackoffShape::None,
            jitter: Jitter::None,
        }
    }

    /// The same wait before every retry.
    pub fn fixed(delay: Duration) -> Backoff {
        Backoff {
            shape: BackoffShape::Fixed(delay),
            jitter: Jitter::None,
        }
    }

    /// `min(cap, base · multiplier^(k-1))` before the k-th retry.
    pub fn exponential(
        base: Duration,
        multiplier: f64,
        cap: Duration,
    ) -> Result<Backoff, ConfigError> {
        positive("backoff.base", base).map_err(|_| ConfigError::ZeroBase)?;
        if !(multiplier.is_finite() && multiplier >= 1.0) {
            return Err(ConfigError::MultiplierBelowOne(multiplier));
        }
        if cap < base {
            return Err(ConfigError::CapBelowBase { base, cap });
        }
        Ok(Backoff {
            shape: BackoffShape::Exponential {
                base,
                multiplier,
                cap,
            },
            jitter: Jitter::None,
        })
    }

    /// Envoy's route retry back-off ceiling, `min(cap, (2^k - 1) · base)` before the k-th
    /// retry; with [`Jitter::Full`] it is Envoy's "fully jittered exponential back-off".
    pub fn envoy(base: Duration, cap: Duration) -> Result<Backoff, ConfigError> {
        positive("backoff.base", base).map_err(|_| ConfigError::ZeroBase)?;
        if cap < base {
            return Err(ConfigError::CapBelowBase { base, cap });
        }
        Ok(Backoff {
            shape: BackoffShape::Envoy { base, cap },
            jitter: Jitter::None,
        })
    }

    /// The same shape, randomised by `jitter`; an additive factor below 0 or a
    /// proportional spread outside `[0, 1]` is refused.
    pub fn with_jitter(self, jitter: Jitter) -> Result<Backoff, ConfigError> {
        match jitter {
            Jitter::Additive(factor) => {
                crate::error::non_negative("backoff.jitter_factor", factor)?;
            }
            Jitter::Proportional(spread) => {
                crate::error::fraction("backoff.jitter_spread", spread)?;
            }
            Jitter::None | Jitter::Full | Jitter::Equal | Jitter::Decorrelated => {}
        }
        Ok(Backoff { jitter, ..self })
    }

    /// How the delay is randomised, for reports and for writing the policy back out.
    pub fn jitter(&self) -> Jitter {
        self.jitter
    }

    /// The shape before jitter, for reports and for writing the policy back out.
    pub fn shape(&self) -> BackoffShape {
        self.shape
    }

    /// The longest delay this backoff draws: the cap, or above it by a proportional
    /// jitter's spread.
    pub fn max_delay(&self) -> Duration {
        let (_, cap) = self.base_and_cap();
        match self.jitter {
            Jitter::Proportional(spread) => scale(cap, 1.0 + spread),
            Jitter::None
            | Jitter::Full
            | Jitter::Equal
            | Jitter::Decorrelated
            | Jitter::Additive(_) => cap,
        }
    }

    /// The base and cap of the shape (equal for a fixed delay, zero for none).
    pub fn base_and_cap(&self) -> (Duration, Duration) {
        match self.shape {
            BackoffShape::None => (Duration::ZERO, Duration::ZERO),
            BackoffShape::Fixed(d) => (d, d),
            BackoffShape::Exponential { base, cap, .. } | BackoffShape::Envoy { base, cap } => {
                (base, cap)
            }
        }
    }

    /// `exp` for the k-th retry (k counts from 1), before jitter.
    pub fn ceiling(&self, retry: u32) -> Duration {
        match self.shape {
            BackoffShape::None => Duration::ZERO,
            BackoffShape::Fixed(d) => d,
            BackoffShape::Exponential {
                base,
                multiplier,
                cap,
            } => {
                let exponent = i32::try_from(retry.saturating_sub(1)).unwrap_or(i32::MAX);
                let secs = base.as_secs_f64() * multiplier.powi(exponent);
                if secs.is_finite() && secs < cap.as_secs_f64() {
                    Duration::from_secs_f64(secs).min(cap)
                } else {
                    cap
                }
            }
            BackoffShape::Envoy { base, cap } => {
                let factor = 2u32.checked_pow(retry.min(31)).map_or(u32::MAX, |p| p - 1);
                base.checked_mul(factor).map_or(cap, |d| d.min(cap))
            }
        }
    }

    /// The range the k-th retry's delay is drawn from. `previous` is the delay drawn before
    /// the previous retry (decorrelated jitter depends on it; `None` before the first).
    pub fn range(&self, retry: u32, previous: Option<Duration>) -> (Duration, Duration) {
        let exp = self.ceiling(retry);
        match self.jitter {
            Jitter::None => (exp, exp),
            Jitter::Full => (Duration::ZERO, exp),
            Jitter::Equal => (exp / 2, exp),
            Jitter::Decorrelated => {
                let (base, cap) = self.base_and_cap();
                let previous = previous.unwrap_or(base).max(base);
                let high = previous.saturating_mul(3);
                (base.min(cap), high.min(cap))
            }
            Jitter::Additive(factor) => {
                let (_, cap) = self.base_and_cap();
                let high =
                    Duration::try_from_secs_f64(exp.as_secs_f64() * (1.0 + factor)).unwrap_or(cap);
                (exp, high.min(cap).max(exp))
            }
            Jitter::Proportional(spread) => (scale(exp, 1.0 - spread), scale(exp, 1.0 + spread)),
        }
    }

    /// Draws the delay before the k-th retry.
    pub fn delay<R: Rng + ?Sized>(
        &self,
        retry: u32,
        previous: Option<Duration>,
        rng: &mut R,
    ) -> Duration {
        match self.jitter {
            Jitter::None => self.ceiling(retry),
            Jitter::Full | Jitter::Equal | Jitter::Additive(_) | Jitter::Proportional(_) => {
                let (low, high) = self.range(retry, previous);
                uniform_duration(rng, low, high)
            }
            Jitter::Decorrelated => {
                // Drawn on [base, 3·previous] and then capped, as the formula reads, so the
                // cap is a reachable point mass rather than a truncated range.
                let (base, cap) = self.base_and_cap();
                let previous = previous.unwrap_or(base).max(base);
                uniform_duration(rng, base, previous.saturating_mul(3)).min(cap)
            }
        }
    }
}

/// `d · factor` for a factor in [0, 2], saturating at `Duration::MAX` where
/// `Duration::mul_f64` would panic.
fn scale(d: Duration, factor: f64) -> Duration {
    Duration::try_from_secs_f64(d.as_secs_f64() * factor).unwrap_or(Duration::MAX)
}

impl Default for Backoff {
    /// Exponential from 100 ms, doubling, capped at 5 s, with full jitter: a safe default.
    fn default() -> Backoff {
        Backoff {
            shape: BackoffShape::Exponential {
                base: Duration::from_millis(100),
                multiplier: 2.0,
                cap: Duration::from_secs(5),
            },
            jitter: Jitter::Full,
        }
    }
}
