//! One policy's simulated run: the plan's arrivals, each a [`Session`] of the policy's
//! [`Client`], against the modelled server, event by event in virtual time.
//!
//! It follows the live engine's bookkeeping call for call, into the same [`Recorder`]:
//! an arrival beyond `max_in_flight` is dropped; arrivals run for the plan's whole
//! duration; requests still running after it get `drain` to finish; what is left then is
//! unfinished (an attempt on the wire abandoned); the server then settles for up to
//! `drain` more before its ledger is read. Jitter draws come from the same per-request
//! stream as live ([`request_rng`], made lazily: [`LazyRng`]), so a request's decisions
//! do not depend on the others. Under `load.max_connections` an attempt beyond the cap
//! waits for a connection, first come first served, within its timeout ([`Connections`]),
//! as the live engine's does. Two things differ by construction: there is no dispatch
//! lag (an arrival starts at its scheduled time) and time spent deciding is zero.
//!
//! [`request_rng`]: crate::schedule::request_rng

use std::collections::VecDeque;
use std::time::Duration;

use chaos_policy::{Action, Attempt, Client, Outcome, RunCounts};
use fault_server::ledger::{Ledger, LedgerSnapshot};
use fault_server::script::Script;

use tokio_util::sync::CancellationToken;

use super::bound::{Bound, Cut};
use super::hops::Hop;
use super::lazy::LazyRng;
use super::network::Network;
use super::queue::{Event, Queue, Reply, Sent, Step};
use super::server::Server;
use crate::logical::{ConnectionWait, LogicalRequest};
use crate::plan::{NamedPolicy, Plan};
use crate::schedule::{Arrival, Schedule, request_rng_seed};
use crate::stats::{PolicyRun, Recorder};

/// A logical request in progress: the client core's request, and where the simulation
/// holds it.
struct Running {
    request: LogicalRequest,
    /// Its current step (a send, a wait), numbered across the run: an event of another
    /// step is stale, whichever request now holds the slot.
    step: u64,
    /// The attempt waits for a connection, with this timeout (from when it was sent).
    queued: Option<Option<Duration>>,
    /// Where its jitter stream stands (a ChaCha word position): the stream is remade from
    /// the seed when drawn from, so a waiting request costs a few bytes, not a generator.
    drawn: u128,
}

/// What one simulated policy run produced: what the live engine and the live server's
/// ledger would have, and how many events it took.
#[derive(Debug)]
pub struct Simulated {
    pub run: PolicyRun,
    pub ledger: LedgerSnapshot,
    pub events: u64,
    /// The most events that waited at once (timeouts included): the run's memory.
    pub peak_pending: usize,
    /// What each relay tier counted, outermost first.
    pub tiers: Vec<crate::hop::HopCounts>,
    /// What each proxy tier counted besides, in the same order (`None`: a relay tier).
    pub proxies: Vec<Option<crate::hop::proxy::ProxyCounts>>,
}

struct World<'a> {
    plan: &'a Plan,
    policy: &'a NamedPolicy,
    client: Client,
    recorder: Recorder,
    server: Server<'a>,
    queue: Queue,
    net: Network,
    running: Vec<Option<Running>>,
    free: Vec<u32>,
    live: u32,
    next_sample: Duration,
    events: u64,
    id: String,
    /// The plan's relay tiers, outermost first.
    tiers: Vec<Hop<'a>>,
    connections: Option<Connections>,
    bound: Bound<'a>,
    /// Why the run stopped before its end, if it did.
    cut: Option<Cut>,
}

/// The client's connections under the plan's cap: how many carry an attempt, and the
/// attempts waiting for one, in order (an entry whose request has moved on is skipped).
struct Connections {
    max: u32,
    busy: u32,
    waiting: VecDeque<Step>,
}

/// What one policy's run leaves for the next to reuse: the server's ledger (reset between
/// policies, as the live server's is) and the run's tables, so a second policy does not
/// pay again for memory the first one grew.
#[derive(Default)]
pub struct Scratch {
    ledger: Ledger,
    queue: Queue,
    running: Vec<Option<Running>>,
}

impl std::fmt::Debug for Scratch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scratch").finish_non_exhaustive()
    }
}

/// Runs the plan's load through `policy` against the modelled server.
pub fn run(plan: &Plan, policy: &NamedPolicy, script: &Script) -> Simulated {
    run_arrivals(
        plan,
        policy,
        script,
        Schedule::new(&plan.load, plan.seed),
        &mut Scratch::default(),
        &CancellationToken::new(),
    )
}

/// [`run`] with the arrivals given, due in order, and the tables of an earlier run; it
/// stops early, the run marked aborted, once `stop` is cancelled, and with the reason in
/// [`PolicyRun::gone`] when more events wait at once than the plan allows (`bound.rs`).
pub fn run_arrivals(
    plan: &Plan,
    policy: &NamedPolicy,
    script: &Script,
    arrivals: impl Iterator<Item = Arrival>,
    scratch: &mut Scratch,
    stop: &CancellationToken,
) -> Simulated {
    let seed = script.seed().unwrap_or(plan.seed);
    scratch.ledger.reset();
    let mut running = std::mem::take(&mut scratch.running);
    running.clear();
    let mut world = World {
        plan,
        policy,
        client: Client::new(policy.policy.clone()),
        recorder: Recorder::new(plan.fault_window),
        server: Server::new(
            script,
            seed,
            &policy.name,
            &plan.load.requests,
            &scratch.ledger,
            plan.load.protocol,
        )
        .with_peers(policy.peers_of(policy.tiers.len())),
        queue: std::mem::take(&mut scratch.queue),
        net: Network::new(plan.network_latency, plan.seed),
        running,
        free: Vec::new(),
        live: 0,
        next_sample: Duration::from_secs(1) - SAMPLE_EARLY,
        events: 0,
        id: String::new(),
        tiers: super::hops::of(plan, policy),
        connections: plan.load.connection_cap().map(|max| Connections {
            max,
            busy: 0,
            waiting: VecDeque::new(),
        }),
        bound: Bound::new(plan, policy.tiers.len(), stop),
        cut: None,
    };
    let stop = world.drive(arrivals.peekable());
    world.close(stop);
    if world.cut.is_none() {
        // Live, each tier settles for up to `drain` in turn, then the server does.
        let hops = u32::try_from(world.tiers.len()).unwrap_or(u32::MAX);
        world.settle(stop + plan.drain * (hops + 1));
    }
    let run = RunCounts {
        logical: world.recorder.logical,
        duration: world.recorder.last_send,
    };
    let ledger = world.server.ledger();
    let peak_pending = world.queue.peak();
    let mut queue = world.queue;
    queue.clear();
    scratch.queue = queue;
    scratch.running = world.running;
    Simulated {
        run: PolicyRun {
            budget_bound: world.client.budget_bound(run),
            breaker_trips: world.client.breaker_trips(),
            recorder: world.recorder,
            elapsed: stop,
            aborted: matches!(world.cut, Some(Cut::Interrupted)),
            gone: world
                .cut
                .as_ref()
                .and_then(|cut| cut.reason(&policy.name, plan)),
        },
        ledger,
        events: world.events,
        peak_pending,
        tiers: world.tiers.iter().map(|t| t.counts().clone()).collect(),
        proxies: world
            .tiers
            .iter()
            .map(|t| t.proxy_counts().cloned())
            .collect(),
    }
}

/// The live sampler reads the budget and breaker just before each second ends.
const SAMPLE_EARLY: Duration = Duration::from_millis(1);

impl World<'_> {
    /// Arrivals and events in time order until every request is over after the plan's
    /// duration, its drain runs out, or the run is cut short; returns when the client
    /// side stopped.
    fn drive(
        &mut self,
        mut arrivals: std::iter::Peekable<impl Iterator<Item = Arrival>>,
    ) -> Duration {
        let limit = self.plan.duration + self.plan.drain;
        loop {
            if arrivals.peek().is_none() && self.live == 0 {
                break;
            }
            let arrival_at = arrivals.peek().map(|a| a.at);
            let next = self.queue.peek();
            let (at, event) = match (arrival_at, next) {
                (Some(a), Some(e)) if a <= e.at => (a, None),
                (_, Some(e)) => (e.at, Some(e)),
                (Some(a), None) => (a, None),
                (None, None) => break,
            };
            if at > limit {
                self.sample_until(limit);
                return limit;
            }
            self.sample_until(at);
            self.events += 1;
            match event {
                None => {
                    if let Some(arrival) = arrivals.next() {
                        self.arrive(arrival);
                    }
                }
                Some(next) => {
                    if let Some((now, event)) = self.queue.take(next) {
                        self.handle(now, event);
                    }
                }
            }
            if let Some(cut) = self.bound.check(self.events, self.queue.len(), at) {
                self.cut = Some(cut);
                return at;
            }
        }
        // Every request is over: the run still lasts the plan's duration.
        let stop = self.client.clock().max(self.plan.duration).min(limit);
        self.sample_until(stop);
        stop
    }

    fn sample_until(&mut self, at: Duration) {
        while self.next_sample <= at {
            let now = self.next_sample;
            let second = (now + SAMPLE_EARLY).as_secs() - 1;
            self.recorder.sample_state(
                Duration::from_secs(second),
                self.client.budget_level(now),
                self.client.breaker_state(now),
            );
            self.next_sample += Duration::from_secs(1);
        }
    }

    fn arrive(&mut self, arrival: Arrival) {
        if self.live >= self.plan.load.max_in_flight {
            self.recorder.dropped(arrival.at);
            return;
        }
        LogicalRequest::arrived(&mut self.recorder, &arrival, Duration::ZERO);
        let kind = &self.plan.load.requests[arrival.kind];
        let (request, action) = LogicalRequest::start(
            &mut self.client,
            self.policy.share_budget,
            kind,
            arrival,
            arrival.at,
        );
        let running = Running {
            request,
            step: 0,
            queued: None,
            drawn: 0,
        };
        self.live += 1;
        let slot = match self.free.pop() {
            Some(slot) => {
                self.running[slot as usize] = Some(running);
                slot
            }
            None => {
                self.running.push(Some(running));
                u32::try_from(self.running.len() - 1).expect("fewer than 2^32 requests at once")
            }
        };
        self.act(slot, arrival.at, action);
    }

    fn handle(&mut self, now: Duration, event: Event) {
        let (queue, net) = (&mut self.queue, &mut self.net);
        match event {
            Event::Receive(sent) => {
                let (reply, expires) = (sent.reply, sent.expires);
                queue.clear_answered();
                // Only a proxy tier spreads over peers: every other hop sends to peer 1.
                let peer = sent.peer;
                match self.tiers.get_mut(sent.to as usize) {
                    Some(tier) => {
                        tier.receive(now, sent, peer, queue, net, &self.plan.load.requests)
                    }
                    None => self.server.receive(now, sent, peer, queue, net),
                }
                // The sender's timeout matters only if no answer is on its way in time.
                if let Some(expires) = expires
                    && queue.answered_at(reply).is_none_or(|at| at > expires)
                {
                    queue.push(expires, Event::Expire(reply));
                }
            }
            Event::Finish { job } => self.server.finished(job, now, queue, net),
            Event::Delayed(to) => {
                if let Some(tier) = tier_of(&mut self.tiers, to) {
                    tier.delayed(to, now, &mut self.queue, &mut self.net);
                }
            }
            Event::Answer { to, reply } => match tier_of(&mut self.tiers, to) {
                Some(tier) => tier.answered(to, now, reply, &mut self.queue, &mut self.net),
                None => self.answered(to, now, reply),
            },
            Event::Expire(to) => {
                let reply = Reply::bare(Outcome::AttemptTimeout);
                match tier_of(&mut self.tiers, to) {
                    Some(tier) => tier.answered(to, now, reply, &mut self.queue, &mut self.net),
                    None => self.answered(to, now, reply),
                }
            }
            Event::Wake(to) => match tier_of(&mut self.tiers, to) {
                Some(tier) => tier.wake(to, now, &mut self.queue, &mut self.net),
                None => self.wake(to, now),
            },
        }
    }

    fn wake(&mut self, to: Step, now: Duration) {
        let running = self
            .running
            .get_mut(to.slot as usize)
            .and_then(Option::as_mut)
            .filter(|r| r.step == to.step);
        if let Some(running) = running {
            let action = running.request.decide_timer(&mut self.client, now);
            self.act(to.slot, now, action);
        }
    }

    fn answered(&mut self, to: Step, now: Duration, reply: Reply) {
        let seed = self.plan.seed;
        let Some(running) = self
            .running
            .get_mut(to.slot as usize)
            .and_then(Option::as_mut)
            .filter(|r| r.step == to.step)
        else {
            return;
        };
        let Some((sent, _)) = running.request.out() else {
            return;
        };
        let mut reply = reply;
        let mut wait = None;
        match (running.queued.take(), &mut self.connections) {
            // Its timeout ran out while it waited for a connection: never sent.
            (Some(_), _) => {
                reply.outcome = Outcome::ConnectTimeout;
                wait = Some(ConnectionWait {
                    waited: now.saturating_sub(sent),
                    timed_out: true,
                });
            }
            // Its connection is free for the next in line, before this request's next
            // attempt can ask for one (live, the slot is given back first).
            (None, Some(connections)) => connections.busy -= 1,
            (None, None) => {}
        }
        self.admit(now);
        let Some(running) = self.running[to.slot as usize].as_mut() else {
            return;
        };
        let id = violation_id(&mut self.id, &self.policy.name, &running.request);
        running
            .request
            .answered(&mut self.recorder, now, reply.outcome, wait, id);
        let index = running.request.arrival().index;
        let mut rng = LazyRng::resume(request_rng_seed(seed, index), running.drawn);
        let action = running
            .request
            .decide_reply(&mut self.client, now, reply, &mut rng);
        running.drawn = rng.word();
        self.act(to.slot, now, action);
    }

    /// Acts on what the policy decided for the request in `slot`.
    fn act(&mut self, slot: u32, now: Duration, action: Action) {
        let Some(running) = self.running[slot as usize].as_mut() else {
            return;
        };
        running.step = self.queue.next_step();
        let step = Step {
            hop: 0,
            slot,
            step: running.step,
        };
        match action {
            Action::Send { attempt, timeout } => {
                running.request.sending(attempt, now);
                let arrival = *running.request.arrival();
                if let Some(connections) = &mut self.connections {
                    if connections.busy >= connections.max {
                        running.queued = Some(timeout);
                        connections.waiting.push_back(step);
                        if let Some(timeout) = timeout {
                            self.queue.push(now + timeout, Event::Expire(step));
                        }
                        return;
                    }
                    connections.busy += 1;
                    self.recorder.waited(Duration::ZERO, false);
                }
                self.transmit(step, now, arrival, attempt, timeout);
            }
            Action::Wait { until } => self.queue.push(until, Event::Wake(step)),
            Action::Done(verdict) => {
                running.request.finished(&mut self.recorder, now, &verdict);
                running.request.count_reached(&mut self.recorder);
                self.running[slot as usize] = None;
                self.free.push(slot);
                self.live -= 1;
            }
        }
    }

    /// Sends an attempt of the load generator to the first hop.
    fn transmit(
        &mut self,
        step: Step,
        now: Duration,
        arrival: Arrival,
        attempt: Attempt,
        timeout: Option<Duration>,
    ) {
        // Behind tiers the attempt says how long it will be waited for, as live.
        let deadline = crate::logical::deadline_below(timeout, !self.tiers.is_empty());
        let hop = self.net.hop();
        let expires = expiry(&mut self.queue, step, now, hop, timeout);
        self.queue.push(
            now + hop,
            Event::Receive(Sent {
                to: 0,
                reply: step,
                index: arrival.index,
                kind: u32::try_from(arrival.kind).unwrap_or(u32::MAX),
                n: arrival.n,
                attempt,
                chain: None,
                peer: 1,
                deadline,
                allowance: self.running[step.slot as usize]
                    .as_ref()
                    .and_then(|r| r.request.session().allowance()),
                expires,
            }),
        );
    }

    /// Hands free connections to the attempts waiting for one, in order; each is sent
    /// with what is left of its timeout.
    fn admit(&mut self, now: Duration) {
        loop {
            let Some(connections) = &mut self.connections else {
                return;
            };
            if connections.busy >= connections.max {
                return;
            }
            let Some(waiter) = connections.waiting.pop_front() else {
                return;
            };
            let Some(running) = self.running[waiter.slot as usize]
                .as_mut()
                .filter(|r| r.step == waiter.step)
            else {
                continue;
            };
            let (Some(timeout), Some((since, attempt))) = (running.queued, running.request.out())
            else {
                continue;
            };
            let waited = now.saturating_sub(since);
            // Too little time left to be sent: its timeout event ends the wait, as live.
            let Some(left) = crate::connection_wait::left_after_wait(timeout, waited) else {
                continue;
            };
            running.queued = None;
            // A step of its own, so the timeout of the wait that was scheduled is stale.
            running.step = self.queue.next_step();
            let step = Step {
                hop: 0,
                slot: waiter.slot,
                step: running.step,
            };
            let arrival = *running.request.arrival();
            connections.busy += 1;
            self.recorder.waited(waited, false);
            self.transmit(step, now, arrival, attempt, left);
        }
    }

    /// The run's end on the client side: what is still running is unfinished, and an
    /// attempt on the wire is abandoned, as the live engine counts them when it stops.
    fn close(&mut self, stop: Duration) {
        for slot in 0..self.running.len() {
            let Some(mut running) = self.running[slot].take() else {
                continue;
            };
            // Still waiting for a connection, it never left, as live.
            let left_process = running.queued.take().is_none();
            let id = violation_id(&mut self.id, &self.policy.name, &running.request);
            running
                .request
                .stopped(&mut self.recorder, left_process, id);
            running.request.unfinished(&mut self.recorder, stop);
            running.request.count_reached(&mut self.recorder);
        }
        self.live = 0;
    }

    /// The server finishes what it holds (abandoned attempts still arrive and are served),
    /// for at most `limit`, as the live run waits before it reads the ledger.
    fn settle(&mut self, limit: Duration) {
        while let Some(next) = self.queue.peek() {
            if next.at > limit {
                break;
            }
            let Some((now, event)) = self.queue.take(next) else {
                break;
            };
            self.events += 1;
            match event {
                // The load generator is gone: its answers, timeouts and wakes fall on nobody.
                Event::Answer { to, .. } | Event::Expire(to) | Event::Wake(to) if to.hop == 0 => {}
                event => self.handle(now, event),
            }
            if let Some(cut) = self.bound.check(self.events, self.queue.len(), now) {
                self.cut = Some(cut);
                return;
            }
        }
    }
}

/// When the timeout of an attempt sent at `now` fires, for the hop that receives it to
/// schedule: most attempts are answered at once, and a timeout that cannot fire need not
/// sit in the queue. An attempt that cannot even arrive before its timeout has the
/// timeout scheduled here.
pub(super) fn expiry(
    queue: &mut Queue,
    step: Step,
    now: Duration,
    hop: Duration,
    timeout: Option<Duration>,
) -> Option<Duration> {
    let timeout = timeout?;
    if hop < timeout {
        return Some(now + timeout);
    }
    queue.push(now + timeout, Event::Expire(step));
    None
}

/// The tier an event is for, if it is not for the load generator.
fn tier_of<'t, 'a>(tiers: &'t mut [Hop<'a>], to: Step) -> Option<&'t mut Hop<'a>> {
    let index = usize::try_from(to.hop.checked_sub(1)?).ok()?;
    tiers.get_mut(index)
}

/// The request's id, written only when it is needed: as an example of a violation.
fn violation_id<'b>(buf: &'b mut String, policy: &str, request: &LogicalRequest) -> &'b str {
    buf.clear();
    if request.session().violations().next().is_some() {
        fault_server::wire::write_request_id(buf, policy, request.arrival().index);
    }
    buf
}
