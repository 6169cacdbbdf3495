//! What a written config runs that the plan's policy did not: one warning per field of
//! the policy (as `plan/resolved.rs` writes it out) where the two differ, with why the
//! format says it otherwise.

use chaos_policy::{Outcome, PolicyConfig, RetryOn};

use super::Format;
use crate::plan::resolved::{self, Value};

/// One outcome of every kind a policy can be asked to retry: every failing HTTP status,
/// every failing gRPC code and every transport failure. Two `retry_on`s that agree on all
/// of them retry the same.
pub(crate) const PROBES: [Outcome; 226] = probes();

const fn probes() -> [Outcome; 226] {
    let mut out = [Outcome::Closed; 226];
    let mut i = 0;
    while i < 200 {
        out[i] = Outcome::Status(400 + i as u16);
        i += 1;
    }
    let mut code = 1;
    while code <= 16 {
        out[i] = Outcome::Grpc(code);
        i += 1;
        code += 1;
    }
    let mut t = 0;
    while t < Outcome::TRANSPORT.len() {
        out[i] = Outcome::TRANSPORT[t];
        i += 1;
        t += 1;
    }
    out
}

/// A warning for each field where `got` (what the file runs) differs from `want`.
pub fn differences(want: &PolicyConfig, got: &PolicyConfig, format: Format) -> Vec<String> {
    let (w, g) = (resolved::policy(want), resolved::policy(got));
    let Value::Map(fields) = &w else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (key, value) in fields {
        let other = g.get(key);
        if key == "retry_on" {
            if let Some(said) = retry_on(&want.retry_on, &got.retry_on) {
                out.push(format!("`retry_on`: {said} ({})", why(key, format)));
            }
            continue;
        }
        if other.is_some_and(|o| o.same(value)) {
            continue;
        }
        let shown = other.map_or_else(|| "nothing".to_owned(), Value::flow);
        out.push(format!(
            "`{key}`: the policy has {}; the {} says {shown} ({})",
            value.flow(),
            format.name(),
            why(key, format)
        ));
    }
    // A field only the written config has (`retry_after_max` once Retry-After is honoured).
    if let Value::Map(theirs) = &g {
        for (key, value) in theirs {
            if w.get(key).is_none() && !matches!(key.as_str(), "retry_on") {
                out.push(format!(
                    "`{key}`: the {} adds {} ({})",
                    format.name(),
                    value.flow(),
                    why(key, format)
                ));
            }
        }
    }
    out
}

/// What the written `retry_on` retries that the policy's did not, and the reverse, by the
/// outcomes each retries; `None` when they retry the same.
fn retry_on(want: &RetryOn, got: &RetryOn) -> Option<String> {
    let list = |pick: &dyn Fn(Outcome) -> bool| -> Vec<String> {
        let mut seen: Vec<String> = Vec::new();
        for o in PROBES.iter().copied().filter(|&o| pick(o)) {
            let name = o.to_string();
            if !seen.contains(&name) {
                seen.push(name);
            }
        }
        seen
    };
    let more = list(&|o| got.matches(o) && !want.matches(o));
    let fewer = list(&|o| want.matches(o) && !got.matches(o));
    let mut parts = Vec::new();
    if !more.is_empty() {
        parts.push(format!("also retries {}", more.join(", ")));
    }
    if !fewer.is_empty() {
        parts.push(format!("no longer retries {}", fewer.join(", ")));
    }
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// Why `format` says `key` otherwise.
fn why(key: &str, format: Format) -> &'static str {
    match (format, key) {
        (Format::GrpcServiceConfig, "max_attempts") => {
            "gRPC clients cap maxAttempts at 5, and a policy that never retries has no retryPolicy"
        }
        (Format::GrpcServiceConfig, "attempt_timeout") => {
            "perAttemptRecvTimeout lives in retryPolicy, which a policy that never retries has not"
        }
        (Format::GrpcServiceConfig, "retry_on") => {
            "gRPC retries by status code; each code stands for its HTTP and transport failures"
        }
        (Format::GrpcServiceConfig, "backoff") => {
            "gRPC's backoff is exponential, above zero, jittered ±20% (gRFC A6 as amended)"
        }
        (Format::GrpcServiceConfig, "honor_retry_after" | "retry_after_max") => {
            "a gRPC client always honours the server's pushback; Retry-After stands for it, up to 60 s"
        }
        (Format::GrpcServiceConfig, "budget") => {
            "gRPC's only budget is retryThrottling (gRFC A6): a ratio budget is written with its ratio as tokenRatio, which limits retries by another rule"
        }
        (Format::GrpcServiceConfig, "breaker") => "gRPC has no circuit breaker",
        (Format::EnvoyRoute, "retry_on") => {
            "Envoy retries by retry_on names and retriable_status_codes; a name is written only when the policy retries all it stands for"
        }
        (Format::EnvoyRoute, "backoff") => {
            "Envoy's backoff is always (2^k - 1) x base_interval with full jitter, capped at max_interval"
        }
        (Format::EnvoyRoute, "deadline") => "the route timeout covers every attempt",
        (Format::EnvoyRoute, "honor_retry_after" | "retry_after_max" | "retry_after_max_extra") => {
            "Envoy honours Retry-After through rate_limited_retry_back_off, up to its max_interval"
        }
        (Format::EnvoyRoute, "budget") => {
            "Envoy's retry budget, in the cluster's circuit breakers, limits retries in flight to a share of active requests (a ratio budget's ratio as budget_percent); without one, at most 3 retries in flight"
        }
        (Format::EnvoyRoute, "breaker") => {
            "Envoy's circuit breakers cap concurrency, not a failure ratio; outlier detection is per host"
        }
        (_, "retry_non_idempotent") => {
            "the config retries what its retry conditions say, for every method"
        }
        (_, "honor_no_retry") => "the config reads no x-chaos-no-retry header",
        _ => "the format has no such setting",
    }
}
