//! HTTP/2 cleartext (prior knowledge) beside HTTP/1.1 on one port, and gRPC unary calls:
//! a success framed as one message with `grpc-status: 0` in its trailers, a scripted gRPC
//! fault as a Trailers-Only answer, the ledger counting by code; a connection the script
//! kills fails every stream on it; the advertised `SETTINGS_MAX_CONCURRENT_STREAMS`.

mod common;

use axum::body::Bytes;
use common::{client, server, server_with};
use fault_server::ServerHandle;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http2::SendRequest;
use hyper::http::{HeaderMap, Request, Response, Version};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// One HTTP/2 connection to the server, by prior knowledge.
async fn h2(server: &ServerHandle) -> SendRequest<Full<Bytes>> {
    let stream = TcpStream::connect(server.addr()).await.expect("connects");
    let (send, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .expect("an HTTP/2 handshake");
    tokio::spawn(connection);
    send
}

/// A unary call's request: one empty message, `x-request-id` as gRPC metadata.
fn call(
    server: &ServerHandle,
    path: &str,
    id: &str,
    previous: Option<u32>,
) -> Request<Full<Bytes>> {
    let mut request = Request::post(format!("{}{path}", server.url()))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("x-request-id", id);
    if let Some(previous) = previous {
        request = request.header("grpc-previous-rpc-attempts", previous);
    }
    request
        .body(Full::new(Bytes::from_static(&[0, 0, 0, 0, 0])))
        .expect("a request")
}

/// The answer's headers, its body and its trailers.
async fn read(response: Response<hyper::body::Incoming>) -> (HeaderMap, Bytes, Option<HeaderMap>) {
    let (parts, body) = response.into_parts();
    assert_eq!(parts.version, Version::HTTP_2);
    assert_eq!(parts.status, 200, "a gRPC answer is HTTP 200");
    let collected = body.collect().await.expect("the body");
    let trailers = collected.trailers().cloned();
    (parts.headers, collected.to_bytes(), trailers)
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

#[tokio::test]
async fn http2_by_prior_knowledge_and_http1_share_the_port() {
    let server = server("faults: []").await;
    let mut send = h2(&server).await;
    let response = send
        .send_request(
            Request::get(format!("{}/h2", server.url()))
                .header("x-request-id", "over-h2")
                .body(Full::new(Bytes::new()))
                .expect("a request"),
        )
        .await
        .expect("an HTTP/2 answer");
    assert_eq!(response.version(), Version::HTTP_2);
    assert_eq!(response.status(), 200);
    let body = response
        .into_body()
        .collect()
        .await
        .expect("a body")
        .to_bytes();
    assert_eq!(&body[..], br#"{"ok":true,"id":"over-h2","attempt":null}"#);

    let h1 = client()
        .get(format!("{}/h1", server.url()))
        .send()
        .await
        .expect("an HTTP/1.1 answer");
    assert_eq!(h1.version(), reqwest::Version::HTTP_11);
    assert_eq!(h1.status(), 200);
    assert_eq!(server.ledger().requests, 2);
}

#[tokio::test]
async fn a_grpc_success_is_one_length_prefixed_message_and_status_0_in_the_trailers() {
    let server = server("faults: []").await;
    let mut send = h2(&server).await;
    let response = send
        .send_request(call(&server, "/chaos.Payments/Charge", "call-1", None))
        .await
        .expect("an answer");
    let (headers, body, trailers) = read(response).await;
    assert_eq!(header(&headers, "content-type"), Some("application/grpc"));
    assert_eq!(body[0], 0, "not compressed");
    let len = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
    assert_eq!(len, body.len() - 5, "one message, its length prefixed");
    let message: serde_json::Value = serde_json::from_slice(&body[5..]).expect("JSON");
    assert_eq!(message["id"], "call-1");
    assert_eq!(
        message["attempt"], 1,
        "a first attempt has no grpc-previous-rpc-attempts"
    );
    let trailers = trailers.expect("trailers");
    assert_eq!(header(&trailers, "grpc-status"), Some("0"));

    // A gRPC call is a POST: it executes its side effect, once per logical request.
    let ledger = server.ledger();
    assert_eq!((ledger.logical, ledger.side_effects), (1, 1));
}

#[tokio::test]
async fn a_scripted_grpc_fault_is_trailers_only_and_counted_by_code() {
    let server = server(
        "faults:\n  - { match: { path: /chaos.Payments/Charge }, respond: { grpc: resource_exhausted, pushback: 200ms } }\n  - { match: { path: /chaos.Payments/Refund }, respond: { grpc: unavailable, pushback: stop } }\n",
    )
    .await;
    let mut send = h2(&server).await;
    for (path, previous, code, pushback) in [
        ("/chaos.Payments/Charge", None, "8", "200"),
        ("/chaos.Payments/Charge", Some(1), "8", "200"),
        ("/chaos.Payments/Refund", None, "14", "-1"),
    ] {
        let response = send
            .send_request(call(&server, path, "call-1", previous))
            .await
            .expect("an answer");
        let (headers, body, trailers) = read(response).await;
        assert_eq!(header(&headers, "grpc-status"), Some(code), "{path}");
        assert_eq!(header(&headers, "grpc-retry-pushback-ms"), Some(pushback));
        assert_eq!(header(&headers, "content-type"), Some("application/grpc"));
        assert!(header(&headers, "grpc-message").is_some_and(|m| m.starts_with("injected fault")));
        assert!(header(&headers, "retry-after").is_none());
        assert!(
            body.is_empty() && trailers.is_none(),
            "Trailers-Only: no message, no trailers"
        );
    }
    let ledger = server.ledger();
    assert_eq!(ledger.by_outcome.get("grpc_resource_exhausted"), Some(&2));
    assert_eq!(ledger.by_outcome.get("grpc_unavailable"), Some(&1));
    assert_eq!(
        (ledger.attempts, ledger.logical),
        (3, 1),
        "one x-request-id, one logical call"
    );
    assert_eq!(
        ledger.side_effects, 0,
        "a fault in front of the service executed nothing"
    );

    // The same fault answers a client that is not speaking gRPC with code.proto's status.
    let plain = client()
        .post(format!("{}/chaos.Payments/Charge", server.url()))
        .send()
        .await
        .expect("an answer");
    assert_eq!(plain.status(), 429);
    assert_eq!(server.ledger().by_outcome.get("status_429"), Some(&1));
}

#[tokio::test]
async fn a_call_the_server_cannot_serve_is_told_the_code_grpc_maps_its_status_to() {
    // Over capacity is an HTTP 503 for HTTP; a gRPC call is told UNAVAILABLE.
    let server = server("server: { capacity: 1, queue: 0, service_time: 1h }").await;
    let mut held = h2(&server).await;
    let hold = held.send_request(call(&server, "/chaos.Slow/Hold", "held", None));
    let hold = tokio::spawn(hold);
    common::eventually("one call in service", || async {
        common::metric(&server, "fault_server_serving").await == Some(1)
    })
    .await;
    let mut send = h2(&server).await;
    let response = send
        .send_request(call(&server, "/chaos.Slow/Hold", "rejected", None))
        .await
        .expect("an answer");
    let (headers, body, _) = read(response).await;
    assert_eq!(header(&headers, "grpc-status"), Some("14"));
    assert!(body.is_empty());
    hold.abort();
}

#[tokio::test]
async fn a_killed_connection_fails_every_stream_on_it() {
    let server = server(
        "server: { capacity: 8, service_time: 1h }\nfaults:\n  - { match: { path: /kill }, respond: { fault: reset } }\n",
    )
    .await;
    let send = h2(&server).await;
    let slow: Vec<_> = (0..3)
        .map(|i| {
            let mut send = send.clone();
            let request = call(&server, "/chaos.Slow/Hold", &format!("slow-{i}"), None);
            tokio::spawn(async move { send.send_request(request).await })
        })
        .collect();
    common::eventually("three streams in service", || async {
        common::metric(&server, "fault_server_serving").await == Some(3)
    })
    .await;
    let mut killer = send.clone();
    let killed = killer
        .send_request(call(&server, "/kill", "kill", None))
        .await;
    assert!(killed.is_err(), "the reset stream has no answer");
    for stream in slow {
        let outcome = stream.await.expect("the task");
        assert!(
            outcome.is_err(),
            "a stream on the killed connection failed with it"
        );
    }
    assert_eq!(server.ledger().by_outcome.get("reset"), Some(&1));
}

#[tokio::test]
async fn the_server_advertises_its_max_concurrent_streams() {
    let server = server_with("faults: []", |config| config.max_concurrent_streams = 3).await;
    let mut stream = TcpStream::connect(server.addr()).await.expect("connects");
    stream
        .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
        .await
        .expect("the preface and empty SETTINGS");
    // The server's first frame is its SETTINGS: a 9-byte header, then 6 bytes a setting.
    let mut head = [0u8; 9];
    stream.read_exact(&mut head).await.expect("a frame header");
    assert_eq!(head[3], 0x4, "a SETTINGS frame");
    let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
    let mut payload = vec![0u8; len];
    stream.read_exact(&mut payload).await.expect("the settings");
    let settings: Vec<(u16, u32)> = payload
        .chunks_exact(6)
        .map(|s| {
            (
                u16::from_be_bytes([s[0], s[1]]),
                u32::from_be_bytes([s[2], s[3], s[4], s[5]]),
            )
        })
        .collect();
    assert!(
        settings.contains(&(0x3, 3)),
        "SETTINGS_MAX_CONCURRENT_STREAMS = 3 in {settings:?}"
    );
}

/// The `h2` error under a failed request, if there is one.
fn h2_error(error: &hyper::Error) -> Option<&h2::Error> {
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = current {
        if let Some(h2) = e.downcast_ref::<h2::Error>() {
            return Some(h2);
        }
        current = e.source();
    }
    None
}

#[tokio::test]
async fn a_refused_stream_is_reset_with_refused_stream_and_not_processed() {
    let server = server("faults:\n  - { attempts: [1], respond: { fault: refuse } }\n").await;
    let mut send = h2(&server).await;
    let mut first = call(&server, "/chaos.Payments/Charge", "pay-1", None);
    first.headers_mut().insert(
        "x-chaos-attempt",
        hyper::http::HeaderValue::from_static("1"),
    );
    let refused = send
        .send_request(first)
        .await
        .expect_err("a refused stream has no answer");
    let reason = h2_error(&refused).and_then(h2::Error::reason);
    assert_eq!(reason, Some(h2::Reason::REFUSED_STREAM), "{refused:?}");

    // The connection lives on: the retry goes on it, and is the only execution.
    let response = send
        .send_request(call(&server, "/chaos.Payments/Charge", "pay-1", Some(1)))
        .await
        .expect("the retry's answer");
    let (_, _, trailers) = read(response).await;
    assert_eq!(
        header(&trailers.expect("trailers"), "grpc-status"),
        Some("0")
    );
    let ledger = server.ledger();
    assert_eq!(ledger.by_outcome.get("refuse"), Some(&1));
    assert_eq!(ledger.by_fault.get("refuse"), Some(&1));
    assert_eq!(
        (ledger.requests, ledger.logical, ledger.side_effects),
        (2, 1, 1)
    );
    assert_eq!(ledger.duplicate_side_effects, 0);
}

#[tokio::test]
async fn goaway_serves_the_stream_and_sends_its_connection_away() {
    let server =
        server("faults:\n  - { match: { path: /drain }, respond: { fault: goaway } }\n").await;
    let stream = TcpStream::connect(server.addr()).await.expect("connects");
    let (mut send, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .expect("an HTTP/2 handshake");
    let connection = tokio::spawn(connection);
    let response = send
        .send_request(call(&server, "/drain", "drain-1", None))
        .await
        .expect("the stream that drew the fault is served");
    let (_, _, trailers) = read(response).await;
    assert_eq!(
        header(&trailers.expect("trailers"), "grpc-status"),
        Some("0")
    );
    // The server said GOAWAY and closed: the client's connection task ends cleanly.
    tokio::time::timeout(std::time::Duration::from_secs(10), connection)
        .await
        .expect("the connection ends after a GOAWAY")
        .expect("the task")
        .expect("a graceful end, not an error");
    assert!(
        send.send_request(call(&server, "/after", "after-1", None))
            .await
            .is_err(),
        "nothing more goes on a connection that was sent away"
    );
    let ledger = server.ledger();
    assert_eq!(ledger.by_fault.get("goaway"), Some(&1));
    assert_eq!(ledger.by_outcome.get("served"), Some(&1));
    assert_eq!(ledger.side_effects, 1);

    // Over HTTP/1.1 the same fault closes the connection after its answer.
    let h1 = client()
        .get(format!("{}/drain", server.url()))
        .send()
        .await
        .expect("an HTTP/1.1 answer");
    assert_eq!(h1.status(), 200);
    assert_eq!(
        h1.headers().get("connection").and_then(|v| v.to_str().ok()),
        Some("close")
    );
}
