//! A modelled relay tier: the second shell around the hop core ([`crate::hop`]), whose
//! first is the live tier (`relay/`). The core decides everything (the tier's own fault
//! phases, its session within the caller's deadline, the answer upstream, the counts and
//! violations); this moves its steps through the event queue in virtual time, and holds no
//! generator between events: a request's jitter stream is made anew when it draws,
//! resumed where it stopped.

use std::time::Duration;

use chaos_policy::Policy;
use fault_server::script::Script;
use fault_server::wire::write_request_id;
use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;

use super::network::Network;
use super::queue::{Event, Queue, Reply, Sent, Step};
use super::request::{Headers, Kind, format_u32, itoa_buf};
use super::slab::Slab;
use crate::hop::{self, Admission, Forwarding, HopCounts, Incoming};

/// A request at the tier, and where its answer goes.
struct Slot {
    /// Who to answer.
    from: Step,
    index: u64,
    kind: u32,
    n: u64,
    request: Forwarding,
    step: u64,
    in_flight: bool,
    /// Words of its jitter stream drawn so far.
    drawn: u128,
}

pub(super) struct Tier<'a> {
    hop: u32,
    core: hop::Tier,
    policy: &'a str,
    kinds: Vec<Kind>,
    requests: Slab<Slot>,
    id: String,
    path: String,
    /// How many peers it listens as.
    peers: u32,
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
            core: hop::Tier::new(policy.clone(), script, seed),
            policy: client_policy,
            kinds: kinds.iter().map(Kind::new).collect(),
            requests: Slab::default(),
            id: String::new(),
            path: String::new(),
            peers: 1,
        }
    }

    /// This tier listening as `peers` peers (below a proxy tier with as many servers).
    pub(super) fn with_peers(mut self, peers: u32) -> Self {
        self.peers = peers;
        self
    }

    pub(super) fn counts(&self) -> &HopCounts {
        self.core.counts()
    }

    /// An attempt of the hop above arrives, at `peer` (numbered from 1; a tier listens as
    /// one peer, so its requests know none, as live).
    pub(super) fn receive(
        &mut self,
        now: Duration,
        sent: Sent,
        peer: u32,
        queue: &mut Queue,
        net: &mut Network,
    ) {
        write_request_id(&mut self.id, self.policy, sent.index);
        let kind = &self.kinds[sent.kind as usize];
        // Only a tier that draws faults matches on the path.
        if self.core.draws_faults() {
            kind.write_path(&mut self.path, sent.n);
        }
        let mut digits = itoa_buf();
        let headers = Headers {
            id: &self.id,
            attempt: format_u32(&mut digits, sent.attempt.get()),
            policy: self.policy,
            upstream: sent.chain.as_deref(),
            kind,
        };
        let incoming = Incoming {
            method: &kind.method,
            path: &self.path,
            id: &self.id,
            attempt: Some(sent.attempt.get()),
            upstream: sent.chain.as_deref(),
            deadline: sent.deadline,
            allowance: sent.allowance,
            idempotency_key: kind.keyed,
            headers: &headers,
            peer: (self.peers > 1).then_some(peer),
            // A simulated chain is the plan's, which has no loop.
            came_back: false,
        };
        let (request, admission) = self.core.receive(now, &incoming);
        // A fault of the tier's own (or a loop, which no plan's chain is long enough for)
        // is answered without forwarding.
        let own = admission.own_reply(request.allowance());
        if let Some(reply) = own {
            queue.push(
                now + net.hop(),
                Event::Answer {
                    to: sent.reply,
                    reply,
                },
            );
            return;
        }
        let delay = match admission {
            Admission::Delay(d) => d,
            _ => Duration::ZERO,
        };
        let slot = Slot {
            from: sent.reply,
            index: sent.index,
            kind: sent.kind,
            n: sent.n,
            request,
            step: 0,
            in_flight: false,
            drawn: 0,
        };
        let slot = self.requests.insert(slot);
        if delay.is_zero() {
            self.start(slot, now, queue, net);
        } else {
            let to = Step {
                hop: self.hop,
                slot,
                step: 0,
            };
            queue.push(now + delay, Event::Delayed(to));
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
        let Some(r) = self.requests.get_mut(slot) else {
            return;
        };
        write_request_id(&mut self.id, self.policy, r.index);
        let step = self.core.start(&mut r.request, now, &self.id);
        self.act(slot, now, step, queue, net);
    }

    /// Moves the core's next step through the queue.
    fn act(
        &mut self,
        slot: u32,
        now: Duration,
        next: hop::Step,
        queue: &mut Queue,
        net: &mut Network,
    ) {
        let Some(r) = self.requests.get_mut(slot) else {
            return;
        };
        r.step = queue.next_step();
        let step = Step {
            hop: self.hop,
            slot,
            step: r.step,
        };
        match next {
            hop::Step::Send { attempt, timeout } => {
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
                        chain: Some(r.request.chain().into()),
                        peer: 1,
                        deadline: timeout.map(fault_server::wire::deadline_sent),
                        allowance: r.request.allowance(),
                        expires,
                    }),
                );
            }
            hop::Step::Wait { until } => queue.push(until, Event::Wake(step)),
            hop::Step::Answer(up) => {
                let reply = up.reply();
                let from = r.from;
                self.requests.remove(slot);
                queue.push(now + net.hop(), Event::Answer { to: from, reply });
            }
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
        let Some(r) = self
            .requests
            .get_mut(to.slot)
            .filter(|r| r.step == to.step && r.in_flight)
        else {
            return;
        };
        r.in_flight = false;
        write_request_id(&mut self.id, self.policy, r.index);
        let mut rng = ChaCha8Rng::seed_from_u64(r.request.jitter_seed());
        if r.drawn != 0 {
            rng.set_word_pos(r.drawn);
        }
        let next = self
            .core
            .on_answer(&mut r.request, now, reply, &mut rng, &self.id);
        r.drawn = rng.get_word_pos();
        self.act(to.slot, now, next, queue, net);
    }

    /// A backoff of request `to` is over.
    pub(super) fn wake(&mut self, to: Step, now: Duration, queue: &mut Queue, net: &mut Network) {
        let Some(r) = self.requests.get_mut(to.slot).filter(|r| r.step == to.step) else {
            return;
        };
        write_request_id(&mut self.id, self.policy, r.index);
        let next = self.core.on_timer(&mut r.request, now, &self.id);
        self.act(to.slot, now, next, queue, net);
    }
}
