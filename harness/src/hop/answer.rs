//! What a tier answers upstream when its session ends: the rule both shells render, the
//! live one as an HTTP response, the simulated one as an event.

use std::time::Duration;

use chaos_policy::{GiveUp, Outcome, Verdict};

use super::Reply;

/// A tier's answer to the hop above.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Upward {
    /// The status it answers: the next hop's last status passed on, else 503 (or 504 when
    /// time ran out).
    pub status: u16,
    /// The `Retry-After` of a status passed on.
    pub retry_after: Option<Duration>,
    /// `x-chaos-no-retry`: it gave up when it could have retried, or was told to stop.
    pub no_retry: bool,
    /// Why it gave up; `None` when it succeeded.
    pub gave_up: Option<GiveUp>,
    /// The next hop's last answer, if an attempt got one. When it is a status, the live
    /// tier passes its headers and body on too.
    pub last: Option<Outcome>,
    /// `x-chaos-retry-allowance-left`, when the caller shares its chain's budget.
    pub allowance_left: Option<u32>,
}

impl Upward {
    /// The answer as the caller's policy hears it: what every shell hands its caller
    /// (the simulator's next event, the audit's walk, the relay's response).
    pub fn reply(&self) -> Reply {
        Reply {
            outcome: Outcome::Status(self.status),
            retry_after: self.retry_after,
            no_retry: self.no_retry,
            stop: false,
            allowance_left: self.allowance_left,
        }
    }

    pub(super) fn of(verdict: Verdict, last: Option<Reply>, retries: bool) -> Upward {
        let below_said_stop = last.is_some_and(|a| a.no_retry);
        let (gave_up, no_retry) = match verdict {
            Verdict::Succeeded { .. } => (None, false),
            Verdict::GaveUp { reason, .. } => (
                Some(reason),
                says_no_retry(reason, retries, below_said_stop),
            ),
        };
        let (status, retry_after) = match last {
            Some(Reply {
                outcome: Outcome::Status(code),
                retry_after,
                ..
            }) => (code, retry_after),
            Some(Reply { outcome, .. }) => (gave_up_status(timed_out(outcome)), None),
            None => (gave_up_status(gave_up == Some(GiveUp::Deadline)), None),
        };
        Upward {
            status,
            retry_after,
            no_retry,
            gave_up,
            last: last.map(|r| r.outcome),
            allowance_left: None,
        }
    }

    /// Whether the next hop's last status is passed on as it came.
    pub fn passes_last_status(&self) -> bool {
        matches!(self.last, Some(Outcome::Status(_)))
    }
}

/// Whether a tier that gave up for `reason` tells its caller not to retry
/// (`x-chaos-no-retry`): when it could have retried itself (`retries`), or was told not
/// to by the hop below (`below_said_stop`).
fn says_no_retry(reason: GiveUp, retries: bool, below_said_stop: bool) -> bool {
    match reason {
        GiveUp::MaxAttempts => retries || below_said_stop,
        GiveUp::Permanent => below_said_stop,
        GiveUp::BudgetExhausted
        | GiveUp::BreakerOpen
        | GiveUp::NonIdempotent
        | GiveUp::Deadline
        | GiveUp::NoRetry => true,
    }
}

/// Whether a last attempt that ended this way ran out of time (the answer is then 504).
fn timed_out(outcome: Outcome) -> bool {
    matches!(outcome, Outcome::AttemptTimeout | Outcome::ConnectTimeout)
}

/// A gateway's answer when it got none it could pass on: 504 when time ran out.
fn gave_up_status(timed_out: bool) -> u16 {
    if timed_out { 504 } else { 503 }
}

#[cfg(test)]
mod tests {
    use super::*;
    fn gave_up(reason: GiveUp) -> Verdict {
        Verdict::GaveUp {
            reason,
            attempts: 1,
            last: None,
        }
    }

    fn reply(outcome: Outcome, no_retry: bool) -> Option<Reply> {
        Some(Reply {
            outcome,
            retry_after: None,
            no_retry,
            stop: false,
            allowance_left: None,
        })
    }

    #[test]
    fn a_last_status_is_passed_on_and_a_transport_failure_becomes_503_or_504() {
        let up = Upward::of(
            gave_up(GiveUp::MaxAttempts),
            reply(Outcome::Status(429), false),
            true,
        );
        assert_eq!(
            (up.status, up.no_retry, up.passes_last_status()),
            (429, true, true)
        );
        let up = Upward::of(
            gave_up(GiveUp::MaxAttempts),
            reply(Outcome::AttemptTimeout, false),
            false,
        );
        assert_eq!(
            (up.status, up.no_retry, up.passes_last_status()),
            (504, false, false)
        );
        let up = Upward::of(
            gave_up(GiveUp::MaxAttempts),
            reply(Outcome::Reset(chaos_policy::ResetPhase::AfterWrite), false),
            false,
        );
        assert_eq!(up.status, 503);
        let up = Upward::of(gave_up(GiveUp::Deadline), None, false);
        assert_eq!((up.status, up.no_retry), (504, true));
        let up = Upward::of(gave_up(GiveUp::BreakerOpen), None, false);
        assert_eq!((up.status, up.no_retry, up.last), (503, true, None));
    }

    #[test]
    fn a_permanent_answer_says_no_retry_only_when_the_hop_below_did() {
        let up = Upward::of(
            gave_up(GiveUp::Permanent),
            reply(Outcome::Status(400), false),
            true,
        );
        assert!(!up.no_retry);
        let up = Upward::of(
            gave_up(GiveUp::Permanent),
            reply(Outcome::Status(400), true),
            true,
        );
        assert!(up.no_retry);
    }

    #[test]
    fn a_success_says_nothing_more() {
        let up = Upward::of(
            Verdict::Succeeded { attempts: 1 },
            reply(Outcome::Status(200), false),
            true,
        );
        assert_eq!((up.status, up.no_retry, up.gave_up), (200, false, None));
    }
}
