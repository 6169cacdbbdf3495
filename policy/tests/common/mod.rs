//! Helpers shared by the policy's test files: a seeded RNG and a session driver that turns
//! a scripted sequence of outcomes into a one-line trace.

#![allow(dead_code, unreachable_pub)]

use std::fmt::Write;
use std::time::Duration;

use chaos_policy::{
    Action, Breaker, BreakerConfig, Budget, BudgetConfig, Client, Outcome, Reply, Request, Start,
    Verdict,
};
use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;

/// A server failure and a success, the outcomes most tables are made of.
pub const FAIL: Outcome = Outcome::Status(503);
pub const OK: Outcome = Outcome::Status(200);

/// A breaker config that passes validation, the one the breaker tests use: it opens at
/// half of at least four attempts.
pub const VALID_BREAKER: BreakerConfig = BreakerConfig {
    failure_ratio: 0.5,
    min_requests: 4,
    window: Duration::from_secs(10),
    open_for: Duration::from_secs(5),
    half_open_probes: 2,
};

pub fn build(config: BudgetConfig) -> Budget {
    config.build().unwrap()
}

pub fn breaker() -> Breaker {
    Breaker::new(VALID_BREAKER).unwrap()
}

/// `times` failed attempts, each admitted and reported at `now`.
pub fn fail(b: &mut Breaker, now: Duration, times: usize) {
    for _ in 0..times {
        let permit = b.try_admit(now).unwrap();
        b.record(now, FAIL, permit);
    }
}

pub fn rng(seed: u64) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(seed)
}

pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Each attempt takes this long, so budgets and breakers see time pass.
pub const ATTEMPT_TIME: Duration = Duration::from_millis(10);

/// Drives one logical request from `start`, answering its attempts with `outcomes` in order
/// (the last repeats), and returns the trace and the time it ended.
pub fn drive(
    client: &mut Client,
    request: Request,
    start: Duration,
    outcomes: &[Outcome],
    retry_after: Option<Duration>,
    rng: &mut ChaCha8Rng,
) -> (String, Verdict, Duration) {
    let mut trace = String::new();
    let mut now = start;
    let (mut session, mut action) = client.start(request, now, Start::default());
    let mut answered = 0;
    loop {
        match action {
            Action::Send { attempt, timeout } => {
                let _ = write!(trace, "send{attempt}");
                if let Some(t) = timeout {
                    let _ = write!(trace, "[{}ms]", t.as_millis());
                }
                let outcome = outcomes[answered.min(outcomes.len() - 1)];
                answered += 1;
                now += ATTEMPT_TIME;
                let _ = write!(trace, " {outcome} ");
                let reply = Reply {
                    retry_after,
                    ..Reply::bare(outcome)
                };
                action = client.on_reply(&mut session, now, reply, rng);
            }
            Action::Wait { until } => {
                let _ = write!(trace, "wait{}ms ", (until - now).as_millis());
                now = until;
                action = client.on_timer(&mut session, now);
            }
            Action::Done(verdict) => {
                match verdict {
                    Verdict::Succeeded { attempts } => {
                        let _ = write!(trace, "ok/{attempts}");
                    }
                    Verdict::GaveUp {
                        reason, attempts, ..
                    } => {
                        let _ = write!(trace, "{}/{attempts}", reason.name());
                    }
                }
                return (trace, verdict, now);
            }
        }
    }
}

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use chaos_policy::{BreakerState, Violation};
use rand_core::Rng;

/// What [`simulate`] saw.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Seen {
    pub logical: u64,
    pub attempts: u64,
    pub retries: u64,
    /// When the last attempt was sent.
    pub last_send: Duration,
    pub violations: Vec<Violation>,
    /// Attempts sent while the breaker read open.
    pub sent_while_open: u64,
    /// Most attempts sent half-open (probes) in flight at once.
    pub half_open_in_flight: u64,
    /// Every decision, in order, for determinism checks.
    pub trace: Vec<String>,
}

enum Event {
    Start(usize),
    Outcome(usize),
    Timer(usize),
}

/// A small discrete-event simulation: `requests` logical requests arriving `gap` apart,
/// each attempt taking 1-50 ms and producing the next outcome of `outcomes` (cyclically).
/// Requests overlap, so the budget and breaker see interleaved traffic.
pub fn simulate(
    client: &mut Client,
    requests: &[Request],
    gap: Duration,
    outcomes: &[Outcome],
    seed: u64,
) -> Seen {
    let mut rng = rng(seed);
    let mut seen = Seen::default();
    let mut sessions: Vec<Option<chaos_policy::Session>> = vec![None; requests.len()];
    let mut queue: BinaryHeap<Reverse<(Duration, u64, usize, u8)>> = BinaryHeap::new();
    let mut seq = 0u64;
    let mut push = |queue: &mut BinaryHeap<_>, at: Duration, i: usize, kind: Event| {
        seq += 1;
        let tag = match kind {
            Event::Start(_) => 0,
            Event::Outcome(_) => 1,
            Event::Timer(_) => 2,
        };
        queue.push(Reverse((at, seq, i, tag)));
    };
    for i in 0..requests.len() {
        push(&mut queue, gap * i as u32, i, Event::Start(i));
    }
    let mut next_outcome = 0usize;
    // The breaker's epoch (its trip count) when each in-flight probe was sent: only the
    // probes of the current half-open period are limited.
    let mut probe_epoch: Vec<Option<u64>> = vec![None; requests.len()];
    while let Some(Reverse((now, _, i, tag))) = queue.pop() {
        let action = match tag {
            0 => {
                seen.logical += 1;
                let (session, action) = client.start(requests[i], now, Start::default());
                sessions[i] = Some(session);
                action
            }
            1 => {
                let outcome = outcomes[next_outcome % outcomes.len()];
                next_outcome += 1;
                probe_epoch[i] = None;
                let session = sessions[i].as_mut().expect("a session in flight");
                client.on_reply(session, now, Reply::bare(outcome), &mut rng)
            }
            _ => {
                let session = sessions[i].as_mut().expect("a session waiting");
                client.on_timer(session, now)
            }
        };
        seen.trace.push(format!("{now:?} {i} {action:?}"));
        match action {
            Action::Send { attempt, .. } => {
                seen.attempts += 1;
                seen.last_send = now;
                if attempt.is_retry() {
                    seen.retries += 1;
                }
                let session = sessions[i].as_ref().expect("a session sending");
                seen.violations.extend(session.violations());
                match client.breaker_state(now) {
                    Some(BreakerState::Open) => seen.sent_while_open += 1,
                    Some(BreakerState::HalfOpen) => {
                        let epoch = client.breaker_trips();
                        probe_epoch[i] = Some(epoch);
                        let current = probe_epoch.iter().filter(|e| **e == Some(epoch)).count();
                        seen.half_open_in_flight = seen.half_open_in_flight.max(current as u64);
                    }
                    _ => {}
                }
                let took = Duration::from_millis(1 + rng.next_u64() % 50);
                push(&mut queue, now + took, i, Event::Outcome(i));
            }
            Action::Wait { until } => push(&mut queue, until, i, Event::Timer(i)),
            Action::Done(_) => sessions[i] = None,
        }
    }
    seen
}
