//! JSON Schemas of the script's values whose serde rules are written by hand (checked
//! newtypes, one-or-a-list, durations and distributions), so the harness's plan schema
//! (`harness plan-schema --json`) says of each what its deserialiser accepts. The structs
//! derive theirs beside their definitions.

use std::borrow::Cow;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};

use super::spec::{
    AttemptNumber, GrpcCodeSpec, HeaderNameSpec, MethodSpec, OneOrMany, PathSpec, PeerNumber,
    Probability, PushbackSpec, ResponseHeaderName, StatusCodeSpec, Weight,
};
use crate::dist::DistributionSpec;
use crate::duration::DurationSpec;

/// What [`crate::duration::parse_duration`] accepts: a non-negative decimal and a unit,
/// or a bare 0.
pub(super) const DURATION_PATTERN: &str =
    r"^\s*(0|([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|ms|s|m|h))\s*$";

/// `impl JsonSchema` for a type whose schema is one fixed JSON value, inlined where used.
macro_rules! fixed_schema {
    ($ty:ty, $name:literal, $schema:tt) => {
        impl JsonSchema for $ty {
            fn inline_schema() -> bool {
                true
            }
            fn schema_name() -> Cow<'static, str> {
                $name.into()
            }
            fn json_schema(_: &mut SchemaGenerator) -> Schema {
                json_schema!($schema)
            }
        }
    };
}

// Named, not inlined: a plan has dozens of durations.
impl JsonSchema for DurationSpec {
    fn schema_name() -> Cow<'static, str> {
        "Duration".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "A duration: a number and a unit (ns, us, ms, s, m, h), e.g. \"250ms\", \"1.5s\", \"2m\"; or 0",
            "anyOf": [
                { "type": "string", "pattern": DURATION_PATTERN },
                { "type": "integer", "const": 0 }
            ]
        })
    }
}

fixed_schema!(Probability, "Probability", {
    "type": "number", "minimum": 0, "maximum": 1
});

fixed_schema!(Weight, "Weight", {
    "description": "A relative weight (>= 0)",
    "type": "number", "minimum": 0
});

fixed_schema!(PeerNumber, "PeerNumber", {
    "description": "A peer number: 1 for the first listening socket (the proxy's first `server` line)",
    "type": "integer", "minimum": 1, "maximum": crate::wire::MAX_PEERS
});

fixed_schema!(AttemptNumber, "AttemptNumber", {
    "description": "An attempt number, 1 for the first send",
    "type": "integer", "minimum": 1
});

fixed_schema!(StatusCodeSpec, "StatusCode", {
    "description": "An HTTP status code",
    "type": "integer", "minimum": 200, "maximum": 599
});

fixed_schema!(MethodSpec, "Method", {
    "description": "An HTTP method, e.g. GET or POST (any case)",
    "type": "string", "pattern": "^[A-Za-z-]+$"
});

fixed_schema!(PathSpec, "PathPattern", {
    "description": "A path prefix (/payments) or a glob (/items/*/price)",
    "type": "string", "pattern": "^[/*]"
});

fixed_schema!(HeaderNameSpec, "HeaderName", {
    "description": "An HTTP header name",
    "type": "string", "pattern": "^[A-Za-z0-9!#$%&'*+.^_`|~-]+$"
});

fixed_schema!(ResponseHeaderName, "ResponseHeaderName", {
    "description": "An HTTP header name, but none that frames the response or manages its connection",
    "type": "string", "pattern": "^[A-Za-z0-9!#$%&'*+.^_`|~-]+$",
    "not": { "enum": ["content-length", "transfer-encoding", "connection", "keep-alive", "upgrade", "te", "trailer", "proxy-connection"] }
});

fixed_schema!(PushbackSpec, "Pushback", {
    "description": "gRFC A6's grpc-retry-pushback-ms: a duration, or `stop` (do not retry)",
    "anyOf": [
        { "type": "string", "pattern": DURATION_PATTERN },
        { "type": "string", "enum": ["stop"] }
    ]
});

impl JsonSchema for GrpcCodeSpec {
    fn inline_schema() -> bool {
        true
    }
    fn schema_name() -> Cow<'static, str> {
        "GrpcCode".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        // The names for completion; any case, `-` for `_` and a number as text are
        // read too (`wire::grpc::parse_code`), so the pattern admits them.
        let names: Vec<String> = crate::wire::grpc::NAMES[1..]
            .iter()
            .map(|n| n.to_ascii_lowercase())
            .collect();
        json_schema!({
            "description": "A gRPC status by name (unavailable, RESOURCE_EXHAUSTED) or number",
            "anyOf": [
                { "type": "string", "enum": names },
                { "type": "string", "pattern": "^\\s*[A-Za-z0-9_-]+\\s*$" },
                { "type": "integer", "minimum": 1, "maximum": 16 }
            ]
        })
    }
}

impl JsonSchema for DistributionSpec {
    fn schema_name() -> Cow<'static, str> {
        "Distribution".into()
    }
    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let duration = generator.subschema_for::<DurationSpec>();
        json_schema!({
            "description": "A duration, `{ uniform: [low, high] }` or `{ lognormal: { p50, p99 } }`",
            "anyOf": [
                duration,
                {
                    "type": "object",
                    "properties": {
                        "uniform": { "type": "array", "items": duration, "minItems": 2, "maxItems": 2 }
                    },
                    "required": ["uniform"],
                    "additionalProperties": false
                },
                {
                    "type": "object",
                    "properties": {
                        "lognormal": {
                            "type": "object",
                            "properties": { "p50": duration, "p99": duration },
                            "required": ["p50", "p99"],
                            "additionalProperties": false
                        }
                    },
                    "required": ["lognormal"],
                    "additionalProperties": false
                }
            ]
        })
    }
}

impl<T: JsonSchema> JsonSchema for OneOrMany<T> {
    fn inline_schema() -> bool {
        true
    }
    fn schema_name() -> Cow<'static, str> {
        format!("OneOrMany_{}", T::schema_name()).into()
    }
    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let one = generator.subschema_for::<T>();
        json_schema!({
            "anyOf": [one, { "type": "array", "items": one }]
        })
    }
}
