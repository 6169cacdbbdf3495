//! `gates::evaluate` on fixed report figures: a table of (gate, figures) → verdict.

#![recursion_limit = "256"]

use std::path::Path;

use harness::plan;
use harness::report::PolicyReport;
use harness::report::gates;

/// One policy's figures: 1000 offered, 990 sent, 10 dropped, 900 succeeded, 1200 attempts.
fn figures() -> serde_json::Value {
    serde_json::json!({
        "name": "p", "summary": "",
        "offered": 1000, "logical": 990, "succeeded": 900, "failed": 90, "dropped": 10,
        "unfinished": 0, "attempts": 1200, "retries": 210, "cut": 0, "success_rate": 0.9,
        "amplification": { "client": 1.2121, "server": 1.25, "peak_1s": 2.0, "budget_bound": 1.3 },
        "give_ups": {},
        "violations": { "retried_permanent": 0, "retried_non_idempotent": 2, "duplicate_side_effects": 0 },
        "violation_examples": { "retried_non_idempotent": ["p-0000007"] },
        "latency_ms": { "p50": 5.0, "p90": 20.0, "p99": 80.0, "p999": 95.0, "max": 99.0 },
        "offered_latency_ms": { "p50": 5.0, "p90": 21.0, "p99": null, "p999": null },
        "attempt_latency_ms": { "p50": 1.0, "p90": 1.0, "p99": 1.0, "p999": 1.0, "max": 1.0 },
        "arrival_lag_ms": { "p50": 0.1, "p90": 0.1, "p99": 0.1, "p999": 0.1, "max": 0.1 },
        "recovery_s": null, "outcomes": {}, "breaker_trips": 0,
        "ledger": { "attempts": 1200, "logical": 960, "side_effects": 0, "duplicate_side_effects": 0,
                    "idempotent_replays": 0, "client_unsent": 0, "client_abandoned": 0,
                    "client_reached": 960, "reconciled": true, "by_outcome": {} },
        "series": [], "gates": []
    })
}

fn report(edit: impl FnOnce(&mut serde_json::Value)) -> PolicyReport {
    let mut json = figures();
    edit(&mut json);
    serde_json::from_value(json).expect("the figures match the report model")
}

/// Evaluates one gate, written as in a plan, on the figures.
fn judge(gate: &str, r: &PolicyReport) -> (bool, String) {
    let plan = plan::parse(
        Path::new("g.yaml"),
        &format!(
            "name: g\nduration: 1s\nload: {{ rate: 1, requests: [ {{ name: r, path: / }} ] }}\npolicies: [ {{ name: p }} ]\ngates: [ {gate} ]\n"
        ),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let results = gates::evaluate(&plan, r);
    assert_eq!(results.len(), 1, "{gate}");
    (results[0].pass, results[0].detail.clone())
}

#[test]
fn each_gate_judges_its_figure() {
    let base = report(|_| {});
    let table: &[(&str, PolicyReport, bool, &str)] = &[
        (
            "amplification_within_budget",
            base.clone(),
            true,
            "vs the budget's bound 1.300",
        ),
        (
            // 1300 attempts the server saw over 990 requests: 1.313 > 1.3, whatever the
            // client counted.
            "amplification_within_budget",
            report(|j| j["ledger"]["attempts"] = 1300.into()),
            false,
            "server-counted attempts per logical request 1.313",
        ),
        (
            "amplification_within_budget",
            report(|j| j["amplification"]["budget_bound"] = serde_json::Value::Null),
            true,
            "not applicable",
        ),
        ("no_retry_of_permanent", base.clone(), true, "no retries"),
        (
            "no_retry_of_non_idempotent",
            base.clone(),
            false,
            "2 retries of a non-idempotent request without proof it was unsent; e.g. p-0000007",
        ),
        (
            "no_duplicate_side_effects",
            base.clone(),
            true,
            "no duplicate",
        ),
        (
            "no_duplicate_side_effects",
            report(|j| {
                j["ledger"] = serde_json::Value::Null;
                j["violations"]["duplicate_side_effects"] = serde_json::Value::Null;
            }),
            false,
            "cannot be checked without a fault-server ledger",
        ),
        (
            "client_server_agree",
            base.clone(),
            true,
            "server saw 1200 attempts of 960 logical requests; the client sent 1200 attempts of 990 logical requests, 960 of which reached the server",
        ),
        (
            "client_server_agree",
            report(|j| j["ledger"]["reconciled"] = false.into()),
            false,
            "server saw 1200 attempts",
        ),
        (
            "{ metric: success_rate, min: 0.9 }",
            base.clone(),
            true,
            "success_rate = 0.9",
        ),
        (
            "{ metric: success_rate, min: 0.95 }",
            base.clone(),
            false,
            "(must be >= 0.95)",
        ),
        (
            "{ metric: p90_ms, max: 25 }",
            base.clone(),
            true,
            "p90_ms = 21 (must be <= 25; over the offered load, its 10 dropped arrivals ranked slowest)",
        ),
        (
            "{ metric: p99_ms, max: 1000 }",
            base.clone(),
            false,
            "p99_ms of the offered load is unbounded: 10 of 1000 arrivals (1.0%) were dropped",
        ),
        (
            "{ metric: p99_ms, max: 1000 }",
            report(|j| {
                j["dropped"] = 0.into();
                j["offered"] = 990.into();
                j["offered_latency_ms"]["p99"] = 80.0.into();
            }),
            true,
            "p99_ms = 80 (must be <= 1000)",
        ),
        (
            "{ metric: amplification, min: 1, max: 1.25 }",
            base.clone(),
            true,
            "(must be within [1, 1.25])",
        ),
        (
            "{ metric: server_amplification, max: 1.2 }",
            base.clone(),
            false,
            "= 1.25",
        ),
        (
            "{ metric: dropped, max: 0 }",
            base.clone(),
            false,
            "dropped = 10",
        ),
        (
            "{ metric: recovery_s, max: 5 }",
            base.clone(),
            false,
            "did not recover",
        ),
        (
            "{ metric: synchrony, max: 2 }",
            report(|j| j["synchrony"] = 2.5.into()),
            false,
            "synchrony = 2.5",
        ),
        (
            "{ metric: synchrony, max: 2 }",
            report(|j| j["synchrony"] = 1.4.into()),
            true,
            "synchrony = 1.4",
        ),
        (
            "{ metric: synchrony, max: 2 }",
            base.clone(),
            false,
            "no windowed fault phase",
        ),
        (
            "no_retry_of_permanent",
            report(|j| {
                j["logical"] = 0.into();
                j["dropped"] = 1000.into();
            }),
            false,
            "nothing was measured: all 1000 arrivals were dropped at max_in_flight",
        ),
    ];
    for (gate, figures, pass, detail) in table {
        let (passed, said) = judge(gate, figures);
        assert_eq!(passed, *pass, "{gate}: {said}");
        assert!(said.contains(detail), "{gate}: {said:?} lacks {detail:?}");
    }
}

#[test]
fn a_gate_scoped_to_another_policy_does_not_apply() {
    let plan = plan::parse(
        Path::new("g.yaml"),
        "name: g\nduration: 1s\nload: { rate: 1, requests: [ { name: r, path: / } ] }\npolicies: [ { name: p }, { name: q } ]\ngates: [ { metric: success_rate, min: 0.99, policy: q }, no_retry_of_permanent ]\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let results = gates::evaluate(&plan, &report(|_| {}));
    let names: Vec<&str> = results.iter().map(|g| g.name.as_str()).collect();
    assert_eq!(names, ["no_retry_of_permanent"]);
}

/// A plan of one policy `p` with `expect` and `gates` as written.
fn counterexample(expect: &str, gates: &str) -> Result<plan::Plan, String> {
    plan::parse(
        Path::new("x.yaml"),
        &format!(
            "name: x\nduration: 1s\nload: {{ rate: 1, requests: [ {{ name: r, path: / }} ] }}\npolicies:\n  - {{ name: p, expect: {expect} }}\n  - {{ name: q }}\ngates: {gates}\n"
        ),
    )
    .map_err(|e| e.to_string())
}

/// The expectation of the plan's counterexample `p`, judged on `r`.
fn expectation(plan: &plan::Plan, r: &PolicyReport) -> harness::report::Expectation {
    let mut r = r.clone();
    r.gates = gates::evaluate(plan, &r);
    let expect = plan.policies[0]
        .expect
        .as_ref()
        .expect("p is a counterexample");
    gates::expectation(expect, &r)
}

#[test]
fn a_counterexample_is_met_only_when_the_gates_it_names_fail() {
    // The figures retry 2 non-idempotent requests and stay within the budget's bound.
    let gates = "[ no_retry_of_non_idempotent, amplification_within_budget, { metric: peak_amplification, max: 1.5 } ]";
    let named = counterexample("{ fail: [no_retry_of_non_idempotent] }", gates).expect("plan");
    let caught = expectation(&named, &report(|_| {}));
    assert!(caught.met, "{}", caught.detail);
    assert!(
        caught
            .detail
            .starts_with("caught as expected: `no_retry_of_non_idempotent` (2 "),
        "{}",
        caught.detail
    );
    // The detector made inert: the violation is gone, and the plan must say so.
    let inert = expectation(
        &named,
        &report(|j| j["violations"]["retried_non_idempotent"] = 0.into()),
    );
    assert!(!inert.met);
    assert!(
        inert.detail.starts_with(
            "expected `no_retry_of_non_idempotent` to fail: the detector did not fire"
        ),
        "{}",
        inert.detail
    );
    // A metric is named by its metric's name, and every name must fire.
    let two = counterexample(
        "{ fail: [peak_amplification, amplification_within_budget] }",
        gates,
    )
    .expect("plan");
    let half = expectation(&two, &report(|_| {}));
    assert!(!half.met);
    assert!(
        half.detail
            .contains("expected `amplification_within_budget` to fail"),
        "{}",
        half.detail
    );
    // `expect: fail`: any gate will do, but one must.
    let any = counterexample("fail", gates).expect("plan");
    assert!(expectation(&any, &report(|_| {})).met);
    let none = expectation(
        &any,
        &report(|j| {
            j["violations"]["retried_non_idempotent"] = 0.into();
            j["amplification"]["peak_1s"] = 1.0.into();
        }),
    );
    assert!(!none.met);
    assert!(
        none.detail.contains("the detectors did not fire"),
        "{}",
        none.detail
    );
    // Nothing measured fails every gate, and proves nothing.
    let idle = expectation(
        &any,
        &report(|j| {
            j["logical"] = 0.into();
            j["dropped"] = 1000.into();
        }),
    );
    assert!(!idle.met, "{}", idle.detail);
}

#[test]
fn a_counterexample_names_gates_that_judge_it() {
    let said = counterexample(
        "{ fail: [no_duplicate_side_efects] }",
        "[ no_duplicate_side_effects ]",
    )
    .expect_err("a typo");
    assert!(said.contains("x.yaml:5:"), "{said}");
    assert!(
        said.contains("is expected to fail gate `no_duplicate_side_efects`"),
        "{said}"
    );
    assert!(
        said.contains("did you mean `no_duplicate_side_effects`?"),
        "{said}"
    );
    // A gate scoped to another policy does not judge it.
    let said = counterexample("fail", "[ { check: no_retry_of_permanent, policy: q } ]")
        .expect_err("no gate");
    assert!(said.contains("no gate judges it"), "{said}");
    let said = counterexample("maybe", "[ no_retry_of_permanent ]").expect_err("a word");
    assert!(
        said.contains("`fail`, or `{ fail: [gate, ...] }`"),
        "{said}"
    );
    let said = counterexample("{ fail: [] }", "[ no_retry_of_permanent ]").expect_err("empty");
    assert!(said.contains("names no gate"), "{said}");
}
