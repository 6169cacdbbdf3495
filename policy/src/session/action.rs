//! What a session tells its shell: the next [`Action`], why a request ended ([`GiveUp`]),
//! the [`Verdict`] on each outcome, and what a wait was made of ([`Wait`]).

use std::time::Duration;

use crate::outcome::Outcome;
use crate::request::Attempt;

/// What the shell does next.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Action {
    /// Send this attempt; give up on it after `timeout` (`None`: no limit from the policy).
    Send {
        /// Which attempt it is, for the headers the attempt carries and for the report.
        attempt: Attempt,
        /// How long the attempt may take: the nearer of the policy's `attempt_timeout`
        /// and what is left before the deadline.
        timeout: Option<Duration>,
    },
    /// Do nothing for this request until `until` (an offset from the run's start), then call
    /// [`Client::on_timer`](crate::Client::on_timer).
    Wait {
        /// When the backoff is over.
        until: Duration,
    },
    /// The logical request is over.
    Done(Verdict),
}

/// Why a logical request failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GiveUp {
    /// Every attempt the policy allows failed.
    MaxAttempts,
    /// The budget refused a retry.
    BudgetExhausted,
    /// The breaker refused an attempt.
    BreakerOpen,
    /// The last outcome is not retryable under the policy.
    Permanent,
    /// A retry would not be safe: the request is not idempotent and nothing proves the
    /// server never saw it.
    NonIdempotent,
    /// The next attempt could not start before the deadline.
    Deadline,
    /// The answer said the service behind it had already given up (`honor_no_retry`).
    NoRetry,
}

impl GiveUp {
    /// Every reason, in the order reports list them.
    pub const ALL: [GiveUp; 7] = [
        GiveUp::BudgetExhausted,
        GiveUp::BreakerOpen,
        GiveUp::MaxAttempts,
        GiveUp::Permanent,
        GiveUp::NonIdempotent,
        GiveUp::Deadline,
        GiveUp::NoRetry,
    ];

    /// The report's name for it.
    pub fn name(self) -> &'static str {
        match self {
            GiveUp::MaxAttempts => "max_attempts",
            GiveUp::BudgetExhausted => "budget_exhausted",
            GiveUp::BreakerOpen => "breaker_open",
            GiveUp::Permanent => "permanent",
            GiveUp::NonIdempotent => "non_idempotent",
            GiveUp::Deadline => "deadline",
            GiveUp::NoRetry => "no_retry",
        }
    }
}

/// How a logical request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// An attempt was served.
    Succeeded {
        /// Attempts sent, the successful one included.
        attempts: u32,
    },
    /// The request ended without a success.
    GaveUp {
        /// What stopped it.
        reason: GiveUp,
        /// Attempts actually sent (0 when the breaker refused the first).
        attempts: u32,
        /// What the last attempt produced, if one was sent.
        last: Option<Outcome>,
    },
}

impl Verdict {
    /// Attempts sent, however it ended: what amplification counts.
    pub fn attempts(&self) -> u32 {
        match *self {
            Verdict::Succeeded { attempts } | Verdict::GaveUp { attempts, .. } => attempts,
        }
    }

    /// The request was served.
    pub fn is_success(&self) -> bool {
        matches!(self, Verdict::Succeeded { .. })
    }
}

/// What a server's `Retry-After` did to a wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryAfterUse {
    /// The server asked for nothing.
    NotAsked,
    /// Asked, and the policy ignores it.
    Ignored,
    /// Waited what the server asked.
    Honored,
    /// Asked for more than the policy's cap: waited the cap.
    Capped,
    /// Clamped into `[backoff, backoff + max_extra]`.
    Clamped,
}

impl RetryAfterUse {
    /// A stable snake_case name for traces.
    pub fn name(self) -> &'static str {
        match self {
            RetryAfterUse::NotAsked => "not_asked",
            RetryAfterUse::Ignored => "ignored",
            RetryAfterUse::Honored => "honored",
            RetryAfterUse::Capped => "capped",
            RetryAfterUse::Clamped => "clamped",
        }
    }
}

/// How the wait before a retry was decided: what a trace shows of it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Wait {
    /// The retry it comes before (1: the first retry).
    pub retry: u32,
    /// The range the backoff was drawn from.
    pub range: (Duration, Duration),
    /// The backoff drawn from `range`: what the policy alone would wait.
    pub backoff: Duration,
    /// The server's `Retry-After` or pushback, if it sent one.
    pub asked: Option<Duration>,
    /// What the policy made of `asked`.
    pub retry_after: RetryAfterUse,
    /// What is waited in the end.
    pub delay: Duration,
}
