//! Table tests: one line per rule of the core (classification, idempotency, backoff,
//! budgets, breaker, sessions, presets, validation).

#![allow(clippy::unwrap_used, clippy::float_cmp)] // Tests: a panic is the failure report; the arithmetic is exact.

mod common;

use std::time::Duration;

use chaos_policy::{
    Action, Backoff, Breaker, BreakerConfig, BreakerState, BudgetConfig, Class, Client,
    ConfigError, Jitter, Method, Outcome, Policy, PolicyConfig, Preset, QuotaCosts, Request,
    ResetPhase, RetryAfter, RetryBudget, RetryCondition, RetryOn, RunCounts, Violation,
};
use common::{drive, ms, rng};

// ---- classification --------------------------------------------------------------------

#[test]
fn classifies_outcomes_per_the_design_vocabulary() {
    let table: &[(Outcome, Class)] = &[
        (Outcome::Status(200), Class::Success),
        (Outcome::Status(204), Class::Success),
        (Outcome::Status(304), Class::Success),
        (Outcome::Status(408), Class::Transient),
        (Outcome::Status(429), Class::Transient),
        (Outcome::Status(502), Class::Transient),
        (Outcome::Status(503), Class::Transient),
        (Outcome::Status(504), Class::Transient),
        (Outcome::Status(400), Class::Permanent),
        (Outcome::Status(401), Class::Permanent),
        (Outcome::Status(403), Class::Permanent),
        (Outcome::Status(404), Class::Permanent),
        (Outcome::Status(409), Class::Permanent),
        (Outcome::Status(422), Class::Permanent),
        (Outcome::Status(500), Class::Permanent),
        (Outcome::Status(501), Class::Permanent),
        (Outcome::ConnectRefused, Class::Transient),
        (Outcome::ConnectTimeout, Class::Transient),
        (Outcome::Reset(ResetPhase::AfterWrite), Class::Transient),
        (Outcome::Reset(ResetPhase::BeforeWrite), Class::Transient),
        (Outcome::Closed, Class::Transient),
        (Outcome::AttemptTimeout, Class::Transient),
        (Outcome::TruncatedBody, Class::Transient),
    ];
    for &(outcome, class) in table {
        assert_eq!(outcome.class(), class, "{outcome}");
    }
}

#[test]
fn only_connect_failures_prove_a_request_unsent() {
    for outcome in [Outcome::ConnectRefused, Outcome::ConnectTimeout] {
        assert!(outcome.proves_unsent(), "{outcome}");
    }
    for outcome in [
        Outcome::Reset(ResetPhase::BeforeWrite),
        Outcome::Reset(ResetPhase::AfterWrite),
        Outcome::Closed,
        Outcome::AttemptTimeout,
        Outcome::TruncatedBody,
        Outcome::Status(503),
    ] {
        assert!(!outcome.proves_unsent(), "{outcome}");
    }
}

#[test]
fn forbids_retry_after_4xx_except_408_429_and_after_501() {
    for code in [400, 401, 403, 404, 409, 410, 422, 451, 501] {
        assert!(Outcome::Status(code).forbids_retry(), "{code}");
    }
    for code in [200, 408, 429, 500, 502, 503, 504] {
        assert!(!Outcome::Status(code).forbids_retry(), "{code}");
    }
    assert!(!Outcome::AttemptTimeout.forbids_retry());
}

#[test]
fn retry_on_narrows_and_widens() {
    let check = |conditions: &[&str], outcome: Outcome, expected: bool| {
        let on = RetryOn::new(
            conditions
                .iter()
                .map(|c| RetryCondition::parse(c).expect(c)),
        );
        assert_eq!(on.matches(outcome), expected, "{conditions:?} {outcome}");
    };
    check(&["transient"], Outcome::Status(503), true);
    check(&["transient"], Outcome::Status(500), false);
    check(&["transient", "500"], Outcome::Status(500), true);
    check(&["503"], Outcome::Status(502), false);
    check(&["503"], Outcome::AttemptTimeout, false);
    check(&["5xx"], Outcome::Status(501), true);
    check(&["gateway-error"], Outcome::Status(500), false);
    check(&["gateway_error"], Outcome::Status(504), true);
    check(&["connect-failure"], Outcome::ConnectRefused, true);
    check(
        &["connect-failure"],
        Outcome::Reset(ResetPhase::Unknown),
        false,
    );
    check(&["reset"], Outcome::Closed, true);
    check(&["reset"], Outcome::TruncatedBody, true);
    check(&["timeout"], Outcome::AttemptTimeout, true);
    check(&["any"], Outcome::Status(400), true);
    check(&["any"], Outcome::Status(200), false);
    check(&["ANY"], Outcome::Status(404), true);
    assert_eq!(RetryCondition::parse("teapot"), None);
    assert_eq!(RetryCondition::parse("99"), None);
    assert_eq!(RetryCondition::parse("600"), None);
}

// ---- idempotency -----------------------------------------------------------------------

#[test]
fn idempotency_by_method_and_key() {
    let table: &[(&str, bool, bool)] = &[
        ("GET", false, true),
        ("head", false, true),
        ("PUT", false, true),
        ("DELETE", false, true),
        ("OPTIONS", false, true),
        ("POST", false, false),
        ("PATCH", false, false),
        ("TRACE", false, false),
        ("POST", true, true),
        ("PATCH", true, true),
    ];
    for &(method, key, idempotent) in table {
        let mut request = Request::new(Method::parse(method));
        if key {
            request = request.with_idempotency_key();
        }
        assert_eq!(request.is_idempotent(), idempotent, "{method} key={key}");
    }
}

#[test]
fn violations_of_a_retry() {
    let get = Request::new(Method::Get);
    let post = Request::new(Method::Post);
    let keyed = post.with_idempotency_key();
    let v = |r: Request, o: Outcome| Violation::of_retry(r, o).collect::<Vec<_>>();
    assert_eq!(v(get, Outcome::Status(503)), []);
    assert_eq!(v(get, Outcome::Status(404)), [Violation::RetriedPermanent]);
    assert_eq!(
        v(post, Outcome::Status(503)),
        [Violation::RetriedNonIdempotent]
    );
    assert_eq!(v(post, Outcome::ConnectRefused), []);
    assert_eq!(
        v(post, Outcome::Status(400)),
        [Violation::RetriedPermanent, Violation::RetriedNonIdempotent]
    );
    assert_eq!(v(keyed, Outcome::Reset(ResetPhase::AfterWrite)), []);
}

// ---- backoff ---------------------------------------------------------------------------

#[test]
fn exponential_backoff_doubles_from_base_to_cap() {
    // The seed's example: base 100 ms, x2 -> 100, 200, 400, 800 ms, then the cap.
    let b = Backoff::exponential(ms(100), 2.0, ms(1000)).unwrap();
    let got: Vec<u128> = (1..=6).map(|k| b.ceiling(k).as_millis()).collect();
    assert_eq!(got, [100, 200, 400, 800, 1000, 1000]);
}

#[test]
fn exponential_backoff_survives_huge_retry_numbers() {
    let b = Backoff::exponential(ms(100), 10.0, Duration::from_secs(30)).unwrap();
    assert_eq!(b.ceiling(u32::MAX), Duration::from_secs(30));
}

#[test]
fn fixed_and_none_backoffs() {
    assert_eq!(Backoff::fixed(ms(250)).ceiling(7), ms(250));
    assert_eq!(Backoff::none().ceiling(3), Duration::ZERO);
}

#[test]
fn envoy_backoff_ceilings_are_two_to_the_k_minus_one() {
    // Envoy docs: base 25 ms -> first retry in 0-24 ms, second 0-74, third 0-174.
    let b = Backoff::envoy(ms(25), ms(250)).unwrap();
    let got: Vec<u128> = (1..=5).map(|k| b.ceiling(k).as_millis()).collect();
    assert_eq!(got, [25, 75, 175, 250, 250]);
}

#[test]
fn jitter_ranges_follow_their_formulas() {
    let exp = Backoff::exponential(ms(100), 2.0, ms(1000)).unwrap();
    let with = |j| exp.with_jitter(j).unwrap();
    assert_eq!(with(Jitter::None).range(3, None), (ms(400), ms(400)));
    assert_eq!(with(Jitter::Full).range(3, None), (ms(0), ms(400)));
    assert_eq!(with(Jitter::Equal).range(3, None), (ms(200), ms(400)));
    assert_eq!(
        with(Jitter::Decorrelated).range(1, None),
        (ms(100), ms(300))
    );
    assert_eq!(
        with(Jitter::Decorrelated).range(2, Some(ms(250))),
        (ms(100), ms(750))
    );
    assert_eq!(
        with(Jitter::Decorrelated).range(2, Some(ms(900))),
        (ms(100), ms(1000))
    );
    assert_eq!(
        with(Jitter::Additive(0.5)).range(2, None),
        (ms(200), ms(300))
    );
    assert_eq!(
        with(Jitter::Additive(0.99)).range(4, None),
        (ms(800), ms(1000))
    );
}

#[test]
fn jittered_draws_are_pinned_per_seed() {
    // Seed 7's first five delays (ns) for each jitter, from 100 ms doubling to a 1 s cap;
    // decorrelated draws from the delay before. Values, not the formulas again: a change to
    // a range, to the draw or to the seed's stream fails here. By hand, seed 7's first unit
    // draw is 0.15779...: full 15.78 ms of [0, 100], equal 50 + 7.89, additive(0.5)
    // 100 + 7.89, decorrelated 100 + 31.56 of [100, 300]. The last decorrelated and
    // additive draws land on the cap.
    let exp = Backoff::exponential(ms(100), 2.0, ms(1000)).unwrap();
    let draws = |jitter, seed| {
        let b = exp.with_jitter(jitter).unwrap();
        let mut r = rng(seed);
        let mut previous = None;
        (1..=5)
            .map(|k| {
                let delay = b.delay(k, previous, &mut r);
                previous = Some(delay);
                delay.as_nanos()
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(
        draws(Jitter::Full, 7),
        [
            15_779_609,
            33_597_872,
            281_710_451,
            581_393_037,
            601_259_015
        ]
    );
    assert_eq!(
        draws(Jitter::Equal, 7),
        [
            57_889_804,
            116_798_936,
            340_855_225,
            690_696_518,
            800_629_507
        ]
    );
    assert_eq!(
        draws(Jitter::Decorrelated, 7),
        [
            131_559_219,
            149_502_711,
            345_445_958,
            780_475_400,
            1_000_000_000
        ]
    );
    assert_eq!(
        draws(Jitter::Additive(0.5), 7),
        [
            107_889_804,
            216_798_936,
            540_855_225,
            945_348_259,
            1_000_000_000
        ]
    );
    assert_ne!(draws(Jitter::Full, 7), draws(Jitter::Full, 8));
}

#[test]
fn backoff_validation_has_one_message_per_rule() {
    assert_eq!(
        Backoff::exponential(ms(100), 2.0, ms(50)),
        Err(ConfigError::CapBelowBase {
            base: ms(100),
            cap: ms(50)
        })
    );
    assert_eq!(
        Backoff::exponential(ms(100), 0.5, ms(500)),
        Err(ConfigError::MultiplierBelowOne(0.5))
    );
    assert!(matches!(
        Backoff::exponential(ms(100), f64::NAN, ms(500)),
        Err(ConfigError::MultiplierBelowOne(_))
    ));
    assert_eq!(
        Backoff::exponential(Duration::ZERO, 2.0, ms(500)),
        Err(ConfigError::ZeroBase)
    );
    assert!(Backoff::none().with_jitter(Jitter::Additive(-1.0)).is_err());
    let message = ConfigError::CapBelowBase {
        base: ms(100),
        cap: ms(50),
    }
    .to_string();
    assert_eq!(
        message,
        "backoff `cap` (50ms) is below `base` (100ms): raise `cap` or lower `base`"
    );
}

// ---- budgets ---------------------------------------------------------------------------

const FAIL: Outcome = Outcome::Status(503);
const OK: Outcome = Outcome::Status(200);

fn build(config: BudgetConfig) -> chaos_policy::Budget {
    config.build().unwrap()
}

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

/// A breaker config that passes validation, the one the breaker tests use.
const VALID_BREAKER: BreakerConfig = BreakerConfig {
    failure_ratio: 0.5,
    min_requests: 4,
    window: Duration::from_secs(10),
    open_for: Duration::from_secs(5),
    half_open_probes: 2,
};

fn breaker() -> Breaker {
    Breaker::new(VALID_BREAKER).unwrap()
}

fn fail(b: &mut Breaker, now: Duration, times: usize) {
    for _ in 0..times {
        let permit = b.try_admit(now).unwrap();
        b.record(now, FAIL, permit);
    }
}

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
    assert!(
        Breaker::new(BreakerConfig {
            failure_ratio: 1.5,
            ..good
        })
        .is_err()
    );
    assert!(
        Breaker::new(BreakerConfig {
            failure_ratio: 0.0,
            ..good
        })
        .is_err()
    );
    assert!(
        Breaker::new(BreakerConfig {
            min_requests: 0,
            ..good
        })
        .is_err()
    );
    assert!(
        Breaker::new(BreakerConfig {
            half_open_probes: 0,
            ..good
        })
        .is_err()
    );
    assert!(
        Breaker::new(BreakerConfig {
            open_for: Duration::ZERO,
            ..good
        })
        .is_err()
    );
}

// ---- sessions --------------------------------------------------------------------------

fn policy(edit: impl FnOnce(&mut PolicyConfig)) -> Client {
    let mut config = PolicyConfig {
        max_attempts: 4,
        backoff: Backoff::exponential(ms(100), 2.0, ms(1000)).unwrap(),
        ..PolicyConfig::default()
    };
    edit(&mut config);
    Client::new(Policy::new(config).unwrap())
}

/// Drives one more request through `client`, starting at its clock: a client's
/// decisions run on one timeline, so each session starts where the last one left it.
fn check(client: &mut Client, request: Request, outcomes: &[Outcome], expected: &str) {
    let start = client.clock();
    let (trace, _, _) = drive(client, request, start, outcomes, None, &mut rng(0));
    assert_eq!(trace, expected);
}

const GET: Request = Request {
    method: Method::Get,
    idempotency_key: false,
};
const POST: Request = Request {
    method: Method::Post,
    idempotency_key: false,
};

#[test]
fn session_traces() {
    let mut c = policy(|_| {});
    check(&mut c, GET, &[OK], "send1 200 ok/1");
    check(
        &mut c,
        GET,
        &[FAIL, OK],
        "send1 503 wait100ms send2 200 ok/2",
    );
    check(
        &mut c,
        GET,
        &[FAIL],
        "send1 503 wait100ms send2 503 wait200ms send3 503 wait400ms send4 503 max_attempts/4",
    );
    check(
        &mut c,
        GET,
        &[Outcome::Status(404)],
        "send1 404 permanent/1",
    );
    check(
        &mut c,
        GET,
        &[Outcome::Status(500)],
        "send1 500 permanent/1",
    );
    check(&mut c, POST, &[FAIL], "send1 503 non_idempotent/1");
    check(
        &mut c,
        POST,
        &[Outcome::AttemptTimeout],
        "send1 attempt_timeout non_idempotent/1",
    );
    check(
        &mut c,
        POST,
        &[Outcome::ConnectRefused, OK],
        "send1 connect_refused wait100ms send2 200 ok/2",
    );
    check(
        &mut c,
        POST.with_idempotency_key(),
        &[FAIL, OK],
        "send1 503 wait100ms send2 200 ok/2",
    );
}

#[test]
fn max_attempts_one_never_retries() {
    let mut c = policy(|p| p.max_attempts = 1);
    check(&mut c, GET, &[FAIL], "send1 503 max_attempts/1");
}

#[test]
fn retry_on_any_retries_permanent_failures_and_unsafe_policies_retry_posts() {
    let mut c = policy(|p| {
        p.max_attempts = 2;
        p.retry_on = RetryOn::new([RetryCondition::Any]);
        p.retry_non_idempotent = true;
    });
    check(
        &mut c,
        GET,
        &[Outcome::Status(400)],
        "send1 400 wait100ms send2 400 max_attempts/2",
    );
    check(
        &mut c,
        POST,
        &[FAIL],
        "send1 503 wait100ms send2 503 max_attempts/2",
    );
}

#[test]
fn deadline_bounds_waits_and_attempt_timeouts() {
    let mut c = policy(|p| {
        p.deadline = Some(ms(250));
        p.attempt_timeout = Some(ms(200));
    });
    // 10 ms attempt, wait 100 -> t=110: 140 ms left; 10 ms attempt -> t=120, the next wait
    // (200 ms) would end past the deadline.
    check(
        &mut c,
        GET,
        &[FAIL],
        "send1[200ms] 503 wait100ms send2[140ms] 503 deadline/2",
    );
}

#[test]
fn retry_after_is_honoured_capped_or_ignored() {
    let trace = |retry_after: RetryAfter, asked: Duration| {
        let mut c = policy(|p| p.retry_after = retry_after);
        let (trace, _, _) = drive(
            &mut c,
            GET,
            Duration::ZERO,
            &[FAIL, OK],
            Some(asked),
            &mut rng(0),
        );
        trace
    };
    assert_eq!(
        trace(RetryAfter::Ignore, Duration::from_secs(3)),
        "send1 503 wait100ms send2 200 ok/2"
    );
    assert_eq!(
        trace(
            RetryAfter::Honor {
                max: Duration::from_secs(10)
            },
            Duration::from_secs(3)
        ),
        "send1 503 wait3000ms send2 200 ok/2"
    );
    assert_eq!(
        trace(
            RetryAfter::Honor {
                max: Duration::from_secs(1)
            },
            Duration::from_secs(3)
        ),
        "send1 503 wait1000ms send2 200 ok/2"
    );
    assert_eq!(
        trace(
            RetryAfter::Clamp { max_extra: ms(500) },
            Duration::from_secs(3)
        ),
        "send1 503 wait600ms send2 200 ok/2"
    );
    assert_eq!(
        trace(RetryAfter::Clamp { max_extra: ms(500) }, ms(10)),
        "send1 503 wait100ms send2 200 ok/2"
    );
}

#[test]
fn budget_refusal_ends_the_request() {
    let mut c = policy(|p| {
        p.budget = Some(BudgetConfig::TokenBucket {
            ratio: 0.0,
            max_tokens: 1.0,
            initial_tokens: 1.0,
        });
    });
    check(
        &mut c,
        GET,
        &[FAIL],
        "send1 503 wait100ms send2 503 budget_exhausted/2",
    );
    check(&mut c, GET, &[FAIL], "send1 503 budget_exhausted/1");
    assert_eq!(c.budget_level(Duration::ZERO), Some(0.0));
}

#[test]
fn open_breaker_refuses_first_attempts_and_retries() {
    let mut c = policy(|p| {
        p.breaker = Some(BreakerConfig {
            failure_ratio: 0.5,
            min_requests: 2,
            window: Duration::from_secs(10),
            open_for: Duration::from_secs(5),
            half_open_probes: 1,
        });
    });
    check(
        &mut c,
        GET,
        &[FAIL],
        "send1 503 wait100ms send2 503 wait200ms breaker_open/2",
    );
    check(&mut c, GET, &[OK], "breaker_open/0");
    assert_eq!(c.breaker_state(Duration::ZERO), Some(BreakerState::Open));
    // After open_for, one probe goes through and closes it.
    let (trace, _, _) = drive(
        &mut c,
        GET,
        Duration::from_secs(6),
        &[OK],
        None,
        &mut rng(0),
    );
    assert_eq!(trace, "send1 200 ok/1");
    assert_eq!(
        c.breaker_state(Duration::from_secs(6)),
        Some(BreakerState::Closed)
    );
}

#[test]
fn session_reports_violations_of_each_retry() {
    let mut c = policy(|p| {
        p.retry_on = RetryOn::new([RetryCondition::Any]);
        p.retry_non_idempotent = true;
    });
    let mut r = rng(0);
    let (mut s, action) = c.start(POST, Duration::ZERO);
    assert!(matches!(action, Action::Send { .. }));
    assert_eq!(s.violations().count(), 0, "a first attempt is no retry");
    let Action::Wait { until } = c.on_outcome(&mut s, ms(1), Outcome::Status(400), None, &mut r)
    else {
        panic!("retry_on any retries a 400")
    };
    assert!(matches!(c.on_timer(&mut s, until), Action::Send { .. }));
    assert_eq!(
        s.violations().collect::<Vec<_>>(),
        [Violation::RetriedPermanent, Violation::RetriedNonIdempotent]
    );
}

/// The error `Policy::new` gives for the default config with `edit` applied.
fn invalid_policy(edit: fn(&mut PolicyConfig)) -> ConfigError {
    let mut config = PolicyConfig::default();
    edit(&mut config);
    Policy::new(config).unwrap_err()
}

#[test]
fn policy_validation() {
    let bad = |edit| invalid_policy(edit).to_string();
    assert_eq!(
        bad(|p| p.max_attempts = 0),
        "`max_attempts` is 0: a request needs at least one attempt (1 means never retry)"
    );
    assert_eq!(
        bad(|p| p.attempt_timeout = Some(Duration::ZERO)),
        "`attempt_timeout` is zero: it must be a positive duration"
    );
    assert_eq!(
        bad(|p| p.budget = Some(BudgetConfig::TokenBucket {
            ratio: f64::INFINITY,
            max_tokens: 1.0,
            initial_tokens: 1.0
        })),
        "`budget.ratio` is inf: it must be a finite number >= 0"
    );
}

#[test]
fn config_errors_name_their_field() {
    let policy = invalid_policy;
    let breaker = |edit: fn(&mut BreakerConfig)| {
        let mut config = VALID_BREAKER;
        edit(&mut config);
        config.validate().unwrap_err()
    };
    let cases: [(ConfigError, &str); 14] = [
        // ZeroMaxAttempts
        (policy(|p| p.max_attempts = 0), "max_attempts"),
        // ZeroBase
        (
            Backoff::exponential(Duration::ZERO, 2.0, ms(500)).unwrap_err(),
            "backoff.base",
        ),
        (
            Backoff::envoy(Duration::ZERO, ms(500)).unwrap_err(),
            "backoff.base",
        ),
        // CapBelowBase
        (
            Backoff::exponential(ms(100), 2.0, ms(50)).unwrap_err(),
            "backoff.cap",
        ),
        (Backoff::envoy(ms(100), ms(50)).unwrap_err(), "backoff.cap"),
        // MultiplierBelowOne
        (
            Backoff::exponential(ms(100), 0.5, ms(500)).unwrap_err(),
            "backoff.multiplier",
        ),
        // NegativeRatio
        (
            Backoff::none()
                .with_jitter(Jitter::Additive(-1.0))
                .unwrap_err(),
            "backoff.jitter_factor",
        ),
        (
            policy(|p| {
                p.budget = Some(BudgetConfig::TtlWindow {
                    ratio: -0.1,
                    min_per_sec: 10.0,
                    ttl: Duration::from_secs(10),
                });
            }),
            "budget.ratio",
        ),
        // RatioAboveOne
        (breaker(|b| b.failure_ratio = 1.5), "breaker.failure_ratio"),
        // ZeroDuration
        (
            policy(|p| p.attempt_timeout = Some(Duration::ZERO)),
            "attempt_timeout",
        ),
        (
            policy(|p| {
                p.retry_after = RetryAfter::Honor {
                    max: Duration::ZERO,
                }
            }),
            "retry_after_max",
        ),
        // TooSmall
        (breaker(|b| b.min_requests = 0), "breaker.min_requests"),
        // TooLarge
        (
            BudgetConfig::Concurrency {
                percent: 500.0,
                min_concurrency: 3,
            }
            .build()
            .unwrap_err(),
            "budget.budget_percent",
        ),
        // UnknownPreset
        (Preset::parse("hystrix").unwrap_err(), "preset"),
    ];
    for (error, field) in cases {
        assert_eq!(error.field(), field, "{error:?}");
    }
}

// ---- presets ---------------------------------------------------------------------------

#[test]
fn every_preset_is_valid_and_round_trips_its_name() {
    for preset in Preset::ALL {
        Policy::new(preset.config()).unwrap_or_else(|e| panic!("{}: {e}", preset.name()));
        assert_eq!(Preset::parse(preset.name()), Ok(preset));
        assert!(!preset.source().is_empty() && !preset.caveat().is_empty());
    }
    let err = Preset::parse("hystrix").unwrap_err().to_string();
    assert!(
        err.starts_with("unknown preset `hystrix`; known presets: grpc, envoy"),
        "{err}"
    );
}

#[test]
fn preset_arithmetic_matches_sources() {
    let c = |p: Preset| p.config();
    // gRFC A6 example.
    assert_eq!(c(Preset::Grpc).max_attempts, 4);
    assert_eq!(c(Preset::Grpc).backoff.ceiling(1), ms(100));
    assert_eq!(c(Preset::Grpc).backoff.ceiling(5), ms(1000));
    assert_eq!(c(Preset::Grpc).backoff.jitter(), Jitter::Full);
    // Envoy: num_retries 1, 25 ms base, 250 ms max.
    assert_eq!(c(Preset::Envoy).max_attempts, 2);
    assert_eq!(c(Preset::Envoy).backoff.ceiling(2), ms(75));
    // AWS standard: 3 attempts, min(2^(i-1), 20) s; 2026: 50 ms base.
    assert_eq!(c(Preset::AwsStandard).max_attempts, 3);
    assert_eq!(c(Preset::AwsStandard).backoff.ceiling(2), ms(2000));
    assert_eq!(c(Preset::AwsStandard).backoff.ceiling(9), ms(20_000));
    assert_eq!(c(Preset::AwsStandard2026).backoff.ceiling(1), ms(50));
    // Polly: 3 retries after the original call, a constant 2 s.
    assert_eq!(c(Preset::Polly).max_attempts, 4);
    assert_eq!(
        c(Preset::Polly).backoff.range(3, None),
        (ms(2000), ms(2000))
    );
    // resilience4j: 3 attempts, 500 ms; breaker 50% over >= 100 calls, 60 s, 10 probes.
    let r4j = c(Preset::Resilience4j);
    assert_eq!((r4j.max_attempts, r4j.backoff.ceiling(1)), (3, ms(500)));
    let breaker = r4j.breaker.unwrap();
    assert_eq!(
        (
            breaker.failure_ratio,
            breaker.min_requests,
            breaker.open_for,
            breaker.half_open_probes
        ),
        (0.5, 100, Duration::from_secs(60), 10)
    );
    // tower: 50 ms doubling, up to 1.99x with its 0.99 jitter.
    assert_eq!(c(Preset::Tower).backoff.range(2, None), (ms(100), ms(199)));
    // Finagle's default budget: 100 retries of reserve from a cold start.
    let mut finagle = c(Preset::Finagle).budget.unwrap().build().unwrap();
    let reserve = (0..1000)
        .filter(|_| finagle.try_withdraw(Duration::ZERO, FAIL).is_some())
        .count();
    assert_eq!(reserve, 100);
    // SRE book: retries stay under 10% of requests.
    let mut sre = c(Preset::Sre).budget.unwrap().build().unwrap();
    for _ in 0..1000 {
        sre.on_request(Duration::ZERO);
    }
    let granted = (0..1000)
        .filter(|_| sre.try_withdraw(Duration::ZERO, FAIL).is_some())
        .count();
    assert_eq!(granted, 100);
}

#[test]
fn run_counts_of_an_empty_run_bound_at_one() {
    let b = build(BudgetConfig::TokenBucket {
        ratio: 0.2,
        max_tokens: 10.0,
        initial_tokens: 10.0,
    });
    let run = RunCounts {
        logical: 0,
        duration: Duration::ZERO,
    };
    assert_eq!(b.bound(run), Some(1.0));
}

#[test]
fn breaker_ignores_attempts_admitted_before_it_last_opened() {
    let mut b = breaker();
    let old: Vec<_> = (0..10)
        .map(|_| b.try_admit(Duration::ZERO).unwrap())
        .collect();
    fail(&mut b, Duration::ZERO, 4);
    let later = Duration::from_secs(5);
    for _ in 0..2 {
        let probe = b.try_admit(later).unwrap();
        b.record(later, OK, probe);
    }
    assert_eq!(b.state(later), BreakerState::Closed);
    // The ten attempts sent before the trip fail long after: the new window ignores them.
    for permit in old {
        b.record(later + Duration::from_secs(1), FAIL, permit);
    }
    assert_eq!(
        b.state(later + Duration::from_secs(1)),
        BreakerState::Closed
    );
}

#[test]
fn a_retry_the_breaker_refuses_gives_its_token_back() {
    let mut c = policy(|p| {
        p.budget = Some(BudgetConfig::TokenBucket {
            ratio: 0.0,
            max_tokens: 5.0,
            initial_tokens: 5.0,
        });
        p.breaker = Some(BreakerConfig {
            failure_ratio: 0.5,
            min_requests: 1,
            window: Duration::from_secs(10),
            open_for: Duration::from_secs(5),
            half_open_probes: 1,
        });
    });
    check(&mut c, GET, &[FAIL], "send1 503 wait100ms breaker_open/1");
    assert_eq!(
        c.budget_level(Duration::ZERO),
        Some(5.0),
        "the unsent retry was refunded"
    );
}

#[test]
fn an_envoy_budget_frees_the_slot_of_a_retry_never_sent() {
    let mut c = policy(|p| {
        p.budget = Some(BudgetConfig::Concurrency {
            percent: 0.0,
            min_concurrency: 1,
        });
        p.breaker = Some(BreakerConfig {
            failure_ratio: 0.5,
            min_requests: 1,
            window: Duration::from_secs(10),
            open_for: Duration::from_secs(5),
            half_open_probes: 1,
        });
    });
    // The retry is granted (one slot), then the open breaker refuses to send it.
    check(&mut c, GET, &[FAIL], "send1 503 wait100ms breaker_open/1");
    assert_eq!(
        c.budget_level(Duration::ZERO),
        Some(1.0),
        "the slot is free again"
    );
}

#[test]
fn less_than_a_millisecond_before_the_deadline_is_no_attempt() {
    let mut c = policy(|p| {
        p.deadline = Some(ms(120));
        p.backoff = Backoff::fixed(Duration::from_micros(109_500));
    });
    // 10 ms attempt, then a wait to 119.5 ms: half a millisecond left is not enough.
    check(
        &mut c,
        GET,
        &[FAIL],
        "send1[120ms] 503 wait109ms deadline/1",
    );
}
