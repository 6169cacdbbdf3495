//! Property tests for the invariants of the core: budgets bound retries, permanent and
//! unsafe requests are never retried, backoff stays in its formula's range, the breaker
//! admits nothing while open, and the same seed gives the same decisions.

#![allow(clippy::unwrap_used, clippy::float_cmp)] // Tests: a panic is the failure report; the arithmetic is exact.

mod common;

use std::time::Duration;

use chaos_policy::{
    Backoff, BreakerConfig, BudgetConfig, Client, Jitter, Method, Outcome, Policy, PolicyConfig,
    QuotaCosts, Request, ResetPhase, RetryCondition, RetryOn, RunCounts,
};
use common::{rng, simulate};
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;

fn outcome() -> impl Strategy<Value = Outcome> {
    prop_oneof![
        3 => Just(Outcome::Status(200)),
        3 => Just(Outcome::Status(503)),
        1 => Just(Outcome::Status(429)),
        1 => Just(Outcome::Status(500)),
        1 => Just(Outcome::Status(400)),
        1 => Just(Outcome::Status(404)),
        1 => Just(Outcome::Status(501)),
        1 => Just(Outcome::ConnectRefused),
        1 => Just(Outcome::ConnectTimeout),
        1 => Just(Outcome::Reset(ResetPhase::AfterWrite)),
        1 => Just(Outcome::Closed),
        1 => Just(Outcome::AttemptTimeout),
        1 => Just(Outcome::TruncatedBody),
    ]
}

fn request() -> impl Strategy<Value = Request> {
    (
        prop_oneof![
            Just(Method::Get),
            Just(Method::Put),
            Just(Method::Delete),
            Just(Method::Post),
            Just(Method::Patch)
        ],
        any::<bool>(),
    )
        .prop_map(|(method, key)| Request {
            method,
            idempotency_key: key,
        })
}

fn millis(range: std::ops::RangeInclusive<u64>) -> impl Strategy<Value = Duration> {
    range.prop_map(Duration::from_millis)
}

fn jitter() -> impl Strategy<Value = Jitter> {
    prop_oneof![
        Just(Jitter::None),
        Just(Jitter::Full),
        Just(Jitter::Equal),
        Just(Jitter::Decorrelated),
        (0.0..2.0f64).prop_map(Jitter::Additive),
        (0.0..=1.0f64).prop_map(Jitter::Proportional),
    ]
}

fn backoff() -> impl Strategy<Value = Backoff> {
    let shape = prop_oneof![
        Just(Backoff::none()),
        millis(0..=2000).prop_map(Backoff::fixed),
        (millis(1..=1000), 1.0..4.0f64, millis(0..=20_000)).prop_map(|(base, m, extra)| {
            Backoff::exponential(base, m, base + extra).expect("cap >= base, multiplier >= 1")
        }),
        (millis(1..=100), millis(0..=1000)).prop_map(|(base, extra)| Backoff::envoy(
            base,
            base + extra
        )
        .expect("cap >= base")),
    ];
    (shape, jitter()).prop_map(|(b, j)| b.with_jitter(j).expect("valid jitter"))
}

fn budget() -> impl Strategy<Value = BudgetConfig> {
    prop_oneof![
        (0.0..1.0f64, 0.0..20.0f64, 0.0..=1.0f64).prop_map(|(ratio, max, fill)| {
            BudgetConfig::TokenBucket {
                ratio,
                max_tokens: max,
                initial_tokens: max * fill,
            }
        }),
        (0.0..1.0f64, 0.0..20.0f64, millis(100..=20_000)).prop_map(|(ratio, min, ttl)| {
            BudgetConfig::TtlWindow {
                ratio,
                min_per_sec: min,
                ttl,
            }
        }),
        (1.0..100.0f64, 0.0..1.0f64).prop_map(|(max, ratio)| BudgetConfig::GrpcThrottle {
            max_tokens: max,
            token_ratio: ratio,
        }),
        (0.0..100.0f64, 1.0..10.0f64, 1.0..20.0f64, 0.0..2.0f64).prop_map(
            |(capacity, retry, timeout, refill)| BudgetConfig::RetryQuota {
                capacity,
                costs: QuotaCosts {
                    retry,
                    timeout,
                    throttling: retry,
                },
                success_refill: refill,
            }
        ),
    ]
}

fn breaker() -> impl Strategy<Value = Option<BreakerConfig>> {
    proptest::option::of(
        (
            0.05..=1.0f64,
            1u32..20,
            millis(50..=5000),
            millis(10..=2000),
            1u32..5,
        )
            .prop_map(
                |(failure_ratio, min_requests, window, open_for, half_open_probes)| BreakerConfig {
                    failure_ratio,
                    min_requests,
                    window,
                    open_for,
                    half_open_probes,
                },
            ),
    )
}

/// A policy that may be as wrong as a user can make it.
fn any_policy() -> impl Strategy<Value = PolicyConfig> {
    (
        1u32..8,
        backoff(),
        proptest::option::of(budget()),
        breaker(),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(
            |(max_attempts, backoff, budget, breaker, any, unsafe_posts)| PolicyConfig {
                max_attempts,
                backoff,
                budget,
                breaker,
                retry_on: if any {
                    RetryOn::new([RetryCondition::Any])
                } else {
                    RetryOn::default()
                },
                retry_non_idempotent: unsafe_posts,
                ..PolicyConfig::default()
            },
        )
}

proptest! {
    // Failing seeds are kept in policy/proptest-regressions/ (committed) and replayed first.
    #![proptest_config(ProptestConfig {
        cases: 256,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "proptest-regressions/properties.txt",
        ))),
        ..ProptestConfig::default()
    })]

    #[test]
    fn retries_never_exceed_the_budgets_bound(
        mut config in any_policy(),
        budget in budget(),
        requests in proptest::collection::vec(request(), 1..200),
        outcomes in proptest::collection::vec(outcome(), 1..50),
        gap in millis(0..=100),
        seed in any::<u64>(),
    ) {
        config.budget = Some(budget);
        let mut client = Client::new(Policy::new(config).expect("generated policies are valid"));
        let seen = simulate(&mut client, &requests, gap, &outcomes, seed);
        let run = RunCounts { logical: seen.logical, duration: seen.last_send };
        let bound = client.budget_bound(run).expect("every generated budget has a bound");
        let amplification = seen.attempts as f64 / seen.logical as f64;
        prop_assert!(
            amplification <= bound + 1e-9,
            "amplification {amplification} > bound {bound} ({} retries, {} logical)",
            seen.retries, seen.logical
        );
    }

    #[test]
    fn safe_policies_never_retry_permanent_or_unsafe_requests(
        mut config in any_policy(),
        requests in proptest::collection::vec(request(), 1..100),
        outcomes in proptest::collection::vec(outcome(), 1..50),
        seed in any::<u64>(),
    ) {
        config.retry_on = RetryOn::default();
        config.retry_non_idempotent = false;
        let mut client = Client::new(Policy::new(config).expect("generated policies are valid"));
        let seen = simulate(&mut client, &requests, Duration::from_millis(5), &outcomes, seed);
        prop_assert_eq!(seen.violations, vec![]);
    }

    #[test]
    fn no_attempt_while_the_breaker_is_open(
        mut config in any_policy(),
        breaker in breaker(),
        requests in proptest::collection::vec(request(), 1..200),
        outcomes in proptest::collection::vec(outcome(), 1..50),
        gap in millis(0..=20),
        seed in any::<u64>(),
    ) {
        config.breaker = breaker;
        let probes = breaker.map_or(u64::MAX, |b| u64::from(b.half_open_probes));
        let mut client = Client::new(Policy::new(config).expect("generated policies are valid"));
        let seen = simulate(&mut client, &requests, gap, &outcomes, seed);
        prop_assert_eq!(seen.sent_while_open, 0);
        prop_assert!(seen.half_open_in_flight <= probes);
    }

    #[test]
    fn backoff_stays_in_its_formulas_range(
        backoff in backoff(),
        retry in 1u32..40,
        previous in proptest::option::of(millis(0..=60_000)),
        seed in any::<u64>(),
    ) {
        let mut r = rng(seed);
        let delay = backoff.delay(retry, previous, &mut r);
        let (low, high) = backoff.range(retry, previous);
        prop_assert!(low <= delay && delay <= high, "{delay:?} outside [{low:?}, {high:?}]");
        // The cap, or above it by at most a proportional jitter's spread (gRPC jitters
        // after capping).
        let max = backoff.max_delay();
        prop_assert!(delay <= max, "{delay:?} above the longest delay {max:?}");
        if !matches!(backoff.jitter(), Jitter::Proportional(_)) {
            let (_, cap) = backoff.base_and_cap();
            prop_assert_eq!(max, cap);
        }
    }

    #[test]
    fn the_same_seed_gives_the_same_decisions(
        config in any_policy(),
        requests in proptest::collection::vec(request(), 1..50),
        outcomes in proptest::collection::vec(outcome(), 1..20),
        seed in any::<u64>(),
    ) {
        let policy = Policy::new(config).expect("generated policies are valid");
        let run = || simulate(&mut Client::new(policy.clone()), &requests, Duration::from_millis(3), &outcomes, seed);
        prop_assert_eq!(run(), run());
    }
}
