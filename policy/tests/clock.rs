//! One timeline per client: a call that reports an earlier time than the client has
//! already seen (a lagging dispatch, threads reporting out of order) is taken to happen at
//! the client's latest time, so the breaker and budget never see time run backwards.

#![allow(clippy::unwrap_used)] // Tests: a panic is the failure report.

mod common;

use std::time::Duration;

use chaos_policy::{
    Action, Backoff, BreakerConfig, BreakerState, Client, Method, Outcome, Policy, PolicyConfig,
    Reply, Request, Start,
};
use common::{ms, rng};

/// One attempt, no retries, and a breaker that opens on the first failure for 1 s.
fn client() -> Client {
    Client::new(
        Policy::new(PolicyConfig {
            max_attempts: 1,
            backoff: Backoff::none(),
            breaker: Some(BreakerConfig {
                failure_ratio: 1.0,
                min_requests: 1,
                window: Duration::from_secs(10),
                open_for: Duration::from_secs(1),
                half_open_probes: 1,
            }),
            ..PolicyConfig::default()
        })
        .unwrap(),
    )
}

fn sent(action: Action) -> bool {
    matches!(action, Action::Send { .. })
}

#[test]
fn a_late_report_of_an_early_time_cannot_open_the_breaker_in_the_past() {
    let mut client = client();
    let mut rng = rng(1);
    // A request started at 10 s fails at 10 s: the breaker opens until 11 s.
    let (mut first, action) = client.start(Request::new(Method::Get), ms(10_000), Start::default());
    assert!(sent(action));
    client.on_reply(
        &mut first,
        ms(10_000),
        Reply::bare(Outcome::Status(503)),
        &mut rng,
    );
    assert_eq!(client.breaker_state(ms(10_500)), Some(BreakerState::Open));

    // At 11.5 s a probe goes out, and fails; its report is stamped with a stale 9.5 s
    // (the thread took the time, then waited for the lock behind others).
    let (mut probe, action) = client.start(Request::new(Method::Get), ms(11_500), Start::default());
    assert!(sent(action), "half-open: one probe goes out");
    client.on_reply(
        &mut probe,
        ms(9_500),
        Reply::bare(Outcome::Status(503)),
        &mut rng,
    );

    // The breaker reopened at the client's time (11.5 s) for its full second: read at 12 s
    // it is still open. Taken at face value, 9.5 s + 1 s would have let it half-open at
    // 10.5 s, before it even reopened.
    assert_eq!(client.clock(), ms(11_500));
    assert_eq!(client.breaker_state(ms(12_000)), Some(BreakerState::Open));
    let (_, action) = client.start(Request::new(Method::Get), ms(12_000), Start::default());
    assert!(!sent(action), "the breaker refuses while open");
    let (_, action) = client.start(Request::new(Method::Get), ms(12_600), Start::default());
    assert!(
        sent(action),
        "and half-opens a full open_for after it reopened"
    );
}
