//! The `gates` section: invariants by name and bounds on measured figures, each for every
//! policy or for the ones it names.

use super::error::{Found, did_you_mean, found};
use super::locate::Seg;
use super::model::{Check, Gate, GateKind, Metric, NamedPolicy, Target};
use super::spec::GateSpec;

/// Every gate of the plan, checked against the policies it names and the target's ledger.
pub(super) fn resolve(
    specs: Vec<GateSpec>,
    policies: &[NamedPolicy],
    target: &Target,
) -> Result<Vec<Gate>, Found> {
    use Seg::{Index, Key};
    let mut gates = Vec::new();
    for (i, g) in specs.into_iter().enumerate() {
        let gate = gate(i, g)?;
        let needs_ledger = matches!(
            gate.kind,
            GateKind::Check(Check::NoDuplicateSideEffects | Check::ClientServerAgree)
        );
        if needs_ledger && !target.has_ledger() {
            return Err(found(
                vec![Key("gates"), Index(i)],
                format!(
                    "gate `{}` needs the fault-server's ledger, and the target is a black box",
                    gate.name()
                ),
            )
            .hint("remove the gate, or point `target.url` at a fault-server"));
        }
        if let Some(unknown) = gate
            .policies
            .iter()
            .find(|p| !policies.iter().any(|q| &q.name == *p))
        {
            let known: Vec<&str> = policies.iter().map(|p| p.name.as_str()).collect();
            return Err(found(
                vec![Key("gates"), Index(i), Key("policy")],
                format!("gate names policy `{unknown}`, which the plan does not define"),
            )
            .hint(did_you_mean(unknown, &known).map_or_else(
                || format!("the policies are: {}", known.join(", ")),
                |m| format!("{m} The policies are: {}", known.join(", ")),
            )));
        }
        gates.push(gate);
    }
    for (i, policy) in policies.iter().enumerate() {
        if let Some(expect) = &policy.expect {
            expected_gates(i, policy, expect, &gates)?;
        }
    }
    Ok(gates)
}

/// A counterexample needs a gate to fail, and each gate it names must be one that judges
/// it: a name that picks no gate would make the expectation fail for a typo, not a catch.
fn expected_gates(
    i: usize,
    policy: &NamedPolicy,
    expect: &super::model::Expect,
    gates: &[Gate],
) -> Result<(), Found> {
    use Seg::{Index, Key};
    let judging: Vec<String> = gates
        .iter()
        .filter(|g| g.applies_to(&policy.name))
        .map(Gate::name)
        .collect();
    if judging.is_empty() {
        return Err(found(
            vec![Key("policies"), Index(i), Key("expect")],
            format!(
                "policy `{}` is a counterexample (`expect`), and no gate judges it",
                policy.name
            ),
        )
        .hint("add the gate that names its danger, e.g. `- { check: no_duplicate_side_effects, policy: [NAME] }`, or drop `expect:`"));
    }
    for (j, name) in expect.fail.iter().enumerate() {
        if judging.iter().any(|g| super::model::Expect::names(name, g)) {
            continue;
        }
        let words: Vec<&str> = judging
            .iter()
            .map(|g| g.split(' ').next().unwrap_or(g))
            .collect();
        let hint = did_you_mean(name, &words).map_or_else(
            || {
                format!(
                    "the gates that judge `{}` are: {}",
                    policy.name,
                    judging.join(", ")
                )
            },
            |m| {
                format!(
                    "{m} The gates that judge `{}` are: {}",
                    policy.name,
                    judging.join(", ")
                )
            },
        );
        return Err(found(
            vec![
                Key("policies"),
                Index(i),
                Key("expect"),
                Key("fail"),
                Index(j),
            ],
            format!(
                "policy `{}` is expected to fail gate `{name}`, and no such gate judges it",
                policy.name
            ),
        )
        .hint(hint));
    }
    Ok(())
}

/// Warnings for gates the plan as written cannot judge: `synchrony` and `recovery_s` are
/// measured across a windowed fault phase, and without one they fail after every run.
pub(super) fn unjudgeable(gates: &[Gate], has_fault_window: bool) -> Vec<String> {
    if has_fault_window {
        return Vec::new();
    }
    gates
        .iter()
        .filter(|g| {
            matches!(
                g.kind,
                GateKind::Metric {
                    metric: Metric::Synchrony | Metric::RecoveryS,
                    ..
                }
            )
        })
        .map(|g| {
            format!(
                "gate `{}` cannot be judged: it is measured across a windowed fault phase (`from:`/`until:`), and the plan has none, so it fails after every run; give a phase a window or drop the gate",
                g.name()
            )
        })
        .collect()
}

fn gate(i: usize, spec: GateSpec) -> Result<Gate, Found> {
    use Seg::{Index, Key};
    let at = || vec![Key("gates"), Index(i)];
    match spec {
        GateSpec::Check { check, policies } => {
            let kind = named(&Check::ALL, Check::name, &check, "gate", at(), |names| {
                format!("gates: {names}, or `{{ metric: NAME, min|max: X }}`")
            })?;
            Ok(Gate {
                kind: GateKind::Check(kind),
                policies,
            })
        }
        GateSpec::Metric(m) => {
            let name = m.metric.unwrap_or_default();
            let metric = named(&Metric::ALL, Metric::name, &name, "metric", at(), |names| {
                format!("metrics: {names}")
            })?;
            if m.min.is_none() && m.max.is_none() {
                return Err(found(
                    at(),
                    format!("metric gate `{name}` needs `min:` or `max:`"),
                ));
            }
            if m.min.into_iter().chain(m.max).any(|x| !x.is_finite()) {
                return Err(found(
                    at(),
                    format!("metric gate `{name}` has a limit that is not a number"),
                ));
            }
            let (lowest, highest) = metric.range();
            if m.min.is_some_and(|min| min > highest) || m.max.is_some_and(|max| max < lowest) {
                let range = if highest.is_finite() {
                    format!("between {lowest} and {highest}")
                } else {
                    format!("at least {lowest}")
                };
                return Err(found(
                    at(),
                    format!("metric gate `{name}` can never pass: `{name}` is {range}"),
                )
                .hint(if highest.is_finite() {
                    "rates are fractions: write 0.95 for 95%"
                } else {
                    "check the limit's sign and unit"
                }));
            }
            if let (Some(min), Some(max)) = (m.min, m.max)
                && min > max
            {
                return Err(found(
                    at(),
                    format!("metric gate `{name}` can never pass: min {min} > max {max}"),
                ));
            }
            Ok(Gate {
                kind: GateKind::Metric {
                    metric,
                    min: m.min,
                    max: m.max,
                },
                policies: m.policy.unwrap_or_default().0,
            })
        }
    }
}

/// The one of `all` called `wanted`; or "unknown {what} `wanted`", with a hint that is the
/// closest name or, failing that, `list` of all the names.
fn named<T: Copy>(
    all: &[T],
    name: fn(T) -> &'static str,
    wanted: &str,
    what: &str,
    path: Vec<Seg>,
    list: impl FnOnce(String) -> String,
) -> Result<T, Found> {
    if let Some(hit) = all.iter().copied().find(|x| name(*x) == wanted) {
        return Ok(hit);
    }
    let names: Vec<&str> = all.iter().map(|x| name(*x)).collect();
    let hint = did_you_mean(wanted, &names).unwrap_or_else(|| list(names.join(", ")));
    Err(found(path, format!("unknown {what} `{wanted}`")).hint(hint))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    /// `policy:` on a gate takes one name or a list, on metric and check gates alike.
    #[test]
    fn a_gate_names_one_policy_or_a_list() {
        let plan = "duration: 1s\nload:\n  rate: 10\n  requests: [ { name: r, path: / } ]\n\
                    policies: [ { name: a }, { name: b } ]\ngates:\n\
                    \x20 - no_retry_of_permanent\n\
                    \x20 - { metric: success_rate, min: 0.5, policy: a }\n\
                    \x20 - { metric: success_rate, min: 0.5, policy: [a, b] }\n\
                    \x20 - { check: no_retry_of_permanent, policy: b }\n\
                    \x20 - { check: no_retry_of_permanent, policy: [b, a] }\n";
        let plan = super::super::parse(Path::new("p.yaml"), plan).unwrap_or_else(|e| panic!("{e}"));
        let named: Vec<Vec<String>> = plan.gates.into_iter().map(|g| g.policies).collect();
        assert_eq!(
            named,
            [vec![], vec!["a"], vec!["a", "b"], vec!["b"], vec!["b", "a"]]
        );
    }

    /// A misspelt metric, gate or policy name is refused at its gate with the closest
    /// name; one close to none lists them all.
    #[test]
    fn misspelt_metrics_gates_and_policies_suggest_the_closest_name() {
        let base = "duration: 1s\nload:\n  rate: 10\n  requests: [ { name: r, path: / } ]\n\
                    policies: [ { name: jittered-budget }, { name: naive } ]\ngates:\n";
        for (gate, message, hint) in [
            (
                "{ metric: sucess_rate, min: 0.5 }",
                "unknown metric `sucess_rate`",
                "did you mean `success_rate`?",
            ),
            (
                "{ metric: p99ms, max: 100 }",
                "unknown metric `p99ms`",
                "did you mean `p99_ms`?",
            ),
            (
                "{ metric: zzz, max: 1 }",
                "unknown metric `zzz`",
                "metrics: success_rate",
            ),
            (
                "no_retry_of_permanant",
                "unknown gate `no_retry_of_permanant`",
                "did you mean `no_retry_of_permanent`?",
            ),
            (
                "{ check: no_duplicate_side_efects }",
                "unknown gate `no_duplicate_side_efects`",
                "did you mean `no_duplicate_side_effects`?",
            ),
            (
                "{ metric: success_rate, min: 0.5, policy: jitered-budget }",
                "gate names policy `jitered-budget`",
                "did you mean `jittered-budget`? The policies are: jittered-budget, naive",
            ),
        ] {
            let text = format!("{base}  - {gate}\n");
            let error = super::super::parse(Path::new("p.yaml"), &text).expect_err(gate);
            assert_eq!(error.line, Some(7), "{error}");
            assert!(error.message.starts_with(message), "{error}");
            assert_eq!(
                error.hint.as_deref().map(|h| h.starts_with(hint)),
                Some(true),
                "{gate}: {error}"
            );
        }
    }
}
