//! The modelled fault-server: the live server's handler (`fault-server`'s
//! `server/handler.rs`) step for step, in virtual time, over the same pure parts: the
//! same [`Script::select`] with the same per-attempt seed, the same [`CapacityModel`],
//! the same [`Ledger`]. Only the HTTP layer is gone: an answer is an [`Event::Answer`]
//! one network hop later, a service time is an [`Event::Finish`].
//!
//! The order of events for one attempt, as in the live handler: the ledger records its
//! arrival; the script decides; a fault other than `delay` acts at once (in front of the
//! capacity model, with its side effect first when `processed`); anything else is served:
//! the capacity model admits, queues or rejects it, an admitted request checks its
//! idempotency key, holds its slot for the delay plus the service time, executes its side
//! effect and answers 200. Serving is detached from the client, as live: a request whose
//! client gave up keeps its place in the queue and still executes.

use std::collections::HashMap;
use std::time::Duration;

use chaos_policy::{Outcome, ResetPhase, Unprocessed};
use fault_server::capacity::{Admission, CapacityLimits, CapacityModel, Ticket};
use fault_server::effect::{Effect, Ending, effect, key_answer};
use fault_server::ledger::{Disposition, StoredResponse};
use fault_server::ledger::{KeyCheck, KeyClaim, Ledger, LedgerSnapshot, RequestIdentity};
use fault_server::ledger::{PeerArrival, Resent, Stated};
use fault_server::script::{Decision, Fault, Pushback, Script};

use super::lazy::LazyRng;
use super::network::Network;
use super::queue::{Event, Queue, Reply, Sent, Step};
use super::request::{Kind, decide};
use crate::plan::RequestKind;
use fault_server::wire::{Arrival, DrawSeeds, write_request_id};

/// A request being served (or waiting for a slot).
struct Job {
    reply: Step,
    index: u64,
    kind: u32,
    n: u64,
    delay: Duration,
    rng: Option<LazyRng>,
    ticket: Option<Ticket>,
    claim: Option<KeyClaim>,
    /// Its place among the arrivals of its stated attempt, told how it was answered.
    resent: Resent,
}

/// What a fault does to an attempt.
enum Faulted {
    /// A `delay`: the attempt is served, and holds its slot this much longer.
    Delayed(Duration),
    /// Any other fault: the answer, `after` this long (a `timeout` holds the attempt
    /// first), and its outcome in the ledger.
    Answered {
        reply: Reply,
        outcome: Disposition,
        after: Duration,
    },
}

pub(super) struct Server<'a> {
    script: &'a Script,
    seed: u64,
    policy: &'a str,
    kinds: Vec<Kind>,
    limits: Option<CapacityLimits>,
    model: Option<CapacityModel>,
    ledger: &'a Ledger,
    jobs: Vec<Option<Job>>,
    free: Vec<u32>,
    queued: HashMap<Ticket, u32>,
    hang_cap: Duration,
    needs_rng: bool,
    /// The client speaks gRPC (`target.protocol: grpc`): answers are read as gRPC codes.
    grpc: bool,
    /// The client speaks HTTP/2 (or gRPC): a refused stream is one, not a closed
    /// connection.
    http2: bool,
    id: String,
    path: String,
    /// How many peers it listens as: with one, an attempt's peer is `None`, as live.
    peers: u32,
}

impl<'a> Server<'a> {
    pub(super) fn new(
        script: &'a Script,
        seed: u64,
        policy: &'a str,
        kinds: &[RequestKind],
        ledger: &'a Ledger,
        protocol: crate::plan::Protocol,
    ) -> Self {
        let limits = script.capacity().copied();
        Server {
            script,
            seed,
            policy,
            kinds: kinds.iter().map(Kind::new).collect(),
            model: limits
                .filter(|l| l.capacity.is_some())
                .map(|l| CapacityModel::new(&l)),
            needs_rng: script.phase_count() > 0
                || limits.is_some_and(|l| !l.service_time.is_zero()),
            limits,
            ledger,
            jobs: Vec::new(),
            free: Vec::new(),
            queued: HashMap::new(),
            hang_cap: fault_server::DEFAULT_HANG_CAP,
            grpc: protocol == crate::plan::Protocol::Grpc,
            http2: protocol.is_http2(),
            id: String::new(),
            path: String::new(),
            peers: 1,
        }
    }

    /// This server listening as `peers` peers (`fault-server --peers`).
    pub(super) fn with_peers(mut self, peers: u32) -> Self {
        self.peers = peers;
        self
    }

    /// An attempt ended with `outcome`: the ledger counts it, and a resend of it will be
    /// counted after it (live, the request's `InFlight` does both).
    fn ended(&self, resent: &Resent, outcome: Disposition) {
        self.ledger.record_outcome(outcome);
        self.ledger
            .resend_answered(self.ledger.epoch(), resent, outcome);
    }

    pub(super) fn ledger(&self) -> LedgerSnapshot {
        self.ledger.snapshot()
    }

    fn write_id(&mut self, index: u64) {
        write_request_id(&mut self.id, self.policy, index);
    }

    /// Who the request whose id is in `self.id` is, to the ledger.
    fn who(&self) -> RequestIdentity<'_> {
        RequestIdentity {
            request_id: Some(&self.id),
            policy: Some(self.policy),
            // Read only of a key carried across a reset, which a simulated world (one
            // policy, never reset under a request) never has.
            attempt: None,
        }
    }

    /// The key's request executed: its 200 is what a replay answers (the body does not
    /// matter to the counts).
    fn complete(&self, claim: KeyClaim) {
        self.ledger.complete_key(
            claim,
            StoredResponse {
                status: 200,
                body: String::new(),
            },
        );
    }

    fn write_path(&mut self, kind: usize, n: u64) {
        self.kinds[kind].write_path(&mut self.path, n);
    }

    fn answer(&self, queue: &mut Queue, net: &mut Network, now: Duration, to: Step, reply: Reply) {
        let reply = self.on_wire(reply);
        queue.push(now + net.hop(), Event::Answer { to, reply });
    }

    /// What the client reads of `reply`: to a gRPC call, the fault-server answers every
    /// HTTP status with the code gRPC maps it to (its `server/grpc.rs`), in a Trailers-Only
    /// answer that carries no `Retry-After`; a scripted gRPC fault's code is already one.
    fn on_wire(&self, reply: Reply) -> Reply {
        match reply.outcome {
            Outcome::Status(status) if self.grpc => Reply::bare(Outcome::Grpc(
                fault_server::wire::grpc::code_answering(status),
            )),
            _ => reply,
        }
    }

    /// An attempt arrives at `now`, at `peer` (numbered from 1).
    pub(super) fn receive(
        &mut self,
        now: Duration,
        sent: Sent,
        peer: u32,
        queue: &mut Queue,
        net: &mut Network,
    ) {
        self.write_id(sent.index);
        let who = self.who();
        let epoch = self.ledger.record_request(who, now);
        let kind = sent.kind as usize;
        let peer = (self.peers > 1).then_some(peer);
        let arrival = PeerArrival {
            peer,
            method: &self.kinds[kind].method,
            stated: Some(Stated {
                request_id: &self.id,
                attempt: Some(sent.attempt.get()),
                upstream: sent.chain.as_deref(),
            }),
        };
        let resent = self.ledger.arrive_at(epoch, arrival, now);
        let arrival = Arrival {
            peer,
            repeat: resent.repeat,
        };
        let (decision, rng) = self.select(now, &sent, arrival);
        let mut delay = Duration::ZERO;
        if let Decision::Fault { phase, fault } = decision {
            match self.fault(phase, fault, kind, sent.n, now) {
                Faulted::Delayed(d) => delay = d,
                Faulted::Answered {
                    reply,
                    outcome,
                    after,
                } => {
                    self.ended(&resent, outcome);
                    let arrives = now + after + net.hop();
                    // A hang's end that reaches its sender after the sender's own timeout
                    // falls on a step that is over: it would only wait in the queue, as
                    // long as the hang cap, for every attempt the sender retries.
                    if sent.expires.is_none_or(|expires| arrives <= expires) {
                        let reply = self.on_wire(reply);
                        queue.push(
                            arrives,
                            Event::Answer {
                                to: sent.reply,
                                reply,
                            },
                        );
                    }
                    return;
                }
            }
        }
        if self.serves_at_once(kind, delay) {
            self.serve_now(kind, now, sent.reply, &resent, queue, net);
            return;
        }
        let job = Job {
            reply: sent.reply,
            index: sent.index,
            kind: sent.kind,
            n: sent.n,
            delay,
            rng,
            ticket: None,
            claim: None,
            resent,
        };
        self.admit(job, now, queue, net);
    }

    /// What the script decides for the attempt whose id is in `self.id`, and the
    /// attempt's own stream (the service time draws from it too): seeded as live, by
    /// [`DrawSeeds`], only when something may draw from it.
    fn select(
        &mut self,
        now: Duration,
        sent: &Sent,
        arrival: Arrival,
    ) -> (Decision, Option<LazyRng>) {
        let kind = sent.kind as usize;
        let seeds = self.needs_rng.then(|| {
            DrawSeeds::new(
                self.seed,
                Some(&self.id),
                Some(sent.attempt.get()),
                sent.chain.as_deref(),
                || 0,
            )
            .at(arrival)
        });
        let mut rng = seeds.map(|s| LazyRng::new(s.attempt));
        let decision = match rng.as_mut() {
            Some(rng) if self.script.phase_count() > 0 => {
                self.write_path(kind, sent.n);
                decide(
                    self.script,
                    &self.kinds[kind],
                    &self.path,
                    &self.id,
                    self.policy,
                    sent,
                    seeds.and_then(|s| s.sticky),
                    arrival.peer,
                    now,
                    rng,
                )
            }
            _ => Decision::Serve,
        };
        (decision, rng)
    }

    /// A fault fires on the attempt whose id is in `self.id`: the ledger counts it, a
    /// `processed` one executes the side effect first, and all but a `delay` answer in
    /// front of the capacity model.
    fn fault(&mut self, phase: usize, fault: Fault, kind: usize, n: u64, now: Duration) -> Faulted {
        let name = self.script.phase_name(phase).unwrap_or("?");
        self.ledger.record_fault(fault.kind(), name);
        let (ending, processed) = match effect(&fault, self.hang_cap, self.grpc) {
            // Served; what a GOAWAY does to the other streams of its connection is live
            // only: the simulator has no connections.
            Effect::Serve { extra, .. } => return Faulted::Delayed(extra),
            Effect::Answer { ending, processed } => (ending, processed),
        };
        if processed {
            // The work is done, then the answer is lost or replaced.
            self.execute_now(kind, n, now);
        }
        let outcome = ending.disposition();
        let (reply, after) = match ending {
            Ending::Refuse if self.http2 => (
                Reply::bare(Outcome::Unprocessed(Unprocessed::RefusedStream)),
                Duration::ZERO,
            ),
            Ending::Refuse => (Reply::bare(Outcome::Closed), Duration::ZERO),
            Ending::Status {
                grpc: Some(grpc), ..
            } => (
                Reply {
                    outcome: Outcome::Grpc(grpc.code),
                    retry_after: match grpc.pushback {
                        Some(Pushback::After(wait)) => Some(wait),
                        _ => None,
                    },
                    no_retry: false,
                    stop: grpc.pushback == Some(Pushback::Stop),
                    allowance_left: None,
                },
                Duration::ZERO,
            ),
            Ending::Status { response, .. } => (
                Reply {
                    outcome: Outcome::Status(response.status),
                    retry_after: response.retry_after_secs().map(Duration::from_secs),
                    no_retry: false,
                    stop: false,
                    allowance_left: None,
                },
                Duration::ZERO,
            ),
            Ending::Reset => (
                Reply::bare(Outcome::Reset(ResetPhase::Unknown)),
                Duration::ZERO,
            ),
            Ending::Close => (Reply::bare(Outcome::Closed), Duration::ZERO),
            Ending::Truncate(_) => (Reply::bare(Outcome::TruncatedBody), Duration::ZERO),
            // Held, then closed: the client's attempt timeout usually ends it first.
            Ending::Hold(hold) => (Reply::bare(Outcome::Closed), hold),
        };
        Faulted::Answered {
            reply,
            outcome,
            after,
        }
    }

    /// Whether serving an attempt of `kind` waits for nothing: no slot, no time to
    /// serve, no key to check.
    fn serves_at_once(&self, kind: usize, delay: Duration) -> bool {
        self.model.is_none()
            && delay.is_zero()
            && self.limits.is_none_or(|l| l.service_time.is_zero())
            && !self.kinds[kind].keyed
    }

    /// Serves the attempt whose id is in `self.id` at once: what `start` and `finish`
    /// would do, without the cost of a job.
    fn serve_now(
        &mut self,
        kind: usize,
        now: Duration,
        to: Step,
        resent: &Resent,
        queue: &mut Queue,
        net: &mut Network,
    ) {
        if self.kinds[kind].side_effect {
            let who = self.who();
            self.ledger.execute(who, now);
        }
        self.ended(resent, Disposition::Served);
        self.answer(queue, net, now, to, Reply::bare(Outcome::Status(200)));
    }

    /// The capacity model admits `job` (its service starts), queues it, or rejects it.
    fn admit(&mut self, job: Job, now: Duration, queue: &mut Queue, net: &mut Network) {
        let Some(model) = &mut self.model else {
            let job = self.insert(job);
            self.run(Some(job), now, queue, net);
            return;
        };
        match model.arrive(now) {
            Admission::Serve(ticket) => {
                let job = self.insert(Job {
                    ticket: Some(ticket),
                    ..job
                });
                self.run(Some(job), now, queue, net);
            }
            Admission::Queued(ticket) => {
                let job = self.insert(Job {
                    ticket: Some(ticket),
                    ..job
                });
                self.queued.insert(ticket, job);
            }
            Admission::Rejected => {
                let status = self.limits.map_or(503, |l| l.reject_status);
                self.ended(&job.resent, Disposition::Rejected);
                self.answer(
                    queue,
                    net,
                    now,
                    job.reply,
                    Reply::bare(Outcome::Status(status)),
                );
            }
        }
    }

    fn insert(&mut self, job: Job) -> u32 {
        match self.free.pop() {
            Some(slot) => {
                self.jobs[slot as usize] = Some(job);
                slot
            }
            None => {
                self.jobs.push(Some(job));
                u32::try_from(self.jobs.len() - 1).expect("fewer than 2^32 jobs at once")
            }
        }
    }

    /// Starts `job`'s service at `now`, and every job that a slot freed at once lets
    /// start after it.
    fn run(&mut self, mut next: Option<u32>, now: Duration, queue: &mut Queue, net: &mut Network) {
        while let Some(job) = next.take() {
            next = self.start(job, now, queue, net);
        }
    }

    /// Service starts: the idempotency key is checked, then the slot is held for the
    /// delay plus the service time. Returns the job that starts because this one left at
    /// once (a replay, a conflict).
    fn start(
        &mut self,
        slot: u32,
        now: Duration,
        queue: &mut Queue,
        net: &mut Network,
    ) -> Option<u32> {
        let job = self.jobs[slot as usize].as_mut()?;
        let service = match (&self.limits, job.rng.as_mut()) {
            (Some(limits), Some(rng)) => limits.service_time.sample(rng),
            _ => Duration::ZERO,
        } + job.delay;
        let kind = &self.kinds[job.kind as usize];
        if kind.side_effect && kind.keyed {
            let (index, n, k) = (job.index, job.n, job.kind as usize);
            let fingerprint = self.fingerprint(k, n);
            self.write_id(index);
            let who = self.who();
            let check = self.ledger.begin_keyed(&self.id, fingerprint, who, now);
            let early = key_answer(&check);
            if let KeyCheck::Fresh(claim) = check
                && let Some(job) = self.jobs[slot as usize].as_mut()
            {
                job.claim = Some(claim);
            }
            if let Some((served, status)) = early {
                let resent = self.jobs[slot as usize].as_ref().map(|j| j.resent);
                self.ended(&resent.unwrap_or_default(), served);
                return self.leave(slot, now, queue, net, Reply::bare(Outcome::Status(status)));
            }
        }
        if service.is_zero() {
            return self.finish(slot, now, queue, net);
        }
        queue.push(now + service, Event::Finish { job: slot });
        None
    }

    /// A job's service time is over: its side effect executes and it answers 200.
    /// Returns the queued job that takes its slot, if one does.
    pub(super) fn finish(
        &mut self,
        slot: u32,
        now: Duration,
        queue: &mut Queue,
        net: &mut Network,
    ) -> Option<u32> {
        let job = self.jobs[slot as usize].as_mut()?;
        let (index, claim, side_effect, resent) = (
            job.index,
            job.claim.take(),
            self.kinds[job.kind as usize].side_effect,
            job.resent,
        );
        if side_effect {
            self.write_id(index);
            let who = self.who();
            self.ledger.execute(who, now);
        }
        if let Some(claim) = claim {
            self.complete(claim);
        }
        self.ended(&resent, Disposition::Served);
        self.leave(slot, now, queue, net, Reply::bare(Outcome::Status(200)))
    }

    /// [`Server::finish`] of a [`Event::Finish`], with the jobs it lets start.
    pub(super) fn finished(
        &mut self,
        slot: u32,
        now: Duration,
        queue: &mut Queue,
        net: &mut Network,
    ) {
        let next = self.finish(slot, now, queue, net);
        self.run(next, now, queue, net);
    }

    fn leave(
        &mut self,
        slot: u32,
        now: Duration,
        queue: &mut Queue,
        net: &mut Network,
        reply: Reply,
    ) -> Option<u32> {
        let job = self.jobs[slot as usize].take()?;
        self.free.push(slot);
        self.answer(queue, net, now, job.reply, reply);
        let started = job
            .ticket
            .zip(self.model.as_mut())
            .and_then(|(ticket, model)| model.finish(ticket, now))?;
        self.queued.remove(&started.ticket)
    }

    /// The side effect of a `processed: true` fault: executed at once, before the
    /// fault's answer (the live handler runs the application with no service time).
    fn execute_now(&mut self, kind: usize, n: u64, now: Duration) {
        let k = &self.kinds[kind];
        if !k.side_effect {
            return;
        }
        let keyed = k.keyed.then(|| self.fingerprint(kind, n));
        let who = self.who();
        if let Some(fingerprint) = keyed {
            match self.ledger.begin_keyed(&self.id, fingerprint, who, now) {
                KeyCheck::Fresh(claim) => {
                    self.ledger.execute(who, now);
                    self.complete(claim);
                }
                KeyCheck::Replay(_) | KeyCheck::InFlight | KeyCheck::Mismatch => {}
            }
        } else {
            self.ledger.execute(who, now);
        }
    }

    /// The live handler's "same request" for idempotency keys: method, path, body.
    fn fingerprint(&mut self, kind: usize, n: u64) -> u64 {
        self.write_path(kind, n);
        let k = &self.kinds[kind];
        fault_server::wire::fingerprint(&k.method, &self.path, k.body.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use chaos_policy::Attempt;
    use fault_server::Distribution;

    use super::*;
    use crate::plan::{Numbers, Protocol};

    /// Drives `fault-server/tests/peers.rs`'s `the_scripted_case_the_simulator_agrees_with`
    /// through the simulated server: ids `p-…`, seed 7, peer `i % 3 + 1`, then each resent
    /// to peer 2. The live server counted, and faulted, exactly this.
    #[test]
    fn the_simulated_server_counts_peers_and_draws_as_the_live_one() {
        let yaml = "faults: [ { peer: 2, probability: 0.5, respond: { status: 503 } } ]";
        let script = Script::from_yaml_str(yaml).expect("a script");
        let kinds = [RequestKind {
            name: "get".into(),
            rpc: None,
            method: "GET".into(),
            path: "/".into(),
            n: Numbers::default(),
            weight: 1.0,
            body: None,
            headers: BTreeMap::new(),
            idempotency_key: false,
        }];
        let ledger = Ledger::default();
        let mut server =
            Server::new(&script, 7, "p", &kinds, &ledger, Protocol::Http1).with_peers(3);
        let (mut queue, mut net) = (Queue::default(), Network::new(Distribution::ZERO, 7));
        let arrivals = (0..30)
            .map(|i| (i, i % 3 + 1))
            .chain((0..30).map(|i| (i, 2)));
        for (step, (index, peer)) in (0..).zip(arrivals) {
            let sent = Sent {
                to: 0,
                reply: Step {
                    hop: 0,
                    slot: 0,
                    step,
                },
                index,
                kind: 0,
                n: 0,
                attempt: Attempt::FIRST,
                chain: None,
                peer: u32::try_from(peer).expect("a small peer number"),
                deadline: None,
                allowance: None,
                expires: None,
            };
            let peer = sent.peer;
            server.receive(Duration::ZERO, sent, peer, &mut queue, &mut net);
        }
        let snapshot = server.ledger();
        let get = |n| BTreeMap::from([("GET".to_string(), n)]);
        let by_peer = BTreeMap::from([(1, get(10)), (2, get(40)), (3, get(10))]);
        assert_eq!(snapshot.by_peer, by_peer);
        assert_eq!(snapshot.repeats, 30);
        // `SCRIPTED_503` of the live test.
        assert_eq!(
            snapshot.by_outcome.get("status_503"),
            Some(&21),
            "{snapshot:?}"
        );
    }
}
