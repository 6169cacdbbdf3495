//! Table tests of the budgets and the breaker: one line per rule.

#![allow(clippy::unwrap_used, clippy::float_cmp)] // Tests: a panic is the failure report; the arithmetic is exact.

mod common;

use std::time::Duration;

use chaos_policy::{
    Breaker, BreakerConfig, BreakerState, BudgetConfig, Client, Method, Outcome, Policy, Preset,
    QuotaCosts, Request, RetryBudget, RunCounts,
};
use common::{FAIL, OK, VALID_BREAKER, breaker, build, drive, fail, ms, rng};

// ---- budgets ---------------------------------------------------------------------------

#[test]
fn token_bucket_spends_one_per_retry_and_refills_ratio_per_success() {
    let mut b = build(BudgetConfig::TokenBucket {
        ratio: 0.5,
        max_tokens: 3.0,
        initial_tokens: 2.0,
    });
    let t = Duration::ZERO;
    assert!(b.try_withdraw(t, FAIL).is_some());
    assert!(b.try_withdraw(t, FAIL).is_some());
    assert!(b.try_withdraw(t, FAIL).is_none(), "empty");
    b.on_attempt(t, OK, false, None);
    assert_eq!(b.level(t), 0.5);
    assert!(
        b.try_withdraw(t, FAIL).is_none(),
        "half a token buys nothing"
    );
    for _ in 0..10 {
        b.on_attempt(t, OK, false, None);
    }
    assert_eq!(b.level(t), 3.0, "capped at max_tokens");
    let run = RunCounts {
        logical: 100,
        duration: Duration::from_secs(10),
    };
    assert_eq!(b.bound(run), Some(1.0 + (2.0 + 0.5 * 100.0) / 100.0));
}

#[test]
fn ttl_window_allows_ratio_of_recent_requests_plus_reserve() {
    // Finagle's defaults: 20% of the last 10 s of requests, plus 10/s.
    let mut b = build(BudgetConfig::TtlWindow {
        ratio: 0.2,
        min_per_sec: 0.0,
        ttl: Duration::from_secs(10),
    });
    let t = Duration::from_secs(1);
    for _ in 0..50 {
        b.on_request(t);
    }
    let granted = (0..100)
        .filter(|_| b.try_withdraw(t, FAIL).is_some())
        .count();
    assert_eq!(granted, 10, "20% of 50 requests");
    // Ten seconds later (plus the slot granularity) both the requests and the retries
    // have expired.
    let later = t + Duration::from_secs(11);
    assert_eq!(b.level(later), 0.0);
    assert!(b.try_withdraw(later, FAIL).is_none());
}

#[test]
fn ttl_window_reserve_allows_min_per_sec_times_ttl() {
    let mut b = build(BudgetConfig::TtlWindow {
        ratio: 0.2,
        min_per_sec: 10.0,
        ttl: Duration::from_secs(10),
    });
    let t = Duration::ZERO;
    let granted = (0..1000)
        .filter(|_| b.try_withdraw(t, FAIL).is_some())
        .count();
    assert_eq!(granted, 100, "Finagle's reserve: 10/s over a 10 s ttl");
    let run = RunCounts {
        logical: 1000,
        duration: Duration::from_secs(30),
    };
    let bound = b.bound(run).unwrap();
    assert!((bound - (1.0 + (10.0 * 40.0 + 200.0) / 1000.0)).abs() < 1e-12);
}

#[test]
fn ttl_window_enforces_the_configured_ratio_without_truncation() {
    // tower#857: 0.6 became 1.0 and 0.4 became 0.5 through an integer cast.
    for (ratio, expected) in [(0.6, 60), (0.4, 40), (0.3, 30)] {
        let mut b = build(BudgetConfig::TtlWindow {
            ratio,
            min_per_sec: 0.0,
            ttl: Duration::from_secs(10),
        });
        for _ in 0..100 {
            b.on_request(Duration::ZERO);
        }
        let granted = (0..1000)
            .filter(|_| b.try_withdraw(Duration::ZERO, FAIL).is_some())
            .count();
        assert_eq!(granted, expected, "ratio {ratio}");
    }
}

#[test]
fn grpc_throttle_allows_four_retries_from_a_full_bucket_of_ten_in_a_total_outage() {
    // gRFC A6: every failure costs 1; retries only while tokens > max/2.
    let mut b = build(BudgetConfig::GrpcThrottle {
        max_tokens: 10.0,
        token_ratio: 0.1,
    });
    let t = Duration::ZERO;
    let mut retries = 0;
    for _ in 0..100 {
        b.on_attempt(t, FAIL, true, None);
        if b.try_withdraw(t, FAIL).is_some() {
            retries += 1;
        }
    }
    assert_eq!(retries, 4);
    assert_eq!(b.level(t), 0.0, "drains to zero, never below");
    // From zero, 51 successes are needed to rise above the threshold of 5 again.
    for _ in 0..50 {
        b.on_attempt(t, OK, false, None);
    }
    assert!(b.try_withdraw(t, FAIL).is_none());
    b.on_attempt(t, OK, false, None);
    assert!(b.try_withdraw(t, FAIL).is_some());
}

#[test]
fn grpc_throttle_ignores_non_retryable_failures() {
    let mut b = build(BudgetConfig::GrpcThrottle {
        max_tokens: 10.0,
        token_ratio: 0.1,
    });
    b.on_attempt(Duration::ZERO, Outcome::Status(400), false, None);
    assert_eq!(b.level(Duration::ZERO), 10.0);
}

#[test]
fn grpc_preset_client_gets_three_retries_in_a_total_outage() {
    // A6's example (maxTokens 10, maxAttempts 4), one request at a time: the first request
    // retries 3 times (10 -> 6), the second's first failure takes the count to 5: no more.
    let mut client = Client::new(Policy::new(Preset::Grpc.config()).unwrap());
    let mut r = rng(1);
    let mut retries = 0;
    let mut now = Duration::ZERO;
    for _ in 0..20 {
        let (_, verdict, end) = drive(
            &mut client,
            Request::new(Method::Get),
            now,
            &[FAIL],
            None,
            &mut r,
        );
        retries += verdict.attempts() - 1;
        now = end;
    }
    assert_eq!(retries, 3);
}

#[test]
fn aws_quota_costs_five_ten_after_timeouts_and_refunds_successful_retries() {
    let mut b = build(BudgetConfig::RetryQuota {
        capacity: 500.0,
        costs: QuotaCosts {
            retry: 5.0,
            timeout: 10.0,
            throttling: 5.0,
        },
        success_refill: 1.0,
    });
    let t = Duration::ZERO;
    let g = b.try_withdraw(t, FAIL).unwrap();
    assert_eq!(b.level(t), 495.0);
    b.try_withdraw(t, Outcome::AttemptTimeout).unwrap();
    assert_eq!(b.level(t), 485.0);
    b.on_attempt(t, OK, false, Some(g));
    assert_eq!(b.level(t), 490.0, "a retry that succeeds is refunded");
    b.on_attempt(t, OK, false, None);
    assert_eq!(b.level(t), 491.0, "a first-attempt success refills 1");
    // A full quota pays for 100 retries after errors in a total outage.
    let mut full = build(BudgetConfig::RetryQuota {
        capacity: 500.0,
        costs: QuotaCosts {
            retry: 5.0,
            timeout: 10.0,
            throttling: 5.0,
        },
        success_refill: 1.0,
    });
    let granted = (0..1000)
        .filter(|_| full.try_withdraw(t, FAIL).is_some())
        .count();
    assert_eq!(granted, 100);
}

#[test]
fn aws_2026_quota_pays_35_error_retries_or_100_throttling_retries() {
    let config = Preset::AwsStandard2026.config().budget.unwrap();
    let t = Duration::ZERO;
    let mut b = build(config);
    assert_eq!(
        (0..1000)
            .filter(|_| b.try_withdraw(t, FAIL).is_some())
            .count(),
        35
    );
    let mut b = build(config);
    let throttled = Outcome::Status(429);
    assert_eq!(
        (0..1000)
            .filter(|_| b.try_withdraw(t, throttled).is_some())
            .count(),
        100
    );
}

#[test]
fn envoy_budget_limits_retries_in_flight() {
    let mut b = build(BudgetConfig::Concurrency {
        percent: 20.0,
        min_concurrency: 3,
    });
    let t = Duration::ZERO;
    for _ in 0..10 {
        b.on_request(t);
    }
    // 20% of 10 active is 2, below the floor of 3.
    let grants: Vec<_> = (0..10).filter_map(|_| b.try_withdraw(t, FAIL)).collect();
    assert_eq!(grants.len(), 3);
    // One retry completes: one more may start.
    b.on_attempt(t, FAIL, true, Some(grants[0]));
    assert!(b.try_withdraw(t, FAIL).is_some());
    assert!(b.try_withdraw(t, FAIL).is_none());
    for _ in 0..40 {
        b.on_request(t);
    }
    // 50 active: 10 retries may be in flight.
    assert_eq!(
        (0..100)
            .filter(|_| b.try_withdraw(t, FAIL).is_some())
            .count(),
        7
    );
    assert_eq!(
        b.bound(RunCounts {
            logical: 50,
            duration: t
        }),
        None
    );
}

#[test]
fn budget_validation_names_the_field() {
    let err = BudgetConfig::TokenBucket {
        ratio: -0.1,
        max_tokens: 10.0,
        initial_tokens: 10.0,
    }
    .build()
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "`budget.ratio` is -0.1: it must be a finite number >= 0"
    );
    let err = BudgetConfig::GrpcThrottle {
        max_tokens: 2000.0,
        token_ratio: 0.1,
    }
    .build()
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "`budget.max_tokens` is 2000: it must be at most 1000"
    );
    assert!(
        BudgetConfig::TtlWindow {
            ratio: 0.2,
            min_per_sec: 10.0,
            ttl: Duration::ZERO
        }
        .build()
        .is_err()
    );
    assert!(
        BudgetConfig::TokenBucket {
            ratio: 0.2,
            max_tokens: 1.0,
            initial_tokens: 5.0
        }
        .build()
        .is_err()
    );
}

// ---- breaker ---------------------------------------------------------------------------

#[test]
fn breaker_opens_at_the_failure_ratio_once_min_requests_are_seen() {
    let mut b = breaker();
    let t = ms(100);
    for outcome in [FAIL, FAIL, FAIL] {
        let permit = b.try_admit(t).unwrap();
        b.record(t, outcome, permit);
    }
    assert_eq!(b.state(t), BreakerState::Closed, "3 < min_requests");
    let permit = b.try_admit(t).unwrap();
    b.record(t, OK, permit);
    assert_eq!(b.state(t), BreakerState::Open, "3 of 4 failed");
    assert!(b.try_admit(t + Duration::from_secs(4)).is_none());
}

#[test]
fn breaker_half_opens_after_open_for_and_closes_when_probes_succeed() {
    let mut b = breaker();
    let t = Duration::ZERO;
    let stale = b.try_admit(t).unwrap();
    fail(&mut b, t, 4);
    let later = Duration::from_secs(5);
    assert_eq!(b.state(later), BreakerState::HalfOpen);
    let first = b.try_admit(later).unwrap();
    let second = b.try_admit(later).unwrap();
    assert!(b.try_admit(later).is_none(), "only two probes");
    b.record(later, OK, stale);
    b.record(later, OK, first);
    assert_eq!(
        b.state(later),
        BreakerState::HalfOpen,
        "the stale attempt is no probe"
    );
    b.record(later, OK, second);
    assert_eq!(b.state(later), BreakerState::Closed);
    assert_eq!(b.trips(), 1);
}

#[test]
fn breaker_reopens_on_a_failed_probe() {
    let mut b = breaker();
    fail(&mut b, Duration::ZERO, 4);
    let later = Duration::from_secs(6);
    let probe = b.try_admit(later).unwrap();
    b.record(later, FAIL, probe);
    assert_eq!(b.state(later), BreakerState::Open);
    assert_eq!(b.trips(), 2);
    assert_eq!(
        b.state(later + Duration::from_secs(5)),
        BreakerState::HalfOpen
    );
}

#[test]
fn breaker_ignores_client_errors_and_forgets_old_failures() {
    let mut b = breaker();
    for _ in 0..10 {
        let permit = b.try_admit(Duration::ZERO).unwrap();
        b.record(Duration::ZERO, Outcome::Status(404), permit);
    }
    assert_eq!(b.state(Duration::ZERO), BreakerState::Closed);
    let mut b = breaker();
    fail(&mut b, Duration::ZERO, 3);
    // Eleven seconds later the three failures have left the window.
    let later = Duration::from_secs(12);
    fail(&mut b, later, 1);
    assert_eq!(b.state(later), BreakerState::Closed);
}

#[test]
fn breaker_validation() {
    let good = VALID_BREAKER;
    for bad in [
        BreakerConfig {
            failure_ratio: 1.5,
            ..good
        },
        BreakerConfig {
            failure_ratio: 0.0,
            ..good
        },
        BreakerConfig {
            min_requests: 0,
            ..good
        },
        BreakerConfig {
            half_open_probes: 0,
            ..good
        },
        BreakerConfig {
            open_for: Duration::ZERO,
            ..good
        },
    ] {
        assert!(Breaker::new(bad).is_err(), "{bad:?}");
    }
}
