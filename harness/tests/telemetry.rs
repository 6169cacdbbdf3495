//! Traces and metrics, end to end: the real binary exports to a real OTLP/HTTP receiver in
//! this process, which decodes the protobuf as a collector would, and what arrived is
//! checked against the run's own report.

mod common;
#[path = "common/otlp.rs"]
mod otlp;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Output;

use common::{harness, scratch, stderr, write_plan};
use otlp::{Got, Receiver};
use serde_json::Value;

// span kinds in OTLP's protobuf
const INTERNAL: i32 = 1;
const SERVER: i32 = 2;
const CLIENT: i32 = 3;

/// Reads, a bad request that stays bad (400), a POST whose side effect may run before its
/// connection is reset; a careful policy and a careless one that retries everything.
fn plan(sampling: &str) -> String {
    format!(
        r#"
name: traced
seed: 5
duration: 2s
drain: 2s
load:
  rate: 40
  arrivals: uniform
  requests:
    - {{ name: read, method: GET, path: "/items/{{n}}", weight: 3 }}
    - {{ name: bad, method: GET, path: /bad, weight: 1 }}
    - {{ name: pay, method: POST, path: /pay, weight: 1 }}
faults:
  - {{ name: invalid, match: {{ path: /bad }}, respond: {{ status: 400 }} }}
  - name: flaky
    probability: 0.4
    respond:
      - {{ status: 503, weight: 2 }}
      - {{ fault: reset, processed: true }}
policies:
  - {{ name: careful, max_attempts: 3, backoff: {{ fixed: 10ms }} }}
  - {{ name: careless, max_attempts: 2, backoff: {{ fixed: 10ms }}, retry_on: [any], retry_non_idempotent: true }}
gates: [ no_retry_of_permanent ]
{sampling}
"#
    )
}

/// Runs the plan with `--otlp` pointed at `endpoint` (on a blocking thread: the receiver
/// serves on this runtime meanwhile) and returns the exit and the report.
async fn chaos(dir: &Path, text: &str, endpoint: Option<String>) -> (Output, Value) {
    let plan = write_plan(dir, "traced.yaml", text);
    let out_dir = dir.join(if endpoint.is_some() {
        "with"
    } else {
        "without"
    });
    let out = {
        let out_dir = out_dir.clone();
        tokio::task::spawn_blocking(move || {
            let mut command = harness();
            command
                .args(["chaos", "--quiet"])
                .arg(&plan)
                .arg("--out")
                .arg(&out_dir)
                // The test's own settings only: a developer's OTEL_* must not leak in.
                .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
                .env_remove("OTEL_TRACES_SAMPLER_ARG")
                .env_remove("OTEL_TRACES_SAMPLER")
                .env_remove("OTEL_SDK_DISABLED")
                .env("OTEL_METRIC_EXPORT_INTERVAL", "500");
            if let Some(endpoint) = endpoint {
                command.arg("--otlp").arg(endpoint);
            }
            command.output().expect("run harness")
        })
        .await
        .expect("the run's thread")
    };
    let report = std::fs::read_to_string(out_dir.join("report.json"))
        .unwrap_or_else(|e| panic!("no report.json ({e}): {}", stderr(&out)));
    (
        out,
        serde_json::from_str(&report).expect("report.json parses"),
    )
}

fn policy<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["policies"]
        .as_array()
        .expect("policies")
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("no policy {name}"))
}

fn count(report: &Value, name: &str, field: &str) -> u64 {
    policy(report, name)[field].as_u64().expect(field)
}

fn of<'a>(spans: &'a [Got], kind: i32, policy: &str) -> Vec<&'a Got> {
    spans
        .iter()
        .filter(|s| s.kind() == kind && s.str("chaos.policy") == Some(policy))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_logical_request_is_one_trace_with_its_attempts_and_the_servers_spans() {
    let receiver = Receiver::start().await;
    let dir = scratch("telemetry-full");
    let (out, report) = chaos(&dir, &plan(""), Some(receiver.endpoint())).await;
    assert_eq!(
        out.status.code(),
        Some(1),
        "the careless policy fails its gates: {}",
        stderr(&out)
    );
    let spans = receiver.spans();

    // Every span and metric names the run, as the report does.
    let run_id = report["run_id"].as_str().expect("the report's run id");
    assert_eq!(run_id.len(), "20261204T233015Z-3fa9c2d1".len(), "{run_id}");
    let resources = receiver.resources();
    let services: BTreeSet<&str> = resources
        .iter()
        .map(|r| r.get("service.name").map_or("", String::as_str))
        .collect();
    assert!(
        services.contains("fault-server") && services.contains("chaos-harness"),
        "{services:?}"
    );
    for resource in &resources {
        assert_eq!(
            resource.get("chaos.run.id").map(String::as_str),
            Some(run_id),
            "{resource:?}"
        );
        assert_eq!(
            resource.get("chaos.plan").map(String::as_str),
            Some(report["plan"]["name"].as_str().unwrap_or("?")),
            "{resource:?}"
        );
        assert!(resource.contains_key("chaos.seed"), "{resource:?}");
    }

    for name in ["careful", "careless"] {
        let logical = count(&report, name, "logical");
        let attempts = count(&report, name, "attempts");
        let roots = of(&spans, INTERNAL, name);
        let clients = of(&spans, CLIENT, name);
        let servers = of(&spans, SERVER, name);
        assert_eq!(
            roots.len() as u64,
            logical,
            "{name}: one INTERNAL span per logical request"
        );
        let traces: BTreeSet<&[u8]> = roots.iter().map(|s| s.span.trace_id.as_slice()).collect();
        assert_eq!(
            traces.len() as u64,
            logical,
            "{name}: each in a trace of its own"
        );
        assert!(roots.iter().all(|s| s.service == "chaos-harness"));
        assert_eq!(
            clients.len() as u64,
            attempts,
            "{name}: CLIENT spans = the report's attempts"
        );

        // Every attempt hangs off its logical request and numbers its resends.
        let root_of: BTreeMap<&[u8], &Got> = roots
            .iter()
            .map(|s| (s.span.trace_id.as_slice(), *s))
            .collect();
        for c in &clients {
            let root = root_of[c.span.trace_id.as_slice()];
            assert_eq!(
                c.span.parent_span_id, root.span.span_id,
                "{name}: attempt under its request"
            );
            let n = c.int("chaos.attempt").expect("chaos.attempt");
            let resend = c.int("http.request.resend_count");
            assert_eq!(
                resend,
                (n > 1).then_some(n - 1),
                "{name}: resend_count of attempt {n}"
            );
            assert!(
                c.span.name == "GET /items/{n}"
                    || c.span.name == "GET /bad"
                    || c.span.name == "POST /pay",
                "named by method and route, never the raw path: {}",
                c.span.name
            );
            assert!(
                c.str("url.full")
                    .is_some_and(|u| u.starts_with("http://127.0.0.1:"))
            );
            assert_eq!(c.str("server.address"), Some("127.0.0.1"));
        }
        let retries = clients
            .iter()
            .filter(|c| c.int("http.request.resend_count").is_some())
            .count();
        assert_eq!(retries as u64, count(&report, name, "retries"));

        // The fault-server's spans: one per attempt it received, in the trace of the attempt
        // that sent it, beneath that attempt's span.
        let ledger = policy(&report, name)["ledger"]["attempts"]
            .as_u64()
            .expect("ledger");
        assert_eq!(
            servers.len() as u64,
            ledger,
            "{name}: SERVER spans = the ledger's attempts"
        );
        let client_ids: BTreeSet<(&[u8], &[u8])> = clients
            .iter()
            .map(|c| (c.span.trace_id.as_slice(), c.span.span_id.as_slice()))
            .collect();
        for s in &servers {
            assert_eq!(s.service, "fault-server");
            assert!(
                client_ids
                    .contains(&(s.span.trace_id.as_slice(), s.span.parent_span_id.as_slice())),
                "{name}: a SERVER span whose parent is no attempt"
            );
        }
        // What the server decided is on its spans.
        assert!(
            servers
                .iter()
                .any(|s| s.str("chaos.fault.phase") == Some("invalid"))
        );
        assert!(
            servers
                .iter()
                .any(|s| s.str("chaos.side_effect") == Some("ran"))
        );
    }
    // The policy's decisions are events on the logical request.
    let events: BTreeSet<&str> = spans
        .iter()
        .filter(|s| s.kind() == INTERNAL)
        .flat_map(|s| s.span.events.iter().map(|e| e.name.as_str()))
        .collect();
    for expected in [
        "backoff",
        "retry refused: permanent outcome",
        "retry refused: not idempotent",
    ] {
        assert!(
            events.contains(expected),
            "no `{expected}` event in {events:?}"
        );
    }
    // Duplicates the careless policy caused are on the server's spans too.
    let duplicates = policy(&report, "careless")["violations"]["duplicate_side_effects"]
        .as_u64()
        .expect("duplicates");
    let marked = of(&spans, SERVER, "careless")
        .iter()
        .filter(|s| s.str("chaos.side_effect") == Some("duplicate"))
        .count();
    assert_eq!(marked as u64, duplicates);

    // Nothing lost, and the report says so.
    let telemetry = &report["telemetry"];
    assert_eq!(telemetry["spans_dropped"], 0, "{telemetry}");
    assert_eq!(
        telemetry["spans_exported"].as_u64(),
        Some(spans.len() as u64)
    );
    assert_eq!(telemetry["sampling_ratio"], 1.0);

    // Metrics: the names the docs list, with the report's totals.
    let metrics = receiver.metrics();
    let total = |metric: &str, policy: &str| -> f64 {
        metrics
            .get(metric)
            .unwrap_or_else(|| panic!("no metric {metric} in {:?}", metrics.keys()))
            .iter()
            .filter(|(attrs, _)| {
                attrs
                    .split(',')
                    .any(|a| a == format!("chaos.policy={policy}"))
            })
            .map(|(_, v)| v)
            .sum()
    };
    for name in ["careful", "careless"] {
        let p = policy(&report, name);
        let n = |f: &str| p[f].as_u64().expect(f);
        // Counts arrive as exact integers in doubles.
        let whole = |v: f64| v.round() as u64;
        assert_eq!(
            whole(total("chaos.attempts", name)),
            n("attempts"),
            "{name}"
        );
        assert_eq!(whole(total("chaos.retries", name)), n("retries"), "{name}");
        assert_eq!(
            whole(total("http.client.request.duration", name)),
            n("attempts"),
            "{name}"
        );
        assert_eq!(
            whole(total("chaos.requests.offered", name)),
            n("offered"),
            "{name}"
        );
        let succeeded = metrics["chaos.requests"]
            .iter()
            .filter(|(a, _)| {
                a.contains(&format!("chaos.policy={name}")) && a.contains("chaos.verdict=succeeded")
            })
            .map(|(_, v)| v)
            .sum::<f64>();
        assert_eq!(whole(succeeded), n("succeeded"), "{name}");
        let retries = n("retries") as f64;
        if retries > 0.0 {
            let expected = n("retries_succeeded") as f64 / retries;
            assert!((total("chaos.retry.success_ratio", name) - expected).abs() < 1e-9);
            assert!(
                (total("chaos.retry.ratio", name) - retries / n("attempts") as f64).abs() < 1e-9
            );
        }
    }
    assert!(metrics.contains_key("chaos.budget.exhausted"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_a_ratio_of_zero_only_the_requests_that_broke_an_invariant_are_exported_whole() {
    let receiver = Receiver::start().await;
    let dir = scratch("telemetry-forced");
    let (out, report) = chaos(
        &dir,
        &plan("telemetry: { sampling_ratio: 0 }"),
        Some(receiver.endpoint()),
    )
    .await;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let spans = receiver.spans();
    assert!(
        of(&spans, INTERNAL, "careful").is_empty(),
        "the careful policy broke nothing"
    );
    let roots = of(&spans, INTERNAL, "careless");
    let violations = &policy(&report, "careless")["violations"];
    // Two attempts at most: each violating request committed exactly one violating retry.
    let expected = violations["retried_permanent"].as_u64().expect("permanent")
        + violations["retried_non_idempotent"]
            .as_u64()
            .expect("non-idempotent");
    assert!(
        expected > 0,
        "the plan makes the careless policy break invariants"
    );
    assert_eq!(
        roots.len() as u64,
        expected,
        "every violator, and only them"
    );
    for root in &roots {
        assert!(
            root.str("chaos.violation").is_some(),
            "says why it was exported"
        );
        assert_eq!(root.attr("chaos.sampled"), Some(&otlp_bool(false)));
        let trace = root.span.trace_id.as_slice();
        let in_trace = |kind| {
            spans
                .iter()
                .filter(|s| s.kind() == kind && s.span.trace_id == trace)
                .count()
        };
        // The whole request: both attempts, and the server's side of each (the first one
        // held by the server until the second arrived marked sampled).
        assert_eq!(in_trace(CLIENT), 2);
        assert_eq!(in_trace(SERVER), 2, "the server's spans of every attempt");
    }
    assert_eq!(
        report["telemetry"]["traces_forced"].as_u64(),
        Some(expected)
    );
}

fn otlp_bool(b: bool) -> opentelemetry_proto::tonic::common::v1::any_value::Value {
    opentelemetry_proto::tonic::common::v1::any_value::Value::BoolValue(b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_that_is_not_there_changes_nothing_but_one_warning() {
    // A port that was just free: nothing listens there.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().expect("addr")
    };
    let dir = scratch("telemetry-closed");
    let (without, plain) = chaos(&dir, &plan(""), None).await;
    let (with, traced) = chaos(&dir, &plan(""), Some(format!("http://{closed}"))).await;
    assert_eq!(with.status.code(), without.status.code());
    assert!(
        plain.get("telemetry").is_none(),
        "no telemetry unless asked"
    );
    for name in ["careful", "careless"] {
        for field in ["offered", "logical", "succeeded", "attempts", "retries"] {
            assert_eq!(
                policy(&traced, name)[field],
                policy(&plain, name)[field],
                "{name}.{field} changed with a dead collector"
            );
        }
    }
    let warnings = stderr(&with).matches("cannot export telemetry").count();
    assert_eq!(
        warnings,
        1,
        "one warning, not one per batch: {}",
        stderr(&with)
    );
    let telemetry = &traced["telemetry"];
    assert_eq!(telemetry["spans_exported"], 0);
    assert!(
        telemetry["spans_dropped"].as_u64().expect("dropped") > 0,
        "the loss is counted"
    );
}

/// Behind a relay tier the trace goes on through it: the tier's SERVER span under the
/// client's attempt, its own CLIENT spans under that, and the fault-server's under those.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trace_goes_through_every_hop_of_a_chain() {
    let receiver = Receiver::start().await;
    let dir = scratch("telemetry-chain");
    let plan = r#"
name: traced-chain
seed: 5
duration: 1s
drain: 3s
tiers: [api]
load:
  rate: 30
  arrivals: uniform
  requests: [ { name: read, method: GET, path: "/items/{n}" } ]
faults:
  - { name: flaky, probability: 0.5, respond: { status: 503 } }
policies:
  - { name: both, max_attempts: 2, backoff: none, tiers: { api: same } }
"#;
    let (out, report) = chaos(&dir, plan, Some(receiver.endpoint())).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let spans = receiver.spans();
    let tier = &policy(&report, "both")["tiers"][0];
    let hop = |service: &str, kind: i32| -> Vec<&Got> {
        spans
            .iter()
            .filter(|s| s.service == service && s.kind() == kind)
            .collect()
    };
    let ids = |v: &[&Got]| -> BTreeSet<(Vec<u8>, Vec<u8>)> {
        v.iter()
            .map(|s| (s.span.trace_id.clone(), s.span.span_id.clone()))
            .collect()
    };
    let client_attempts = hop("chaos-harness", CLIENT);
    let tier_in = hop("chaos-relay", SERVER);
    let tier_out = hop("chaos-relay", CLIENT);
    let leaf = hop("fault-server", SERVER);
    assert_eq!(
        tier_in.len() as u64,
        tier["received"].as_u64().expect("received")
    );
    assert_eq!(tier_out.len() as u64, tier["sent"].as_u64().expect("sent"));
    assert_eq!(leaf.len() as u64, tier["sent"].as_u64().expect("sent"));
    let parents = |children: &[&Got], parents: &[&Got], what: &str| {
        let known = ids(parents);
        for c in children {
            assert!(
                known.contains(&(c.span.trace_id.clone(), c.span.parent_span_id.clone())),
                "{what}: a span whose parent is not there"
            );
        }
    };
    parents(
        &tier_in,
        &client_attempts,
        "the tier's SERVER spans under the client's attempts",
    );
    parents(
        &tier_out,
        &tier_in,
        "the tier's attempts under its SERVER span",
    );
    parents(
        &leaf,
        &tier_out,
        "the leaf's spans under the tier's attempts",
    );
    assert!(tier_in.iter().all(|s| s.str("chaos.tier") == Some("api")));
    assert_eq!(report["telemetry"]["spans_dropped"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_attempts_follow_the_rpc_conventions() {
    let receiver = Receiver::start().await;
    let dir = scratch("telemetry-grpc");
    let plan = r#"
name: traced-grpc
seed: 5
duration: 1s
drain: 2s
target: { protocol: grpc }
load:
  rate: 20
  arrivals: uniform
  requests: [ { name: get, service: shop.Catalog, method: GetItem } ]
faults:
  - { name: flaky, probability: 0.5, respond: { grpc: unavailable } }
policies:
  - { name: grpc, preset: grpc }
"#;
    let (out, report) = chaos(&dir, plan, Some(receiver.endpoint())).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let spans = receiver.spans();
    let clients = of(&spans, CLIENT, "grpc");
    assert_eq!(clients.len() as u64, count(&report, "grpc", "attempts"));
    let mut codes = BTreeMap::new();
    for span in &clients {
        assert_eq!(span.span.name, "shop.Catalog/GetItem");
        assert_eq!(span.str("rpc.system"), Some("grpc"));
        assert_eq!(span.str("rpc.service"), Some("shop.Catalog"));
        assert_eq!(span.str("rpc.method"), Some("GetItem"));
        assert_eq!(
            span.str("http.request.method"),
            None,
            "RPC, not HTTP, conventions"
        );
        let code = span.int("rpc.grpc.status_code").expect("a status code");
        match code {
            0 => assert_eq!(span.str("error.type"), None),
            14 => assert_eq!(span.str("error.type"), Some("UNAVAILABLE")),
            other => panic!("code {other}"),
        }
        *codes.entry(code).or_insert(0u64) += 1;
    }
    let outcomes = &policy(&report, "grpc")["outcomes"];
    assert_eq!(Some(codes[&0]), outcomes["grpc_ok"].as_u64());
    assert_eq!(Some(codes[&14]), outcomes["grpc_unavailable"].as_u64());
}
