//! Helpers for the harness's integration tests: the real binary, and plans run in process.

#![allow(dead_code, unreachable_pub)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn harness() -> Command {
    Command::new(env!("CARGO_BIN_EXE_harness"))
}

/// A fresh directory under the target dir, so runs never write into the repository.
pub fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create a scratch dir");
    dir
}

pub fn write_plan(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write the plan");
    path
}

/// `harness chaos --quiet PLAN`, run in `dir` so its reports land there.
pub fn chaos_quietly(dir: &Path, plan: &Path) -> Output {
    harness()
        .current_dir(dir)
        .args(["chaos", "--quiet"])
        .arg(plan)
        .output()
        .expect("run harness")
}

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `harness validate` on a broken plan: exit 2 and the message, file name normalised.
pub fn validate_error(name: &str, text: &str) -> String {
    let dir = scratch(&format!("validate-{name}"));
    let path = write_plan(&dir, &format!("{name}.yaml"), text);
    let out = harness()
        .arg("validate")
        .arg(&path)
        .output()
        .expect("run harness");
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    stderr(&out).replace(&dir.display().to_string(), "$DIR")
}

pub const BASE: &str = "duration: 1s\nload:\n  rate: 10\n  requests: [ { name: r, path: / } ]\n";

/// A plan from YAML, named `test.yaml` in errors.
/// What `harness validate --explain PATH` prints, the plan valid.
pub fn explained(path: &Path) -> String {
    let out = harness()
        .args(["validate", "--explain"])
        .arg(path)
        .output()
        .expect("run harness");
    assert!(out.status.success(), "{}", stderr(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The address in a `harness relay` process's first line,
/// `relay `edge` on http://127.0.0.1:PORT → http://… (…)`.
pub fn relay_url(line: &str) -> String {
    line.split(" on ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .filter(|u| u.starts_with("http://127.0.0.1:"))
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_owned()
}

pub fn plan(yaml: &str) -> harness::plan::Plan {
    harness::plan::parse(Path::new("test.yaml"), yaml).unwrap_or_else(|e| panic!("{e}"))
}

/// Runs a plan in process, every policy, and returns its report.
pub async fn run(yaml: &str) -> harness::report::Report {
    harness::run::run(&plan(yaml), &harness::run::RunOptions::default())
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Runs a plan live, every policy, on a runtime of its own (for tests that are not async).
pub fn live(plan: &harness::plan::Plan) -> harness::report::Report {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime")
        .block_on(harness::run::run(
            plan,
            &harness::run::RunOptions::default(),
        ))
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Runs a plan in virtual time, every policy.
pub fn simulated(plan: &harness::plan::Plan) -> harness::report::Report {
    harness::simulate::simulate(plan, &[])
        .unwrap_or_else(|e| panic!("{e}"))
        .0
}

/// A policy's part of a report, by name.
pub fn policy<'a>(
    report: &'a harness::report::Report,
    name: &str,
) -> &'a harness::report::PolicyReport {
    report
        .policies
        .iter()
        .find(|p| p.name == name)
        .unwrap_or_else(|| panic!("no policy {name}"))
}

/// Reads a request's head (up to its blank line) from a raw connection; `false` when the
/// connection ended or failed first. Tests that play a server by hand answer after it.
pub async fn read_head(stream: &mut tokio::net::TcpStream) -> bool {
    use tokio::io::AsyncReadExt;
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    true
}

/// A workflow job's `run:` commands, in order, once every action it `uses` is checked to
/// be pinned to a version.
pub fn pinned_runs(steps: &[serde_yaml::Value]) -> Vec<String> {
    let mut runs = Vec::new();
    for step in steps {
        if let Some(action) = step["uses"].as_str() {
            assert!(action.contains('@'), "{action} is pinned to a version");
        }
        if let Some(run) = step["run"].as_str() {
            runs.push(run.to_owned());
        }
    }
    runs
}
