//! The gate as another repository runs it: docs/ci.md's workflow, read from the docs and
//! its commands run against a temporary repository holding only a plan, its baseline and
//! this checkout as its submodule, the install step included (an ignored test: it needs a
//! release build, `just ci-docs`); the release workflow, checked by construction (no CI
//! service runs here).

mod common;

use std::path::{Path, PathBuf};
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

/// The target directory this test's binaries were built in: the documented install finds
/// an up-to-date release build of this checkout there, and only copies it.
fn target_dir() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_harness"))
        .ancestors()
        .nth(2)
        .expect("TARGET/debug/harness")
        .to_owned()
}

/// How the workflow's harness gets on the PATH.
#[derive(Clone, Copy, PartialEq)]
enum Install {
    /// The documented install step, run as the docs say, into a root of its own.
    AsDocumented,
    /// The binary this test built instead (fast: every `cargo test` runs the gate steps).
    ThisBuild,
}

/// docs/ci.md's workflow, its `run:` steps run in order in a temporary repository that
/// holds a plan, its baseline and, where the submodule goes, this checkout.
fn run_the_documented_workflow(install: Install, name: &str) {
    let docs = text("docs/ci.md");
    assert!(
        docs.contains("```sh\ncargo install --locked --path harness\n```"),
        "docs/ci.md installs from a checkout"
    );
    assert!(
        !docs.contains("example.invalid"),
        "no address that can never resolve"
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
    let checkout = steps
        .iter()
        .find(|s| {
            s["uses"]
                .as_str()
                .is_some_and(|u| u.starts_with("actions/checkout@"))
        })
        .expect("the repository is checked out");
    assert_eq!(
        checkout["with"]["submodules"].as_bool(),
        Some(true),
        "with its submodules: the harness is one"
    );
    common::pinned_runs(steps);
    // Each `run:` step with the directory it runs in, as a runner runs it.
    let runs: Vec<(&str, Option<&str>)> = steps
        .iter()
        .filter_map(|s| Some((s["run"].as_str()?, s["working-directory"].as_str())))
        .collect();
    let [(install_step, Some(submodule)), (gate_step, None)] = runs.as_slice() else {
        panic!("the install in the submodule, then the gate: {runs:?}");
    };
    assert_eq!(
        *install_step, "cargo install --locked --path harness",
        "the install from a checkout"
    );
    let junit = steps
        .iter()
        .find_map(|s| s["with"]["report_paths"].as_str())
        .expect("JUnit is published");
    let uploaded = steps
        .iter()
        .find_map(|s| s["with"]["path"].as_str())
        .expect("the reports are uploaded");

    // A repository of its own: the plan, and this checkout where its submodule goes.
    let dir = common::scratch(name);
    std::fs::create_dir_all(dir.join("chaos/plans")).expect("mkdir");
    std::fs::write(dir.join("chaos/plans/checkout.yaml"), plan(2)).expect("write");
    std::os::unix::fs::symlink(
        repo().canonicalize().expect("the repository"),
        dir.join(submodule),
    )
    .expect("the submodule's checkout");
    let root = common::scratch(&format!("{name}-install-root"));
    let first_on_path = match install {
        Install::AsDocumented => root.join("bin"),
        Install::ThisBuild => Path::new(env!("CARGO_BIN_EXE_harness"))
            .parent()
            .expect("the binary's directory")
            .to_owned(),
    };
    let run_in = |command: &str, dir: &Path| {
        let path = format!(
            "{}:{}",
            first_on_path.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        Command::new("bash")
            .arg("-c")
            .arg(command)
            .current_dir(dir)
            .env("PATH", path)
            .env("CARGO_TARGET_DIR", target_dir())
            .env("CARGO_INSTALL_ROOT", &root)
            .output()
            .expect("bash")
    };
    let run = |command: &str| run_in(command, &dir);
    if install == Install::AsDocumented {
        let started = std::time::Instant::now();
        // In the submodule, as the step's `working-directory` says: the checkout's own
        // directory (a link to it resolves), so an up-to-date release build is reused.
        let installed = run_in(install_step, &dir.join(submodule));
        assert_eq!(installed.status.code(), Some(0), "{}", stderr(&installed));
        eprintln!(
            "the install step took {:.1} s (CARGO_TARGET_DIR {})",
            started.elapsed().as_secs_f64(),
            target_dir().display()
        );
        let which = run("command -v harness");
        assert_eq!(
            String::from_utf8_lossy(&which.stdout).trim(),
            root.join("bin/harness").display().to_string(),
            "the installed harness is the one the steps run"
        );
    }

    // The baseline, saved the documented way; then the repository holds only the plan,
    // the baseline and the submodule.
    let first_day = block_after(&docs, "then save the\n  baselines", "sh");
    let saved = run(first_day.trim());
    assert_eq!(saved.status.code(), Some(0), "{}", stderr(&saved));
    assert!(dir.join("chaos/baselines/checkout.json").is_file());
    std::fs::remove_dir_all(dir.join("reports")).expect("only the plan and its baseline");

    let gate = run(gate_step);
    assert_eq!(gate.status.code(), Some(0), "{}", stderr(&gate));
    let reports = junit.split("/*/").next().expect("a directory");
    assert!(
        dir.join(reports).join("checkout/junit.xml").is_file(),
        "{junit}"
    );
    assert!(dir.join(uploaded).join("checkout/report.html").is_file());

    // The plan edited to retry more: the same step fails, naming the regression.
    std::fs::write(dir.join("chaos/plans/checkout.yaml"), plan(5)).expect("write");
    let worse = run(gate_step);
    assert_eq!(worse.status.code(), Some(1), "{}", stderr(&worse));
    assert!(
        stderr(&worse).contains("REGRESSION client / amplification: baseline "),
        "{}",
        stderr(&worse)
    );
    let said = String::from_utf8_lossy(&worse.stdout);
    assert!(
        said.contains("checkout: FAIL: regressed: client / amplification"),
        "{said}"
    );
}

#[test]
#[ignore = "its install step builds the harness in release, minutes unless an up-to-date release build is in the target dir: `just ci-docs` and .ci/run (after the interop steps' release build) run it"]
fn the_documented_workflow_installs_the_harness_and_gates_a_repository_of_plans_and_baselines() {
    run_the_documented_workflow(Install::AsDocumented, "ci-docs-installed");
}

#[test]
fn the_documented_workflows_gate_steps_pass_a_saved_plan_and_fail_one_that_retries_more() {
    run_the_documented_workflow(Install::ThisBuild, "ci-docs-repository");
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
