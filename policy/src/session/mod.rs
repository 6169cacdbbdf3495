//! One logical request, driven through a policy: feed it events, act on what comes out.
//!
//! A [`Client`] holds a policy and the state its requests share (budget, breaker); a
//! [`Session`] is one logical request's progress. The shell calls [`Client::start`] (with
//! a [`Start`]: a caller's deadline, a shared retry allowance), then for each [`Action`]:
//! `Send` an attempt and report what came back with [`Client::on_reply`] (a [`Reply`]: the
//! outcome and the answer's hints); `Wait` until a time and call [`Client::on_timer`];
//! `Done` ends it.
//! The client is passed to every call rather than held, so each shell shares it as it
//! needs: the live engine keeps it behind a mutex; a single-threaded driver (the property
//! tests' event simulation) owns it outright.

use std::time::Duration;

use rand_core::Rng;

use crate::breaker::{Breaker, BreakerState, Permit};
use crate::budget::{Budget, Grant, RetryBudget, RunCounts};
use crate::outcome::{Outcome, Violation};
use crate::policy::{Policy, PolicyConfig, RetryAfter};
use crate::request::{Attempt, Request};

mod action;
pub use action::{Action, GiveUp, RetryAfterUse, Verdict, Wait};

mod input;
pub use input::{Reply, Share, Start};

/// The least time left before the deadline that is worth an attempt.
const MIN_ATTEMPT_TIME: Duration = Duration::from_millis(1);

#[derive(Debug, Clone, Copy, PartialEq)]
enum Phase {
    /// An attempt is out; waiting for its outcome.
    Sent,
    Waiting {
        until: Duration,
    },
    Done,
}

/// One logical request in progress.
#[derive(Debug, Clone)]
pub struct Session {
    request: Request,
    deadline: Option<Duration>,
    /// The attempt most recently sent (or refused, when `sent` is still 0).
    attempt: Attempt,
    sent: u32,
    phase: Phase,
    previous_delay: Option<Duration>,
    /// What paid for the retry being waited for.
    pending: Option<Grant>,
    /// What paid for the attempt in flight.
    in_flight: Option<Grant>,
    /// The breaker's leave for the attempt in flight.
    permit: Option<Permit>,
    last: Option<Outcome>,
    /// The last wait decided.
    wait: Option<Wait>,
    /// Attempts resent transparently (A6): they count in `sent`, not against
    /// `max_attempts`.
    transparent: u32,
    /// The retry allowance this request shares with the hops of its chain, when it draws
    /// retries from one budget (`share_budget`) instead of each hop's own.
    shared: Option<Allowance>,
}

/// One request's share of a chain's budget: what is left of it here and below, carried
/// down with each attempt and back with each answer, and spent by whichever hop retries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Allowance {
    left: u32,
    /// Taken from this client's budget at the start: what is left goes back at the end.
    reserved: bool,
    /// A retry decided and paid for, not yet sent.
    pending: bool,
}

impl Allowance {
    /// Takes in what an answer says the hops below left. They spent the difference, and
    /// never give back more. An answer that does not say came from a hop that spends none
    /// (the leaf); when no answer came at all (a timeout, a reset) they may have spent it
    /// all, and the bound must hold whatever they did.
    fn hear(&mut self, left_below: Option<u32>, outcome: Outcome) {
        let answered = matches!(outcome, Outcome::Status(_) | Outcome::Grpc(_));
        self.left = match (left_below, answered) {
            (Some(left), _) => self.left.min(left),
            (None, true) => self.left,
            (None, false) => 0,
        };
    }
}

impl Session {
    /// The shared retry allowance the next attempt carries below, and the answer upward
    /// reports (`None`: the request does not share one).
    pub fn allowance(&self) -> Option<u32> {
        self.shared.map(|s| s.left)
    }

    /// How the last wait was decided, once one was.
    pub fn last_wait(&self) -> Option<Wait> {
        self.wait
    }

    /// The attempts that count against `max_attempts`: those sent, but for a transparent
    /// resend.
    fn counted(&self) -> u32 {
        self.attempt.get() - self.transparent
    }

    /// A6's transparent retry: the server never processed the stream, so it is sent
    /// again at once, once, whatever the method; the budget and the breaker never hear
    /// of it, and what paid for the attempt pays for its resend.
    fn resend_transparently(&mut self, now: Duration, outcome: Outcome) -> Action {
        self.transparent += 1;
        self.last = Some(outcome);
        self.pending = self.in_flight.take();
        self.phase = Phase::Waiting { until: now };
        Action::Wait { until: now }
    }

    /// How long to wait before the next retry: the policy's backoff (its jitter drawn
    /// from `rng`) weighed against the `Retry-After` the answer asked for, if any. The
    /// decision is kept for [`Session::last_wait`].
    fn decide_wait<R: Rng + ?Sized>(
        &mut self,
        config: &PolicyConfig,
        asked: Option<Duration>,
        rng: &mut R,
    ) -> Duration {
        let retry = self.counted();
        let range = config.backoff.range(retry, self.previous_delay);
        let backoff = config.backoff.delay(retry, self.previous_delay, rng);
        self.previous_delay = Some(backoff);
        let (delay, used) = match (config.retry_after, asked) {
            (_, None) => (backoff, RetryAfterUse::NotAsked),
            (RetryAfter::Ignore, Some(_)) => (backoff, RetryAfterUse::Ignored),
            (RetryAfter::Honor { max }, Some(asked)) if asked > max => (max, RetryAfterUse::Capped),
            (RetryAfter::Honor { .. }, Some(asked)) => (asked, RetryAfterUse::Honored),
            (RetryAfter::Clamp { max_extra }, Some(asked)) => (
                asked.clamp(backoff, backoff + max_extra),
                RetryAfterUse::Clamped,
            ),
        };
        self.wait = Some(Wait {
            retry,
            range,
            backoff,
            asked,
            retry_after: used,
            delay,
        });
        delay
    }

    /// The invariants the attempt just sent breaks, if it is a retry: shells call this on
    /// each `Send`, so every shell flags exactly the same retries.
    pub fn violations(&self) -> impl Iterator<Item = Violation> + use<> {
        let previous = self.last.filter(|_| self.attempt.is_retry());
        let request = self.request;
        previous
            .into_iter()
            .flat_map(move |outcome| Violation::of_retry(request, outcome))
    }
}

/// A policy and the state all its requests share.
///
/// All of a client's decisions run on one timeline: its clock is the latest time any call
/// has told it, and a call that reports an earlier time (a shell whose threads report a
/// little out of order, or a request started at a scheduled time that dispatch reached
/// late) is taken to happen at the clock's time. So the budget and the breaker never see
/// time run backwards: a breaker cannot open into the past and close early.
#[derive(Debug, Clone)]
pub struct Client {
    policy: Policy,
    budget: Option<Budget>,
    breaker: Option<Breaker>,
    clock: Duration,
}

impl Client {
    /// A client of `policy`, its budget as its kind starts, its breaker closed, its clock
    /// at zero.
    pub fn new(policy: Policy) -> Client {
        let config = policy.config();
        let budget = config.budget.as_ref().map(|b| {
            b.build()
                .expect("Policy::new validated the budget, so building it cannot fail")
        });
        let breaker = config.breaker.map(|b| {
            Breaker::new(b).expect("Policy::new validated the breaker, so building it cannot fail")
        });
        Client {
            policy,
            budget,
            breaker,
            clock: Duration::ZERO,
        }
    }

    /// Moves the clock to `now` unless it is already later, and returns it.
    fn tick(&mut self, now: Duration) -> Duration {
        self.clock = self.clock.max(now);
        self.clock
    }

    /// The latest time this client has been told.
    pub fn clock(&self) -> Duration {
        self.clock
    }

    /// The budget's level at `now`, for the time series.
    pub fn budget_level(&self, now: Duration) -> Option<f64> {
        let now = now.max(self.clock);
        self.budget.as_ref().map(|b| b.level(now))
    }

    /// The amplification this client's budget permits for a run with these counts.
    pub fn budget_bound(&self, run: RunCounts) -> Option<f64> {
        self.budget.as_ref().and_then(|b| b.bound(run))
    }

    /// Where the breaker stands at `now`, for the time series; `None` without one.
    pub fn breaker_state(&self, now: Duration) -> Option<BreakerState> {
        let now = now.max(self.clock);
        self.breaker.as_ref().map(|b| b.state(now))
    }

    /// Times the breaker has opened.
    pub fn breaker_trips(&self) -> u64 {
        self.breaker.as_ref().map_or(0, Breaker::trips)
    }

    /// Starts a logical request at `now`: its deadline counts from there, and `start` says
    /// what else limits it and what it shares with the hops of its chain.
    pub fn start(&mut self, request: Request, now: Duration, start: Start) -> (Session, Action) {
        let shared = match start.share {
            Share::None => None,
            Share::Reserve(max) => Some(Allowance {
                left: self.budget.as_mut().map_or(0, |b| b.reserve(max)),
                reserved: true,
                pending: false,
            }),
            Share::Allowance(left) => Some(Allowance {
                left,
                reserved: false,
                pending: false,
            }),
        };
        let now = self.tick(now);
        let own = self.policy.config().deadline;
        let deadline = match (own, start.deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let mut session = Session {
            request,
            deadline: deadline.map(|d| now + d),
            attempt: Attempt::FIRST,
            sent: 0,
            phase: Phase::Sent,
            previous_delay: None,
            pending: None,
            in_flight: None,
            permit: None,
            last: None,
            wait: None,
            transparent: 0,
            shared,
        };
        if let Some(budget) = &mut self.budget {
            budget.on_request(now);
        }
        let action = self.send(&mut session, now);
        (session, action)
    }

    /// Reports what the attempt in flight came back with at `now`: its outcome and the
    /// answer's hints. The backoff's jitter, if the policy retries, is drawn from `rng`.
    pub fn on_reply<R: Rng + ?Sized>(
        &mut self,
        session: &mut Session,
        now: Duration,
        reply: Reply,
        rng: &mut R,
    ) -> Action {
        let Reply {
            outcome,
            retry_after,
            no_retry,
            stop,
            allowance_left,
        } = reply;
        if let Some(shared) = &mut session.shared {
            shared.hear(allowance_left, outcome);
        }
        debug_assert_eq!(
            session.phase,
            Phase::Sent,
            "an outcome for an attempt not sent"
        );
        if session.phase != Phase::Sent {
            return Action::Done(self.verdict(session, GiveUp::MaxAttempts));
        }
        let now = self.tick(now);
        if outcome.is_unprocessed() && session.transparent == 0 {
            return session.resend_transparently(now, outcome);
        }
        let retryable = self.record(session, now, outcome);
        if outcome.is_success() {
            return self.finish(session, now, None);
        }
        if let Some(reason) = self.refusal(session, outcome, retryable, no_retry, stop) {
            return self.finish(session, now, Some(reason));
        }
        let delay = session.decide_wait(self.policy.config(), retry_after, rng);
        let until = now + delay;
        if session.deadline.is_some_and(|deadline| until >= deadline) {
            return self.finish(session, now, Some(GiveUp::Deadline));
        }
        if let Some(reason) = self.pay_for_retry(session, now, outcome) {
            return self.finish(session, now, Some(reason));
        }
        session.phase = Phase::Waiting { until };
        Action::Wait { until }
    }

    /// Tells the budget and the breaker how the attempt in flight ended, and whether the
    /// policy retries its outcome.
    fn record(&mut self, session: &mut Session, now: Duration, outcome: Outcome) -> bool {
        let retryable = self.policy.config().retry_on.matches(outcome);
        if let Some(budget) = &mut self.budget {
            budget.on_attempt(now, outcome, retryable, session.in_flight.take());
        }
        if let (Some(breaker), Some(permit)) = (&mut self.breaker, session.permit.take()) {
            breaker.record(now, outcome, permit);
        }
        session.last = Some(outcome);
        retryable
    }

    /// Why a failed attempt may not be retried, if the policy or the answer forbids it,
    /// checked in the order the verdict names them.
    fn refusal(
        &self,
        session: &Session,
        outcome: Outcome,
        retryable: bool,
        no_retry: bool,
        stop: bool,
    ) -> Option<GiveUp> {
        let config = self.policy.config();
        if !retryable {
            return Some(GiveUp::Permanent);
        }
        if no_retry && config.honor_no_retry {
            return Some(GiveUp::NoRetry);
        }
        if stop && config.retry_after != RetryAfter::Ignore {
            return Some(GiveUp::NoRetry);
        }
        if !session.request.is_idempotent()
            && !outcome.proves_unsent()
            && !config.retry_non_idempotent
        {
            return Some(GiveUp::NonIdempotent);
        }
        if session.counted() >= config.max_attempts {
            return Some(GiveUp::MaxAttempts);
        }
        None
    }

    /// Pays for the retry decided: from the chain's shared allowance when the request
    /// carries one (whichever hop retries, the one budget pays), else from this client's
    /// budget; or why it cannot be paid for.
    fn pay_for_retry(
        &mut self,
        session: &mut Session,
        now: Duration,
        outcome: Outcome,
    ) -> Option<GiveUp> {
        if let Some(shared) = &mut session.shared {
            if shared.left == 0 {
                return Some(GiveUp::BudgetExhausted);
            }
            shared.left -= 1;
            shared.pending = true;
        } else if let Some(budget) = &mut self.budget {
            match budget.try_withdraw(now, outcome) {
                Some(grant) => session.pending = Some(grant),
                None => return Some(GiveUp::BudgetExhausted),
            }
        }
        None
    }

    /// The wait asked for has passed: send the retry, or give up if the deadline or the
    /// breaker says so.
    pub fn on_timer(&mut self, session: &mut Session, now: Duration) -> Action {
        let Phase::Waiting { .. } = session.phase else {
            debug_assert!(false, "a timer for a session that is not waiting");
            return Action::Done(self.verdict(session, GiveUp::MaxAttempts));
        };
        session.attempt = session.attempt.next();
        let now = self.tick(now);
        self.send(session, now)
    }

    fn send(&mut self, session: &mut Session, now: Duration) -> Action {
        let remaining = match session.deadline {
            // Less than a millisecond left cannot carry an attempt: it would time out
            // before it is written, and the server would never see it.
            Some(deadline) if now + MIN_ATTEMPT_TIME > deadline => {
                return self.finish(session, now, Some(GiveUp::Deadline));
            }
            Some(deadline) => Some(deadline - now),
            None => None,
        };
        // A transparent resend keeps the leave its first try had.
        if let Some(breaker) = self.breaker.as_mut().filter(|_| session.permit.is_none()) {
            match breaker.try_admit(now) {
                Some(permit) => session.permit = Some(permit),
                None => return self.finish(session, now, Some(GiveUp::BreakerOpen)),
            }
        }
        let timeout = match (self.policy.config().attempt_timeout, remaining) {
            (Some(t), Some(r)) => Some(t.min(r)),
            (t, r) => t.or(r),
        };
        session.sent += 1;
        session.phase = Phase::Sent;
        // The grant waited for is now spent on an attempt on the wire.
        session.in_flight = session.pending.take();
        if let Some(shared) = &mut session.shared {
            shared.pending = false;
        }
        Action::Send {
            attempt: session.attempt,
            timeout,
        }
    }

    fn finish(&mut self, session: &mut Session, now: Duration, gave_up: Option<GiveUp>) -> Action {
        if let Some(budget) = &mut self.budget {
            // Only a grant that never paid for a sent attempt is handed back; one that did
            // was reported with its attempt's outcome.
            budget.on_finish(now, session.pending.take());
        }
        if let Some(shared) = &mut session.shared {
            // A retry paid for and never sent bought nothing.
            shared.left += u32::from(std::mem::take(&mut shared.pending));
            if std::mem::take(&mut shared.reserved)
                && let Some(budget) = &mut self.budget
            {
                budget.refund(shared.left);
            }
        }
        session.phase = Phase::Done;
        Action::Done(match gave_up {
            None => Verdict::Succeeded {
                attempts: session.sent,
            },
            Some(reason) => self.verdict(session, reason),
        })
    }

    fn verdict(&self, session: &Session, reason: GiveUp) -> Verdict {
        Verdict::GaveUp {
            reason,
            attempts: session.sent,
            last: session.last,
        }
    }
}
