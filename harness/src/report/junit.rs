//! `junit.xml`: one test case per gate per policy, for CI systems.

use std::fmt::Write;

use super::drift::{Drift, Row};
use super::model::Report;

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&apos;")
}

pub fn render(report: &Report) -> String {
    // A run that could not be completed is an error of its own, so CI never reads a
    // partial run as green.
    let errors = usize::from(report.error.is_some());
    let compared = report.baseline.as_ref().map_or(&[][..], |c| &c.rows[..]);
    let regressed = |row: &&Row| matches!(row.verdict, Drift::Regressed | Drift::Missing);
    let cases: usize =
        report.policies.iter().map(|p| p.gates.len()).sum::<usize>() + errors + compared.len();
    let failures: usize = report
        .policies
        .iter()
        .map(|p| p.gates.iter().filter(|g| !g.pass).count())
        .sum::<usize>()
        + compared.iter().filter(regressed).count();
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        out,
        "<testsuites name=\"chaos {}\" tests=\"{cases}\" failures=\"{failures}\" errors=\"{errors}\">",
        escape(&report.plan.name)
    );
    if let Some(error) = &report.error {
        let name = escape(&report.plan.name);
        let _ = writeln!(
            out,
            "  <testsuite name=\"{name}\" tests=\"1\" failures=\"0\" errors=\"1\">\n    <testcase classname=\"{name}\" name=\"run completed\">\n      <error message=\"{}\"/>\n    </testcase>\n  </testsuite>",
            escape(error)
        );
    }
    for p in &report.policies {
        let failed = p.gates.iter().filter(|g| !g.pass).count();
        let _ = writeln!(
            out,
            "  <testsuite name=\"{}.{}\" tests=\"{}\" failures=\"{failed}\">",
            escape(&report.plan.name),
            escape(&p.name),
            p.gates.len()
        );
        for g in &p.gates {
            let _ = write!(
                out,
                "    <testcase classname=\"{}.{}\" name=\"{}\"",
                escape(&report.plan.name),
                escape(&p.name),
                escape(&g.name)
            );
            if g.pass {
                let _ = writeln!(out, "/>");
            } else {
                let _ = writeln!(
                    out,
                    ">\n      <failure message=\"{}\"/>\n    </testcase>",
                    escape(&g.detail)
                );
            }
        }
        let _ = writeln!(out, "  </testsuite>");
    }
    if !compared.is_empty() {
        let name = escape(&report.plan.name);
        let _ = writeln!(
            out,
            "  <testsuite name=\"{name}.baseline\" tests=\"{}\" failures=\"{}\">",
            compared.len(),
            compared.iter().filter(regressed).count()
        );
        for row in compared {
            let _ = write!(
                out,
                "    <testcase classname=\"{name}.baseline.{}\" name=\"{}\"",
                escape(&row.policy),
                escape(&row.metric)
            );
            if regressed(&row) {
                let _ = writeln!(
                    out,
                    ">\n      <failure message=\"{}\"/>\n    </testcase>",
                    escape(&super::describe_row(row))
                );
            } else {
                let _ = writeln!(out, "/>");
            }
        }
        let _ = writeln!(out, "  </testsuite>");
    }
    out.push_str("</testsuites>\n");
    out
}
