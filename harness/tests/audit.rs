//! `harness audit`: its figures against the simulator's, and the command's exit codes.
//!
//! The audit walks one request through the cores; the simulator runs the whole plan
//! through the same cores in virtual time. On a total outage of one failure class (budgets
//! and breakers off: the audit states them apart), the two must agree: exactly where the
//! audit says its figure is exact, and within the audit's range where backoff draws, a
//! caller's timeout or nginx's passive ejection make the figure depend on time.

mod common;

use common::repo;
use harness::audit::{self, Case};
use serde_yaml::Value;

/// The failure classes, as the audit names them and as a fault phase injects them.
const CLASSES: [(&str, &str); 4] = [
    ("503", "{ status: 503 }"),
    ("close", "{ fault: close }"),
    ("reset", "{ fault: reset }"),
    ("timeout", "{ fault: timeout }"),
];

/// `plan` with every request failing as `respond`, only its request `kind`, no budget or
/// breaker in any policy, and a drain that lets every request end.
fn outage(text: &str, respond: &str, kind: usize) -> String {
    let mut plan: Value = serde_yaml::from_str(text).expect("a plan");
    let respond: Value = serde_yaml::from_str(respond).expect("a respond");
    let mut phase = serde_yaml::Mapping::new();
    phase.insert("name".into(), "outage".into());
    phase.insert("respond".into(), respond);
    plan["faults"] = Value::Sequence(vec![Value::Mapping(phase)]);
    // Long enough for the last request's every retry (in chain-storm.yaml, 64 timeouts
    // held 60 s each, one after the other): a run that ends first leaves its last
    // requests' retries uncounted. Virtual time: it costs events, not seconds.
    plan["drain"] = "2h".into();
    let requests = plan["load"]["requests"]
        .as_sequence_mut()
        .expect("requests");
    let mut one = requests[kind].clone();
    one["weight"] = 1.into();
    *requests = vec![one];
    for policy in plan["policies"].as_sequence_mut().expect("policies") {
        policy["budget"] = "none".into();
        policy["breaker"] = "none".into();
    }
    serde_yaml::to_string(&plan).expect("yaml")
}

/// The audit's case of `policy` for `method` failing as `failure`.
fn case<'a>(a: &'a audit::Audit, policy: &str, method: &str, failure: &str) -> &'a Case {
    a.policies
        .iter()
        .find(|p| p.policy == policy)
        .and_then(|p| {
            p.cases
                .iter()
                .find(|c| c.method == method && c.failure == failure)
        })
        .unwrap_or_else(|| panic!("no case {policy} {method} {failure}"))
}

/// Audits and simulates every policy of `name` in a total outage of each class and
/// method, and returns the lines `policy method class: audit sim` for the failure message.
fn agree(path: &std::path::Path) -> Vec<String> {
    let name = path.file_name().expect("a file").to_string_lossy();
    let text = std::fs::read_to_string(path).expect("the plan");
    let shipped = harness::plan::parse(path, &text).unwrap_or_else(|e| panic!("{e}"));
    let whole = audit::audit(&shipped, &text);
    let mut seen = Vec::new();
    for (k, kind) in shipped.load.requests.iter().enumerate() {
        for (class, respond) in CLASSES {
            let variant = outage(&text, respond, k);
            let plan = harness::plan::parse(path, &variant).unwrap_or_else(|e| panic!("{e}"));
            let audited = audit::audit(&plan, &variant);
            let report = common::simulated(&plan);
            for p in &plan.policies {
                let expected = case(&audited, &p.name, &kind.method, class);
                let of_shipped = case(&whole, &p.name, &kind.method, class);
                assert_eq!(
                    (expected.leaf, expected.exact),
                    (of_shipped.leaf, of_shipped.exact),
                    "the shipped plan's audit is the outage's ({name}, {})",
                    p.name
                );
                let simulated = common::policy(&report, &p.name);
                let sim = simulated.leaf_amplification.expect("a ledger");
                seen.push(format!(
                    "{name} {} {} {class}: audit {} (exact: {}), simulated {sim:.3}",
                    p.name, kind.method, expected.leaf, expected.exact
                ));
                check(expected, sim, seen.last().expect("a line"));
                if expected.exact {
                    // Hop by hop too: tier i sends the product of the tries above it and its own.
                    for (i, tier) in simulated.tiers.iter().enumerate() {
                        let product: u32 = expected.tries[..=i + 1].iter().product();
                        assert!(
                            (tier.amplification - f64::from(product)).abs() < 1e-9,
                            "{}: tier {} sends {} per logical request, the audit {product}",
                            seen.last().expect("a line"),
                            tier.name,
                            tier.amplification
                        );
                    }
                }
            }
        }
    }
    seen
}

/// Exact: the simulator's leaf attempts per logical request are the audit's, to the
/// float's last digits. Otherwise the audit's is a worst case the run stays within: a
/// backoff draw, a deadline, a caller's timeout or nginx's passive ejection (which takes
/// every server out after the first failures) can only take attempts away.
fn check(c: &Case, sim: f64, line: &str) {
    let eps = 1e-9;
    if c.exact {
        assert!((sim - c.leaf as f64).abs() < eps, "{line}");
    } else {
        assert!(sim <= c.leaf as f64 + eps, "{line}");
    }
}

#[test]
fn audit_gives_the_simulators_leaf_attempts_in_a_total_outage_of_each_class() {
    let plans = repo().join("plans");
    // Two methods, four classes, two policies; one method, four classes, two policies.
    assert_eq!(agree(&plans.join("stack.yaml")).len(), 16);
    assert_eq!(agree(&plans.join("chain-storm.yaml")).len(), 8);
}

/// An HAProxy that retries only its own per-try timeout, in front of a service whose
/// jittered backoff sometimes outlasts it: with short draws the service answers 503 in
/// time (one try: 3 attempts at the leaf), with long ones HAProxy times out and tries
/// again while the service goes on (4 tries: 12). The audit's worst case is the second,
/// whatever its own draws; a walk that took the draws at face value said 3.
#[test]
fn a_hop_that_can_outlast_its_callers_timeout_is_audited_as_timing_out() {
    let dir = common::scratch("audit-straddle");
    std::fs::write(
        dir.join("lb.cfg"),
        "defaults\n    mode http\n    timeout connect 1s\n    timeout client 10s\n    timeout server 300ms\n\nfrontend api\n    bind 127.0.0.1:8443\n    default_backend backend\n\nbackend backend\n    retry-on response-timeout\n    server b1 127.0.0.1:9101\n",
    )
    .expect("write the config");
    let plan = common::write_plan(
        &dir,
        "straddle.yaml",
        "name: straddle\nseed: 3\nduration: 5s\ntiers:\n  - { name: lb, haproxy: { config: lb.cfg } }\n  - service\nload:\n  rate: 20\n  requests: [ { name: read, method: GET, path: \"/items/{n}\" } ]\nfaults: [ { name: down, respond: { status: 503 } } ]\npolicies:\n  - name: jittered\n    max_attempts: 1\n    tiers:\n      service: { max_attempts: 3, backoff: { exponential: { base: 200ms, multiplier: 2, cap: 1s }, jitter: full } }\n",
    );
    assert_eq!(agree(&plan).len(), 4);
    let text = std::fs::read_to_string(&plan).expect("the plan");
    let parsed = harness::plan::parse(&plan, &text).unwrap_or_else(|e| panic!("{e}"));
    let a = audit::audit(&parsed, &text);
    let c = case(&a, "jittered", "GET", "503");
    assert_eq!((c.leaf, c.exact), (12, false), "{c:?}");
    let report = common::simulated(&parsed);
    let sim = common::policy(&report, "jittered")
        .leaf_amplification
        .expect("a ledger");
    assert!(sim > 3.5, "some draws outlast HAProxy's timeout: {sim}");
}

/// `harness audit` exits 0 when every gate it judges holds in the worst case, 1 when one
/// cannot (naming it and the hop at its line), 2 for a plan `validate` refuses; `--json`
/// gives the same figures.
#[test]
fn the_command_exits_0_1_or_2_and_names_what_cannot_hold() {
    let dir = common::scratch("audit-cli");
    let base = "duration: 2s\nload:\n  rate: 10\n  requests:\n    - { name: read, method: GET, path: / }\n    - { name: pay, method: POST, path: /pay }\nfaults: [ { name: down, respond: { status: 503 } } ]\n";
    let holds = common::write_plan(
        &dir,
        "holds.yaml",
        &format!(
            "{base}policies: [ {{ name: two, max_attempts: 2 }} ]\ngates: [ no_retry_of_non_idempotent, {{ metric: leaf_amplification, max: 2 }} ]\n"
        ),
    );
    let fails = common::write_plan(
        &dir,
        "fails.yaml",
        &format!(
            "{base}policies:\n  - name: careless\n    max_attempts: 3\n    retry_non_idempotent: true\ngates: [ no_retry_of_non_idempotent, {{ metric: leaf_amplification, max: 2 }} ]\n"
        ),
    );
    let invalid = common::write_plan(
        &dir,
        "invalid.yaml",
        &format!("{base}policies: [ {{ name: p, max_attempts: 0 }} ]\n"),
    );
    let audit = |plan: &std::path::Path, json: bool| {
        let mut command = common::harness();
        command.arg("audit").arg(plan);
        if json {
            command.arg("--json");
        }
        command.output().expect("run harness")
    };
    let out = audit(&holds, false);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(0), "{text}{}", common::stderr(&out));
    assert!(text.contains("at most 2 attempts at the leaf"), "{text}");

    let out = audit(&fails, false);
    let err = common::stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("gate `leaf_amplification <= 2` cannot hold for policy `careless`"),
        "{err}"
    );
    assert!(err.contains("worst case 3 attempts"), "{err}");
    assert!(
        err.contains("`no_retry_of_non_idempotent` cannot hold")
            && err.contains("`client` (")
            && err.contains("fails.yaml:10"),
        "the client's policy, at its max_attempts line: {err}"
    );

    let out = audit(&fails, true);
    assert_eq!(out.status.code(), Some(1));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(json["schema"], "chaos-audit/v1");
    assert_eq!(json["policies"][0]["worst"]["leaf"], 3);
    assert_eq!(json["policies"][0]["gates"][0]["holds"], false);

    let out = audit(&invalid, false);
    assert_eq!(out.status.code(), Some(2), "{}", common::stderr(&out));
    assert!(
        common::stderr(&out).contains("invalid.yaml:"),
        "{}",
        common::stderr(&out)
    );

    // The shipped stack: both policies are counterexamples whose gates fail in the worst
    // case, as they expect; `lb` multiplies most, at its `retry-on` line.
    let out = audit(&repo().join("plans/stack.yaml"), false);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(0), "{text}{}", common::stderr(&out));
    assert!(
        text.contains("stacks/lb.cfg:20: `lb` multiplies most: 4 tries"),
        "{text}"
    );
    assert!(text.contains("`lb` resends a POST"), "{text}");
}

/// docs/audit.md's example is what `harness audit plans/stack.yaml` prints.
#[test]
fn the_docs_example_is_the_commands_output() {
    let doc = std::fs::read_to_string(repo().join("docs/audit.md")).expect("docs/audit.md");
    let prompt = "$ cd plans && harness audit stack.yaml\n";
    let start = doc.find(prompt).expect("the example's prompt") + prompt.len();
    let example = &doc[start..start + doc[start..].find("```").expect("the block's end")];
    let out = common::harness()
        .current_dir(repo().join("plans"))
        .args(["audit", "stack.yaml"])
        .output()
        .expect("run harness");
    let printed = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        example.trim_end(),
        printed.trim_end(),
        "regenerate docs/audit.md's example"
    );
}
