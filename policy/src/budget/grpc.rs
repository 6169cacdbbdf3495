//! gRPC retry throttling, as gRFC A6 specifies it: the bucket starts full at `max_tokens`;
//! every attempt that fails with a retryable status costs one token, every success refills
//! `token_ratio`; retries are allowed only while the count is above `max_tokens / 2`.
//!
//! Unlike a bucket, a retry itself is free: it is its failure that costs. So in a total
//! outage from a full bucket of 10, the failures take the count 10 → 9 → 8 → 7 → 6 with a
//! retry allowed after each, and then 6 → 5 stops them: four retries, client-wide.

use std::time::Duration;

use super::{Grant, RetryBudget, RunCounts, amplification};
use crate::error::{ConfigError, non_negative};
use crate::outcome::Outcome;

/// gRPC's retry throttling (gRFC A6): retries stop while fewer than half the tokens are
/// left, and only successes bring them back.
#[derive(Debug, Clone)]
pub struct GrpcThrottle {
    max_tokens: f64,
    token_ratio: f64,
    tokens: f64,
}

impl GrpcThrottle {
    /// A full bucket of `max_tokens`, if it is within A6's limits (above 0, at most 1000).
    pub fn new(max_tokens: f64, token_ratio: f64) -> Result<GrpcThrottle, ConfigError> {
        let max_tokens = non_negative("budget.max_tokens", max_tokens)?;
        let token_ratio = non_negative("budget.token_ratio", token_ratio)?;
        // gRFC A6: "maxTokens ... must be greater than zero and <= 1000".
        if max_tokens <= 0.0 {
            return Err(ConfigError::TooSmall {
                field: "budget.max_tokens",
                value: max_tokens,
                min: f64::MIN_POSITIVE,
            });
        }
        if max_tokens > 1000.0 {
            return Err(ConfigError::TooLarge {
                field: "budget.max_tokens",
                value: max_tokens,
                max: 1000.0,
            });
        }
        Ok(GrpcThrottle {
            max_tokens,
            token_ratio,
            tokens: max_tokens,
        })
    }
}

impl RetryBudget for GrpcThrottle {
    fn on_request(&mut self, _now: Duration) {}

    fn on_attempt(
        &mut self,
        _now: Duration,
        outcome: Outcome,
        retryable: bool,
        _grant: Option<Grant>,
    ) {
        if outcome.is_success() {
            self.tokens = (self.tokens + self.token_ratio).min(self.max_tokens);
        } else if retryable {
            self.tokens = (self.tokens - 1.0).max(0.0);
        }
    }

    fn try_withdraw(&mut self, _now: Duration, _after: Outcome) -> Option<Grant> {
        (self.tokens > self.max_tokens / 2.0).then_some(Grant { cost: 0.0 })
    }

    fn level(&self, _now: Duration) -> f64 {
        self.tokens
    }

    /// `1 + (max_tokens / 2 + token_ratio · logical) / logical`. Each retry follows a failure
    /// that left the count above half; the count can fall through that upper half only by
    /// what it started with above half plus what successes (at most one per logical
    /// request) refilled.
    fn bound(&self, run: RunCounts) -> Option<f64> {
        Some(amplification(
            self.max_tokens / 2.0 + self.token_ratio * run.logical as f64,
            run.logical,
        ))
    }
}
