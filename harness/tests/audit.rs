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
fn agree(name: &str) -> Vec<String> {
    let path = repo().join("plans").join(name);
    let text = std::fs::read_to_string(&path).expect("the shipped plan");
    let shipped = harness::plan::parse(&path, &text).unwrap_or_else(|e| panic!("{e}"));
    let whole = audit::audit(&shipped, &text);
    let mut seen = Vec::new();
    for (k, kind) in shipped.load.requests.iter().enumerate() {
        for (class, respond) in CLASSES {
            let variant = outage(&text, respond, k);
            let plan = harness::plan::parse(&path, &variant).unwrap_or_else(|e| panic!("{e}"));
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
                let sim = common::policy(&report, &p.name)
                    .leaf_amplification
                    .expect("a ledger");
                seen.push(format!(
                    "{name} {} {} {class}: audit {} (exact: {}), simulated {sim:.3}",
                    p.name, kind.method, expected.leaf, expected.exact
                ));
                check(expected, sim, seen.last().expect("a line"));
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
    let mut seen = agree("stack.yaml");
    seen.extend(agree("chain-storm.yaml"));
    println!("{}", seen.join("\n"));
}
