//! A policy as an Envoy route (its action's `timeout` and `retry_policy`) and the
//! cluster's circuit breakers, where Envoy keeps its retry budget.
//!
//! Envoy's backoff is always `(2^k − 1)·base` with full jitter, capped; it retries by
//! `retry_on` names and listed status codes; it has no ratio budget (its `retry_budget`
//! limits retries in flight to a share of active requests) and no failure-ratio breaker.
//! A name is written only when the policy retries everything it stands for, so the route
//! never retries what the policy would not; what is left is listed as
//! `retriable_status_codes`.

use std::time::Duration;

use chaos_policy::{BackoffShape, BudgetConfig, Outcome, PolicyConfig, RetryAfter, RetryOn};
use serde_yaml::{Mapping, Value};

use super::differences::PROBES;
use super::proto_duration;

/// The names written for what a policy retries, in this order, each when the policy
/// retries every outcome it stands for (`plan/import/envoy.rs` reads them).
pub(super) const NAMES: [&str; 11] = [
    "5xx",
    "gateway-error",
    "reset",
    "connect-failure",
    "refused-stream",
    "retriable-4xx",
    "cancelled",
    "deadline-exceeded",
    "internal",
    "resource-exhausted",
    "unavailable",
];
/// Envoy's default `base_interval`; `max_interval` defaults to ten times it.
const DEFAULT_BASE: Duration = Duration::from_millis(25);
/// Envoy's base interval must be above zero.
const LEAST_BASE: Duration = Duration::from_millis(1);
/// `min_retry_concurrency`'s default, for a ratio budget written as a `retry_budget`.
const MIN_RETRY_CONCURRENCY: u32 = 3;
/// `max_retries`'s default: what Envoy allows without a budget.
const DEFAULT_MAX_RETRIES: u32 = 3;
/// The cluster both files name.
const CLUSTER: &str = "service";

fn map(entries: impl IntoIterator<Item = (&'static str, Value)>) -> Value {
    Value::Mapping(
        entries
            .into_iter()
            .map(|(k, v)| (Value::from(k), v))
            .collect::<Mapping>(),
    )
}

fn text(value: &Value) -> String {
    serde_yaml::to_string(value).expect("YAML values always serialise")
}

/// The route and the cluster, YAML.
pub(super) fn render(config: &PolicyConfig) -> (String, String) {
    let mut policy = vec![];
    let (names, codes) = retry_on(&config.retry_on);
    if !names.is_empty() {
        policy.push(("retry_on", Value::from(names.join(","))));
    }
    policy.push((
        "num_retries",
        Value::from(u64::from(config.max_attempts.saturating_sub(1))),
    ));
    if let Some(t) = config.attempt_timeout {
        policy.push(("per_try_timeout", Value::from(proto_duration(t))));
    }
    if !codes.is_empty() {
        policy.push((
            "retriable_status_codes",
            Value::Sequence(
                codes
                    .into_iter()
                    .map(|c| Value::from(u64::from(c)))
                    .collect(),
            ),
        ));
    }
    let (base, cap) = back_off(config.backoff.shape());
    policy.push((
        "retry_back_off",
        map([
            ("base_interval", Value::from(proto_duration(base))),
            ("max_interval", Value::from(proto_duration(cap))),
        ]),
    ));
    let honoured = match config.retry_after {
        RetryAfter::Ignore => None,
        RetryAfter::Honor { max } => Some(max),
        RetryAfter::Clamp { max_extra } => Some(max_extra),
    };
    if let Some(max) = honoured.filter(|m| !m.is_zero()) {
        policy.push((
            "rate_limited_retry_back_off",
            map([
                (
                    "reset_headers",
                    Value::Sequence(vec![map([
                        ("name", Value::from("retry-after")),
                        ("format", Value::from("SECONDS")),
                    ])]),
                ),
                ("max_interval", Value::from(proto_duration(max))),
            ]),
        ));
    }
    let timeout = config
        .deadline
        .map_or_else(|| "0s".to_owned(), proto_duration);
    let route = map([
        ("match", map([("prefix", Value::from("/"))])),
        (
            "route",
            map([
                ("cluster", Value::from(CLUSTER)),
                ("timeout", Value::from(timeout)),
                ("retry_policy", map(policy)),
            ]),
        ),
    ]);
    let cluster = map([
        ("name", Value::from(CLUSTER)),
        (
            "circuit_breakers",
            map([(
                "thresholds",
                Value::Sequence(vec![thresholds(config.budget.as_ref())]),
            )]),
        ),
    ]);
    (text(&route), text(&cluster))
}

/// The names whose every outcome the policy retries, and the statuses it retries that
/// none of them covers.
fn retry_on(retry_on: &RetryOn) -> (Vec<&'static str>, Vec<u16>) {
    let mut covered = RetryOn::new([]);
    let mut names = Vec::new();
    for name in NAMES {
        let Some(conditions) = crate::plan::import::envoy::retry_on(name, &[]) else {
            continue;
        };
        let stands_for = RetryOn::new(conditions.iter().copied());
        if PROBES
            .iter()
            .all(|&o| !stands_for.matches(o) || retry_on.matches(o))
        {
            names.push(name);
            covered = RetryOn::new(covered.conditions().iter().chain(&conditions).copied());
        }
    }
    let codes: Vec<u16> = PROBES
        .iter()
        .filter_map(|&o| match o {
            Outcome::Status(code) if retry_on.matches(o) && !covered.matches(o) => Some(code),
            _ => None,
        })
        .collect();
    if !codes.is_empty() {
        names.push("retriable-status-codes");
    }
    (names, codes)
}

/// The base and cap of Envoy's backoff nearest the policy's; for a policy that does not
/// wait, Envoy's default (25 ms, capped at 250 ms), written out.
fn back_off(shape: BackoffShape) -> (Duration, Duration) {
    let (base, cap) = match shape {
        BackoffShape::Envoy { base, cap } | BackoffShape::Exponential { base, cap, .. } => {
            (base, cap)
        }
        BackoffShape::Fixed(d) => (d, d),
        BackoffShape::None => (DEFAULT_BASE, DEFAULT_BASE * 10),
    };
    let base = base.max(LEAST_BASE);
    (base, cap.max(base))
}

/// The DEFAULT priority's thresholds: the budget as a `retry_budget` (a ratio budget's
/// ratio as its percent), or `max_retries`.
fn thresholds(budget: Option<&BudgetConfig>) -> Value {
    let retry_budget = |percent: f64, min: u32| {
        map([
            ("priority", Value::from("DEFAULT")),
            (
                "retry_budget",
                map([
                    ("budget_percent", map([("value", Value::from(percent))])),
                    ("min_retry_concurrency", Value::from(u64::from(min))),
                ]),
            ),
        ])
    };
    let max_retries = |n: u32| {
        map([
            ("priority", Value::from("DEFAULT")),
            ("max_retries", Value::from(u64::from(n))),
        ])
    };
    match budget {
        Some(&BudgetConfig::Concurrency {
            percent,
            min_concurrency,
        }) if percent > 0.0 => retry_budget(percent, min_concurrency),
        Some(&BudgetConfig::Concurrency {
            min_concurrency, ..
        }) => max_retries(min_concurrency),
        Some(&BudgetConfig::TokenBucket { ratio, .. } | &BudgetConfig::TtlWindow { ratio, .. })
            if ratio > 0.0 =>
        {
            retry_budget((ratio * 100.0).min(100.0), MIN_RETRY_CONCURRENCY)
        }
        _ => max_retries(DEFAULT_MAX_RETRIES),
    }
}
