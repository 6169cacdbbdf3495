//! The seed design's token bucket: each retry costs one token, each successful logical
//! request refills `ratio` tokens, up to `max_tokens`; an empty bucket refuses retries.

use std::time::Duration;

use super::{Grant, RetryBudget, RunCounts, amplification};
use crate::error::{ConfigError, non_negative};
use crate::outcome::Outcome;

/// The seed design's budget: a retry costs a token, a successful request refills `ratio`.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    ratio: f64,
    max_tokens: f64,
    initial_tokens: f64,
    tokens: f64,
}

impl TokenBucket {
    /// A bucket holding `initial_tokens`, if nothing is negative and it starts no fuller
    /// than `max_tokens`.
    pub fn new(
        ratio: f64,
        max_tokens: f64,
        initial_tokens: f64,
    ) -> Result<TokenBucket, ConfigError> {
        let ratio = non_negative("budget.ratio", ratio)?;
        let max_tokens = non_negative("budget.max_tokens", max_tokens)?;
        let initial_tokens = non_negative("budget.initial_tokens", initial_tokens)?;
        if initial_tokens > max_tokens {
            return Err(ConfigError::TooLarge {
                field: "budget.initial_tokens",
                value: initial_tokens,
                max: max_tokens,
            });
        }
        Ok(TokenBucket {
            ratio,
            max_tokens,
            initial_tokens,
            tokens: initial_tokens,
        })
    }
}

impl TokenBucket {
    /// Takes up to `max` whole tokens out for a request to share with the hops below it
    /// (`share_budget`): how many it took.
    pub fn reserve(&mut self, max: u32) -> u32 {
        let n = self.tokens.floor().min(f64::from(max)).max(0.0);
        self.tokens -= n;
        n as u32
    }

    /// Puts back what a request reserved and no hop spent.
    pub fn refund(&mut self, n: u32) {
        self.tokens = (self.tokens + f64::from(n)).min(self.max_tokens);
    }
}

impl RetryBudget for TokenBucket {
    fn on_request(&mut self, _now: Duration) {}

    fn on_attempt(
        &mut self,
        _now: Duration,
        outcome: Outcome,
        _retryable: bool,
        _grant: Option<Grant>,
    ) {
        if outcome.is_success() {
            self.tokens = (self.tokens + self.ratio).min(self.max_tokens);
        }
    }

    /// A token paid for a retry that was never sent (the breaker or the deadline stopped
    /// it) goes back: it bought nothing.
    fn on_finish(&mut self, _now: Duration, pending: Option<Grant>) {
        if let Some(grant) = pending {
            self.tokens = (self.tokens + grant.cost).min(self.max_tokens);
        }
    }

    fn try_withdraw(&mut self, _now: Duration, _after: Outcome) -> Option<Grant> {
        (self.tokens >= 1.0).then(|| {
            self.tokens -= 1.0;
            Grant { cost: 1.0 }
        })
    }

    fn level(&self, _now: Duration) -> f64 {
        self.tokens
    }

    /// `1 + (initial + ratio · logical) / logical`: every retry spends a token, and tokens
    /// come only from the start and from successes (at most one per logical request).
    fn bound(&self, run: RunCounts) -> Option<f64> {
        Some(amplification(
            self.initial_tokens + self.ratio * run.logical as f64,
            run.logical,
        ))
    }
}
