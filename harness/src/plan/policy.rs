//! The `policies` section: each policy starts from its preset (or from "no retries") and
//! takes what the plan says on top; `chaos_policy` then validates the result.

use std::path::Path;
use std::time::Duration;

use chaos_policy::{
    Backoff, BreakerConfig, BudgetConfig, ConfigError, Jitter, Policy, PolicyConfig, Preset,
    QuotaCosts, RetryAfter, RetryCondition, RetryOn,
};

use super::error::{Found, found};
use super::import;
use super::locate::Seg;
use super::model::{NamedPolicy, TierKind, TierPolicy};
use super::spec::{
    BackoffSpec, BreakerSpec, BudgetKindSpec, BudgetSpec, JitterSpec, PolicySpec, TierSpec, Toggle,
};

const DEFAULT_RETRY_AFTER_MAX: Duration = Duration::from_secs(30);

/// The plan's policies, what their imports could not model, and the imported files' text.
pub(super) struct Resolved {
    pub(super) policies: Vec<NamedPolicy>,
    pub(super) warnings: Vec<String>,
    pub(super) sources: Vec<String>,
}

/// The most policies one plan runs. Each is a run of its own, one after another, and its
/// report is kept to the end (a few KB; its ~0.8 MB of histograms are dropped as it
/// ends): a bound on the run's length and on the report's size.
/// Shipped plans have at most five.
pub(super) const MAX_POLICIES: usize = 64;

/// Every policy of the plan, each named once with a name that can go into a header, and
/// its policy at each of the plan's relay `tiers`; an `import:` reads its files relative
/// to `dir`.
pub(super) fn resolve(
    specs: Vec<PolicySpec>,
    tiers: &[String],
    dir: &Path,
) -> Result<Resolved, Found> {
    use Seg::{Index, Key};
    if specs.is_empty() {
        return Err(found(vec![Key("policies")], "the plan has no policies")
            .hint("add one, e.g. `- { name: default, preset: grpc }`"));
    }
    if specs.len() > MAX_POLICIES {
        return Err(found(
            vec![Key("policies"), Index(MAX_POLICIES)],
            format!(
                "the plan has {} policies; at most {MAX_POLICIES} run in one plan",
                specs.len()
            ),
        )
        .hint("each policy is a run of its own and keeps its histograms to the end: split the comparison into several plans, or sweep one key with `harness simulate --sweep`"));
    }
    let mut policies: Vec<NamedPolicy> = Vec::new();
    let (mut warnings, mut sources) = (Vec::new(), Vec::new());
    for (i, mut p) in specs.into_iter().enumerate() {
        if p.name.is_empty() {
            return Err(
                found(vec![Key("policies"), Index(i)], "a policy has no `name`").hint(
                    "name it: reports, gates and request ids refer to it, e.g. `name: naive`",
                ),
            );
        }
        if !is_token(&p.name) {
            return Err(found(vec![Key("policies"), Index(i), Key("name")], format!("policy name `{}` cannot be sent in a header", p.name))
                .hint(format!("use letters, digits, `-`, `_` and `.`: the name goes into `{}` and every request id", fault_server::wire::POLICY)));
        }
        if policies.iter().any(|q| q.name == p.name) {
            return Err(found(
                vec![Key("policies"), Index(i), Key("name")],
                format!("two policies are named `{}`", p.name),
            )
            .hint("each policy needs its own name: reports and gates refer to it"));
        }
        let name = p.name.clone();
        let tier_specs = std::mem::take(&mut p.tiers);
        let base = vec![Key("policies"), Index(i)];
        let (mut policy, imported) = policy(&base, p, dir)?;
        note_import(&name, imported, &mut warnings, &mut sources);
        let (tier_policies, tier_warnings, tier_sources) =
            tier_policies(&base, &policy, tier_specs, tiers, dir)?;
        warnings.extend(tier_warnings);
        sources.extend(tier_sources);
        policy.tiers = tier_policies;
        policies.push(policy);
    }
    Ok(Resolved {
        policies,
        warnings,
        sources,
    })
}

/// A policy on its own (a relay tier's file): no name needed, no tiers.
pub(super) fn single(mut spec: PolicySpec, dir: &Path) -> Result<Policy, Found> {
    if !spec.tiers.is_empty() {
        return Err(found(vec![Seg::Key("tiers")], "a relay's policy has no `tiers`")
            .hint("the relay forwards to one next hop (`--to`); chain relays by pointing each at the next"));
    }
    if spec.name.is_empty() {
        spec.name = "relay".to_owned();
    }
    let (named, _) = policy(&[], spec, dir)?;
    Ok(named.policy)
}

/// Letters, digits, `-`, `_`, `.`: safe in a header, a file name and a request id.
fn is_token(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// What an import could not model, and the text of the files it read.
type ImportedBy = Option<(Vec<String>, Vec<String>)>;

/// Keeps what policy `name`'s import could not model (as warnings) and the files it read.
fn note_import(
    name: &str,
    imported: ImportedBy,
    warnings: &mut Vec<String>,
    sources: &mut Vec<String>,
) {
    if let Some((import_warnings, texts)) = imported {
        warnings.extend(
            import_warnings
                .into_iter()
                .map(|w| format!("policy `{name}` (import): {w}")),
        );
        sources.extend(texts);
    }
}

/// The tiers' policies, what their imports could not model, and the imported files' text.
type TiersResolved = (Vec<TierPolicy>, Vec<String>, Vec<String>);

/// Each plan tier's policy in one variant: `same` (the variant's), `none` (forward once,
/// the default) or a policy of its own, resolved as a plan's policy is.
fn tier_policies(
    base: &[Seg],
    variant: &NamedPolicy,
    mut specs: std::collections::BTreeMap<String, TierSpec>,
    tiers: &[String],
    dir: &Path,
) -> Result<TiersResolved, Found> {
    let at = |tier: &str| {
        let mut path = base.to_vec();
        path.push(Seg::Key("tiers"));
        path.push(Seg::Name(tier.to_owned()));
        path
    };
    if let Some(unknown) = specs.keys().find(|k| !tiers.contains(k)) {
        let known = if tiers.is_empty() {
            "the plan has no `tiers:`".to_owned()
        } else {
            format!("the plan's tiers: {}", tiers.join(", "))
        };
        return Err(found(
            at(unknown),
            format!("policy `{}` sets tier `{unknown}`, which the plan does not have", variant.name),
        )
        .hint(format!("{known}; list the relay tiers at the top level, outermost first: `tiers: [api, backend]`")));
    }
    let (mut out, mut warnings, mut sources) = (Vec::new(), Vec::new(), Vec::new());
    for tier in tiers {
        let (kind, policy) = match specs.remove(tier) {
            None => (TierKind::None, forward_once()),
            Some(TierSpec::Word(word)) => match word.as_str() {
                "none" => (TierKind::None, forward_once()),
                "same" => (TierKind::Same, variant.policy.clone()),
                other => {
                    return Err(found(
                        at(tier),
                        format!("tier `{tier}` of policy `{}` is `{other}`", variant.name),
                    )
                    .hint("a tier's policy is `same` (this policy), `none` (forward once, never retry) or a policy: `{ max_attempts: 3, backoff: ... }`"));
                }
            },
            Some(TierSpec::Policy(mut spec)) => {
                if !spec.tiers.is_empty() {
                    return Err(found(at(tier), format!("tier `{tier}` of policy `{}` has tiers of its own", variant.name))
                        .hint("a tier's policy says how that tier retries; the plan's `tiers:` says which tiers there are"));
                }
                if !spec.name.is_empty() {
                    return Err(found(
                        at(tier),
                        format!("tier `{tier}` of policy `{}` has a name", variant.name),
                    )
                    .hint("drop `name:`: a tier's policy is named by its variant and tier"));
                }
                spec.name = format!("{}@{tier}", variant.name);
                let name = spec.name.clone();
                let (named, imported) = policy(&at(tier), *spec, dir)?;
                note_import(&name, imported, &mut warnings, &mut sources);
                (TierKind::Own, named.policy)
            }
        };
        out.push(TierPolicy {
            tier: tier.clone(),
            kind,
            policy,
        });
    }
    Ok((out, warnings, sources))
}

/// A tier that forwards once and never retries.
pub fn forward_once() -> Policy {
    Policy::new(PolicyConfig {
        max_attempts: 1,
        backoff: Backoff::none(),
        ..PolicyConfig::default()
    })
    .expect("one attempt without backoff is a valid policy")
}

fn policy(base: &[Seg], spec: PolicySpec, dir: &Path) -> Result<(NamedPolicy, ImportedBy), Found> {
    let (mut config, preset, imported) = starting_config(base, &spec, dir)?;
    let name = spec.name.clone();
    apply_plan_keys(&mut config, base, spec)?;
    let policy = Policy::new(config)
        .map_err(|e| found(key_at(base, key_of(&e)), format!("policy `{name}`: {e}")))?;
    Ok((
        NamedPolicy {
            name,
            preset,
            policy,
            tiers: Vec::new(),
        },
        imported,
    ))
}

/// Where key `key` of the policy at `base` is, for an error to point at.
fn key_at(base: &[Seg], key: &'static str) -> Vec<Seg> {
    let mut path = base.to_vec();
    path.push(Seg::Key(key));
    path
}

/// What a policy starts from, its import, its preset or "no retries", and what its
/// import could not model.
fn starting_config(
    base: &[Seg],
    spec: &PolicySpec,
    dir: &Path,
) -> Result<(PolicyConfig, Option<Preset>, ImportedBy), Found> {
    let at = |key| key_at(base, key);
    let preset = spec
        .preset
        .as_deref()
        .map(Preset::parse)
        .transpose()
        .map_err(|e| found(at("preset"), e.to_string()))?;
    let mut imported = None;
    let config = match (&spec.import, preset) {
        (Some(_), Some(_)) => {
            return Err(found(
                at("import"),
                format!("policy `{}` has both `import` and `preset`", spec.name),
            )
            .hint("drop `preset:`: an imported policy starts from the imported config, and the keys next to `import:` override it"));
        }
        (Some(import), None) => {
            let (got, texts) = import::load(dir, import).map_err(|p| {
                let f = found(
                    at("import"),
                    format!("policy `{}`: {}", spec.name, p.message),
                );
                match p.hint {
                    Some(h) => f.hint(h),
                    None => f,
                }
            })?;
            imported = Some((got.warnings, texts));
            got.config
        }
        (None, preset) => preset.map_or_else(
            || PolicyConfig {
                // A plan's policy without a preset starts from "no retries" plus what it
                // says, so nothing is retried that the plan did not ask for.
                max_attempts: 1,
                backoff: Backoff::none(),
                ..PolicyConfig::default()
            },
            Preset::config,
        ),
    };
    Ok((config, preset, imported))
}

/// The plan's keys over the starting config: each key given replaces what the import or
/// the preset said.
fn apply_plan_keys(config: &mut PolicyConfig, base: &[Seg], spec: PolicySpec) -> Result<(), Found> {
    let at = |key| key_at(base, key);
    if let Some(n) = spec.max_attempts {
        config.max_attempts = n;
    }
    if let Some(t) = spec.attempt_timeout {
        config.attempt_timeout = Some(t.get());
    }
    if let Some(d) = spec.deadline {
        config.deadline = Some(d.get());
    }
    if let Some(b) = spec.backoff {
        config.backoff =
            backoff(b).map_err(|m| found(at("backoff"), format!("policy `{}`: {m}", spec.name)))?;
    }
    if let Some(list) = spec.retry_on {
        let mut conditions = Vec::new();
        for item in &list {
            let condition = RetryCondition::parse(item).ok_or_else(|| {
                found(at("retry_on"), format!("unknown retry_on condition `{item}`"))
                    .hint("use any, transient, 5xx, gateway-error, connect-failure, reset, timeout, or a status code")
            })?;
            conditions.push(condition);
        }
        config.retry_on = RetryOn::new(conditions);
    }
    if let Some(b) = spec.retry_non_idempotent {
        config.retry_non_idempotent = b;
    }
    let retry_after_max = spec
        .retry_after_max
        .map_or(DEFAULT_RETRY_AFTER_MAX, |d| d.get());
    match spec.honor_retry_after {
        Some(true) => {
            config.retry_after = RetryAfter::Honor {
                max: retry_after_max,
            }
        }
        Some(false) => config.retry_after = RetryAfter::Ignore,
        None if spec.retry_after_max.is_some() => {
            config.retry_after = RetryAfter::Honor {
                max: retry_after_max,
            };
        }
        None => {}
    }
    match spec.budget {
        Some(Toggle::Off) => config.budget = None,
        Some(Toggle::On(b)) => {
            config.budget = Some(
                budget(b)
                    .map_err(|m| found(at("budget"), format!("policy `{}`: {m}", spec.name)))?,
            );
        }
        None => {}
    }
    match spec.breaker {
        Some(Toggle::Off) => config.breaker = None,
        Some(Toggle::On(b)) => config.breaker = Some(breaker(b)),
        None => {}
    }
    if let Some(honor) = spec.honor_no_retry {
        config.honor_no_retry = honor;
    }
    Ok(())
}

/// The key of a policy a configuration error points at: the first part of its field
/// (`budget` for `budget.ratio`).
fn key_of(error: &ConfigError) -> &'static str {
    let field = error.field();
    field.split_once('.').map_or(field, |(key, _)| key)
}

fn backoff(spec: BackoffSpec) -> Result<Backoff, String> {
    let shapes = usize::from(spec.fixed.is_some())
        + usize::from(spec.exponential.is_some())
        + usize::from(spec.envoy.is_some())
        + usize::from(spec.none);
    if shapes != 1 {
        return Err(
            "a backoff has exactly one of `fixed`, `exponential`, `envoy` (or is `none`)".into(),
        );
    }
    let shape = if let Some(d) = spec.fixed {
        Backoff::fixed(d.get())
    } else if let Some(e) = spec.exponential {
        Backoff::exponential(e.base.get(), e.multiplier.unwrap_or(2.0), e.cap.get())
            .map_err(|e| e.to_string())?
    } else if let Some(e) = spec.envoy {
        let base = e.base.get();
        Backoff::envoy(base, e.cap.map_or(base * 10, |c| c.get())).map_err(|e| e.to_string())?
    } else {
        Backoff::none()
    };
    let jitter = match spec.jitter {
        None | Some(JitterSpec::None) => Jitter::None,
        Some(JitterSpec::Full) => Jitter::Full,
        Some(JitterSpec::Equal) => Jitter::Equal,
        Some(JitterSpec::Decorrelated) => Jitter::Decorrelated,
        Some(JitterSpec::Additive(f)) => Jitter::Additive(f),
        Some(JitterSpec::Proportional(s)) => Jitter::Proportional(s),
    };
    shape.with_jitter(jitter).map_err(|e| e.to_string())
}

fn budget(spec: BudgetSpec) -> Result<BudgetConfig, String> {
    let kind = spec
        .kind
        .unwrap_or(if spec.min_per_sec.is_some() || spec.ttl.is_some() {
            BudgetKindSpec::TtlWindow
        } else if spec.token_ratio.is_some() {
            BudgetKindSpec::Grpc
        } else if spec.capacity.is_some() || spec.retry_cost.is_some() {
            BudgetKindSpec::AwsQuota
        } else if spec.percent.is_some() || spec.min_concurrency.is_some() {
            BudgetKindSpec::EnvoyConcurrency
        } else {
            BudgetKindSpec::TokenBucket
        });
    let need = |v: Option<f64>, key: &str, example: &str| {
        v.ok_or_else(|| {
            format!(
                "this {} budget needs `{key}` (e.g. `{key}: {example}`)",
                kind_name(kind)
            )
        })
    };
    let config = match kind {
        BudgetKindSpec::TokenBucket => {
            let max_tokens = spec.max_tokens.unwrap_or(10.0);
            BudgetConfig::TokenBucket {
                ratio: need(spec.ratio, "ratio", "0.2")?,
                max_tokens,
                initial_tokens: spec.initial_tokens.unwrap_or(max_tokens),
            }
        }
        BudgetKindSpec::TtlWindow => BudgetConfig::TtlWindow {
            ratio: need(spec.ratio, "ratio", "0.2")?,
            min_per_sec: spec.min_per_sec.unwrap_or(10.0),
            ttl: spec.ttl.map_or(Duration::from_secs(10), |t| t.get()),
        },
        BudgetKindSpec::Grpc => BudgetConfig::GrpcThrottle {
            max_tokens: need(spec.max_tokens, "max_tokens", "10")?,
            token_ratio: need(spec.token_ratio, "token_ratio", "0.1")?,
        },
        BudgetKindSpec::AwsQuota => {
            let retry = spec.retry_cost.unwrap_or(5.0);
            BudgetConfig::RetryQuota {
                capacity: spec.capacity.unwrap_or(500.0),
                costs: QuotaCosts {
                    retry,
                    timeout: spec.timeout_cost.unwrap_or(retry * 2.0),
                    throttling: spec.throttling_cost.unwrap_or(retry),
                },
                success_refill: spec.success_refill.unwrap_or(1.0),
            }
        }
        BudgetKindSpec::EnvoyConcurrency => BudgetConfig::Concurrency {
            percent: spec.percent.unwrap_or(20.0),
            min_concurrency: spec.min_concurrency.unwrap_or(3),
        },
    };
    config.build().map_err(|e| e.to_string())?;
    Ok(config)
}

fn kind_name(kind: BudgetKindSpec) -> &'static str {
    match kind {
        BudgetKindSpec::TokenBucket => "token_bucket",
        BudgetKindSpec::TtlWindow => "ttl_window",
        BudgetKindSpec::Grpc => "grpc",
        BudgetKindSpec::AwsQuota => "aws_quota",
        BudgetKindSpec::EnvoyConcurrency => "envoy_concurrency",
    }
}

fn breaker(spec: BreakerSpec) -> BreakerConfig {
    BreakerConfig {
        failure_ratio: spec.failure_ratio,
        min_requests: spec.min_requests.unwrap_or(20),
        window: spec.window.map_or(Duration::from_secs(10), |d| d.get()),
        open_for: spec.open_for.map_or(Duration::from_secs(5), |d| d.get()),
        half_open_probes: spec.half_open_probes.unwrap_or(1),
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use chaos_policy::Jitter;

    #[test]
    fn proportional_jitter_is_a_plan_key() {
        let base = "duration: 1s\nload:\n  rate: 10\n  requests: [ { name: r, path: / } ]\npolicies:\n  - name: a\n    backoff: { exponential: { base: 100ms, cap: 1s }, jitter: ";
        let plan = super::super::parse(
            Path::new("p.yaml"),
            &format!("{base}{{ proportional: 0.2 }} }}\n"),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let backoff = &plan.policies[0].policy.config().backoff;
        assert_eq!(backoff.jitter(), Jitter::Proportional(0.2));
        let error = super::super::parse(
            Path::new("p.yaml"),
            &format!("{base}{{ proportional: 1.5 }} }}\n"),
        )
        .expect_err("a spread above 1");
        assert_eq!((error.line, error.column), (Some(7), Some(5)));
        assert!(
            error.message.contains("`backoff.jitter_spread` is 1.5"),
            "{error}"
        );
    }

    /// Where a rule `chaos_policy` checks is reported: at the key of the policy it names.
    #[test]
    fn policy_errors_point_at_their_key() {
        let base = "duration: 1s\nload:\n  rate: 10\n  requests: [ { name: r, path: / } ]\npolicies:\n  - name: a\n";
        let cases = [
            ("    max_attempts: 0\n", 7, "`max_attempts` is 0"),
            (
                "    preset: grpc\n    max_attempts: 0\n",
                8,
                "`max_attempts` is 0",
            ),
            ("    attempt_timeout: 0s\n", 7, "`attempt_timeout` is zero"),
            ("    deadline: 0s\n", 7, "`deadline` is zero"),
            ("    retry_after_max: 0s\n", 7, "`retry_after_max` is zero"),
            (
                "    breaker:\n      failure_ratio: 1.5\n",
                7,
                "`breaker.failure_ratio` is 1.5",
            ),
            (
                "    breaker: { failure_ratio: 0.5, open_for: 0s }\n",
                7,
                "`breaker.open_for` is zero",
            ),
        ];
        for (policy, line, message) in cases {
            let error = super::super::parse(Path::new("p.yaml"), &format!("{base}{policy}"))
                .expect_err(policy);
            assert_eq!(
                (error.line, error.column),
                (Some(line), Some(5)),
                "{policy}"
            );
            assert!(
                error.message.starts_with(&format!("policy `a`: {message}")),
                "{error}"
            );
        }
    }
}
