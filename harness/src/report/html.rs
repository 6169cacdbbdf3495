//! `report.html`: one self-contained file (no network, no JavaScript needed) with inline
//! SVG charts: offered load against attempts reaching the server per second for every
//! policy, so a storm is visible at a glance; the waves (retries per 50 ms across the
//! fault window, a line per policy: retries in phase or spread); latency percentiles;
//! budget and breaker over time; and each policy's every field, as it resolved.

use std::fmt::Write;

use super::drift::Comparison;
use super::model::{PolicyReport, Report};
use super::table::html as esc;
use super::tables;
use crate::plan::resolved::{self, Value};

use super::chart::{Axis, carried, chart, chart_on, column};

/// The summary as a table: a policy's row is marked by its gates cell, so an expected
/// FAIL reads apart from a failure.
fn summary_html(out: &mut String, report: &Report) {
    out.push_str("<h2>Summary</h2><div class=\"wide\">");
    out.push_str(&tables::summary(report).html());
    out.push_str("</div>");
}

pub fn render(report: &Report) -> String {
    let plan = &report.plan;
    let mut out = String::new();
    head_html(&mut out, report);
    summary_html(&mut out, report);
    // A regression is the news of a nightly run: it comes before the ranking.
    let regressed = report.baseline.as_ref().filter(|c| !c.passed());
    if let Some(comparison) = regressed {
        baseline_html(&mut out, comparison);
    }
    ranking_html(&mut out, &report.ranking);
    if let Some(comparison) = report.baseline.as_ref().filter(|c| c.passed()) {
        baseline_html(&mut out, comparison);
    }
    let palette = [
        "#2c7be5", "#e67e22", "#27ae60", "#8e44ad", "#c0392b", "#16a085", "#7f8c8d", "#d35400",
    ];
    attempts_html(&mut out, report, &palette);
    waves_html(&mut out, report, &palette);
    // Every policy's charts over the same seconds, so they can be compared by eye.
    let seconds = report
        .policies
        .iter()
        .flat_map(|p| {
            p.tiers
                .iter()
                .map(|t| t.sent_per_second.len())
                .chain([p.series.len()])
        })
        .max()
        .unwrap_or(0);
    for p in &report.policies {
        policy_html(
            &mut out,
            p,
            plan.fault_window_s,
            seconds,
            plan.in_front_of_a_service(),
        );
    }
    out.push_str("</body></html>\n");
    out
}

/// The page's head, its title with the verdict, the run's errors and warnings, and what
/// ran against what.
fn head_html(out: &mut String, report: &Report) {
    let plan = &report.plan;
    let verdict = report.verdict_label();
    let _ = write!(
        out,
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>chaos report: {name}</title><style>{CSS}</style></head><body>\
         <h1>Chaos report: {name} <span class=\"verdict {cls}\">{verdict}</span></h1>",
        name = esc(&plan.name),
        cls = verdict.to_ascii_lowercase(),
    );
    if let Some(d) = &plan.description {
        let _ = write!(out, "<p>{}</p>", esc(d));
    }
    if let Some(error) = &report.error {
        let _ = write!(out, "<p class=\"note\"><b>Error:</b> {}</p>", esc(error));
    }
    for warning in &report.warnings {
        let _ = write!(
            out,
            "<p class=\"note warn\"><b>Warning:</b> {}</p>",
            esc(warning)
        );
    }
    let _ = write!(
        out,
        "<p class=\"meta\">Plan <code>{}</code>, seed {}, {} s of arrivals against {}{}. Generated {}{}.</p><p class=\"meta\">{}</p>",
        esc(&plan.file),
        plan.seed,
        plan.duration_s,
        if report.mode == "simulated" {
            "a modelled fault-server, simulated in virtual time (<code>harness simulate</code>)"
                .to_owned()
        } else {
            esc(&plan.target)
        },
        if report.mode == "simulated" {
            ""
        } else if plan.ledger {
            " (fault-server ledger)"
        } else {
            " (black box)"
        },
        esc(&report.generated_at),
        esc(&super::markdown::run_of(report)),
        esc(&super::markdown::faults_line(report))
    );
    if let Some(telemetry) = &report.telemetry {
        let _ = write!(out, "<p class=\"meta\">{}</p>", esc(&telemetry.describe()));
    }
}

/// Offered load against every policy's attempts per second, in one chart.
fn attempts_html(out: &mut String, report: &Report, palette: &[&str]) {
    let seconds = report
        .policies
        .iter()
        .map(|p| p.series.len())
        .max()
        .unwrap_or(0);
    if report.policies.iter().any(|p| !p.tiers.is_empty()) {
        // Behind relay tiers the client's attempts reach the first tier; each policy's
        // section charts every hop.
        let _ = write!(
            out,
            "<h2>Attempts the client sent per second</h2><p>Behind relay tiers: each policy's call-chain chart below shows every hop.</p>"
        );
    } else if report
        .policies
        .iter()
        .any(|p| p.ledger.as_ref().is_some_and(|l| l.client_unsent > 0))
    {
        // Attempts that failed to connect, or ran out of time waiting for a capped
        // connection, are sent by the client and never reach the server.
        let _ = write!(
            out,
            "<h2>Attempts the client sent per second</h2><p>Some never reached the server: they failed to connect or ran out of time waiting for a connection (each policy's <code>connect_refused</code> and <code>connect_timeout</code> below).</p>"
        );
    } else {
        let _ = write!(out, "<h2>Attempts reaching the server per second</h2>");
    }
    let mut lines: Vec<(&str, &str, Vec<f64>)> = Vec::new();
    if let Some(first) = report.policies.first() {
        lines.push((
            "offered load",
            "#111",
            column(&first.series, |s| s.offered as f64),
        ));
    }
    for (i, p) in report.policies.iter().enumerate() {
        lines.push((
            p.name.as_str(),
            palette[i % palette.len()],
            column(&p.series, |s| s.attempts as f64),
        ));
    }
    out.push_str(&chart(
        if report.plan.fault_window_s.is_some() {
            "offered logical requests vs attempts sent, per second (shaded: fault window)"
        } else {
            "offered logical requests vs attempts sent, per second"
        },
        seconds,
        &lines,
        report.plan.fault_window_s,
        &[],
    ));
}

fn baseline_html(out: &mut String, comparison: &Comparison) {
    let _ = write!(
        out,
        "<h2>Against baseline <code>{}</code></h2>",
        esc(&comparison.file)
    );
    for note in &comparison.notes {
        let _ = write!(out, "<p class=\"note warn\"><b>Note:</b> {}</p>", esc(note));
    }
    out.push_str(&tables::baseline(comparison).html());
}

fn ranking_html(out: &mut String, ranking: &super::Ranking) {
    out.push_str("<h2>Ranking</h2>");
    out.push_str(&tables::ranking(ranking).html());
    let _ = write!(out, "<p><b>{}</b></p>", esc(&ranking.line()));
}

/// At most this many points a line in the waves chart: a longer window is shown as the
/// mean of consecutive 50 ms buckets (its numbers in report.json stay whole).
const WAVE_POINTS: usize = 1200;

/// Retries per 50 ms across the fault window, a line per policy: fixed intervals show as
/// waves in phase, jitter as an even band.
fn waves_html(out: &mut String, report: &Report, palette: &[&str]) {
    let Some([from, _]) = report.plan.fault_window_s else {
        return;
    };
    let len = report
        .policies
        .iter()
        .map(|p| p.waves_50ms.len())
        .max()
        .unwrap_or(0);
    if len == 0 {
        return;
    }
    let group = len.div_ceil(WAVE_POINTS);
    let names: Vec<String> = report
        .policies
        .iter()
        .map(|p| {
            let figure = p
                .synchrony
                .map_or_else(|| "–".to_owned(), |s| format!("{s:.2}"));
            format!("{} (synchrony {figure})", p.name)
        })
        .collect();
    let lines: Vec<(&str, &str, Vec<f64>)> = report
        .policies
        .iter()
        .zip(&names)
        .enumerate()
        .map(|(i, (p, name))| {
            let values = p
                .waves_50ms
                .chunks(group)
                .map(|c| c.iter().sum::<u64>() as f64 / c.len() as f64)
                .collect();
            (name.as_str(), palette[i % palette.len()], values)
        })
        .collect();
    let points = len.div_ceil(group);
    // A label every 200 ms in a short window, else on round seconds, at most a dozen.
    let tick = super::chart::round_tick(points, 20usize.div_ceil(group));
    let axis = Axis {
        from,
        step: 0.05 * group as f64,
        len: points,
        tick,
    };
    out.push_str("<h2 id=\"waves\">Waves: retries per 50 ms across the fault window</h2>");
    out.push_str(&chart_on(
        "retries sent per 50 ms during the fault window, per policy (synchrony: busiest 50 ms over the mean; – : fewer retries than 50 ms buckets)",
        &axis,
        &lines,
        None,
        &[],
    ));
}

/// The server's peers, method by method; nothing with one peer.
fn peers_html(out: &mut String, p: &PolicyReport) {
    if let Some(table) = tables::peers(p) {
        out.push_str("<p>Attempts the server received, peer by peer:</p>");
        out.push_str(&table.html());
    }
}

/// A call chain hop by hop: the table, and each hop's attempts per second (the client's
/// attempts, each tier's attempts sent; the last tier's are what the leaf received).
fn chain_html(out: &mut String, p: &PolicyReport, window: Option<[f64; 2]>, seconds: usize) {
    let Some(table) = tables::chain(p) else {
        return;
    };
    out.push_str("<p>Call chain, hop by hop (amplification: attempts per logical request of the client):</p>");
    out.push_str(&table.html());
    for table in tables::proxies(p) {
        out.push_str(&table.html());
    }
    let palette = [
        "#111", "#2c7be5", "#e67e22", "#27ae60", "#8e44ad", "#c0392b",
    ];
    let mut lines = vec![(
        "client".to_owned(),
        palette[0],
        column(&p.series, |x| x.attempts as f64),
    )];
    for (i, t) in p.tiers.iter().enumerate() {
        lines.push((
            format!("{} (sent)", t.name),
            palette[(i + 1) % palette.len()],
            t.sent_per_second.iter().map(|n| *n as f64).collect(),
        ));
    }
    let lines: Vec<(&str, &str, Vec<f64>)> = lines
        .iter()
        .map(|(name, colour, values)| (name.as_str(), *colour, values.clone()))
        .collect();
    out.push_str(&chart(
        &format!("{}: attempts per second at each hop", p.name),
        seconds,
        &lines,
        window,
        &[],
    ));
}

fn policy_html(
    out: &mut String,
    p: &PolicyReport,
    window: Option<[f64; 2]>,
    seconds: usize,
    proxied: bool,
) {
    let _ = write!(
        out,
        "<h2>Policy <code>{}</code>{}</h2><p>{}</p>",
        esc(&p.name),
        if p.partial {
            " (partial: stopped early)"
        } else {
            ""
        },
        esc(&p.summary)
    );
    if let Some(policy) = &p.resolved {
        out.push_str("<details><summary>Every field, as resolved (preset, import and the plan's keys)</summary>");
        resolved_html(out, policy);
        out.push_str("</details>");
    }
    if let (Some(line), Some(e)) = (p.expectation_line(), &p.expect) {
        let _ = write!(
            out,
            "<p class=\"note{}\">{}</p>",
            if e.met { " caught" } else { "" },
            esc(&line)
        );
    }
    out.push_str(&tables::gates(p).html());
    if let Some(c) = &p.client {
        client_html(out, c);
    }
    chain_html(out, p, window, seconds);
    peers_html(out, p);
    let s = &p.series;
    out.push_str(&chart(
        &format!(
            "{}: offered, attempts, retries, succeeded per second",
            p.name
        ),
        seconds,
        &[
            ("offered", "#111", column(s, |x| x.offered as f64)),
            ("attempts", "#2c7be5", column(s, |x| x.attempts as f64)),
            ("retries", "#e67e22", column(s, |x| x.retries as f64)),
            ("succeeded", "#27ae60", column(s, |x| x.succeeded as f64)),
        ],
        window,
        &s.iter().map(|x| x.breaker_open).collect::<Vec<_>>(),
    ));
    if s.iter().any(|x| x.budget_tokens.is_some()) {
        out.push_str(&chart(
            &format!("{}: budget level (red bar: breaker open)", p.name),
            seconds,
            &[("budget", "#8e44ad", carried(s))],
            window,
            &s.iter().map(|x| x.breaker_open).collect::<Vec<_>>(),
        ));
    }
    counts_html(out, p, proxied);
}

/// What only a client test shows: the program, what the ledger found of it, its waits.
fn client_html(out: &mut String, c: &super::ClientView) {
    let (facts, table) = super::client::section(c);
    out.push_str("<h3>The program under test</h3><ul>");
    for fact in facts {
        let _ = write!(out, "<li>{}</li>", esc(&fact));
    }
    out.push_str("</ul>");
    if let Some(table) = tables::waits(table) {
        out.push_str(
            "<p>Waits before each attempt (from the previous answer, Retry-After waits aside):</p>",
        );
        out.push_str(&table.html());
    }
}

/// A policy's latency table and its counts in sentences: arrivals, connections, give-ups
/// and outcomes, the service behind the fault-server, the ledger.
fn counts_html(out: &mut String, p: &PolicyReport, proxied: bool) {
    out.push_str(&tables::latency(p).html());
    if p.client.is_some() {
        let _ = write!(
            out,
            "<p>The program made {} calls in {} attempts; {} got a 2xx.</p>",
            p.logical, p.attempts, p.succeeded
        );
    } else {
        let _ = write!(
            out,
            "<p>Offered {} arrivals: {} sent, {} dropped at max_in_flight; {} attempts left the process, {} were cut before they were sent.</p>",
            p.offered, p.logical, p.dropped, p.attempts, p.cut
        );
    }
    if let Some(c) = &p.connection_wait {
        let _ = write!(out, "<p>{}</p>", esc(&c.sentence()));
    }
    if let Some(c) = &p.connections_opened {
        let _ = write!(out, "<p>{}</p>", esc(&c.sentence()));
    }
    let _ = write!(
        out,
        "<p>Give-ups: {}. Attempt outcomes: {}.</p>",
        esc(&p.give_ups_text()),
        esc(&p.outcomes_text())
    );
    if let Some(split) = p.ledger.as_ref().and_then(|l| l.upstream(proxied)) {
        let _ = write!(
            out,
            "<p>{}</p>",
            super::table::inline_html(&split.sentence())
        );
        out.push_str(&split.table().html());
    }
    if let Some(l) = &p.ledger {
        let _ = write!(
            out,
            "<p>{}</p>",
            l.sentence("<b>does not agree with the client</b>")
        );
    }
}

/// A policy's fields as a definition list, each value as a plan writes it, with what an
/// absent one means; a relay tier's own policy as a list of its own.
fn resolved_html(out: &mut String, policy: &Value) {
    let Value::Map(fields) = policy else {
        let _ = write!(out, "<code>{}</code>", esc(&policy.flow()));
        return;
    };
    out.push_str("<dl class=\"policy\">");
    for (key, value) in fields {
        let _ = write!(out, "<dt>{}</dt><dd>", esc(key));
        match value {
            Value::Map(tiers) if key == "tiers" => {
                out.push_str("<dl class=\"policy\">");
                for (tier, v) in tiers {
                    let _ = write!(out, "<dt>{}</dt><dd>", esc(tier));
                    resolved_html(out, v);
                    out.push_str("</dd>");
                }
                out.push_str("</dl>");
            }
            _ => {
                let _ = write!(out, "<code>{}</code>", esc(&value.flow()));
                if let Some(note) = resolved::note(policy, key) {
                    let _ = write!(out, " <span class=\"meta\">{}</span>", esc(note));
                }
            }
        }
        out.push_str("</dd>");
    }
    out.push_str("</dl>");
}

const CSS: &str = "body{font:14px/1.4 system-ui,sans-serif;max-width:1280px;margin:2em auto;color:#222}.wide{overflow-x:auto}\
h1 .verdict{font-size:.6em;padding:.2em .6em;border-radius:4px;color:#fff}\
.pass{background:#e8f6ec}.fail{background:#fdecea}.verdict.pass{background:#27ae60}.verdict.fail,.verdict.aborted,.verdict.incomplete{background:#c0392b}.note{border-left:4px solid #c0392b;padding:.3em .8em;background:#fdecea}.note.warn{border-color:#e67e22;background:#fef5e7}.note.caught{border-color:#7f8c8d;background:#f2f3f4}tr.fail.expected{background:#f2f3f4}table.summary td.num{text-align:right;white-space:nowrap}\
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:.25em .6em;text-align:left}\
pre{background:#f6f8fa;padding:1em;overflow:auto;font-size:12px}figure{margin:1em 0}figcaption{font-weight:600}\
dl.policy{display:grid;grid-template-columns:max-content auto;gap:.1em 1em;margin:.5em 0}dl.policy dd{margin:0}\
.legend span{margin-right:1em}.legend i{display:inline-block;width:12px;height:3px;margin-right:4px;vertical-align:middle}.meta{color:#555}";
