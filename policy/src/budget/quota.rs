//! The AWS SDKs' retry quota (standard retry mode): a pool that starts full; a retry costs
//! tokens (what it costs depends on the failure), a retry that then succeeds gives its cost
//! back, a first attempt that succeeds refills `success_refill`. Retries that cannot be paid
//! for are refused.

use std::time::Duration;

use super::{Grant, RetryBudget, RunCounts, amplification};
use crate::error::{ConfigError, non_negative};
use crate::outcome::Outcome;

/// What a retry costs, by the failure before it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QuotaCosts {
    /// After most transient errors (botocore `_RETRY_COST`).
    pub retry: f64,
    /// After an attempt or connect timeout (`_TIMEOUT_RETRY_REQUEST`).
    pub timeout: f64,
    /// After a throttling error, here a 429 (`_THROTTLING_RETRY_COST`, 2026 behaviour).
    pub throttling: f64,
}

/// The AWS SDKs' retry quota: a retry is paid for by its cost, and a success gives back.
#[derive(Debug, Clone)]
pub struct RetryQuota {
    capacity: f64,
    costs: QuotaCosts,
    success_refill: f64,
    available: f64,
}

impl RetryQuota {
    /// A full quota of `capacity`, if every cost is positive and nothing is negative.
    pub fn new(
        capacity: f64,
        costs: QuotaCosts,
        success_refill: f64,
    ) -> Result<RetryQuota, ConfigError> {
        let capacity = non_negative("budget.capacity", capacity)?;
        for (field, cost) in [
            ("budget.retry_cost", costs.retry),
            ("budget.timeout_cost", costs.timeout),
            ("budget.throttling_cost", costs.throttling),
        ] {
            if !(cost.is_finite() && cost > 0.0) {
                return Err(ConfigError::TooSmall {
                    field,
                    value: cost,
                    min: f64::MIN_POSITIVE,
                });
            }
        }
        Ok(RetryQuota {
            capacity,
            costs,
            success_refill: non_negative("budget.success_refill", success_refill)?,
            available: capacity,
        })
    }

    fn cost_after(&self, outcome: Outcome) -> f64 {
        match outcome {
            Outcome::AttemptTimeout | Outcome::ConnectTimeout => self.costs.timeout,
            Outcome::Status(429) => self.costs.throttling,
            _ => self.costs.retry,
        }
    }
}

impl RetryBudget for RetryQuota {
    fn on_request(&mut self, _now: Duration) {}

    fn on_attempt(
        &mut self,
        _now: Duration,
        outcome: Outcome,
        _retryable: bool,
        grant: Option<Grant>,
    ) {
        if outcome.is_success() {
            let refill = grant.map_or(self.success_refill, |g| g.cost);
            self.available = (self.available + refill).min(self.capacity);
        }
    }

    /// The cost of a retry that was never sent goes back to the quota.
    fn on_finish(&mut self, _now: Duration, pending: Option<Grant>) {
        if let Some(grant) = pending {
            self.available = (self.available + grant.cost).min(self.capacity);
        }
    }

    fn try_withdraw(&mut self, _now: Duration, after: Outcome) -> Option<Grant> {
        let cost = self.cost_after(after);
        (self.available >= cost).then(|| {
            self.available -= cost;
            Grant { cost }
        })
    }

    fn level(&self, _now: Duration) -> f64 {
        self.available
    }

    /// Failed retries are paid from the capacity and the first-attempt refills; a retry that
    /// succeeds is refunded, so it is free, but there is at most one per logical request.
    fn bound(&self, run: RunCounts) -> Option<f64> {
        let cheapest = self
            .costs
            .retry
            .min(self.costs.timeout)
            .min(self.costs.throttling);
        let logical = run.logical as f64;
        let paid = (self.capacity + self.success_refill * logical) / cheapest;
        Some(amplification(paid + logical, run.logical))
    }
}
