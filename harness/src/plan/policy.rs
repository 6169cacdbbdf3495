//! The `policies` section: each policy starts from its preset (or from "no retries") and
//! takes what the plan says on top; `chaos_policy` then validates the result.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use chaos_policy::{
    Backoff, ConfigError, Policy, PolicyConfig, Preset, RetryAfter, RetryCondition, RetryOn,
};

use super::error::{Found, did_you_mean, found};
use super::import;
use super::locate::Seg;
use super::merge;
use super::mesh::MeshTier;
use super::model::{NamedPolicy, TierKind, TierPolicy};
use super::proxy::ProxyTier;
use super::spec::{Condition, DurationOrNone, PolicySpec, TierSpec, Toggle};

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
pub const MAX_POLICIES: usize = 64;

/// Every policy of the plan, each named once with a name that can go into a header, and
/// its policy at each of the plan's relay `tiers`; an `import:` reads its files relative
/// to `dir`. `grpc_calls`: the load is gRPC calls (`target.protocol: grpc`).
pub(super) fn resolve(
    specs: Vec<PolicySpec>,
    tiers: &[String],
    kinds: TierKinds<'_>,
    dir: &Path,
    grpc_calls: bool,
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
        let share = std::mem::take(&mut p.share_budget);
        let base = vec![Key("policies"), Index(i)];
        let (mut policy, imported) = policy(&base, p, dir, grpc_calls)?;
        note_import(&name, imported, &mut warnings, &mut sources);
        let (tier_policies, tier_warnings, tier_sources) =
            tier_policies(&base, &policy, tier_specs, (tiers, kinds), dir)?;
        warnings.extend(tier_warnings);
        sources.extend(tier_sources);
        policy.tiers = tier_policies;
        if share {
            policy.share_budget = Some(shared_budget(&base, &policy)?);
        }
        policies.push(policy);
    }
    Ok(Resolved {
        policies,
        warnings,
        sources,
    })
}

/// `share_budget: true` checked: a variant with relay tiers and a token bucket to share.
/// What a request takes out of the bucket is the most its chain could spend: each hop's
/// retries times the attempts of the hops above it, so no request is refused a retry
/// its chain's policies allow while the bucket holds enough.
fn shared_budget(base: &[Seg], variant: &NamedPolicy) -> Result<u32, Found> {
    let at = || key_at(base, "share_budget");
    if variant.tiers.is_empty() {
        return Err(found(at(), format!("policy `{}` shares its budget, but the plan has no relay tiers", variant.name))
            .hint("`share_budget` is for a call chain (`tiers:` at the top of the plan): without one, the client's budget is already the only one"));
    }
    let bucket = variant
        .policy
        .config()
        .budget
        .as_ref()
        .is_some_and(|b| b.build().is_ok_and(|b| b.can_share()));
    if !bucket {
        return Err(found(at(), format!("policy `{}` shares its budget, but has no token bucket to share", variant.name))
            .hint("give it `budget: { ratio: 0.1 }` (a token bucket): its tokens are what a request carries down the chain; the other kinds cannot be handed out and back"));
    }
    let mut above: u64 = 1;
    let mut retries: u64 = 0;
    let hops = std::iter::once(&variant.policy).chain(variant.tiers.iter().map(|t| &t.policy));
    for policy in hops {
        let attempts = u64::from(policy.config().max_attempts.max(1));
        retries = retries.saturating_add(above.saturating_mul(attempts - 1));
        above = above.saturating_mul(attempts);
    }
    Ok(u32::try_from(retries).unwrap_or(u32::MAX))
}

/// A policy on its own (a relay tier's file): no name needed, no tiers.
pub(super) fn single(mut spec: PolicySpec, dir: &Path) -> Result<Policy, Found> {
    if !spec.tiers.is_empty() {
        return Err(found(vec![Seg::Key("tiers")], "a relay's policy has no `tiers`")
            .hint("the relay forwards to one next hop (`--to`); chain relays by pointing each at the next"));
    }
    if spec.expect.is_some() {
        return Err(found(vec![Seg::Key("expect")], "a relay's policy has no `expect`")
            .hint("`expect: fail` marks a plan's policy as a counterexample its gates must catch; a relay has no gates"));
    }
    if spec.share_budget {
        return Err(found(vec![Seg::Key("share_budget")], "a relay's policy has no `share_budget`")
            .hint("a relay spends the allowance its caller sends (`x-chaos-retry-allowance`) on its own; the plan's client decides to share"));
    }
    if spec.name.is_empty() {
        spec.name = "relay".to_owned();
    }
    let (named, _) = policy(&[], spec, dir, false)?;
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

/// What an import could not model, the text of the files it read, and where each field
/// came from.
type ImportedBy = Option<(Vec<String>, Vec<String>, import::Origins)>;

/// Keeps what policy `name`'s import could not model (as warnings) and the files it read.
fn note_import(
    name: &str,
    imported: ImportedBy,
    warnings: &mut Vec<String>,
    sources: &mut Vec<String>,
) {
    if let Some((import_warnings, texts, _)) = imported {
        warnings.extend(
            import_warnings
                .into_iter()
                .map(|w| format!("policy `{name}` (import): {w}")),
        );
        sources.extend(texts);
    }
}

/// Aligned with the plan's tiers: each proxy tier's config, and each mesh tier's.
pub(super) type TierKinds<'a> = (&'a [Option<Arc<ProxyTier>>], &'a [Option<Arc<MeshTier>>]);

/// The tiers' policies, what their imports could not model, and the imported files' text.
type TiersResolved = (Vec<TierPolicy>, Vec<String>, Vec<String>);

/// A proxy or mesh tier's policy, which its config sets (`set`: this variant's `tiers:`
/// names it, an error placed by the caller); `None` for a relay tier the variant sets.
fn config_tier(
    tier: &str,
    proxy: Option<&Arc<ProxyTier>>,
    mesh: Option<Arc<MeshTier>>,
    set: bool,
) -> Result<Option<TierPolicy>, Found> {
    if let Some(mesh) = mesh {
        if set {
            return Err(found(vec![], format!("`{tier}` is an {} tier: its mesh config sets its retries", mesh.kind()))
                .hint(format!("remove `{tier}:` from this policy's `tiers:`; to change what the tier does, change {}", mesh.virtual_service.display())));
        }
        return Ok(Some(TierPolicy {
            tier: tier.to_owned(),
            kind: TierKind::Mesh,
            policy: mesh.policy.clone(),
            proxy: None,
            mesh: Some(mesh),
        }));
    }
    let Some(proxy) = proxy else {
        return Ok(None);
    };
    if set {
        return Err(found(
            vec![],
            format!(
                "`{tier}` is an {} tier: its config decides its retries",
                proxy.model.kind.name()
            ),
        )
        .hint(format!(
            "remove `{tier}:` from this policy's `tiers:`; to change what the tier does, change {}",
            proxy.file.display()
        )));
    }
    Ok(Some(TierPolicy {
        tier: tier.to_owned(),
        kind: TierKind::Proxy,
        policy: forward_once(),
        proxy: Some(Arc::clone(proxy)),
        mesh: None,
    }))
}

/// Each plan tier's policy in one variant: `same` (the variant's), `none` (forward once,
/// the default) or a policy of its own, resolved as a plan's policy is.
fn tier_policies(
    base: &[Seg],
    variant: &NamedPolicy,
    mut specs: std::collections::BTreeMap<String, TierSpec>,
    (tiers, (proxies, meshes)): (&[String], TierKinds<'_>),
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
    for (i, (tier, proxy)) in tiers
        .iter()
        .zip(proxies.iter().chain(std::iter::repeat(&None)))
        .enumerate()
    {
        let mesh = meshes.get(i).cloned().flatten();
        if let Some(fixed) = config_tier(tier, proxy.as_ref(), mesh, specs.contains_key(tier))
            .map_err(|f| Found {
                path: at(tier),
                ..f
            })?
        {
            out.push(fixed);
            continue;
        }
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
                if spec.expect.is_some() {
                    return Err(found(at(tier), format!("tier `{tier}` of policy `{}` has an `expect`", variant.name))
                        .hint("a variant is a counterexample as a whole: put `expect:` on the policy, beside its `tiers:`"));
                }
                if spec.share_budget {
                    return Err(found(at(tier), format!("tier `{tier}` of policy `{}` has `share_budget`", variant.name))
                        .hint("a variant shares its budget as a whole: put `share_budget: true` on the policy, beside its `tiers:`"));
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
                let (named, imported) = policy(&at(tier), *spec, dir, false)?;
                note_import(&name, imported, &mut warnings, &mut sources);
                (TierKind::Own, named.policy)
            }
        };
        out.push(TierPolicy {
            tier: tier.clone(),
            kind,
            policy,
            proxy: None,
            mesh: None,
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

fn policy(
    base: &[Seg],
    spec: PolicySpec,
    dir: &Path,
    grpc_calls: bool,
) -> Result<(NamedPolicy, ImportedBy), Found> {
    let (mut config, preset, imported) = starting_config(base, &spec, dir)?;
    let grpc_client = preset == Some(Preset::Grpc)
        || spec
            .import
            .as_ref()
            .is_some_and(|i| i.grpc_service_config.is_some());
    if grpc_calls && grpc_client {
        // A gRPC client retries any call its retryPolicy names, whatever the method does
        // (A6 leaves the safety of a retry to the service's owner); over HTTP the preset
        // and the import stand in for a client that still minds the method.
        config.retry_non_idempotent = true;
    }
    let name = spec.name.clone();
    let import = spec.import.as_ref().map(import_written);
    let expect = spec
        .expect
        .clone()
        .map(|e| super::model::Expect { fail: e.fail });
    let imported_fields = super::resolved::policy(&config);
    apply_plan_keys(&mut config, base, spec)?;
    let origins = origins(imported.as_ref(), &imported_fields, &config);
    let policy = Policy::new(config)
        .map_err(|e| found(key_at(base, key_of(&e)), format!("policy `{name}`: {e}")))?;
    Ok((
        NamedPolicy {
            name,
            preset,
            import,
            policy,
            tiers: Vec::new(),
            expect,
            share_budget: None,
            origins,
        },
        imported,
    ))
}

/// Where each field of an imported policy came from: the import's origin, or the plan's
/// key where the key changed the imported value.
fn origins(
    imported: Option<&(Vec<String>, Vec<String>, import::Origins)>,
    imported_fields: &super::resolved::Value,
    config: &PolicyConfig,
) -> import::Origins {
    let Some((_, _, origins)) = imported else {
        return Vec::new();
    };
    let fields = super::resolved::policy(config);
    origins
        .iter()
        .map(|(field, from)| {
            let same = match (imported_fields.get(field), fields.get(field)) {
                (Some(a), Some(b)) => a.same(b),
                (a, b) => a.is_none() && b.is_none(),
            };
            let from = if same {
                from.clone()
            } else {
                format!("the plan's `{field}`, over the import")
            };
            (*field, from)
        })
        .collect()
}

/// An `import:` as a plan writes it, on one line.
fn import_written(spec: &super::spec::ImportSpec) -> String {
    use super::resolved::Value;
    let path = |p: &Option<std::path::PathBuf>| p.as_ref().map(|p| p.display().to_string());
    let keys = [
        ("grpc_service_config", path(&spec.grpc_service_config)),
        ("service", spec.service.clone()),
        ("method", spec.method.clone()),
        ("envoy_route", path(&spec.envoy_route)),
        ("route", spec.route.clone()),
        ("envoy_cluster", path(&spec.envoy_cluster)),
        ("istio_virtual_service", path(&spec.istio_virtual_service)),
        ("istio_destination_rule", path(&spec.istio_destination_rule)),
    ];
    Value::Map(
        keys.into_iter()
            .filter_map(|(k, v)| Some((k.to_owned(), Value::Text(v?))))
            .collect(),
    )
    .flow()
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
        .map_err(|e| {
            let names = Preset::ALL.map(Preset::name);
            let written = spec.preset.as_deref().unwrap_or_default().trim();
            let f = found(at("preset"), e.to_string());
            match did_you_mean(&written.to_ascii_lowercase(), &names) {
                Some(hint) => f.hint(hint),
                None => f.hint("`harness presets` shows each preset's policy and its source"),
            }
        })?;
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
            let (got, texts, origins) = import::load(dir, import).map_err(|p| {
                let f = found(
                    at("import"),
                    format!("policy `{}`: {}", spec.name, p.message),
                );
                match p.hint {
                    Some(h) => f.hint(h),
                    None => f,
                }
            })?;
            imported = Some((got.warnings, texts, origins));
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
/// the preset said, and a block (`backoff`, `budget`, `breaker`) replaces the fields it
/// names (`merge`).
fn apply_plan_keys(config: &mut PolicyConfig, base: &[Seg], spec: PolicySpec) -> Result<(), Found> {
    let at = |key| key_at(base, key);
    let name = &spec.name;
    let refused = |key, r: merge::Refused| {
        let f = found(at(key), format!("policy `{name}`: {}", r.message));
        match r.hint {
            Some(h) => f.hint(h),
            None => f,
        }
    };
    config.retry_after =
        retry_after(&spec, config.retry_after).map_err(|r| refused("retry_after_max_extra", r))?;
    if let Some(n) = spec.max_attempts {
        config.max_attempts = n;
    }
    if let Some(DurationOrNone(t)) = spec.attempt_timeout {
        config.attempt_timeout = t;
    }
    if let Some(DurationOrNone(d)) = spec.deadline {
        config.deadline = d;
    }
    if let Some(b) = spec.backoff {
        config.backoff = merge::backoff(b, &config.backoff).map_err(|r| refused("backoff", r))?;
    }
    if let Some(list) = &spec.retry_on {
        let mut conditions = Vec::new();
        for Condition(item) in list {
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
    match spec.budget {
        Some(Toggle::Off) => config.budget = None,
        Some(Toggle::On(b)) => {
            config.budget =
                Some(merge::budget(b, config.budget.as_ref()).map_err(|r| refused("budget", r))?);
        }
        None => {}
    }
    match spec.breaker {
        Some(Toggle::Off) => config.breaker = None,
        Some(Toggle::On(b)) => {
            config.breaker = Some(
                merge::breaker(b, config.breaker.as_ref()).map_err(|r| refused("breaker", r))?,
            );
        }
        None => {}
    }
    if let Some(honor) = spec.honor_no_retry {
        config.honor_no_retry = honor;
    }
    Ok(())
}

/// What the policy does with `Retry-After`, from the plan's keys over what it did (`was`):
/// `honor_retry_after: true` keeps a ceiling the policy had, and a ceiling alone
/// (`retry_after_max`, `retry_after_max_extra`) means "honour it".
fn retry_after(spec: &PolicySpec, was: RetryAfter) -> Result<RetryAfter, merge::Refused> {
    let max = spec.retry_after_max.map(|d| d.get());
    let extra = spec.retry_after_max_extra.map(|d| d.get());
    if max.is_some() && extra.is_some() {
        return Err(merge::Refused {
            message: "`retry_after_max` and `retry_after_max_extra` are two ways to honour Retry-After".to_owned(),
            hint: Some("keep one: `retry_after_max` waits what the server asks up to a ceiling, `retry_after_max_extra` clamps it to [backoff, backoff + extra]".to_owned()),
        });
    }
    Ok(match (spec.honor_retry_after, max, extra) {
        (Some(false), _, _) => RetryAfter::Ignore,
        (_, Some(max), None) => RetryAfter::Honor { max },
        (_, None, Some(max_extra)) => RetryAfter::Clamp { max_extra },
        (Some(true), _, _) => match was {
            RetryAfter::Ignore => RetryAfter::Honor {
                max: DEFAULT_RETRY_AFTER_MAX,
            },
            honoured => honoured,
        },
        (None, _, _) => was,
    })
}

/// The key of a policy a configuration error points at: the first part of its field
/// (`budget` for `budget.ratio`).
fn key_of(error: &ConfigError) -> &'static str {
    let field = error.field();
    field.split_once('.').map_or(field, |(key, _)| key)
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

    /// `none` switches off a limit a preset or an import set, and `honor_retry_after`
    /// keeps the ceiling the policy had (the grpc preset's 60 s, not the plan's 30 s).
    #[test]
    fn none_lifts_a_limit_and_retry_after_keeps_its_ceiling() {
        use std::time::Duration;

        use chaos_policy::{RetryAfter, RetryCondition, RetryOn};
        let policy = |keys: &str| {
            let text = format!(
                "duration: 1s\nload:\n  rate: 10\n  requests: [ {{ name: r, path: / }} ]\npolicies:\n  - name: a\n{keys}"
            );
            super::super::parse(Path::new("p.yaml"), &text)
                .map(|p| p.policies[0].policy.config().clone())
        };
        let envoy = policy("    preset: envoy\n    deadline: none\n    attempt_timeout: 1s\n")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(envoy.deadline, None);
        assert_eq!(envoy.attempt_timeout, Some(Duration::from_secs(1)));
        let cases = [
            (
                "    preset: grpc\n    honor_retry_after: true\n",
                RetryAfter::Honor {
                    max: Duration::from_secs(60),
                },
            ),
            (
                "    honor_retry_after: true\n",
                RetryAfter::Honor {
                    max: Duration::from_secs(30),
                },
            ),
            (
                "    preset: grpc\n    retry_after_max: 5s\n",
                RetryAfter::Honor {
                    max: Duration::from_secs(5),
                },
            ),
            (
                "    retry_after_max_extra: 5s\n",
                RetryAfter::Clamp {
                    max_extra: Duration::from_secs(5),
                },
            ),
            (
                "    preset: aws-standard-2026\n    honor_retry_after: true\n",
                RetryAfter::Clamp {
                    max_extra: Duration::from_secs(5),
                },
            ),
            (
                "    preset: grpc\n    honor_retry_after: false\n",
                RetryAfter::Ignore,
            ),
        ];
        for (keys, expected) in cases {
            let got = policy(keys).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(got.retry_after, expected, "{keys}");
        }
        let error = policy("    retry_after_max: 5s\n    retry_after_max_extra: 5s\n")
            .expect_err("two ceilings");
        assert_eq!((error.line, error.column), (Some(8), Some(5)));
        assert!(
            error.message.contains("two ways to honour Retry-After"),
            "{error}"
        );
        // A status code may be written as YAML reads it, a number.
        let codes =
            policy("    retry_on: [gateway-error, 429]\n").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            codes.retry_on,
            RetryOn::new([RetryCondition::GatewayError, RetryCondition::Status(429)])
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

    /// A misspelt preset is located at its key and the closest name suggested; one too far
    /// from every name points at `harness presets`.
    #[test]
    fn an_unknown_preset_suggests_the_closest_one() {
        let base = "duration: 1s\nload:\n  rate: 10\n  requests: [ { name: r, path: / } ]\npolicies:\n  - name: a\n";
        for (written, hint) in [
            ("aws-standrd", "did you mean `aws-standard`?"),
            ("envoi", "did you mean `envoy`?"),
            ("aws-standard-206", "did you mean `aws-standard-2026`?"),
            ("Finagel", "did you mean `finagle`?"),
            (
                "something-else-entirely",
                "`harness presets` shows each preset",
            ),
        ] {
            let text = format!("{base}    preset: {written}\n");
            let error = super::super::parse(Path::new("p.yaml"), &text).expect_err(written);
            assert_eq!((error.line, error.column), (Some(7), Some(5)), "{error}");
            assert!(error.message.contains(written), "{error}");
            assert_eq!(
                error.hint.as_deref().map(|h| h.starts_with(hint)),
                Some(true),
                "{written}: {error}"
            );
        }
    }
}
