//! A policy's tiers in a live run: relay tiers of the harness's own, and real proxies
//! (nginx, HAProxy) run from the user's config; started innermost first, each sending to
//! the next hop's peers, counted, and stopped.
//!
//! A relay tier counts itself. A real proxy is a black box: its hop is counted from
//! outside ([`ProxyCounts::from_outside`]): what the hop above sent it, and what the next
//! hop (a relay tier, or the fault-server's ledger) saw of it, request ids passing
//! through. So a real proxy must have a hop that counts on each side of it: never two
//! real proxies in a row.

use std::net::SocketAddr;
use std::time::Duration;

use fault_server::ledger::LedgerSnapshot;

use super::real_proxy::RealProxy;
use super::{RunError, RunOptions, Server};
use crate::engine::PolicyRun;
use crate::hop::HopCounts;
use crate::hop::proxy::{Outside, ProxyCounts};
use crate::plan::{NamedPolicy, Plan, tier_script};
use crate::relay::{Relay, RelayConfig};

/// A started tier.
pub(super) enum Started {
    Relay(Relay),
    Proxy(RealProxy),
}

impl Started {
    pub(super) fn url(&self) -> &str {
        match self {
            Started::Relay(r) => r.url(),
            Started::Proxy(p) => p.url(),
        }
    }

    fn name(&self) -> &str {
        match self {
            Started::Relay(r) => r.name(),
            Started::Proxy(p) => p.name(),
        }
    }

    pub(super) async fn shutdown(self) {
        match self {
            Started::Relay(r) => r.shutdown().await,
            Started::Proxy(p) => p.stop().await,
        }
    }
}

/// Starts a policy's tiers, innermost first, each sending to the peers of the one started
/// before it and the innermost to the server's, and gives them outermost first. When one
/// cannot start, those already started are stopped.
pub(super) async fn start(
    server: &Server,
    plan: &Plan,
    policy: &NamedPolicy,
    options: &RunOptions,
) -> Result<Vec<Started>, RunError> {
    if let Some(pair) = policy
        .tiers
        .windows(2)
        .find(|w| w[0].proxy.is_some() && w[1].proxy.is_some())
    {
        return Err(RunError::Relay(format!(
            "tiers `{}` and `{}` are both real proxies: a live run counts a proxy from the hops on either side of it, so put a relay tier (or nothing) between them; `harness simulate` runs them as they are",
            pair[0].tier, pair[1].tier
        )));
    }
    if options.sharding.is_some() && policy.tiers.iter().any(|t| t.proxy.is_some()) {
        return Err(RunError::Relay(
            "a sharded run cannot count a real proxy tier: each shard would start its own, and only the keeper reads the ledger its resends are counted from; run the plan unsharded".to_owned(),
        ));
    }
    let mut started: Vec<Started> = Vec::new();
    let mut next = server.peer_urls();
    for (i, tier) in policy.tiers.iter().enumerate().rev() {
        let result = match &tier.proxy {
            Some(proxy) => match addresses(&next) {
                Ok(peers) => RealProxy::start(&tier.tier, proxy, &peers)
                    .await
                    .map(Started::Proxy),
                Err(e) => Err(e),
            },
            None => Relay::start(RelayConfig {
                name: tier.tier.clone(),
                next: next[0].clone(),
                policy: tier.policy.clone(),
                seed: plan.seed,
                listen: SocketAddr::from(([127, 0, 0, 1], 0)),
                script: tier_script(plan, &tier.tier),
                tracing: options.telemetry.as_ref().map(|t| t.tier_tracing()),
                peers: policy.peers_of(i),
                max_connections: None,
            })
            .await
            .map(Started::Relay)
            .map_err(|e| e.to_string()),
        };
        match result {
            Ok(tier) => {
                next = match &tier {
                    Started::Relay(r) => r.peer_urls().to_vec(),
                    Started::Proxy(p) => vec![p.url().to_owned()],
                };
                started.push(tier);
            }
            Err(e) => {
                for tier in started {
                    tier.shutdown().await;
                }
                return Err(RunError::Relay(e));
            }
        }
    }
    started.reverse();
    Ok(started)
}

/// `http://127.0.0.1:port` URLs as the addresses a proxy's config names.
fn addresses(urls: &[String]) -> Result<Vec<SocketAddr>, String> {
    urls.iter()
        .map(|u| {
            u.trim_start_matches("http://")
                .trim_end_matches('/')
                .parse()
                .map_err(|_| format!("a proxy tier sends to an address, and `{u}` is not one"))
        })
        .collect()
}

/// `running policy … through api → edge`, on stderr.
pub(super) fn announce(policy: &NamedPolicy, server: &Server, tiers: &[Started]) {
    let via: Vec<&str> = tiers.iter().map(Started::name).collect();
    if via.is_empty() {
        eprintln!("running policy `{}` against {}", policy.name, server.url());
    } else {
        eprintln!(
            "running policy `{}` against {} through {}",
            policy.name,
            server.url(),
            via.join(" → ")
        );
    }
}

/// What each relay tier counted, outermost first (a real proxy's are counted later, from
/// outside: [`from_outside`]), then stops the relays. The real proxies are given back,
/// running: their last retries may still be on their way to the next hop, which settles
/// before its ledger is read, and only then are they stopped.
pub(super) async fn counts(tiers: Vec<Started>, drain: Duration) -> (Vec<HopCounts>, Vec<Started>) {
    // The tiers finish what they were forwarding (their retries may outlast the
    // client's), outermost first, before anything is counted.
    for tier in &tiers {
        if let Started::Relay(relay) = tier {
            relay.settle(drain).await;
        }
    }
    let mut counts = Vec::new();
    let mut running = Vec::new();
    for tier in tiers {
        match &tier {
            Started::Relay(relay) => {
                counts.push(relay.counts());
                tier.shutdown().await;
            }
            Started::Proxy(_) => {
                counts.push(HopCounts::default());
                running.push(tier);
            }
        }
    }
    (counts, running)
}

/// Each real proxy's counts from the hops around it, outermost first: what the hop above
/// sent it (the client's attempts, or a relay tier's), and what the next hop received of
/// it (a relay tier's counts, or the server's ledger); `None` for a relay tier. Fills
/// the proxy's place in `tiers` too.
pub(super) fn from_outside(
    policy: &NamedPolicy,
    run: &PolicyRun,
    tiers: &mut [HopCounts],
    ledger: Option<&LedgerSnapshot>,
) -> Vec<Option<ProxyCounts>> {
    let mut out = Vec::new();
    for i in 0..tiers.len() {
        if policy.tiers[i].proxy.is_none() {
            out.push(None);
            continue;
        }
        let (received, logical) = match i.checked_sub(1).map(|above| &tiers[above]) {
            None => (run.recorder.attempts, run.recorder.logical),
            Some(above) => {
                let received = above.sent - above.unsent.min(above.sent);
                let first = above.sent - above.retries.min(above.sent);
                (received, first.min(received))
            }
        };
        let servers = policy.tiers[i]
            .proxy
            .as_ref()
            .map_or(1, |p| p.model.peers.len());
        let mut outside = match tiers.get(i + 1) {
            Some(next) => Outside {
                received,
                logical,
                next_received: next.received,
                next_repeats: next.repeats,
                repeated_non_idempotent: next.repeats_non_idempotent,
                per_peer: if next.received_by_peer.is_empty() {
                    vec![next.received]
                } else {
                    next.received_by_peer.clone()
                },
                ..Outside::default()
            },
            None => match ledger {
                Some(l) => outside_of_ledger(received, logical, l),
                None => Outside {
                    received,
                    logical,
                    ..Outside::default()
                },
            },
        };
        // One row per server of its config, those the next hop never saw included.
        outside.per_peer.resize(servers, 0);
        let counts = ProxyCounts::from_outside(&outside);
        tiers[i] = counts.hop.clone();
        out.push(Some(counts));
    }
    out
}

/// What the server's ledger saw of the proxy above it.
fn outside_of_ledger(received: u64, logical: u64, l: &LedgerSnapshot) -> Outside {
    // The ledger names the methods it knows (a LOCK is among its `OTHER`), and not whether
    // a request carried a key: a resent POST or PATCH is judged by its method alone here.
    let unsafe_method = |m: &str| matches!(m, "POST" | "PATCH");
    let per_peer = if l.by_peer.is_empty() {
        vec![l.attempts]
    } else {
        let last = l.by_peer.keys().max().copied().unwrap_or(0);
        (1..=last)
            .map(|p| l.by_peer.get(&p).map_or(0, |m| m.values().sum()))
            .collect()
    };
    Outside {
        received,
        logical,
        next_received: l.attempts,
        next_repeats: l.repeats,
        repeated_non_idempotent: l
            .repeats_by_method
            .iter()
            .filter(|(m, _)| unsafe_method(m))
            .map(|(_, r)| r.repeats)
            .sum(),
        repeated_after_4xx: l.repeats_by_method.values().map(|r| r.after_4xx).sum(),
        per_peer,
    }
}
