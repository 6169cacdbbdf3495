//! The plan's JSON Schema (draft-07, as SchemaStore and yaml-language-server read it),
//! derived from the plan's own serde types: `harness plan-schema --json` prints it and
//! `docs/plan.schema.json` is that output, checked current by a test. The structs derive
//! theirs; the values whose deserialisers are written by hand get theirs here, saying what
//! those accept, and the names a plan may use (gates, metrics, presets) are listed so an
//! editor completes them.

use std::borrow::Cow;

use chaos_policy::Preset;
use schemars::generate::SchemaSettings;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};

use super::model::{Check, Metric};
use super::spec::{
    BackoffSpec, Condition, DurationOrNone, ExpectSpec, GateSpec, JitterSpec, MaxConnectionsSpec,
    PlanSpec, PolicySpec, ProxyTierSpec, Rate, TargetSpec, TierEntrySpec, TierSpec, Toggle,
};
use fault_server::duration::DurationSpec;
use fault_server::script::spec::OneOrMany;

/// Where the committed schema is published for a plan's modeline.
pub const SCHEMA_ID: &str = "https://example.invalid/chaos-harness/plan.schema.json";

/// The plan's JSON Schema, as pretty JSON with a final newline.
pub fn plan_schema() -> String {
    let mut schema = SchemaSettings::draft07()
        .into_generator()
        .into_root_schema_for::<PlanSpec>();
    schema.insert("$id".to_owned(), SCHEMA_ID.into());
    schema.insert("title".to_owned(), "chaos harness plan".into());
    let mut text = serde_json::to_string_pretty(&schema).unwrap_or_default();
    text.push('\n');
    text
}

/// `impl JsonSchema` for a type whose schema is built by `$body`, inlined where used.
macro_rules! schema {
    ($ty:ty, $name:literal, |$g:ident| $body:expr) => {
        impl JsonSchema for $ty {
            fn inline_schema() -> bool {
                true
            }
            fn schema_name() -> Cow<'static, str> {
                $name.into()
            }
            fn json_schema($g: &mut SchemaGenerator) -> Schema {
                $body
            }
        }
    };
}

fn checks() -> Vec<&'static str> {
    Check::ALL.map(Check::name).to_vec()
}

schema!(Rate, "Rate", |_g| json_schema!({
    "description": "Requests per second",
    "type": "number", "minimum": 0, "maximum": 1_000_000
}));

schema!(MaxConnectionsSpec, "MaxConnections", |_g| json_schema!({
    "description": "The most connections the client opens (default 50), or `per_attempt`: one for every attempt that finds none idle",
    "anyOf": [
        { "type": "integer", "minimum": 1, "maximum": u32::MAX },
        { "type": "string", "enum": ["per_attempt"] }
    ]
}));

schema!(Condition, "RetryCondition", |_g| json_schema!({
    "description": "A condition such as `transient`, `5xx`, `gateway-error`, or a status code such as 503",
    "anyOf": [ { "type": "string" }, { "type": "integer", "minimum": 100, "maximum": 599 } ]
}));

schema!(DurationOrNone, "DurationOrNone", |g| {
    let duration = g.subschema_for::<DurationSpec>();
    json_schema!({
        "description": "A duration, or `none` for no limit",
        "anyOf": [ duration, { "type": "string", "enum": ["none"] } ]
    })
});

schema!(JitterSpec, "Jitter", |_g| json_schema!({
    "anyOf": [
        { "type": "string", "enum": ["none", "full", "equal", "decorrelated"] },
        {
            "type": "object",
            "properties": { "additive": { "type": "number" } },
            "required": ["additive"], "additionalProperties": false
        },
        {
            "type": "object",
            "properties": { "proportional": { "type": "number" } },
            "required": ["proportional"], "additionalProperties": false
        }
    ]
}));

schema!(ExpectSpec, "Expect", |_g| json_schema!({
    "description": "A counterexample: `fail` (some gate must fail) or `{ fail: [gate, ...] }` (each named gate must)",
    "anyOf": [
        { "type": "string", "enum": ["fail"] },
        {
            "type": "object",
            "properties": {
                "fail": { "type": "array", "items": { "type": "string" }, "minItems": 1 }
            },
            "required": ["fail"], "additionalProperties": false
        }
    ]
}));

schema!(GateSpec, "Gate", |g| {
    let policies = g.subschema_for::<Option<OneOrMany<String>>>();
    let metrics: Vec<&str> = Metric::ALL.map(Metric::name).to_vec();
    json_schema!({
        "description": "An invariant by name, the same scoped to policies (`{ check, policy }`), or a metric threshold (`{ metric, min | max, policy }`)",
        "anyOf": [
            { "type": "string", "enum": checks() },
            {
                "type": "object",
                "properties": {
                    "check": { "type": "string", "enum": checks() },
                    "policy": policies
                },
                "required": ["check"], "additionalProperties": false
            },
            {
                "type": "object",
                "properties": {
                    "metric": { "type": "string", "enum": metrics },
                    "min": { "type": "number" },
                    "max": { "type": "number" },
                    "policy": policies
                },
                "required": ["metric"], "additionalProperties": false
            }
        ]
    })
});

schema!(TargetSpec, "Target", |g| {
    let map = g.subschema_for::<super::spec::TargetMap>();
    json_schema!({
        "description": "`embedded` (a fault-server in-process), `{ url }` (a running server), or `{ upstream }` (the embedded fault-server in front of your service)",
        "anyOf": [ { "type": "string", "enum": ["embedded"] }, map ]
    })
});

schema!(TierEntrySpec, "Tier", |g| {
    let proxy = g.subschema_for::<ProxyTierSpec>();
    json_schema!({
        "description": "A relay tier's name, a proxy tier: `{ name, nginx: { config, location, binary } }` or `{ name, haproxy: { config, backend, binary } }`, or a mesh tier: `{ name, istio: { virtual_service, destination_rule, route } }`",
        "anyOf": [ { "type": "string" }, proxy ]
    })
});

impl JsonSchema for TierSpec {
    fn schema_name() -> Cow<'static, str> {
        "TierPolicy".into()
    }
    fn json_schema(g: &mut SchemaGenerator) -> Schema {
        let policy = g.subschema_for::<PolicySpec>();
        json_schema!({
            "description": "`same` (the variant's policy), `none` (forward once), or a policy of its own",
            "anyOf": [ { "type": "string", "enum": ["same", "none"] }, policy ]
        })
    }
}

impl<T: JsonSchema> JsonSchema for Toggle<T> {
    fn inline_schema() -> bool {
        true
    }
    fn schema_name() -> Cow<'static, str> {
        format!("Toggle_{}", T::schema_name()).into()
    }
    fn json_schema(g: &mut SchemaGenerator) -> Schema {
        let on = g.subschema_for::<T>();
        json_schema!({ "anyOf": [ on, { "type": "string", "enum": ["none", "off"] } ] })
    }
}

/// `policy.backoff`: a backoff, or `none`.
pub(crate) fn backoff(g: &mut SchemaGenerator) -> Schema {
    let on = g.subschema_for::<BackoffSpec>();
    json_schema!({ "anyOf": [ on, { "type": "string", "enum": ["none"] } ] })
}

/// `policy.preset`: a real system's policy.
pub(crate) fn preset(_: &mut SchemaGenerator) -> Schema {
    let names: Vec<&str> = Preset::ALL.map(Preset::name).to_vec();
    json_schema!({
        "description": "Start from a real system's policy; the policy's other fields override it",
        "type": "string", "enum": names
    })
}

/// `n.values` of a request: ids written into the path as they are.
pub(crate) fn path_values(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "items": { "type": ["string", "number"] },
        "minItems": 1
    })
}
