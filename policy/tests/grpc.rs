//! gRPC outcomes in the core: status codes, A6's throttle arithmetic, pushback, and the
//! transparent retry of a stream HTTP/2 proved unprocessed.

#![allow(clippy::unwrap_used)] // Tests: a panic is the failure report.

mod common;

use std::time::Duration;

use chaos_policy::{
    Action, Backoff, BudgetConfig, Class, Client, GiveUp, Method, Outcome, Policy, PolicyConfig,
    Preset, Reply, Request, RetryAfter, RetryCondition, RetryOn, Start, Unprocessed, Verdict,
    Violation, grpc,
};
use common::{drive, ms, rng};

const UNAVAILABLE: Outcome = Outcome::Grpc(grpc::UNAVAILABLE);
const OK: Outcome = Outcome::Grpc(grpc::OK);
const REFUSED: Outcome = Outcome::Unprocessed(Unprocessed::RefusedStream);
const ABOVE_GOAWAY: Outcome = Outcome::Unprocessed(Unprocessed::GoAway);

const GET: Request = Request {
    method: Method::Get,
    idempotency_key: false,
};
const POST: Request = Request {
    method: Method::Post,
    idempotency_key: false,
};

fn client(edit: impl FnOnce(&mut PolicyConfig)) -> Client {
    let mut config = PolicyConfig {
        max_attempts: 3,
        backoff: Backoff::fixed(ms(10)),
        retry_on: RetryOn::new([RetryCondition::Grpc(grpc::UNAVAILABLE)]),
        ..PolicyConfig::default()
    };
    edit(&mut config);
    Client::new(Policy::new(config).unwrap())
}

fn trace(client: &mut Client, request: Request, outcomes: &[Outcome]) -> String {
    let start = client.clock();
    drive(client, request, start, outcomes, None, &mut rng(1)).0
}

#[test]
fn codes_are_named_and_classified_as_their_http_analogues() {
    assert_eq!(grpc::code_by_name("UNAVAILABLE"), Some(14));
    assert_eq!(grpc::code_by_name("resource-exhausted"), Some(8));
    assert_eq!(grpc::code_by_name(" Deadline_Exceeded "), Some(4));
    assert_eq!(grpc::code_by_name("unavailble"), None);
    assert_eq!(grpc::snake_name(14), Some("unavailable"));
    assert_eq!(grpc::snake_name(99), None);
    assert_eq!(OK.class(), Class::Success);
    assert_eq!(UNAVAILABLE.class(), Class::Transient);
    assert_eq!(Outcome::Grpc(8).class(), Class::Transient);
    assert_eq!(Outcome::Grpc(13).class(), Class::Permanent);
    // INVALID_ARGUMENT is a 400: retrying it breaks the invariant; INTERNAL is a 500.
    assert!(Outcome::Grpc(3).forbids_retry());
    assert!(Outcome::Grpc(12).forbids_retry());
    assert!(!Outcome::Grpc(13).forbids_retry());
    assert!(!UNAVAILABLE.forbids_retry());
    assert!(Outcome::Grpc(13).is_server_failure());
    assert!(!Outcome::Grpc(5).is_server_failure());
    assert_eq!(UNAVAILABLE.to_string(), "grpc_unavailable");
    assert_eq!(REFUSED.to_string(), "refused_stream");
    // What a gRPC client reads from an intermediary's HTTP answer.
    assert_eq!(grpc::code_of_http_status(503), grpc::UNAVAILABLE);
    assert_eq!(grpc::code_of_http_status(429), grpc::UNAVAILABLE);
    assert_eq!(grpc::code_of_http_status(404), 12);
    assert_eq!(grpc::code_of_http_status(500), 2);
}

#[test]
fn retry_on_takes_grpc_code_names() {
    assert_eq!(
        RetryCondition::parse("unavailable"),
        Some(RetryCondition::Grpc(14))
    );
    assert_eq!(
        RetryCondition::parse("RESOURCE_EXHAUSTED"),
        Some(RetryCondition::Grpc(8))
    );
    assert_eq!(
        RetryCondition::parse("refused-stream"),
        Some(RetryCondition::RefusedStream)
    );
    // OK is no failure to retry; an HTTP code still parses as one.
    assert_eq!(RetryCondition::parse("ok"), None);
    assert_eq!(
        RetryCondition::parse("503"),
        Some(RetryCondition::Status(503))
    );
    let on = RetryOn::new([RetryCondition::Grpc(14)]);
    assert!(on.matches(UNAVAILABLE));
    assert!(!on.matches(Outcome::Grpc(8)));
    assert!(!on.matches(Outcome::Status(503)));
}

/// A6's throttle in a total UNAVAILABLE outage, K calls one after another: tokens start at
/// maxTokens (10), each failed attempt takes one, a retry goes only while more than half
/// (5) are left. The first call makes 5 attempts (10 → 5), every later one 1: K + 4.
#[test]
fn a6_throttle_in_a_total_outage_makes_k_plus_4_attempts() {
    for k in [1_u32, 3, 10, 40] {
        let mut c = client(|p| {
            p.max_attempts = 5;
            p.budget = Some(BudgetConfig::GrpcThrottle {
                max_tokens: 10.0,
                token_ratio: 0.1,
            });
        });
        let attempts: u32 = (0..k)
            .map(|_| {
                let start = c.clock();
                drive(&mut c, GET, start, &[UNAVAILABLE], None, &mut rng(7))
                    .1
                    .attempts()
            })
            .sum();
        assert_eq!(attempts, k + 4, "K = {k}");
    }
}

#[test]
fn a_refused_stream_is_resent_at_once_even_when_not_idempotent() {
    let mut c = client(|_| {});
    assert_eq!(
        trace(&mut c, POST, &[REFUSED, OK]),
        "send1 refused_stream wait0ms send2 grpc_ok ok/2"
    );
    // Free once only: a second refusal goes through the policy like any failure. It still
    // proves the POST unsent, so a policy that retries refusals may resend it, each resend
    // counted against max_attempts (3 here, plus the free one).
    let mut c = client(|p| p.retry_on = RetryOn::new([RetryCondition::RefusedStream]));
    assert_eq!(
        trace(&mut c, POST, &[ABOVE_GOAWAY]),
        "send1 goaway_unprocessed wait0ms send2 goaway_unprocessed wait10ms \
         send3 goaway_unprocessed wait10ms send4 goaway_unprocessed max_attempts/4"
    );
}

#[test]
fn a_transparent_resend_is_free_of_max_attempts_and_the_throttle() {
    // A policy that never retries still resends an unprocessed stream once, as a gRPC
    // client with no retry policy does.
    let mut c = client(|p| p.max_attempts = 1);
    assert_eq!(
        trace(&mut c, GET, &[REFUSED, UNAVAILABLE]),
        "send1 refused_stream wait0ms send2 grpc_unavailable max_attempts/2"
    );
    // The throttle never hears of it: 20 refusals resent and served leave it full.
    let mut c = client(|p| {
        p.budget = Some(BudgetConfig::GrpcThrottle {
            max_tokens: 10.0,
            token_ratio: 0.1,
        });
    });
    for _ in 0..20 {
        let start = c.clock();
        let (_, verdict, _) = drive(&mut c, GET, start, &[REFUSED, OK], None, &mut rng(2));
        assert_eq!(verdict, Verdict::Succeeded { attempts: 2 });
    }
    assert_eq!(c.budget_level(c.clock()), Some(10.0));
}

#[test]
fn a_retry_after_an_unprocessed_stream_is_no_violation() {
    assert_eq!(Violation::of_retry(POST, REFUSED).count(), 0);
    assert_eq!(Violation::of_retry(POST, ABOVE_GOAWAY).count(), 0);
    assert_eq!(
        Violation::of_retry(POST, UNAVAILABLE).collect::<Vec<_>>(),
        [Violation::RetriedNonIdempotent]
    );
    assert_eq!(
        Violation::of_retry(GET, Outcome::Grpc(3)).collect::<Vec<_>>(),
        [Violation::RetriedPermanent]
    );
}

/// A6: a pushback replaces the backoff; a negative or malformed one means "do not retry",
/// which a policy that reads the server's hints obeys and one that ignores them does not.
#[test]
fn pushback_waits_or_stops() {
    let mut grpc = Client::new(
        Policy::new(PolicyConfig {
            budget: None,
            ..Preset::Grpc.config()
        })
        .unwrap(),
    );
    let (mut session, action) = grpc.start(GET, Duration::ZERO, Start::default());
    assert!(matches!(action, Action::Send { .. }));
    let pushback = Reply {
        retry_after: Some(ms(200)),
        ..Reply::bare(UNAVAILABLE)
    };
    let wait = grpc.on_reply(&mut session, ms(5), pushback, &mut rng(3));
    assert_eq!(wait, Action::Wait { until: ms(205) });
    assert!(matches!(
        grpc.on_timer(&mut session, ms(205)),
        Action::Send { .. }
    ));
    let stop = Reply {
        stop: true,
        ..Reply::bare(UNAVAILABLE)
    };
    let done = grpc.on_reply(&mut session, ms(210), stop, &mut rng(3));
    assert!(matches!(
        done,
        Action::Done(Verdict::GaveUp {
            reason: GiveUp::NoRetry,
            attempts: 2,
            ..
        })
    ));

    let mut deaf = client(|p| p.retry_after = RetryAfter::Ignore);
    let (mut session, _) = deaf.start(GET, Duration::ZERO, Start::default());
    let action = deaf.on_reply(&mut session, ms(5), stop, &mut rng(3));
    assert_eq!(action, Action::Wait { until: ms(15) });
}

#[test]
fn the_grpc_preset_retries_the_code_and_its_stand_ins() {
    let on = Preset::Grpc.config().retry_on;
    for outcome in [
        UNAVAILABLE,
        Outcome::Status(503),
        Outcome::Status(429),
        Outcome::ConnectRefused,
        REFUSED,
    ] {
        assert!(on.matches(outcome), "{outcome}");
    }
    for outcome in [Outcome::Grpc(8), Outcome::Grpc(13), Outcome::Status(500)] {
        assert!(!on.matches(outcome), "{outcome}");
    }
}
