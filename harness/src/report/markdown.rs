//! `report.md`: tables a person reads in a terminal or a pull request, and the summary
//! table the CLI prints.

use std::fmt::Write;

use super::drift::{Comparison, Drift, Row};
use super::model::{PolicyReport, Report};

/// Text from a plan or a config (a description, a fault's name, a warning quoting either),
/// as markdown shows it and nothing more: HTML in it is shown, not rendered, and a `|` or a
/// line break cannot end a table cell or row.
fn text(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '|' => out.push_str("\\|"),
            '\r' | '\n' => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

fn opt(x: Option<f64>, digits: usize) -> String {
    x.map_or_else(|| "–".to_owned(), |v| format!("{v:.digits$}"))
}

/// The one-screen summary: a row per policy. Against a baseline, a last column says how
/// each policy fares, and the policies that regressed come first.
/// The summary's header and one row per policy, regressions first: the terminal and
/// report.md align them as text, report.html puts them in a table.
pub(super) fn summary_rows(report: &Report) -> Vec<Vec<String>> {
    let mut rows = vec![vec![
        "policy".to_owned(),
        "offered".to_owned(),
        "dropped".to_owned(),
        "success".to_owned(),
        "attempts".to_owned(),
        "ampl (client/server)".to_owned(),
        "peak 1s".to_owned(),
        "bound".to_owned(),
        "p99 ms".to_owned(),
        "recovery s".to_owned(),
        "violations".to_owned(),
        "gates".to_owned(),
    ]];
    let against = |p: &PolicyReport| {
        report
            .baseline
            .as_ref()
            .map(|c| c.verdict_of(&p.name).unwrap_or_else(|| "ok".to_owned()))
    };
    if report.baseline.is_some() {
        rows[0].push("baseline".to_owned());
    }
    let mut policies: Vec<&PolicyReport> = report.policies.iter().collect();
    policies
        .sort_by_key(|p| !against(p).is_some_and(|v| v.starts_with("REGRESSED") || v == "MISSING"));
    for p in policies {
        let mut row = vec![
            p.name.clone(),
            p.offered.to_string(),
            p.dropped.to_string(),
            format!("{:.1}%", p.success_rate * 100.0),
            p.attempts.to_string(),
            format!(
                "{:.2} / {}",
                p.amplification.client,
                opt(p.amplification.server, 2)
            ),
            format!("{:.2}", p.amplification.peak_1s),
            opt(p.amplification.budget_bound, 2),
            format!("{:.0}", p.latency_ms.p99),
            opt(p.recovery_s, 0),
            violations(p),
            p.gates_cell(),
        ];
        row.extend(against(p));
        rows.push(row);
    }
    rows
}

/// The summary as aligned text.
pub fn summary_table(report: &Report) -> String {
    let rows = summary_rows(report);
    let widths: Vec<usize> = (0..rows[0].len())
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for (i, row) in rows.iter().enumerate() {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(c, (cell, w))| {
                if c == 0 {
                    format!("{cell:<w$}")
                } else {
                    format!("{cell:>w$}")
                }
            })
            .collect();
        let _ = writeln!(out, "{}", cells.join("  ").trim_end());
        if i == 0 {
            let _ = writeln!(
                out,
                "{}",
                widths
                    .iter()
                    .map(|w| "-".repeat(*w))
                    .collect::<Vec<_>>()
                    .join("  ")
            );
        }
    }
    out
}

/// Every hop's violating retries, and the ledger's duplicate side effects.
fn violations(p: &PolicyReport) -> String {
    let retries = p.retry_violations().describe();
    match p.violations.duplicate_side_effects.unwrap_or(0) {
        0 => retries,
        dup if retries == "0" => format!("{dup} dup"),
        dup => format!("{retries}, {dup} dup"),
    }
}

/// The whole `report.md`.
pub fn render(report: &Report) -> String {
    let mut out = String::new();
    let plan = &report.plan;
    let _ = writeln!(out, "# Chaos report: {}\n", plan.name);
    if let Some(d) = &plan.description {
        // Its paragraphs kept: only its HTML is neutralised.
        let paragraphs: Vec<String> = d.split('\n').map(text).collect();
        let _ = writeln!(out, "{}\n", paragraphs.join("\n"));
    }
    let verdict = match report.verdict_label() {
        "ABORTED" => "**ABORTED** (interrupted; figures cover what ran)",
        "INCOMPLETE" => "**INCOMPLETE** (the run could not be completed; figures cover what ran)",
        label => &format!("**{label}**"),
    };
    let _ = writeln!(out, "Verdict: {verdict}\n");
    if let Some(error) = &report.error {
        let _ = writeln!(out, "> **Error:** {}\n", text(error));
    }
    for warning in &report.warnings {
        let _ = writeln!(out, "> **Warning:** {}\n", text(warning));
    }
    let _ = writeln!(
        out,
        "Plan `{}` (seed {}), {} s of arrivals against {}{}. Generated {}{}.\n",
        plan.file,
        plan.seed,
        plan.duration_s,
        if report.mode == "simulated" {
            "a modelled fault-server, simulated in virtual time (`harness simulate`)"
        } else {
            &plan.target
        },
        if report.mode == "simulated" {
            ""
        } else if plan.ledger {
            " (fault-server ledger)"
        } else {
            " (black box: client-side accounting only)"
        },
        report.generated_at,
        run_of(report),
    );
    let _ = writeln!(out, "{}\n", text(&faults_line(report)));
    if let Some(telemetry) = &report.telemetry {
        let _ = writeln!(out, "{}\n", telemetry.describe());
    }
    let _ = writeln!(out, "## Summary\n\n```\n{}```\n", summary_table(report));
    ranking_section(&mut out, report);
    if let Some(comparison) = &report.baseline {
        let _ = writeln!(out, "## Against baseline `{}`\n", comparison.file);
        for note in &comparison.notes {
            let _ = writeln!(out, "> **Note:** {}\n", text(note));
        }
        let _ = writeln!(out, "{}", baseline_table(comparison));
    }
    for p in &report.policies {
        policy_section(&mut out, p);
    }
    out
}

/// Which faults were in force and where they came from, always said: a run against no
/// fault at all is worth knowing about.
pub(super) fn faults_line(report: &Report) -> String {
    let plan = &report.plan;
    let window = plan.fault_window_s.map_or(String::new(), |[a, b]| {
        format!(" (windowed phases from {a} s to {b} s)")
    });
    let from = match plan.faults_from.as_str() {
        "" => String::new(),
        from => format!(", from {from}"),
    };
    match plan.faults.is_empty() {
        true => format!("Faults: none{from}."),
        false => format!("Faults: {}{window}{from}.", plan.faults.join(", ")),
    }
}

/// `, run ID` when the report has one (reports written before run ids have none).
pub(super) fn run_of(report: &Report) -> String {
    match report.run_id.as_str() {
        "" => String::new(),
        id => format!(", run {id}"),
    }
}

/// A comparison against a baseline, as a markdown table: every figure, its change, what
/// the tolerance allows and the verdict, worst first.
pub fn baseline_table(comparison: &Comparison) -> String {
    let mut out = String::from(
        "| policy | metric | baseline | now | change | tolerance | verdict |\n| --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for row in comparison.worst_first() {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} |",
            text(&row.policy),
            text(&row.metric),
            opt(row.baseline, 3),
            opt(row.now, 3),
            row.change
                .map_or_else(|| "–".to_owned(), |c| format!("{c:+.3}")),
            row.tolerance,
            verdict_word(row.verdict)
        );
    }
    out
}

/// How a row reads: `baseline 1.2, now 1.5 (+0.3), tolerance +0.05`.
pub fn describe_row(row: &Row) -> String {
    match row.verdict {
        Drift::Missing => "in the baseline, not in this run".to_owned(),
        Drift::New => "not in the baseline".to_owned(),
        _ => format!(
            "baseline {}, now {} ({}), tolerance {}",
            opt(row.baseline, 3),
            opt(row.now, 3),
            row.change
                .map_or_else(|| "lost".to_owned(), |c| format!("{c:+.3}")),
            row.tolerance
        ),
    }
}

pub(super) fn verdict_word(verdict: Drift) -> &'static str {
    match verdict {
        Drift::Ok => "ok",
        Drift::Regressed => "**REGRESSED**",
        Drift::Missing => "**MISSING**",
        Drift::New => "new",
    }
}

/// The policies best first, and the recommended one with its reason.
fn ranking_section(out: &mut String, report: &Report) {
    let _ = writeln!(out, "## Ranking\n");
    for (i, row) in report.ranking.cells().iter().enumerate() {
        let _ = writeln!(out, "| {} |", row.join(" | "));
        if i == 0 {
            let _ = writeln!(out, "|{}", " --- |".repeat(row.len()));
        }
    }
    let _ = writeln!(out, "\n**{}**\n", report.ranking.line());
}

fn policy_section(out: &mut String, p: &PolicyReport) {
    let _ = writeln!(
        out,
        "## Policy `{}`{}\n",
        p.name,
        if p.partial {
            " (partial: stopped early)"
        } else {
            ""
        }
    );
    if let Some(preset) = &p.preset {
        let _ = writeln!(out, "Preset `{preset}`. ");
    }
    let _ = writeln!(out, "{}\n", text(&p.summary));
    gates_table(out, p);
    if let Some(c) = &p.client {
        client_section(out, c);
    }
    chain_table(out, p);
    counts_table(out, p);
    let _ = writeln!(out, "Give-ups: {}.\n", p.give_ups_text());
    let _ = writeln!(out, "Attempt outcomes: {}.\n", p.outcomes_text());
    latency_table(out, p);
    if let Some(c) = &p.connection_wait {
        let _ = writeln!(out, "{}\n", c.sentence());
    }
    if let Some(c) = &p.connections_opened {
        let _ = writeln!(out, "{}\n", c.sentence());
    }
    if let Some(l) = &p.ledger {
        let _ = writeln!(
            out,
            "{}\n",
            l.sentence("**does not agree with the client**")
        );
    }
}

/// A client test's program: what it ran, how the server grouped and judged its retries,
/// and the waits it chose before each attempt.
fn client_section(out: &mut String, c: &super::ClientView) {
    let (facts, table) = super::client::section(c);
    out.push_str("### The program under test\n\n");
    for fact in facts {
        let _ = writeln!(out, "- {}", text(&fact));
    }
    out.push('\n');
    if table.len() > 1 {
        out.push_str(
            "Waits before each attempt (from the previous answer, Retry-After waits aside):\n\n",
        );
        for (i, row) in table.iter().enumerate() {
            let cells: Vec<String> = row.iter().map(|c| text(c)).collect();
            let _ = writeln!(out, "| {} |", cells.join(" | "));
            if i == 0 {
                let _ = writeln!(out, "|{}", " --- |".repeat(row.len()));
            }
        }
        out.push('\n');
    }
}

fn gates_table(out: &mut String, p: &PolicyReport) {
    if let Some(line) = p.expectation_line() {
        let _ = writeln!(out, "**{}**\n", text(&line));
    }
    let _ = writeln!(out, "| gate | result | measured | limit | detail |");
    let _ = writeln!(out, "| --- | --- | --- | --- | --- |");
    for g in &p.gates {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} |",
            g.name,
            match p.gate_word(g) {
                "FAIL" => "**FAIL**",
                word => word,
            },
            opt(g.measured, 3),
            opt(g.limit, 3),
            text(&g.detail)
        );
    }
    if p.gates.is_empty() {
        let _ = writeln!(out, "| (no gates) | | | | |");
    }
    let _ = writeln!(out);
}

/// A call chain hop by hop; nothing without relay tiers.
fn chain_table(out: &mut String, p: &PolicyReport) {
    let hops = p.hops();
    if hops.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "Call chain, hop by hop (amplification: attempts per logical request of the client):\n"
    );
    let _ = writeln!(
        out,
        "| hop | policy | received | logical | sent | retries | gave up | amplification | next hop agrees | violations |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    );
    let n = |v: Option<u64>| v.map_or_else(|| "–".to_owned(), |v| v.to_string());
    for h in &hops {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            text(&h.hop),
            text(&h.policy),
            n(h.received),
            n(h.logical),
            n(h.sent),
            n(h.retries),
            n(h.gave_up),
            opt(h.amplification, 2),
            h.agrees.map_or("–", |a| if a { "yes" } else { "**no**" }),
            h.violations.map_or_else(
                || "–".to_owned(),
                |v| match v.describe() {
                    d if d == "0" => d,
                    d => format!("**{d}**"),
                }
            )
        );
    }
    let _ = writeln!(out);
}

/// The client's counts, its amplification and its recovery.
fn counts_table(out: &mut String, p: &PolicyReport) {
    let _ = writeln!(out, "| count | value |\n| --- | --- |");
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
        let _ = writeln!(out, "| {k} | {v} |");
    }
    let a = &p.amplification;
    let _ = writeln!(
        out,
        "| amplification (client / server / peak 1 s / bound) | {:.3} / {} / {:.3} / {} |",
        a.client,
        opt(a.server, 3),
        a.peak_1s,
        opt(a.budget_bound, 3)
    );
    let _ = writeln!(out, "| recovery | {} s |", opt(p.recovery_s, 0));
    let _ = writeln!(out);
}

fn latency_table(out: &mut String, p: &PolicyReport) {
    let _ = writeln!(
        out,
        "| latency (ms) | p50 | p90 | p99 | p99.9 | max |\n| --- | --- | --- | --- | --- | --- |"
    );
    for (name, l) in p.latency_rows() {
        let _ = writeln!(
            out,
            "| {name} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} |",
            l.p50, l.p90, l.p99, l.p999, l.max
        );
    }
    if p.dropped > 0 {
        let [p50, p90, p99, p999] = p.offered_latency_ms.cells();
        let _ = writeln!(
            out,
            "| offered load (drops ranked slowest) | {p50} | {p90} | {p99} | {p999} | ∞ |"
        );
    }
    let _ = writeln!(out);
}
