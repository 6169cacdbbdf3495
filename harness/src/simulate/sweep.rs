//! `harness simulate PLAN --sweep KEY=V1,V2,...`: the plan simulated once per value of one
//! key, and one comparison of what changed: amplification, success rate, recovery time.
//!
//! The key is a policy's (`jittered-budget.budget.ratio`), or the plan's own
//! (`load.rate`); a policy's key may leave the policy out when only one policy runs. Each
//! value's full report is written beside the comparison (`<n>-<value>/`), so any point of
//! the curve can be opened as a run of its own.

#![allow(clippy::print_stdout)]

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::Serialize;

use crate::cli::{EXIT_CANNOT_RUN, EXIT_INVALID, EXIT_PASS};
use crate::plan::{self, Plan, Setting};
use crate::report::{self, Report};

/// The plan's own top-level keys: a sweep key starting with one of these is the plan's.
const PLAN_KEYS: &[&str] = &[
    "name",
    "description",
    "seed",
    "duration",
    "drain",
    "target",
    "tiers",
    "load",
    "server",
    "faults",
    "network",
    "gates",
];

/// What `--sweep` asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct Sweep {
    /// `None`: a key of the plan itself.
    pub policy: Option<String>,
    pub key: Vec<String>,
    pub values: Vec<String>,
}

impl Sweep {
    /// `KEY=V1,V2,...`, read against the plan (its policy names) and the policies that run.
    pub fn parse(spec: &str, plan: &Plan, selected: &[String]) -> Result<Sweep, String> {
        let hint = "e.g. --sweep jittered-budget.budget.ratio=0.05,0.1,0.2";
        let (key, values) = spec
            .split_once('=')
            .ok_or_else(|| format!("`{spec}` is not KEY=V1,V2,...; {hint}"))?;
        let parts: Vec<String> = key.split('.').map(str::trim).map(str::to_owned).collect();
        if parts.iter().any(String::is_empty) {
            return Err(format!("`{key}` has an empty part; {hint}"));
        }
        let values = split_values(values);
        if values.is_empty() || values.iter().any(String::is_empty) {
            return Err(format!("`{spec}` has an empty value; {hint}"));
        }
        let names: Vec<&str> = plan.policies.iter().map(|p| p.name.as_str()).collect();
        let (policy, key) = if names.contains(&parts[0].as_str()) {
            if parts.len() < 2 {
                return Err(format!("`{key}` names a policy but no key of it; {hint}"));
            }
            (Some(parts[0].clone()), parts[1..].to_vec())
        } else if PLAN_KEYS.contains(&parts[0].as_str()) {
            (None, parts)
        } else {
            let running: Vec<&str> = if selected.is_empty() {
                names.clone()
            } else {
                selected.iter().map(String::as_str).collect()
            };
            match running.as_slice() {
                [only] => (Some((*only).to_owned()), parts),
                _ => {
                    return Err(format!(
                        "`{key}`: say which policy, `POLICY.{key}` (the plan has: {}), or run one with --policy",
                        names.join(", ")
                    ));
                }
            }
        };
        Ok(Sweep {
            policy,
            key,
            values,
        })
    }

    /// The key as written back: `policy.key.path`.
    pub fn name(&self) -> String {
        match &self.policy {
            Some(p) => format!("{p}.{}", self.key.join(".")),
            None => self.key.join("."),
        }
    }
}

/// Values split at commas outside braces and brackets, so `{ fixed: 1s, x: 2 }` is one.
fn split_values(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let (mut depth, mut current) = (0i32, String::new());
    for c in text.chars() {
        match c {
            '{' | '[' => depth += 1,
            '}' | ']' => depth -= 1,
            ',' if depth == 0 => {
                out.push(current.trim().to_owned());
                current.clear();
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    out.push(current.trim().to_owned());
    out
}

/// One policy at one value.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Point {
    pub value: String,
    pub policy: String,
    pub verdict: String,
    pub success_rate: f64,
    pub amplification_client: f64,
    pub amplification_server: Option<f64>,
    pub peak_1s: Option<f64>,
    pub budget_bound: Option<f64>,
    pub recovery_s: Option<f64>,
    pub p99_ms: f64,
    /// The value's full report, relative to the sweep's directory.
    pub report: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    pub schema: &'static str,
    pub plan: String,
    pub seed: u64,
    pub key: String,
    pub values: Vec<String>,
    pub points: Vec<Point>,
}

impl Comparison {
    /// The policies, in the order they first appear: each keeps its colour in every chart.
    fn policies(&self) -> Vec<&str> {
        let mut seen: Vec<&str> = Vec::new();
        for p in &self.points {
            if !seen.contains(&p.policy.as_str()) {
                seen.push(&p.policy);
            }
        }
        seen
    }
}

fn points(report: &Report, value: &str, dir: &str) -> Vec<Point> {
    report
        .policies
        .iter()
        .map(|p| Point {
            value: value.to_owned(),
            policy: p.name.clone(),
            verdict: if p.gates.iter().all(|g| g.pass) {
                "pass"
            } else {
                "fail"
            }
            .to_owned(),
            success_rate: p.success_rate,
            amplification_client: p.amplification.client,
            amplification_server: p.amplification.server,
            peak_1s: Some(p.amplification.peak_1s),
            budget_bound: p.amplification.budget_bound,
            recovery_s: p.recovery_s,
            p99_ms: p.latency_ms.p99,
            report: format!("{dir}/report.html"),
        })
        .collect()
}

/// Runs the sweep: `harness simulate PLAN --sweep ...`. Exit 0 when every value ran (a
/// sweep explores: a value whose gates fail is a finding, shown in the table), 2 when
/// the sweep or a value makes no plan, 3 when the results cannot be written.
pub fn main(
    path: &Path,
    policies: &[String],
    seed: Option<u64>,
    out: Option<&Path>,
    spec: &str,
    quiet: bool,
) -> u8 {
    let fail = |e: &dyn std::fmt::Display, code| {
        eprintln!("error: {e}");
        code
    };
    let (text, base) = match plan::read(path).and_then(|t| plan::parse(path, &t).map(|p| (t, p))) {
        Ok(both) => both,
        Err(e) => return fail(&e, EXIT_INVALID),
    };
    let sweep = match Sweep::parse(spec, &base, policies) {
        Ok(s) => s,
        Err(e) => return fail(&format!("--sweep {e}"), EXIT_INVALID),
    };
    let key: Vec<&str> = sweep.key.iter().map(String::as_str).collect();
    let mut runs = Vec::new();
    for value in &sweep.values {
        let setting = Setting {
            policy: sweep.policy.as_deref(),
            key: &key,
            value,
        };
        let mut plan = match plan::parse_with(path, &text, setting) {
            Ok(p) => p,
            Err(e) => return fail(&e, EXIT_INVALID),
        };
        if let Some(seed) = seed {
            plan.reseed(seed);
        }
        match super::simulate(&plan, policies) {
            Ok((report, effort)) => {
                if !quiet {
                    eprintln!("{} = {value}: {}", sweep.name(), effort.describe());
                }
                runs.push((value.clone(), report));
            }
            Err(e) => return fail(&e, EXIT_INVALID),
        }
    }
    let (stamp, _) = report::timestamp(SystemTime::now());
    let comparison = Comparison {
        schema: "chaos-sweep/v1",
        plan: base.name.clone(),
        seed: seed.unwrap_or(base.seed),
        key: sweep.name(),
        values: sweep.values.clone(),
        points: runs
            .iter()
            .enumerate()
            .flat_map(|(i, (value, report))| points(report, value, &value_dir(i, value)))
            .collect(),
    };
    match write(&comparison, &runs, out, &stamp) {
        Ok(dir) => {
            if !quiet {
                print!("{}", markdown(&comparison));
            }
            println!(
                "sweep of {}: {}",
                comparison.key,
                dir.join("sweep.html").display()
            );
            EXIT_PASS
        }
        Err(e) => fail(&e, EXIT_CANNOT_RUN),
    }
}

/// `3-0.2`: the value's place and the value, made safe for a directory name.
fn value_dir(i: usize, value: &str) -> String {
    let safe: String = value
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .take(40)
        .collect();
    format!("{}-{safe}", i + 1)
}

/// Writes the comparison and every value's report: into `out`, or into
/// `reports/<plan>/sweep-<stamp>/`, made whole in a hidden directory and renamed into place.
fn write(
    comparison: &Comparison,
    runs: &[(String, Report)],
    out: Option<&Path>,
    stamp: &str,
) -> Result<PathBuf, String> {
    let (dir, build) = match out {
        Some(dir) => (dir.to_owned(), dir.to_owned()),
        None => {
            let plan_dir = Path::new("reports").join(&comparison.plan);
            (
                plan_dir.join(format!("sweep-{stamp}")),
                plan_dir.join(format!(".sweep-{stamp}.tmp")),
            )
        }
    };
    let err = |p: &Path, e: std::io::Error| format!("cannot write {}: {e}", p.display());
    std::fs::create_dir_all(&build).map_err(|e| err(&build, e))?;
    for (i, (value, report)) in runs.iter().enumerate() {
        let sub = build.join(value_dir(i, value));
        report::write(report, Path::new("."), Some(&sub), stamp).map_err(|e| e.to_string())?;
    }
    let json = serde_json::to_string_pretty(comparison).unwrap_or_default();
    for (name, text) in [
        ("sweep.json", json),
        ("sweep.md", markdown(comparison)),
        ("sweep.html", html(comparison)),
    ] {
        let path = build.join(name);
        let tmp = build.join(format!(".{name}.tmp"));
        std::fs::write(&tmp, text).map_err(|e| err(&tmp, e))?;
        std::fs::rename(&tmp, &path).map_err(|e| err(&path, e))?;
    }
    if build != dir {
        std::fs::rename(&build, &dir).map_err(|e| err(&dir, e))?;
    }
    Ok(dir)
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "–".to_owned(), |v| format!("{v:.digits$}"))
}

/// The comparison as a table.
pub fn markdown(c: &Comparison) -> String {
    let mut out = format!(
        "# Sweep of `{}` — plan `{}`, seed {}, simulated\n\n",
        c.key, c.plan, c.seed
    );
    out.push_str("| value | policy | verdict | success | ampl client | ampl server | peak 1s | bound | recovery s | p99 ms |\n");
    out.push_str("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for p in &c.points {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:.1}% | {:.3} | {} | {} | {} | {} | {:.0} |",
            p.value,
            p.policy,
            p.verdict,
            p.success_rate * 100.0,
            p.amplification_client,
            opt(p.amplification_server, 3),
            opt(p.peak_1s, 2),
            opt(p.budget_bound, 2),
            opt(p.recovery_s, 0),
            p.p99_ms
        );
    }
    out
}

const COLOURS: &[&str] = &[
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2",
];

/// One small line chart: `metric` of every policy across the values.
fn chart(c: &Comparison, title: &str, metric: impl Fn(&Point) -> Option<f64>) -> String {
    let (w, h, left, bottom, top) = (420.0, 240.0, 50.0, 40.0, 28.0);
    let plot_w = w - left - 20.0;
    let plot_h = h - bottom - top;
    let policies = c.policies();
    let max = c
        .points
        .iter()
        .filter_map(&metric)
        .fold(0.0_f64, f64::max)
        .max(1e-9)
        * 1.1;
    let n = c.values.len().max(2) - 1;
    let x = |i: usize| left + plot_w * i as f64 / n as f64;
    let y = |v: f64| top + plot_h * (1.0 - v / max);
    let mut svg = format!(
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" role="img"><title>{title}</title><text x="{left}" y="18" font-size="13" font-weight="bold">{title}</text><line x1="{left}" y1="{top}" x2="{left}" y2="{b}" stroke="#888"/><line x1="{left}" y1="{b}" x2="{r}" y2="{b}" stroke="#888"/><text x="{lx}" y="{ty}" font-size="11" text-anchor="end">{max:.2}</text><text x="{lx}" y="{b}" font-size="11" text-anchor="end">0</text>"##,
        b = top + plot_h,
        r = left + plot_w,
        lx = left - 4.0,
        ty = top + 4.0,
    );
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
        let _ = write!(
            svg,
            r##"<polyline fill="none" stroke="{colour}" stroke-width="2" points="{}"/>"##,
            pts.join(" ")
        );
        for p in &pts {
            let (px, py) = p.split_once(',').unwrap_or(("0", "0"));
            let _ = write!(
                svg,
                r##"<circle cx="{px}" cy="{py}" r="3" fill="{colour}"/>"##
            );
        }
    }
    svg.push_str("</svg>");
    svg
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The comparison as one self-contained page: three charts and the table.
pub fn html(c: &Comparison) -> String {
    let mut legend = String::new();
    for (k, policy) in c.policies().iter().enumerate() {
        let colour = COLOURS[k % COLOURS.len()];
        let _ = write!(
            legend,
            r#"<span style="color:{colour}">■</span> {} &nbsp; "#,
            escape(policy)
        );
    }
    let mut rows = String::new();
    for p in &c.points {
        let _ = write!(
            rows,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{:.1}%</td><td>{:.3}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.0}</td><td><a href=\"{}\">report</a></td></tr>",
            escape(&p.value),
            escape(&p.policy),
            p.verdict,
            p.success_rate * 100.0,
            p.amplification_client,
            opt(p.amplification_server, 3),
            opt(p.peak_1s, 2),
            opt(p.budget_bound, 2),
            opt(p.recovery_s, 0),
            p.p99_ms,
            escape(&p.report)
        );
    }
    format!(
        r#"<!doctype html><html><head><meta charset="utf-8"><title>Sweep of {key}</title>
<style>body{{font-family:system-ui,sans-serif;margin:24px;color:#222}}table{{border-collapse:collapse;margin-top:16px}}td,th{{border:1px solid #ccc;padding:4px 8px;text-align:right}}td:nth-child(-n+3),th:nth-child(-n+3){{text-align:left}}.charts{{display:flex;flex-wrap:wrap;gap:12px}}</style></head><body>
<h1>Sweep of <code>{key}</code></h1><p>Plan <code>{plan}</code>, seed {seed}, simulated in virtual time: one run per value. {legend}</p>
<div class="charts">{a}{b}{r}</div>
<table><tr><th>value</th><th>policy</th><th>verdict</th><th>success</th><th>ampl client</th><th>ampl server</th><th>peak 1s</th><th>bound</th><th>recovery s</th><th>p99 ms</th><th></th></tr>{rows}</table>
</body></html>
"#,
        key = escape(&c.key),
        plan = escape(&c.plan),
        seed = c.seed,
        a = chart(c, "amplification at the server", |p| p
            .amplification_server
            .or(Some(p.amplification_client))),
        b = chart(c, "success rate", |p| Some(p.success_rate * 100.0)),
        r = chart(c, "recovery (s after the faults end)", |p| p.recovery_s),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_split_at_commas_outside_braces() {
        assert_eq!(split_values("0.1, 0.2,0.3"), ["0.1", "0.2", "0.3"]);
        assert_eq!(
            split_values("{ fixed: 1s }, { exponential: { base: 1s, cap: 2s } }"),
            ["{ fixed: 1s }", "{ exponential: { base: 1s, cap: 2s } }"]
        );
    }

    #[test]
    fn value_directories_are_safe_names() {
        assert_eq!(value_dir(0, "0.1"), "1-0.1");
        assert_eq!(value_dir(2, "{ fixed: 1s }"), "3-__fixed__1s__");
    }
}
