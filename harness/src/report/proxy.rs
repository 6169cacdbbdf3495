//! A proxy tier's part of a policy's report: its attempts peer by peer, and its retries by
//! the condition that caused them with the directive that made that a retry condition, so
//! a reader sees which line of their config (or which default) multiplied the load.

use crate::hop::proxy::ProxyCounts;
use crate::plan::proxy::{ProxyModel, ProxyTier};

use super::model::{PeerReport, ProxyReport, RetriedBy};
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
    }
}

fn retried_by(model: &ProxyModel, counts: &ProxyCounts) -> Vec<RetriedBy> {
    let directive = model.retry_on.source.to_string();
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
    for (i, peer) in p.peers.iter().enumerate() {
        table.row([
            Cell::quoted(if i == 0 {
                format!("{name} ({}, {})", p.kind, p.config)
            } else {
                String::new()
            }),
            Cell::quoted(peer.name.clone()),
            Cell::new(peer.sent.to_string()),
            Cell::new(peer.retries.to_string()),
            Cell::new(peer.failed.to_string()),
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
            Cell::new("(every peer ejected: 502, not sent)"),
            Cell::new(p.no_live_peers.to_string()).strong(),
            Cell::new(""),
            Cell::new(""),
            Cell::new(""),
        ]);
    }
    table
}
