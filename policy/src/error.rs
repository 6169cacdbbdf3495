//! One error type for every rule a configuration can break.
//!
//! Each variant is one rule and says which field broke it and what to do instead, so the
//! plan loader can put it next to a file:line:column and the user knows what to type.

use std::time::Duration;

/// A policy, backoff, budget or breaker parameter that cannot work.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// `max_attempts` of 0 would never send the request at all.
    #[error("`max_attempts` is 0: a request needs at least one attempt (1 means never retry)")]
    ZeroMaxAttempts,
    /// An exponential or Envoy backoff from zero stays at zero, whatever the multiplier.
    #[error("backoff `base` is zero: use `backoff: none` for no wait, or a positive base")]
    ZeroBase,
    /// A cap below the first wait would cut every wait, the first included.
    #[error("backoff `cap` ({cap:?}) is below `base` ({base:?}): raise `cap` or lower `base`")]
    CapBelowBase {
        /// The backoff's first wait.
        base: Duration,
        /// The longest wait asked for.
        cap: Duration,
    },
    /// A multiplier below 1 (or not a number) would shrink the waits as failures go on.
    #[error(
        "backoff `multiplier` is {0}: it must be a finite number >= 1 (1 is a fixed delay; 2 doubles)"
    )]
    MultiplierBelowOne(f64),
    /// A ratio, rate or amount that is negative or not a number.
    #[error("`{field}` is {value}: it must be a finite number >= 0")]
    NegativeRatio {
        /// The field, spelt as in a plan.
        field: &'static str,
        /// What it was given.
        value: f64,
    },
    /// A share (a failure ratio, a jitter spread) above the whole.
    #[error("`{field}` is {value}: it must be between 0 and 1")]
    RatioAboveOne {
        /// The field, spelt as in a plan.
        field: &'static str,
        /// What it was given.
        value: f64,
    },
    /// A duration that has to pass (a timeout, a window, a ttl) cannot be zero.
    #[error("`{field}` is zero: it must be a positive duration")]
    ZeroDuration {
        /// The field, spelt as in a plan.
        field: &'static str,
    },
    /// A number below the least that works.
    #[error("`{field}` is {value}: it must be at least {min}")]
    TooSmall {
        /// The field, spelt as in a plan.
        field: &'static str,
        /// What it was given.
        value: f64,
        /// The least it may be.
        min: f64,
    },
    /// A number above the most that is allowed (a limit of the system the budget models,
    /// or a start above the capacity).
    #[error("`{field}` is {value}: it must be at most {max}")]
    TooLarge {
        /// The field, spelt as in a plan.
        field: &'static str,
        /// What it was given.
        value: f64,
        /// The most it may be.
        max: f64,
    },
    /// A preset name that names none of [`Preset::ALL`](crate::Preset::ALL).
    #[error("unknown preset `{name}`; known presets: {known}")]
    UnknownPreset {
        /// The name as given.
        name: String,
        /// Every preset's name, comma-separated, for the message.
        known: String,
    },
}

impl ConfigError {
    /// The field the error is about, spelt as in a plan: `max_attempts`, `backoff.cap`,
    /// `budget.ratio`, `breaker.window`, `preset`. The part before the first `.` is the
    /// key of a policy to point at; callers place errors by it, never by the message.
    pub fn field(&self) -> &'static str {
        match self {
            ConfigError::ZeroMaxAttempts => "max_attempts",
            ConfigError::ZeroBase => "backoff.base",
            ConfigError::CapBelowBase { .. } => "backoff.cap",
            ConfigError::MultiplierBelowOne(_) => "backoff.multiplier",
            ConfigError::NegativeRatio { field, .. }
            | ConfigError::RatioAboveOne { field, .. }
            | ConfigError::ZeroDuration { field }
            | ConfigError::TooSmall { field, .. }
            | ConfigError::TooLarge { field, .. } => field,
            ConfigError::UnknownPreset { .. } => "preset",
        }
    }
}

pub(crate) fn non_negative(field: &'static str, value: f64) -> Result<f64, ConfigError> {
    if value.is_finite() && value >= 0.0 {
        Ok(value)
    } else {
        Err(ConfigError::NegativeRatio { field, value })
    }
}

pub(crate) fn fraction(field: &'static str, value: f64) -> Result<f64, ConfigError> {
    let value = non_negative(field, value)?;
    if value <= 1.0 {
        Ok(value)
    } else {
        Err(ConfigError::RatioAboveOne { field, value })
    }
}

pub(crate) fn positive(field: &'static str, value: Duration) -> Result<Duration, ConfigError> {
    if value.is_zero() {
        Err(ConfigError::ZeroDuration { field })
    } else {
        Ok(value)
    }
}
