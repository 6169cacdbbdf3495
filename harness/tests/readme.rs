//! README.md's quick start against what the shipped plan gives today: its example output's
//! verdicts (each policy's gates cell, the gates named as failed, the run's verdict) are
//! those `harness simulate plans/outage.yaml` prints, and, in an ignored test, those of
//! the live run the README shows (`just readme-live`). Figures vary run to run; verdicts
//! do not.

mod common;

use common::{harness, repo, scratch, stderr};

/// What a summary says that the plan and its seed decide: each policy with its gates cell
/// (`pass 9/9`, `FAIL 6/8 (expected)`), in order; each gate named as failed
/// (`FAIL (expected) naive / synchrony`); and the verdict (`PASS`).
#[derive(Debug, PartialEq)]
struct Verdicts {
    policies: Vec<(String, String)>,
    failed: Vec<String>,
    verdict: String,
}

/// A summary table's gates cell: the end of its row, from the last verdict word on.
fn gates_cell(row: &str) -> Option<&str> {
    ["pass ", "FAIL ", "NOT CAUGHT "]
        .iter()
        .filter_map(|word| row.rfind(&format!(" {word}")))
        .max()
        .map(|at| row[at..].trim())
}

/// The verdicts of a summary as `harness chaos` and `simulate` print it.
fn verdicts(summary: &str) -> Verdicts {
    let mut lines = summary.lines().skip_while(|l| !l.starts_with("---"));
    assert!(lines.next().is_some(), "a summary table in:\n{summary}");
    let mut policies = Vec::new();
    let mut failed = Vec::new();
    let mut verdict = None;
    let mut in_table = true;
    for line in lines {
        if line.starts_with("recommended:") || line.trim().is_empty() {
            in_table = false;
            continue;
        }
        if in_table {
            let name = line.split_whitespace().next().expect("a policy's name");
            let cell = gates_cell(line).unwrap_or_else(|| panic!("no gates cell: {line}"));
            policies.push((name.to_owned(), cell.to_owned()));
        } else if let Some((word, _)) = line.split_once(": report in ") {
            verdict = Some(word.to_owned());
        } else if line.starts_with("FAIL ") || line.starts_with("NOT CAUGHT") {
            let named = line.split_once(": ").map_or(line, |(named, _)| named);
            failed.push(named.to_owned());
        }
    }
    Verdicts {
        policies,
        failed,
        verdict: verdict.unwrap_or_else(|| panic!("no verdict line in:\n{summary}")),
    }
}

/// README's example output: the fenced block after "It prints a summary".
fn readme_output() -> String {
    let readme = std::fs::read_to_string(repo().join("README.md")).expect("README.md");
    let rest = readme
        .split("It prints a summary")
        .nth(1)
        .expect("README shows what the quick start prints");
    let start = rest.find("```\n").expect("its output block") + 4;
    let end = rest[start..].find("```").expect("the block ends");
    rest[start..start + end].to_owned()
}

/// `harness COMMAND plans/outage.yaml --out DIR`, run from the repository: its stdout.
fn outage(command: &str, name: &str) -> String {
    let out = harness()
        .current_dir(repo())
        .args([command, "plans/outage.yaml", "--out"])
        .arg(scratch(name))
        .output()
        .expect("run harness");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn readme_gives_the_quick_start_commands_of_a_fresh_machine() {
    let readme = std::fs::read_to_string(repo().join("README.md")).expect("README.md");
    for command in [
        "cargo run --release -p harness -- chaos plans/outage.yaml",
        "just chaos plans/outage.yaml",
        "cargo test --locked --workspace",
    ] {
        assert!(readme.contains(command), "README gives `{command}`");
    }
}

#[test]
fn readmes_example_output_has_the_verdicts_the_shipped_plan_gives() {
    let shown = verdicts(&readme_output());
    assert_eq!(shown.policies.len(), 5, "{shown:?}");
    assert_eq!(shown, verdicts(&outage("simulate", "readme-simulated")));
}

#[test]
#[ignore = "a live run of plans/outage.yaml takes about a minute: `just readme-live`"]
fn readmes_example_output_has_the_verdicts_of_a_live_run() {
    assert_eq!(
        verdicts(&readme_output()),
        verdicts(&outage("chaos", "readme-live"))
    );
}

#[test]
fn a_summary_reads_as_its_verdicts() {
    let summary = "policy  offered  gates\n-------  -------  -----\n\
        naive       2173  FAIL 6/8 (expected)\n\
        budget      2173  pass 9/9\n\
        recommended: budget (the least server load)\n\
        FAIL (expected) naive / synchrony: synchrony = 5.3 (must be ≤ 3)\n\
        PASS: report in ./reports/outage/x/report.html\n";
    assert_eq!(
        verdicts(summary),
        Verdicts {
            policies: vec![
                ("naive".into(), "FAIL 6/8 (expected)".into()),
                ("budget".into(), "pass 9/9".into()),
            ],
            failed: vec!["FAIL (expected) naive / synchrony".into()],
            verdict: "PASS".into(),
        }
    );
}
