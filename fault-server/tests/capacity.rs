//! The capacity model live: c requests in service at once and q queued, the next
//! rejected, queued requests started in order, service time honoured (lower bounds
//! only), and no limit without a capacity.

mod common;

use std::time::{Duration, Instant};

use common::{client, eventually, hang_up, metric, send_raw, server};
use fault_server::ServerHandle;
use tokio::net::TcpStream;

#[tokio::test]
async fn capacity_plus_queue_are_admitted_and_the_next_is_rejected() {
    let server =
        server("server: { capacity: 2, queue: 1, service_time: 1h, reject_status: 429 }").await;
    // Keyed POSTs: each claims its Idempotency-Key when its service starts, so the
    // ledger's tracked keys count the requests in service, whatever the model reports.
    let held = keyed_posts(&server, "held", 3).await;
    eventually("two requests in service and one queued", || async {
        server.ledger().tracked_keys == 2
            && metric(&server, "fault_server_serving").await == Some(2)
            && metric(&server, "fault_server_queue_depth").await == Some(1)
    })
    .await;

    let url = server.url();
    let rejected = client()
        .get(format!("{url}/one-too-many"))
        .header("x-request-id", "extra")
        .send()
        .await
        .expect("a rejection is a response");
    assert_eq!(rejected.status().as_u16(), 429);
    let ledger = server.ledger();
    assert_eq!(ledger.by_outcome.get("rejected"), Some(&1));
    assert_eq!(
        ledger.attempts, 4,
        "rejected requests were received all the same"
    );

    // A real server does not notice its clients leaving: once it has seen each client
    // hang up (and closed that connection), the abandoned requests keep their places.
    for stream in held {
        hang_up(stream).await;
    }
    assert_eq!(metric(&server, "fault_server_serving").await, Some(2));
    assert_eq!(metric(&server, "fault_server_queue_depth").await, Some(1));
    assert_eq!(server.ledger().by_outcome.get("abandoned"), None);
}

#[tokio::test]
async fn abandoned_requests_are_still_served_and_execute_their_side_effects() {
    // One slot, 300 ms each: three POSTs whose clients give up after 50 ms are all
    // served anyway, one after another, and each executes its side effect.
    let server = server("server: { capacity: 1, queue: 5, service_time: 300ms }").await;
    let url = server.url();
    for i in 0..3 {
        let sent = client()
            .post(format!("{url}/payments"))
            .header("x-request-id", format!("gone-{i}"))
            .timeout(Duration::from_millis(50))
            .send()
            .await;
        assert!(sent.is_err_and(|e| e.is_timeout()), "the client gave up");
    }
    eventually("the abandoned requests are served in turn", || async {
        server.ledger().by_outcome.get("served") == Some(&3)
    })
    .await;
    let ledger = server.ledger();
    assert_eq!(ledger.side_effects, 3);
    assert_eq!(ledger.by_outcome.get("abandoned"), None);
}

#[tokio::test]
async fn a_delay_is_spent_holding_a_capacity_slot() {
    let server = server(
        "server: { capacity: 1, queue: 0 }\nfaults: [ { match: { path: /slow }, respond: { fault: delay, delay: 1h } } ]",
    )
    .await;
    let url = server.url();
    let slow = tokio::spawn({
        let url = url.clone();
        async move { client().get(format!("{url}/slow")).send().await }
    });
    eventually("the slow request holds the only slot", || async {
        metric(&server, "fault_server_serving").await == Some(1)
    })
    .await;
    let rejected = client()
        .get(format!("{url}/fast"))
        .send()
        .await
        .expect("a response");
    assert_eq!(rejected.status().as_u16(), 503);
    slow.abort();
}

#[tokio::test]
async fn service_time_is_honoured_and_the_queue_is_served_in_turn() {
    let server = server("server: { capacity: 1, queue: 5, service_time: 150ms }").await;
    let started = Instant::now();
    let single = client().get(server.url()).send().await.expect("served");
    assert_eq!(single.status().as_u16(), 200);
    assert!(started.elapsed() >= Duration::from_millis(150));

    // Two at once through one slot: the second waits for the first.
    let started = Instant::now();
    let url = server.url();
    let (a, b) = tokio::join!(client().get(&url).send(), client().get(&url).send());
    assert_eq!(a.expect("served").status().as_u16(), 200);
    assert_eq!(b.expect("served").status().as_u16(), 200);
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert_eq!(server.ledger().by_outcome.get("served"), Some(&3));
}

#[tokio::test]
async fn without_a_capacity_every_request_is_in_service_at_once() {
    // Twenty keyed POSTs that each take an hour: twenty keys claimed at once means twenty
    // requests in service at once, which a server serving one at a time never reaches.
    let server = server("server: { service_time: 1h }").await;
    let held = keyed_posts(&server, "many", 20).await;
    eventually("twenty requests in service at once", || async {
        server.ledger().tracked_keys == 20
    })
    .await;
    assert_eq!(metric(&server, "fault_server_in_flight").await, Some(20));
    drop(held);
}

#[tokio::test]
async fn status_faults_act_in_front_of_the_capacity_model() {
    let server = server(
        r#"
server: { capacity: 1, queue: 0, service_time: 1h }
faults: [ { match: { path: /fault }, respond: { status: 502 } } ]
"#,
    )
    .await;
    let url = server.url();
    let held = tokio::spawn({
        let url = url.clone();
        async move { client().get(format!("{url}/held")).send().await }
    });
    eventually("the only slot is taken", || async {
        metric(&server, "fault_server_serving").await == Some(1)
    })
    .await;
    let full = client()
        .get(format!("{url}/other"))
        .send()
        .await
        .expect("response");
    assert_eq!(full.status().as_u16(), 503, "default reject status");
    let faulted = client()
        .get(format!("{url}/fault"))
        .send()
        .await
        .expect("response");
    assert_eq!(faulted.status().as_u16(), 502, "faults do not need a slot");
    held.abort();
}

/// A join_all without the futures crate: spawn each, then await in order.
async fn futures_join_all<F>(futures: impl Iterator<Item = F>) -> Vec<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futures.map(tokio::spawn).collect();
    let mut outputs = Vec::new();
    for handle in handles {
        outputs.push(handle.await.expect("task completes"));
    }
    outputs
}

/// Sends `n` POSTs at once, each on its own connection with its own `x-request-id` and
/// `Idempotency-Key` (`PREFIX-I`), and returns the connections without reading.
async fn keyed_posts(server: &ServerHandle, prefix: &str, n: usize) -> Vec<TcpStream> {
    futures_join_all((0..n).map(|i| {
        let addr = server.addr();
        let request = format!(
            "POST /pay HTTP/1.1\r\nhost: test\r\nx-request-id: {prefix}-{i}\r\nidempotency-key: {prefix}-{i}\r\ncontent-length: 0\r\n\r\n"
        );
        async move { send_raw(addr, &request).await }
    }))
    .await
}
