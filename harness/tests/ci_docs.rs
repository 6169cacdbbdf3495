//! The gate as another repository runs it: docs/ci.md's workflow, read from the docs and
//! its commands run against a temporary repository holding only a plan and its baseline;
//! the install command the docs give, checked against the workspace's manifest; the
//! release workflow, checked by construction (no CI service runs here).

mod common;

use std::path::Path;
use std::process::Command;

use common::{repo, stderr};

/// The text of a repository file.
fn text(path: &str) -> String {
    std::fs::read_to_string(repo().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The first fenced block of `lang` after `heading` in `markdown`.
fn block_after(markdown: &str, heading: &str, lang: &str) -> String {
    let rest = markdown
        .split(heading)
        .nth(1)
        .unwrap_or_else(|| panic!("no heading {heading}"));
    let start = rest
        .find(&format!("```{lang}\n"))
        .unwrap_or_else(|| panic!("no {lang} block after {heading}"))
        + lang.len()
        + 4;
    let end = rest[start..].find("```").expect("the block ends");
    rest[start..start + end].to_owned()
}

/// `repository = "..."` of the workspace's Cargo.toml.
fn repository() -> String {
    text("Cargo.toml")
        .lines()
        .find_map(|l| l.strip_prefix("repository = \""))
        .and_then(|l| l.strip_suffix('"'))
        .expect("the workspace names its repository")
        .to_owned()
}

/// `bash -c command` in `dir`, with the harness this test built first on the PATH.
fn bash(dir: &Path, command: &str) -> std::process::Output {
    let bin = Path::new(env!("CARGO_BIN_EXE_harness"))
        .parent()
        .expect("the binary's directory");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    Command::new("bash")
        .arg("-c")
        .arg(command)
        .current_dir(dir)
        .env("PATH", path)
        .output()
        .expect("bash")
}

/// A plan a repository of its own might hold: a flaky dependency, one policy.
fn plan(attempts: u32) -> String {
    format!(
        "name: checkout\nseed: 4\nduration: 2s\ndrain: 1s\nload: {{ rate: 100, arrivals: uniform, requests: [ {{ name: r, path: \"/items/{{n}}\" }} ] }}\nfaults:\n  - {{ name: flaky, probability: 0.3, respond: {{ status: 503 }} }}\npolicies:\n  - {{ name: client, max_attempts: {attempts}, backoff: {{ fixed: 10ms }} }}\n"
    )
}

#[test]
fn the_documented_workflow_gates_a_repository_that_holds_only_a_plan_and_a_baseline() {
    let docs = text("docs/ci.md");
    let install = format!("cargo install --locked --git {} harness", repository());
    assert!(
        docs.contains(&format!("```sh\n{install}\n```")),
        "docs/ci.md installs from the manifest's repository: {install}"
    );
    let workflow: serde_yaml::Value = serde_yaml::from_str(&block_after(
        &docs,
        "## A workflow for another repository",
        "yaml",
    ))
    .expect("the documented workflow is YAML");
    let steps = workflow["jobs"]["gate"]["steps"]
        .as_sequence()
        .expect("the gate job's steps");
    // The install needs the network; the test has the binary it built instead.
    let runs: Vec<String> = common::pinned_runs(steps)
        .into_iter()
        .filter(|run| *run != install)
        .collect();
    assert_eq!(runs.len(), 1, "one gate step besides the install: {runs:?}");
    let junit = steps
        .iter()
        .find_map(|s| s["with"]["report_paths"].as_str())
        .expect("JUnit is published");
    let uploaded = steps
        .iter()
        .find_map(|s| s["with"]["path"].as_str())
        .expect("the reports are uploaded");

    // A repository of its own: the plan, then its baseline saved the documented way.
    let dir = common::scratch("ci-docs-repository");
    std::fs::create_dir_all(dir.join("chaos/plans")).expect("mkdir");
    std::fs::write(dir.join("chaos/plans/checkout.yaml"), plan(2)).expect("write");
    let first_day = block_after(&docs, "then save the\n  baselines", "sh");
    let saved = bash(&dir, first_day.trim());
    assert_eq!(saved.status.code(), Some(0), "{}", stderr(&saved));
    assert!(dir.join("chaos/baselines/checkout.json").is_file());
    std::fs::remove_dir_all(dir.join("reports")).expect("only the plan and its baseline");

    let gate = bash(&dir, &runs[0]);
    assert_eq!(gate.status.code(), Some(0), "{}", stderr(&gate));
    let reports = junit.split("/*/").next().expect("a directory");
    assert!(
        dir.join(reports).join("checkout/junit.xml").is_file(),
        "{junit}"
    );
    assert!(dir.join(uploaded).join("checkout/report.html").is_file());

    // The plan edited to retry more: the same step fails, naming the regression.
    std::fs::write(dir.join("chaos/plans/checkout.yaml"), plan(5)).expect("write");
    let worse = bash(&dir, &runs[0]);
    assert_eq!(worse.status.code(), Some(1), "{}", stderr(&worse));
    assert!(
        stderr(&worse).contains("REGRESSION client / amplification"),
        "{}",
        stderr(&worse)
    );
    let said = String::from_utf8_lossy(&worse.stdout);
    assert!(said.contains("checkout: FAIL"), "{said}");
}

#[test]
fn a_plan_without_a_baseline_is_exit_2_with_the_command_that_saves_one() {
    let dir = common::scratch("ci-docs-no-baseline");
    std::fs::write(dir.join("checkout.yaml"), plan(2)).expect("write");
    let out = bash(&dir, "harness gate --baselines base checkout.yaml");
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("harness gate --save --baselines base checkout.yaml"),
        "{}",
        stderr(&out)
    );
    assert!(!dir.join("reports").exists(), "nothing ran");
}

#[test]
fn the_release_workflow_builds_static_binaries_of_both_programs_and_attaches_them() {
    let w: serde_yaml::Value =
        serde_yaml::from_str(&text(".github/workflows/release.yml")).expect("YAML");
    assert!(
        w["on"]["push"]["tags"][0].as_str() == Some("v*"),
        "on a tag"
    );
    let steps = w["jobs"]["binaries"]["steps"]
        .as_sequence()
        .expect("the job's steps");
    let runs = common::pinned_runs(steps).join("\n");
    assert!(
        runs.contains(
            "cargo build --locked --release --target x86_64-unknown-linux-musl -p harness -p fault-server"
        ),
        "{runs}"
    );
    assert!(runs.contains("sha256sum"), "{runs}");
    let files = steps
        .iter()
        .find_map(|s| s["with"]["files"].as_str())
        .expect("files are attached");
    assert_eq!(files, "dist/*");
}
