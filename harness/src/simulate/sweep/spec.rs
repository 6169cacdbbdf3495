//! `--sweep KEY=V1,V2,...` read against the plan: which policy's key (or the plan's own),
//! and the values, split at commas outside braces and brackets.

use crate::plan::Plan;

/// The plan's own top-level keys: a sweep key starting with one of these is the plan's.
pub(crate) const PLAN_KEYS: &[&str] = &[
    "name",
    "description",
    "seed",
    "duration",
    "drain",
    "target",
    "tiers",
    "load",
    "server",
    "faults",
    "network",
    "gates",
];

const HINT: &str = "e.g. --sweep jittered-budget.budget.ratio=0.05,0.1,0.2";

/// Why `--sweep` was not `KEY=V1,V2,...` for this plan: one variant per rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error("`{0}` is not KEY=V1,V2,...; {HINT}", HINT = HINT)]
    NotKeyValues(String),
    #[error("`{0}` has an empty part; {HINT}", HINT = HINT)]
    EmptyPart(String),
    #[error("`{0}` has an empty value; {HINT}", HINT = HINT)]
    EmptyValue(String),
    #[error("`{0}` names a policy but no key of it; {HINT}", HINT = HINT)]
    PolicyWithoutKey(String),
    #[error(
        "`{key}`: say which policy, `POLICY.{key}` (the plan has: {}), or run one with --policy",
        .policies.join(", ")
    )]
    WhichPolicy { key: String, policies: Vec<String> },
}

/// What `--sweep` asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct Sweep {
    /// `None`: a key of the plan itself.
    pub policy: Option<String>,
    pub key: Vec<String>,
    pub values: Vec<String>,
}

impl Sweep {
    /// `KEY=V1,V2,...`, read against the plan (its policy names) and the policies that run.
    pub fn parse(spec: &str, plan: &Plan, selected: &[String]) -> Result<Sweep, SpecError> {
        let (key, values) = spec
            .split_once('=')
            .ok_or_else(|| SpecError::NotKeyValues(spec.to_owned()))?;
        let parts: Vec<String> = key.split('.').map(str::trim).map(str::to_owned).collect();
        if parts.iter().any(String::is_empty) {
            return Err(SpecError::EmptyPart(key.to_owned()));
        }
        let values = split_values(values);
        if values.is_empty() || values.iter().any(String::is_empty) {
            return Err(SpecError::EmptyValue(spec.to_owned()));
        }
        let names: Vec<&str> = plan.policies.iter().map(|p| p.name.as_str()).collect();
        let (policy, key) = if names.contains(&parts[0].as_str()) {
            if parts.len() < 2 {
                return Err(SpecError::PolicyWithoutKey(key.to_owned()));
            }
            (Some(parts[0].clone()), parts[1..].to_vec())
        } else if PLAN_KEYS.contains(&parts[0].as_str()) {
            (None, parts)
        } else {
            let running: Vec<&str> = if selected.is_empty() {
                names.clone()
            } else {
                selected.iter().map(String::as_str).collect()
            };
            match running.as_slice() {
                [only] => (Some((*only).to_owned()), parts),
                _ => {
                    return Err(SpecError::WhichPolicy {
                        key: key.to_owned(),
                        policies: names.iter().map(|&n| n.to_owned()).collect(),
                    });
                }
            }
        };
        Ok(Sweep {
            policy,
            key,
            values,
        })
    }

    /// The key as written back: `policy.key.path`.
    pub fn name(&self) -> String {
        match &self.policy {
            Some(p) => format!("{p}.{}", self.key.join(".")),
            None => self.key.join("."),
        }
    }
}

/// Values split at commas outside braces and brackets, so `{ fixed: 1s, x: 2 }` is one.
pub(crate) fn split_values(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let (mut depth, mut current) = (0i32, String::new());
    for c in text.chars() {
        match c {
            '{' | '[' => depth += 1,
            '}' | ']' => depth -= 1,
            ',' if depth == 0 => {
                out.push(current.trim().to_owned());
                current.clear();
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    out.push(current.trim().to_owned());
    out
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    /// `spec` read against a plan of two policies, `a` and `b`, with `selected` running.
    fn check(spec: &str, selected: &[&str], expected: Result<(Option<&str>, &str, &[&str]), &str>) {
        let plan = crate::plan::parse(
            Path::new("test.yaml"),
            "duration: 1s\nload:\n  rate: 10\n  requests: [ { name: r, path: / } ]\npolicies: [ { name: a }, { name: b } ]\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let selected: Vec<String> = selected.iter().map(|&s| s.to_owned()).collect();
        let got = Sweep::parse(spec, &plan, &selected)
            .map(|s| (s.policy, s.key.join("."), s.values))
            .map_err(|e| e.to_string());
        let expected = expected
            .map(|(policy, key, values)| {
                (
                    policy.map(str::to_owned),
                    key.to_owned(),
                    values.iter().map(|&v| v.to_owned()).collect::<Vec<_>>(),
                )
            })
            .map_err(str::to_owned);
        assert_eq!(got, expected, "{spec}");
    }

    #[test]
    fn a_key_belongs_to_the_policy_it_names_the_plan_or_the_one_policy_running() {
        check(
            "a.budget.ratio=0.1,0.2",
            &[],
            Ok((Some("a"), "budget.ratio", &["0.1", "0.2"][..])),
        );
        check("load.rate=100", &[], Ok((None, "load.rate", &["100"][..])));
        check(
            "max_attempts=2,3",
            &["b"],
            Ok((Some("b"), "max_attempts", &["2", "3"][..])),
        );
    }

    #[test]
    fn each_malformed_sweep_has_its_own_message() {
        let hint = "e.g. --sweep jittered-budget.budget.ratio=0.05,0.1,0.2";
        check(
            "a.max_attempts",
            &[],
            Err(&format!("`a.max_attempts` is not KEY=V1,V2,...; {hint}")),
        );
        check(
            "a..x=1",
            &[],
            Err(&format!("`a..x` has an empty part; {hint}")),
        );
        check(
            "a.max_attempts=1,,2",
            &[],
            Err(&format!("`a.max_attempts=1,,2` has an empty value; {hint}")),
        );
        check(
            "a=1",
            &[],
            Err(&format!("`a` names a policy but no key of it; {hint}")),
        );
        check(
            "max_attempts=2",
            &[],
            Err(
                "`max_attempts`: say which policy, `POLICY.max_attempts` (the plan has: a, b), or run one with --policy",
            ),
        );
    }

    #[test]
    fn values_split_at_commas_outside_braces() {
        assert_eq!(split_values("0.1, 0.2,0.3"), ["0.1", "0.2", "0.3"]);
        assert_eq!(
            split_values("{ fixed: 1s }, { exponential: { base: 1s, cap: 2s } }"),
            ["{ fixed: 1s }", "{ exponential: { base: 1s, cap: 2s } }"]
        );
    }
}
