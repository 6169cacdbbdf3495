//! The nightly workflow and the script it runs, checked by construction (no CI service
//! runs here): the YAML parses, it runs on a schedule and on demand, every step names a
//! pinned action or a command that exists, and the harness accepts what `.ci/nightly`
//! passes it; every committed baseline has its plan and reads as a baseline.

mod common;

use clap::Parser;
use common::repo;
use harness::cli::Cli;

fn workflow() -> serde_yaml::Value {
    let text = std::fs::read_to_string(repo().join(".github/workflows/nightly.yml"))
        .expect("the nightly workflow");
    serde_yaml::from_str(&text).expect("the workflow is YAML")
}

#[test]
fn the_workflow_runs_nightly_and_on_demand_and_calls_what_exists() {
    let w = workflow();
    let on = &w["on"];
    assert!(on["schedule"][0]["cron"].as_str().is_some(), "a schedule");
    assert!(on.get("workflow_dispatch").is_some(), "on demand");
    let steps = w["jobs"]["gate"]["steps"]
        .as_sequence()
        .expect("the gate job's steps");
    let runs = common::pinned_runs(steps);
    assert!(runs.iter().any(|r| r == "bash .ci/nightly"), "{runs:?}");
    assert!(
        runs.iter()
            .any(|r| r.contains("cargo build --locked --release -p harness"))
    );
    let uploads: Vec<&str> = steps
        .iter()
        .filter_map(|s| s["with"]["path"].as_str())
        .collect();
    assert_eq!(uploads, ["reports/nightly/"]);
    let junit = steps
        .iter()
        .find_map(|s| s["with"]["report_paths"].as_str())
        .expect("JUnit is published");
    assert_eq!(junit, "reports/nightly/*/junit.xml");
}

#[test]
fn the_nightly_script_passes_the_harness_arguments_it_accepts() {
    let script = std::fs::read_to_string(repo().join(".ci/nightly")).expect(".ci/nightly");
    let syntax = std::process::Command::new("bash")
        .arg("-n")
        .arg(repo().join(".ci/nightly"))
        .status()
        .expect("bash -n");
    assert!(syntax.success(), "bash parses .ci/nightly");
    let line = script
        .lines()
        .find(|l| l.contains("\"$harness\" gate"))
        .expect("the harness call");
    // The call's words, with its shell variables given values.
    let words: Vec<String> = line
        .split_whitespace()
        .map(|w| {
            w.trim_matches('"')
                .replace("$harness", "harness")
                .replace("${plans[@]}", "plans/outage.yaml")
        })
        .collect();
    assert_eq!(words[0], "harness");
    Cli::try_parse_from(&words).unwrap_or_else(|e| panic!("{words:?}: {e}"));
}

#[test]
fn every_committed_baseline_has_its_plan_and_reads_as_a_baseline() {
    let dir = repo().join("reports/baselines");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).expect("reports/baselines") {
        let path = entry.expect("an entry").path();
        if path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        seen += 1;
        let name = path
            .file_stem()
            .expect("a name")
            .to_string_lossy()
            .into_owned();
        let baseline = harness::baseline::read(&path).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(baseline.schema, harness::baseline::SCHEMA);
        let plan = harness::plan::load(&repo().join(format!("plans/{name}.yaml")))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(baseline.plan.name, plan.name);
        assert_eq!(
            baseline.plan.digest,
            plan.digest(),
            "{name}: the plan changed since its baseline was saved: save it again"
        );
    }
    assert!(seen >= 5, "the shipped plans have baselines");
}
