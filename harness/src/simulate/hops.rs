//! The tiers of a simulated chain: a relay tier of the harness's own (`tier.rs`) or a
//! proxy (`proxy.rs`), one event interface over both.

use std::time::Duration;

use super::network::Network;
use super::proxy::ProxyTier;
use super::queue::{Queue, Reply, Sent, Step};
use super::tier::Tier;
use crate::hop::HopCounts;
use crate::hop::proxy::ProxyCounts;
use crate::plan::{NamedPolicy, Plan, RequestKind};

// A relay tier is larger (its policy client), and there are at most a few tiers.
#[allow(clippy::large_enum_variant)]
pub(super) enum Hop<'a> {
    Relay(Tier<'a>),
    Proxy(ProxyTier<'a>),
}

/// The policy's tiers, outermost first.
pub(super) fn of<'a>(plan: &'a Plan, policy: &'a NamedPolicy) -> Vec<Hop<'a>> {
    let index = |i: usize| u32::try_from(i).unwrap_or(u32::MAX);
    policy
        .tiers
        .iter()
        .enumerate()
        .map(|(i, t)| match &t.proxy {
            Some(proxy) => Hop::Proxy(ProxyTier::new(
                index(i),
                std::sync::Arc::new(proxy.model.clone()),
                &policy.name,
            )),
            None => Hop::Relay(
                Tier::new(
                    index(i),
                    &t.policy,
                    crate::plan::tier_script(plan, &t.tier),
                    plan.seed,
                    &policy.name,
                    &plan.load.requests,
                )
                .with_peers(policy.peers_of(i)),
            ),
        })
        .collect()
}

impl Hop<'_> {
    pub(super) fn counts(&self) -> &HopCounts {
        match self {
            Hop::Relay(t) => t.counts(),
            Hop::Proxy(p) => &p.counts().hop,
        }
    }

    pub(super) fn proxy_counts(&self) -> Option<&ProxyCounts> {
        match self {
            Hop::Relay(_) => None,
            Hop::Proxy(p) => Some(p.counts()),
        }
    }

    pub(super) fn receive(
        &mut self,
        now: Duration,
        sent: Sent,
        peer: u32,
        queue: &mut Queue,
        net: &mut Network,
        kinds: &[RequestKind],
    ) {
        match self {
            Hop::Relay(t) => t.receive(now, sent, peer, queue, net),
            Hop::Proxy(p) => p.receive(now, sent, queue, net, kinds),
        }
    }

    pub(super) fn delayed(
        &mut self,
        to: Step,
        now: Duration,
        queue: &mut Queue,
        net: &mut Network,
    ) {
        if let Hop::Relay(t) = self {
            t.delayed(to, now, queue, net);
        }
    }

    pub(super) fn answered(
        &mut self,
        to: Step,
        now: Duration,
        reply: Reply,
        queue: &mut Queue,
        net: &mut Network,
    ) {
        match self {
            Hop::Relay(t) => t.answered(to, now, reply, queue, net),
            Hop::Proxy(p) => p.answered(to, now, reply, queue, net),
        }
    }

    pub(super) fn wake(&mut self, to: Step, now: Duration, queue: &mut Queue, net: &mut Network) {
        match self {
            Hop::Relay(t) => t.wake(to, now, queue, net),
            Hop::Proxy(p) => p.wake(to, now, queue, net),
        }
    }
}
