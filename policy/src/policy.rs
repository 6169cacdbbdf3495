//! A retry policy: everything one client decides with, validated once.

use std::time::Duration;

use crate::backoff::Backoff;
use crate::breaker::BreakerConfig;
use crate::budget::BudgetConfig;
use crate::error::{ConfigError, positive};
use crate::outcome::RetryOn;

/// What to do with a server's `Retry-After` (or gRPC's pushback).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RetryAfter {
    /// Wait the computed backoff whatever the server says.
    #[default]
    Ignore,
    /// Wait what the server asked instead of the backoff, but never more than `max`.
    Honor {
        /// The longest wait a server can ask for and get: a misconfigured or hostile
        /// `Retry-After` cannot stall the client for hours.
        max: Duration,
    },
    /// Wait what the server asked, clamped to `[backoff, backoff + max_extra]` (the AWS SDKs'
    /// 2026 behaviour for `x-amz-retry-after`).
    Clamp {
        /// How much longer than its own backoff the client waits at most for the server.
        max_extra: Duration,
    },
}

/// The fields of a policy, as a plan or a preset states them.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyConfig {
    /// Attempts in all, the first included (1 = never retry).
    pub max_attempts: u32,
    /// How long one attempt may take; `None` leaves it to the deadline.
    pub attempt_timeout: Option<Duration>,
    /// How long the whole logical request may take, attempts and waits included.
    pub deadline: Option<Duration>,
    /// How long to wait before each retry.
    pub backoff: Backoff,
    /// Which failures are worth retrying.
    pub retry_on: RetryOn,
    /// Retry non-idempotent requests after any retryable failure, not only after one that
    /// proves the request unsent. Deliberately unsafe, for showing what the gates catch.
    pub retry_non_idempotent: bool,
    /// What a server's `Retry-After` or gRPC pushback does to the wait.
    pub retry_after: RetryAfter,
    /// The client-wide limit on retries, relative to its traffic; `None`: only
    /// `max_attempts` limits them.
    pub budget: Option<BudgetConfig>,
    /// The client-wide circuit breaker; `None`: attempts are never refused.
    pub breaker: Option<BreakerConfig>,
    /// Do not retry an answer that says the service behind it already gave up (a relay
    /// tier's `x-chaos-no-retry`, the SRE book's "overloaded; don't retry"): in a call
    /// chain, only the tier next to the failure retries.
    pub honor_no_retry: bool,
}

impl Default for PolicyConfig {
    /// Three attempts, exponential backoff with full jitter, transient failures only, no
    /// budget and no breaker.
    fn default() -> PolicyConfig {
        PolicyConfig {
            max_attempts: 3,
            attempt_timeout: None,
            deadline: None,
            backoff: Backoff::default(),
            retry_on: RetryOn::default(),
            retry_non_idempotent: false,
            retry_after: RetryAfter::Ignore,
            budget: None,
            breaker: None,
            honor_no_retry: false,
        }
    }
}

/// A validated [`PolicyConfig`]: every client built from it can run.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Policy {
    config: PolicyConfig,
}

impl Policy {
    /// The policy, if every field can work; else the first rule a field breaks.
    pub fn new(config: PolicyConfig) -> Result<Policy, ConfigError> {
        if config.max_attempts == 0 {
            return Err(ConfigError::ZeroMaxAttempts);
        }
        if let Some(timeout) = config.attempt_timeout {
            positive("attempt_timeout", timeout)?;
        }
        if let Some(deadline) = config.deadline {
            positive("deadline", deadline)?;
        }
        match config.retry_after {
            RetryAfter::Honor { max } => {
                positive("retry_after_max", max)?;
            }
            RetryAfter::Ignore | RetryAfter::Clamp { .. } => {}
        }
        if let Some(budget) = &config.budget {
            budget.build()?;
        }
        if let Some(breaker) = &config.breaker {
            breaker.validate()?;
        }
        Ok(Policy { config })
    }

    /// The fields it was built from.
    pub fn config(&self) -> &PolicyConfig {
        &self.config
    }
}
