#![allow(clippy::unwrap_used)] // Tests: a panic is the failure report.

use std::time::Duration;

use chaos_policy::{
    Backoff, BudgetConfig, Jitter, PolicyConfig, RetryAfter, RetryCondition, RetryOn,
};
use proptest::prelude::*;

use super::differences::PROBES;
use super::{Format, Scope, differences, export};
use crate::plan::import::{add_conditions, grpc::CODES};

/// Two policies that run the same: every field equal, `retry_on` by what it retries.
fn assert_same(want: &PolicyConfig, got: &PolicyConfig) {
    for o in PROBES {
        assert_eq!(
            want.retry_on.matches(o),
            got.retry_on.matches(o),
            "retry_on differs on {o}: {:?} vs {:?}",
            want.retry_on,
            got.retry_on
        );
    }
    let strip = |c: &PolicyConfig| PolicyConfig {
        retry_on: RetryOn::new([]),
        ..c.clone()
    };
    assert_eq!(strip(want), strip(got));
}

fn duration() -> impl Strategy<Value = Duration> {
    // Milliseconds to minutes, with nanoseconds: a protobuf Duration keeps all nine digits.
    (1u64..300_000, 0u32..1_000_000)
        .prop_map(|(ms, ns)| Duration::from_millis(ms) + Duration::from_nanos(u64::from(ns)))
}

/// A policy a gRPC service config can say: gRFC A6's retryPolicy, its throttle, a timeout.
fn grpc_policy() -> impl Strategy<Value = PolicyConfig> {
    (
        2u32..=5,
        duration(),
        1.0f64..10.0,
        0u64..60_000,
        proptest::collection::btree_set(1u8..=16, 1..6),
        proptest::option::of(duration()),
        proptest::option::of(duration()),
        proptest::option::of((0.001f64..=1000.0, 0.001f64..5.0)),
    )
        .prop_map(
            |(attempts, initial, multiplier, extra, codes, deadline, per_attempt, throttle)| {
                let mut conditions = Vec::new();
                for code in codes {
                    let (_, _, stands_for) = CODES[usize::from(code)];
                    add_conditions(&mut conditions, stands_for);
                }
                PolicyConfig {
                    max_attempts: attempts,
                    attempt_timeout: per_attempt,
                    deadline,
                    backoff: Backoff::exponential(
                        initial,
                        multiplier,
                        initial + Duration::from_millis(extra),
                    )
                    .and_then(|b| b.with_jitter(Jitter::Proportional(0.2)))
                    .unwrap(),
                    retry_on: RetryOn::new(conditions),
                    retry_after: RetryAfter::Honor {
                        max: Duration::from_secs(60),
                    },
                    budget: throttle.map(|(max_tokens, token_ratio)| BudgetConfig::GrpcThrottle {
                        max_tokens,
                        token_ratio,
                    }),
                    ..PolicyConfig::default()
                }
            },
        )
}

/// A policy an Envoy route and cluster can say.
fn envoy_policy() -> impl Strategy<Value = PolicyConfig> {
    // Every name the exporter writes, as the importer reads them.
    let names = proptest::sample::subsequence(super::envoy::NAMES.to_vec(), 0..4);
    (
        1u32..=10,
        proptest::option::of(duration()),
        proptest::option::of(duration()),
        duration(),
        0u64..60_000,
        names,
        proptest::collection::btree_set(400u16..600, 0..4),
        proptest::option::of(duration()),
        prop_oneof![
            (0u32..10).prop_map(|n| (0.0, n)),
            (0.1f64..=100.0, 0u32..10),
        ],
    )
        .prop_map(
            |(
                attempts,
                per_try,
                deadline,
                base,
                extra,
                names,
                codes,
                retry_after,
                (percent, min),
            )| {
                let codes: Vec<u16> = codes.into_iter().collect();
                let mut conditions = Vec::new();
                for name in names {
                    add_conditions(
                        &mut conditions,
                        &crate::plan::import::envoy::retry_on(name, &[]).unwrap(),
                    );
                }
                let statuses: Vec<RetryCondition> =
                    codes.iter().map(|&c| RetryCondition::Status(c)).collect();
                add_conditions(&mut conditions, &statuses);
                PolicyConfig {
                    max_attempts: attempts,
                    attempt_timeout: per_try,
                    deadline,
                    backoff: Backoff::envoy(base, base + Duration::from_millis(extra))
                        .and_then(|b| b.with_jitter(Jitter::Full))
                        .unwrap(),
                    retry_on: RetryOn::new(conditions),
                    retry_after: retry_after
                        .map_or(RetryAfter::Ignore, |max| RetryAfter::Honor { max }),
                    budget: Some(BudgetConfig::Concurrency {
                        percent,
                        min_concurrency: min,
                    }),
                    ..PolicyConfig::default()
                }
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn a_grpc_service_config_exported_imports_back_as_the_same_policy(p in grpc_policy()) {
        let exported = export(&p, Format::GrpcServiceConfig, &Scope::default()).unwrap();
        assert_same(&p, &exported.policy);
        prop_assert!(exported.warnings.is_empty(), "{:?}", exported.warnings);
    }

    #[test]
    fn a_grpc_config_for_one_method_applies_to_that_method(p in grpc_policy()) {
        let scope = Scope { service: Some("shop.Cart".into()), method: Some("Checkout".into()) };
        let exported = export(&p, Format::GrpcServiceConfig, &scope).unwrap();
        assert_same(&p, &exported.policy);
    }

    #[test]
    fn an_envoy_route_and_cluster_exported_import_back_as_the_same_policy(p in envoy_policy()) {
        let exported = export(&p, Format::EnvoyRoute, &Scope::default()).unwrap();
        assert_same(&p, &exported.policy);
        prop_assert!(differences(&p, &exported.policy, Format::EnvoyRoute).is_empty());
    }

    /// Whatever the policy, the export is one the importer takes, and exporting what it
    /// runs changes nothing more: a second export is the first.
    #[test]
    fn any_policy_exports_to_what_it_runs_and_that_is_a_fixed_point(p in any_policy(), grpc in any::<bool>()) {
        let format = if grpc { Format::GrpcServiceConfig } else { Format::EnvoyRoute };
        let once = export(&p, format, &Scope::default()).unwrap();
        let twice = export(&once.policy, format, &Scope::default()).unwrap();
        assert_same(&once.policy, &twice.policy);
        prop_assert_eq!(&once.files, &twice.files);
    }
}

/// Policies a plan can write: any backoff shape and jitter, any budget, a breaker.
fn any_policy() -> impl Strategy<Value = PolicyConfig> {
    let backoff = prop_oneof![
        Just(Backoff::none()),
        duration().prop_map(Backoff::fixed),
        (duration(), 1.0f64..4.0, 0u64..10_000).prop_map(|(b, m, e)| Backoff::exponential(
            b,
            m,
            b + Duration::from_millis(e)
        )
        .unwrap()),
        (duration(), 0u64..10_000).prop_map(|(b, e)| Backoff::envoy(
            b,
            b + Duration::from_millis(e)
        )
        .unwrap()),
    ];
    let jitter = prop_oneof![
        Just(Jitter::None),
        Just(Jitter::Full),
        Just(Jitter::Equal),
        Just(Jitter::Decorrelated),
    ];
    let budget = prop_oneof![
        Just(None),
        (0.01f64..1.0).prop_map(|ratio| Some(BudgetConfig::TtlWindow {
            ratio,
            min_per_sec: 5.0,
            ttl: Duration::from_secs(10)
        })),
        (0.01f64..1.0, 1.0f64..100.0).prop_map(|(ratio, max_tokens)| Some(
            BudgetConfig::TokenBucket {
                ratio,
                max_tokens,
                initial_tokens: max_tokens
            }
        )),
    ];
    let retry_on = proptest::sample::subsequence(
        vec![
            "transient",
            "5xx",
            "gateway-error",
            "reset",
            "timeout",
            "503",
            "429",
            "409",
            "unavailable",
        ],
        1..4,
    );
    (
        1u32..8,
        backoff,
        jitter,
        budget,
        retry_on,
        proptest::option::of(duration()),
        any::<bool>(),
    )
        .prop_map(
            |(attempts, backoff, jitter, budget, retry_on, deadline, honour)| {
                let backoff = backoff.with_jitter(jitter).unwrap_or(backoff);
                PolicyConfig {
                    max_attempts: attempts,
                    deadline,
                    backoff,
                    retry_on: RetryOn::new(
                        retry_on
                            .into_iter()
                            .map(|c| RetryCondition::parse(c).unwrap()),
                    ),
                    retry_after: if honour {
                        RetryAfter::Honor {
                            max: Duration::from_secs(2),
                        }
                    } else {
                        RetryAfter::Ignore
                    },
                    budget,
                    ..PolicyConfig::default()
                }
            },
        )
}

#[test]
fn what_a_grpc_config_cannot_say_is_named() {
    let policy = PolicyConfig {
        max_attempts: 4,
        attempt_timeout: Some(Duration::from_secs(1)),
        backoff: Backoff::exponential(Duration::from_millis(100), 2.0, Duration::from_secs(2))
            .and_then(|b| b.with_jitter(Jitter::Decorrelated))
            .unwrap(),
        retry_after: RetryAfter::Honor {
            max: Duration::from_secs(2),
        },
        budget: Some(BudgetConfig::TtlWindow {
            ratio: 0.1,
            min_per_sec: 5.0,
            ttl: Duration::from_secs(10),
        }),
        breaker: Some(chaos_policy::BreakerConfig {
            failure_ratio: 0.5,
            min_requests: 50,
            window: Duration::from_secs(2),
            open_for: Duration::from_secs(1),
            half_open_probes: 5,
        }),
        ..PolicyConfig::default()
    };
    let exported = export(&policy, Format::GrpcServiceConfig, &Scope::default()).unwrap();
    let said = exported.warnings.join("\n");
    for needle in [
        "`retry_on`: no longer retries 408",
        "`backoff`",
        "±20%",
        "`retry_after_max`",
        "`budget`",
        "tokenRatio",
        "`breaker`: the policy has",
        "no circuit breaker",
    ] {
        assert!(said.contains(needle), "{needle} missing from:\n{said}");
    }
    let json: serde_json::Value = serde_json::from_str(&exported.files[0].text).unwrap();
    assert_eq!(json["retryThrottling"]["tokenRatio"], 0.1);
    assert_eq!(json["methodConfig"][0]["retryPolicy"]["maxAttempts"], 4);
    assert_eq!(
        json["methodConfig"][0]["retryPolicy"]["retryableStatusCodes"],
        serde_json::json!(["DEADLINE_EXCEEDED", "RESOURCE_EXHAUSTED", "UNAVAILABLE"])
    );
}

#[test]
fn an_http_policy_retrying_503_becomes_unavailable() {
    let policy = PolicyConfig {
        retry_on: RetryOn::new([RetryCondition::Status(503)]),
        ..PolicyConfig::default()
    };
    let exported = export(&policy, Format::GrpcServiceConfig, &Scope::default()).unwrap();
    let json: serde_json::Value = serde_json::from_str(&exported.files[0].text).unwrap();
    assert_eq!(
        json["methodConfig"][0]["retryPolicy"]["retryableStatusCodes"],
        serde_json::json!(["UNAVAILABLE"])
    );
    assert!(
        exported.warnings.iter().any(|w| w.contains("also retries")),
        "{:?}",
        exported.warnings
    );
}

#[test]
fn proto_durations_are_exact() {
    use super::proto_duration;
    assert_eq!(proto_duration(Duration::from_millis(100)), "0.1s");
    assert_eq!(proto_duration(Duration::from_secs(15)), "15s");
    assert_eq!(proto_duration(Duration::new(1, 1)), "1.000000001s");
    assert_eq!(proto_duration(Duration::ZERO), "0s");
}
