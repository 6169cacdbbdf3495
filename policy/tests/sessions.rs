//! Table tests of sessions (a policy driving one logical request), validation and presets.

#![allow(clippy::unwrap_used, clippy::float_cmp)] // Tests: a panic is the failure report; the arithmetic is exact.

mod common;

use std::time::Duration;

use chaos_policy::{
    Action, Backoff, BreakerConfig, BreakerState, BudgetConfig, Client, ConfigError, Jitter,
    Method, Outcome, Policy, PolicyConfig, Preset, Reply, Request, RetryAfter, RetryBudget,
    RetryCondition, RetryOn, RunCounts, Start, Violation,
};
use common::{FAIL, OK, VALID_BREAKER, breaker, build, drive, fail, ms, rng};

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
    let (mut s, action) = c.start(POST, Duration::ZERO, Start::default());
    assert!(matches!(action, Action::Send { .. }));
    assert_eq!(s.violations().count(), 0, "a first attempt is no retry");
    let Action::Wait { until } =
        c.on_reply(&mut s, ms(1), Reply::bare(Outcome::Status(400)), &mut r)
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
    assert_eq!(c(Preset::Grpc).backoff.jitter(), Jitter::Proportional(0.2));
    // A6 as amended: the capped delay times U(0.8, 1.2), so above maxBackoff at the cap.
    assert_eq!(c(Preset::Grpc).backoff.range(1, None), (ms(80), ms(120)));
    assert_eq!(c(Preset::Grpc).backoff.range(5, None), (ms(800), ms(1200)));
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

/// A breaker that opens on the first failure, for five seconds.
const ONE_FAILURE_OPENS: BreakerConfig = BreakerConfig {
    min_requests: 1,
    half_open_probes: 1,
    ..VALID_BREAKER
};

#[test]
fn a_retry_the_breaker_refuses_gives_its_token_back() {
    let mut c = policy(|p| {
        p.budget = Some(BudgetConfig::TokenBucket {
            ratio: 0.0,
            max_tokens: 5.0,
            initial_tokens: 5.0,
        });
        p.breaker = Some(ONE_FAILURE_OPENS);
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
        p.breaker = Some(ONE_FAILURE_OPENS);
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
