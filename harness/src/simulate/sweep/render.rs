//! The comparison rendered: `sweep.md` (the table, also what the terminal shows) and
//! `sweep.html` (three charts of the values and the table, one self-contained page).

use std::fmt::Write as _;

use super::table::{Point, SweepTable};
use crate::report::chart::{Scale, titled_svg};
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
        "failed gates",
        "success",
        "ampl client",
        "ampl server",
        "peak 1s",
        "bound",
        "recovery s",
        "p99 ms",
    ])
    .align([Align::Left; 4].into_iter().chain([Align::Right; 7]));
    for (value, p) in c.rows() {
        table.row([
            value,
            p.policy.clone(),
            p.verdict.clone(),
            p.failed_gates_text.clone(),
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

/// How a sweep's values lie across a chart's x axis.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Across {
    /// Numbers, placed by value between the smallest and the largest.
    Linear,
    /// Positive numbers spanning ten times or more, placed by their logarithm.
    Log,
    /// Not all numbers (`{ fixed: 1s }`, `100ms`): in the order given, evenly spaced.
    Order,
}

impl Across {
    /// What the axis says under its labels.
    fn caption(self, key: &str) -> String {
        match self {
            Across::Linear => key.to_owned(),
            Across::Log => format!("{key} (log scale)"),
            Across::Order => format!("{key} (in the order given, evenly spaced)"),
        }
    }
}

/// Where each value falls across the x axis, from 0 (left) to 1 (right), and how: by
/// value on a linear axis, on a log axis when positive values span ten times or more,
/// else (values that are not numbers) in order. A single value, or values all equal,
/// sit in the middle.
fn across(values: &[String]) -> (Vec<f64>, Across) {
    let numbers: Option<Vec<f64>> = values
        .iter()
        .map(|v| v.trim().parse::<f64>().ok().filter(|x| x.is_finite()))
        .collect();
    let order = || {
        let n = values.len();
        let places = (0..n)
            .map(|i| {
                if n < 2 {
                    0.5
                } else {
                    i as f64 / (n - 1) as f64
                }
            })
            .collect();
        (places, Across::Order)
    };
    let Some(numbers) = numbers else {
        return order();
    };
    let lo = numbers.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = numbers.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if numbers.is_empty() || hi <= lo {
        return (vec![0.5; numbers.len()], Across::Linear);
    }
    if lo > 0.0 && hi / lo >= 10.0 {
        let (a, b) = (lo.ln(), hi.ln());
        let places = numbers.iter().map(|x| (x.ln() - a) / (b - a)).collect();
        return (places, Across::Log);
    }
    let places = numbers.iter().map(|x| (x - lo) / (hi - lo)).collect();
    (places, Across::Linear)
}

/// The y axis of a chart: the range asked for, or one around the values it shows.
fn y_scale(c: &SweepTable, range: Range, metric: &impl Fn(&Point) -> Option<f64>) -> Scale {
    match range {
        Range::Fixed(lo, hi, step) => Scale::fixed(lo, hi, step),
        Range::Around => {
            let values: Vec<f64> = c
                .points
                .iter()
                .filter_map(metric)
                .filter(|v| v.is_finite())
                .collect();
            let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            if values.is_empty() {
                Scale::fixed(0.0, 1.0, 0.5)
            } else {
                Scale::around(lo, hi)
            }
        }
    }
}

/// The values under the x axis (at `bottom`), left to right: a label too close to the
/// last one drawn is left out (its point is still drawn, and the table below names every
/// value).
fn x_labels(svg: &mut String, values: &[String], x: &impl Fn(usize) -> f64, w: f64, bottom: f64) {
    let mut order: Vec<usize> = (0..values.len()).collect();
    order.sort_by(|a, b| x(*a).total_cmp(&x(*b)));
    let mut last: Option<f64> = None;
    for i in order {
        let (at, v) = (x(i), &values[i]);
        let width = 6.5 * v.chars().count() as f64;
        // Its middle, moved in so a long label at either end stays on the chart.
        let mid = at.max(width / 2.0 + 2.0).min(w - width / 2.0 - 2.0);
        if last.is_some_and(|l| mid - l < width.max(24.0)) {
            continue;
        }
        last = Some(mid);
        let _ = write!(
            svg,
            r##"<line x1="{at:.1}" y1="{bottom}" x2="{at:.1}" y2="{t}" stroke="#888"/><text x="{mid:.1}" y="{:.1}" font-size="11" text-anchor="middle">{}</text>"##,
            bottom + 16.0,
            escape(v),
            t = bottom + 4.0,
        );
    }
}

/// One small line chart: `metric` of every policy across the values; a policy the sweep
/// did not change is a dashed line, the reference the others move against.
fn chart(
    c: &SweepTable,
    title: &str,
    range: Range,
    metric: impl Fn(&Point) -> Option<f64>,
) -> String {
    let (w, h, left, bottom, top) = (420.0, 256.0, 50.0, 52.0, 28.0);
    let plot_w = w - left - 20.0;
    let plot_h = h - bottom - top;
    let policies = c.policies();
    let unchanged = c.unchanged();
    let scale = y_scale(c, range, &metric);
    // A little room at either end, so the first and last labels are not cut.
    let (places, kind) = across(&c.values);
    let x = |i: usize| left + 8.0 + (plot_w - 16.0) * places.get(i).copied().unwrap_or(0.5);
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
            label = scale.label(v),
        );
    }
    let _ = write!(
        svg,
        r##"<text x="{:.1}" y="{:.1}" font-size="11" fill="#555" text-anchor="middle">{}</text>"##,
        left + plot_w / 2.0,
        top + plot_h + 34.0,
        escape(&kind.caption(&c.key))
    );
    x_labels(&mut svg, &c.values, &x, w, top + plot_h);
    for (k, policy) in policies.iter().enumerate() {
        let colour = COLOURS[k % COLOURS.len()];
        // Left to right, whatever order the values were given in.
        let mut at: Vec<(f64, f64)> = c
            .values
            .iter()
            .enumerate()
            .filter_map(|(i, v)| {
                c.points
                    .iter()
                    .find(|p| &p.value == v && p.policy == *policy)
                    .and_then(&metric)
                    .filter(|m| m.is_finite())
                    .map(|m| (x(i), y(m)))
            })
            .collect();
        at.sort_by(|a, b| a.0.total_cmp(&b.0));
        let pts: Vec<String> = at
            .iter()
            .map(|(px, py)| format!("{px:.1},{py:.1}"))
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
<style>body{{font-family:system-ui,sans-serif;margin:24px;color:#222}}table{{border-collapse:collapse;margin-top:16px}}td,th{{border:1px solid #ccc;padding:4px 8px;text-align:right}}td:nth-child(-n+4),th:nth-child(-n+4){{text-align:left}}.charts{{display:flex;flex-wrap:wrap;gap:12px}}</style></head><body>
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

#[cfg(test)]
mod tests {
    #![allow(clippy::float_cmp)] // Exact fractions of exact values.

    use super::{Across, across};

    fn values(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn numeric_values_are_placed_by_value_not_evenly() {
        let (at, kind) = across(&values(&["2", "3", "4", "8"]));
        assert_eq!(kind, Across::Linear);
        assert_eq!(at, [0.0, 1.0 / 6.0, 2.0 / 6.0, 1.0]);
        // Ten times or more across: a log axis, and it says so.
        let (at, kind) = across(&values(&["0.05", "0.5", "5"]));
        assert_eq!(kind, Across::Log);
        assert!((at[1] - 0.5).abs() < 1e-12, "{at:?}");
        assert!(kind.caption("ratio").contains("log scale"));
        // Values given out of order keep their places.
        let (at, _) = across(&values(&["4", "2", "3"]));
        assert_eq!(at, [1.0, 0.0, 0.5]);
    }

    #[test]
    fn other_values_are_in_order_and_one_value_sits_in_the_middle() {
        let (at, kind) = across(&values(&["{ fixed: 1s }", "{ fixed: 2s }", "3"]));
        assert_eq!(kind, Across::Order);
        assert_eq!(at, [0.0, 0.5, 1.0]);
        assert!(kind.caption("backoff").contains("in the order given"));
        assert_eq!(across(&values(&["7"])).0, [0.5]);
        assert_eq!(across(&values(&["1", "1.0"])).0, [0.5, 0.5]);
        assert_eq!(across(&values(&["inf", "1"])).1, Across::Order);
        assert_eq!(across(&[]).0, Vec::<f64>::new());
    }
}
