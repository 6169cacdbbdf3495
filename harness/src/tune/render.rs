//! A tune rendered: tune.md (also what the terminal shows) and tune.html (the two
//! frontier charts, server load against success rate and against p99, with the current
//! settings, the choice and the exported config placed on them; then the tables).

use std::fmt::Write as _;

use super::model::{Candidate, TuneTable};
use crate::report::chart::{Scale, titled_svg};
use crate::report::table::Align::{Left, Right};
use crate::report::table::{Cell, Table, html as escape, inline_html as inline};

fn percent(v: f64) -> String {
    format!("{:.1}%", v * 100.0)
}

fn gates(c: &Candidate) -> String {
    let f = &c.figures;
    if f.gates_passed == f.gates {
        format!("pass {}/{}", f.gates_passed, f.gates)
    } else {
        format!(
            "fail {}/{} ({})",
            f.gates_passed,
            f.gates,
            c.failed_gates.join(", ")
        )
    }
}

/// The headline: what was searched, how, and the choice against the current settings.
fn summary(t: &TuneTable) -> String {
    let mut out = format!(
        "Searched {} ({}): {} of a budget of {} simulated runs in {:.1} s{}.\n\n",
        t.vary.join(", "),
        t.search,
        t.ran,
        t.budget,
        t.search_s,
        if t.partial { ", interrupted" } else { "" }
    );
    let cur = &t.current.figures;
    match t.chosen.map(|i| &t.candidates[i]) {
        Some(c) => {
            let f = &c.figures;
            let _ = writeln!(out, "**Choice: `{}`**: {}.\n", c.label(), t.reason);
            let _ = writeln!(
                out,
                "Current settings: {:.3} attempts per logical request at the server, {:.2} in the worst second, success {}, p99 {:.0} ms, gates {}. The choice asks {} of the server ({:+.1}%), success {:+.1} points, p99 {:+.0} ms.\n",
                cur.server_load,
                cur.peak_1s,
                percent(cur.success_rate),
                cur.p99_ms,
                gates(&t.current),
                if f.server_load <= cur.server_load {
                    "less"
                } else {
                    "more"
                },
                (f.server_load / cur.server_load.max(1e-9) - 1.0) * 100.0,
                (f.success_rate - cur.success_rate) * 100.0,
                f.p99_ms - cur.p99_ms
            );
        }
        None => {
            let _ = writeln!(out, "**No choice**: {}.\n", t.reason);
        }
    }
    out
}

/// A part of tune.md and tune.html after the summary, built once for both.
enum Block {
    Heading(String),
    Paragraph(String),
    List(Vec<String>),
    Table(Table),
}

/// The live confirmations against the simulation; `None` when nothing ran live.
fn live_table(t: &TuneTable) -> Option<Table> {
    let live: Vec<&Candidate> = t.candidates.iter().filter(|c| c.live.is_some()).collect();
    if live.is_empty() {
        return None;
    }
    let mut table = Table::new(
        [
            "candidate",
            "server load sim / live",
            "success sim / live",
            "p99 ms sim / live",
            "live gates",
            "agrees",
        ]
        .map(Cell::inline),
    )
    .align([Left, Right, Right, Right, Left, Left]);
    for c in live {
        let l = c.live.as_ref().expect("filtered");
        table.row(
            [
                c.label(),
                format!(
                    "{:.3} / {:.3}",
                    c.figures.server_load, l.figures.server_load
                ),
                format!(
                    "{} / {}",
                    percent(c.figures.success_rate),
                    percent(l.figures.success_rate)
                ),
                format!("{:.0} / {:.0}", c.figures.p99_ms, l.figures.p99_ms),
                if l.failed_gates.is_empty() {
                    format!("pass {}/{}", l.figures.gates_passed, l.figures.gates)
                } else {
                    format!("fail ({})", l.failed_gates.join(", "))
                },
                l.detail.clone(),
            ]
            .map(Cell::inline),
        );
    }
    Some(table)
}

/// Every candidate best first, after the current settings.
fn candidates_table(t: &TuneTable) -> Table {
    let mut table = Table::new(
        [
            "#",
            "settings",
            "stage",
            "gates",
            "server load",
            "peak 1s",
            "success",
            "p99 ms",
            "frontier",
        ]
        .map(Cell::inline),
    )
    .align([Right, Left, Left, Left, Right, Right, Right, Right, Left]);
    let rows = std::iter::once((None, &t.current))
        .chain(t.candidates.iter().enumerate().map(|(i, c)| (Some(i), c)));
    for (i, c) in rows {
        let f = &c.figures;
        let frontier = match (c.frontier_success, c.frontier_p99) {
            (true, true) => "success, p99",
            (true, false) => "success",
            (false, true) => "p99",
            (false, false) => "",
        };
        let chosen = if i.is_some() && i == t.chosen {
            " **(chosen)**"
        } else {
            ""
        };
        table.row(
            [
                i.map_or_else(|| "–".to_owned(), |i| (i + 1).to_string()),
                format!("{}{chosen}", c.label()),
                c.stage.name().to_owned(),
                gates(c),
                format!("{:.3}", f.server_load),
                format!("{:.2}", f.peak_1s),
                percent(f.success_rate),
                format!("{:.0}", f.p99_ms),
                frontier.to_owned(),
            ]
            .map(Cell::inline),
        );
    }
    table
}

/// What follows the summary: the live confirmations, the export, the candidates.
fn blocks(t: &TuneTable) -> Vec<Block> {
    let mut blocks = Vec::new();
    if let Some(table) = live_table(t) {
        blocks.push(Block::Heading("Confirmed live".to_owned()));
        blocks.push(Block::Paragraph(format!(
            "Tolerance: amplification within {:.0}%, success within {:.0} points (docs/simulator.md).",
            t.tolerance.amplification * 100.0,
            t.tolerance.success_points
        )));
        blocks.push(Block::Table(table));
    }
    if let Some(e) = &t.export {
        let s = &e.simulated.figures;
        blocks.push(Block::Heading(format!("Exported as {}", e.format)));
        blocks.push(Block::Paragraph(format!(
            "Files: {}. Imported back and simulated: server load {:.3}, worst second {:.2}, success {}, p99 {:.0} ms, gates {}.",
            e.files.join(", "),
            s.server_load,
            s.peak_1s,
            percent(s.success_rate),
            s.p99_ms,
            gates(&e.simulated)
        )));
        if e.warnings.is_empty() {
            blocks.push(Block::Paragraph(
                "The config says every setting of the choice.".to_owned(),
            ));
        } else {
            blocks.push(Block::Paragraph("What the config cannot say:".to_owned()));
            blocks.push(Block::List(e.warnings.clone()));
        }
    }
    if let Some(cmd) = &t.export_command {
        blocks.push(Block::Paragraph(format!("To export the choice: `{cmd}`")));
    }
    blocks.push(Block::Heading("Candidates, best first".to_owned()));
    blocks.push(Block::Table(candidates_table(t)));
    blocks
}

/// tune.md.
pub fn markdown(t: &TuneTable) -> String {
    let mut out = format!(
        "# Tune of `{}` — plan `{}`, seed {}\n\n{}",
        t.policy,
        t.plan,
        t.seed,
        summary(t)
    );
    let parts: Vec<String> = blocks(t)
        .iter()
        .map(|block| match block {
            Block::Heading(h) => format!("## {h}\n"),
            Block::Paragraph(p) => format!("{p}\n"),
            Block::List(items) => items.iter().map(|i| format!("- {i}\n")).collect(),
            Block::Table(table) => table.markdown(),
        })
        .collect();
    out.push_str(&parts.join("\n"));
    out
}

/// One scatter chart: server load across, `metric` up, and the plan's gate on it (`gate`,
/// in the chart's unit) as a line.
fn scatter(
    t: &TuneTable,
    title: &str,
    unit: &str,
    metric: fn(&Candidate) -> f64,
    frontier: fn(&Candidate) -> bool,
    gate: Option<(f64, &str)>,
) -> String {
    let (w, h, left, bottom, top, right) = (560.0, 360.0, 60.0, 44.0, 30.0, 20.0);
    let (pw, ph) = (w - left - right, h - top - bottom);
    let mut all: Vec<&Candidate> = t.candidates.iter().collect();
    all.push(&t.current);
    if let Some(e) = &t.export {
        all.push(&e.simulated);
    }
    let xs: Vec<f64> = all.iter().map(|c| c.figures.server_load).collect();
    let mut ys: Vec<f64> = all.iter().map(|c| metric(c)).collect();
    ys.extend(gate.map(|(limit, _)| limit));
    let span = |v: &[f64]| {
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        Scale::around(lo, if hi > lo { hi } else { lo + 1e-3 })
    };
    let (across, up) = (span(&xs), span(&ys));
    let x = |v: f64| across.x(v, left, pw);
    let y = |v: f64| up.y(v, top, ph);
    let mut svg = titled_svg(w, h, left, title);
    let _ = write!(
        svg,
        r##"<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#888"/>"##
    );
    for v in across.ticks() {
        let _ = write!(
            svg,
            r##"<line x1="{px:.1}" y1="{top}" x2="{px:.1}" y2="{b}" stroke="#eee"/><text x="{px:.1}" y="{ty}" font-size="11" text-anchor="middle">{l}</text>"##,
            px = x(v),
            b = top + ph,
            ty = top + ph + 15.0,
            l = across.label(v)
        );
    }
    for v in up.ticks() {
        let _ = write!(
            svg,
            r##"<line x1="{left}" y1="{py:.1}" x2="{r}" y2="{py:.1}" stroke="#eee"/><text x="{lx}" y="{ty:.1}" font-size="11" text-anchor="end">{l}</text>"##,
            py = y(v),
            r = left + pw,
            lx = left - 4.0,
            ty = y(v) + 4.0,
            l = up.label(v)
        );
    }
    let _ = write!(
        svg,
        r##"<text x="{cx}" y="{by}" font-size="11" text-anchor="middle">server load (attempts per logical request at the server)</text><text x="14" y="{cy}" font-size="11" text-anchor="middle" transform="rotate(-90 14 {cy})">{unit}</text>"##,
        cx = left + pw / 2.0,
        by = h - 4.0,
        cy = top + ph / 2.0
    );
    if let Some((limit, name)) = gate {
        let _ = write!(
            svg,
            r##"<line x1="{left}" y1="{gy:.1}" x2="{r}" y2="{gy:.1}" stroke="#d62728" stroke-dasharray="2 3"/><text x="{tx}" y="{ty:.1}" font-size="10" fill="#d62728" text-anchor="end">gate: {}</text>"##,
            escape(name),
            gy = y(limit),
            r = left + pw,
            tx = left + pw - 4.0,
            ty = y(limit) - 4.0
        );
    }
    marks(
        &mut svg,
        t,
        |c| (x(c.figures.server_load), y(metric(c))),
        frontier,
    );
    svg.push_str("</svg>");
    svg
}

/// A scatter chart's marks, each candidate `at` its place: the frontier's dashed line,
/// every candidate (filled when it passes every gate), the choice ringed, the current
/// settings a diamond and the exported config a square.
fn marks(
    svg: &mut String,
    t: &TuneTable,
    at: impl Fn(&Candidate) -> (f64, f64),
    frontier: fn(&Candidate) -> bool,
) {
    let mut line: Vec<&Candidate> = t.candidates.iter().filter(|c| frontier(c)).collect();
    line.sort_by(|a, b| a.figures.server_load.total_cmp(&b.figures.server_load));
    let pts: Vec<String> = line
        .iter()
        .map(|c| {
            let (px, py) = at(c);
            format!("{px:.1},{py:.1}")
        })
        .collect();
    let _ = write!(
        svg,
        r##"<polyline points="{}" fill="none" stroke="#1f77b4" stroke-width="1.5" stroke-dasharray="5 3"/>"##,
        pts.join(" ")
    );
    for c in &t.candidates {
        let (px, py) = at(c);
        let tip = escape(&format!("{}: {}", c.label(), gates(c)));
        if c.figures.qualifies {
            let _ = write!(
                svg,
                r##"<circle cx="{px:.1}" cy="{py:.1}" r="4" fill="#1f77b4"><title>{tip}</title></circle>"##
            );
        } else {
            let _ = write!(
                svg,
                r##"<circle cx="{px:.1}" cy="{py:.1}" r="4" fill="none" stroke="#999"><title>{tip}</title></circle>"##
            );
        }
    }
    if let Some(c) = t.chosen.map(|i| &t.candidates[i]) {
        let (px, py) = at(c);
        let _ = write!(
            svg,
            r##"<circle cx="{px:.1}" cy="{py:.1}" r="9" fill="none" stroke="#2ca02c" stroke-width="2.5"><title>chosen: {}</title></circle>"##,
            escape(&c.label())
        );
    }
    let (cx, cy) = at(&t.current);
    let _ = write!(
        svg,
        r##"<path d="M{:.1},{:.1} l7,7 l-7,7 l-7,-7 z" fill="#ff7f0e" stroke="#a34d00"><title>current settings: {}</title></path>"##,
        cx,
        cy - 7.0,
        escape(&gates(&t.current))
    );
    if let Some(e) = &t.export {
        let (ex, ey) = at(&e.simulated);
        let _ = write!(
            svg,
            r##"<rect x="{:.1}" y="{:.1}" width="10" height="10" fill="#9467bd"><title>exported {}, imported back: {}</title></rect>"##,
            ex - 5.0,
            ey - 5.0,
            e.format,
            escape(&gates(&e.simulated))
        );
    }
}

/// tune.html: one self-contained page.
pub fn html(t: &TuneTable) -> String {
    let mut out = format!(
        r##"<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Tune of {policy} — {plan}</title><style>body{{font-family:system-ui,sans-serif;margin:2em;max-width:1200px}}table{{border-collapse:collapse;font-size:13px}}td,th{{border:1px solid #ccc;padding:3px 6px}}.charts{{display:flex;flex-wrap:wrap;gap:16px}}.legend span{{margin-right:1.5em}}code{{background:#f4f4f4;padding:1px 3px}}</style></head><body><h1>Tune of <code>{policy}</code> — plan <code>{plan}</code>, seed {seed}</h1>"##,
        policy = escape(&t.policy),
        plan = escape(&t.plan),
        seed = t.seed
    );
    for para in summary(t).split("\n\n").filter(|p| !p.trim().is_empty()) {
        let _ = write!(out, "<p>{}</p>", inline(para.trim()));
    }
    let exported = if t.export.is_some() {
        r##"<span style="color:#9467bd">■ exported config, imported back</span>"##
    } else {
        ""
    };
    let _ = write!(
        out,
        r##"<h2>The trade-off frontier</h2><p class="legend"><span style="color:#1f77b4">● passes every gate</span><span style="color:#999">○ fails a gate</span><span style="color:#2ca02c">◯ chosen</span><span style="color:#ff7f0e">◆ current settings</span>{exported}<span style="color:#1f77b4">- - frontier</span><span style="color:#d62728">··· the plan's gate</span></p><div class="charts">"##
    );
    // The strictest limit of each: the line a candidate must clear.
    let line = |metric: &str, scale: f64, stricter: fn(f64, f64) -> bool| {
        t.gate_lines
            .iter()
            .filter(|g| g.metric == metric)
            .fold(None::<&super::model::GateLine>, |best, g| match best {
                Some(b) if !stricter(g.limit, b.limit) => Some(b),
                _ => Some(g),
            })
            .map(|g| (g.limit * scale, g.gate.as_str()))
    };
    out.push_str(&scatter(
        t,
        "Server load against success rate",
        "success rate (%)",
        |c| c.figures.success_rate * 100.0,
        |c| c.frontier_success,
        line("success_rate", 100.0, |a, b| a > b),
    ));
    out.push_str(&scatter(
        t,
        "Server load against p99 latency",
        "p99 (ms)",
        |c| c.figures.p99_ms,
        |c| c.frontier_p99,
        line("p99_ms", 1.0, |a, b| a < b),
    ));
    out.push_str("</div>");
    for block in blocks(t) {
        match block {
            Block::Heading(h) => {
                let _ = write!(out, "<h2>{}</h2>", inline(&h));
            }
            Block::Paragraph(p) => {
                let _ = write!(out, "<p>{}</p>", inline(&p));
            }
            Block::List(items) => {
                out.push_str("<ul>");
                for item in items {
                    let _ = write!(out, "<li>{}</li>", inline(&item));
                }
                out.push_str("</ul>");
            }
            Block::Table(table) => out.push_str(&table.html()),
        }
    }
    out.push_str("</body></html>\n");
    out
}
