//! `harness tune` and `harness export`, as a user runs them: the real binary, a plan with
//! an embedded fault-server on 127.0.0.1 port 0, the choice confirmed live, exported, and
//! the exported file imported back into a plan and simulated.

#![allow(clippy::unwrap_used)] // Tests: a panic is the failure report.

mod common;

use std::path::Path;

use serde_json::Value;

/// One second of a brownout: every attempt fails with 503 at 40%. A retry budget's ratio
/// trades server load against the success rate the gate asks for.
const PLAN: &str = r#"
name: tune-test
seed: 5
duration: 1s
drain: 1s
load:
  rate: 200
  requests: [ { name: read, path: "/items/{n}" } ]
faults:
  - name: brownout
    probability: 0.4
    respond: [ { status: 503 } ]
policies:
  - name: p
    max_attempts: 2
    attempt_timeout: 500ms
    backoff: { exponential: { base: 5ms, multiplier: 2, cap: 20ms } }
    budget: { ratio: 0.9, min_per_sec: 0, ttl: 10s }
gates:
  - no_retry_of_permanent
  - client_server_agree
  - { metric: success_rate, min: 0.7 }
"#;

fn json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn tune_chooses_confirms_live_and_exports_a_config_that_imports_back_to_the_same_figures() {
    let dir = common::scratch("tune-cli");
    let plan = common::write_plan(&dir, "brownout.yaml", PLAN);
    let out = dir.join("tuned");
    let run = common::harness()
        .current_dir(&dir)
        .args(["tune", "--quiet"])
        .arg(&plan)
        .args([
            "--policy",
            "p",
            "--vary",
            "budget.ratio=0.1..0.9",
            "--vary",
            "max_attempts=2..3",
            "--budget",
            "16",
            "--confirm",
            "1",
            "--export",
            "grpc-service-config",
            "--out",
        ])
        .arg(&out)
        .output()
        .expect("run harness");
    assert_eq!(run.status.code(), Some(0), "{}", common::stderr(&run));
    let tune = json(&out.join("tune.json"));
    assert_eq!(tune["schema"], "chaos-tune/v1");
    assert!(tune["ran"].as_u64().unwrap() <= 16);
    let chosen = &tune["candidates"][tune["chosen"].as_u64().unwrap() as usize];
    // The least load that passes: 1 + 0.4 x ratio attempts per request, success
    // 0.6 + 0.4 x 0.6... the gate of 0.7 needs a ratio of about 0.42 or more.
    assert_eq!(chosen["figures"]["qualifies"], true);
    let live = &chosen["live"];
    assert_eq!(live["figures"]["qualifies"], true, "{live}");
    assert!(out.join(live["report"].as_str().unwrap()).exists());
    // Every candidate with less load than the choice fails a gate.
    let load = chosen["figures"]["server_load"].as_f64().unwrap();
    for c in tune["candidates"].as_array().unwrap() {
        if c["figures"]["server_load"].as_f64().unwrap() < load - 1e-9 {
            assert_eq!(c["figures"]["qualifies"], false, "{c}");
        }
    }
    // The current settings (ratio 0.9) pass too, at more load than the choice.
    assert_eq!(tune["current"]["figures"]["qualifies"], true);
    assert!(tune["current"]["figures"]["server_load"].as_f64().unwrap() > load);
    let html = std::fs::read_to_string(out.join("tune.html")).unwrap();
    assert!(html.contains("Server load against success rate") && html.contains("current settings"));

    // The exported config, imported back by a plan, runs the figures tune.json says it
    // runs, in the simulator.
    let exported = out.join("export/grpc.json");
    let imported = PLAN
        .replace("name: tune-test", "name: tune-imported")
        .replace(
            "  - name: p\n    max_attempts: 2\n    attempt_timeout: 500ms\n    backoff: { exponential: { base: 5ms, multiplier: 2, cap: 20ms } }\n    budget: { ratio: 0.9, min_per_sec: 0, ttl: 10s }\n",
            &format!(
                "  - name: p\n    import: {{ grpc_service_config: {}, service: any.Service }}\n",
                exported.display()
            ),
        );
    assert!(imported.contains("import:"));
    let plan2 = common::write_plan(&dir, "imported.yaml", &imported);
    let sim = dir.join("imported-sim");
    let run = common::harness()
        .args(["simulate", "--quiet"])
        .arg(&plan2)
        .arg("--out")
        .arg(&sim)
        .output()
        .expect("run harness");
    assert!(
        matches!(run.status.code(), Some(0 | 1)),
        "{}",
        common::stderr(&run)
    );
    let report = json(&sim.join("report.json"));
    let p = &report["policies"][0];
    let said = &tune["export"]["simulated"]["figures"];
    assert_eq!(p["amplification"]["server"], said["server_load"]);
    assert_eq!(p["success_rate"], said["success_rate"]);
    assert_eq!(p["latency_ms"]["p99"], said["p99_ms"]);

    // `harness export` with the choice's settings writes the same file.
    let mut export = common::harness();
    export.arg("export").arg(&plan).args(["--policy", "p"]);
    for kv in chosen["settings"].as_array().unwrap() {
        export.arg("--set").arg(format!(
            "{}={}",
            kv["key"].as_str().unwrap(),
            kv["value"].as_str().unwrap()
        ));
    }
    let run = export
        .args(["--format", "grpc-service-config"])
        .output()
        .expect("run harness");
    assert_eq!(run.status.code(), Some(0), "{}", common::stderr(&run));
    assert_eq!(
        String::from_utf8_lossy(&run.stdout),
        std::fs::read_to_string(&exported).unwrap()
    );
}

#[test]
fn tune_and_export_refuse_what_they_cannot_do_with_a_reason() {
    let dir = common::scratch("tune-refusals");
    let plan = common::write_plan(&dir, "brownout.yaml", PLAN);
    let cases: [(&[&str], &str); 5] = [
        (
            &["tune", "--policy", "nope", "--vary", "max_attempts=2..3"],
            "no such policy",
        ),
        (
            &["tune", "--policy", "p", "--vary", "max_attempts=5..2"],
            "runs backwards",
        ),
        (
            &["tune", "--policy", "p", "--vary", "load.rate=1..2"],
            "a key of the plan",
        ),
        (
            &[
                "tune",
                "--policy",
                "p",
                "--vary",
                "budget.ratio=0..1",
                "--vary",
                "attempt_timeout=10ms..1s",
                "--budget",
                "3",
            ],
            "raise --budget",
        ),
        (
            &["export", "--policy", "nope", "--format", "envoy-route"],
            "no policy named `nope`",
        ),
    ];
    for (args, says) in cases {
        let run = common::harness()
            .current_dir(&dir)
            .args(&args[..1])
            .arg(&plan)
            .args(&args[1..])
            .output()
            .expect("run harness");
        assert_eq!(
            run.status.code(),
            Some(2),
            "{args:?}: {}",
            common::stderr(&run)
        );
        assert!(
            common::stderr(&run).contains(says),
            "{args:?}: {}",
            common::stderr(&run)
        );
    }
}

#[test]
fn an_envoy_export_is_two_files_and_says_what_envoy_cannot() {
    let dir = common::scratch("export-envoy");
    let outage = common::repo().join("plans/outage.yaml");
    let run = common::harness()
        .arg("export")
        .arg(&outage)
        .args([
            "--policy",
            "jittered-budget",
            "--format",
            "envoy-route",
            "--out",
        ])
        .arg(&dir)
        .output()
        .expect("run harness");
    assert_eq!(run.status.code(), Some(0), "{}", common::stderr(&run));
    let route: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(dir.join("route.yaml")).unwrap()).unwrap();
    assert_eq!(route["route"]["retry_policy"]["num_retries"], 3);
    let cluster: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(dir.join("cluster.yaml")).unwrap()).unwrap();
    assert_eq!(
        cluster["circuit_breakers"]["thresholds"][0]["retry_budget"]["budget_percent"]["value"],
        10.0
    );
    let said = common::stderr(&run);
    for needle in ["`backoff`", "full jitter", "`breaker`", "`budget`"] {
        assert!(said.contains(needle), "{needle}: {said}");
    }
}

#[test]
fn a_tune_stopped_before_it_starts_says_so_and_panics_nowhere() {
    let dir = common::scratch("tune-stopped");
    let plan = common::write_plan(&dir, "brownout.yaml", PLAN);
    let stop = tokio_util::sync::CancellationToken::new();
    stop.cancel();
    let request = harness::tune::Request {
        plan,
        policy: "p".into(),
        vary: vec!["budget.ratio=0.1..0.9".into()],
        budget: 8,
        seed: None,
    };
    let got = harness::tune::simulate(&request, &stop, |_| {});
    assert!(
        matches!(got, Err(harness::tune::TuneError::Interrupted)),
        "{:?}",
        got.map(|t| t.table.ran)
    );
}
