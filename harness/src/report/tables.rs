//! The report's tables, each built once into the table model ([`super::table`]), which
//! report.md, report.html and the terminal render.

use super::drift::{Comparison, Drift};
use super::model::{PolicyReport, Report};
use super::table::{Cell, Table};

fn opt(x: Option<f64>, digits: usize) -> String {
    x.map_or_else(|| "–".to_owned(), |v| format!("{v:.digits$}"))
}

/// The one-screen summary: a row per policy, a policy's row marked (in HTML) by its gates
/// cell, so an expected FAIL reads apart from a failure. Against a baseline, a last
/// column says how each policy fares, and the policies that regressed come first.
pub(super) fn summary(report: &Report) -> Table {
    let mut header = vec![
        "policy",
        "offered",
        "dropped",
        "success",
        "attempts",
        "ampl (client/server)",
        "peak 1s",
        "bound",
        "p99 ms",
        "recovery s",
        "violations",
        "gates",
        "failed gates",
    ];
    let against = |p: &PolicyReport| {
        report
            .baseline
            .as_ref()
            .map(|c| c.verdict_of(&p.name).unwrap_or_else(|| "ok".to_owned()))
    };
    if report.baseline.is_some() {
        header.push("baseline");
    }
    // A name, figures, and the failed gates' names (left, as text reads).
    let names = header
        .iter()
        .position(|h| *h == "failed gates")
        .unwrap_or(0);
    let mut table = Table::new(header).figures().left(names).class("summary");
    let mut policies: Vec<&PolicyReport> = report.policies.iter().collect();
    policies
        .sort_by_key(|p| !against(p).is_some_and(|v| v.starts_with("REGRESSED") || v == "MISSING"));
    for p in policies {
        let gates = p.gates_cell();
        let class = if gates.ends_with("(expected)") {
            "fail expected"
        } else if gates.starts_with("FAIL") || gates.starts_with("NOT CAUGHT") {
            "fail"
        } else {
            "pass"
        };
        let mut row = vec![
            Cell::quoted(p.name.clone()),
            Cell::new(p.offered.to_string()),
            Cell::new(p.dropped.to_string()),
            Cell::new(format!("{:.1}%", p.success_rate * 100.0)),
            Cell::new(p.attempts.to_string()),
            Cell::new(format!(
                "{:.2} / {}",
                p.amplification.client,
                opt(p.amplification.server, 2)
            )),
            Cell::new(format!("{:.2}", p.amplification.peak_1s)),
            Cell::new(opt(p.amplification.budget_bound, 2)),
            Cell::new(format!("{:.0}", p.latency_ms.p99)),
            Cell::new(opt(p.recovery_s, 0)),
            Cell::new(violations(p)),
            Cell::new(gates),
            Cell::quoted(p.failed_gates_text()),
        ];
        row.extend(against(p).map(Cell::new));
        table.classed_row(Some(class), row);
    }
    table
}

/// Every hop's violating retries, a client's retries under a fresh key, and the ledger's
/// duplicate side effects.
fn violations(p: &PolicyReport) -> String {
    let parts: Vec<String> = [
        Some(p.retry_violations().describe()).filter(|r| r != "0"),
        p.violations
            .retried_with_fresh_key
            .filter(|n| *n > 0)
            .map(|n| format!("{n} fresh-key")),
        p.violations
            .duplicate_side_effects
            .filter(|n| *n > 0)
            .map(|n| format!("{n} dup")),
    ]
    .into_iter()
    .flatten()
    .collect();
    if parts.is_empty() {
        "0".to_owned()
    } else {
        parts.join(", ")
    }
}

/// The policies best first.
pub(super) fn ranking(ranking: &super::Ranking) -> Table {
    let cells = ranking.cells();
    let mut rows = cells.into_iter();
    let mut table = Table::new(rows.next().unwrap_or_default());
    for row in rows {
        table.row(row);
    }
    table
}

/// A comparison against a baseline: every figure, its change, what the tolerance allows
/// and the verdict, worst first.
pub(super) fn baseline(comparison: &Comparison) -> Table {
    let mut table = Table::new([
        "policy",
        "metric",
        "baseline",
        "now",
        "change",
        "tolerance",
        "verdict",
    ]);
    for row in comparison.worst_first() {
        let bad = matches!(row.verdict, Drift::Regressed | Drift::Missing);
        table.classed_row(
            Some(if bad { "fail" } else { "pass" }),
            [
                Cell::quoted(row.policy.clone()),
                Cell::quoted(row.metric.clone()),
                Cell::new(opt(row.baseline, 3)),
                Cell::new(opt(row.now, 3)),
                Cell::new(
                    row.change
                        .map_or_else(|| "–".to_owned(), |c| format!("{c:+.3}")),
                ),
                Cell::new(row.tolerance.clone()),
                Cell::new(verdict_word(row.verdict)).flag_if(bad),
            ],
        );
    }
    table
}

pub(super) fn verdict_word(verdict: Drift) -> &'static str {
    match verdict {
        Drift::Ok => "ok",
        Drift::Regressed => "REGRESSED",
        Drift::Missing => "MISSING",
        Drift::New => "new",
    }
}

/// A policy's gates: each one's result, figure, limit and why.
pub(super) fn gates(p: &PolicyReport) -> Table {
    let mut table =
        Table::new(["gate", "result", "measured", "limit", "detail"]).empty("(no gates)");
    for g in &p.gates {
        let word = p.gate_word(g);
        table.classed_row(
            Some(match word {
                "FAIL (expected)" => "fail expected",
                "pass" => "pass",
                _ => "fail",
            }),
            [
                Cell::new(g.name.clone()),
                Cell::new(word).flag_if(word == "FAIL"),
                Cell::new(opt(g.measured, 3)),
                Cell::new(opt(g.limit, 3)),
                Cell::quoted(g.detail.clone()),
            ],
        );
    }
    table
}

/// A call chain hop by hop; `None` without relay tiers.
pub(super) fn chain(p: &PolicyReport) -> Option<Table> {
    let hops = p.hops();
    if hops.is_empty() {
        return None;
    }
    let mut table = Table::new([
        "hop",
        "policy",
        "received",
        "logical",
        "sent",
        "retries",
        "gave up",
        "amplification",
        "next hop agrees",
        "violations",
    ]);
    let n = |v: Option<u64>| Cell::new(v.map_or_else(|| "–".to_owned(), |v| v.to_string()));
    for h in &hops {
        let violated = h
            .violations
            .is_some_and(|v| v.retried_permanent + v.retried_non_idempotent > 0);
        let agrees = match h.agrees {
            None => Cell::new("–"),
            Some(true) => Cell::new("yes"),
            Some(false) => Cell::new("no").strong(),
        };
        table.classed_row(
            Some(if h.agrees == Some(false) || violated {
                "fail"
            } else {
                ""
            }),
            [
                Cell::quoted(h.hop.clone()),
                Cell::quoted(h.policy.clone()),
                n(h.received),
                n(h.logical),
                n(h.sent),
                n(h.retries),
                n(h.gave_up),
                Cell::new(opt(h.amplification, 2)),
                agrees,
                match h.violations {
                    None => Cell::new("–"),
                    Some(v) => {
                        let d = v.describe();
                        let wrong = d != "0";
                        Cell::new(d).flag_if(wrong)
                    }
                },
            ],
        );
    }
    Some(table)
}

/// Each proxy tier's peers and the causes of its retries.
pub(super) fn proxies(p: &PolicyReport) -> impl Iterator<Item = Table> + '_ {
    p.tiers.iter().filter_map(|t| {
        t.proxy
            .as_ref()
            .map(|proxy| super::proxy::table(&t.name, proxy))
    })
}

/// The server's attempts per peer and method, and its resends; `None` unless it
/// listened as more than one peer.
pub(super) fn peers(p: &PolicyReport) -> Option<Table> {
    let ledger = p.ledger.as_ref().filter(|l| l.by_peer.len() > 1)?;
    let mut methods: Vec<&str> = ledger
        .by_peer
        .values()
        .flat_map(|m| m.keys())
        .chain(ledger.repeats_by_method.keys())
        .map(String::as_str)
        .collect();
    methods.sort_unstable();
    methods.dedup();
    // Method names come from the server's ledger, which may be another's: quoted.
    let mut header = vec![Cell::new("peer")];
    header.extend(methods.iter().map(|m| Cell::quoted(*m)));
    header.push(Cell::new("total"));
    let mut table = Table::new(header);
    for (peer, counts) in &ledger.by_peer {
        let mut row = vec![peer.to_string()];
        row.extend(
            methods
                .iter()
                .map(|m| counts.get(*m).copied().unwrap_or(0).to_string()),
        );
        row.push(counts.values().sum::<u64>().to_string());
        table.row(row);
    }
    if !ledger.repeats_by_method.is_empty() {
        // A resend is counted at the peer it arrived at too: this row is of those rows.
        let mut row = vec!["of which resends (after a permanent 4xx)".to_owned()];
        let mut total = super::model::Repeats::default();
        for m in &methods {
            let r = ledger
                .repeats_by_method
                .get(*m)
                .copied()
                .unwrap_or_default();
            total.repeats += r.repeats;
            total.after_4xx += r.after_4xx;
            row.push(format!("{} ({})", r.repeats, r.after_4xx));
        }
        row.push(format!("{} ({})", total.repeats, total.after_4xx));
        table.row(row);
    }
    Some(table)
}

/// The client's counts, its amplification and its recovery.
pub(super) fn counts(p: &PolicyReport) -> Table {
    let mut table = Table::new(["count", "value"]);
    for (k, v) in [
        ("offered (arrivals)", p.offered),
        ("dropped (max_in_flight)", p.dropped),
        ("sent (logical requests)", p.logical),
        ("succeeded", p.succeeded),
        ("failed", p.failed),
        ("unfinished at drain end", p.unfinished),
        ("attempts (left the process)", p.attempts),
        ("retries", p.retries),
        ("attempts cut before they were sent", p.cut),
        ("breaker trips", p.breaker_trips),
    ] {
        table.row([k.to_owned(), v.to_string()]);
    }
    let a = &p.amplification;
    table.row([
        "amplification (client / server / peak 1 s / bound)".to_owned(),
        format!(
            "{:.3} / {} / {:.3} / {}",
            a.client,
            opt(a.server, 3),
            a.peak_1s,
            opt(a.budget_bound, 3)
        ),
    ]);
    table.row(["recovery".to_owned(), format!("{} s", opt(p.recovery_s, 0))]);
    table
}

/// The latency percentiles of a policy's requests, attempts, arrivals and connection
/// waits, and of the offered load when it dropped arrivals.
pub(super) fn latency(p: &PolicyReport) -> Table {
    let mut table = Table::new(["latency (ms)", "p50", "p90", "p99", "p99.9", "max"]);
    for (name, l) in p.latency_rows() {
        table.row([
            name.to_owned(),
            format!("{:.1}", l.p50),
            format!("{:.1}", l.p90),
            format!("{:.1}", l.p99),
            format!("{:.1}", l.p999),
            format!("{:.1}", l.max),
        ]);
    }
    if p.dropped > 0 {
        let [p50, p90, p99, p999] = p.offered_latency_ms.cells();
        table.row([
            "offered load (drops ranked slowest)".to_owned(),
            p50,
            p90,
            p99,
            p999,
            "∞".to_owned(),
        ]);
    }
    table
}

/// A client test's waits before each attempt; `None` when it has no rows.
pub(super) fn waits(rows: Vec<Vec<String>>) -> Option<Table> {
    if rows.len() <= 1 {
        return None;
    }
    let mut rows = rows.into_iter();
    let mut table = Table::new(
        rows.next()
            .unwrap_or_default()
            .into_iter()
            .map(Cell::quoted),
    );
    for row in rows {
        table.row(row.into_iter().map(Cell::quoted));
    }
    Some(table)
}
