//! The audit as a terminal reads it: per policy, the worst case, the hops with their
//! lines and budgets, a table of every case, the findings and the gates.

use std::fmt::Write;

use super::{Audit, PolicyAudit};
use crate::report::table::{Align, Table};

/// The whole audit as aligned text.
pub fn text(audit: &Audit) -> String {
    let mut out = String::new();
    for p in &audit.policies {
        policy(p, &mut out);
    }
    out
}

fn policy(p: &PolicyAudit, out: &mut String) {
    let w = &p.worst;
    let _ = write!(
        out,
        "policy `{}`: at most {} attempts at the leaf per logical request ({} failing with {}{})",
        p.policy,
        w.leaf,
        w.method,
        w.failure,
        if w.exact { "" } else { ", time-dependent" }
    );
    match p.budgeted_leaf.filter(|b| *b < w.leaf as f64) {
        Some(b) => {
            let _ = writeln!(out, "; {b:.2} once every budget binds");
        }
        None => out.push('\n'),
    }
    let mut hops = Table::new(["hop", "kind", "at", "serial bound", "caller waits", "limit"]);
    for h in &p.hops {
        hops.row([
            h.name.clone(),
            h.kind.clone(),
            h.at.clone(),
            format!("{:.0} ms", h.serial_ms),
            h.caller_waits_ms
                .map_or_else(|| "-".to_owned(), |w| format!("{w:.0} ms")),
            h.budget
                .as_deref()
                .map_or("tries only", |b| b.split(" (").next().unwrap_or(b))
                .to_owned(),
        ]);
    }
    indent(&hops.text(), out);
    let mut header: Vec<String> = vec!["method".into(), "failure".into()];
    header.extend(p.hops.iter().map(|h| h.name.clone()));
    header.push("leaf".into());
    let n = header.len();
    let mut cases = Table::new(header).align(
        [Align::Left, Align::Left]
            .into_iter()
            .chain(std::iter::repeat_n(Align::Right, n - 2)),
    );
    for c in &p.cases {
        let mut row = vec![c.method.clone(), c.failure.clone()];
        row.extend(c.tries.iter().zip(&c.answers).map(|(t, a)| match a {
            Some(status) => format!("{t} → {status}"),
            None => t.to_string(),
        }));
        row.push(if c.exact {
            c.leaf.to_string()
        } else {
            format!("≤ {}", c.leaf)
        });
        cases.row(row);
    }
    out.push_str("  tries per request received (→ what the hop answered), attempts at the leaf:\n");
    indent(&cases.text(), out);
    for f in &p.findings {
        match &f.at {
            Some(at) => {
                let _ = writeln!(out, "  - {at}: {}", f.message);
            }
            None => {
                let _ = writeln!(out, "  - {}", f.message);
            }
        }
    }
    for g in &p.gates {
        let verdict = match (g.holds, g.expected_to_fail) {
            (true, false) => "holds",
            (false, false) => "FAILS",
            (false, true) => "fails, as the counterexample expects",
            (true, true) => "HOLDS, so the counterexample cannot fail it",
        };
        let _ = writeln!(out, "  gate {}: {verdict}: {}", g.gate, g.why);
    }
    out.push('\n');
}

fn indent(text: &str, out: &mut String) {
    for line in text.lines() {
        let _ = writeln!(out, "  {line}");
    }
}
