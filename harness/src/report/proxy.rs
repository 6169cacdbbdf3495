//! A proxy tier's part of a policy's report: its attempts peer by peer, and its retries by
//! the condition that caused them with the directive that made that a retry condition, so
//! a reader sees which line of their config (or which default) multiplied the load.

use crate::hop::proxy::ProxyCounts;
use crate::plan::proxy::{ProxyModel, ProxyTier};

use serde::{Deserialize, Serialize};

use super::table::{Cell, Table};

/// The report of proxy tier `tier` from what it counted.
pub(super) fn report(tier: &ProxyTier, counts: &ProxyCounts) -> ProxyReport {
    let model = &tier.model;
    ProxyReport {
        kind: model.kind.name().to_owned(),
        config: format!("{} ({})", tier.file.display(), tier.block),
        peers: model
            .peers
            .iter()
            .zip(&counts.peers)
            .map(|(peer, c)| PeerReport {
                name: peer.name.clone(),
                sent: c.sent,
                retries: c.retries,
                failed: c.failed,
            })
            .collect(),
        no_live_peers: counts.no_live_peers,
        retried_by: retried_by(model, counts),
        from_outside: counts.from_outside,
    }
}

fn retried_by(model: &ProxyModel, counts: &ProxyCounts) -> Vec<RetriedBy> {
    let directive = format!(
        "{}, at most {} tries by {}",
        model.retry_on.source, model.tries, model.tries_source
    );
    let by_cause = counts.retried_connect
        + counts.retried_lost
        + counts.retried_timeout
        + counts.retried_status.iter().map(|(_, n)| n).sum::<u64>();
    if by_cause == 0 && counts.hop.retries > 0 {
        // A real proxy, counted from the next hop: its resends, not their causes.
        return vec![RetriedBy {
            condition: "its retry conditions (the next hop saw the resends)".to_owned(),
            retries: counts.hop.retries,
            directive,
        }];
    }
    let mut rows = vec![
        ("connection failure".to_owned(), counts.retried_connect),
        ("lost response".to_owned(), counts.retried_lost),
        ("per-try timeout".to_owned(), counts.retried_timeout),
    ];
    rows.extend(
        counts
            .retried_status
            .iter()
            .map(|(status, n)| (format!("status {status}"), *n)),
    );
    rows.into_iter()
        .filter(|(_, n)| *n > 0)
        .map(|(condition, retries)| RetriedBy {
            condition,
            retries,
            directive: directive.clone(),
        })
        .collect()
}

/// A proxy tier's peers and the causes of its retries, as one table.
pub(super) fn table(name: &str, p: &ProxyReport) -> Table {
    let mut table = Table::new([
        "proxy tier",
        "peer",
        "sent",
        "retries",
        "failed",
        "retried after",
    ]);
    let causes: Vec<String> = p
        .retried_by
        .iter()
        .map(|r| format!("{}: {} by {}", r.condition, r.retries, r.directive))
        .collect();
    // A real proxy counted from outside: what each peer received is known, not which
    // of it were retries nor which failed.
    let unknown = |n: u64| {
        if p.from_outside {
            Cell::new("–")
        } else {
            Cell::new(n.to_string())
        }
    };
    for (i, peer) in p.peers.iter().enumerate() {
        table.row([
            Cell::quoted(if i == 0 {
                format!("{name} ({}, {})", p.kind, p.config)
            } else {
                String::new()
            }),
            Cell::quoted(peer.name.clone()),
            Cell::new(peer.sent.to_string()),
            unknown(peer.retries),
            unknown(peer.failed),
            Cell::quoted(causes.get(i).cloned().unwrap_or_default()),
        ]);
    }
    for cause in causes.iter().skip(p.peers.len()) {
        table.row([
            Cell::new(""),
            Cell::new(""),
            Cell::new(""),
            Cell::new(""),
            Cell::new(""),
            Cell::quoted(cause.clone()),
        ]);
    }
    if p.no_live_peers > 0 {
        table.row([
            Cell::new(""),
            Cell::new(if p.from_outside {
                "(received, never seen by the next hop)"
            } else {
                "(every peer ejected: 502, not sent)"
            }),
            Cell::new(p.no_live_peers.to_string()).strong(),
            Cell::new(""),
            Cell::new(""),
            Cell::new(""),
        ]);
    }
    table
}

/// A proxy tier's own figures: its attempts peer by peer and its retries by the condition
/// (and the directive that made it one) that caused them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProxyReport {
    /// `nginx` or `haproxy`.
    pub kind: String,
    /// The config file and block it was imported from (`stacks/nginx.conf`, `location /`).
    pub config: String,
    pub peers: Vec<PeerReport>,
    /// Requests answered 502 without being sent: every peer was ejected.
    pub no_live_peers: u64,
    pub retried_by: Vec<RetriedBy>,
    /// A real proxy, counted from the hops around it: its peers' retries and failures
    /// are not known (zero here).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub from_outside: bool,
}

/// What a proxy sent one peer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PeerReport {
    /// The `server` as the config wrote it.
    pub name: String,
    pub sent: u64,
    pub retries: u64,
    /// Tries that failed by the proxy's rules (towards its passive ejection).
    pub failed: u64,
}

/// Retries a proxy sent after one condition, and the directive that made it a retry
/// condition (`proxy_next_upstream error timeout (default)`, line 12).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RetriedBy {
    pub condition: String,
    pub retries: u64,
    pub directive: String,
}
