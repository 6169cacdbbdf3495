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
        allowance: None,
    };
    attempt::send(&pool, spec).await.outcome()
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
            allowance: None,
        },
    )
    .await;
    assert_eq!(answer.outcome(), Outcome::Status(503));
    assert_eq!(answer.reply.retry_after, Some(Duration::from_secs(2)));
}

/// What one HTTP/2 attempt to `addr` produces, on one multiplexed connection.
async fn h2_outcome(addr: SocketAddr) -> Outcome {
    let url = format!("http://{addr}");
    let pool = Pool::new(&url, 1, Some(1)).expect("pool");
    let kind = attempt::Prepared::new(&url, &kind(), "t", harness::plan::Protocol::Http2)
        .expect("a buildable kind");
    let spec = AttemptSpec {
        kind: &kind,
        id: "t-0000001",
        n: 1,
        attempt: Attempt::FIRST,
        timeout: Some(Duration::from_millis(2000)),
        traceparent: None,
        propagate_deadline: false,
        allowance: None,
    };
    attempt::send(&pool, spec).await.outcome()
}

/// One HTTP/2 frame: its 9-byte header and payload.
fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len())
        .expect("a small frame")
        .to_be_bytes();
    let mut bytes = vec![len[1], len[2], len[3], kind, flags];
    bytes.extend_from_slice(&stream.to_be_bytes());
    bytes.extend_from_slice(payload);
    bytes
}

/// An HTTP/2 server written frame by frame: on every connection it answers the client's
/// preface with its SETTINGS, and answers each request's HEADERS with `react(stream id)`:
/// what the `h2` crate's server will not send on demand (a GOAWAY naming a last stream
/// below the request's).
async fn h2_server(react: fn(u32) -> Vec<u8>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut preface = [0u8; 24];
                if stream.read_exact(&mut preface).await.is_err() {
                    return;
                }
                if stream.write_all(&frame(0x4, 0, 0, &[])).await.is_err() {
                    return;
                }
                loop {
                    let mut head = [0u8; 9];
                    if stream.read_exact(&mut head).await.is_err() {
                        return;
                    }
                    let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
                    let mut payload = vec![0u8; len];
                    if stream.read_exact(&mut payload).await.is_err() {
                        return;
                    }
                    let id = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
                    let reply = match head[3] {
                        0x1 => react(id),
                        // Acknowledge the client's SETTINGS.
                        0x4 if head[4] & 0x1 == 0 => frame(0x4, 0x1, 0, &[]),
                        _ => continue,
                    };
                    if stream.write_all(&reply).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

#[tokio::test]
async fn a_refused_stream_is_provably_unprocessed() {
    // RST_STREAM with REFUSED_STREAM (0x7).
    let addr = h2_server(|stream| frame(0x3, 0, stream, &7u32.to_be_bytes())).await;
    assert_eq!(
        h2_outcome(addr).await,
        Outcome::Unprocessed(chaos_policy::Unprocessed::RefusedStream)
    );
}

#[tokio::test]
async fn a_stream_above_a_goaways_last_stream_id_is_provably_unprocessed() {
    // GOAWAY, last-stream-id 0, NO_ERROR: no stream of the connection was processed.
    let addr = h2_server(|_| frame(0x7, 0, 0, &[0; 8])).await;
    assert_eq!(
        h2_outcome(addr).await,
        Outcome::Unprocessed(chaos_policy::Unprocessed::GoAway)
    );
}

#[tokio::test]
async fn a_stream_reset_otherwise_may_have_been_processed() {
    // RST_STREAM with INTERNAL_ERROR (0x2): the server may have acted on it.
    let addr = h2_server(|stream| frame(0x3, 0, stream, &2u32.to_be_bytes())).await;
    let outcome = h2_outcome(addr).await;
    assert!(
        !outcome.proves_unsent(),
        "{outcome:?} must not count as unsent"
    );
}
