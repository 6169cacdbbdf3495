//! The regression gate as a user runs it: save a baseline, run again against it, change
//! the plan so a policy retries more, and `compare` offline; `harness gate` saying what
//! failed, and refusing to save a failing run as a baseline unless forced.

mod common;

use common::{harness, scratch, stderr, write_plan};

/// A short outage plan; `attempts` is what the edit changes. The gate under test is
/// amplification, which the seed fixes; latency on a shared, loaded machine is not (one CI
/// run's p99 went from 13 ms to 118 ms between two identical runs), so its tolerance here
/// is wide.
fn plan(attempts: u32) -> String {
    format!(
        r#"name: gated
seed: 4
duration: 2s
drain: 1s
load: {{ rate: 100, arrivals: uniform, requests: [ {{ name: r, path: "/items/{{n}}" }} ] }}
faults:
  - {{ name: flaky, probability: 0.3, respond: {{ status: 503 }} }}
policies:
  - {{ name: steady, max_attempts: 2, backoff: {{ fixed: 10ms }} }}
  - {{ name: edited, max_attempts: {attempts}, backoff: {{ fixed: 10ms }} }}
baseline:
  tolerance:
    p50_ms: {{ ratio: 1, floor: 60000 }}
    p99_ms: {{ ratio: 1, floor: 60000 }}
"#
    )
}

fn chaos(dir: &std::path::Path, plan: &std::path::Path, extra: &[&str]) -> std::process::Output {
    harness()
        .current_dir(dir)
        .args(["chaos", "--quiet"])
        .arg(plan)
        .args(extra)
        .output()
        .expect("run harness")
}

#[test]
fn a_run_against_its_own_baseline_passes_and_a_policy_that_retries_more_fails() {
    let dir = scratch("baseline-gate");
    let path = write_plan(&dir, "gated.yaml", &plan(2));
    let saved = chaos(&dir, &path, &["--save-baseline", "b.json"]);
    assert_eq!(saved.status.code(), Some(0), "{}", stderr(&saved));
    let baseline: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("b.json")).expect("b.json"))
            .expect("json");
    assert_eq!(baseline["schema"], "chaos-baseline/v1");
    assert_eq!(baseline["policies"].as_array().map(Vec::len), Some(2));

    let again = chaos(&dir, &path, &["--baseline", "b.json"]);
    assert_eq!(again.status.code(), Some(0), "{}", stderr(&again));
    // The baseline read back holds the same policies: nothing to say about them.
    assert!(
        !stderr(&again).contains("changed since the baseline"),
        "{}",
        stderr(&again)
    );
    let report: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("reports/gated/latest/report.json")).expect("json"),
    )
    .expect("json");
    assert_eq!(report["baseline"]["same_plan"], true);

    // The same policy name, now retrying up to 5 times: more attempts per request.
    write_plan(&dir, "gated.yaml", &plan(5));
    let worse = chaos(&dir, &path, &["--baseline", "b.json"]);
    assert_eq!(worse.status.code(), Some(1), "{}", stderr(&worse));
    let said = stderr(&worse);
    assert!(said.contains("REGRESSION edited / amplification"), "{said}");
    assert!(!said.contains("REGRESSION steady"), "{said}");
    assert!(said.contains("the plan or seed changed"), "{said}");
    let junit = std::fs::read_to_string(dir.join("reports/gated/latest/junit.xml")).expect("junit");
    assert!(junit.contains("gated.baseline.edited"), "{junit}");
    // What changed is said, and the regression reads first: in the summary (a column of
    // its own, the regressed policy on top) and in the comparison's table.
    assert!(
        said.contains("policy `edited` changed since the baseline: max_attempts 2 → 5"),
        "{said}"
    );
    let md = std::fs::read_to_string(dir.join("reports/gated/latest/report.md")).expect("md");
    let summary = md.split("## Summary").nth(1).expect("a summary");
    let (edited, steady) = (
        summary.find("\nedited ").expect("edited's row"),
        summary.find("\nsteady ").expect("steady's row"),
    );
    assert!(edited < steady, "the regressed policy first: {summary}");
    assert!(summary.contains("REGRESSED amplification"), "{summary}");
    let table = md
        .split("## Against baseline")
        .nth(1)
        .expect("the comparison");
    assert!(
        table.find("REGRESSED").expect("a regression") < table.find("| ok |").expect("an ok row"),
        "{table}"
    );

    // Offline: the worse run's report against the baseline, and the baseline against itself.
    let offline = harness()
        .current_dir(&dir)
        .args(["compare", "b.json", "reports/gated/latest/report.json"])
        .output()
        .expect("run harness");
    assert_eq!(offline.status.code(), Some(1), "{}", stderr(&offline));
    assert!(String::from_utf8_lossy(&offline.stdout).contains("| edited | amplification |"));
    let short = harness()
        .current_dir(&dir)
        .args([
            "compare",
            "--short",
            "b.json",
            "reports/gated/latest/report.json",
        ])
        .output()
        .expect("run harness");
    assert_eq!(short.status.code(), Some(1), "{}", stderr(&short));
    let printed = String::from_utf8_lossy(&short.stdout);
    assert!(printed.contains("| edited | amplification |"), "{printed}");
    assert!(
        !printed.contains("| ok |"),
        "only what is not fine: {printed}"
    );
    assert!(printed.contains("figures within tolerance"), "{printed}");
    let itself = harness()
        .current_dir(&dir)
        .args(["compare", "b.json", "b.json"])
        .output()
        .expect("run harness");
    assert_eq!(itself.status.code(), Some(0), "{}", stderr(&itself));

    // Only the policy asked for is judged: `edited` is not run, and not missing either.
    let one = chaos(&dir, &path, &["--policy", "steady", "--baseline", "b.json"]);
    assert_eq!(one.status.code(), Some(0), "{}", stderr(&one));
    assert!(
        stderr(&one)
            .contains("`edited` of the baseline not judged: this run did not run it (--policy)"),
        "{}",
        stderr(&one)
    );
}

#[test]
fn a_baseline_that_cannot_be_read_is_exit_2_before_the_run() {
    let dir = scratch("baseline-missing");
    let path = write_plan(&dir, "gated.yaml", &plan(2));
    let out = chaos(&dir, &path, &["--baseline", "nope.json"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("cannot read nope.json"),
        "{}",
        stderr(&out)
    );
    assert!(!dir.join("reports").exists(), "nothing ran");
}

/// A `chaos-baseline/v1` file with one policy whose success rate is `success_rate`.
fn crafted(success_rate: f64) -> String {
    format!(
        r#"{{
  "schema": "chaos-baseline/v1",
  "generated_at": "",
  "plan": {{ "name": "gated", "file": "gated.yaml", "seed": 4, "digest": "x" }},
  "tolerance": {{ "amplification": 0.05 }},
  "policies": [
    {{ "name": "steady", "offered": 200, "logical": 200, "succeeded": 190, "attempts": 250,
      "retries": 50, "dropped": 0, "amplification": 1.25, "server_amplification": 1.25,
      "peak_amplification": 1.5, "success_rate": {success_rate}, "p50_ms": 1.0, "p90_ms": 10.0,
      "p99_ms": 20.0, "p999_ms": 30.0, "recovery_s": null, "dropped_ratio": 0.0,
      "violations": 0 }}
  ]
}}
"#
    )
}

#[test]
fn a_baseline_with_a_figure_out_of_range_is_exit_2_naming_the_field() {
    let dir = scratch("baseline-invalid");
    std::fs::write(dir.join("good.json"), crafted(0.95)).expect("write");
    std::fs::write(dir.join("seven.json"), crafted(7.0)).expect("write");
    let compare = |a: &str, b: &str| {
        harness()
            .current_dir(&dir)
            .args(["compare", a, b])
            .output()
            .expect("run harness")
    };
    let good = compare("good.json", "good.json");
    assert_eq!(good.status.code(), Some(0), "{}", stderr(&good));
    let out = compare("seven.json", "good.json");
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let said = stderr(&out);
    assert!(
        said.contains("seven.json cannot be compared: policy `steady`: `success_rate` is 7.0: it must be a number from 0 to 1"),
        "{said}"
    );

    // `chaos --baseline` refuses it too, before the run.
    let path = write_plan(&dir, "gated.yaml", &plan(2));
    let out = chaos(&dir, &path, &["--baseline", "seven.json"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("`success_rate` is 7.0"),
        "{}",
        stderr(&out)
    );
    assert!(!dir.join("reports").exists(), "nothing ran");
}

/// A report.json is read as strictly as a baseline, as either side of `compare`: emptied
/// of its policies by hand, it would otherwise pass any comparison.
#[test]
fn a_hand_edited_report_json_is_checked_like_a_baseline() {
    let dir = scratch("baseline-report-json");
    std::fs::write(dir.join("good.json"), crafted(0.95)).expect("write");
    let path = write_plan(&dir, "gated.yaml", &plan(2));
    let ran = harness()
        .current_dir(&dir)
        .args(["simulate", "--quiet", "--out", "run"])
        .arg(&path)
        .output()
        .expect("run harness");
    assert_eq!(ran.status.code(), Some(0), "{}", stderr(&ran));
    let text = std::fs::read_to_string(dir.join("run/report.json")).expect("report.json");
    let mut report: serde_json::Value = serde_json::from_str(&text).expect("json");
    report["policies"] = serde_json::json!([]);
    std::fs::write(dir.join("empty.json"), report.to_string()).expect("write");
    for (a, b) in [("good.json", "empty.json"), ("empty.json", "good.json")] {
        let out = harness()
            .current_dir(&dir)
            .args(["compare", a, b])
            .output()
            .expect("run harness");
        assert_eq!(out.status.code(), Some(2), "{a} {b}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("empty.json cannot be compared"),
            "{}",
            stderr(&out)
        );
    }
}

/// `harness gate ARGS…` in `dir`.
fn gate(dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    harness()
        .current_dir(dir)
        .arg("gate")
        .args(args)
        .output()
        .expect("run harness")
}

/// One policy against a flaky dependency, with a bound on its own amplification: two
/// attempts stay under it, five do not.
fn bounded(attempts: u32) -> String {
    format!(
        r#"name: bounded
seed: 4
duration: 2s
drain: 1s
load: {{ rate: 100, arrivals: uniform, requests: [ {{ name: r, path: "/items/{{n}}" }} ] }}
faults:
  - {{ name: flaky, probability: 0.3, respond: {{ status: 503 }} }}
policies:
  - {{ name: client, max_attempts: {attempts}, backoff: {{ fixed: 10ms }} }}
gates:
  - {{ metric: amplification, max: 1.4 }}
baseline:
  tolerance:
    p50_ms: {{ ratio: 1, floor: 60000 }}
    p99_ms: {{ ratio: 1, floor: 60000 }}
"#
    )
}

#[test]
fn gate_names_each_failed_gate_with_its_figure_and_bound_and_each_regression() {
    let dir = scratch("gate-says-what-failed");
    std::fs::create_dir_all(dir.join("plans")).expect("mkdir");
    write_plan(&dir, "plans/bounded.yaml", &bounded(2));
    let saved = gate(
        &dir,
        &["--save", "--baselines", "base", "plans/bounded.yaml"],
    );
    assert_eq!(saved.status.code(), Some(0), "{}", stderr(&saved));
    assert!(dir.join("base/bounded.json").is_file());

    write_plan(&dir, "plans/bounded.yaml", &bounded(5));
    let worse = gate(&dir, &["--baselines", "base", "plans/bounded.yaml"]);
    assert_eq!(worse.status.code(), Some(1), "{}", stderr(&worse));
    let said = stderr(&worse);
    let failed = said
        .lines()
        .find(|l| l.starts_with("FAIL client / amplification"))
        .unwrap_or_else(|| panic!("the failed gate, named: {said}"));
    assert!(failed.contains("measured 1."), "its figure: {failed}");
    assert!(failed.contains("bound 1.4"), "its bound: {failed}");
    let regressed = said
        .lines()
        .find(|l| l.starts_with("REGRESSION client / amplification"))
        .unwrap_or_else(|| panic!("the regression, named: {said}"));
    for word in ["baseline ", "now ", "tolerance "] {
        assert!(regressed.contains(word), "{word}in {regressed}");
    }
    let verdict = String::from_utf8_lossy(&worse.stdout);
    let line = verdict
        .lines()
        .find(|l| l.starts_with("bounded: "))
        .unwrap_or_else(|| panic!("the plan's verdict: {verdict}"));
    assert!(
        line.contains("FAIL: gates failed: client / amplification")
            && line.contains("regressed: client / amplification")
            && line.contains("(exit 1)"),
        "{line}"
    );
}

#[test]
fn gate_save_refuses_a_run_that_failed_a_gate_unless_forced() {
    let dir = scratch("gate-save-refuses");
    write_plan(&dir, "bounded.yaml", &bounded(5));
    let refused = gate(&dir, &["--save", "--baselines", "base", "bounded.yaml"]);
    assert_eq!(refused.status.code(), Some(1), "{}", stderr(&refused));
    let said = stderr(&refused);
    assert!(
        said.contains("error: not saving base/bounded.json: the run failed a gate"),
        "{said}"
    );
    assert!(
        said.contains("harness gate --save --force --baselines base bounded.yaml"),
        "the command that saves it all the same: {said}"
    );
    assert!(!dir.join("base/bounded.json").exists(), "nothing saved");
    assert!(
        dir.join("reports/gate/bounded/report.html").is_file(),
        "the report to look at"
    );

    let forced = gate(
        &dir,
        &["--save", "--force", "--baselines", "base", "bounded.yaml"],
    );
    // Saved, and still the failing run it is: exit 1.
    assert_eq!(forced.status.code(), Some(1), "{}", stderr(&forced));
    assert!(
        stderr(&forced)
            .contains("warning: saving base/bounded.json from a run that failed a gate (--force)"),
        "{}",
        stderr(&forced)
    );
    assert!(dir.join("base/bounded.json").is_file());

    // --force alone is a command line error: there is nothing to force.
    let alone = gate(&dir, &["--force", "--baselines", "base", "bounded.yaml"]);
    assert_eq!(alone.status.code(), Some(2), "{}", stderr(&alone));
}
