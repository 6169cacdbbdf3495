//! A modelled relay tier: the live tier's `serve` (`relay/mod.rs`) step for step, in
//! virtual time. Every request it receives is a [`Session`] of the tier's own
//! [`Client`], forwarded to the next hop with the tier's attempt number, the chain of
//! attempts above (`x-chaos-upstream-attempts`) and the caller's deadline less a margin;
//! the tier's own `tier:` fault phases are chosen by the same [`Script::select`] with the
//! same seeds; what it answers upstream (the last status passed on, 503/504 when it got
//! none, `x-chaos-no-retry` when it gave up) is the live tier's rule
//! (`relay/answer.rs`). Sessions run to their end whether or not the caller still waits.

use std::time::Duration;

use chaos_policy::{Action, Client, GiveUp, Method, Outcome, Policy, Request, Session, Verdict};
use fault_server::script::{Decision, FaultAction, Script};
use fault_server::seed::{IdSeed, fnv1a, splitmix64};
use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;

use super::network::Network;
use super::queue::{Event, Queue, Reply, Sent, Step};
use super::request::{Kind, bare, decide, write_id};
use crate::relay::HopCounts;
use crate::relay::answer::{gave_up_status, says_no_retry, timed_out};

/// The least a tier keeps back from its caller's deadline (as `relay::DEADLINE_MARGIN`).
const DEADLINE_MARGIN: Duration = Duration::from_millis(10);

/// The most seconds of `sent_per_second` kept, as live.
const MAX_SECONDS: usize = 86_400;

struct Forwarding {
    /// Who to answer.
    from: Step,
    index: u64,
    kind: u32,
    n: u64,
    /// This tier's `x-chaos-upstream-attempts` downstream: the chain above and the
    /// caller's attempt.
    chain: Box<str>,
    /// The caller's deadline, before the margin.
    limit: Option<Duration>,
    received: Duration,
    /// Started (not waiting out a delay fault).
    session: Option<Session>,
    step: u64,
    /// The answer of the last attempt, to pass on.
    last: Option<Reply>,
    in_flight: bool,
    drawn: u128,
}

pub(super) struct Tier<'a> {
    hop: u32,
    client: Client,
    retries: bool,
    script: Option<Script>,
    seed: u64,
    policy: &'a str,
    kinds: Vec<Kind>,
    requests: Vec<Option<Forwarding>>,
    free: Vec<u32>,
    pub(super) counts: HopCounts,
    id: String,
    path: String,
}

impl<'a> Tier<'a> {
    /// Tier `index` of the plan (hop `index + 1`).
    pub(super) fn new(
        index: u32,
        policy: &Policy,
        script: Option<Script>,
        seed: u64,
        client_policy: &'a str,
        kinds: &[crate::plan::RequestKind],
    ) -> Tier<'a> {
        Tier {
            hop: index + 1,
            client: Client::new(policy.clone()),
            retries: policy.config().max_attempts > 1,
            script,
            seed,
            policy: client_policy,
            kinds: kinds.iter().map(Kind::new).collect(),
            requests: Vec::new(),
            free: Vec::new(),
            counts: HopCounts::default(),
            id: String::new(),
            path: String::new(),
        }
    }

    fn write_id(&mut self, index: u64) {
        write_id(&mut self.id, self.policy, index);
    }

    /// An attempt of the hop above arrives.
    pub(super) fn receive(
        &mut self,
        now: Duration,
        sent: Sent,
        queue: &mut Queue,
        net: &mut Network,
    ) {
        self.counts.received += 1;
        let attempt = sent.attempt.get();
        if attempt <= 1 {
            self.counts.logical += 1;
        }
        let chain: Box<str> = match &sent.chain {
            Some(above) => format!("{above}.{attempt}").into(),
            None => attempt.to_string().into(),
        };
        self.write_id(sent.index);
        let mut delay = Duration::ZERO;
        if let Some(script) = &self.script {
            let id_seed = IdSeed::new(self.seed, &self.id);
            let mut rng = ChaCha8Rng::seed_from_u64(
                id_seed.attempt(attempt) ^ splitmix64(fnv1a([chain.as_bytes()])),
            );
            let kind = &self.kinds[sent.kind as usize];
            kind.write_path(&mut self.path, sent.n);
            let decision = decide(
                script,
                kind,
                &self.path,
                &self.id,
                self.policy,
                &sent,
                id_seed,
                now,
                &mut rng,
            );
            if let Decision::Fault { fault, .. } = decision {
                let reply = match fault.action {
                    FaultAction::Delay(d) => {
                        delay = d;
                        None
                    }
                    FaultAction::Status(response) => Some(Reply {
                        outcome: Outcome::Status(response.status),
                        retry_after: response.retry_after_secs().map(Duration::from_secs),
                        no_retry: false,
                    }),
                    // The plan allows statuses and delays only at a tier.
                    _ => Some(bare(Outcome::Status(503))),
                };
                if let Some(reply) = reply {
                    self.counts.faulted += 1;
                    queue.push(
                        now + net.hop(),
                        Event::Answer {
                            to: sent.reply,
                            reply,
                        },
                    );
                    return;
                }
            }
        }
        let request = Forwarding {
            from: sent.reply,
            index: sent.index,
            kind: sent.kind,
            n: sent.n,
            chain,
            limit: sent.deadline,
            received: now,
            session: None,
            step: 0,
            last: None,
            in_flight: false,
            drawn: 0,
        };
        let slot = match self.free.pop() {
            Some(slot) => {
                self.requests[slot as usize] = Some(request);
                slot
            }
            None => {
                self.requests.push(Some(request));
                u32::try_from(self.requests.len() - 1).expect("fewer than 2^32 requests at once")
            }
        };
        if delay.is_zero() {
            self.start(slot, now, queue, net);
        } else {
            queue.push(
                now + delay,
                Event::Delayed(Step {
                    hop: self.hop,
                    slot,
                    step: 0,
                }),
            );
        }
    }

    /// A delay fault is over.
    pub(super) fn delayed(
        &mut self,
        to: Step,
        now: Duration,
        queue: &mut Queue,
        net: &mut Network,
    ) {
        self.start(to.slot, now, queue, net);
    }

    fn start(&mut self, slot: u32, now: Duration, queue: &mut Queue, net: &mut Network) {
        let Some(r) = self.requests[slot as usize].as_mut() else {
            return;
        };
        let kind = &self.kinds[r.kind as usize];
        let request = Request {
            method: Method::parse(&kind.method),
            idempotency_key: kind.keyed,
        };
        // The caller's deadline counts from when it sent: what a delay fault and a margin
        // for the answer's way back take is gone already.
        let elapsed = now.saturating_sub(r.received);
        let limit = r
            .limit
            .map(|l| l.saturating_sub(elapsed + DEADLINE_MARGIN.max(l / 20)));
        let (session, action) = self.client.start_within(request, now, limit);
        r.session = Some(session);
        self.act(slot, now, action, queue, net);
    }

    fn act(
        &mut self,
        slot: u32,
        now: Duration,
        action: Action,
        queue: &mut Queue,
        net: &mut Network,
    ) {
        let Some(r) = self.requests[slot as usize].as_mut() else {
            return;
        };
        r.step = queue.next_step();
        let step = Step {
            hop: self.hop,
            slot,
            step: r.step,
        };
        match action {
            Action::Send { attempt, timeout } => {
                self.counts.sent += 1;
                let second = usize::try_from(now.as_secs()).unwrap_or(usize::MAX);
                if second < MAX_SECONDS {
                    let series = &mut self.counts.sent_per_second;
                    if series.len() <= second {
                        series.resize(second + 1, 0);
                    }
                    series[second] += 1;
                }
                if attempt.is_retry() {
                    self.counts.retries += 1;
                }
                r.in_flight = true;
                let hop = net.hop();
                let expires = super::world::expiry(queue, step, now, hop, timeout);
                queue.push(
                    now + hop,
                    Event::Receive(Sent {
                        to: self.hop,
                        reply: step,
                        index: r.index,
                        kind: r.kind,
                        n: r.n,
                        attempt,
                        chain: Some(r.chain.clone()),
                        deadline: timeout
                            .map(|t| Duration::from_millis(t.as_millis().max(1) as u64)),
                        expires,
                    }),
                );
            }
            Action::Wait { until } => queue.push(until, Event::Wake(step)),
            Action::Done(verdict) => {
                let from = r.from;
                let last = r.last;
                let reply = self.respond(verdict, last);
                self.requests[slot as usize] = None;
                self.free.push(slot);
                queue.push(now + net.hop(), Event::Answer { to: from, reply });
            }
        }
    }

    /// The live tier's answer upstream (`relay/answer.rs`).
    fn respond(&mut self, verdict: Verdict, last: Option<Reply>) -> Reply {
        let below_said_stop = last.is_some_and(|a| a.no_retry);
        let (reason, mark) = match verdict {
            Verdict::Succeeded { .. } => {
                self.counts.succeeded += 1;
                (None, false)
            }
            Verdict::GaveUp { reason, .. } => {
                self.counts.gave_up += 1;
                (
                    Some(reason),
                    says_no_retry(reason, self.retries, below_said_stop),
                )
            }
        };
        let (outcome, retry_after) = match last {
            Some(Reply {
                outcome: Outcome::Status(code),
                retry_after,
                ..
            }) => (Outcome::Status(code), retry_after),
            Some(Reply { outcome, .. }) => (
                Outcome::Status(gave_up_status(timed_out(outcome)).as_u16()),
                None,
            ),
            None => (
                Outcome::Status(gave_up_status(reason == Some(GiveUp::Deadline)).as_u16()),
                None,
            ),
        };
        Reply {
            outcome,
            retry_after,
            no_retry: mark,
        }
    }

    /// What an attempt of request `to` came back with (or its timeout).
    pub(super) fn answered(
        &mut self,
        to: Step,
        now: Duration,
        reply: Reply,
        queue: &mut Queue,
        net: &mut Network,
    ) {
        let seed = self.seed;
        let Some(r) = self
            .requests
            .get_mut(to.slot as usize)
            .and_then(Option::as_mut)
            .filter(|r| r.step == to.step && r.in_flight)
        else {
            return;
        };
        r.in_flight = false;
        if reply.outcome.proves_unsent() {
            self.counts.unsent += 1;
        }
        if reply.no_retry {
            self.counts.no_retry_received += 1;
        }
        r.last = Some(reply);
        let Some(session) = r.session.as_mut() else {
            return;
        };
        write_id(&mut self.id, self.policy, r.index);
        let mut rng = ChaCha8Rng::seed_from_u64(splitmix64(
            seed ^ fnv1a([self.id.as_bytes(), r.chain.as_bytes()]),
        ));
        if r.drawn != 0 {
            rng.set_word_pos(r.drawn);
        }
        let action = self.client.on_answer(
            session,
            now,
            reply.outcome,
            reply.retry_after,
            reply.no_retry,
            &mut rng,
        );
        r.drawn = rng.get_word_pos();
        self.act(to.slot, now, action, queue, net);
    }

    /// A backoff of request `to` is over.
    pub(super) fn wake(&mut self, to: Step, now: Duration, queue: &mut Queue, net: &mut Network) {
        let Some(r) = self
            .requests
            .get_mut(to.slot as usize)
            .and_then(Option::as_mut)
            .filter(|r| r.step == to.step)
        else {
            return;
        };
        let Some(session) = r.session.as_mut() else {
            return;
        };
        let action = self.client.on_timer(session, now);
        self.act(to.slot, now, action, queue, net);
    }
}
