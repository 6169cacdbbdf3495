//! The script as written: serde DTOs for the `faults:` and `server:` blocks of a plan.
//!
//! Why separate from [`super::Script`]: these types mirror the YAML and nothing else, so
//! the harness can embed them in its own plan struct (`faults: Vec<PhaseSpec>`,
//! `server: Option<CapacitySpec>`) and get serde_yaml's line:column errors for free.
//! Everything inside a phase is strict (`deny_unknown_fields`); every range check that
//! concerns one value (a probability in [0, 1], a weight >= 0, a status code, a
//! duration) runs during deserialisation, so its error also carries line:column. Checks
//! that relate two fields (`until` after `from`, which fields a fault kind accepts) are
//! made by [`super::Script::from_spec`], which names the phase and the field.

use std::collections::BTreeMap;
use std::num::NonZeroU32;

use serde::{Deserialize, Serialize};

use super::fault::FaultKind;
pub use super::values::{
    AttemptNumber, FRAMING_HEADERS, GrpcCodeSpec, HeaderNameSpec, MethodSpec, OneOrMany, PathSpec,
    PeerNumber, Probability, PushbackSpec, ResponseHeaderName, StatusCodeSpec, Weight,
};
use crate::dist::DistributionSpec;
use crate::duration::DurationSpec;

/// A whole script: a standalone script file, or a whole plan read as a script.
///
/// Only `seed`, `server` and `faults` are read at the top level; any other top-level key
/// (`name`, `load`, `policies`, …) is ignored, so a harness plan is a valid script. The
/// insides of `server` and of each phase are strict.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
pub struct ScriptSpec {
    /// Seed for the fault decisions (the server's own seed wins when given explicitly).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// The capacity model; absent means unlimited capacity and no service time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<CapacitySpec>,
    /// The fault phases, in priority order: for each request the first phase that
    /// matches and fires decides.
    #[serde(default)]
    pub faults: Vec<PhaseSpec>,
}

impl ScriptSpec {
    /// Each phase's name, or `faults[i]` for one without: how reports and logs name them.
    pub fn phase_names(&self) -> Vec<String> {
        self.faults
            .iter()
            .enumerate()
            .map(|(i, f)| f.name.clone().unwrap_or_else(|| format!("faults[{i}]")))
            .collect()
    }
}

/// Phase names for a sentence: the first few, and how many more. A script may hold a
/// thousand phases; a log line or a report's warning names a handful.
pub fn listed_names(names: &[String]) -> String {
    const SHOWN: usize = 12;
    let mut words = names
        .iter()
        .take(SHOWN)
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > SHOWN {
        words.push_str(&format!(" and {} more", names.len() - SHOWN));
    }
    words
}

/// One fault phase.
///
/// ```yaml
/// - name: outage
///   from: 10s
///   until: 20s
///   match: { method: POST, path: /payments, header: { x-tenant: blue } }
///   probability: 0.5
///   attempts: [1, 2]
///   respond:
///     - { status: 503, weight: 8, retry_after: 1s }
///     - { fault: reset, weight: 1, processed: true }
/// ```
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PhaseSpec {
    /// A name for reports, metrics and errors (default: `faults[INDEX]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Start of the window, from the start of the run (inclusive; default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<DurationSpec>,
    /// End of the window (exclusive; default: never ends).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<DurationSpec>,
    /// Which requests the phase applies to (default: every request).
    #[serde(default, rename = "match", skip_serializing_if = "Option::is_none")]
    pub matcher: Option<MatchSpec>,
    /// Share of the matching requests the phase faults (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probability: Option<Probability>,
    /// Only these attempt numbers (the `x-chaos-attempt` header, 1-based) are faulted; a
    /// request without the header does not match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempts: Option<Vec<AttemptNumber>>,
    /// Only requests arriving at this peer, or these (`2` or `[1, 3]`), are faulted: one
    /// bad instance among the peers a server listens as (`fault-server --peers`),
    /// numbered from 1 in the order of the proxy's `server` lines. A server with one peer
    /// matches none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer: Option<OneOrMany<PeerNumber>>,
    /// Decide once per logical request (`x-request-id`) instead of per attempt: every
    /// attempt of a request that this phase faults gets the same fault. A permanent error
    /// stays permanent however often it is retried, as a real 400 does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sticky: Option<bool>,
    /// What to do: one entry, or several picked by relative `weight`.
    pub respond: OneOrMany<RespondSpec>,
    /// A relay tier of a call chain (the harness's `tiers:`) that injects this phase
    /// instead of the fault-server; the fault-server itself skips such a phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<String>,
}

/// Which requests a phase applies to. Every given criterion must hold.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MatchSpec {
    /// One method or a list (`POST` or `[POST, PATCH]`), compared case-insensitively.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<OneOrMany<MethodSpec>>,
    /// A path prefix (`/payments` matches `/payments/7`), or a glob when it contains `*`
    /// (`/items/*/price`; `*` matches any run of characters, `/` included). The query
    /// string is not part of the path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<PathSpec>,
    /// Headers that must be present with these values (names case-insensitive; a value
    /// with `*` is a glob, so `"*"` means "present with any value").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<BTreeMap<HeaderNameSpec, String>>,
}

/// One entry of `respond`: a status, or a `fault:` of another kind.
///
/// ```yaml
/// - { status: 503, retry_after: 2s, body: "busy", headers: { x-why: drill } }
/// - { fault: delay, delay: { uniform: [100ms, 900ms] } }
/// - { fault: timeout }            # hold until the server's hang cap, then close
/// - { fault: timeout, hold: 5s }  # hold 5 s (still bounded by the cap), then close
/// - { fault: reset, processed: true }
/// - { fault: close }
/// - { fault: truncate, status: 200 }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RespondSpec {
    /// The fault kind; may be omitted when `status` is given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fault: Option<FaultKind>,
    /// The status code (`status` faults; `truncate`, default 200).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<StatusCodeSpec>,
    /// Sends `Retry-After` with this many seconds, rounded up (`status` faults).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after: Option<DurationSpec>,
    /// A gRPC status by name (`unavailable`, `RESOURCE_EXHAUSTED`) or number: a gRPC call
    /// is answered Trailers-Only with it, any other request with the code's HTTP status
    /// (UNAVAILABLE 503, RESOURCE_EXHAUSTED 429, ...) unless `status` says otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grpc: Option<GrpcCodeSpec>,
    /// gRFC A6's `grpc-retry-pushback-ms` on a gRPC fault: a duration, or `stop` (a
    /// negative pushback: "do not retry").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pushback: Option<PushbackSpec>,
    /// The response body (`status` and `truncate` faults).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    /// Extra response headers (`status` and `truncate` faults), but none that frames the
    /// response or manages its connection (`content-length`, `transfer-encoding`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headers: Option<BTreeMap<ResponseHeaderName, String>>,
    /// The delay (`delay` faults): a duration or a distribution.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay: Option<DistributionSpec>,
    /// How long a `timeout` holds the request (bounded by the server's hang cap).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold: Option<DurationSpec>,
    /// Relative weight among the phase's entries (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<Weight>,
    /// Execute the request's side effect before the fault (the response is lost after
    /// the work was done).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub processed: Option<bool>,
}

/// The finite-capacity model of the server.
///
/// ```yaml
/// server: { capacity: 300, queue: 200, service_time: 5ms, reject_status: 503 }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CapacitySpec {
    /// Requests served concurrently (absent: unlimited).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<NonZeroU32>,
    /// Requests waiting for a slot beyond `capacity` (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<u32>,
    /// How long a served request holds its slot: a duration or a distribution
    /// (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_time: Option<DistributionSpec>,
    /// The status answered beyond the queue (default 503).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reject_status: Option<StatusCodeSpec>,
}
