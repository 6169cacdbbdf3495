//! Table tests: one line per rule of the core: classification, idempotency, backoff.
//! Budgets and the breaker are in `budgets.rs`; sessions and presets in `sessions.rs`.

#![allow(clippy::unwrap_used, clippy::float_cmp)] // Tests: a panic is the failure report; the arithmetic is exact.

mod common;

use std::time::Duration;

use chaos_policy::{
    Backoff, Class, ConfigError, Jitter, Method, Outcome, Request, ResetPhase, RetryCondition,
    RetryOn, Violation,
};
use common::{ms, rng};

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
fn forbids_retry_after_4xx_except_408_429_and_after_501_and_508() {
    for code in [400, 401, 403, 404, 409, 410, 422, 451, 501, 508] {
        assert!(Outcome::Status(code).forbids_retry(), "{code}");
    }
    for code in [200, 408, 429, 500, 502, 503, 504, 507] {
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
    // A loop is retried by no condition: each retry would go round it again.
    for conditions in [&["any"][..], &["5xx"], &["508"], &["transient", "500"]] {
        check(conditions, Outcome::Status(508), false);
    }
    check(&["5xx"], Outcome::Status(507), true);
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
    // gRPC (A6 as amended): ±20% of the capped delay, so up to 1.2 × the cap.
    assert_eq!(
        with(Jitter::Proportional(0.2)).range(1, None),
        (ms(80), ms(120))
    );
    assert_eq!(
        with(Jitter::Proportional(0.2)).range(5, None),
        (ms(800), ms(1200))
    );
    assert_eq!(with(Jitter::Proportional(0.2)).max_delay(), ms(1200));
    assert_eq!(
        with(Jitter::Proportional(0.0)).range(2, None),
        (ms(200), ms(200))
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
    // gRPC's ±20%: 80 + 0.15779 · 40 = 86.31 ms first; the last is past the 1 s cap, as
    // A6 (amended) allows.
    assert_eq!(
        draws(Jitter::Proportional(0.2), 7),
        [
            86_311_843,
            173_439_149,
            432_684_180,
            872_557_214,
            1_040_503_606
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
    assert_eq!(
        Backoff::none().with_jitter(Jitter::Proportional(1.5)),
        Err(ConfigError::RatioAboveOne {
            field: "backoff.jitter_spread",
            value: 1.5
        })
    );
    assert!(
        Backoff::none()
            .with_jitter(Jitter::Proportional(-0.1))
            .is_err()
    );
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
