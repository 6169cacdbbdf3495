//! Envoy's retry budget (`circuit_breakers.thresholds.retry_budget`): a limit on retries in
//! flight at once, `max(percent · active requests, min_concurrency)`, not on their number.
//!
//! Active requests here are the client's logical requests in progress, Envoy's "active and
//! pending requests" to the cluster. A retry is active from the moment it is granted
//! (its backoff included) until its attempt completes. Because the limit is on concurrency,
//! the total it allows depends on how long attempts take: it implies no amplification bound
//! of its own (`bound` is `None`), and a plan gates such a policy on `amplification` instead.

use std::time::Duration;

use super::{Grant, RetryBudget, RunCounts};
use crate::error::{ConfigError, non_negative};
use crate::outcome::Outcome;

/// Envoy's retry budget: at most `max(percent% of active requests, min_concurrency)`
/// retries in flight at once.
#[derive(Debug, Clone)]
pub struct Concurrency {
    percent: f64,
    min_concurrency: u32,
    active_requests: u64,
    active_retries: u64,
}

impl Concurrency {
    /// A budget with nothing active, if `percent` is within 0-100.
    pub fn new(percent: f64, min_concurrency: u32) -> Result<Concurrency, ConfigError> {
        let percent = non_negative("budget.budget_percent", percent)?;
        if percent > 100.0 {
            return Err(ConfigError::TooLarge {
                field: "budget.budget_percent",
                value: percent,
                max: 100.0,
            });
        }
        Ok(Concurrency {
            percent,
            min_concurrency,
            active_requests: 0,
            active_retries: 0,
        })
    }

    fn limit(&self) -> f64 {
        (self.percent / 100.0 * self.active_requests as f64).max(f64::from(self.min_concurrency))
    }
}

impl RetryBudget for Concurrency {
    fn on_request(&mut self, _now: Duration) {
        self.active_requests += 1;
    }

    fn on_attempt(
        &mut self,
        _now: Duration,
        _outcome: Outcome,
        _retryable: bool,
        grant: Option<Grant>,
    ) {
        if grant.is_some() {
            self.active_retries = self.active_retries.saturating_sub(1);
        }
    }

    fn on_finish(&mut self, _now: Duration, grant: Option<Grant>) {
        self.active_requests = self.active_requests.saturating_sub(1);
        // A retry granted but never sent (the breaker or the deadline stopped it).
        if grant.is_some() {
            self.active_retries = self.active_retries.saturating_sub(1);
        }
    }

    fn try_withdraw(&mut self, _now: Duration, _after: Outcome) -> Option<Grant> {
        ((self.active_retries as f64) < self.limit()).then(|| {
            self.active_retries += 1;
            Grant { cost: 1.0 }
        })
    }

    fn level(&self, _now: Duration) -> f64 {
        self.limit() - self.active_retries as f64
    }

    fn bound(&self, _run: RunCounts) -> Option<f64> {
        None
    }
}
