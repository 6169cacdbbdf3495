//! A modelled proxy tier (nginx, HAProxy): the shell around the proxy core
//! ([`crate::hop::proxy`]) in virtual time. Live, the real binary is the tier, and
//! `just interop-stacks` holds the two to the same attempts; so this shell only moves the
//! core's steps through the event queue. A proxy forwards a request as it came (its
//! attempt number, chain, deadline and allowance headers pass through unchanged), to the
//! peer the core chose.

use std::sync::Arc;
use std::time::Duration;

use super::network::Network;
use super::queue::{Event, Queue, Reply, Sent, Step};
use super::slab::Slab;
use crate::hop::proxy::{Proxy, ProxyCounts, ProxyRequest, ProxyStep};
use crate::plan::proxy::ProxyModel;

/// A request at the proxy, and where its answer goes.
struct Slot {
    /// The attempt as it arrived: each try resends it.
    sent: Sent,
    request: ProxyRequest,
    step: u64,
    in_flight: bool,
}

pub(super) struct ProxyTier<'a> {
    hop: u32,
    core: Proxy,
    /// The client policy's name: request ids are written from it.
    policy: &'a str,
    id: String,
    requests: Slab<Slot>,
}

impl<'a> ProxyTier<'a> {
    /// Tier `index` of the plan (hop `index + 1`).
    pub(super) fn new(index: u32, model: Arc<ProxyModel>, policy: &'a str) -> ProxyTier<'a> {
        ProxyTier {
            hop: index + 1,
            core: Proxy::new(model),
            policy,
            id: String::new(),
            requests: Slab::default(),
        }
    }

    pub(super) fn counts(&self) -> &ProxyCounts {
        self.core.counts()
    }

    /// An attempt of the hop above arrives.
    pub(super) fn receive(
        &mut self,
        now: Duration,
        sent: Sent,
        queue: &mut Queue,
        net: &mut Network,
        kinds: &[crate::plan::RequestKind],
    ) {
        let kind = &kinds[sent.kind as usize];
        let request = self.core.receive(
            now,
            kind.method.as_str(),
            kind.idempotency_key,
            Some(sent.attempt.get()),
        );
        let slot = Slot {
            sent,
            request,
            step: 0,
            in_flight: false,
        };
        let slot = self.requests.insert(slot);
        let Some(r) = self.requests.get_mut(slot) else {
            return;
        };
        let step = self.core.start(&mut r.request, now);
        self.act(slot, now, step, queue, net);
    }

    /// Moves the core's next step through the queue.
    fn act(
        &mut self,
        slot: u32,
        now: Duration,
        next: ProxyStep,
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
            ProxyStep::Send { peer, timeout } => {
                r.in_flight = true;
                let hop = net.hop();
                let expires = super::world::expiry(queue, step, now, hop, Some(timeout));
                let mut sent = r.sent.clone();
                sent.to = self.hop;
                sent.reply = step;
                sent.peer = u32::try_from(peer + 1).unwrap_or(u32::MAX);
                sent.expires = expires;
                queue.push(now + hop, Event::Receive(sent));
            }
            ProxyStep::Wait { until } => queue.push(until, Event::Wake(step)),
            ProxyStep::Answer(reply) => {
                let from = r.sent.reply;
                self.requests.remove(slot);
                queue.push(now + net.hop(), Event::Answer { to: from, reply });
            }
        }
    }

    /// What a try of request `to` came back with (or its timeout).
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
        fault_server::wire::write_request_id(&mut self.id, self.policy, r.sent.index);
        let next = self.core.on_answer(&mut r.request, now, reply, &self.id);
        self.act(to.slot, now, next, queue, net);
    }

    /// A turn-around of request `to` is over.
    pub(super) fn wake(&mut self, to: Step, now: Duration, queue: &mut Queue, net: &mut Network) {
        let Some(r) = self.requests.get_mut(to.slot).filter(|r| r.step == to.step) else {
            return;
        };
        fault_server::wire::write_request_id(&mut self.id, self.policy, r.sent.index);
        let next = self.core.on_timer(&mut r.request, now, &self.id);
        self.act(to.slot, now, next, queue, net);
    }
}
