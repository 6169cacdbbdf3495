//! A policy as a gRPC service config: one `methodConfig` (its `timeout` and A6
//! `retryPolicy`) and the top-level `retryThrottling`.
//!
//! What gRPC can say is narrower than a plan: at most 5 attempts, an exponential backoff
//! jittered ±20%, retries by status code, the server's pushback always honoured, A6's
//! throttle as the only budget, no breaker. A ratio budget (token bucket, Finagle's TTL
//! window) is written as A6's throttle with the same ratio, the nearest A6 has: it says
//! so (see `differences.rs`), since the two limit retries by different rules.

use std::time::Duration;

use chaos_policy::{BackoffShape, BudgetConfig, Outcome, PolicyConfig};
use serde_json::{Map, Value, json};

use super::{Scope, proto_duration};
use crate::plan::import::grpc::CODES;

/// A6: clients cap `maxAttempts` at 5.
const MAX_ATTEMPTS: u32 = 5;
/// A6 needs a backoff above zero: a policy that waits nothing waits this.
const LEAST_BACKOFF: Duration = Duration::from_millis(1);
/// A6's throttle for a ratio budget that names no bucket size: its own example's.
const DEFAULT_MAX_TOKENS: f64 = 10.0;
/// grpc-go refuses `maxTokens` outside (0, 1000].
const MAX_TOKENS_LIMIT: f64 = 1000.0;

/// The service config, pretty JSON.
pub(super) fn render(config: &PolicyConfig, scope: &Scope) -> String {
    let mut name = Map::new();
    if let Some(service) = &scope.service {
        name.insert("service".into(), json!(service));
        if let Some(method) = &scope.method {
            name.insert("method".into(), json!(method));
        }
    }
    let mut method = Map::new();
    method.insert("name".into(), json!([name]));
    if let Some(deadline) = config.deadline {
        method.insert("timeout".into(), json!(proto_duration(deadline)));
    }
    let codes = retryable_codes(config);
    if config.max_attempts >= 2 && !codes.is_empty() {
        method.insert("retryPolicy".into(), retry_policy(config, &codes));
    }
    let mut root = Map::new();
    root.insert("methodConfig".into(), json!([method]));
    if let Some(throttling) = config.budget.as_ref().and_then(throttling) {
        root.insert("retryThrottling".into(), throttling);
    }
    let mut text =
        serde_json::to_string_pretty(&Value::Object(root)).expect("JSON values always serialise");
    text.push('\n');
    text
}

fn retry_policy(config: &PolicyConfig, codes: &[&str]) -> Value {
    let (initial, multiplier, max) = match config.backoff.shape() {
        BackoffShape::Exponential {
            base,
            multiplier,
            cap,
        } => (base, multiplier, cap),
        BackoffShape::Fixed(d) => (d, 1.0, d),
        // Envoy's (2^k − 1)·base grows by about two from its second retry on.
        BackoffShape::Envoy { base, cap } => (base, 2.0, cap),
        BackoffShape::None => (LEAST_BACKOFF, 1.0, LEAST_BACKOFF),
    };
    let initial = initial.max(LEAST_BACKOFF);
    let mut rp = Map::new();
    rp.insert(
        "maxAttempts".into(),
        json!(config.max_attempts.min(MAX_ATTEMPTS)),
    );
    rp.insert("initialBackoff".into(), json!(proto_duration(initial)));
    rp.insert("maxBackoff".into(), json!(proto_duration(max.max(initial))));
    rp.insert("backoffMultiplier".into(), json!(multiplier));
    rp.insert("retryableStatusCodes".into(), json!(codes));
    if let Some(t) = config.attempt_timeout {
        rp.insert("perAttemptRecvTimeout".into(), json!(proto_duration(t)));
    }
    Value::Object(rp)
}

/// The status codes whose failures the policy retries, in the order of their numbers. A
/// policy that names gRPC codes (the `transient` set names three) gets exactly the codes it
/// retries; one that names only HTTP and transport failures gets every code that stands
/// for one of them in the importer's table (503 is UNAVAILABLE).
fn retryable_codes(config: &PolicyConfig) -> Vec<&'static str> {
    let names_codes = CODES
        .iter()
        .any(|(_, number, _)| *number != 0 && config.retry_on.matches(Outcome::Grpc(*number)));
    CODES
        .iter()
        .filter(|(_, number, conditions)| {
            if conditions.is_empty() {
                return false;
            }
            if names_codes {
                return config.retry_on.matches(Outcome::Grpc(*number));
            }
            let stands_for = chaos_policy::RetryOn::new(conditions.iter().copied());
            super::differences::PROBES
                .iter()
                .any(|&outcome| stands_for.matches(outcome) && config.retry_on.matches(outcome))
        })
        .map(|(name, _, _)| *name)
        .collect()
}

/// A6's `retryThrottling` for a budget, when A6 has anything near it.
fn throttling(budget: &BudgetConfig) -> Option<Value> {
    let (max_tokens, token_ratio) = match *budget {
        BudgetConfig::GrpcThrottle {
            max_tokens,
            token_ratio,
        } => (max_tokens, token_ratio),
        BudgetConfig::TokenBucket {
            ratio, max_tokens, ..
        } => (max_tokens, ratio),
        BudgetConfig::TtlWindow { ratio, .. } => (DEFAULT_MAX_TOKENS, ratio),
        BudgetConfig::RetryQuota { .. } | BudgetConfig::Concurrency { .. } => return None,
    };
    (token_ratio > 0.0 && max_tokens > 0.0).then(|| {
        json!({
            "maxTokens": max_tokens.min(MAX_TOKENS_LIMIT),
            "tokenRatio": token_ratio,
        })
    })
}
