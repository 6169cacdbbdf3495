//! Every fault kind as a real reqwest client sees it over a real socket on 127.0.0.1:0,
//! plus the side effects, duplicates and idempotency-key replays the ledger records.

mod common;

use std::time::{Duration, Instant};

use common::{chain, client, client_with_timeout, is_incomplete, is_reset, server};

#[tokio::test]
async fn status_fault_sends_code_retry_after_body_and_headers() {
    let server = server(
        r#"
faults:
  - name: outage
    respond: { status: 503, retry_after: 1500ms, headers: { x-why: drill } }
"#,
    )
    .await;
    let response = client()
        .get(format!("{}/items/1", server.url()))
        .header("x-request-id", "r1")
        .send()
        .await
        .expect("a status fault is a response");
    assert_eq!(response.status().as_u16(), 503);
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    assert_eq!(header("retry-after").as_deref(), Some("2"), "rounded up");
    assert_eq!(header("x-why").as_deref(), Some("drill"));
    assert_eq!(header("x-chaos-fault").as_deref(), Some("outage"));
    let body: serde_json::Value = serde_json::from_str(&response.text().await.expect("body"))
        .expect("default fault body is JSON");
    assert_eq!(body["status"], 503);
    assert_eq!(body["phase"], "outage");
    let ledger = server.ledger();
    assert_eq!(ledger.by_outcome.get("status_503"), Some(&1));
    assert_eq!(ledger.by_phase.get("outage"), Some(&1));
    assert_eq!(ledger.by_fault.get("status"), Some(&1));
}

#[tokio::test]
async fn status_fault_with_a_custom_body() {
    let server = server("faults: [ { respond: { status: 429, body: slow down } } ]").await;
    let response = client().get(server.url()).send().await.expect("response");
    assert_eq!(response.status().as_u16(), 429);
    assert!(response.headers().get("retry-after").is_none());
    assert_eq!(response.text().await.expect("body"), "slow down");
}

#[tokio::test]
async fn reset_is_seen_as_connection_reset() {
    let server = server("faults: [ { respond: { fault: reset } } ]").await;
    let error = client()
        .get(format!("{}/x", server.url()))
        .send()
        .await
        .expect_err("a reset is not a response");
    assert!(
        is_reset(&error),
        "expected ConnectionReset in:\n{}",
        chain(&error)
    );
    assert_eq!(server.ledger().by_outcome.get("reset"), Some(&1));
}

#[tokio::test]
async fn reset_of_a_post_with_a_body_is_still_a_reset() {
    let server = server("faults: [ { match: { method: POST }, respond: { fault: reset } } ]").await;
    let error = client()
        .post(format!("{}/payments", server.url()))
        .body(vec![b'x'; 64 * 1024])
        .send()
        .await
        .expect_err("reset");
    assert!(is_reset(&error), "{}", chain(&error));
}

#[tokio::test]
async fn close_is_seen_as_an_empty_reply() {
    let server = server("faults: [ { respond: { fault: close } } ]").await;
    let error = client()
        .get(server.url())
        .send()
        .await
        .expect_err("a close is not a response");
    assert!(
        is_incomplete(&error) && !is_reset(&error),
        "expected an incomplete message without a reset:\n{}",
        chain(&error)
    );
    assert_eq!(server.ledger().by_outcome.get("close"), Some(&1));
}

#[tokio::test]
async fn truncate_sends_headers_then_part_of_the_body_then_rst() {
    let server = server(
        "faults: [ { respond: { fault: truncate, status: 200, body: 0123456789abcdefghij } } ]",
    )
    .await;
    let response = client()
        .get(server.url())
        .header("x-request-id", "t1")
        .send()
        .await
        .expect("the status line and headers arrive");
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(response.content_length(), Some(20));
    let error = response.bytes().await.expect_err("the body is cut short");
    assert!(
        is_reset(&error) || is_incomplete(&error),
        "expected a reset or an incomplete body:\n{}",
        chain(&error)
    );
    assert_eq!(server.ledger().by_outcome.get("truncate"), Some(&1));
}

#[tokio::test]
async fn truncated_body_arrives_in_part() {
    // Read the raw bytes to see exactly what was sent before the RST.
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let server =
        server("faults: [ { respond: { fault: truncate, body: 0123456789abcdefghij } } ]").await;
    let mut stream = tokio::net::TcpStream::connect(server.addr())
        .await
        .expect("connect");
    stream
        .write_all(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .expect("write");
    let mut received = Vec::new();
    let mut buffer = [0u8; 1024];
    let end = loop {
        match stream.read(&mut buffer).await {
            Ok(0) => break None,
            Ok(n) => received.extend_from_slice(&buffer[..n]),
            Err(error) => break Some(error.kind()),
        }
    };
    let text = String::from_utf8_lossy(&received);
    assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
    assert!(text.contains("content-length: 20\r\n"), "{text}");
    assert!(text.ends_with("\r\n\r\n0123456789"), "{text}");
    assert_eq!(end, Some(std::io::ErrorKind::ConnectionReset));
}

#[tokio::test]
async fn timeout_holds_until_the_client_gives_up() {
    let server = server("faults: [ { respond: { fault: timeout } } ]").await;
    let error = client_with_timeout(Duration::from_millis(300))
        .get(server.url())
        .send()
        .await
        .expect_err("never answered");
    assert!(error.is_timeout(), "{}", chain(&error));
    assert_eq!(server.ledger().by_outcome.get("timeout"), Some(&1));
    // The client hung up: the server lets go of the request instead of holding it to
    // the cap, so hung requests cannot pile up beyond the clients' own timeouts.
    common::eventually("the held request is dropped", || async {
        common::metric(&server, "fault_server_in_flight").await == Some(0)
    })
    .await;
}

#[tokio::test]
async fn timeout_closes_the_connection_after_its_hold() {
    let server = server("faults: [ { respond: { fault: timeout, hold: 200ms } } ]").await;
    let started = Instant::now();
    let error = client()
        .get(server.url())
        .send()
        .await
        .expect_err("never answered");
    assert!(started.elapsed() >= Duration::from_millis(200));
    assert!(
        !error.is_timeout() && is_incomplete(&error),
        "{}",
        chain(&error)
    );
}

#[tokio::test]
async fn the_hang_cap_bounds_every_hold() {
    let server = common::server_with(
        "faults: [ { respond: { fault: timeout, hold: 1h } } ]",
        |config| {
            config.hang_cap = Duration::from_millis(100);
        },
    )
    .await;
    let error = client()
        .get(server.url())
        .send()
        .await
        .expect_err("never answered");
    assert!(
        !error.is_timeout() && is_incomplete(&error),
        "{}",
        chain(&error)
    );
}

#[tokio::test]
async fn delay_then_normal_service() {
    let server = server("faults: [ { respond: { fault: delay, delay: 300ms } } ]").await;
    let started = Instant::now();
    let response = client()
        .get(format!("{}/slow", server.url()))
        .header("x-request-id", "d1")
        .header("x-chaos-attempt", "1")
        .send()
        .await
        .expect("served after the delay");
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert_eq!(response.status().as_u16(), 200);
    let body: serde_json::Value =
        serde_json::from_str(&response.text().await.expect("body")).expect("json");
    assert_eq!(
        body,
        serde_json::json!({ "ok": true, "id": "d1", "attempt": 1 })
    );
    let ledger = server.ledger();
    assert_eq!(ledger.by_fault.get("delay"), Some(&1));
    assert_eq!(ledger.by_outcome.get("served"), Some(&1));
}

#[tokio::test]
async fn distributed_delay_stays_within_its_bounds() {
    let server =
        server("faults: [ { respond: { fault: delay, delay: { uniform: [50ms, 80ms] } } } ]").await;
    let started = Instant::now();
    let response = client().get(server.url()).send().await.expect("served");
    assert_eq!(response.status().as_u16(), 200);
    assert!(started.elapsed() >= Duration::from_millis(50));
}

#[tokio::test]
async fn attempts_give_fail_then_succeed_over_keep_alive() {
    let server = server("faults: [ { attempts: [1, 2], respond: { status: 503 } } ]").await;
    // One pooled connection across attempts: faults are per request, not per connection.
    let client = reqwest::Client::builder()
        .retry(reqwest::retry::never())
        .no_proxy()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client");
    let mut statuses = Vec::new();
    for attempt in 1..=3 {
        let response = client
            .get(format!("{}/items/9", server.url()))
            .header("x-request-id", "req-9")
            .header("x-chaos-attempt", attempt.to_string())
            .header("x-chaos-policy", "fixed")
            .send()
            .await
            .expect("response");
        statuses.push(response.status().as_u16());
        let _ = response.bytes().await;
    }
    assert_eq!(statuses, [503, 503, 200]);
    let ledger = server.ledger();
    assert_eq!((ledger.attempts, ledger.logical), (3, 1));
    assert_eq!(ledger.by_policy["fixed"].attempts, 3);
    assert_eq!(ledger.by_policy["fixed"].logical, 1);
}

#[tokio::test]
async fn processed_reset_then_retry_is_a_duplicate_side_effect() {
    let server = server(
        "faults: [ { match: { method: POST }, attempts: [1], respond: { fault: reset, processed: true } } ]",
    )
    .await;
    let send = |attempt: u32| {
        client()
            .post(format!("{}/payments", server.url()))
            .header("x-request-id", "pay-1")
            .header("x-chaos-attempt", attempt.to_string())
            .header("x-chaos-policy", "naive")
            .body(r#"{"amount":5}"#)
            .send()
    };
    let error = send(1).await.expect_err("reset after processing");
    assert!(is_reset(&error), "{}", chain(&error));
    let after_first = server.ledger();
    assert_eq!(
        after_first.side_effects, 1,
        "processed: executed before the reset"
    );
    assert_eq!(after_first.duplicate_side_effects, 0);

    let response = send(2).await.expect("the retry is served");
    assert_eq!(response.status().as_u16(), 200);
    let ledger = server.ledger();
    assert_eq!(ledger.side_effects, 2);
    assert_eq!(ledger.duplicate_side_effects, 1);
    assert_eq!(ledger.duplicate_examples, vec!["pay-1".to_string()]);
    assert_eq!(ledger.by_policy["naive"].duplicate_side_effects, 1);
    assert_eq!((ledger.attempts, ledger.logical), (2, 1));
}

#[tokio::test]
async fn processed_applies_to_every_fault_kind() {
    let server = server(
        r#"
faults:
  - { match: { path: /a }, respond: { status: 500, processed: true } }
  - { match: { path: /b }, respond: { fault: close, processed: true } }
  - { match: { path: /c }, respond: { fault: truncate, processed: true } }
  - { match: { path: /d }, respond: { fault: timeout, hold: 10ms, processed: true } }
  - { match: { path: /e }, respond: { status: 500 } }
"#,
    )
    .await;
    for (i, path) in ["/a", "/b", "/c", "/d", "/e"].iter().enumerate() {
        let result = client()
            .post(format!("{}{path}", server.url()))
            .header("x-request-id", format!("id-{i}"))
            .send()
            .await;
        if let Ok(response) = result {
            let _ = response.bytes().await;
        }
    }
    let ledger = server.ledger();
    assert_eq!(ledger.side_effects, 4, "{ledger:?}");
    assert_eq!(ledger.duplicate_side_effects, 0);
}

#[tokio::test]
async fn get_requests_have_no_side_effect() {
    let server = server("").await;
    for _ in 0..3 {
        let response = client()
            .get(server.url())
            .header("x-request-id", "g")
            .send()
            .await
            .expect("served");
        assert_eq!(response.status().as_u16(), 200);
    }
    let ledger = server.ledger();
    assert_eq!(
        (ledger.attempts, ledger.logical, ledger.side_effects),
        (3, 1, 0)
    );
}

#[tokio::test]
async fn idempotency_key_replays_the_stored_response() {
    let server = server(
        "faults: [ { match: { method: POST }, attempts: [1], respond: { fault: reset, processed: true } } ]",
    )
    .await;
    let send = |attempt: u32, body: &'static str| {
        client()
            .post(format!("{}/payments", server.url()))
            .header("x-request-id", "pay-7")
            .header("x-chaos-attempt", attempt.to_string())
            .header("x-chaos-policy", "keyed")
            .header("idempotency-key", "key-7")
            .body(body)
            .send()
    };
    let error = send(1, "amount=5")
        .await
        .expect_err("reset after processing");
    assert!(is_reset(&error), "{}", chain(&error));

    let replay = send(2, "amount=5").await.expect("replayed");
    assert_eq!(replay.status().as_u16(), 200);
    assert_eq!(
        replay
            .headers()
            .get("idempotent-replayed")
            .and_then(|v| v.to_str().ok()),
        Some("true")
    );
    let body: serde_json::Value =
        serde_json::from_str(&replay.text().await.expect("body")).expect("json");
    assert_eq!(
        body["effect"], 1,
        "the stored response of the first execution"
    );
    assert_eq!(
        body["attempt"], 1,
        "stored from attempt 1, not rebuilt for attempt 2"
    );

    let mismatch = send(3, "amount=500").await.expect("answered");
    assert_eq!(mismatch.status().as_u16(), 422);

    let ledger = server.ledger();
    assert_eq!(ledger.side_effects, 1);
    assert_eq!(ledger.duplicate_side_effects, 0);
    assert_eq!(ledger.idempotent_replays, 1);
    assert_eq!(ledger.idempotency_mismatches, 1);
    assert_eq!(ledger.by_policy["keyed"].idempotent_replays, 1);
    assert_eq!(ledger.by_outcome.get("replayed"), Some(&1));
}

#[tokio::test]
async fn a_key_still_executing_gets_409() {
    let server = server("server: { service_time: 1h }").await;
    let url = format!("{}/payments", server.url());
    let first = tokio::spawn({
        let url = url.clone();
        async move {
            client()
                .post(url)
                .header("idempotency-key", "slow")
                .header("x-request-id", "s1")
                .send()
                .await
        }
    });
    let probe = server.clone();
    common::eventually("the first request holds its key", || {
        let probe = probe.clone();
        async move { probe.ledger().tracked_keys == 1 }
    })
    .await;
    let second = client()
        .post(url)
        .header("idempotency-key", "slow")
        .header("x-request-id", "s1")
        .send()
        .await
        .expect("answered");
    assert_eq!(second.status().as_u16(), 409);
    assert_eq!(server.ledger().idempotency_conflicts, 1);
    first.abort();
}

#[tokio::test]
async fn requests_without_ids_are_served_and_counted_as_untracked() {
    let server = server("").await;
    let response = client()
        .put(format!("{}/anything?x=1", server.url()))
        .send()
        .await
        .expect("served");
    assert_eq!(response.status().as_u16(), 200);
    let body: serde_json::Value =
        serde_json::from_str(&response.text().await.expect("body")).expect("json");
    assert_eq!(
        body,
        serde_json::json!({ "ok": true, "id": null, "attempt": null })
    );
    let ledger = server.ledger();
    assert_eq!(
        (ledger.requests, ledger.untracked, ledger.attempts),
        (1, 1, 0)
    );
}

/// Issue 50: an empty or blank `x-request-id` named one logical request, so every
/// request sending it counted as a retry of the first. It names none.
#[tokio::test]
async fn an_empty_or_blank_request_id_names_no_request() {
    let server = server("").await;
    for id in ["", "  ", ""] {
        let response = client()
            .post(format!("{}/orders", server.url()))
            .header("x-request-id", id)
            .body("{}")
            .send()
            .await
            .expect("served");
        assert_eq!(response.status().as_u16(), 200);
    }
    let ledger = server.ledger();
    assert_eq!(
        (
            ledger.requests,
            ledger.untracked,
            ledger.attempts,
            ledger.logical
        ),
        (3, 3, 0, 0)
    );
    assert_eq!(ledger.duplicate_side_effects, 0);
}

#[tokio::test]
async fn probability_draws_are_deterministic_per_request_id_and_attempt() {
    let yaml = "faults: [ { probability: 0.5, respond: { status: 503 } } ]";
    let outcomes = |server: fault_server::ServerHandle| async move {
        let mut statuses = Vec::new();
        for i in 0..40 {
            let response = client()
                .get(server.url())
                .header("x-request-id", format!("id-{i}"))
                .header("x-chaos-attempt", "1")
                .send()
                .await
                .expect("response");
            statuses.push(response.status().as_u16());
        }
        statuses
    };
    let first = outcomes(server(yaml).await).await;
    let second = outcomes(server(yaml).await).await;
    assert_eq!(first, second, "same seed, same ids: same decisions");
    assert!(first.contains(&503) && first.contains(&200), "{first:?}");
}
