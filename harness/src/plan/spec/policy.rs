//! A plan's policy as written: its keys, its `import:`, and the blocks (`backoff`,
//! `budget`, `breaker`) a preset or an import may bring and the plan may override.

use std::fmt;

use fault_server::duration::DurationSpec;
use serde::Deserialize;
use serde::de::value::MapAccessDeserializer;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};

/// One policy of `policies:` (or a relay tier's, or a `harness relay --policy` file).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PolicySpec {
    /// Required of a plan's policies; a tier's policy has none of its own.
    #[serde(default)]
    pub name: String,
    /// Start from a real system's policy; the fields below override it.
    #[serde(default)]
    #[schemars(schema_with = "crate::plan::schema::preset")]
    pub preset: Option<String>,
    /// Start from a production config instead (a gRPC service config, an Envoy route); the
    /// fields below override it.
    #[serde(default)]
    pub import: Option<ImportSpec>,
    #[serde(default)]
    pub max_attempts: Option<u32>,
    /// A duration, or `none`: an attempt waits as long as the deadline allows.
    #[serde(default)]
    pub attempt_timeout: Option<DurationOrNone>,
    /// A duration, or `none`: no limit on the whole logical request.
    #[serde(default)]
    pub deadline: Option<DurationOrNone>,
    #[serde(default, deserialize_with = "BackoffSpec::parse_none")]
    #[schemars(schema_with = "crate::plan::schema::backoff")]
    pub backoff: Option<BackoffSpec>,
    #[serde(default)]
    pub retry_on: Option<Vec<Condition>>,
    /// Retry POST/PATCH without an idempotency key after any retryable failure.
    /// Deliberately unsafe; the `no_retry_of_non_idempotent` gate catches it.
    #[serde(default)]
    pub retry_non_idempotent: Option<bool>,
    #[serde(default)]
    pub honor_retry_after: Option<bool>,
    /// The longest `Retry-After` honoured (default 30s).
    #[serde(default)]
    pub retry_after_max: Option<DurationSpec>,
    /// Honour `Retry-After` clamped to `[backoff, backoff + this]` instead (the AWS SDKs'
    /// 2026 behaviour, the `aws-standard-2026` preset).
    #[serde(default)]
    pub retry_after_max_extra: Option<DurationSpec>,
    #[serde(default)]
    pub budget: Option<Toggle<BudgetSpec>>,
    #[serde(default)]
    pub breaker: Option<Toggle<BreakerSpec>>,
    /// Do not retry an answer marked `x-chaos-no-retry` (a tier behind gave up).
    #[serde(default)]
    pub honor_no_retry: Option<bool>,
    /// Each relay tier's policy in this variant: `same` (this policy), `none` (forward
    /// once; the default) or a policy of its own.
    #[serde(default)]
    pub tiers: std::collections::BTreeMap<String, TierSpec>,
    /// A counterexample: `fail` (some gate of it must fail) or `{ fail: [gate, …] }` (each
    /// named gate must): the plan passes only if the detectors catch it.
    #[serde(default)]
    pub expect: Option<ExpectSpec>,
    /// The client and every relay tier of this variant draw their retries from the
    /// client's one budget (a token bucket): a request carries its share down
    /// (`x-chaos-retry-allowance`) and whichever hop retries spends it.
    #[serde(default)]
    pub share_budget: bool,
}

/// What a counterexample policy is expected to do: fail some gate, or the named ones (by
/// a check's name, a metric's, or a gate's whole name such as `peak_amplification <= 2`).
#[derive(Debug, Clone, PartialEq)]
pub struct ExpectSpec {
    /// Empty: any gate.
    pub fail: Vec<String>,
}

impl<'de> Deserialize<'de> for ExpectSpec {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ExpectSpec;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("`fail`, or `{ fail: [gate, ...] }` naming the gates it must fail")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ExpectSpec, E> {
                if v == "fail" {
                    Ok(ExpectSpec { fail: Vec::new() })
                } else {
                    Err(E::invalid_value(de::Unexpected::Str(v), &self))
                }
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<ExpectSpec, A::Error> {
                #[derive(Deserialize)]
                #[serde(deny_unknown_fields)]
                struct Gates {
                    fail: Vec<String>,
                }
                let gates = Gates::deserialize(MapAccessDeserializer::new(map))?;
                if gates.fail.is_empty() {
                    return Err(de::Error::custom(
                        "`expect.fail` names no gate: write `expect: fail` for any gate, or name the gates it must fail",
                    ));
                }
                Ok(ExpectSpec { fail: gates.fail })
            }
        }
        deserializer.deserialize_any(V)
    }
}

/// A tier's policy: `same`, `none`, or a policy (preset, import and keys as a plan's).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum TierSpec {
    Word(String),
    Policy(Box<PolicySpec>),
}

/// `{ grpc_service_config: FILE, service: NAME, method: NAME }` or
/// `{ envoy_route: FILE, route: NAME, envoy_cluster: FILE }`; paths are relative to the
/// plan file.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ImportSpec {
    #[serde(default)]
    pub grpc_service_config: Option<std::path::PathBuf>,
    /// The fully qualified service (`shop.Cart`) whose method config applies.
    #[serde(default)]
    pub service: Option<String>,
    /// The method; without it, the config of every method of the service.
    #[serde(default)]
    pub method: Option<String>,
    /// A route configuration (`virtual_hosts:`), a route, a route action or a
    /// `retry_policy`, as YAML or JSON.
    #[serde(default)]
    pub envoy_route: Option<std::path::PathBuf>,
    /// Which route of a route configuration: its name, `HOST/NAME`, or `HOST/routes[I]`
    /// for one without a name. Needed when several of its routes retry. With an Istio
    /// VirtualService, its `http` route: its name or `VIRTUALSERVICE/http[I]`.
    #[serde(default)]
    pub route: Option<String>,
    /// A cluster (or its `circuit_breakers`): its retry budget or `max_retries`.
    #[serde(default)]
    pub envoy_cluster: Option<std::path::PathBuf>,
    /// An Istio VirtualService (a manifest; `route:` names its `http` route when its
    /// routes retry unlike each other).
    #[serde(default)]
    pub istio_virtual_service: Option<std::path::PathBuf>,
    /// The DestinationRule of the route's host: its `maxRetries` or `retryBudget`.
    #[serde(default)]
    pub istio_destination_rule: Option<std::path::PathBuf>,
}

/// One `retry_on` entry as written: a word (`transient`) or a status code, which YAML
/// reads as a number (`[gateway-error, 429]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Condition(pub String);

impl<'de> Deserialize<'de> for Condition {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Condition;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a condition like `transient` or a status code like 503")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Condition, E> {
                Ok(Condition(v.to_owned()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Condition, E> {
                Ok(Condition(v.to_string()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Condition, E> {
                Ok(Condition(v.to_string()))
            }
        }
        deserializer.deserialize_any(V)
    }
}

/// A duration, or `none` to switch off a limit an import or a preset set (an Envoy
/// route's default 15 s timeout): what `harness validate --explain` writes for a policy
/// without one, so its output reads back as the same policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DurationOrNone(pub Option<std::time::Duration>);

impl<'de> Deserialize<'de> for DurationOrNone {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::value::{
            F64Deserializer, I64Deserializer, StrDeserializer, U64Deserializer,
        };
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = DurationOrNone;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration like \"250ms\", \"10s\" or \"2m\", or `none`")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<DurationOrNone, E> {
                if v.trim() == "none" {
                    return Ok(DurationOrNone(None));
                }
                DurationSpec::deserialize(StrDeserializer::<E>::new(v))
                    .map(|d| DurationOrNone(Some(d.get())))
            }
            // Numbers go to the duration's own rules, which say what unit is missing.
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<DurationOrNone, E> {
                DurationSpec::deserialize(U64Deserializer::<E>::new(v))
                    .map(|d| DurationOrNone(Some(d.get())))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<DurationOrNone, E> {
                DurationSpec::deserialize(I64Deserializer::<E>::new(v))
                    .map(|d| DurationOrNone(Some(d.get())))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<DurationOrNone, E> {
                DurationSpec::deserialize(F64Deserializer::<E>::new(v))
                    .map(|d| DurationOrNone(Some(d.get())))
            }
        }
        deserializer.deserialize_any(V)
    }
}

/// A block a preset may bring that a plan can switch off with `none`.
#[derive(Debug, Clone, PartialEq)]
pub enum Toggle<T> {
    Off,
    On(T),
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Toggle<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = Toggle<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map of settings, or `none`")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Toggle<T>, E> {
                match v {
                    "none" | "off" => Ok(Toggle::Off),
                    other => Err(E::custom(format!(
                        "`{other}`: expected a map of settings, or `none` to switch it off"
                    ))),
                }
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Toggle<T>, A::Error> {
                T::deserialize(MapAccessDeserializer::new(map)).map(Toggle::On)
            }
        }
        deserializer.deserialize_any(V(std::marker::PhantomData))
    }
}

/// `none`, or one shape (`fixed`, `exponential`, `envoy`) plus an optional `jitter`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BackoffSpec {
    #[serde(default)]
    pub fixed: Option<DurationSpec>,
    #[serde(default)]
    pub exponential: Option<ExponentialSpec>,
    /// Envoy's `(2^k - 1) * base`, capped.
    #[serde(default)]
    pub envoy: Option<EnvoyBackoffSpec>,
    #[serde(default)]
    pub jitter: Option<JitterSpec>,
    #[serde(skip)]
    pub none: bool,
}

impl BackoffSpec {
    pub(crate) fn parse_none<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<BackoffSpec>, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = BackoffSpec;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("`none` or a map like `{ exponential: { base: 100ms, multiplier: 2, cap: 5s }, jitter: full }`")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<BackoffSpec, E> {
                if v == "none" {
                    Ok(BackoffSpec {
                        none: true,
                        ..BackoffSpec::default()
                    })
                } else {
                    Err(E::custom(format!(
                        "unknown backoff `{v}`: write `none`, `{{ fixed: 1s }}`, `{{ exponential: {{ base: 100ms, multiplier: 2, cap: 5s }} }}` or `{{ envoy: {{ base: 25ms, cap: 250ms }} }}`"
                    )))
                }
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<BackoffSpec, A::Error> {
                BackoffSpec::deserialize(MapAccessDeserializer::new(map))
            }
        }
        d.deserialize_any(V).map(Some)
    }
}

/// `base` and `cap` are required unless the policy's backoff is exponential already
/// (then the keys given replace its own).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExponentialSpec {
    #[serde(default)]
    pub base: Option<DurationSpec>,
    #[serde(default)]
    pub multiplier: Option<f64>,
    #[serde(default)]
    pub cap: Option<DurationSpec>,
}

/// `base` is required unless the policy's backoff is Envoy's already.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EnvoyBackoffSpec {
    #[serde(default)]
    pub base: Option<DurationSpec>,
    #[serde(default)]
    pub cap: Option<DurationSpec>,
}

/// `none`, `full`, `equal`, `decorrelated`, `{ additive: 0.99 }` or `{ proportional: 0.2 }`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum JitterSpec {
    None,
    Full,
    Equal,
    Decorrelated,
    Additive(f64),
    /// gRPC's `exp · U(1 − spread, 1 + spread)`.
    Proportional(f64),
}

impl<'de> Deserialize<'de> for JitterSpec {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = JitterSpec;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("`none`, `full`, `equal`, `decorrelated`, `{ additive: FACTOR }` or `{ proportional: SPREAD }`")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<JitterSpec, E> {
                Ok(match v {
                    "none" => JitterSpec::None,
                    "full" => JitterSpec::Full,
                    "equal" => JitterSpec::Equal,
                    "decorrelated" => JitterSpec::Decorrelated,
                    other => {
                        return Err(E::custom(format!(
                            "unknown jitter `{other}`: expected none, full, equal, decorrelated, {{ additive: FACTOR }} or {{ proportional: SPREAD }}"
                        )));
                    }
                })
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<JitterSpec, A::Error> {
                let key: String = map.next_key()?.ok_or_else(|| {
                    de::Error::custom(
                        "expected `{ additive: FACTOR }` or `{ proportional: SPREAD }`",
                    )
                })?;
                let make = match key.as_str() {
                    "additive" => JitterSpec::Additive,
                    "proportional" => JitterSpec::Proportional,
                    _ => {
                        return Err(de::Error::unknown_field(
                            &key,
                            &["additive", "proportional"],
                        ));
                    }
                };
                let value: f64 = map.next_value()?;
                Ok(make(value))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, _seq: A) -> Result<JitterSpec, A::Error> {
                Err(de::Error::custom("a jitter is one word, not a list"))
            }
        }
        deserializer.deserialize_any(V)
    }
}

/// A budget; its kind is `kind`, or inferred from its keys (`min_per_sec`/`ttl`: a ttl
/// window; `token_ratio`: gRPC; `capacity`/`retry_cost`: an AWS quota; `percent`: Envoy;
/// otherwise a token bucket).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BudgetSpec {
    #[serde(default)]
    pub kind: Option<BudgetKindSpec>,
    #[serde(default)]
    pub ratio: Option<f64>,
    #[serde(default)]
    pub max_tokens: Option<f64>,
    #[serde(default)]
    pub initial_tokens: Option<f64>,
    #[serde(default)]
    pub min_per_sec: Option<f64>,
    #[serde(default)]
    pub ttl: Option<DurationSpec>,
    #[serde(default)]
    pub token_ratio: Option<f64>,
    #[serde(default)]
    pub capacity: Option<f64>,
    #[serde(default)]
    pub retry_cost: Option<f64>,
    #[serde(default)]
    pub timeout_cost: Option<f64>,
    #[serde(default)]
    pub throttling_cost: Option<f64>,
    #[serde(default)]
    pub success_refill: Option<f64>,
    #[serde(default)]
    pub percent: Option<f64>,
    #[serde(default)]
    pub min_concurrency: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum BudgetKindSpec {
    TokenBucket,
    TtlWindow,
    Grpc,
    AwsQuota,
    EnvoyConcurrency,
}

/// `failure_ratio` is required unless the policy has a breaker already (then the keys
/// given replace its own).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BreakerSpec {
    #[serde(default)]
    pub failure_ratio: Option<f64>,
    #[serde(default)]
    pub min_requests: Option<u32>,
    #[serde(default)]
    pub window: Option<DurationSpec>,
    #[serde(default)]
    pub open_for: Option<DurationSpec>,
    #[serde(default)]
    pub half_open_probes: Option<u32>,
}
