//! Call chains on real sockets: the load generator, relay tiers on 127.0.0.1:0 and an
//! embedded fault-server, with the exact totals the multiplication gives.

mod common;

use common::{policy, run};
use harness::report::PolicyReport;

/// A chain of two relay tiers in front of a leaf that fails every attempt (a total
/// outage, 503), no budgets, no backoff: `policies` is the plan's policy list.
fn total_outage(policies: &str) -> String {
    format!(
        r#"
name: chain
seed: 3
duration: 1s
drain: 5s
tiers: [api, backend]
load:
  rate: 25
  arrivals: uniform
  requests: [ {{ name: read, path: "/items/{{n}}" }} ]
faults:
  - {{ name: down, respond: {{ status: 503 }} }}
policies:
{policies}
gates: [ client_server_agree ]
"#
    )
}

/// Every hop's counts agree with the next, and the leaf saw exactly `per_request`
/// attempts for every logical request.
fn check_chain(p: &PolicyReport, per_request: u64) {
    let ledger = p.ledger.as_ref().expect("a ledger");
    assert!(p.logical > 0);
    assert_eq!(
        ledger.attempts,
        per_request * p.logical,
        "{}: leaf attempts per logical request, {:?}",
        p.name,
        p.tiers
    );
    assert_eq!(
        ledger.logical, p.logical,
        "{}: the id is kept end to end",
        p.name
    );
    assert_eq!(p.leaf_amplification, Some(per_request as f64));
    // What one hop sent is what the next received, exactly.
    assert_eq!(p.tiers[0].received, p.attempts, "{}: client → api", p.name);
    assert_eq!(
        p.tiers[1].received, p.tiers[0].sent,
        "{}: api → backend",
        p.name
    );
    assert_eq!(
        ledger.attempts, p.tiers[1].sent,
        "{}: backend → leaf",
        p.name
    );
    assert!(p.tiers.iter().all(|t| t.agrees));
    assert!(ledger.reconciled, "{}: {:?}", p.name, p.gates);
    // Each tier's logical requests are the first attempts of the hop above.
    assert_eq!(p.tiers[0].logical, p.logical);
    assert_eq!(p.tiers[1].logical, p.tiers[0].received);
    assert_eq!(p.succeeded, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retrying_at_every_tier_multiplies_4_by_4_by_4_and_3_by_3_by_3() {
    let report = run(&total_outage(
        "  - { name: four, max_attempts: 4, backoff: none, tiers: { api: same, backend: same } }
  - { name: three, max_attempts: 3, backoff: none, tiers: { api: same, backend: same } }",
    ))
    .await;
    // The SRE book's example: 4 attempts at each of 3 layers.
    check_chain(policy(&report, "four"), 64);
    // The seed's: 3 at each.
    check_chain(policy(&report, "three"), 27);
    let four = policy(&report, "four");
    assert_eq!(four.tiers[0].sent, 16 * four.logical);
    assert_eq!(four.tiers[0].retries, 12 * four.logical);
    assert_eq!(four.tiers[1].retries, 48 * four.logical);
    assert_eq!(four.retries, 3 * four.logical);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retrying_at_the_tier_next_to_the_failure_only_keeps_the_leaf_at_its_attempts() {
    let report = run(&total_outage(
        "  - name: one-tier
    max_attempts: 4
    backoff: none
    honor_no_retry: true
    tiers:
      api: { max_attempts: 4, backoff: none, honor_no_retry: true }
      backend: { max_attempts: 4, backoff: none }",
    ))
    .await;
    let p = policy(&report, "one-tier");
    check_chain(p, 4);
    // The backend gave up and said so; the api and the client did not retry.
    assert_eq!((p.retries, p.tiers[0].retries), (0, 0));
    assert_eq!(p.tiers[0].no_retry_received, p.logical);
    assert_eq!(p.give_ups.get("no_retry"), Some(&p.logical));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gates_see_which_tiers_retried() {
    let text = total_outage(
        "  - { name: storm, max_attempts: 3, backoff: none, tiers: { api: same, backend: same } }
  - { name: rule, max_attempts: 3, backoff: none, honor_no_retry: true, tiers: { backend: { preset: sre, backoff: none } } }",
    )
    .replace(
        "gates: [ client_server_agree ]",
        "gates: [ client_server_agree, retries_at_one_tier, { metric: leaf_amplification, max: 5 } ]",
    );
    let report = run(&text).await;
    let gate = |p: &str, g: &str| {
        policy(&report, p)
            .gates
            .iter()
            .find(|x| x.name == g)
            .unwrap_or_else(|| panic!("no gate {g}"))
            .clone()
    };
    assert!(!gate("storm", "retries_at_one_tier").pass);
    assert!(
        gate("storm", "retries_at_one_tier")
            .detail
            .contains("3 hop(s)")
    );
    assert!(!gate("storm", "leaf_amplification <= 5").pass);
    assert!(gate("storm", "client_server_agree").pass);
    // The sre preset's 3 attempts at the backend; its budget lets only 10% retry once
    // its window has requests, so the leaf sees between 1 and 3 per logical request.
    assert!(
        gate("rule", "retries_at_one_tier").pass,
        "{:?}",
        gate("rule", "retries_at_one_tier")
    );
    assert!(gate("rule", "leaf_amplification <= 5").pass);
}

/// With a failure probability p < 1 at the leaf, the leaf's mean attempts per logical
/// request follow the product E = E_client · E_api · E_backend, E_i = (1 − q_i^n_i) /
/// (1 − q_i), where q_i is the chance that one attempt of tier i fails: q_backend = p,
/// and a tier's logical request fails when all n attempts of the tier below it fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_partial_failure_the_leaf_follows_the_product_formula() {
    let p = 0.5_f64;
    let n = 3_i32;
    let e = |q: f64| (1.0 - q.powi(n)) / (1.0 - q);
    let q_backend = p;
    let q_api = q_backend.powi(n);
    let q_client = q_api.powi(n);
    let expected = e(q_client) * e(q_api) * e(q_backend);
    let text = r#"
name: chain-partial
seed: 11
duration: 4s
drain: 5s
tiers: [api, backend]
load:
  rate: 100
  arrivals: uniform
  requests: [ { name: read, path: "/items/{n}" } ]
faults:
  - { name: flaky, probability: 0.5, respond: { status: 503 } }
policies:
  - { name: three, max_attempts: 3, backoff: none, tiers: { api: same, backend: same } }
"#;
    let report = run(text).await;
    let three = policy(&report, "three");
    let ledger = three.ledger.as_ref().expect("a ledger");
    let measured = ledger.attempts as f64 / three.logical as f64;
    // 400 logical requests; the leaf's attempts per request have a standard deviation of
    // 1.415 (a simulation of 200,000 requests of this chain: mean 2.000), so the mean's
    // is 0.071: four of them make the tolerance. Seed 11 gives the same draws every run:
    // measured 1.9225 against 2.0000.
    let tolerance = 4.0 * 1.415 / (three.logical as f64).sqrt();
    assert!(
        (measured - expected).abs() <= tolerance,
        "measured {measured:.4} per logical request, the product formula says {expected:.4} (±{tolerance:.3})"
    );
    assert!(ledger.reconciled);
    eprintln!("leaf attempts per logical request: measured {measured:.4}, formula {expected:.4}");
}

/// `harness relay --name backend --to {to}` (and `args`) on 127.0.0.1:0, and the URL its
/// first line says it listens on.
async fn relay_process(to: &str, args: &[&std::ffi::OsStr]) -> (std::process::Child, String) {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};

    let mut child = Command::new(env!("CARGO_BIN_EXE_harness"))
        .args([
            "relay",
            "--listen",
            "127.0.0.1:0",
            "--name",
            "backend",
            "--to",
            to,
        ])
        .args(args)
        .stderr(Stdio::piped())
        .spawn()
        .expect("start harness relay");
    // Its first line says where it listens.
    let stderr = child.stderr.take().expect("stderr");
    let line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stderr).read_line(&mut line).expect("a line");
        line
    })
    .await
    .expect("read");
    (child, common::relay_url(&line))
}

/// A next hop that takes the request and never answers holds a standalone relay's request
/// only until `--timeout` (the caller sent no deadline, the tier has no policy): then the
/// tier answers 504, as Envoy does at its route timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_next_hop_holds_a_relay_request_only_until_its_timeout() {
    let hung = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let to = format!("http://{}", hung.local_addr().expect("an address"));
    let holding = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = hung.accept().await {
            held.push(socket);
        }
    });
    let (mut child, url) = relay_process(&to, &["--timeout".as_ref(), "1s".as_ref()]).await;
    // Far longer than the relay's timeout: only a relay that waits for ever reaches it.
    let answer = reqwest::Client::new()
        .get(format!("{url}/items/1"))
        .header("x-request-id", "hung-1")
        .timeout(std::time::Duration::from_secs(60))
        .send()
        .await;
    let _ = child.kill();
    let _ = child.wait();
    holding.abort();
    let answer = answer.expect("the relay answers before the client gives up");
    assert_eq!(answer.status().as_u16(), 504);
}

/// `harness relay` runs one tier as its own process, in front of a fault-server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn harness_relay_runs_one_tier_as_its_own_process() {
    let script =
        fault_server::Script::from_yaml_str("faults: [ { name: down, respond: { status: 503 } } ]")
            .expect("a script");
    let server = fault_server::start(fault_server::ServerConfig::with_script(script))
        .await
        .expect("a fault-server");
    let dir = common::scratch("relay-process");
    let policy = dir.join("backend.yaml");
    std::fs::write(&policy, "max_attempts: 4\nbackoff: { fixed: 5ms }\n").expect("write");
    let (mut child, url) =
        relay_process(&server.url(), &["--policy".as_ref(), policy.as_os_str()]).await;
    let answer = reqwest::Client::new()
        .get(format!("{url}/items/1"))
        .header("x-request-id", "one-1")
        .header("x-chaos-attempt", "1")
        .send()
        .await
        .expect("an answer");
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(answer.status().as_u16(), 503);
    assert_eq!(
        answer
            .headers()
            .get("x-chaos-no-retry")
            .map(|v| v.as_bytes()),
        Some(&b"1"[..]),
        "a tier that gave up says so"
    );
    let ledger = server.ledger();
    assert_eq!(
        (ledger.attempts, ledger.logical),
        (4, 1),
        "the tier's 4 attempts"
    );
    server.shutdown().await;
}

/// `harness relay` in front of a target whose answer never ends: the process answers
/// promptly, its one attempt a truncated body, instead of reading until memory runs out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn harness_relay_answers_promptly_in_front_of_an_endless_body() {
    let target = endless_target().await;
    let (mut child, url) = relay_process(&target, &[]).await;
    let started = std::time::Instant::now();
    let answer = reqwest::Client::new()
        .get(format!("{url}/items/1"))
        .header("x-request-id", "endless-1")
        .header("x-chaos-attempt", "1")
        .timeout(std::time::Duration::from_secs(10))
        .send()
        .await;
    let _ = child.kill();
    let _ = child.wait();
    let answer = answer.expect("an answer");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "answered in {:?}",
        started.elapsed()
    );
    assert_eq!(answer.status().as_u16(), 503);
    let body = answer.text().await.expect("a body");
    assert!(body.contains("truncated_body"), "{body}");
}

/// A fault phase with `tier:` is injected by that relay tier, not by the leaf.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tier_can_inject_its_own_faults() {
    let report = run(r#"
name: tier-fault
seed: 3
duration: 1s
drain: 3s
tiers: [api, backend]
load:
  rate: 20
  arrivals: uniform
  requests: [ { name: read, path: "/items/{n}" } ]
faults:
  - { name: api-sheds, tier: api, respond: { status: 503, retry_after: 1s } }
policies:
  - { name: three, max_attempts: 3, backoff: none }
gates: [ client_server_agree ]
"#)
    .await;
    let p = policy(&report, "three");
    let ledger = p.ledger.as_ref().expect("a ledger");
    assert_eq!(p.attempts, 3 * p.logical, "every attempt refused at api");
    assert_eq!(p.tiers[0].received, p.attempts);
    assert_eq!(p.tiers[0].sent, 0, "api answered itself");
    assert_eq!(
        (p.tiers[1].received, ledger.attempts),
        (0, 0),
        "nothing got past api"
    );
    assert_eq!(p.outcomes.get("503"), Some(&p.attempts));
    assert!(ledger.reconciled, "{:?}", p.gates);
}

#[test]
fn a_tier_fault_must_name_a_tier_and_be_a_status_or_a_delay() {
    let base = "duration: 1s\ntiers: [api]\nload:\n  rate: 10\n  requests: [ { name: r, path: / } ]\npolicies: [ { name: a } ]\n";
    let err = |faults: &str| {
        harness::plan::parse(std::path::Path::new("t.yaml"), &format!("{base}{faults}"))
            .expect_err("invalid")
            .to_string()
    };
    let unknown = err("faults: [ { tier: web, respond: { status: 503 } } ]\n");
    assert!(
        unknown.contains("names no tier") && unknown.contains("api"),
        "{unknown}"
    );
    let reset = err("faults: [ { tier: api, respond: { fault: reset } } ]\n");
    assert!(reset.contains("cannot inject `reset`"), "{reset}");
    assert!(
        harness::plan::parse(
            std::path::Path::new("t.yaml"),
            &format!(
                "{base}faults: [ {{ tier: api, respond: {{ fault: delay, delay: 5ms }} }} ]\n"
            )
        )
        .is_ok()
    );
}

/// A plan has at most `MAX_TIERS` relay tiers (the wire's cap, past which a tier answers
/// 508 Loop Detected): one more is an error at the first tier too many.
#[test]
fn a_plan_has_at_most_max_tiers_tiers() {
    use harness::plan::MAX_TIERS;
    let plan = |n: usize| {
        let tiers: String = (0..n).map(|i| format!("  - t{i}\n")).collect();
        format!(
            "duration: 1s\nload:\n  rate: 10\n  requests: [ {{ name: r, path: / }} ]\npolicies: [ {{ name: a }} ]\ntiers:\n{tiers}"
        )
    };
    assert!(harness::plan::parse(std::path::Path::new("t.yaml"), &plan(MAX_TIERS)).is_ok());
    let error = harness::plan::parse(std::path::Path::new("t.yaml"), &plan(MAX_TIERS + 1))
        .expect_err("one tier too many");
    assert!(
        error.message.contains(&format!("more than {MAX_TIERS}")),
        "{error}"
    );
    assert_eq!(error.line, Some(7 + MAX_TIERS), "{error}");
}

/// A tier ends its retries by the caller's deadline (`x-chaos-deadline-ms`): in front of a
/// leaf that hangs 300 ms and then closes, a tier that would try 5 times (no timeout of
/// its own) stops when the caller's 100 ms are up, and says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tier_honours_the_callers_deadline() {
    let script = fault_server::Script::from_yaml_str(
        "faults: [ { name: hangs, respond: { fault: timeout, hold: 300ms } } ]",
    )
    .expect("a script");
    let server = fault_server::start(fault_server::ServerConfig::with_script(script))
        .await
        .expect("a fault-server");
    let policy = harness::policy::Policy::new(harness::policy::PolicyConfig {
        max_attempts: 5,
        backoff: harness::policy::Backoff::none(),
        retry_on: harness::policy::RetryOn::new(vec![harness::policy::RetryCondition::Any]),
        ..harness::policy::PolicyConfig::default()
    })
    .expect("a policy");
    let relay = relay("backend", server.url(), policy).await;
    let ask = |deadline: Option<&str>| {
        let mut request = reqwest::Client::new()
            .get(format!("{}/items/1", relay.url()))
            .header("x-request-id", "d-1")
            .header("x-chaos-attempt", "1");
        if let Some(ms) = deadline {
            request = request.header("x-chaos-deadline-ms", ms);
        }
        request.send()
    };
    let answer = ask(Some("100")).await.expect("an answer");
    assert_eq!(
        answer.status().as_u16(),
        504,
        "its attempt timed out at the deadline"
    );
    assert_eq!(
        answer
            .headers()
            .get("x-chaos-gave-up")
            .map(|v| v.as_bytes()),
        Some(&b"deadline"[..])
    );
    assert_eq!(relay.counts().sent, 1, "one attempt in 100 ms, not five");
    // Without a deadline the same tier tries five times (300 ms each).
    let answer = ask(None).await.expect("an answer");
    assert_eq!(answer.status().as_u16(), 503);
    assert_eq!(relay.counts().sent, 6);
    relay.shutdown().await;
    server.shutdown().await;
}

/// The one-tier rule holds when attempts time out too: each tier keeps back a margin of
/// its caller's deadline, so its 504 marked `x-chaos-no-retry` arrives before the
/// caller's own timer fires, and nobody above the backend retries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_one_tier_rule_holds_when_attempts_time_out() {
    let report = run(r#"
name: hanging-leaf
seed: 3
duration: 1s
drain: 5s
tiers: [api, backend]
load:
  rate: 10
  arrivals: uniform
  requests: [ { name: read, path: "/items/{n}" } ]
faults:
  - { name: hangs, respond: { fault: timeout, hold: 5s } }
policies:
  - name: one-tier
    max_attempts: 3
    attempt_timeout: 600ms
    backoff: none
    honor_no_retry: true
    tiers:
      api: same
      backend: { max_attempts: 3, attempt_timeout: 200ms, backoff: none }
gates: [ retries_at_one_tier ]
"#)
    .await;
    let p = policy(&report, "one-tier");
    assert_eq!((p.retries, p.tiers[0].retries), (0, 0), "{:?}", p.tiers);
    assert_eq!(p.give_ups.get("no_retry"), Some(&p.logical));
    assert_eq!(p.tiers[0].no_retry_received, p.logical);
    assert!(p.tiers[1].retries > 0, "the backend retried");
    assert!(p.gates.iter().all(|g| g.pass), "{:?}", p.gates);
}

/// A tier that only forwards once is no reason for its callers to stop retrying: it
/// passes on what it got, unmarked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forward_once_tier_does_not_stop_its_callers_retries() {
    let report = run(&total_outage(
        "  - { name: client-retries, max_attempts: 3, backoff: none, honor_no_retry: true }",
    ))
    .await;
    let p = policy(&report, "client-retries");
    check_chain(p, 3);
    assert_eq!(p.retries, 2 * p.logical);
    assert_eq!(p.tiers[0].no_retry_received, 0);
}

/// A tier does not open the fault-server's control API to whoever can reach the tier.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tier_does_not_forward_the_control_api() {
    let server = fault_server::start(fault_server::ServerConfig::default())
        .await
        .expect("a fault-server");
    let relay = relay("api", server.url(), harness::plan::forward_once()).await;
    let client = reqwest::Client::new();
    let reset = client
        .post(format!("{}/__chaos/reset", relay.url()))
        .send()
        .await
        .expect("an answer");
    assert_eq!(reset.status().as_u16(), 404);
    let ok = client
        .get(format!("{}/items/1", relay.url()))
        .header("x-tenant", "blue")
        .send()
        .await
        .expect("an answer");
    assert_eq!(
        ok.status().as_u16(),
        200,
        "an ordinary request goes through"
    );
    assert_eq!(relay.counts().sent, 1);
    relay.shutdown().await;
    server.shutdown().await;
}

/// A relay tier on 127.0.0.1:0 forwarding to `next`, without faults or tracing.
async fn relay(name: &str, next: String, policy: harness::policy::Policy) -> harness::relay::Relay {
    harness::relay::Relay::start(harness::relay::RelayConfig {
        name: name.into(),
        next,
        policy,
        seed: 1,
        listen: "127.0.0.1:0".parse().expect("an address"),
        script: None,
        tracing: None,
        peers: 1,
        max_connections: None,
    })
    .await
    .expect("a relay")
}

/// A careful client (one attempt) in front of a tier that retries everything, unkeyed
/// POSTs included, against a leaf that answers 400 to half of the payments.
const CARELESS_TIER: &str = r#"
name: careless-tier
seed: 11
duration: 1s
drain: 5s
tiers: [api]
load:
  rate: 40
  arrivals: uniform
  requests:
    - { name: charge, method: POST, path: /payments, body: '{"amount":5}' }
faults:
  - { name: bad-input, probability: 0.5, respond: { status: 400 } }
policies:
  - name: careful
    max_attempts: 1
    tiers:
      api: { max_attempts: 3, backoff: none, retry_on: [any], retry_non_idempotent: true }
gates: [ no_retry_of_permanent, no_retry_of_non_idempotent ]
"#;

/// Both gates fail and name the tier; the client itself broke nothing.
fn check_careless_tier(report: &harness::report::Report) {
    let p = policy(report, "careful");
    assert_eq!(p.retries, 0, "the client never retries");
    assert_eq!(p.violations.retried_permanent, 0);
    let api = &p.tiers[0];
    assert!(api.retries > 0, "{api:?}");
    assert!(api.violations.retried_permanent > 0, "{api:?}");
    assert!(api.violations.retried_non_idempotent > 0, "{api:?}");
    assert!(!api.violation_examples["retried_permanent"].is_empty());
    for (gate, count) in [
        ("no_retry_of_permanent", api.violations.retried_permanent),
        (
            "no_retry_of_non_idempotent",
            api.violations.retried_non_idempotent,
        ),
    ] {
        let g = p.gates.iter().find(|g| g.name == gate).expect("the gate");
        assert!(!g.pass, "{g:?}");
        assert_eq!(g.measured, Some(count as f64), "{g:?}");
        assert!(g.detail.starts_with(&format!("api sent {count} ")), "{g:?}");
        assert!(!g.detail.contains("client sent"), "{g:?}");
    }
    assert_eq!(report.verdict, "fail");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tier_that_retries_400s_and_unkeyed_posts_fails_the_gates_by_name() {
    check_careless_tier(&run(CARELESS_TIER).await);
}

#[test]
fn a_simulated_tier_that_retries_400s_and_unkeyed_posts_fails_the_gates_by_name() {
    check_careless_tier(&common::simulated(&common::plan(CARELESS_TIER)));
}

/// A target on 127.0.0.1:0 that answers every request 200 with an endless chunked body,
/// 64 KiB a chunk, until the reader goes away.
async fn endless_target() -> String {
    use tokio::io::AsyncWriteExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("an address");
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                // The request's headers (no body: the tests send GETs).
                if !common::read_head(&mut stream).await {
                    return;
                }
                let chunk = format!("10000\r\n{}\r\n", "x".repeat(0x10000));
                let start = "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ntransfer-encoding: chunked\r\n\r\n";
                if stream.write_all(start.as_bytes()).await.is_err() {
                    return;
                }
                while stream.write_all(chunk.as_bytes()).await.is_ok() {}
            });
        }
    });
    format!("http://{addr}")
}

/// An endless answer is cut at the tier's cap (1 MiB), a truncated body: the tier answers
/// promptly, as for any failed attempt, having read no more than the cap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tier_caps_an_endless_answer_as_a_truncated_body() {
    let target = endless_target().await;
    let policy = harness::policy::Policy::new(harness::policy::PolicyConfig {
        max_attempts: 1,
        ..harness::policy::PolicyConfig::default()
    })
    .expect("a policy");
    let relay = relay("api", target, policy).await;
    let started = std::time::Instant::now();
    let answer = first_attempt(relay.url(), "endless-1").await;
    let status = answer.status().as_u16();
    let body = answer.text().await.expect("a body");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "answered in {:?}",
        started.elapsed()
    );
    assert_eq!(
        status, 503,
        "a tier whose attempts ended without a status: {body}"
    );
    assert!(body.contains("truncated_body"), "{body}");
    relay.settle(std::time::Duration::from_secs(2)).await;
    let counts = relay.counts();
    assert_eq!((counts.received, counts.sent, counts.gave_up), (1, 1, 1));
    assert!(
        relay.largest_answer() <= 1 << 20,
        "read {} bytes of one answer",
        relay.largest_answer()
    );
    assert!(relay.largest_answer() > 0, "it did read the answer");
    relay.shutdown().await;
}

/// Two tiers `a` → `b` → `a`, each the other's next hop, running `policy`: `b` listens
/// first, so that `a` can forward to it before it starts.
async fn two_tiers_in_a_loop(
    policy: harness::policy::Policy,
) -> (harness::relay::Relay, harness::relay::Relay) {
    let config = |name: &str, next: String| harness::relay::RelayConfig {
        name: name.into(),
        next,
        policy: policy.clone(),
        seed: 1,
        listen: "127.0.0.1:0".parse().expect("an address"),
        script: None,
        tracing: None,
        peers: 1,
        max_connections: None,
    };
    let b_listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let b_addr = b_listener.local_addr().expect("an address");
    let a = harness::relay::Relay::start(config("a", format!("http://{b_addr}")))
        .await
        .expect("relay a");
    let b = harness::relay::Relay::start_on(b_listener, config("b", a.url().to_owned()))
        .await
        .expect("relay b");
    (a, b)
}

/// Two tiers forwarding to each other: one request goes round the loop once, and `a`,
/// seeing its own `Via` entry come back, answers 508 Loop Detected at once: three
/// arrivals and two forwards, not the sixteen of the hop count (nor the thousands that
/// took every descriptor before either).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_tiers_forwarding_to_each_other_answer_508_at_the_first_return() {
    let (a, b) = two_tiers_in_a_loop(harness::plan::forward_once()).await;
    let started = std::time::Instant::now();
    let answer = first_attempt(a.url(), "loop-1").await;
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "answered in {:?}",
        started.elapsed()
    );
    let status = answer.status().as_u16();
    let body = answer.text().await.expect("a body");
    assert_eq!(status, 508, "{body}");
    assert!(body.contains("came back to this tier"), "{body}");
    a.settle(std::time::Duration::from_secs(2)).await;
    b.settle(std::time::Duration::from_secs(2)).await;
    let (ca, cb) = (a.counts(), b.counts());
    // client → a → b → a (its own entry: 508).
    assert_eq!((ca.received, cb.received), (2, 1), "{ca:?} {cb:?}");
    assert_eq!((ca.sent, cb.sent), (1, 1), "{ca:?} {cb:?}");
    assert_eq!(
        ca.faulted + cb.faulted,
        1,
        "the loop is counted once, where it was seen"
    );
    a.shutdown().await;
    b.shutdown().await;
}

/// Issue 50: two tiers that retry every 5xx three times (`max_attempts: 3, retry_on:
/// [5xx]`, without `honor_no_retry`), forwarding to each other. Before, each retried the
/// loop's 508 and one request made about 7,400 hops, until the 15 s timeout; now the
/// loop is seen at its first return and its 508 is retried by neither: every request
/// ends 508 after the same three arrivals.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retrying_tiers_in_a_loop_end_each_request_with_one_508_in_three_hops() {
    let policy = harness::policy::Policy::new(harness::policy::PolicyConfig {
        max_attempts: 3,
        retry_on: harness::policy::RetryOn::new(vec![harness::policy::RetryCondition::ServerError]),
        backoff: harness::policy::Backoff::none(),
        honor_no_retry: false,
        ..harness::policy::PolicyConfig::default()
    })
    .expect("a valid policy");
    let (a, b) = two_tiers_in_a_loop(policy).await;
    let requests = 5;
    for i in 0..requests {
        let started = std::time::Instant::now();
        let answer = first_attempt(a.url(), &format!("loop-{i}")).await;
        assert!(
            started.elapsed() < std::time::Duration::from_secs(5),
            "answered in {:?}",
            started.elapsed()
        );
        assert_eq!(answer.status().as_u16(), 508, "request {i}");
    }
    a.settle(std::time::Duration::from_secs(2)).await;
    b.settle(std::time::Duration::from_secs(2)).await;
    let (ca, cb) = (a.counts(), b.counts());
    assert_eq!(
        (ca.received, cb.received),
        (2 * requests, requests),
        "{ca:?} {cb:?}"
    );
    assert_eq!((ca.sent, cb.sent), (requests, requests), "{ca:?} {cb:?}");
    assert_eq!((ca.retries, cb.retries), (0, 0), "{ca:?} {cb:?}");
    a.shutdown().await;
    b.shutdown().await;
}

/// The first attempt of logical request `id`, sent to a relay at `url` as a client sends
/// it, answered within 10 s.
async fn first_attempt(url: &str, id: &str) -> reqwest::Response {
    reqwest::Client::new()
        .get(format!("{url}/items/1"))
        .header("x-request-id", id)
        .header("x-chaos-attempt", "1")
        .timeout(std::time::Duration::from_secs(10))
        .send()
        .await
        .expect("an answer")
}

/// One budget shared by a chain (`share_budget`): a leaf that fails half of the attempts,
/// 4 attempts at every hop, the client's token bucket (ratio 0.2, 5 tokens). Shared, the
/// leaf's attempts per logical request stay within the bucket's bound whichever hops
/// retried, live and simulated alike; with a bucket of the same size at each hop, the
/// leaf gets far more than that bound.
#[test]
fn a_shared_budget_keeps_the_leaf_within_its_bound_live_and_simulated() {
    let plan = common::plan(
        r#"
name: shared
seed: 11
duration: 2s
drain: 5s
tiers: [api, backend]
load:
  rate: 50
  arrivals: uniform
  requests: [ { name: read, path: "/items/{n}" } ]
faults:
  - { name: flaky, probability: 0.5, respond: { status: 503 } }
policies:
  - name: shared
    max_attempts: 4
    backoff: none
    budget: { ratio: 0.2, max_tokens: 5 }
    share_budget: true
    tiers: { api: same, backend: same }
  - name: own
    max_attempts: 4
    backoff: none
    budget: { ratio: 0.2, max_tokens: 5 }
    tiers: { api: same, backend: same }
gates: [ client_server_agree, amplification_within_budget ]
"#,
    );
    // What a request takes for its chain: 3 + 4·3 + 16·3 retries at most.
    assert_eq!(plan.policies[0].share_budget, Some(63));
    assert_eq!(plan.policies[1].share_budget, None);
    for (mode, report) in [
        ("live", common::live(&plan)),
        ("simulated", common::simulated(&plan)),
    ] {
        let shared = policy(&report, "shared");
        let bound = shared.amplification.budget_bound.expect("a ratio budget");
        let leaf = shared.leaf_amplification.expect("a ledger");
        assert!(
            leaf <= bound + 1e-9,
            "{mode}: leaf {leaf} over the bound {bound}"
        );
        assert!(leaf > 1.0, "{mode}: the shared budget let no hop retry");
        let tier_retries: u64 = shared.tiers.iter().map(|t| t.retries).sum();
        assert!(
            tier_retries > 0,
            "{mode}: the tiers spent nothing: {:?}",
            shared.tiers
        );
        assert!(
            shared.gates.iter().all(|g| g.pass),
            "{mode}: {:?}",
            shared.gates
        );
        let gate = shared
            .gates
            .iter()
            .find(|g| g.name == "amplification_within_budget")
            .expect("the gate");
        assert!(
            gate.detail.contains("at the leaf"),
            "{mode}: {}",
            gate.detail
        );
        // Each hop with a bucket of its own: every hop's retries multiply at the leaf.
        let own = policy(&report, "own");
        let own_leaf = own.leaf_amplification.expect("a ledger");
        assert!(
            own_leaf > own.amplification.budget_bound.expect("a ratio budget"),
            "{mode}: {own_leaf}"
        );
    }
}

#[test]
fn share_budget_needs_tiers_and_a_token_bucket() {
    let base = common::BASE;
    let no_tiers = common::validate_error(
        "no-tiers",
        &format!(
            "{base}policies: [ {{ name: a, budget: {{ ratio: 0.1 }}, share_budget: true }} ]\n"
        ),
    );
    assert!(
        no_tiers.contains("shares its budget, but the plan has no relay tiers"),
        "{no_tiers}"
    );
    let no_bucket = common::validate_error(
        "no-bucket",
        &format!(
            "{base}tiers: [api]\npolicies: [ {{ name: a, preset: grpc, share_budget: true, tiers: {{ api: same }} }} ]\n"
        ),
    );
    assert!(
        no_bucket.contains("has no token bucket to share"),
        "{no_bucket}"
    );
}
