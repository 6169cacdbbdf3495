//! One logical request through a plan's chain against a leaf that fails every attempt the
//! same way, in virtual time, through the very cores a run drives: the client's
//! [`Client`], each relay tier's [`Tier`], each proxy tier's [`Proxy`]. Nothing here
//! decides whether to retry: every decision is the core's, so the audit cannot drift from
//! the simulator and the live shells.
//!
//! Why a walk and not a product of `max_attempts`: what a hop retries depends on what the
//! hop below answers (HAProxy turns a lost response into a 502, which an SDK retries; a
//! tier that gave up says `x-chaos-no-retry`, which a caller may honour), on the method,
//! and on time (a per-try timeout that ends a slower hop's work). The walk is exact for
//! one request when nothing random or shared decides; budgets and breakers are taken out
//! (a fresh core per call: the audit states them apart), and backoff draws come from a
//! constant generator ([`Draws`]): the least waits give the most attempts before a
//! deadline, the most waits the longest time. A hop that can outlast its caller's per-try
//! timeout (its tries, each as long as the hop below can take, its waits at their tops) is
//! taken to time out while it goes on with all its tries: the worst of both.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use chaos_policy::{
    Action, Client, GiveUp, Outcome, Policy, PolicyConfig, Reply, Request, ResetPhase, Share,
    Start, Verdict, Violation,
};
use fault_server::effect::DEFAULT_HANG_CAP;
use fault_server::script::NoHeaders;

use crate::hop::proxy::{Proxy, ProxyStep};
use crate::hop::{Admission, Incoming, Step, Tier};
use crate::plan::proxy::ProxyModel;

/// How the leaf fails every attempt: the failure classes retry conditions tell apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Class {
    /// A complete response with this status.
    Status(u16),
    /// The connection closed before a response (the fault `close`): a lost response.
    Close,
    /// The connection reset (the fault `reset`).
    Reset,
    /// No answer (the fault `timeout`): held for the fault-server's hang cap, then closed,
    /// unless the caller's per-try timeout ends it first.
    Timeout,
}

impl Class {
    pub fn name(self) -> String {
        match self {
            Class::Status(s) => s.to_string(),
            Class::Close => "close".into(),
            Class::Reset => "reset".into(),
            Class::Timeout => "timeout".into(),
        }
    }

    /// What the leaf answers, after how long (as the simulated fault-server does; to a
    /// gRPC call, a status as the code it maps to).
    fn leaf(self, grpc: bool) -> (Reply, Duration) {
        let outcome = match self {
            Class::Status(s) if grpc => Outcome::Grpc(fault_server::wire::grpc::code_answering(s)),
            Class::Status(s) => Outcome::Status(s),
            Class::Close | Class::Timeout => Outcome::Closed,
            Class::Reset => Outcome::Reset(ResetPhase::Unknown),
        };
        let took = if self == Class::Timeout {
            DEFAULT_HANG_CAP
        } else {
            Duration::ZERO
        };
        (Reply::bare(outcome), took)
    }
}

/// A backoff draw fixed at one end of its range: the policy core draws its jitter from a
/// caller's generator, and this one gives every draw the same word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Draws {
    /// Every jitter at the bottom of its range: the most attempts within a deadline.
    Least,
    /// Every jitter at the top: the longest a chain can take.
    Most,
}

impl rand_core::TryRng for Draws {
    type Error = Infallible;

    fn try_next_u32(&mut self) -> Result<u32, Infallible> {
        Ok(match self {
            Draws::Least => 0,
            Draws::Most => u32::MAX,
        })
    }

    fn try_next_u64(&mut self) -> Result<u64, Infallible> {
        Ok(match self {
            Draws::Least => 0,
            Draws::Most => u64::MAX,
        })
    }

    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Infallible> {
        dst.fill(match self {
            Draws::Least => 0,
            Draws::Most => u8::MAX,
        });
        Ok(())
    }
}

/// One hop of the chain as the walk drives it.
#[derive(Debug, Clone)]
pub enum Hop {
    /// The client, or a relay tier: a retry policy (budget and breaker taken out).
    Policy(Box<Policy>),
    /// An nginx or HAProxy tier: its imported model.
    Proxy(Arc<ProxyModel>),
}

impl Hop {
    /// `policy` without its budget and breaker: the walk's figure is the unbudgeted one.
    pub fn unbudgeted(policy: &Policy) -> Hop {
        let config = PolicyConfig {
            budget: None,
            breaker: None,
            ..policy.config().clone()
        };
        // Taking a limit away cannot make a valid policy invalid; were it to, the policy
        // as it is still gives an upper bound's worth of figures.
        Hop::Policy(Box::new(
            Policy::new(config).unwrap_or_else(|_| policy.clone()),
        ))
    }
}

/// What one hop did with the first request it received (the others, in a total outage,
/// differ at most in what the deadline they carry lets through).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HopTrace {
    /// Attempts it sent for that request.
    pub tries: u32,
    /// What it answered upward: a status (`None`: the client, which answers no one).
    pub answered: Option<u16>,
    /// It answered `x-chaos-no-retry`.
    pub said_no_retry: bool,
    /// Why it gave up (a policy hop).
    pub gave_up: Option<GiveUp>,
    /// The longest it can take, from its arrival to its answer: its tries, each as long as
    /// the hop below can take or its per-try timeout, and every wait at its range's top.
    pub took: Duration,
    /// How long its caller waited for it (the caller's per-try timeout).
    pub caller_waits: Option<Duration>,
    /// It resent a request that is not safe to resend (the cores' `Violation`), in any call.
    pub retried_non_idempotent: bool,
    /// It retried after a permanent answer (a 4xx but 408/429, a 501, a 508), in any call.
    pub retried_permanent: bool,
    /// A try of it failed in a way the proxy counts against the peer (nginx's passive
    /// ejection, `max_fails`): later requests may find the peers out.
    pub failed_peers: bool,
}

/// What one request through the chain came to.
#[derive(Debug, Clone, PartialEq)]
pub struct Walked {
    /// Attempts the leaf received.
    pub leaf: u128,
    /// Each hop's trace, the client first.
    pub hops: Vec<HopTrace>,
    /// Some hop can outlast its caller's per-try timeout, or a policy gave up at its
    /// deadline: the figure depends on time, not only on the retry rules.
    pub timed: bool,
}

/// What a request carries down to a hop that it reads: `x-chaos-deadline-ms` and
/// `x-chaos-retry-allowance`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
struct Carried {
    deadline: Option<Duration>,
    allowance: Option<u32>,
}

/// What a call to a hop came to. Calls to the same hop carrying the same are the same
/// call (fresh cores, constant draws), so the walk keeps each once: 16 hops of 5
/// attempts each (5^16 at the leaf) cost 16 calls, not 5^16.
#[derive(Debug, Clone, Copy)]
struct Answer {
    reply: Reply,
    took: Duration,
    /// The longest it can take: every wait at the top of its range.
    bound: Duration,
    leaf: u128,
}

struct Walk<'a> {
    hops: &'a [Hop],
    class: Class,
    request: Request,
    method: &'a str,
    draws: Draws,
    seed: u64,
    traces: Vec<Option<HopTrace>>,
    memo: HashMap<(usize, Carried), Answer>,
    share: Option<u32>,
    grpc: bool,
    timed: bool,
}

/// A chain and the request walked through it.
#[derive(Debug, Clone, Copy)]
pub struct Chain<'a> {
    /// The hops, the client first.
    pub hops: &'a [Hop],
    /// The request's method, and the request as the policies read it (its idempotency).
    pub method: &'a str,
    pub request: Request,
    /// The plan's seed (a tier's jitter stream; the draws are [`Draws`]' anyway).
    pub seed: u64,
    /// The client shares its budget down the chain (`share_budget`), up to this many
    /// retries a request.
    pub share: Option<u32>,
    /// A gRPC plan: the leaf answers a status as the gRPC code it maps to, as the
    /// fault-server does.
    pub grpc: bool,
}

/// Walks one request through `chain` against a leaf that fails every attempt as `class`,
/// each backoff drawn as `draws` says.
pub fn walk(chain: &Chain<'_>, class: Class, draws: Draws) -> Walked {
    let hops = chain.hops;
    let mut w = Walk {
        hops,
        class,
        request: chain.request,
        method: chain.method,
        draws,
        seed: chain.seed,
        traces: vec![None; hops.len()],
        memo: HashMap::new(),
        share: chain.share,
        grpc: chain.grpc,
        timed: false,
    };
    let answer = w.call(0, Carried::default(), None);
    Walked {
        leaf: answer.leaf,
        hops: w
            .traces
            .into_iter()
            .map(Option::unwrap_or_default)
            .collect(),
        timed: w.timed,
    }
}

impl Walk<'_> {
    /// Hop `at` receives a request carrying `carried` from a caller that waits `waits`.
    /// Calls that carry the same are the same call.
    fn call(&mut self, at: usize, carried: Carried, waits: Option<Duration>) -> Answer {
        if at == self.hops.len() {
            let (reply, took) = self.class.leaf(self.grpc);
            return Answer {
                reply,
                took,
                bound: took,
                leaf: 1,
            };
        }
        if let Some(answer) = self.memo.get(&(at, carried)) {
            return *answer;
        }
        let mut trace = HopTrace {
            caller_waits: waits,
            ..HopTrace::default()
        };
        let answer = match &self.hops[at] {
            Hop::Policy(policy) if at == 0 => self.client(policy, &mut trace),
            Hop::Policy(policy) => self.tier(at, policy, carried, &mut trace),
            Hop::Proxy(model) => self.proxy(at, model, carried, &mut trace),
        };
        if trace.gave_up == Some(GiveUp::Deadline) {
            self.timed = true;
        }
        match &mut self.traces[at] {
            Some(first) => {
                first.retried_non_idempotent |= trace.retried_non_idempotent;
                first.retried_permanent |= trace.retried_permanent;
                first.failed_peers |= trace.failed_peers;
            }
            empty => *empty = Some(trace),
        }
        self.memo.insert((at, carried), answer);
        answer
    }

    /// An attempt to hop `at` under a per-try timeout: its answer, or the timeout when the
    /// hop can take longer, whatever its draws (its work goes on below, and is counted:
    /// the worst case of both).
    fn attempt(&mut self, at: usize, carried: Carried, timeout: Option<Duration>) -> Answer {
        let below = self.call(at, carried, timeout);
        match timeout {
            Some(t) if below.bound > t => {
                // A leaf held past the timeout received its one attempt all the same; a hop
                // that may be cut short may make fewer tries than the walk counts.
                self.timed |= at < self.hops.len();
                Answer {
                    // A timeout says nothing of the allowance: the hop above takes it
                    // as spent (the core's rule).
                    reply: Reply::bare(Outcome::AttemptTimeout),
                    took: t,
                    bound: t,
                    leaf: below.leaf,
                }
            }
            _ => below,
        }
    }

    fn client(&mut self, policy: &Policy, trace: &mut HopTrace) -> Answer {
        let mut client = Client::new(policy.clone());
        let start = Start {
            deadline: None,
            share: self.share.map_or(Share::None, Share::Reserve),
        };
        let (mut session, mut action) = client.start(self.request, Duration::ZERO, start);
        let (mut now, mut bound, mut leaf) = (Duration::ZERO, Duration::ZERO, 0u128);
        loop {
            action = match action {
                Action::Send { timeout, .. } => {
                    for v in session.violations() {
                        match v {
                            Violation::RetriedNonIdempotent => trace.retried_non_idempotent = true,
                            Violation::RetriedPermanent => trace.retried_permanent = true,
                        }
                    }
                    let carried = Carried {
                        deadline: timeout.map(fault_server::wire::deadline_sent),
                        allowance: session.allowance(),
                    };
                    let a = self.attempt(1, carried, timeout);
                    leaf = leaf.saturating_add(a.leaf);
                    now += a.took;
                    bound += a.bound;
                    client.on_reply(&mut session, now, a.reply, &mut self.draws)
                }
                Action::Wait { until } => {
                    bound += longest_wait(session.last_wait(), until - now);
                    now = until;
                    client.on_timer(&mut session, now)
                }
                Action::Done(verdict) => {
                    trace.tries = verdict.attempts();
                    if let Verdict::GaveUp { reason, .. } = verdict {
                        trace.gave_up = Some(reason);
                    }
                    let bound = within(bound, [policy.config().deadline]);
                    trace.took = bound;
                    let (reply, _) = self.class.leaf(self.grpc);
                    return Answer {
                        reply,
                        took: now,
                        bound,
                        leaf,
                    };
                }
            };
        }
    }

    fn tier(
        &mut self,
        at: usize,
        policy: &Policy,
        carried: Carried,
        trace: &mut HopTrace,
    ) -> Answer {
        let mut tier = Tier::new(policy.clone(), None, self.seed);
        let incoming = Incoming {
            method: self.method,
            path: "/",
            id: "audit",
            attempt: Some(1),
            upstream: None,
            deadline: carried.deadline,
            allowance: carried.allowance,
            idempotency_key: self.request.idempotency_key,
            headers: &NoHeaders,
            peer: None,
            came_back: false,
        };
        let (mut r, admission) = tier.receive(Duration::ZERO, &incoming);
        debug_assert!(matches!(admission, Admission::Forward), "no fault phases");
        let mut step = tier.start(&mut r, Duration::ZERO, "audit");
        let (mut now, mut bound, mut leaf) = (Duration::ZERO, Duration::ZERO, 0u128);
        loop {
            step = match step {
                Step::Send { timeout, .. } => {
                    let below = Carried {
                        deadline: timeout.map(fault_server::wire::deadline_sent),
                        allowance: r.allowance(),
                    };
                    let a = self.attempt(at + 1, below, timeout);
                    leaf = leaf.saturating_add(a.leaf);
                    now += a.took;
                    bound += a.bound;
                    tier.on_answer(&mut r, now, a.reply, &mut self.draws, "audit")
                }
                Step::Wait { until } => {
                    bound += longest_wait(r.last_wait(), until - now);
                    now = until;
                    tier.on_timer(&mut r, now, "audit")
                }
                Step::Answer(up) => {
                    let counts = tier.counts();
                    trace.tries = u32::try_from(counts.sent).unwrap_or(u32::MAX);
                    trace.retried_non_idempotent =
                        counts.violations.retried_non_idempotent.count > 0;
                    trace.retried_permanent = counts.violations.retried_permanent.count > 0;
                    trace.answered = Some(up.status);
                    trace.said_no_retry = up.no_retry;
                    trace.gave_up = up.gave_up;
                    let bound = within(bound, [policy.config().deadline, carried.deadline]);
                    trace.took = bound;
                    let reply = up.reply();
                    return Answer {
                        reply,
                        took: now,
                        bound,
                        leaf,
                    };
                }
            };
        }
    }

    /// A proxy forwards the request as it came: what it carries goes on unchanged.
    fn proxy(
        &mut self,
        at: usize,
        model: &Arc<ProxyModel>,
        carried: Carried,
        trace: &mut HopTrace,
    ) -> Answer {
        let mut proxy = Proxy::new(Arc::clone(model));
        let mut r = proxy.receive(
            Duration::ZERO,
            self.method,
            self.request.idempotency_key,
            Some(1),
        );
        let mut step = proxy.start(&mut r, Duration::ZERO);
        let (mut now, mut bound, mut leaf) = (Duration::ZERO, Duration::ZERO, 0u128);
        loop {
            step = match step {
                ProxyStep::Send { timeout, .. } => {
                    let a = self.attempt(at + 1, carried, Some(timeout));
                    leaf = leaf.saturating_add(a.leaf);
                    now += a.took;
                    bound += a.bound;
                    proxy.on_answer(&mut r, now, a.reply, "audit")
                }
                ProxyStep::Wait { until } => {
                    bound += until - now;
                    now = until;
                    proxy.on_timer(&mut r, now, "audit")
                }
                ProxyStep::Answer(reply) => {
                    let counts = proxy.counts();
                    trace.tries = r.tries();
                    trace.retried_non_idempotent =
                        counts.hop.violations.retried_non_idempotent.count > 0;
                    trace.retried_permanent = counts.hop.violations.retried_permanent.count > 0;
                    trace.failed_peers = counts.peers.iter().any(|p| p.failed > 0);
                    if let Outcome::Status(s) = reply.outcome {
                        trace.answered = Some(s);
                    }
                    trace.said_no_retry = reply.no_retry;
                    trace.took = bound;
                    return Answer {
                        reply,
                        took: now,
                        bound,
                        leaf,
                    };
                }
            };
        }
    }
}

/// The longest a wait could have been: the top of the range its backoff was drawn from, or
/// what was waited when that is more (a server's `Retry-After`).
fn longest_wait(wait: Option<chaos_policy::Wait>, waited: Duration) -> Duration {
    wait.map_or(waited, |w| w.range.1.max(w.delay)).max(waited)
}

/// A policy hop's longest time within its deadlines: its session gives up rather than
/// wait past them, and sends no attempt longer than what is left.
fn within<const N: usize>(bound: Duration, deadlines: [Option<Duration>; N]) -> Duration {
    deadlines.into_iter().flatten().fold(bound, Duration::min)
}

#[cfg(test)]
mod tests {
    use chaos_policy::{Backoff, Method};

    use super::*;

    fn policy(max_attempts: u32, honor_no_retry: bool) -> Hop {
        let config = PolicyConfig {
            max_attempts,
            backoff: Backoff::none(),
            honor_no_retry,
            ..PolicyConfig::default()
        };
        Hop::Policy(Box::new(Policy::new(config).expect("a valid policy")))
    }

    fn leaf(hops: &[Hop], method: &str, class: Class) -> u128 {
        let chain = Chain {
            hops,
            method,
            request: Request {
                method: Method::parse(method),
                idempotency_key: false,
            },
            seed: 1,
            share: None,
            grpc: false,
        };
        walk(&chain, class, Draws::Least).leaf
    }

    #[test]
    fn retrying_hops_multiply_and_honouring_ones_do_not() {
        let storm = [policy(3, false), policy(3, false), policy(3, false)];
        assert_eq!(leaf(&storm, "GET", Class::Status(503)), 27);
        assert_eq!(leaf(&storm, "GET", Class::Close), 27);
        // POST: a 503 proves nothing unsent, so no policy resends it.
        assert_eq!(leaf(&storm, "POST", Class::Status(503)), 1);
        // A 400 is permanent: no one retries it.
        assert_eq!(leaf(&storm, "GET", Class::Status(400)), 1);
        let one_tier = [policy(3, true), policy(3, true), policy(3, false)];
        assert_eq!(leaf(&one_tier, "GET", Class::Status(503)), 3);
    }

    /// The memo keeps a deep chain's walk to one call per hop, and its count exact: every
    /// hop's max_attempts multiplied, as `plan::worst_leaf_amplification` says.
    #[test]
    fn the_deepest_chain_is_walked_at_once_and_counted_exactly() {
        let hops: Vec<Hop> = (0..=crate::plan::MAX_TIERS)
            .map(|_| policy(5, false))
            .collect();
        let expected = 5u128.pow(u32::try_from(hops.len()).expect("a few hops"));
        assert_eq!(leaf(&hops, "GET", Class::Reset), expected);
    }

    #[test]
    fn draws_sit_at_either_end_of_a_range() {
        assert!(chaos_policy::unit_f64(&mut Draws::Least) < 1e-12);
        assert!(chaos_policy::unit_f64(&mut Draws::Most) > 0.999_999);
    }
}
