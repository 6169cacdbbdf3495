//! A client the server did not write, judged from what arrived: its attempts grouped into
//! logical requests without its help, its waits measured, its retries classified.

mod common;

use std::time::Duration;

use common::{client, server_with};
use fault_server::{Judged, Judging, LedgerSnapshot};

async fn ledger(base: &str) -> LedgerSnapshot {
    client()
        .get(format!("{base}/__chaos/ledger"))
        .send()
        .await
        .expect("ledger answers")
        .bytes()
        .await
        .map(|body| serde_json::from_slice(&body).expect("ledger is JSON"))
        .expect("ledger's body")
}

fn judged(snapshot: &LedgerSnapshot) -> &Judged {
    snapshot.judged.as_ref().expect("the server judges")
}

fn retries_after(judged: &Judged, after: &str) -> u64 {
    judged
        .retries
        .iter()
        .filter(|r| r.after == after)
        .map(|r| r.retries)
        .sum()
}

#[tokio::test]
async fn identical_requests_within_the_window_are_one_call_and_retry_after_is_checked() {
    let server = server_with(
        "faults: [ { name: first-two, attempts: [1, 2], respond: [ { status: 503, retry_after: 1s } ] } ]",
        |c| {
            c.judging = Some(Judging {
                window: Duration::from_secs(5),
                ..Judging::default()
            })
        },
    )
    .await;
    let base = format!("http://{}", server.addr());
    let http = client();
    let get = |path: &str| http.get(format!("{base}{path}")).send();
    // A client that honours Retry-After once, then retries too early.
    assert_eq!(
        get("/items/1").await.expect("the server answers").status(),
        503
    );
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let second = get("/items/1").await.expect("the server answers");
    assert_eq!(second.status(), 503, "the second attempt of the same call");
    assert_eq!(second.headers()["retry-after"], "1");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        get("/items/1").await.expect("the server answers").status(),
        200
    );
    // Another call: a new logical request, faulted as its first attempt.
    assert_eq!(
        get("/items/2").await.expect("the server answers").status(),
        503
    );

    let snapshot = ledger(&base).await;
    assert_eq!((snapshot.attempts, snapshot.logical), (4, 2));
    let judged = judged(&snapshot);
    assert_eq!(judged.grouped_by.get("guess"), Some(&2));
    assert_eq!(judged.guessed_attempts, 4);
    assert_eq!(retries_after(judged, "status_503"), 2);
    assert_eq!(judged.succeeded, 1);
    let honoured = &judged.retry_after;
    assert_eq!(
        (honoured.asked, honoured.honoured, honoured.early),
        (2, 1, 1)
    );
    assert!(
        honoured.worst_early_us >= 700_000,
        "200 ms after a 1 s Retry-After is at least 750 ms early (less the tolerance): {honoured:?}"
    );
    assert_eq!(honoured.examples.len(), 1);
    assert!(
        judged.gaps.is_empty(),
        "waits the server asked for are not the client's backoff: {:?}",
        judged.gaps
    );
    server.shutdown().await;
}

#[tokio::test]
async fn an_identical_request_after_the_window_is_a_new_call() {
    let server = server_with("faults: []", |c| {
        c.judging = Some(Judging {
            window: Duration::from_millis(100),
            ..Judging::default()
        })
    })
    .await;
    let base = format!("http://{}", server.addr());
    let http = client();
    http.get(format!("{base}/a"))
        .send()
        .await
        .expect("the server answers");
    tokio::time::sleep(Duration::from_millis(300)).await;
    http.get(format!("{base}/a"))
        .send()
        .await
        .expect("the server answers");
    let snapshot = ledger(&base).await;
    assert_eq!((snapshot.attempts, snapshot.logical), (2, 2));
    assert!(judged(&snapshot).retries.is_empty());
    server.shutdown().await;
}

#[tokio::test]
async fn aws_sdk_headers_group_and_number_attempts_and_a_post_retried_after_400_is_seen() {
    let server = server_with(
        "faults: [ { name: bad, attempts: [1], respond: [ { status: 400 } ] } ]",
        |c| c.judging = Some(Judging::default()),
    )
    .await;
    let base = format!("http://{}", server.addr());
    let http = client();
    for attempt in 1..=2 {
        let answer = http
            .post(format!("{base}/orders"))
            .header("amz-sdk-invocation-id", "3f1c-call")
            .header("amz-sdk-request", format!("attempt={attempt}; max=3"))
            .body(format!("different body {attempt}"))
            .send()
            .await
            .expect("present");
        let expected = if attempt == 1 { 400 } else { 200 };
        assert_eq!(answer.status(), expected, "attempt {attempt}");
    }
    let snapshot = ledger(&base).await;
    assert_eq!((snapshot.attempts, snapshot.logical), (2, 1));
    assert_eq!(snapshot.side_effects, 1);
    let judged = judged(&snapshot);
    assert_eq!(judged.grouped_by.get("aws_invocation_id"), Some(&1));
    assert_eq!(judged.guessed_attempts, 0);
    let after_400: Vec<_> = judged
        .retries
        .iter()
        .filter(|r| r.after == "status_400")
        .collect();
    assert_eq!(after_400.len(), 1);
    assert!(after_400[0].side_effect && !after_400[0].keyed);
    server.shutdown().await;
}

#[tokio::test]
async fn a_reset_is_what_the_retry_came_after_and_a_server_that_does_not_judge_says_nothing() {
    let server = server_with(
        "faults: [ { name: cut, attempts: [1], respond: [ { fault: reset } ] } ]",
        |c| c.judging = Some(Judging::default()),
    )
    .await;
    let base = format!("http://{}", server.addr());
    let http = client();
    let send = |attempt: u32| {
        http.get(format!("{base}/r"))
            .header("x-envoy-attempt-count", attempt.to_string())
            .send()
    };
    assert!(send(1).await.is_err(), "the first attempt is reset");
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert_eq!(
        send(2).await.expect("the server answers").status(),
        200,
        "Envoy's attempt 2"
    );
    let judged = ledger(&base).await.judged.expect("judges");
    assert_eq!(retries_after(&judged, "reset"), 1);
    let backoff = &judged.gaps[0];
    assert_eq!((backoff.attempt, backoff.count), (2, 1));
    assert!(
        backoff.min_us >= 150_000,
        "the client's own wait: {backoff:?}"
    );
    server.shutdown().await;

    let plain = server_with("faults: []", |_| {}).await;
    let base = format!("http://{}", plain.addr());
    http.get(format!("{base}/r"))
        .send()
        .await
        .expect("the server answers");
    let snapshot = ledger(&base).await;
    assert!(snapshot.judged.is_none());
    assert_eq!(snapshot.untracked, 1);
    plain.shutdown().await;
}
