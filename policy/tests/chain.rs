//! What a call chain needs of the core: an answer that says "the tier behind me gave up"
//! (`honor_no_retry`), and a deadline propagated by the caller (`Start::deadline`).

#![allow(clippy::unwrap_used)] // Tests: a panic is the failure report.

use std::time::Duration;

use chaos_policy::{
    Action, Backoff, Client, GiveUp, Method, Outcome, Policy, PolicyConfig, Preset, Reply, Request,
    Start, Verdict,
};
use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;

fn client(honor: bool) -> Client {
    Client::new(
        Policy::new(PolicyConfig {
            max_attempts: 4,
            backoff: Backoff::none(),
            honor_no_retry: honor,
            ..PolicyConfig::default()
        })
        .unwrap(),
    )
}

/// Every attempt answered 503, marked or not: the attempts sent and the verdict.
fn drive(client: &mut Client, marked: bool) -> Verdict {
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let now = Duration::ZERO;
    let (mut session, mut action) = client.start(Request::new(Method::Get), now, Start::default());
    let reply = Reply {
        no_retry: marked,
        ..Reply::bare(Outcome::Status(503))
    };
    loop {
        action = match action {
            Action::Send { .. } => client.on_reply(&mut session, now, reply, &mut rng),
            Action::Wait { until } => client.on_timer(&mut session, until),
            Action::Done(verdict) => return verdict,
        };
    }
}

#[test]
fn a_marked_answer_ends_the_request_only_for_a_policy_that_honours_it() {
    let table = [
        // (honours the marker, the answer is marked, attempts, why it gave up)
        (false, false, 4, GiveUp::MaxAttempts),
        (false, true, 4, GiveUp::MaxAttempts),
        (true, false, 4, GiveUp::MaxAttempts),
        (true, true, 1, GiveUp::NoRetry),
    ];
    for (honor, marked, attempts, reason) in table {
        let verdict = drive(&mut client(honor), marked);
        assert_eq!(
            verdict,
            Verdict::GaveUp {
                reason,
                attempts,
                last: Some(Outcome::Status(503)),
            },
            "honour {honor}, marked {marked}"
        );
    }
}

#[test]
fn the_sre_preset_honours_the_marker() {
    assert!(Preset::Sre.config().honor_no_retry);
    assert!(!Preset::Grpc.config().honor_no_retry);
}

#[test]
fn a_propagated_deadline_shortens_the_policys_own() {
    let mut client = Client::new(
        Policy::new(PolicyConfig {
            max_attempts: 3,
            deadline: Some(Duration::from_secs(10)),
            backoff: Backoff::none(),
            ..PolicyConfig::default()
        })
        .unwrap(),
    );
    let within = Start {
        deadline: Some(Duration::from_millis(300)),
        ..Start::default()
    };
    let (_, action) = client.start(Request::new(Method::Get), Duration::ZERO, within);
    assert_eq!(
        action,
        Action::Send {
            attempt: chaos_policy::Attempt::FIRST,
            timeout: Some(Duration::from_millis(300)),
        },
        "the caller's 300 ms, not the policy's 10 s"
    );
    let (_, action) = client.start(Request::new(Method::Get), Duration::ZERO, Start::default());
    assert!(
        matches!(action, Action::Send { timeout: Some(t), .. } if t == Duration::from_secs(10))
    );
}
