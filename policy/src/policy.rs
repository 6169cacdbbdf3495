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
    Honor { max: Duration },
    /// Wait what the server asked, clamped to `[backoff, backoff + max_extra]` (the AWS SDKs'
    /// 2026 behaviour for `x-amz-retry-after`).
    Clamp { max_extra: Duration },
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
    pub backoff: Backoff,
    pub retry_on: RetryOn,
    /// Retry non-idempotent requests after any retryable failure, not only after one that
    /// proves the request unsent. Deliberately unsafe, for showing what the gates catch.
    pub retry_non_idempotent: bool,
    pub retry_after: RetryAfter,
    pub budget: Option<BudgetConfig>,
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

    pub fn config(&self) -> &PolicyConfig {
        &self.config
    }
}
