//! `attempt::send` (the engine's pool) and `attempt::classify` (the relay's client) against
//! real sockets that fail in each way the design names: refused, connect timeout, reset,
//! clean close, timeout, truncated body.

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use chaos_policy::{Attempt, Outcome, ResetPhase};
use harness::attempt::{self, AttemptSpec};
use harness::plan::RequestKind;
use harness::pool::Pool;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

fn kind() -> RequestKind {
    RequestKind {
        rpc: None,
        name: "r".into(),
        method: "GET".into(),
        path: "/x".into(),
        n: Default::default(),
        weight: 1.0,
        body: None,
        headers: BTreeMap::new(),
        idempotency_key: false,
    }
}

/// What one attempt to `addr` produces, with an attempt timeout of 300 ms.
async fn outcome(addr: SocketAddr) -> Outcome {
    let pool = Pool::new(&format!("http://{addr}"), 1, None).expect("pool");
    let kind = attempt::Prepared::new(&format!("http://{addr}"), &kind(), "t", Default::default())
        .expect("a buildable kind");
    let spec = AttemptSpec {
        kind: &kind,
        id: "t-0000001",
        n: 1,
        attempt: Attempt::FIRST,
        timeout: Some(Duration::from_millis(300)),
        traceparent: None,
        propagate_deadline: false,
    };
    attempt::send(&pool, spec).await.outcome
}

/// A server that reads one request head and then does `then` with the connection.
async fn server<F, Fut>(then: F) -> SocketAddr
where
    F: FnOnce(TcpStream) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.expect("accept");
        if !common::read_head(&mut stream).await {
            return;
        }
        then(stream).await;
    });
    addr
}

#[tokio::test]
async fn a_closed_port_is_connect_refused() {
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr");
    assert_eq!(outcome(addr).await, Outcome::ConnectRefused);
}

#[tokio::test]
async fn a_connect_that_never_completes_is_a_connect_timeout() {
    // A listener whose accept queue is full: further SYNs go unanswered.
    let socket =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("socket");
    socket
        .bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into())
        .expect("bind");
    socket.listen(0).expect("listen");
    let listener: std::net::TcpListener = socket.into();
    let addr = listener.local_addr().expect("addr");
    let mut fillers = Vec::new();
    while let Ok(Ok(s)) =
        tokio::time::timeout(Duration::from_millis(300), TcpStream::connect(addr)).await
    {
        fillers.push(s);
    }
    let client = reqwest::Client::builder()
        .connect_timeout(Duration::from_millis(200))
        .no_proxy()
        .build()
        .expect("client");
    let error = client
        .get(format!("http://{addr}/"))
        .send()
        .await
        .expect_err("no connection");
    assert_eq!(attempt::classify(&error), Outcome::ConnectTimeout);
    // The engine's pool: the attempt's timeout runs out before a connection is made, so
    // nothing was written.
    assert_eq!(outcome(addr).await, Outcome::ConnectTimeout);
    drop(listener);
}

#[tokio::test]
async fn an_rst_after_the_request_is_a_reset() {
    let addr = server(|stream| async move {
        let std = stream.into_std().expect("std");
        socket2::SockRef::from(&std)
            .set_linger(Some(Duration::ZERO))
            .expect("linger");
        drop(std);
    })
    .await;
    assert_eq!(outcome(addr).await, Outcome::Reset(ResetPhase::Unknown));
}

#[tokio::test]
async fn a_fin_without_a_response_is_closed() {
    let addr = server(|mut stream| async move {
        let _ = stream.shutdown().await;
        // Keep reading until the client goes, so the close is a clean FIN, not an RST.
        let mut buf = [0u8; 64];
        while let Ok(n) = stream.read(&mut buf).await {
            if n == 0 {
                break;
            }
        }
    })
    .await;
    assert_eq!(outcome(addr).await, Outcome::Closed);
}

#[tokio::test]
async fn no_answer_within_the_attempt_timeout_is_a_timeout() {
    let addr = server(|stream| async move {
        tokio::time::sleep(Duration::from_secs(5)).await;
        drop(stream);
    })
    .await;
    assert_eq!(outcome(addr).await, Outcome::AttemptTimeout);
}

#[tokio::test]
async fn a_body_cut_short_is_truncated() {
    let addr = server(|mut stream| async move {
        let _ = stream
            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nonly ten b")
            .await;
        let _ = stream.shutdown().await;
    })
    .await;
    assert_eq!(outcome(addr).await, Outcome::TruncatedBody);
}

#[tokio::test]
async fn a_status_is_a_status_and_retry_after_is_read() {
    let addr = server(|mut stream| async move {
        let _ = stream
            .write_all(
                b"HTTP/1.1 503 Service Unavailable\r\nretry-after: 2\r\ncontent-length: 0\r\n\r\n",
            )
            .await;
    })
    .await;
    let pool = Pool::new(&format!("http://{addr}"), 1, None).expect("pool");
    let kind = attempt::Prepared::new(&format!("http://{addr}"), &kind(), "t", Default::default())
        .expect("a buildable kind");
    let answer = attempt::send(
        &pool,
        AttemptSpec {
            kind: &kind,
            id: "t-0000002",
            n: 1,
            attempt: Attempt::FIRST,
            timeout: None,
            traceparent: None,
            propagate_deadline: false,
        },
    )
    .await;
    assert_eq!(answer.outcome, Outcome::Status(503));
    assert_eq!(answer.retry_after, Some(Duration::from_secs(2)));
}
