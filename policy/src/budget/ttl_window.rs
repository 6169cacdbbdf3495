//! Finagle's retry budget (`RetryBudget(ttl, minRetriesPerSec, percentCanRetry)`), which
//! Linkerd and tower copied: retries over the last `ttl` may be `ratio` of the requests over
//! the same `ttl`, plus a reserve of `min_per_sec · ttl` so a quiet client can still retry.
//!
//! tower's `TpsBudget` converts its per-request deposit and withdrawal amounts to integers
//! and truncates them (tower-rs/tower#857), so its effective ratio differs from the one
//! configured. Here the counts stay integers and the ratio is applied once, in `f64`, at
//! the moment of the decision: the configured ratio is the ratio enforced.

use std::ops::AddAssign;
use std::time::Duration;

use super::{Grant, RetryBudget, RunCounts, amplification};
use crate::error::{ConfigError, non_negative, positive};
use crate::outcome::Outcome;
use crate::window::Window;

#[derive(Debug, Clone, Copy, Default)]
struct Flow {
    requests: u64,
    retries: u64,
}

impl AddAssign for Flow {
    fn add_assign(&mut self, other: Flow) {
        self.requests += other.requests;
        self.retries += other.retries;
    }
}

/// Finagle's budget: the retries of the last `ttl` may be `ratio` of its requests, plus a
/// reserve for a quiet client.
#[derive(Debug, Clone)]
pub struct TtlWindow {
    ratio: f64,
    min_per_sec: f64,
    ttl: Duration,
    flow: Window<Flow>,
}

impl TtlWindow {
    /// An empty window over `ttl`, if `ttl` is positive and the rates are not negative.
    pub fn new(ratio: f64, min_per_sec: f64, ttl: Duration) -> Result<TtlWindow, ConfigError> {
        let ttl = positive("budget.ttl", ttl)?;
        Ok(TtlWindow {
            ratio: non_negative("budget.ratio", ratio)?,
            min_per_sec: non_negative("budget.min_per_sec", min_per_sec)?,
            ttl,
            flow: Window::new(ttl),
        })
    }

    fn reserve(&self) -> f64 {
        self.min_per_sec * self.ttl.as_secs_f64()
    }
}

impl RetryBudget for TtlWindow {
    fn on_request(&mut self, now: Duration) {
        self.flow.add(
            now,
            Flow {
                requests: 1,
                retries: 0,
            },
        );
    }

    fn on_attempt(
        &mut self,
        _now: Duration,
        _outcome: Outcome,
        _retryable: bool,
        _grant: Option<Grant>,
    ) {
    }

    fn try_withdraw(&mut self, now: Duration, _after: Outcome) -> Option<Grant> {
        (self.level(now) >= 1.0).then(|| {
            self.flow.add(
                now,
                Flow {
                    requests: 0,
                    retries: 1,
                },
            );
            Grant { cost: 1.0 }
        })
    }

    fn level(&self, now: Duration) -> f64 {
        let flow = self.flow.sum(now);
        self.ratio * flow.requests as f64 + self.reserve() - flow.retries as f64
    }

    /// `1 + (min_per_sec · (duration + ttl) + ratio · logical) / logical`: the ratio's share
    /// of all requests, plus one reserve for each `ttl` the run touches.
    fn bound(&self, run: RunCounts) -> Option<f64> {
        let reserve = self.min_per_sec * (run.duration + self.ttl).as_secs_f64();
        Some(amplification(
            reserve + self.ratio * run.logical as f64,
            run.logical,
        ))
    }
}
