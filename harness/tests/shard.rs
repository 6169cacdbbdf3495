//! Sharded runs, end to end: shard processes of the real binary against one standalone
//! fault-server (started here on 127.0.0.1:0), their partial reports merged by
//! `harness merge`, against the unsharded run of the same plan and seed on the same server.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{harness, scratch, stderr, write_plan};
use serde_json::Value;

/// A fault-server of its own, on a runtime that lives as long as the test.
struct Server {
    url: String,
    _handle: fault_server::ServerHandle,
    _runtime: tokio::runtime::Runtime,
}

fn server() -> Server {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a runtime");
    let handle = runtime
        .block_on(fault_server::start(fault_server::ServerConfig::default()))
        .expect("a fault-server");
    Server {
        url: handle.url(),
        _handle: handle,
        _runtime: runtime,
    }
}

/// A common start this far ahead, as Unix seconds: room for the processes to start.
fn start_in(ahead: Duration) -> String {
    let at = SystemTime::now() + ahead;
    format!(
        "{:.3}",
        at.duration_since(UNIX_EPOCH)
            .expect("after 1970")
            .as_secs_f64()
    )
}

fn chaos(dir: &Path, plan: &Path, url: &str) -> Command {
    let mut c = harness();
    c.current_dir(dir)
        .args(["chaos", "--quiet", "--target", url])
        .arg(plan);
    c
}

/// N shard processes at once; their partial reports' paths.
fn run_shards(dir: &Path, plan: &Path, url: &str, n: u32) -> Vec<PathBuf> {
    let start = start_in(Duration::from_secs(3));
    let children: Vec<_> = (0..n)
        .map(|i| {
            let partial = dir.join(format!("partial-{i}.json"));
            let child = chaos(dir, plan, url)
                .args(["--shard", &format!("{i}/{n}"), "--start-at", &start])
                .arg("--partial")
                .arg(&partial)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("start a shard");
            (partial, child)
        })
        .collect();
    children
        .into_iter()
        .map(|(partial, child)| {
            let out = child.wait_with_output().expect("a shard ends");
            assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
            partial
        })
        .collect()
}

fn report(dir: &Path) -> Value {
    let text = std::fs::read_to_string(dir.join("report.json")).expect("a report");
    serde_json::from_str(&text).expect("JSON")
}

fn merge(dir: &Path, partials: &[PathBuf], extra: &[&str]) -> (Output, PathBuf) {
    let out_dir = dir.join("merged");
    let out = harness()
        .current_dir(dir)
        .args(["merge", "--quiet", "--out"])
        .arg(&out_dir)
        .args(extra)
        .args(partials)
        .output()
        .expect("run merge");
    (out, out_dir)
}

fn unsharded(dir: &Path, plan: &Path, url: &str) -> (Output, Value) {
    let out_dir = dir.join("single");
    let out = chaos(dir, plan, url)
        .arg("--out")
        .arg(&out_dir)
        .output()
        .expect("run unsharded");
    (out, report(&out_dir))
}

fn policy<'a>(r: &'a Value, name: &str) -> &'a Value {
    r["policies"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["name"] == name))
        .unwrap_or_else(|| panic!("no policy {name} in {r}"))
}

/// What must agree exactly between the sharded and the unsharded run.
fn counts(p: &Value) -> Vec<(String, Value)> {
    [
        "offered",
        "logical",
        "attempts",
        "retries",
        "succeeded",
        "failed",
    ]
    .iter()
    .map(|k| (k.to_string(), p[k].clone()))
    .chain(
        [
            "attempts",
            "logical",
            "side_effects",
            "duplicate_side_effects",
        ]
        .iter()
        .map(|k| (format!("ledger.{k}"), p["ledger"][k].clone())),
    )
    .collect()
}

const FAULTLESS: &str = "name: even
seed: 11
duration: 1s
drain: 1s
load:
  rate: 300
  arrivals: poisson
  requests:
    - { name: read, method: GET, path: \"/items/{n}\", weight: 3 }
    - { name: pay, method: POST, path: /payments, weight: 1, idempotency_key: true }
policies:
  - { name: plain, max_attempts: 3, attempt_timeout: 1s, backoff: { fixed: 10ms } }
gates:
  - client_server_agree
  - no_duplicate_side_effects
";

#[test]
fn faultless_shards_add_up_to_the_unsharded_run_exactly() {
    let dir = scratch("shard-faultless");
    let plan = write_plan(&dir, "even.yaml", FAULTLESS);
    let server = server();
    let partials = run_shards(&dir, &plan, &server.url, 3);
    let (out, merged_dir) = merge(&dir, &partials, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let merged = report(&merged_dir);
    let (single_out, single) = unsharded(&dir, &plan, &server.url);
    assert_eq!(single_out.status.code(), Some(0), "{}", stderr(&single_out));
    let (m, s) = (policy(&merged, "plain"), policy(&single, "plain"));
    assert_eq!(counts(m), counts(s));
    assert!(m["logical"].as_u64() > Some(200), "{m}");
    assert_eq!(merged["shards"]["count"], 3);
    assert_eq!(merged["shards"]["reported"], serde_json::json!([0, 1, 2]));
    assert_eq!(merged["schema"], single["schema"]);

    // Every shard sent its stripe: a third of the arrivals each, give or take one.
    let logical: Vec<u64> = partials
        .iter()
        .map(|p| {
            let v: Value =
                serde_json::from_str(&std::fs::read_to_string(p).expect("read")).expect("JSON");
            v["policies"][0]["recorder"]["logical"]
                .as_u64()
                .expect("a count")
        })
        .collect();
    assert_eq!(Some(logical.iter().sum::<u64>()), m["logical"].as_u64());
    assert!(logical.iter().max().unwrap_or(&0) - logical.iter().min().unwrap_or(&0) <= 1);

    // A shard missing: INCOMPLETE, exit 3, naming it.
    let (out, dir_of) = merge(&dir, &partials[..2], &[]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let incomplete = report(&dir_of);
    let error = incomplete["error"].as_str().unwrap_or_default();
    assert!(error.contains("shard 2/3 never reported"), "{error}");
    // The same shard twice, or another plan's partial: not one run (exit 2).
    let (out, _) = merge(&dir, &[partials[0].clone(), partials[0].clone()], &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("are both shard 0/3"),
        "{}",
        stderr(&out)
    );
    let other = write_plan(
        &dir,
        "other.yaml",
        &FAULTLESS.replace("seed: 11", "seed: 12"),
    );
    let other = other.display().to_string();
    let (out, _) = merge(&dir, &partials, &["--plan", &other]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("the plan or its seed changed"),
        "{}",
        stderr(&out)
    );
}

/// Faults decided per request (each attempt's draw is seeded by its request id and
/// attempt number), and a policy with no state shared between requests: every logical
/// request meets the same fate on whichever shard it runs.
const FAULTED: &str = "name: flaky
seed: 5
duration: 1s
drain: 1s
load:
  rate: 300
  arrivals: uniform
  requests:
    - { name: read, method: GET, path: \"/items/{n}\", weight: 3 }
    - { name: pay, method: POST, path: /payments, weight: 1, idempotency_key: true }
faults:
  - name: flaky
    probability: 0.3
    respond:
      - { status: 503, weight: 3 }
      - { fault: reset }
      - { status: 400 }
policies:
  - { name: retrying, max_attempts: 3, attempt_timeout: 1s, backoff: { exponential: { base: 5ms, cap: 40ms }, jitter: full } }
gates:
  - client_server_agree
  - no_retry_of_permanent
  - { metric: amplification, max: 1.05 }   # fails: the faults cost more than that
";

#[test]
fn faulted_shards_match_the_unsharded_run_and_a_gate_fails_once_on_the_merge() {
    let dir = scratch("shard-faulted");
    let plan = write_plan(&dir, "flaky.yaml", FAULTED);
    let server = server();
    let partials = run_shards(&dir, &plan, &server.url, 4);
    let (out, merged_dir) = merge(&dir, &partials, &[]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "the amplification gate fails: {}",
        stderr(&out)
    );
    let merged = report(&merged_dir);
    let (single_out, single) = unsharded(&dir, &plan, &server.url);
    assert_eq!(single_out.status.code(), Some(1), "{}", stderr(&single_out));
    let (m, s) = (policy(&merged, "retrying"), policy(&single, "retrying"));
    assert_eq!(counts(m), counts(s));
    assert_eq!(m["give_ups"], s["give_ups"]);
    assert!(m["retries"].as_u64() > Some(30), "{m}");
    let failed: Vec<&str> = m["gates"]
        .as_array()
        .expect("gates")
        .iter()
        .filter(|g| g["pass"] == false)
        .filter_map(|g| g["name"].as_str())
        .collect();
    assert_eq!(failed, ["amplification <= 1.05"], "{m}");

    // The merged latency histogram is the sum of the shards' histograms.
    let mut sum = None::<hdrhistogram::Histogram<u64>>;
    for p in &partials {
        let v: Value =
            serde_json::from_str(&std::fs::read_to_string(p).expect("read")).expect("JSON");
        let h = harness::stats::decode_histogram(
            "latency",
            v["policies"][0]["recorder"]["latency"]
                .as_str()
                .expect("a histogram"),
        )
        .expect("V2");
        match &mut sum {
            None => sum = Some(h),
            Some(s) => s.add(&h).expect("same bounds"),
        }
    }
    let sum = sum.expect("four shards");
    assert_eq!(Some(sum.len()), m["logical"].as_u64());
    for (q, key) in [(0.5, "p50"), (0.99, "p99"), (0.999, "p999")] {
        let want = sum.value_at_quantile(q) as f64 / 1000.0;
        assert_eq!(m["latency_ms"][key].as_f64(), Some(want), "{key}");
    }
    assert_eq!(
        m["latency_ms"]["max"].as_f64(),
        Some(sum.max() as f64 / 1000.0)
    );
}

#[test]
fn a_shard_refuses_what_cannot_be_sharded_and_says_why() {
    let dir = scratch("shard-refusals");
    let plan = write_plan(&dir, "even.yaml", FAULTLESS);
    // Embedded: each shard would have its own fault-server.
    let out = harness()
        .current_dir(&dir)
        .args([
            "chaos",
            "--shard",
            "0/2",
            "--start-at",
            "2026-12-07T08:00:00Z",
        ])
        .arg(&plan)
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("--target http://127.0.0.1:8080"),
        "{}",
        stderr(&out)
    );
    let server = server();
    // No common start for two shards.
    let out = chaos(&dir, &plan, &server.url)
        .args(["--shard", "1/2"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("common start"), "{}", stderr(&out));
    for bad in ["2/2", "x"] {
        let out = chaos(&dir, &plan, &server.url)
            .args(["--shard", bad])
            .output()
            .expect("run");
        assert_eq!(out.status.code(), Some(2), "{bad}");
    }
    // A shard is not judged alone.
    let out = chaos(&dir, &plan, &server.url)
        .args(["--shard", "0/1", "--save-baseline", "x.json"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("judged once"), "{}", stderr(&out));
    // A target off loopback.
    let out = chaos(&dir, &plan, "http://192.0.2.1:8080")
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    // Late for the common start: the partial says so, exit 3, and the merge is INCOMPLETE.
    let past = SystemTime::now() - Duration::from_secs(30);
    let past = format!(
        "{}",
        past.duration_since(UNIX_EPOCH)
            .expect("after 1970")
            .as_secs()
    );
    let out = chaos(&dir, &plan, &server.url)
        .args(["--shard", "0/1", "--start-at", &past, "--partial", "-"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(stderr(&out).contains("late"), "{}", stderr(&out));
    let log = dir.join("late.log");
    std::fs::write(&log, &out.stdout).expect("write the log");
    let (out, merged) = merge(&dir, &[log], &[]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(
        report(&merged)["error"]
            .as_str()
            .is_some_and(|e| e.contains("late")),
        "{}",
        stderr(&out)
    );
}
