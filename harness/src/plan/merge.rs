//! A policy's `backoff:`, `budget:` and `breaker:` blocks over what the policy started
//! from (its import, its preset, or "no retries"), field by field.
//!
//! Why: a user who imports production's gRPC config and writes `budget: { max_tokens: 50 }`
//! means "production's throttle, with 50 tokens", not "a new budget of 50 tokens that
//! needs every other field"; `harness simulate --sweep budget.token_ratio=0.05,0.1` sets
//! one key the same way. A block of the kind it overrides keeps every field it does not
//! name. A block of another kind (a `token_bucket` over an imported gRPC throttle, an
//! `exponential` backoff over Envoy's) replaces it whole, so it must be complete, and the
//! error says what it replaces.

use std::time::Duration;

use chaos_policy::{
    Backoff, BackoffShape, BreakerConfig, BudgetConfig, ConfigError, Jitter, QuotaCosts,
};

use super::resolved;
use super::spec::{
    BackoffSpec, BreakerSpec, BudgetKindSpec, BudgetSpec, EnvoyBackoffSpec, ExponentialSpec,
    JitterSpec,
};

/// Why a block cannot apply, and what to write instead.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Refused {
    pub(super) message: String,
    pub(super) hint: Option<String>,
}

fn refused(message: impl Into<String>, hint: impl Into<String>) -> Refused {
    Refused {
        message: message.into(),
        hint: Some(hint.into()),
    }
}

impl From<ConfigError> for Refused {
    fn from(e: ConfigError) -> Refused {
        Refused {
            message: e.to_string(),
            hint: None,
        }
    }
}

/// `spec` over the policy's backoff `was`.
pub(super) fn backoff(spec: BackoffSpec, was: &Backoff) -> Result<Backoff, Refused> {
    if spec.none {
        return Ok(Backoff::none());
    }
    let shapes = usize::from(spec.fixed.is_some())
        + usize::from(spec.exponential.is_some())
        + usize::from(spec.envoy.is_some());
    if shapes > 1 {
        return Err(refused(
            "a backoff has one shape: `fixed`, `exponential` or `envoy`",
            "e.g. `{ exponential: { base: 100ms, multiplier: 2, cap: 5s }, jitter: full }`, or `none`",
        ));
    }
    let old = was.shape();
    // Whether the shape is the one the policy had: then an unnamed jitter stays too.
    let (shape, same) = if let Some(delay) = spec.fixed {
        (
            BackoffShape::Fixed(delay.get()),
            matches!(old, BackoffShape::Fixed(_)),
        )
    } else if let Some(e) = spec.exponential {
        exponential(e, was)?
    } else if let Some(e) = spec.envoy {
        envoy(e, was)?
    } else {
        if old == BackoffShape::None && spec.jitter.is_some() {
            return Err(refused(
                "the backoff gives a jitter but no shape, and the policy's backoff is `none`: there is no delay to jitter",
                "give a shape too: `{ exponential: { base: 100ms, cap: 5s }, jitter: full }`",
            ));
        }
        (old, true)
    };
    let jitter = match spec.jitter {
        Some(j) => jitter(j),
        None if same => was.jitter(),
        None => Jitter::None,
    };
    let backoff = match shape {
        BackoffShape::None => Backoff::none(),
        BackoffShape::Fixed(delay) => Backoff::fixed(delay),
        BackoffShape::Exponential {
            base,
            multiplier,
            cap,
        } => Backoff::exponential(base, multiplier, cap)?,
        BackoffShape::Envoy { base, cap } => Backoff::envoy(base, cap)?,
    };
    Ok(backoff.with_jitter(jitter)?)
}

/// An `exponential` block over the policy's backoff `was`: the keys it gives over an
/// exponential backoff, or a whole one (`base` and `cap` at least) over another shape;
/// and whether the shape was the policy's.
fn exponential(e: ExponentialSpec, was: &Backoff) -> Result<(BackoffShape, bool), Refused> {
    if let BackoffShape::Exponential {
        base,
        multiplier,
        cap,
    } = was.shape()
    {
        let shape = BackoffShape::Exponential {
            base: e.base.map_or(base, |d| d.get()),
            multiplier: e.multiplier.unwrap_or(multiplier),
            cap: e.cap.map_or(cap, |d| d.get()),
        };
        return Ok((shape, true));
    }
    let (Some(base), Some(cap)) = (e.base, e.cap) else {
        return Err(written_whole(
            was,
            "exponential",
            "`base` and `cap`",
            "{ exponential: { base: 100ms, multiplier: 2, cap: 5s } }",
        ));
    };
    let shape = BackoffShape::Exponential {
        base: base.get(),
        multiplier: e.multiplier.unwrap_or(2.0),
        cap: cap.get(),
    };
    Ok((shape, false))
}

/// An `envoy` block over the policy's backoff `was`: the keys it gives over Envoy's
/// backoff, or a whole one (`base` at least) over another shape; and whether the shape
/// was the policy's.
fn envoy(e: EnvoyBackoffSpec, was: &Backoff) -> Result<(BackoffShape, bool), Refused> {
    if let BackoffShape::Envoy { base, cap } = was.shape() {
        let shape = BackoffShape::Envoy {
            base: e.base.map_or(base, |d| d.get()),
            cap: e.cap.map_or(cap, |d| d.get()),
        };
        return Ok((shape, true));
    }
    let Some(base) = e.base else {
        return Err(written_whole(
            was,
            "envoy",
            "`base`",
            "{ envoy: { base: 25ms, cap: 250ms } }",
        ));
    };
    // Envoy's own default: max_interval is ten times base_interval.
    let cap = e.cap.map_or(base.get() * 10, |d| d.get());
    let shape = BackoffShape::Envoy {
        base: base.get(),
        cap,
    };
    Ok((shape, false))
}

/// A block of another shape than the policy's backoff `was` replaces it, so it must be
/// whole: what it lacks (`needs`), what it replaces, and an `example` of one.
fn written_whole(was: &Backoff, shape: &str, needs: &str, example: &str) -> Refused {
    refused(
        format!("this {shape} backoff needs {needs}"),
        format!(
            "it replaces the policy's backoff, {}, which is not {shape}, so it is written whole: e.g. `{example}`",
            resolved::backoff(was).flow()
        ),
    )
}

fn jitter(spec: JitterSpec) -> Jitter {
    match spec {
        JitterSpec::None => Jitter::None,
        JitterSpec::Full => Jitter::Full,
        JitterSpec::Equal => Jitter::Equal,
        JitterSpec::Decorrelated => Jitter::Decorrelated,
        JitterSpec::Additive(f) => Jitter::Additive(f),
        JitterSpec::Proportional(s) => Jitter::Proportional(s),
    }
}

/// The keys a budget of each kind takes, in the order `--explain` writes them.
fn keys_of(kind: BudgetKindSpec) -> &'static [&'static str] {
    match kind {
        BudgetKindSpec::TokenBucket => &["ratio", "max_tokens", "initial_tokens"],
        BudgetKindSpec::TtlWindow => &["ratio", "min_per_sec", "ttl"],
        BudgetKindSpec::Grpc => &["max_tokens", "token_ratio"],
        BudgetKindSpec::AwsQuota => &[
            "capacity",
            "retry_cost",
            "timeout_cost",
            "throttling_cost",
            "success_refill",
        ],
        BudgetKindSpec::EnvoyConcurrency => &["percent", "min_concurrency"],
    }
}

pub(super) fn kind_name(kind: BudgetKindSpec) -> &'static str {
    match kind {
        BudgetKindSpec::TokenBucket => "token_bucket",
        BudgetKindSpec::TtlWindow => "ttl_window",
        BudgetKindSpec::Grpc => "grpc",
        BudgetKindSpec::AwsQuota => "aws_quota",
        BudgetKindSpec::EnvoyConcurrency => "envoy_concurrency",
    }
}

fn kind_of(budget: &BudgetConfig) -> BudgetKindSpec {
    match budget {
        BudgetConfig::TokenBucket { .. } => BudgetKindSpec::TokenBucket,
        BudgetConfig::TtlWindow { .. } => BudgetKindSpec::TtlWindow,
        BudgetConfig::GrpcThrottle { .. } => BudgetKindSpec::Grpc,
        BudgetConfig::RetryQuota { .. } => BudgetKindSpec::AwsQuota,
        BudgetConfig::Concurrency { .. } => BudgetKindSpec::EnvoyConcurrency,
    }
}

/// The keys `spec` gives, `kind` aside.
fn given(spec: &BudgetSpec) -> Vec<&'static str> {
    let named = [
        ("ratio", spec.ratio.is_some()),
        ("max_tokens", spec.max_tokens.is_some()),
        ("initial_tokens", spec.initial_tokens.is_some()),
        ("min_per_sec", spec.min_per_sec.is_some()),
        ("ttl", spec.ttl.is_some()),
        ("token_ratio", spec.token_ratio.is_some()),
        ("capacity", spec.capacity.is_some()),
        ("retry_cost", spec.retry_cost.is_some()),
        ("timeout_cost", spec.timeout_cost.is_some()),
        ("throttling_cost", spec.throttling_cost.is_some()),
        ("success_refill", spec.success_refill.is_some()),
        ("percent", spec.percent.is_some()),
        ("min_concurrency", spec.min_concurrency.is_some()),
    ];
    named
        .into_iter()
        .filter_map(|(key, set)| set.then_some(key))
        .collect()
}

/// The kind a budget's keys say, when `kind:` does not: the policy's own kind when every
/// key given is one of its keys (`max_tokens` over a gRPC throttle), else by the keys
/// only that kind has.
fn inferred(spec: &BudgetSpec, keys: &[&str], was: Option<&BudgetConfig>) -> BudgetKindSpec {
    if let Some(kind) = spec.kind {
        return kind;
    }
    if let Some(kind) = was.map(kind_of)
        && keys.iter().all(|k| keys_of(kind).contains(k))
    {
        return kind;
    }
    if spec.min_per_sec.is_some() || spec.ttl.is_some() {
        BudgetKindSpec::TtlWindow
    } else if spec.token_ratio.is_some() {
        BudgetKindSpec::Grpc
    } else if spec.capacity.is_some()
        || spec.retry_cost.is_some()
        || spec.timeout_cost.is_some()
        || spec.throttling_cost.is_some()
        || spec.success_refill.is_some()
    {
        BudgetKindSpec::AwsQuota
    } else if spec.percent.is_some() || spec.min_concurrency.is_some() {
        BudgetKindSpec::EnvoyConcurrency
    } else {
        BudgetKindSpec::TokenBucket
    }
}

/// `spec` over the policy's budget `was`: of the same kind, the keys given replace its
/// own; of another kind (or with no budget before), a budget of its own, whose
/// required keys must be there.
pub(super) fn budget(
    spec: BudgetSpec,
    was: Option<&BudgetConfig>,
) -> Result<BudgetConfig, Refused> {
    let keys = given(&spec);
    let kind = inferred(&spec, &keys, was);
    let name = kind_name(kind);
    if let Some(stray) = keys.iter().find(|k| !keys_of(kind).contains(k)) {
        return Err(refused(
            format!("`{stray}` is not a key of a {name} budget"),
            format!(
                "a {name} budget takes {}; a budget is of one kind (`kind:` says which, else its keys do)",
                keys_of(kind).join(", ")
            ),
        ));
    }
    let config = match was.filter(|b| kind_of(b) == kind) {
        Some(base) => over(&spec, *base),
        None => new(&spec, kind, was)?,
    };
    config.build()?;
    Ok(config)
}

/// A budget of the same kind as `base`, with the keys `spec` gives.
fn over(spec: &BudgetSpec, base: BudgetConfig) -> BudgetConfig {
    match base {
        BudgetConfig::TokenBucket {
            ratio,
            max_tokens,
            initial_tokens,
        } => {
            let new_max = spec.max_tokens.unwrap_or(max_tokens);
            BudgetConfig::TokenBucket {
                ratio: spec.ratio.unwrap_or(ratio),
                max_tokens: new_max,
                // A bucket that started full starts full at its new size, and none starts
                // above it.
                initial_tokens: spec
                    .initial_tokens
                    .unwrap_or(if initial_tokens >= max_tokens {
                        new_max
                    } else {
                        initial_tokens.min(new_max)
                    }),
            }
        }
        BudgetConfig::TtlWindow {
            ratio,
            min_per_sec,
            ttl,
        } => BudgetConfig::TtlWindow {
            ratio: spec.ratio.unwrap_or(ratio),
            min_per_sec: spec.min_per_sec.unwrap_or(min_per_sec),
            ttl: spec.ttl.map_or(ttl, |t| t.get()),
        },
        BudgetConfig::GrpcThrottle {
            max_tokens,
            token_ratio,
        } => BudgetConfig::GrpcThrottle {
            max_tokens: spec.max_tokens.unwrap_or(max_tokens),
            token_ratio: spec.token_ratio.unwrap_or(token_ratio),
        },
        BudgetConfig::RetryQuota {
            capacity,
            costs,
            success_refill,
        } => BudgetConfig::RetryQuota {
            capacity: spec.capacity.unwrap_or(capacity),
            costs: QuotaCosts {
                retry: spec.retry_cost.unwrap_or(costs.retry),
                timeout: spec.timeout_cost.unwrap_or(costs.timeout),
                throttling: spec.throttling_cost.unwrap_or(costs.throttling),
            },
            success_refill: spec.success_refill.unwrap_or(success_refill),
        },
        BudgetConfig::Concurrency {
            percent,
            min_concurrency,
        } => BudgetConfig::Concurrency {
            percent: spec.percent.unwrap_or(percent),
            min_concurrency: spec.min_concurrency.unwrap_or(min_concurrency),
        },
    }
}

/// A budget of `kind` from `spec` alone, with the plan's defaults for the keys that have
/// one; `was`, the budget it replaces, is named when a required key is missing.
fn new(
    spec: &BudgetSpec,
    kind: BudgetKindSpec,
    was: Option<&BudgetConfig>,
) -> Result<BudgetConfig, Refused> {
    let need = |v: Option<f64>, key: &str, example: &str| {
        v.ok_or_else(|| {
            let name = kind_name(kind);
            let message = format!("this {name} budget needs `{key}` (e.g. `{key}: {example}`)");
            match was {
                Some(was) => {
                    let was_kind = kind_name(kind_of(was));
                    refused(
                        format!("{message}: it replaces the policy's {was_kind} budget, so it is written whole"),
                        format!(
                            "the policy's budget is {}; to change some of its fields give only {was_kind} keys ({}), or write a whole {name} budget",
                            resolved::budget(was).flow(),
                            keys_of(kind_of(was)).join(", ")
                        ),
                    )
                }
                None => Refused {
                    message,
                    hint: None,
                },
            }
        })
    };
    Ok(match kind {
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
    })
}

/// `spec` over the policy's breaker `was`: the keys given replace its own; without a
/// breaker before, `failure_ratio` is required and the rest have the plan's defaults.
pub(super) fn breaker(
    spec: BreakerSpec,
    was: Option<&BreakerConfig>,
) -> Result<BreakerConfig, Refused> {
    let base = match (was, spec.failure_ratio) {
        (Some(was), _) => *was,
        (None, Some(failure_ratio)) => BreakerConfig {
            failure_ratio,
            min_requests: 20,
            window: Duration::from_secs(10),
            open_for: Duration::from_secs(5),
            half_open_probes: 1,
        },
        (None, None) => {
            return Err(refused(
                "this breaker needs `failure_ratio`: the policy has no breaker to take it from",
                "e.g. `breaker: { failure_ratio: 0.5, min_requests: 20, window: 10s, open_for: 5s }`",
            ));
        }
    };
    Ok(BreakerConfig {
        failure_ratio: spec.failure_ratio.unwrap_or(base.failure_ratio),
        min_requests: spec.min_requests.unwrap_or(base.min_requests),
        window: spec.window.map_or(base.window, |d| d.get()),
        open_for: spec.open_for.map_or(base.open_for, |d| d.get()),
        half_open_probes: spec.half_open_probes.unwrap_or(base.half_open_probes),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // Tests: a panic is the failure report.

    use std::path::Path;

    use chaos_policy::{BackoffShape, BreakerConfig, BudgetConfig, Jitter, Preset};

    fn ms(n: u64) -> std::time::Duration {
        std::time::Duration::from_millis(n)
    }

    /// The one policy of a plan: `keys` under `- name: a`.
    fn policy(keys: &str) -> Result<chaos_policy::PolicyConfig, String> {
        let text = format!(
            "duration: 1s\nload:\n  rate: 10\n  requests: [ {{ name: r, path: / }} ]\npolicies:\n  - name: a\n{keys}"
        );
        super::super::parse(Path::new("p.yaml"), &text)
            .map(|p| p.policies[0].policy.config().clone())
            .map_err(|e| {
                format!(
                    "{} | {}",
                    e.message,
                    e.hint.map(|h| h.to_string()).unwrap_or_default()
                )
            })
    }

    #[test]
    fn one_field_of_a_budget_of_the_same_kind_overrides_that_field() {
        let cases = [
            (
                "    preset: grpc\n    budget: { max_tokens: 50 }\n",
                BudgetConfig::GrpcThrottle {
                    max_tokens: 50.0,
                    token_ratio: 0.1,
                },
            ),
            (
                "    preset: grpc\n    budget: { token_ratio: 0.05 }\n",
                BudgetConfig::GrpcThrottle {
                    max_tokens: 10.0,
                    token_ratio: 0.05,
                },
            ),
            (
                "    preset: finagle\n    budget: { ratio: 0.1 }\n",
                BudgetConfig::TtlWindow {
                    ratio: 0.1,
                    min_per_sec: 10.0,
                    ttl: ms(10_000),
                },
            ),
            (
                "    preset: envoy\n    budget: { min_concurrency: 7 }\n",
                BudgetConfig::Concurrency {
                    percent: 20.0,
                    min_concurrency: 7,
                },
            ),
            (
                "    budget: { ratio: 0.2, max_tokens: 4 }\n    tiers: {}\n",
                BudgetConfig::TokenBucket {
                    ratio: 0.2,
                    max_tokens: 4.0,
                    initial_tokens: 4.0,
                },
            ),
        ];
        for (keys, expected) in cases {
            let got = policy(keys).unwrap_or_else(|e| panic!("{keys}: {e}"));
            assert_eq!(got.budget, Some(expected), "{keys}");
        }
        // The AWS quota: one cost, the others kept.
        let aws = policy("    preset: aws-standard\n    budget: { retry_cost: 2 }\n").unwrap();
        let Some(BudgetConfig::RetryQuota {
            costs, capacity, ..
        }) = aws.budget
        else {
            panic!("{:?}", aws.budget)
        };
        assert_eq!((costs.retry, costs.timeout, capacity), (2.0, 10.0, 500.0));
    }

    #[test]
    fn a_budget_of_another_kind_replaces_the_policys_whole() {
        let got = policy("    preset: grpc\n    budget: { ratio: 0.2, ttl: 5s }\n").unwrap();
        assert_eq!(
            got.budget,
            Some(BudgetConfig::TtlWindow {
                ratio: 0.2,
                min_per_sec: 10.0,
                ttl: ms(5000)
            })
        );
    }

    #[test]
    fn refusals_say_what_is_wrong_and_what_to_write() {
        let cases = [
            (
                "    preset: grpc\n    budget: { kind: token_bucket, max_tokens: 50 }\n",
                "policy `a`: this token_bucket budget needs `ratio` (e.g. `ratio: 0.2`): it replaces the policy's grpc budget, so it is written whole | the policy's budget is { kind: grpc, max_tokens: 10, token_ratio: 0.1 }; to change some of its fields give only grpc keys (max_tokens, token_ratio), or write a whole token_bucket budget",
            ),
            (
                "    preset: grpc\n    budget: { ratio: 0.2, token_ratio: 0.1 }\n",
                "policy `a`: `ratio` is not a key of a grpc budget | a grpc budget takes max_tokens, token_ratio; a budget is of one kind (`kind:` says which, else its keys do)",
            ),
            (
                "    budget: { max_tokens: 5 }\n",
                "policy `a`: this token_bucket budget needs `ratio` (e.g. `ratio: 0.2`) | ",
            ),
            (
                "    breaker: { window: 5s }\n",
                "policy `a`: this breaker needs `failure_ratio`: the policy has no breaker to take it from | e.g. `breaker: { failure_ratio: 0.5, min_requests: 20, window: 10s, open_for: 5s }`",
            ),
            (
                "    preset: envoy\n    backoff: { exponential: { cap: 1s } }\n",
                "policy `a`: this exponential backoff needs `base` and `cap` | it replaces the policy's backoff, { envoy: { base: 25ms, cap: 250ms }, jitter: full }, which is not exponential, so it is written whole: e.g. `{ exponential: { base: 100ms, multiplier: 2, cap: 5s } }`",
            ),
            (
                "    backoff: { jitter: full }\n",
                "policy `a`: the backoff gives a jitter but no shape, and the policy's backoff is `none`: there is no delay to jitter | give a shape too: `{ exponential: { base: 100ms, cap: 5s }, jitter: full }`",
            ),
            (
                "    backoff: { fixed: 1s, envoy: { base: 1s } }\n",
                "policy `a`: a backoff has one shape: `fixed`, `exponential` or `envoy` | e.g. `{ exponential: { base: 100ms, multiplier: 2, cap: 5s }, jitter: full }`, or `none`",
            ),
        ];
        for (keys, expected) in cases {
            assert_eq!(policy(keys).expect_err(keys), expected, "{keys}");
        }
    }

    #[test]
    fn a_backoff_keeps_what_it_does_not_name_while_its_shape_stays() {
        let grpc = policy("    preset: grpc\n    backoff: { exponential: { cap: 2s } }\n").unwrap();
        assert_eq!(
            grpc.backoff.shape(),
            BackoffShape::Exponential {
                base: ms(100),
                multiplier: 2.0,
                cap: ms(2000)
            }
        );
        assert_eq!(grpc.backoff.jitter(), Jitter::Proportional(0.2));
        let jitter_only = policy("    preset: grpc\n    backoff: { jitter: full }\n").unwrap();
        assert_eq!(jitter_only.backoff.shape(), grpc_shape());
        assert_eq!(jitter_only.backoff.jitter(), Jitter::Full);
        // Another shape is a backoff of its own: no jitter unless it says so.
        let fixed = policy("    preset: grpc\n    backoff: { fixed: 1s }\n").unwrap();
        assert_eq!(fixed.backoff.shape(), BackoffShape::Fixed(ms(1000)));
        assert_eq!(fixed.backoff.jitter(), Jitter::None);
        let envoy = policy("    preset: grpc\n    backoff: { envoy: { base: 10ms } }\n").unwrap();
        assert_eq!(
            envoy.backoff.shape(),
            BackoffShape::Envoy {
                base: ms(10),
                cap: ms(100)
            }
        );
    }

    fn grpc_shape() -> BackoffShape {
        Preset::Grpc.config().backoff.shape()
    }

    #[test]
    fn a_breaker_keeps_what_it_does_not_name() {
        let r4j = policy("    preset: resilience4j\n    breaker: { open_for: 5s }\n").unwrap();
        assert_eq!(
            r4j.breaker,
            Some(BreakerConfig {
                failure_ratio: 0.5,
                min_requests: 100,
                window: ms(10_000),
                open_for: ms(5000),
                half_open_probes: 10
            })
        );
    }
}
