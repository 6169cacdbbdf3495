#![allow(clippy::unwrap_used, clippy::float_cmp)] // Tests: a panic is the failure report.

use super::{
    Baseline, Drift, Figures, Invalid, PlanIdentity, ReadError, Relative, Tolerance, compare, read,
};

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
        resolved: None,
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
fn a_policy_read_back_with_its_keys_in_another_order_has_not_changed() {
    use crate::plan::resolved::Value;
    let field = |k: &str, v: Value| (k.to_owned(), v);
    let written = Value::Map(vec![
        field("max_attempts", Value::Int(2)),
        field(
            "backoff",
            Value::Map(vec![
                field("fixed", Value::Text("10ms".into())),
                field("jitter", Value::Text("none".into())),
            ]),
        ),
    ]);
    // As a tool that sorts keys (serde_json::Value, jq -S) writes it back.
    let sorted = Value::Map(vec![
        field(
            "backoff",
            Value::Map(vec![
                field("jitter", Value::Text("none".into())),
                field("fixed", Value::Text("10ms".into())),
            ]),
        ),
        field("max_attempts", Value::Int(2)),
    ]);
    let with = |resolved: &Value| Figures {
        resolved: Some(resolved.clone()),
        ..figures("a")
    };
    let c = compare(
        &baseline(vec![with(&written)]),
        "b.json",
        &[with(&sorted)],
        &identity("abc"),
        &Tolerance::default(),
    );
    assert!(c.notes.is_empty(), "{:?}", c.notes);

    let Value::Map(mut more) = sorted else {
        unreachable!()
    };
    more[1].1 = Value::Int(5);
    let c = compare(
        &baseline(vec![with(&written)]),
        "b.json",
        &[with(&Value::Map(more))],
        &identity("abc"),
        &Tolerance::default(),
    );
    assert_eq!(
        c.notes,
        ["policy `a` changed since the baseline: max_attempts 2 → 5"]
    );
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

/// What `validate` says of the test baseline (policies `a` and `b`) after `edit`.
fn refused(edit: impl FnOnce(&mut Baseline)) -> Result<(), Invalid> {
    let mut b = baseline(vec![figures("a"), figures("b")]);
    edit(&mut b);
    b.validate()
}

#[test]
fn a_baseline_that_would_pass_everything_or_fail_unchanged_figures_is_refused() {
    type Edit = Box<dyn FnOnce(&mut Baseline)>;
    let tolerance =
        |field: &'static str, value: f64, max: f64| Err(Invalid::Tolerance { field, value, max });
    let figure = |field: &'static str, value: f64, range: &'static str| {
        Err(Invalid::Figure {
            policy: "b".into(),
            field,
            value,
            range,
        })
    };
    const RATIO: &str = "a number from 0 to 1";
    const NON_NEGATIVE: &str = "a number, zero or more";
    let table: Vec<(&str, Edit, Result<(), Invalid>)> = vec![
        ("as saved", Box::new(|_| ()), Ok(())),
        (
            "no policies",
            Box::new(|b| b.policies.clear()),
            Err(Invalid::NoPolicies),
        ),
        (
            "a duplicate name",
            Box::new(|b| b.policies[1].name = "a".into()),
            Err(Invalid::DuplicatePolicy { policy: "a".into() }),
        ),
        (
            "a negative tolerance",
            Box::new(|b| b.tolerance.amplification = -0.05),
            tolerance("amplification", -0.05, 100.0),
        ),
        (
            "a tolerance that turns the check off",
            Box::new(|b| b.tolerance.success_rate = 1e308),
            tolerance("success_rate", 1e308, 1.0),
        ),
        (
            "a rate tolerance above the whole range",
            Box::new(|b| b.tolerance.dropped_ratio = 1.5),
            tolerance("dropped_ratio", 1.5, 1.0),
        ),
        (
            "a rate tolerance of the whole range",
            Box::new(|b| b.tolerance.success_rate = 1.0),
            Ok(()),
        ),
        (
            "an absurd amplification",
            Box::new(|b| b.tolerance.peak_amplification = 101.0),
            tolerance("peak_amplification", 101.0, 100.0),
        ),
        (
            "an absurd latency ratio",
            Box::new(|b| b.tolerance.p99_ms.ratio = 1000.0),
            tolerance("p99_ms.ratio", 1000.0, 100.0),
        ),
        (
            "a floor over an hour",
            Box::new(|b| b.tolerance.p50_ms.floor = 3_600_001.0),
            tolerance("p50_ms.floor", 3_600_001.0, 3_600_000.0),
        ),
        (
            "a floor of an hour",
            Box::new(|b| b.tolerance.p50_ms.floor = 3_600_000.0),
            Ok(()),
        ),
        (
            "a recovery over an hour",
            Box::new(|b| b.tolerance.recovery_s = 3601.0),
            tolerance("recovery_s", 3601.0, 3600.0),
        ),
        (
            "an infinite tolerance",
            Box::new(|b| b.tolerance.amplification = f64::INFINITY),
            tolerance("amplification", f64::INFINITY, 100.0),
        ),
        (
            "a success rate of 7",
            Box::new(|b| b.policies[1].success_rate = 7.0),
            figure("success_rate", 7.0, RATIO),
        ),
        (
            "a negative success rate",
            Box::new(|b| b.policies[1].success_rate = -0.1),
            figure("success_rate", -0.1, RATIO),
        ),
        (
            "a dropped ratio above 1",
            Box::new(|b| b.policies[1].dropped_ratio = 1.01),
            figure("dropped_ratio", 1.01, RATIO),
        ),
        (
            "a negative amplification",
            Box::new(|b| b.policies[1].amplification = -1.0),
            figure("amplification", -1.0, NON_NEGATIVE),
        ),
        (
            "a negative server amplification",
            Box::new(|b| b.policies[1].server_amplification = Some(-1.0)),
            figure("server_amplification", -1.0, NON_NEGATIVE),
        ),
        (
            "no server amplification",
            Box::new(|b| b.policies[1].server_amplification = None),
            Ok(()),
        ),
        (
            "a negative peak",
            Box::new(|b| b.policies[1].peak_amplification = -2.0),
            figure("peak_amplification", -2.0, NON_NEGATIVE),
        ),
        (
            "a negative latency",
            Box::new(|b| b.policies[1].p999_ms = -1.0),
            figure("p999_ms", -1.0, NON_NEGATIVE),
        ),
        (
            "an infinite latency",
            Box::new(|b| b.policies[1].p50_ms = f64::INFINITY),
            figure("p50_ms", f64::INFINITY, NON_NEGATIVE),
        ),
        (
            "a negative recovery",
            Box::new(|b| b.policies[1].recovery_s = Some(-1.0)),
            figure("recovery_s", -1.0, NON_NEGATIVE),
        ),
        (
            "no recovery",
            Box::new(|b| b.policies[1].recovery_s = None),
            Ok(()),
        ),
    ];
    for (case, edit, expected) in table {
        assert_eq!(refused(edit), expected, "{case}");
    }
    // NaN compares unequal to itself: match the variant instead.
    for (case, edit) in [
        (
            "p99_ms",
            Box::new(|b: &mut Baseline| b.policies[0].p99_ms = f64::NAN)
                as Box<dyn FnOnce(&mut Baseline)>,
        ),
        (
            "success_rate",
            Box::new(|b: &mut Baseline| b.policies[0].success_rate = f64::NAN),
        ),
        (
            "dropped_ratio",
            Box::new(|b: &mut Baseline| b.tolerance.dropped_ratio = f64::NAN),
        ),
    ] {
        match refused(edit) {
            Err(Invalid::Figure { field, value, .. } | Invalid::Tolerance { field, value, .. }) => {
                assert_eq!(field, case);
                assert!(value.is_nan());
            }
            other => panic!("NaN {case}: {other:?}"),
        }
    }
}

/// Writes `text` to a fresh file and reads it as a baseline.
fn read_text(name: &str, text: &str) -> Result<Baseline, ReadError> {
    let dir = std::env::temp_dir().join(format!("baseline-strict-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    read(&path)
}

#[test]
fn read_refuses_an_invalid_baseline_naming_the_field_and_the_range() {
    let mut json: serde_json::Value =
        serde_json::from_str(&baseline(vec![figures("a")]).to_json()).unwrap();
    json["policies"][0]["success_rate"] = 7.into();
    let err = read_text("seven.json", &json.to_string()).unwrap_err();
    assert!(matches!(err, ReadError::Invalid { .. }), "{err:?}");
    let said = err.to_string();
    assert!(
        said.contains("policy `a`: `success_rate` is 7.0: it must be a number from 0 to 1"),
        "{said}"
    );

    json["policies"][0]["success_rate"] = 0.9.into();
    json["tolerance"]["p99_ms"]["ratio"] = 1e308.into();
    let said = read_text("off.json", &json.to_string())
        .unwrap_err()
        .to_string();
    assert!(
        said.contains("`tolerance.p99_ms.ratio` is 1e308: it must be a number from 0 to 100"),
        "{said}"
    );

    json["tolerance"]["p99_ms"]["ratio"] = 0.25.into();
    json["policies"] = serde_json::json!([]);
    let said = read_text("empty.json", &json.to_string())
        .unwrap_err()
        .to_string();
    assert!(said.contains("it has no policies"), "{said}");

    // A negative count does not parse (counts are unsigned).
    let mut json: serde_json::Value =
        serde_json::from_str(&baseline(vec![figures("a")]).to_json()).unwrap();
    json["policies"][0]["retries"] = (-1).into();
    let err = read_text("negative.json", &json.to_string()).unwrap_err();
    assert!(matches!(err, ReadError::Format { .. }), "{err:?}");
}

#[test]
fn every_committed_baseline_and_the_defaults_are_accepted() {
    assert_eq!(Tolerance::default().out_of_range(), None);
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../reports/baselines");
    let mut read_any = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "json") {
            if let Err(e) = read(&path) {
                panic!("{e}");
            }
            read_any += 1;
        }
    }
    assert!(read_any > 0, "no baselines in {}", dir.display());
}

#[test]
fn a_plans_tolerance_has_the_same_bounds() {
    let plan = |tolerance: &str| {
        crate::plan::parse(
            std::path::Path::new("t.yaml"),
            &format!(
                "name: t\nduration: 1s\nload: {{ rate: 1, requests: [ {{ name: r, path: / }} ] }}\npolicies: [ {{ name: p }} ]\nbaseline: {{ tolerance: {tolerance} }}\n"
            ),
        )
    };
    assert!(plan("{ success_rate: 1.0 }").is_ok());
    let said = plan("{ success_rate: 1e308 }").unwrap_err().to_string();
    assert!(
        said.contains("`baseline.tolerance.success_rate` must be a number from 0 to 1"),
        "{said}"
    );
    let said = plan("{ p99_ms: { ratio: -1, floor: 5 } }")
        .unwrap_err()
        .to_string();
    assert!(
        said.contains("`baseline.tolerance.p99_ms.ratio` must be a number from 0 to 100"),
        "{said}"
    );
}
