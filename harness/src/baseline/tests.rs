#![allow(clippy::unwrap_used, clippy::float_cmp)] // Tests: a panic is the failure report.

use super::{Baseline, Drift, Figures, PlanIdentity, Relative, Tolerance, compare};

fn figures(name: &str) -> Figures {
    Figures {
        name: name.to_owned(),
        offered: 1000,
        logical: 1000,
        succeeded: 900,
        attempts: 1200,
        retries: 200,
        dropped: 0,
        amplification: 1.2,
        server_amplification: Some(1.2),
        peak_amplification: 2.0,
        success_rate: 0.9,
        p50_ms: 4.0,
        p90_ms: 40.0,
        p99_ms: 400.0,
        p999_ms: 900.0,
        recovery_s: Some(1.0),
        dropped_ratio: 0.0,
        violations: 0,
    }
}

fn identity(digest: &str) -> PlanIdentity {
    PlanIdentity {
        name: "p".into(),
        file: "plans/p.yaml".into(),
        seed: 1,
        digest: digest.into(),
    }
}

fn baseline(policies: Vec<Figures>) -> Baseline {
    Baseline {
        schema: super::SCHEMA.into(),
        generated_at: String::new(),
        plan: identity("abc"),
        tolerance: Tolerance::default(),
        policies,
    }
}

/// The verdict of one metric when `edit` changes this run's figures.
fn verdict(metric: &str, edit: impl FnOnce(&mut Figures)) -> Drift {
    let mut now = figures("a");
    edit(&mut now);
    let c = compare(
        &baseline(vec![figures("a")]),
        "b.json",
        &[now],
        &identity("abc"),
        &Tolerance::default(),
    );
    c.rows
        .iter()
        .find(|r| r.metric == metric)
        .unwrap_or_else(|| panic!("no row {metric}"))
        .verdict
}

#[test]
fn each_figure_regresses_only_beyond_its_tolerance_and_never_by_improving() {
    use Drift::{Ok, Regressed};
    type Edit = Box<dyn FnOnce(&mut Figures)>;
    let table: Vec<(&str, Edit, Drift)> = vec![
        ("amplification", Box::new(|f| f.amplification = 1.25), Ok),
        (
            "amplification",
            Box::new(|f| f.amplification = 1.26),
            Regressed,
        ),
        ("amplification", Box::new(|f| f.amplification = 0.5), Ok),
        (
            "server_amplification",
            Box::new(|f| f.server_amplification = Some(1.3)),
            Regressed,
        ),
        (
            "peak_amplification",
            Box::new(|f| f.peak_amplification = 2.25),
            Ok,
        ),
        (
            "peak_amplification",
            Box::new(|f| f.peak_amplification = 2.3),
            Regressed,
        ),
        ("success_rate", Box::new(|f| f.success_rate = 0.88), Ok),
        (
            "success_rate",
            Box::new(|f| f.success_rate = 0.87),
            Regressed,
        ),
        ("success_rate", Box::new(|f| f.success_rate = 1.0), Ok),
        // Latency: +25% and +50 ms must both be exceeded.
        ("p99_ms", Box::new(|f| f.p99_ms = 500.0), Ok),
        ("p99_ms", Box::new(|f| f.p99_ms = 501.0), Regressed),
        ("p50_ms", Box::new(|f| f.p50_ms = 20.0), Ok),
        ("p50_ms", Box::new(|f| f.p50_ms = 24.5), Regressed),
        ("recovery_s", Box::new(|f| f.recovery_s = Some(3.0)), Ok),
        (
            "recovery_s",
            Box::new(|f| f.recovery_s = Some(3.5)),
            Regressed,
        ),
        ("recovery_s", Box::new(|f| f.recovery_s = None), Regressed),
        (
            "dropped_ratio",
            Box::new(|f| f.dropped_ratio = 0.02),
            Regressed,
        ),
        ("violations", Box::new(|f| f.violations = 1), Regressed),
    ];
    for (i, (metric, edit, expected)) in table.into_iter().enumerate() {
        assert_eq!(verdict(metric, edit), expected, "row {i}: {metric}");
    }
}

#[test]
fn a_missing_policy_regresses_a_new_one_is_noted_and_a_changed_plan_is_said() {
    let c = compare(
        &baseline(vec![figures("a"), figures("b")]),
        "b.json",
        &[figures("a"), figures("c")],
        &identity("def"),
        &Tolerance::default(),
    );
    assert!(!c.same_plan);
    assert!(
        c.notes[0].contains("the plan or seed changed"),
        "{:?}",
        c.notes
    );
    let verdict_of = |policy: &str, metric: &str| {
        c.rows
            .iter()
            .find(|r| r.policy == policy && r.metric == metric)
            .map(|r| r.verdict)
    };
    assert_eq!(verdict_of("b", "policy"), Some(Drift::Missing));
    assert_eq!(verdict_of("c", "policy"), Some(Drift::New));
    assert_eq!(verdict_of("a", "amplification"), Some(Drift::Ok));
    let failed: Vec<&str> = c.regressions().map(|r| r.policy.as_str()).collect();
    assert_eq!(failed, ["b"]);
    assert!(!c.passed());
}

#[test]
fn tolerances_are_read_with_defaults_and_checked() {
    let t: Tolerance = serde_json::from_str(
        r#"{ "amplification": 0.1, "p99_ms": { "ratio": 0.5, "floor": 10 } }"#,
    )
    .unwrap();
    assert_eq!(t.amplification, 0.1);
    assert_eq!(
        t.p99_ms,
        Relative {
            ratio: 0.5,
            floor: 10.0
        }
    );
    assert_eq!(t.success_rate, Tolerance::default().success_rate);
    assert_eq!(t.invalid_field(), None);
    let bad = Tolerance {
        success_rate: -0.1,
        ..Tolerance::default()
    };
    assert_eq!(bad.invalid_field(), Some("success_rate"));
    assert!(serde_json::from_str::<Tolerance>(r#"{ "amplificaton": 0.1 }"#).is_err());
}
