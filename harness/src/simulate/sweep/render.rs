//! The comparison rendered: `sweep.md` (the table, also what the terminal shows) and
//! `sweep.html` (three charts of the values and the table, one self-contained page).

use std::fmt::Write as _;

use super::table::{Point, SweepTable};
use crate::report::chart::{Scale, short, titled_svg};
use crate::report::table::{Align, Cell, Table, html as escape};

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "–".to_owned(), |v| format!("{v:.digits$}"))
}

/// The comparison as a table.
pub fn markdown(c: &SweepTable) -> String {
    let mut out = format!(
        "# Sweep of `{}` — plan `{}`, seed {}, simulated\n\n{}",
        c.key,
        c.plan,
        c.seed,
        partial(c)
            .map(|p| format!("**{p}**\n\n"))
            .unwrap_or_default()
    );
    out.push_str(&table(c).markdown());
    out
}

/// The comparison, a row per value and policy (one for a policy the sweep did not change).
fn table(c: &SweepTable) -> Table {
    let mut table = Table::new([
        "value",
        "policy",
        "verdict",
        "success",
        "ampl client",
        "ampl server",
        "peak 1s",
        "bound",
        "recovery s",
        "p99 ms",
    ])
    .align([Align::Left; 3].into_iter().chain([Align::Right; 7]));
    for (value, p) in c.rows() {
        table.row([
            value,
            p.policy.clone(),
            p.verdict.clone(),
            format!("{:.1}%", p.success_rate * 100.0),
            format!("{:.3}", p.amplification_client),
            opt(p.amplification_server, 3),
            opt(p.peak_1s, 2),
            opt(p.budget_bound, 2),
            opt(p.recovery_s, 0),
            format!("{:.0}", p.p99_ms),
        ]);
    }
    table
}

/// What a partial sweep holds, in one sentence; `None` for a whole one.
fn partial(c: &SweepTable) -> Option<String> {
    c.partial.then(|| {
        format!(
            "Partial: {} of its {} values ran (interrupted); the comparison holds those.",
            c.ran,
            c.values.len()
        )
    })
}

const COLOURS: &[&str] = &[
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2",
];

/// The y axis of a sweep chart: a fixed range (success, 0 to 100%), or one round range
/// around the values (amplification between 1.4 and 1.9 fills the chart).
#[derive(Clone, Copy)]
enum Range {
    Fixed(f64, f64, f64),
    Around,
}

/// One small line chart: `metric` of every policy across the values; a policy the sweep
/// did not change is a dashed line, the reference the others move against.
fn chart(
    c: &SweepTable,
    title: &str,
    range: Range,
    metric: impl Fn(&Point) -> Option<f64>,
) -> String {
    let (w, h, left, bottom, top) = (420.0, 240.0, 50.0, 40.0, 28.0);
    let plot_w = w - left - 20.0;
    let plot_h = h - bottom - top;
    let policies = c.policies();
    let unchanged = c.unchanged();
    let scale = match range {
        Range::Fixed(lo, hi, step) => Scale::fixed(lo, hi, step),
        Range::Around => {
            let values: Vec<f64> = c.points.iter().filter_map(&metric).collect();
            let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            if values.is_empty() {
                Scale::fixed(0.0, 1.0, 0.5)
            } else {
                Scale::around(lo, hi)
            }
        }
    };
    let n = c.values.len().max(2) - 1;
    let x = |i: usize| left + plot_w * i as f64 / n as f64;
    let y = |v: f64| scale.y(v, top, plot_h);
    let mut svg = titled_svg(w, h, left, title);
    let _ = write!(
        svg,
        r##"<line x1="{left}" y1="{top}" x2="{left}" y2="{b}" stroke="#888"/><line x1="{left}" y1="{b}" x2="{r}" y2="{b}" stroke="#888"/>"##,
        b = top + plot_h,
        r = left + plot_w,
    );
    for v in scale.ticks() {
        let _ = write!(
            svg,
            r##"<line x1="{left}" y1="{y:.1}" x2="{r}" y2="{y:.1}" stroke="#eee"/><text x="{lx}" y="{ty:.1}" font-size="11" text-anchor="end">{label}</text>"##,
            y = y(v),
            r = left + plot_w,
            lx = left - 4.0,
            ty = y(v) + 4.0,
            label = short((v * 1000.0).round() / 1000.0),
        );
    }
    for (i, v) in c.values.iter().enumerate() {
        let _ = write!(
            svg,
            r##"<text x="{:.1}" y="{:.1}" font-size="11" text-anchor="middle">{}</text>"##,
            x(i),
            top + plot_h + 16.0,
            escape(v)
        );
    }
    for (k, policy) in policies.iter().enumerate() {
        let colour = COLOURS[k % COLOURS.len()];
        let pts: Vec<String> = c
            .values
            .iter()
            .enumerate()
            .filter_map(|(i, v)| {
                c.points
                    .iter()
                    .find(|p| &p.value == v && p.policy == *policy)
                    .and_then(&metric)
                    .map(|m| format!("{:.1},{:.1}", x(i), y(m)))
            })
            .collect();
        let dash = if unchanged.contains(policy) {
            r#" stroke-dasharray="6 4""#
        } else {
            ""
        };
        let _ = write!(
            svg,
            r##"<polyline fill="none" stroke="{colour}" stroke-width="2"{dash} points="{}"/>"##,
            pts.join(" ")
        );
        if dash.is_empty() {
            for p in &pts {
                let (px, py) = p.split_once(',').unwrap_or(("0", "0"));
                let _ = write!(
                    svg,
                    r##"<circle cx="{px}" cy="{py}" r="3" fill="{colour}"/>"##
                );
            }
        }
    }
    svg.push_str("</svg>");
    svg
}

/// The comparison as one self-contained page: three charts and the table.
pub fn html(c: &SweepTable) -> String {
    let mut legend = String::new();
    for (k, policy) in c.policies().iter().enumerate() {
        let colour = COLOURS[k % COLOURS.len()];
        let _ = write!(
            legend,
            r#"<span style="color:{colour}">■</span> {} &nbsp; "#,
            escape(policy)
        );
    }
    let reports = c
        .rows()
        .into_iter()
        .map(|(_, p)| Cell::new("report").link(&p.report));
    let rows = table(c).with_column(Cell::new(""), reports).html();
    format!(
        r#"<!doctype html><html><head><meta charset="utf-8"><title>Sweep of {key}</title>
<style>body{{font-family:system-ui,sans-serif;margin:24px;color:#222}}table{{border-collapse:collapse;margin-top:16px}}td,th{{border:1px solid #ccc;padding:4px 8px;text-align:right}}td:nth-child(-n+3),th:nth-child(-n+3){{text-align:left}}.charts{{display:flex;flex-wrap:wrap;gap:12px}}</style></head><body>
<h1>Sweep of <code>{key}</code></h1><p>Plan <code>{plan}</code>, seed {seed}, simulated in virtual time: one run per value. {legend}</p>{partial}
<div class="charts">{a}{b}{r}</div>
{rows}
</body></html>
"#,
        key = escape(&c.key),
        plan = escape(&c.plan),
        seed = c.seed,
        partial = partial(c)
            .map(|p| format!("<p><strong>{}</strong></p>", escape(&p)))
            .unwrap_or_default(),
        a = chart(c, "amplification at the server", Range::Around, |p| p
            .amplification_server
            .or(Some(p.amplification_client))),
        b = chart(c, "success rate (%)", Range::Fixed(0.0, 100.0, 25.0), |p| {
            Some(p.success_rate * 100.0)
        }),
        r = chart(c, "recovery (s after the faults end)", Range::Around, |p| p
            .recovery_s),
    )
}
