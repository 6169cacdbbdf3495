//! The plan as written: serde DTOs that mirror the YAML and nothing else.
//!
//! Every struct denies unknown keys. Checks on one value run while deserialising (through
//! `try_from` newtypes), so serde_yaml reports them with their line and column; checks that
//! relate several parts of the plan run in [`super::resolve`], which locates the part it
//! names. The fault and capacity blocks are the fault-server's own DTOs, so a plan is a
//! valid fault-server script and both read it with the same rules.

use std::fmt;

use fault_server::duration::DurationSpec;
use fault_server::script::spec::{CapacitySpec, HeaderNameSpec, OneOrMany, PhaseSpec};

mod policy;
pub use policy::{
    BackoffSpec, BreakerSpec, BudgetKindSpec, BudgetSpec, Condition, DurationOrNone,
    EnvoyBackoffSpec, ExpectSpec, ExponentialSpec, ImportSpec, JitterSpec, PolicySpec, TierSpec,
    Toggle,
};
use serde::Deserialize;
use serde::de::value::MapAccessDeserializer;
use serde::de::{self, Deserializer, MapAccess, Visitor};

#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PlanSpec {
    /// Names the report directory (`reports/<name>/`); default: the file's stem.
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    /// Seeds arrivals, request mix, jitter and the server's fault draws; default 1.
    #[serde(default)]
    pub seed: Option<u64>,
    /// How long arrivals run (default: the sum of `load.stages`).
    #[serde(default)]
    pub duration: Option<DurationSpec>,
    /// How long requests still in flight may finish after arrivals stop (default 10s).
    #[serde(default)]
    pub drain: Option<DurationSpec>,
    #[serde(default)]
    pub target: Option<TargetSpec>,
    /// Tiers between the load generator and the target, outermost first: a name is a
    /// relay tier (the harness's own, forwarding through each policy's `tiers:`); a map
    /// is a proxy tier whose behaviour is the user's nginx or HAProxy config.
    #[serde(default)]
    pub tiers: Vec<TierEntrySpec>,
    /// Allows a target outside loopback. Load and faults are for machines you own.
    #[serde(default)]
    pub allow_remote: bool,
    /// Required, but in a client test (`client:`), where the program is the load.
    #[serde(default)]
    pub load: Option<LoadSpec>,
    #[serde(default)]
    pub server: Option<CapacitySpec>,
    #[serde(default)]
    pub faults: Vec<PhaseSpec>,
    /// Required, but in a client test (`client:`), where the program is the policy.
    #[serde(default)]
    pub policies: Option<Vec<PolicySpec>>,
    /// A client test (`harness client-test PLAN -- COMMAND`): the program under test takes
    /// the place of `load:` and `policies:`.
    #[serde(default)]
    pub client: Option<ClientSpec>,
    #[serde(default)]
    pub gates: Vec<GateSpec>,
    /// What a run compared against a baseline may lose before it is a regression.
    #[serde(default)]
    pub baseline: Option<BaselineSpec>,
    /// How the run's traces are sampled when telemetry is on.
    #[serde(default)]
    pub telemetry: Option<TelemetrySpec>,
    /// The network `harness simulate` models (a live run has a real one).
    #[serde(default)]
    pub network: Option<NetworkSpec>,
}

/// One entry of `tiers:`: a relay tier's name (`api`), or a proxy tier
/// (`{ name: edge, nginx: { config: stacks/nginx.conf, location: /api } }`).
#[derive(Debug, Clone, PartialEq)]
pub enum TierEntrySpec {
    Relay(String),
    Proxy(ProxyTierSpec),
    /// A relay tier whose policy a mesh's config sets (`{ name, istio: {...} }`).
    Mesh(MeshTierSpec),
}

impl TierEntrySpec {
    /// The tier's name, as reports, fault phases and policies' `tiers:` name it.
    pub fn name(&self) -> &str {
        match self {
            TierEntrySpec::Relay(name) => name,
            TierEntrySpec::Proxy(spec) => &spec.name,
            TierEntrySpec::Mesh(spec) => &spec.name,
        }
    }
}

/// A proxy tier: its name and the one proxy whose config it runs; or a mesh tier: its
/// name and the mesh config that sets its policy.
#[derive(Debug, Clone, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProxyTierSpec {
    pub name: String,
    #[serde(default)]
    pub nginx: Option<NginxSpec>,
    #[serde(default)]
    pub haproxy: Option<HaproxySpec>,
    #[serde(default)]
    pub istio: Option<IstioSpec>,
}

/// A mesh tier: the harness's relay, retrying as the mesh's config says.
#[derive(Debug, Clone, PartialEq)]
pub struct MeshTierSpec {
    pub name: String,
    pub istio: IstioSpec,
}

/// `istio: { virtual_service, destination_rule, route }`: paths relative to the plan file.
#[derive(Debug, Clone, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct IstioSpec {
    /// The VirtualService (a manifest; other documents in it are skipped).
    pub virtual_service: std::path::PathBuf,
    /// The DestinationRule of the route's host (default: one in the VirtualService's
    /// file, else Istio's defaults).
    #[serde(default)]
    pub destination_rule: Option<std::path::PathBuf>,
    /// The `http` route, by its name or `VIRTUALSERVICE/http[I]`; needed when the
    /// VirtualService's routes retry unlike each other.
    #[serde(default)]
    pub route: Option<String>,
}

/// `nginx: { config, location, binary }`: paths relative to the plan file.
#[derive(Debug, Clone, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NginxSpec {
    /// The nginx config, as one file (`nginx -T` prints a config with its includes).
    pub config: std::path::PathBuf,
    /// The `location` whose proxying the tier does (its URI, or modifier and URI: `= /x`);
    /// needed when more than one location proxies to an `upstream`.
    #[serde(default)]
    pub location: Option<String>,
    /// The nginx binary a live run starts (default: `nginx` on `PATH`, or /usr/sbin/nginx).
    #[serde(default)]
    pub binary: Option<std::path::PathBuf>,
}

/// `haproxy: { config, backend, binary }`: paths relative to the plan file.
#[derive(Debug, Clone, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HaproxySpec {
    pub config: std::path::PathBuf,
    /// The `backend` (or `listen`) section; needed when more than one has servers.
    #[serde(default)]
    pub backend: Option<String>,
    /// The HAProxy binary a live run starts (default: `haproxy` on `PATH`, or
    /// /usr/sbin/haproxy).
    #[serde(default)]
    pub binary: Option<std::path::PathBuf>,
}

impl<'de> Deserialize<'de> for TierEntrySpec {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = TierEntrySpec;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a relay tier's name like `api`, a proxy tier like `{ name: edge, nginx: { config: stacks/nginx.conf } }` or a mesh tier like `{ name: sidecar, istio: { virtual_service: stacks/vs.yaml } }`")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<TierEntrySpec, E> {
                Ok(TierEntrySpec::Relay(v.to_owned()))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<TierEntrySpec, A::Error> {
                let spec = ProxyTierSpec::deserialize(MapAccessDeserializer::new(map))?;
                match (&spec.nginx, &spec.haproxy, spec.istio.clone()) {
                    (Some(_), None, None) | (None, Some(_), None) => Ok(TierEntrySpec::Proxy(spec)),
                    (None, None, Some(istio)) => Ok(TierEntrySpec::Mesh(MeshTierSpec {
                        name: spec.name,
                        istio,
                    })),
                    (None, None, None) => Err(de::Error::custom(format!(
                        "tier `{}` names no proxy nor mesh: add `nginx: {{ config: FILE }}`, `haproxy: {{ config: FILE }}` or `istio: {{ virtual_service: FILE }}`",
                        spec.name
                    ))),
                    _ => Err(de::Error::custom(format!(
                        "tier `{}` names more than one of nginx, HAProxy and Istio: a tier is one; list each as a tier of its own",
                        spec.name
                    ))),
                }
            }
        }
        deserializer.deserialize_any(V)
    }
}

/// `client:`: the program `harness client-test` judges.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ClientSpec {
    /// The report's name for the program (default `client`).
    #[serde(default)]
    pub name: Option<String>,
    /// The policy the program is expected to follow (`{ preset: aws-standard }`, with any
    /// field of a policy over it): its backoff range judges `backoff_within_preset`, its
    /// budget's bound `amplification_within_budget`.
    #[serde(default)]
    pub expect: Option<PolicySpec>,
    /// A header that names the logical request, tried before the ones clients send on
    /// their own (`x-request-id`, `Idempotency-Key`, `amz-sdk-invocation-id`).
    #[serde(default)]
    pub group_by: Option<HeaderNameSpec>,
    /// How long after an attempt's answer an identical request (method, path, body) is
    /// taken for its retry, when no header names the request (default 10s).
    #[serde(default)]
    pub window: Option<DurationSpec>,
    /// How much earlier than `Retry-After` asked a retry may come (default 50ms).
    #[serde(default)]
    pub retry_after_tolerance: Option<DurationSpec>,
}

/// `network: { latency: 100us }`: the one-way latency of each hop, as `harness simulate`
/// draws it: a duration, `{ uniform: [low, high] }` or `{ lognormal: { p50, p99 } }`.
#[derive(Debug, Clone, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NetworkSpec {
    #[serde(default)]
    pub latency: Option<fault_server::dist::DistributionSpec>,
}

/// `telemetry: { sampling_ratio: 0.1 }`: the share of logical requests exported as traces
/// (`OTEL_TRACES_SAMPLER_ARG` overrides it). Requests that break an invariant are exported
/// whatever the ratio.
#[derive(Debug, Clone, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TelemetrySpec {
    #[serde(default)]
    pub sampling_ratio: Option<f64>,
}

/// `baseline: { tolerance: { amplification: 0.05, p99_ms: { ratio: 0.25, floor: 50 } } }`.
#[derive(Debug, Clone, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BaselineSpec {
    #[serde(default)]
    pub tolerance: crate::plan::Tolerance,
}

/// `embedded`, `{ url, fault_server, token, script }`, or `{ upstream }`; each map with
/// an optional `protocol` (`{ protocol: grpc }` alone is the embedded fault-server).
#[derive(Debug, Clone, PartialEq)]
pub enum TargetSpec {
    Embedded(Option<Protocol>),
    Url(UrlTargetSpec),
    /// The embedded fault-server in front of a service of the user's own.
    Upstream(String, Option<Protocol>),
}

impl TargetSpec {
    /// `protocol:`, when the plan says it.
    pub fn protocol(&self) -> Option<Protocol> {
        match self {
            TargetSpec::Embedded(protocol) | TargetSpec::Upstream(_, protocol) => *protocol,
            TargetSpec::Url(spec) => spec.protocol,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UrlTargetSpec {
    pub url: String,
    /// The target is a fault-server: script it, reset it and read its ledger (default
    /// true). `false`: any HTTP service, a black box with client-side accounting only.
    #[serde(default = "yes")]
    pub fault_server: bool,
    /// Bearer token for the fault-server's control API.
    #[serde(default)]
    pub token: Option<String>,
    /// What to do with a script the running fault-server already has (one it was started
    /// with, or one someone `PUT`): `replace` it with the plan's for the run (and put it
    /// back after), or `keep` it and run against it. Unsaid, such a script is never
    /// replaced: the run is refused.
    #[serde(default)]
    pub script: Option<ScriptConsent>,
    #[serde(default)]
    pub protocol: Option<Protocol>,
}

/// `target.protocol`: how the harness speaks to the target.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// HTTP/1.1, pooled keep-alive connections.
    #[default]
    Http1,
    /// HTTP/2 cleartext by prior knowledge (h2c), multiplexed on a fixed number of
    /// connections.
    Http2,
    /// gRPC unary calls over HTTP/2, as a gRPC channel makes them.
    Grpc,
}

impl Protocol {
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Http1 => "http1",
            Protocol::Http2 => "http2",
            Protocol::Grpc => "grpc",
        }
    }

    /// Whether attempts go over HTTP/2.
    pub fn is_http2(self) -> bool {
        self != Protocol::Http1
    }
}

/// `target.script`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ScriptConsent {
    Keep,
    Replace,
}

fn yes() -> bool {
    true
}

impl<'de> Deserialize<'de> for TargetSpec {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = TargetSpec;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "`embedded`, or a map like `{ url: \"http://127.0.0.1:8080\" }` or `{ upstream: \"http://127.0.0.1:9000\" }`",
                )
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<TargetSpec, E> {
                if v == "embedded" {
                    Ok(TargetSpec::Embedded(None))
                } else {
                    Err(E::custom(format!(
                        "unknown target `{v}`: write `embedded`, or `{{ url: \"{v}\" }}` for a running server"
                    )))
                }
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<TargetSpec, A::Error> {
                TargetMap::deserialize(MapAccessDeserializer::new(map))?
                    .spec()
                    .map_err(de::Error::custom)
            }
        }
        deserializer.deserialize_any(V)
    }
}

/// A target written as a map: `url` and what goes with it, or `upstream` alone.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct TargetMap {
    #[serde(default)]
    url: Option<String>,
    /// The embedded fault-server forwards what it does not fault to this service.
    #[serde(default)]
    upstream: Option<String>,
    #[serde(default)]
    fault_server: Option<bool>,
    #[serde(default)]
    token: Option<String>,
    #[serde(default)]
    script: Option<ScriptConsent>,
    /// `http1` (the default), `http2` (cleartext, prior knowledge) or `grpc`.
    #[serde(default)]
    protocol: Option<Protocol>,
}

impl TargetMap {
    fn spec(self) -> Result<TargetSpec, &'static str> {
        let running = self.fault_server.is_some() || self.token.is_some() || self.script.is_some();
        match (self.url, self.upstream) {
            (Some(url), None) => Ok(TargetSpec::Url(UrlTargetSpec {
                url,
                fault_server: self.fault_server.unwrap_or(true),
                token: self.token,
                script: self.script,
                protocol: self.protocol,
            })),
            (None, Some(upstream)) if !running => Ok(TargetSpec::Upstream(upstream, self.protocol)),
            (None, Some(_)) => Err(
                "`upstream:` puts the embedded fault-server in front of your service; `fault_server`, `token` and `script` are said of a running one at `url:`",
            ),
            (Some(_), Some(_)) => Err(
                "`url:` and `upstream:` do not go together: `url` runs against a server already running, `upstream` starts the embedded fault-server in front of your service (a running fault-server is given one with `fault-server --upstream`)",
            ),
            (None, None) if self.protocol.is_some() && !running => {
                Ok(TargetSpec::Embedded(self.protocol))
            }
            (None, None) => Err(
                "missing field `url` (a running server) or `upstream` (your service, behind the embedded fault-server)",
            ),
        }
    }
}

#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LoadSpec {
    /// Logical requests per second (the starting rate when `stages` are given).
    #[serde(default)]
    pub rate: Option<Rate>,
    #[serde(default)]
    pub arrivals: Option<ArrivalsSpec>,
    #[serde(default)]
    pub stages: Vec<StageSpec>,
    /// Beyond this many logical requests in flight, arrivals are dropped and counted.
    #[serde(default)]
    pub max_in_flight: Option<u32>,
    /// At most this many connections to the target at once: attempts beyond wait for one
    /// (default 50); `per_attempt` opens one for every attempt that finds none idle.
    #[serde(default)]
    pub max_connections: Option<MaxConnectionsSpec>,
    pub requests: Vec<RequestSpec>,
}

/// `load.max_connections`: a cap, or `per_attempt` for a client with no cap (what a
/// bare hyper or reqwest pool does), which plans that model one must say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaxConnectionsSpec {
    Cap(u32),
    PerAttempt,
}

impl<'de> Deserialize<'de> for MaxConnectionsSpec {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = MaxConnectionsSpec;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a number of connections like 50, or `per_attempt`")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<MaxConnectionsSpec, E> {
                match v.trim() {
                    "per_attempt" => Ok(MaxConnectionsSpec::PerAttempt),
                    other => Err(E::custom(format!(
                        "`{other}`: expected a number of connections like 50, or `per_attempt` (a connection for every attempt that finds none idle)"
                    ))),
                }
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<MaxConnectionsSpec, E> {
                u32::try_from(v).map(MaxConnectionsSpec::Cap).map_err(|_| {
                    E::custom(format!(
                        "{v} connections: at most {} may be asked for",
                        u32::MAX
                    ))
                })
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<MaxConnectionsSpec, E> {
                match u64::try_from(v) {
                    Ok(v) => self.visit_u64(v),
                    Err(_) => Err(E::custom(format!(
                        "{v} connections: give a positive number, or `per_attempt`"
                    ))),
                }
            }
        }
        deserializer.deserialize_any(V)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ArrivalsSpec {
    /// Evenly spaced: `start + i / rate`.
    Uniform,
    /// A seeded Poisson process: exponential gaps with mean `1 / rate`.
    Poisson,
}

/// A rate in requests per second: finite, >= 0, at most a million.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(try_from = "f64")]
pub struct Rate(pub f64);

impl TryFrom<f64> for Rate {
    type Error = String;
    fn try_from(v: f64) -> Result<Rate, String> {
        if v.is_finite() && (0.0..=1_000_000.0).contains(&v) {
            Ok(Rate(v))
        } else {
            Err(format!(
                "rate {v} is out of range: give requests per second between 0 and 1000000"
            ))
        }
    }
}

/// `{ to: 500, over: 10s }` ramps linearly to a rate; `{ hold: 20s }` keeps the rate.
#[derive(Debug, Clone, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StageSpec {
    #[serde(default)]
    pub to: Option<Rate>,
    #[serde(default)]
    pub over: Option<DurationSpec>,
    #[serde(default)]
    pub hold: Option<DurationSpec>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RequestSpec {
    pub name: String,
    /// The HTTP method; with `protocol: grpc`, the RPC's method (`Charge`).
    #[serde(default)]
    pub method: Option<String>,
    /// `{n}` becomes a value of `n` drawn per logical request, so paths vary as real
    /// traffic does. Not with `protocol: grpc`, where `/service/method` is the path.
    #[serde(default)]
    pub path: Option<String>,
    /// With `protocol: grpc`: the call's service, package-qualified (`chaos.Payments`).
    #[serde(default)]
    pub service: Option<String>,
    /// What `{n}` becomes: `{ min, max }` (whole numbers, both included; 0 to 999,999
    /// when absent) or `{ values: [...] }` (ids the service has).
    #[serde(default)]
    pub n: Option<NumbersSpec>,
    #[serde(default)]
    pub weight: Option<f64>,
    #[serde(default)]
    pub body: Option<String>,
    #[serde(default)]
    pub headers: std::collections::BTreeMap<String, String>,
    /// Send an `Idempotency-Key` (the logical request's id) with every attempt.
    #[serde(default)]
    pub idempotency_key: bool,
}

/// `n:` of a request: a range or a list.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NumbersSpec {
    #[serde(default)]
    pub min: Option<u64>,
    #[serde(default)]
    pub max: Option<u64>,
    /// Strings or numbers, each written into the path as it is.
    #[serde(default)]
    #[schemars(schema_with = "crate::plan::schema::path_values")]
    pub values: Option<Vec<serde_yaml::Value>>,
}

/// An invariant by name (`no_retry_of_permanent`), the same scoped to policies
/// (`{ check: no_retry_of_permanent, policy: [a, b] }`), or a metric threshold
/// (`{ metric: success_rate, min: 0.6, policy: x }`).
#[derive(Debug, Clone, PartialEq)]
pub enum GateSpec {
    Check {
        check: String,
        policies: Vec<String>,
    },
    Metric(MetricGateSpec),
}

#[derive(Debug, Clone, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MetricGateSpec {
    #[serde(default)]
    pub metric: Option<String>,
    #[serde(default)]
    pub check: Option<String>,
    #[serde(default)]
    pub min: Option<f64>,
    #[serde(default)]
    pub max: Option<f64>,
    #[serde(default)]
    /// One policy name or a list of them.
    pub policy: Option<OneOrMany<String>>,
}

impl<'de> Deserialize<'de> for GateSpec {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = GateSpec;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a gate name like `no_retry_of_permanent`, or a map like `{ metric: success_rate, min: 0.9 }`")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<GateSpec, E> {
                Ok(GateSpec::Check {
                    check: v.to_owned(),
                    policies: Vec::new(),
                })
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<GateSpec, A::Error> {
                let spec = MetricGateSpec::deserialize(MapAccessDeserializer::new(map))?;
                match (&spec.metric, &spec.check) {
                    (None, Some(check)) if spec.min.is_none() && spec.max.is_none() => {
                        Ok(GateSpec::Check {
                            check: check.clone(),
                            policies: spec.policy.unwrap_or_default().0,
                        })
                    }
                    (None, Some(_)) => Err(de::Error::custom(
                        "an invariant gate (`check:`) takes no `min`/`max`",
                    )),
                    (Some(_), None) => Ok(GateSpec::Metric(spec)),
                    (Some(_), Some(_)) => Err(de::Error::custom(
                        "a gate is either `check: NAME` or `metric: NAME`, not both",
                    )),
                    (None, None) => Err(de::Error::custom(
                        "a gate map needs `metric:` (with `min:` or `max:`) or `check:`",
                    )),
                }
            }
        }
        deserializer.deserialize_any(V)
    }
}
