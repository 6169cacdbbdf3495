//! `report.md`: tables a person reads in a terminal or a pull request, and the summary
//! table the CLI prints.

use std::fmt::Write;

use super::drift::{Comparison, Drift, Row};
use super::model::{PolicyReport, Report};
use super::table::markdown as text;
use super::tables;

fn opt(x: Option<f64>, digits: usize) -> String {
    x.map_or_else(|| "–".to_owned(), |v| format!("{v:.digits$}"))
}

/// The one-screen summary as aligned text: a row per policy; against a baseline, a last
/// column says how each policy fares, and the policies that regressed come first.
pub fn summary_table(report: &Report) -> String {
    tables::summary(report).text()
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
        policy_section(&mut out, p, report.plan.in_front_of_a_service());
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
    tables::baseline(comparison).markdown()
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

/// The policies best first, and the recommended one with its reason.
fn ranking_section(out: &mut String, report: &Report) {
    let _ = writeln!(out, "## Ranking\n");
    out.push_str(&tables::ranking(&report.ranking).markdown());
    let _ = writeln!(out, "\n**{}**\n", report.ranking.line());
}

fn policy_section(out: &mut String, p: &PolicyReport, proxied: bool) {
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
    peers_table(out, p);
    counts_table(out, p);
    let _ = writeln!(out, "Give-ups: {}.\n", p.give_ups_text());
    let _ = writeln!(out, "Attempt outcomes: {}.\n", p.outcomes_text());
    if let Some(split) = p.ledger.as_ref().and_then(|l| l.upstream(proxied)) {
        let _ = writeln!(out, "{}\n", text(&split.sentence()));
        let _ = writeln!(out, "{}", split.table().markdown());
    }
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
    if let Some(table) = tables::waits(table) {
        out.push_str(
            "Waits before each attempt (from the previous answer, Retry-After waits aside):\n\n",
        );
        out.push_str(&table.markdown());
        out.push('\n');
    }
}

fn gates_table(out: &mut String, p: &PolicyReport) {
    if let Some(line) = p.expectation_line() {
        let _ = writeln!(out, "**{}**\n", text(&line));
    }
    let _ = writeln!(out, "{}", tables::gates(p).markdown());
}

/// A call chain hop by hop; nothing without relay tiers.
fn chain_table(out: &mut String, p: &PolicyReport) {
    let Some(table) = tables::chain(p) else {
        return;
    };
    let _ = writeln!(
        out,
        "Call chain, hop by hop (amplification: attempts per logical request of the client):\n"
    );
    let _ = writeln!(out, "{}", table.markdown());
    for table in tables::proxies(p) {
        let _ = writeln!(out, "{}", table.markdown());
    }
}

/// The server's peers, method by method; nothing with one peer.
fn peers_table(out: &mut String, p: &PolicyReport) {
    let Some(table) = tables::peers(p) else {
        return;
    };
    let _ = writeln!(out, "Attempts the server received, peer by peer:\n");
    let _ = writeln!(out, "{}", table.markdown());
}

/// The client's counts, its amplification and its recovery.
fn counts_table(out: &mut String, p: &PolicyReport) {
    let _ = writeln!(out, "{}", tables::counts(p).markdown());
}

fn latency_table(out: &mut String, p: &PolicyReport) {
    let _ = writeln!(out, "{}", tables::latency(p).markdown());
}
