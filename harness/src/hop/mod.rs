//! The hop core: what a relay tier does with a request, pure and sans-IO.
//!
//! Why it exists: a tier runs live (`relay/`, an axum service) and simulated
//! (`simulate/tier.rs`, events in virtual time), and a rule written in both shells drifts.
//! So everything a tier decides lives here once, with time and the jitter RNG as
//! arguments, the way `chaos-policy` takes them: its own fault phases (drawn as the
//! fault-server draws them), its session under the caller's deadline less a margin, the
//! policy's decisions, the answer and marker upward, and its counts, violations included.
//! The shells only move bytes or events: "feed an event, act on the [`Step`] that comes
//! out".
//!
//! A request's life: [`Tier::receive`] (counted; a loop, a fault of the tier's own, a
//! delay, or forward) → [`Tier::start`] → [`Step::Send`] → [`Tier::on_answer`] → [`Step::Wait`] →
//! [`Tier::on_timer`] → ... → [`Step::Answer`].

use std::sync::Arc;
use std::time::Duration;

use chaos_policy::{
    Action, Attempt, Client, Method, Policy, Request, Session, Share, Start, Violation,
};
use fault_server::Script;
use fault_server::ledger::{LedgerLimits, Resends, Stated};
use fault_server::script::{Decision, FaultAction, FaultResponse, HeaderLookup, RequestFacts};
use fault_server::wire;
use rand_chacha::ChaCha8Rng;
use rand_core::{Rng, SeedableRng};

mod answer;
mod counts;
pub mod proxy;

pub use answer::Upward;
pub use counts::{HopCounts, HopViolations};

/// The least a tier keeps back from its caller's deadline, so that its answer (a 504
/// marked `x-chaos-no-retry`) arrives before the caller's own timer fires; a twentieth of
/// the deadline when that is more.
const DEADLINE_MARGIN: Duration = Duration::from_millis(10);

/// What an attempt to the next hop came back with, as the tier's policy hears it.
pub use chaos_policy::Reply;

/// A request as it reaches a tier: what the hop above wrote on it.
pub struct Incoming<'a> {
    pub method: &'a str,
    pub path: &'a str,
    /// `x-request-id`; empty when it had none (another load tool in front of the tier).
    pub id: &'a str,
    /// `x-chaos-attempt`: the caller's attempt number.
    pub attempt: Option<u32>,
    /// `x-chaos-upstream-attempts`: the chain of the hops above the caller.
    pub upstream: Option<&'a str>,
    /// `x-chaos-deadline-ms`: how long the caller waits for this attempt.
    pub deadline: Option<Duration>,
    /// `x-chaos-retry-allowance`: the caller shares its chain's budget, and this is what
    /// the tier and the hops below it may spend.
    pub allowance: Option<u32>,
    pub idempotency_key: bool,
    /// Every header, as the tier's fault phases match them.
    pub headers: &'a dyn HeaderLookup,
    /// The peer (listening socket, numbered from 1) it arrived at; `None` at a tier that
    /// listens as one.
    pub peer: Option<u32>,
    /// Its `Via` names this tier ([`wire::ViaName`]): it has been forwarded by this tier
    /// before, and come round a loop back to it.
    pub came_back: bool,
}

impl std::fmt::Debug for Incoming<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Incoming")
            .field("method", &self.method)
            .field("path", &self.path)
            .field("id", &self.id)
            .field("attempt", &self.attempt)
            .field("upstream", &self.upstream)
            .field("deadline", &self.deadline)
            .field("peer", &self.peer)
            .field("came_back", &self.came_back)
            .finish_non_exhaustive()
    }
}

/// What the tier does with a request it received.
#[derive(Debug)]
pub enum Admission {
    /// Answer with a fault of the tier's own, without forwarding (phase index, response).
    Fault {
        phase: usize,
        response: Arc<FaultResponse>,
    },
    /// A fault the plan does not allow at a tier (only statuses and delays are): 503.
    Unsupported,
    /// The request came back to this tier (its `Via` names it: [`Incoming::came_back`])
    /// or has passed more hops than any chain has ([`wire::loops`]): it is going round a
    /// loop, so the tier answers 508 Loop Detected (which no policy retries), marked
    /// `x-chaos-no-retry`, instead of forwarding it again. Counted as `faulted`.
    Loop,
    /// Hold it this long (a delay fault), then [`Tier::start`] it.
    Delay(Duration),
    /// [`Tier::start`] it now.
    Forward,
}

/// What a tier answers when it does not forward (a fault it cannot inject at a tier).
pub const UNSUPPORTED_STATUS: u16 = 503;
/// What a tier answers a request going round a loop of relays: 508 Loop Detected.
pub const LOOP_STATUS: u16 = wire::LOOP_DETECTED;

impl Admission {
    /// What the tier answers on its own instead of forwarding, as the hop above reads it:
    /// a fault of its own (its status and `Retry-After`), a fault it cannot inject
    /// ([`UNSUPPORTED_STATUS`]), or a loop ([`LOOP_STATUS`], marked "do not retry"); each
    /// with what is left of a shared allowance (`allowance_left`: nothing of it was spent).
    /// `None`: the tier forwards. The live tier renders it as a response, the simulated
    /// one as an event.
    pub fn own_reply(&self, allowance_left: Option<u32>) -> Option<Reply> {
        let (status, retry_after, no_retry) = match self {
            Admission::Fault { response, .. } => (
                response.status,
                response.retry_after_secs().map(Duration::from_secs),
                false,
            ),
            Admission::Unsupported => (UNSUPPORTED_STATUS, None, false),
            Admission::Loop => (LOOP_STATUS, None, true),
            Admission::Forward | Admission::Delay(_) => return None,
        };
        Some(Reply {
            outcome: chaos_policy::Outcome::Status(status),
            retry_after,
            no_retry,
            stop: false,
            allowance_left,
        })
    }
}

/// One request at a tier, from its arrival to its answer.
#[derive(Debug)]
pub struct Forwarding {
    request: Request,
    /// The `x-chaos-upstream-attempts` it sends below.
    chain: Box<str>,
    /// The caller's deadline, before the margin.
    limit: Option<Duration>,
    received: Duration,
    session: Option<Session>,
    last: Option<Reply>,
    jitter_seed: u64,
    /// The shared retry allowance the request came with.
    allowance: Option<u32>,
}

impl Forwarding {
    /// The `x-chaos-upstream-attempts` its attempts carry ([`wire::chain_below`]).
    pub fn chain(&self) -> &str {
        &self.chain
    }

    /// The shared retry allowance its next attempt carries below (and its answer upward),
    /// when its caller shares one: what the request came with, less what was spent.
    pub fn allowance(&self) -> Option<u32> {
        match &self.session {
            Some(session) => session.allowance(),
            None => self.allowance,
        }
    }

    /// The seed of its backoff jitter: the shell owns the generator (the simulator makes it
    /// anew at each draw, resumed where it stopped).
    pub fn jitter_seed(&self) -> u64 {
        self.jitter_seed
    }

    /// A new generator for its jitter.
    pub fn jitter_rng(&self) -> ChaCha8Rng {
        ChaCha8Rng::seed_from_u64(self.jitter_seed)
    }

    /// How its last wait was decided (the range its backoff was drawn from), for a shell
    /// that bounds the time a request can take (`harness audit`).
    pub fn last_wait(&self) -> Option<chaos_policy::Wait> {
        self.session.as_ref().and_then(Session::last_wait)
    }

    /// The invariants the attempt of the last [`Step::Send`] breaks (counted already), for
    /// a shell's trace.
    pub fn violations(&self) -> impl Iterator<Item = Violation> + use<> {
        self.session
            .as_ref()
            .map(Session::violations)
            .into_iter()
            .flatten()
    }
}

/// What the shell does next for a request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Step {
    /// Send `attempt` to the next hop, waiting at most `timeout` (also its
    /// `x-chaos-deadline-ms`).
    Send {
        attempt: Attempt,
        timeout: Option<Duration>,
    },
    /// Call [`Tier::on_timer`] at `until`.
    Wait { until: Duration },
    /// Answer the hop above; the request is over.
    Answer(Upward),
}

/// One relay tier's state: its policy's client (budget and breaker, shared by all its
/// requests), its fault phases and its counts.
#[derive(Debug)]
pub struct Tier {
    client: Client,
    /// The policy allows retries: its give-ups say "don't retry" upstream.
    retries: bool,
    script: Option<Script>,
    seed: u64,
    /// Requests without an id seen so far: each gets draws of its own.
    anonymous: u64,
    counts: HopCounts,
    /// The stated attempts received lately: how often each came ([`Resends`]).
    resends: Resends,
}

impl Tier {
    pub fn new(policy: Policy, script: Option<Script>, seed: u64) -> Tier {
        Tier {
            retries: policy.config().max_attempts > 1,
            client: Client::new(policy),
            script: script.filter(|s| s.phase_count() > 0),
            seed,
            anonymous: 0,
            counts: HopCounts::default(),
            // As long and as many as the fault-server's ledger remembers ids.
            resends: Resends::new(
                LedgerLimits::default().id_ttl,
                LedgerLimits::default().max_ids,
            ),
        }
    }

    pub fn counts(&self) -> &HopCounts {
        &self.counts
    }

    /// A request arrives at `now`. It is counted; one that has passed more hops than any
    /// chain has is a loop, and otherwise its fault phases decide what to do.
    pub fn receive(&mut self, now: Duration, incoming: &Incoming<'_>) -> (Forwarding, Admission) {
        self.counts.received += 1;
        if incoming.attempt.is_none_or(|a| a <= 1) {
            self.counts.logical += 1;
        }
        if let Some(peer) = incoming.peer {
            self.counts.received_at(peer);
        }
        let repeat = if incoming.id.is_empty() {
            0
        } else {
            let stated = Stated {
                request_id: incoming.id,
                attempt: incoming.attempt,
                upstream: incoming.upstream,
            };
            self.resends.arrive(stated, now).repeat
        };
        if repeat > 0 {
            self.counts.repeats += 1;
            // A resend by the hop above (a proxy) of a request that is not safe to run
            // twice: its non-idempotent retry, judged here since it cannot judge itself.
            let request = Request {
                method: Method::parse(incoming.method),
                idempotency_key: incoming.idempotency_key,
            };
            if !request.is_idempotent() {
                self.counts.repeats_non_idempotent += 1;
            }
        }
        let arrival = wire::Arrival {
            peer: incoming.peer,
            repeat,
        };
        let chain: Box<str> = wire::chain_below(incoming.upstream, incoming.attempt).into();
        let anonymous = if incoming.id.is_empty() {
            self.anonymous += 1;
            self.anonymous
        } else {
            0
        };
        let admission = if incoming.came_back || wire::loops(incoming.upstream) {
            Admission::Loop
        } else {
            self.admit(now, incoming, anonymous, arrival)
        };
        if matches!(
            admission,
            Admission::Fault { .. } | Admission::Unsupported | Admission::Loop
        ) {
            self.counts.faulted += 1;
        }
        let forwarding = Forwarding {
            request: Request {
                method: Method::parse(incoming.method),
                idempotency_key: incoming.idempotency_key,
            },
            jitter_seed: fault_server::seed::stream::tier_jitter(
                self.seed,
                incoming.id,
                &chain,
                anonymous,
            ),
            chain,
            limit: incoming.deadline,
            received: now,
            session: None,
            last: None,
            allowance: incoming.allowance,
        };
        (forwarding, admission)
    }

    /// The tier's own fault phases, drawn as the fault-server draws them
    /// ([`wire::attempt_seed`], mixed with the `arrival`), sticky per logical request.
    fn admit(
        &self,
        now: Duration,
        incoming: &Incoming<'_>,
        anonymous: u64,
        arrival: wire::Arrival,
    ) -> Admission {
        let Some(script) = &self.script else {
            return Admission::Forward;
        };
        let seeds = wire::DrawSeeds::new(
            self.seed,
            (!incoming.id.is_empty()).then_some(incoming.id),
            incoming.attempt,
            incoming.upstream,
            || anonymous,
        )
        .at(arrival);
        let facts = RequestFacts {
            method: incoming.method,
            path: incoming.path,
            attempt: incoming.attempt,
            headers: incoming.headers,
            sticky_seed: seeds.sticky,
            peer: incoming.peer,
        };
        match script.select(&facts, now, &mut ChaCha8Rng::seed_from_u64(seeds.attempt)) {
            Decision::Serve => Admission::Forward,
            Decision::Fault { phase, fault } => match fault.action {
                FaultAction::Delay(d) => Admission::Delay(d),
                FaultAction::Status(response) => Admission::Fault { phase, response },
                _ => Admission::Unsupported,
            },
        }
    }

    /// The name of fault phase `phase`, for the answer's `x-chaos-fault`.
    pub fn phase_name(&self, phase: usize) -> &str {
        self.script
            .as_ref()
            .and_then(|s| s.phase_name(phase))
            .unwrap_or("?")
    }

    /// A request the tier could not take (its body over the limit): given up unstarted.
    pub fn refuse(&mut self) {
        self.counts.gave_up += 1;
    }

    /// Starts the request's session at `now`, within its caller's deadline: what the
    /// request's way here, a delay fault and a margin for the answer's way back took is
    /// gone already. `id` names it in violation examples.
    pub fn start(&mut self, r: &mut Forwarding, now: Duration, id: &str) -> Step {
        let elapsed = now.saturating_sub(r.received);
        let limit = r
            .limit
            .map(|l| l.saturating_sub(elapsed + DEADLINE_MARGIN.max(l / 20)));
        let share = match r.allowance {
            Some(allowance) => Share::Allowance(allowance),
            None => Share::None,
        };
        let start = Start {
            deadline: limit,
            share,
        };
        let (session, action) = self.client.start(r.request, now, start);
        r.session = Some(session);
        self.step(r, now, action, id)
    }

    /// An attempt of `r` came back (or timed out) at `now`.
    pub fn on_answer<R: Rng + ?Sized>(
        &mut self,
        r: &mut Forwarding,
        now: Duration,
        reply: Reply,
        rng: &mut R,
        id: &str,
    ) -> Step {
        if reply.outcome.proves_unsent() {
            self.counts.unsent += 1;
        }
        if reply.no_retry {
            self.counts.no_retry_received += 1;
        }
        r.last = Some(reply);
        let session = r
            .session
            .as_mut()
            .expect("an answer comes only to a started request");
        let action = self.client.on_reply(session, now, reply, rng);
        self.step(r, now, action, id)
    }

    /// The backoff of `r` is over at `now`.
    pub fn on_timer(&mut self, r: &mut Forwarding, now: Duration, id: &str) -> Step {
        let session = r
            .session
            .as_mut()
            .expect("a timer runs only for a started request");
        let action = self.client.on_timer(session, now);
        self.step(r, now, action, id)
    }

    /// The policy's action as the shell's next step, counted: every attempt sent, and each
    /// retry that broke an invariant, judged as the client's are.
    fn step(&mut self, r: &mut Forwarding, now: Duration, action: Action, id: &str) -> Step {
        match action {
            Action::Send { attempt, timeout } => {
                self.counts.sent_at(now, attempt.is_retry());
                for violation in r.violations() {
                    self.counts.violations.add(violation, id);
                }
                Step::Send { attempt, timeout }
            }
            Action::Wait { until } => Step::Wait { until },
            Action::Done(verdict) => {
                let mut upward = Upward::of(verdict, r.last, self.retries);
                upward.allowance_left = r.allowance();
                match upward.gave_up {
                    None => self.counts.succeeded += 1,
                    Some(_) => self.counts.gave_up += 1,
                }
                Step::Answer(upward)
            }
        }
    }

    /// Whether the tier has fault phases of its own (a shell need not describe a request
    /// to a tier that draws nothing).
    pub fn draws_faults(&self) -> bool {
        self.script.is_some()
    }
}

#[cfg(test)]
mod tests {
    use chaos_policy::{Backoff, GiveUp, Outcome, PolicyConfig, RetryCondition, RetryOn};
    use fault_server::script::NoHeaders;
    use fault_server::seed::IdSeed;

    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// A tier of `max_attempts`, retrying every failure at once (permanent ones too when
    /// `careless`), with the fault phases of `script`.
    fn tier(max_attempts: u32, careless: bool, script: Option<&str>) -> Tier {
        let policy = Policy::new(PolicyConfig {
            max_attempts,
            backoff: Backoff::none(),
            retry_on: if careless {
                RetryOn::new([RetryCondition::Any])
            } else {
                RetryOn::default()
            },
            retry_non_idempotent: careless,
            ..PolicyConfig::default()
        })
        .expect("a valid policy");
        let script = script.map(|s| Script::from_yaml_str(s).expect("a valid script"));
        Tier::new(policy, script, 7)
    }

    fn incoming<'a>(method: &'a str, id: &'a str, attempt: u32) -> Incoming<'a> {
        Incoming {
            method,
            path: "/payments",
            id,
            attempt: Some(attempt),
            upstream: None,
            deadline: None,
            allowance: None,
            idempotency_key: false,
            headers: &NoHeaders,
            peer: None,
            came_back: false,
        }
    }

    /// Drives one request: received at 0, each attempt answered `outcomes[i]` 1 ms later.
    fn drive(t: &mut Tier, request: &Incoming<'_>, outcomes: &[Outcome]) -> (Vec<Step>, Upward) {
        let (mut r, admission) = t.receive(Duration::ZERO, request);
        assert!(matches!(admission, Admission::Forward), "{admission:?}");
        let mut rng = r.jitter_rng();
        let mut steps = vec![t.start(&mut r, Duration::ZERO, request.id)];
        let mut outcomes = outcomes.iter();
        let mut now = Duration::ZERO;
        loop {
            now += ms(1);
            let next = match *steps.last().expect("a step") {
                Step::Send { .. } => {
                    let outcome = *outcomes.next().expect("an outcome for each attempt");
                    t.on_answer(&mut r, now, Reply::bare(outcome), &mut rng, request.id)
                }
                Step::Wait { .. } => t.on_timer(&mut r, now, request.id),
                Step::Answer(up) => return (steps, up),
            };
            steps.push(next);
        }
    }

    #[test]
    fn first_attempts_are_logical_requests_and_retries_of_the_caller_are_not() {
        let mut t = tier(1, false, None);
        for attempt in [1, 2, 3] {
            drive(
                &mut t,
                &incoming("GET", "a", attempt),
                &[Outcome::Status(200)],
            );
        }
        let c = t.counts();
        assert_eq!((c.received, c.logical, c.sent, c.succeeded), (3, 1, 3, 3));
    }

    #[test]
    fn a_careless_tier_counts_each_retry_of_a_400_and_of_an_unkeyed_post() {
        let mut t = tier(3, true, None);
        let (_, up) = drive(
            &mut t,
            &incoming("POST", "p-1", 1),
            &[
                Outcome::Status(400),
                Outcome::Status(400),
                Outcome::Status(200),
            ],
        );
        assert_eq!((up.status, up.gave_up), (200, None));
        let v = &t.counts().violations;
        assert_eq!(v.retried_permanent.count, 2);
        assert_eq!(v.retried_non_idempotent.count, 2);
        assert_eq!(v.retried_permanent.examples, ["p-1"]);
        assert_eq!((t.counts().sent, t.counts().retries), (3, 2));
    }

    #[test]
    fn a_careful_tier_neither_retries_a_400_nor_counts_a_violation() {
        let mut t = tier(3, false, None);
        let (steps, up) = drive(&mut t, &incoming("GET", "g", 1), &[Outcome::Status(400)]);
        assert_eq!(steps.len(), 2, "{steps:?}");
        assert_eq!(
            (up.status, up.no_retry, up.gave_up),
            (400, false, Some(GiveUp::Permanent))
        );
        assert_eq!(t.counts().violations.total(), 0);
        // A retried 503 of a GET breaks nothing either.
        drive(
            &mut t,
            &incoming("GET", "h", 1),
            &[Outcome::Status(503), Outcome::Status(200)],
        );
        assert_eq!(t.counts().violations.total(), 0);
        assert_eq!(t.counts().retries, 1);
    }

    #[test]
    fn a_tier_that_could_retry_and_gave_up_says_no_retry_upstream() {
        let mut t = tier(2, false, None);
        let (_, up) = drive(
            &mut t,
            &incoming("GET", "x", 1),
            &[Outcome::Status(503), Outcome::Status(503)],
        );
        assert_eq!((up.status, up.no_retry), (503, true));
        assert_eq!(up.gave_up, Some(GiveUp::MaxAttempts));
        assert_eq!(t.counts().gave_up, 1);
    }

    #[test]
    fn the_session_keeps_a_margin_of_the_callers_deadline() {
        // 400 ms from the caller, 20 ms of it gone on the way: 400 - 20 - 400/20 = 360.
        let mut t = tier(1, false, None);
        let mut request = incoming("GET", "d", 1);
        request.deadline = Some(ms(400));
        let (mut r, _) = t.receive(Duration::ZERO, &request);
        let step = t.start(&mut r, ms(20), "d");
        assert_eq!(
            step,
            Step::Send {
                attempt: Attempt::FIRST,
                timeout: Some(ms(360)),
            }
        );
        // A short deadline keeps at least 10 ms back.
        let mut t = tier(1, false, None);
        request.deadline = Some(ms(50));
        let (mut r, _) = t.receive(Duration::ZERO, &request);
        assert!(matches!(
            t.start(&mut r, Duration::ZERO, "d"),
            Step::Send { timeout: Some(t), .. } if t == ms(40)
        ));
    }

    #[test]
    fn the_tiers_own_faults_are_drawn_as_the_fault_server_draws_them() {
        let script = "faults: [ { name: shed, probability: 0.5, respond: { status: 503 } } ]";
        let mut t = tier(1, false, Some(script));
        let reference = Script::from_yaml_str(script).expect("a valid script");
        let mut faulted = 0;
        for i in 0..200 {
            let id = format!("r-{i}");
            let mut request = incoming("GET", &id, 2);
            request.upstream = Some("1");
            let (_, admission) = t.receive(ms(5), &request);
            // The fault-server's own draw for this request, attempt and chain.
            let facts = RequestFacts {
                method: "GET",
                path: "/payments",
                attempt: Some(2),
                headers: &NoHeaders,
                sticky_seed: Some(IdSeed::new(7, &id).attempt(0)),
                peer: None,
            };
            let seed = wire::attempt_seed(IdSeed::new(7, &id), 2, Some("1"));
            let expected = reference.select(&facts, ms(5), &mut ChaCha8Rng::seed_from_u64(seed));
            let is_fault = matches!(admission, Admission::Fault { .. });
            assert_eq!(is_fault, matches!(expected, Decision::Fault { .. }), "{id}");
            faulted += u64::from(is_fault);
        }
        assert!((60..140).contains(&faulted), "{faulted} of 200");
        assert_eq!(t.counts().faulted, faulted);
        assert_eq!(t.counts().received, 200);
    }

    #[test]
    fn requests_without_an_id_draw_apart_and_those_with_one_draw_the_same() {
        let mut t = tier(1, false, None);
        let (a, _) = t.receive(Duration::ZERO, &incoming("GET", "", 1));
        let (b, _) = t.receive(Duration::ZERO, &incoming("GET", "", 1));
        assert_ne!(a.jitter_seed(), b.jitter_seed());
        let (c, _) = t.receive(Duration::ZERO, &incoming("GET", "same", 1));
        let (d, _) = t.receive(Duration::ZERO, &incoming("GET", "same", 1));
        assert_eq!(c.jitter_seed(), d.jitter_seed());
        assert_eq!(c.chain(), "1");
    }

    /// A request that has passed more hops than any chain has is a loop, whatever the
    /// tier's fault phases say: answered 508 without forwarding, counted as `faulted`;
    /// the deepest tier of the longest chain still forwards.
    #[test]
    fn a_chain_longer_than_any_plan_is_a_loop_and_is_not_forwarded() {
        let mut t = tier(
            3,
            false,
            Some("faults: [ { name: never, probability: 0.0, respond: { status: 503 } } ]"),
        );
        let deepest = vec!["1"; wire::MAX_TIERS - 1].join(".");
        let looped = vec!["1"; wire::MAX_TIERS].join(".");
        let with = |upstream| Incoming {
            upstream: Some(upstream),
            ..incoming("GET", "loop-1", 1)
        };
        let (_, admission) = t.receive(Duration::ZERO, &with(&deepest));
        assert!(matches!(admission, Admission::Forward), "{admission:?}");
        let (r, admission) = t.receive(Duration::ZERO, &with(&looped));
        assert!(matches!(admission, Admission::Loop), "{admission:?}");
        assert_eq!(wire::chain_hops(Some(r.chain())), wire::MAX_TIERS + 1);
        let longer = format!("{looped}.2.3");
        let (_, admission) = t.receive(Duration::ZERO, &with(&longer));
        assert!(matches!(admission, Admission::Loop), "{admission:?}");
        let counts = t.counts();
        assert_eq!((counts.received, counts.faulted, counts.sent), (3, 2, 0));
    }

    /// A request whose `Via` names the tier came round a loop: 508 at once, whatever its
    /// chain, and whatever the tier's fault phases say.
    #[test]
    fn a_request_that_came_back_is_a_loop_at_its_first_return() {
        let mut t = tier(3, false, None);
        let (_, admission) = t.receive(
            Duration::ZERO,
            &Incoming {
                upstream: Some("1.1"),
                came_back: true,
                ..incoming("GET", "back-1", 1)
            },
        );
        assert!(matches!(admission, Admission::Loop), "{admission:?}");
        let reply = admission.own_reply(None).expect("answered here");
        assert_eq!(reply.outcome, Outcome::Status(508));
        assert!(reply.no_retry);
        let (_, admission) = t.receive(Duration::ZERO, &incoming("GET", "fresh-1", 1));
        assert!(matches!(admission, Admission::Forward), "{admission:?}");
        assert_eq!(t.counts().faulted, 1);
    }

    /// A proxy above the tier resends requests as they came: the tier counts a resend of a
    /// non-idempotent one as that proxy's non-idempotent retry (a keyed POST is safe).
    #[test]
    fn a_resent_post_is_counted_as_the_hop_aboves_non_idempotent_retry() {
        let mut t = tier(1, false, None);
        for _ in 0..2 {
            t.receive(Duration::ZERO, &incoming("POST", "p", 1));
            t.receive(Duration::ZERO, &incoming("GET", "g", 1));
            t.receive(
                Duration::ZERO,
                &Incoming {
                    idempotency_key: true,
                    ..incoming("POST", "k", 1)
                },
            );
        }
        let c = t.counts();
        assert_eq!((c.received, c.repeats, c.repeats_non_idempotent), (6, 3, 1));
    }
}
