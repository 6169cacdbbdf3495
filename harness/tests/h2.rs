//! HTTP/2 and gRPC end to end, in process, against a real fault-server on 127.0.0.1:0:
//! a GOAWAY storm over multiplexed connections in which only provably unsent streams are
//! retried, and gRPC calls judged by code, pushback honoured, live and simulated alike.

mod common;

use common::{live, plan, policy, simulated};

/// POSTs (non-idempotent, no key) multiplexed on two HTTP/2 connections while the server
/// refuses streams, sends connections away and drops them with every stream in flight.
/// A dropped stream was served (the service runs detached from its connection, as a real
/// server's does): retrying it charges twice. A refused stream was not.
const STORM: &str = r#"
name: goaway-storm
seed: 11
duration: 3s
drain: 3s
target: { protocol: http2 }
load:
  rate: 300
  max_connections: 2
  requests:
    - { name: charge, method: POST, path: /payments, body: '{"amount":5}' }
server: { service_time: 20ms }
faults:
  - name: storm
    probability: 0.06
    respond:
      - { fault: refuse, weight: 2 }
      - { fault: goaway, weight: 2 }
      - { fault: reset, weight: 1 }
policies:
  - name: safe
    max_attempts: 3
    backoff: { exponential: { base: 20ms, cap: 200ms }, jitter: full }
  - name: retries-posts
    max_attempts: 3
    backoff: { exponential: { base: 20ms, cap: 200ms }, jitter: full }
    retry_non_idempotent: true
gates:
  - client_server_agree
  - { check: no_duplicate_side_effects, policy: safe }
  - { check: no_retry_of_non_idempotent, policy: safe }
"#;

#[test]
fn a_goaway_storm_retries_only_the_streams_the_server_did_not_process() {
    let report = live(&plan(STORM));
    let safe = policy(&report, "safe");
    let ledger = safe.ledger.as_ref().expect("the fault-server's ledger");
    let refused = ledger.by_outcome.get("refuse").copied().unwrap_or(0);
    let dropped = safe.outcomes.get("reset").copied().unwrap_or(0);
    assert!(
        refused > 0,
        "the storm refused streams: {:?}",
        ledger.by_outcome
    );
    assert!(
        dropped > 0,
        "the storm dropped connections: {:?}",
        safe.outcomes
    );
    // Every stream the client saw refused, and every stream that went out above a
    // GOAWAY's last-stream-id (a race the client may win or lose), was retried,
    // transparently though a POST; nothing else was. (The client's refused streams are
    // the server's scripted ones give or take the races of a storm: a refusal whose
    // connection is reset before its RST_STREAM leaves, or an HTTP/2 layer refusing a
    // stream over its limit, which no ledger sees; the ledger's reconciliation below
    // bounds them.)
    let outcome = |name: &str| safe.outcomes.get(name).copied().unwrap_or(0);
    assert!(outcome("refused_stream") > 0, "{:?}", safe.outcomes);
    assert_eq!(
        safe.retries,
        outcome("refused_stream") + outcome("goaway_unprocessed"),
        "{:?}",
        safe.outcomes
    );
    assert_eq!(ledger.duplicate_side_effects, 0);
    assert_eq!(safe.violations.retried_non_idempotent, 0);
    assert!(ledger.reconciled, "{ledger:?}");
    assert!(safe.gates.iter().all(|g| g.pass), "{:?}", safe.gates);
    // The streams that died with their connection had been served: the policy that
    // retries them anyway charges twice, and the ledger says so.
    let unsafe_policy = policy(&report, "retries-posts");
    let unsafe_ledger = unsafe_policy.ledger.as_ref().expect("a ledger");
    assert!(
        unsafe_ledger.duplicate_side_effects > 0,
        "retrying dropped streams charged twice: {unsafe_ledger:?}"
    );
    assert!(unsafe_policy.violations.retried_non_idempotent > 0);
}

/// Ten unary calls one after another through a total UNAVAILABLE outage, and a second
/// service whose every call is told to stop (negative pushback) or is invalid.
const GRPC: &str = r#"
name: grpc-outage
seed: 5
duration: 5s
drain: 3s
target: { protocol: grpc }
load:
  rate: 2
  arrivals: uniform
  requests:
    - { name: get, service: chaos.Demo, method: Get, weight: 2 }
    - { name: stop, service: chaos.Stop, method: Get, weight: 1 }
    - { name: bad, service: chaos.Bad, method: Get, weight: 1 }
faults:
  - { name: down, match: { path: /chaos.Demo/Get }, respond: { grpc: unavailable, pushback: 30ms } }
  - { name: told-to-stop, match: { path: /chaos.Stop/Get }, respond: { grpc: unavailable, pushback: stop } }
  - { name: invalid, match: { path: /chaos.Bad/Get }, respond: { grpc: invalid_argument } }
policies:
  - { name: grpc, preset: grpc }
gates:
  - client_server_agree
  - no_retry_of_permanent
"#;

#[test]
fn grpc_calls_are_judged_by_code_and_pushback_is_obeyed_live_and_simulated() {
    let plan = plan(GRPC);
    let (live, simulated) = (live(&plan), simulated(&plan));
    for report in [&live, &simulated] {
        let p = policy(report, "grpc");
        assert_eq!(p.succeeded, 0, "{:?}", p.outcomes);
        assert!(p.gates.iter().all(|g| g.pass), "{:?}", p.gates);
        let ledger = p.ledger.as_ref().expect("a ledger");
        assert_eq!(ledger.duplicate_side_effects, 0);
        // Told to stop, or told the call is invalid: one attempt each.
        let invalid = ledger
            .by_outcome
            .get("grpc_invalid_argument")
            .copied()
            .unwrap_or(0);
        assert!(invalid > 0, "{:?}", ledger.by_outcome);
        assert_eq!(p.give_ups["permanent"], invalid, "{:?}", p.give_ups);
        assert!(
            p.give_ups["no_retry"] > 0,
            "pushback -1 stops: {:?}",
            p.give_ups
        );
        assert!(
            p.give_ups["budget_exhausted"] > 0,
            "the throttle: {:?}",
            p.give_ups
        );
        assert_eq!(p.violations.retried_permanent, 0);
        assert_eq!(ledger.attempts, p.attempts, "the ledger saw every attempt");
    }
    let (l, s) = (policy(&live, "grpc"), policy(&simulated, "grpc"));
    // One call at a time through a total outage: the throttle and the backoff decide
    // alone, so live and simulated make the same attempts.
    assert_eq!(l.logical, s.logical);
    assert_eq!(
        l.attempts, s.attempts,
        "live {:?}, simulated {:?}",
        l.outcomes, s.outcomes
    );
    assert_eq!(l.outcomes, s.outcomes);
    assert!(l.retries > 0, "UNAVAILABLE with a pushback is retried");
    // One connection, one call at a time: no stream waited; the simulator has none.
    let live_wait = l.connection_wait.as_ref().expect("HTTP/2 connections");
    assert_eq!(
        (live_wait.max_connections, live_wait.streams_waited),
        (1, Some(0))
    );
    assert!(s.connection_wait.is_none());
}

/// A plan that does not parse: its message.
fn refused(yaml: &str) -> String {
    match harness::plan::parse(std::path::Path::new("test.yaml"), yaml) {
        Ok(_) => panic!("accepted:\n{yaml}"),
        Err(e) => format!("{e:#}"),
    }
}

#[test]
fn grpc_plans_that_cannot_work_are_refused_where_they_go_wrong() {
    let load = |target: &str, request: &str| {
        format!(
            "duration: 1s\ntarget: {target}\nload:\n  rate: 10\n  requests:\n    - {request}\npolicies: [ {{ name: p }} ]\n"
        )
    };
    let cases = [
        (
            load(
                "{ protocol: http1 }",
                "{ name: c, service: chaos.Pay, method: Charge }",
            ),
            [
                "test.yaml:6:",
                "`service` names a gRPC service",
                "protocol: grpc",
            ],
        ),
        (
            load("{ protocol: grpc }", "{ name: c, path: /pay }"),
            ["test.yaml:6:", "/service/method", "service: chaos.Payments"],
        ),
        (
            load("{ protocol: grpc }", "{ name: c, method: Charge }"),
            ["test.yaml:6:", "names no `service`", "service:"],
        ),
        (
            load(
                "{ protocol: grpc }",
                "{ name: c, service: 'not a name', method: Charge }",
            ),
            [
                "test.yaml:6:",
                "is not a gRPC service name",
                "chaos.Payments",
            ],
        ),
        (
            load("{ protocol: gprc }", "{ name: c, path: / }"),
            ["test.yaml:2:", "gprc", "grpc"],
        ),
    ];
    for (yaml, expected) in cases {
        let message = refused(&yaml);
        for part in expected {
            assert!(
                message.contains(part),
                "`{part}` not in:\n{message}\n---\n{yaml}"
            );
        }
    }
}

#[test]
fn simulate_refuses_a_fault_that_ends_an_http2_connection_where_it_is_scripted() {
    let dir = common::scratch("h2-simulate-live-only");
    let path = common::write_plan(
        &dir,
        "drop.yaml",
        "duration: 1s\ntarget: { protocol: http2 }\nload:\n  rate: 10\n  requests: [ { name: r, path: / } ]\nfaults:\n  - name: drop\n    respond: [ { fault: refuse }, { fault: reset } ]\npolicies: [ { name: p } ]\n",
    );
    let out = common::harness()
        .arg("simulate")
        .arg(&path)
        .output()
        .expect("run harness");
    assert_eq!(out.status.code(), Some(2), "{}", common::stderr(&out));
    let message = common::stderr(&out);
    assert!(
        message.contains("drop.yaml:8:5:"),
        "at `respond`: {message}"
    );
    assert!(
        message.contains("`fault: reset` on an HTTP/2 target"),
        "{message}"
    );
    assert!(message.contains("harness chaos"), "{message}");
    // The same plan over HTTP/1.1 simulates: a reset there ends one request's connection.
    let h1 = common::write_plan(
        &dir,
        "drop-h1.yaml",
        &std::fs::read_to_string(&path)
            .expect("the plan")
            .replace("protocol: http2", "protocol: http1"),
    );
    let out = common::harness()
        .args(["simulate", "--quiet"])
        .arg(&h1)
        .arg("--out")
        .arg(dir.join("out"))
        .output()
        .expect("run harness");
    assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
}

/// A fault-server that allows 2 streams a connection, every answer 300 ms late; one
/// HTTP/2 connection; 6 attempts at once: 2 get a stream, 4 wait in the client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attempts_beyond_the_servers_stream_limit_wait_and_are_counted() {
    use chaos_policy::{Attempt, Outcome};
    use harness::attempt::{self, AttemptSpec};

    let script = fault_server::Script::from_yaml_str(
        "faults: [ { name: slow, respond: { fault: delay, delay: 300ms } } ]",
    )
    .expect("a script");
    let mut config = fault_server::ServerConfig::with_script(script);
    config.max_concurrent_streams = 2;
    let server = fault_server::start(config).await.expect("a fault-server");
    let url = server.url();
    let pool = harness::pool::Pool::new(&url, 1, Some(1)).expect("a pool");
    let kind = harness::plan::RequestKind {
        rpc: None,
        name: "r".into(),
        method: "GET".into(),
        path: "/x".into(),
        n: Default::default(),
        weight: 1.0,
        body: None,
        headers: Default::default(),
        idempotency_key: false,
    };
    let prepared = attempt::Prepared::new(&url, &kind, "t", harness::plan::Protocol::Http2)
        .expect("a buildable kind");
    let send = |id: String| {
        let (pool, prepared) = (pool.clone(), &prepared);
        async move {
            let spec = AttemptSpec {
                kind: prepared,
                id: &id,
                n: 1,
                attempt: Attempt::FIRST,
                timeout: Some(std::time::Duration::from_secs(10)),
                traceparent: None,
                propagate_deadline: false,
                allowance: None,
            };
            attempt::send(&pool, spec).await.outcome()
        }
    };
    // The first answer comes after the server's SETTINGS: the limit is known from here.
    assert_eq!(send("t-first".into()).await, Outcome::Status(200));
    assert_eq!(pool.streams_waited(), 0);
    let (a, b, c, d, e, f) = tokio::join!(
        send("t-0".into()),
        send("t-1".into()),
        send("t-2".into()),
        send("t-3".into()),
        send("t-4".into()),
        send("t-5".into()),
    );
    let outcomes = [a, b, c, d, e, f];
    assert!(
        outcomes.iter().all(|o| *o == Outcome::Status(200)),
        "{outcomes:?}"
    );
    assert_eq!(
        pool.streams_waited(),
        4,
        "2 streams at a time: 4 of 6 waited"
    );
}
