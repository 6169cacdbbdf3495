//! Retry budgets: a client-wide limit on retries relative to new traffic.
//!
//! Why budgets and not only `max_attempts`? During an outage every request fails, so every
//! request makes all its attempts: `max_attempts: 4` turns N requests into 4N, on the server
//! that is already failing. A budget ties retries to the traffic the client is doing anyway
//! (a ratio of it), so the extra load an outage causes is bounded by a number chosen in
//! advance, whatever the outage does. Every budget here says what that number is for a run
//! ([`RetryBudget::bound`]), and the harness checks the measured amplification against it.
//!
//! Five kinds, one small interface:
//! - [`TokenBucket`]: each retry costs a token; each successful request refills `ratio`.
//! - [`TtlWindow`]: Finagle's `RetryBudget` (also Linkerd's and tower's): retries may be
//!   `ratio` of the requests of the last `ttl`, plus `min_per_sec`.
//! - [`GrpcThrottle`]: gRPC retry throttling (gRFC A6).
//! - [`RetryQuota`]: the AWS SDKs' retry quota (standard retry mode).
//! - [`Concurrency`]: Envoy's retry budget, a limit on retries in flight.

mod concurrency;
mod grpc;
mod quota;
mod token_bucket;
mod ttl_window;

use std::time::Duration;

pub use concurrency::Concurrency;
pub use grpc::GrpcThrottle;
pub use quota::{QuotaCosts, RetryQuota};
pub use token_bucket::TokenBucket;
pub use ttl_window::TtlWindow;

use crate::error::ConfigError;
use crate::outcome::Outcome;

/// What a granted retry withdrew, handed back when its attempt completes (a quota refunds
/// it on success).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Grant {
    /// What the retry took out of the budget: a token, a quota's cost, a place among the
    /// retries in flight, or nothing for a budget that charges failures instead (gRPC's
    /// throttling).
    pub cost: f64,
}

/// The counts of a finished run that a budget's bound depends on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunCounts {
    /// Logical requests issued.
    pub logical: u64,
    /// How long arrivals ran.
    pub duration: Duration,
}

/// The interface every budget implements. Time is an argument; nothing here reads a clock.
pub trait RetryBudget {
    /// A new logical request is about to make its first attempt.
    fn on_request(&mut self, now: Duration);

    /// An attempt completed with `outcome`; `retryable` says whether the policy's `retry_on`
    /// matched it, `grant` is what paid for the attempt if it was a retry.
    fn on_attempt(
        &mut self,
        now: Duration,
        outcome: Outcome,
        retryable: bool,
        grant: Option<Grant>,
    );

    /// The logical request is done; `pending` is a grant it got but never spent on an
    /// attempt (the breaker or the deadline stopped the retry).
    fn on_finish(&mut self, _now: Duration, _pending: Option<Grant>) {}

    /// Asks to retry after `after`. `Some` grants it and has already paid for it.
    fn try_withdraw(&mut self, now: Duration, after: Outcome) -> Option<Grant>;

    /// The budget's current level, for the time series (tokens or retries available).
    fn level(&self, now: Duration) -> f64;

    /// The highest amplification (attempts / logical requests) this budget permits over a
    /// run with these counts; `None` when it limits something else (concurrency).
    fn bound(&self, run: RunCounts) -> Option<f64>;
}

/// The parameters of a budget, validated by [`BudgetConfig::build`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum BudgetConfig {
    /// The seed design's token bucket.
    TokenBucket {
        /// Tokens refilled by each successful logical request.
        ratio: f64,
        /// The bucket's capacity.
        max_tokens: f64,
        /// Tokens at the start (at most `max_tokens`).
        initial_tokens: f64,
    },
    /// Finagle's windowed budget.
    TtlWindow {
        /// Retries allowed per request of the window.
        ratio: f64,
        /// Retries always allowed per second, however little traffic there is.
        min_per_sec: f64,
        /// How long a request (and a retry) counts.
        ttl: Duration,
    },
    /// gRPC retry throttling.
    GrpcThrottle {
        /// The bucket's capacity, and where it starts (gRFC A6: 0 < max_tokens <= 1000).
        max_tokens: f64,
        /// Tokens a successful attempt refills (gRFC A6: > 0).
        token_ratio: f64,
    },
    /// The AWS SDKs' retry quota.
    RetryQuota {
        /// The quota's capacity, and where it starts.
        capacity: f64,
        /// What a retry costs, by the failure before it.
        costs: QuotaCosts,
        /// What a success on the first attempt refills.
        success_refill: f64,
    },
    /// Envoy's retry budget: retries in flight at most `max(percent% of active requests,
    /// min_concurrency)`.
    Concurrency {
        /// Envoy's `budget_percent` (0–100).
        percent: f64,
        /// Envoy's `min_retry_concurrency`.
        min_concurrency: u32,
    },
}

impl BudgetConfig {
    /// The budget these parameters describe, as it stands at the start of a run, or the
    /// first parameter that cannot work.
    pub fn build(&self) -> Result<Budget, ConfigError> {
        Ok(match *self {
            BudgetConfig::TokenBucket {
                ratio,
                max_tokens,
                initial_tokens,
            } => Budget::TokenBucket(TokenBucket::new(ratio, max_tokens, initial_tokens)?),
            BudgetConfig::TtlWindow {
                ratio,
                min_per_sec,
                ttl,
            } => Budget::TtlWindow(TtlWindow::new(ratio, min_per_sec, ttl)?),
            BudgetConfig::GrpcThrottle {
                max_tokens,
                token_ratio,
            } => Budget::GrpcThrottle(GrpcThrottle::new(max_tokens, token_ratio)?),
            BudgetConfig::RetryQuota {
                capacity,
                costs,
                success_refill,
            } => Budget::RetryQuota(RetryQuota::new(capacity, costs, success_refill)?),
            BudgetConfig::Concurrency {
                percent,
                min_concurrency,
            } => Budget::Concurrency(Concurrency::new(percent, min_concurrency)?),
        })
    }

    /// The kind's name as plans and reports spell it.
    pub fn kind(&self) -> &'static str {
        match self {
            BudgetConfig::TokenBucket { .. } => "token_bucket",
            BudgetConfig::TtlWindow { .. } => "ttl_window",
            BudgetConfig::GrpcThrottle { .. } => "grpc_throttle",
            BudgetConfig::RetryQuota { .. } => "retry_quota",
            BudgetConfig::Concurrency { .. } => "concurrency",
        }
    }
}

/// One budget of any kind: an enum rather than a trait object, so the decision taken for
/// every attempt makes no indirect call.
#[derive(Debug, Clone)]
pub enum Budget {
    /// [`BudgetConfig::TokenBucket`], running.
    TokenBucket(TokenBucket),
    /// [`BudgetConfig::TtlWindow`], running.
    TtlWindow(TtlWindow),
    /// [`BudgetConfig::GrpcThrottle`], running.
    GrpcThrottle(GrpcThrottle),
    /// [`BudgetConfig::RetryQuota`], running.
    RetryQuota(RetryQuota),
    /// [`BudgetConfig::Concurrency`], running.
    Concurrency(Concurrency),
}

macro_rules! each {
    ($self:expr, $b:ident => $body:expr) => {
        match $self {
            Budget::TokenBucket($b) => $body,
            Budget::TtlWindow($b) => $body,
            Budget::GrpcThrottle($b) => $body,
            Budget::RetryQuota($b) => $body,
            Budget::Concurrency($b) => $body,
        }
    };
}

impl RetryBudget for Budget {
    fn on_request(&mut self, now: Duration) {
        each!(self, b => b.on_request(now))
    }

    fn on_attempt(
        &mut self,
        now: Duration,
        outcome: Outcome,
        retryable: bool,
        grant: Option<Grant>,
    ) {
        each!(self, b => b.on_attempt(now, outcome, retryable, grant))
    }

    fn on_finish(&mut self, now: Duration, pending: Option<Grant>) {
        each!(self, b => b.on_finish(now, pending))
    }

    fn try_withdraw(&mut self, now: Duration, after: Outcome) -> Option<Grant> {
        each!(self, b => b.try_withdraw(now, after))
    }

    fn level(&self, now: Duration) -> f64 {
        each!(self, b => b.level(now))
    }

    fn bound(&self, run: RunCounts) -> Option<f64> {
        each!(self, b => b.bound(run))
    }
}

impl Budget {
    /// Whether a request can share this budget with the hops of its chain: only a token
    /// bucket's tokens can be handed out and back (`share_budget`).
    pub fn can_share(&self) -> bool {
        matches!(self, Budget::TokenBucket(_))
    }

    /// Up to `max` retries taken out of the budget for one request to share with the
    /// hops below it; none from a budget that cannot share.
    pub fn reserve(&mut self, max: u32) -> u32 {
        match self {
            Budget::TokenBucket(b) => b.reserve(max),
            _ => 0,
        }
    }

    /// What a request reserved and did not spend, back into the budget.
    pub fn refund(&mut self, n: u32) {
        if let Budget::TokenBucket(b) = self {
            b.refund(n);
        }
    }
}

/// `1 + retries / logical`, the common last step of every bound (1 for an empty run).
fn amplification(retries: f64, logical: u64) -> f64 {
    if logical == 0 {
        1.0
    } else {
        1.0 + retries / logical as f64
    }
}
