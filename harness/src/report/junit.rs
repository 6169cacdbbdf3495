//! `junit.xml`: one test case per gate per policy, for CI systems.

use std::fmt::Write;

use super::drift::{Drift, Row};
use super::model::{PolicyReport, Report};

/// XML's escape: HTML's, and the apostrophe (an attribute may be quoted with either).
fn escape(s: &str) -> String {
    super::table::html(s).replace('\'', "&apos;")
}

/// A policy's test cases: one per gate, and a counterexample's expectation.
fn cases_of(p: &PolicyReport) -> usize {
    p.gates.len() + usize::from(p.expect.is_some())
}

/// A policy's failed cases: its failed gates, or for a counterexample its expectation
/// when the detectors did not fire.
fn failures_of(p: &PolicyReport) -> usize {
    p.unexpected_failures() + p.expect.as_ref().map_or(0, |e| usize::from(!e.met))
}

/// Ends an open `<testcase` element: empty, or holding a failure or a note.
fn close_case(out: &mut String, body: Case<'_>) {
    let _ = match body {
        Case::Passed => writeln!(out, "/>"),
        Case::Failed(message) => writeln!(
            out,
            ">\n      <failure message=\"{}\"/>\n    </testcase>",
            escape(message)
        ),
        Case::Noted(note) => writeln!(
            out,
            ">\n      <system-out>{}</system-out>\n    </testcase>",
            escape(note)
        ),
    };
}

enum Case<'a> {
    Passed,
    Failed(&'a str),
    Noted(&'a str),
}

/// A policy's test suite: a case per gate, and a counterexample's expectation.
fn policy_suite(out: &mut String, plan: &str, p: &PolicyReport) {
    let _ = writeln!(
        out,
        "  <testsuite name=\"{}.{}\" tests=\"{}\" failures=\"{}\">",
        escape(plan),
        escape(&p.name),
        cases_of(p),
        failures_of(p)
    );
    let classname = format!("{}.{}", escape(plan), escape(&p.name));
    for g in &p.gates {
        let _ = write!(
            out,
            "    <testcase classname=\"{classname}\" name=\"{}\"",
            escape(&g.name)
        );
        // A counterexample's gate that fired where expected is the detector
        // working: a passing case that says what it caught. Its expectation is a
        // case of its own.
        let caught;
        let case = match (g.pass, p.expects_failure(g)) {
            (true, _) => Case::Passed,
            (false, true) => {
                caught = format!("{}: {}", p.gate_word(g), g.detail);
                Case::Noted(&caught)
            }
            (false, false) => Case::Failed(&g.detail),
        };
        close_case(out, case);
    }
    if let Some(e) = &p.expect {
        let _ = write!(
            out,
            "    <testcase classname=\"{classname}\" name=\"expected to fail\""
        );
        close_case(
            out,
            match e.met {
                true => Case::Noted(&e.detail),
                false => Case::Failed(&e.detail),
            },
        );
    }
    let _ = writeln!(out, "  </testsuite>");
}

pub fn render(report: &Report) -> String {
    // A run that could not be completed is an error of its own, so CI never reads a
    // partial run as green.
    let errors = usize::from(report.error.is_some());
    let compared = report.baseline.as_ref().map_or(&[][..], |c| &c.rows[..]);
    let regressed = |row: &&Row| matches!(row.verdict, Drift::Regressed | Drift::Missing);
    let cases: usize =
        report.policies.iter().map(cases_of).sum::<usize>() + errors + compared.len();
    let failures: usize = report.policies.iter().map(failures_of).sum::<usize>()
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
        policy_suite(&mut out, &report.plan.name, p);
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
            let described;
            close_case(
                &mut out,
                match regressed(&row) {
                    true => {
                        described = super::describe_row(row);
                        Case::Failed(&described)
                    }
                    false => Case::Passed,
                },
            );
        }
        let _ = writeln!(out, "  </testsuite>");
    }
    out.push_str("</testsuites>\n");
    out
}
