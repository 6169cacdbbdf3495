//! The engine's own connection pool against a bare HTTP/1.1 server that counts its
//! connections: connections are reused, a connection the server closed is never handed an
//! attempt, and no more connections are made than attempts on the wire at once.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use chaos_policy::{Attempt, Outcome};
use harness::attempt::{self, AttemptSpec, Prepared};
use harness::plan::RequestKind;
use harness::pool::Pool;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// A server that answers every request 200, closing the connection after `per_connection`
/// answers (with `connection: close` on the last); the count is of connections accepted.
async fn server(per_connection: usize) -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&accepted);
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                for answered in 1..=per_connection {
                    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                        match stream.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    let end = buf
                        .windows(4)
                        .position(|w| w == b"\r\n\r\n")
                        .expect("a head")
                        + 4;
                    buf.drain(..end);
                    let last = answered == per_connection;
                    let close = if last { "connection: close\r\n" } else { "" };
                    let answer = format!("HTTP/1.1 200 OK\r\n{close}content-length: 2\r\n\r\nok");
                    if stream.write_all(answer.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, accepted)
}

fn kind() -> RequestKind {
    RequestKind {
        rpc: None,
        name: "r".into(),
        method: "GET".into(),
        path: "/items/{n}".into(),
        n: Default::default(),
        weight: 1.0,
        body: None,
        headers: BTreeMap::new(),
        idempotency_key: false,
    }
}

/// A pool keeping at most `max_idle` connections to `addr`, and the test's request kind
/// prepared for it.
fn client(addr: SocketAddr, max_idle: usize) -> (Pool, Prepared) {
    let url = format!("http://{addr}");
    let pool = Pool::new(&url, max_idle, None).expect("pool");
    (
        pool,
        Prepared::new(&url, &kind(), "t", Default::default()).expect("a buildable kind"),
    )
}

async fn send(pool: &Pool, kind: &Prepared, n: u64) -> Outcome {
    let id = format!("t-{n:07}");
    let spec = AttemptSpec {
        kind,
        id: &id,
        n,
        attempt: Attempt::FIRST,
        timeout: Some(Duration::from_secs(5)),
        traceparent: None,
        propagate_deadline: false,
        allowance: None,
    };
    attempt::send(pool, spec).await.outcome()
}

#[tokio::test]
async fn one_attempt_at_a_time_uses_one_connection() {
    let (addr, accepted) = server(usize::MAX).await;
    let (pool, kind) = client(addr, 4);
    for n in 0..50 {
        assert_eq!(send(&pool, &kind, n).await, Outcome::Status(200));
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_connection_the_server_closed_is_never_handed_an_attempt() {
    // Every connection takes two requests, then closes: 30 attempts, 15 connections, and
    // not one attempt lost to a closed connection.
    let (addr, accepted) = server(2).await;
    let (pool, kind) = client(addr, 4);
    for n in 0..30 {
        assert_eq!(
            send(&pool, &kind, n).await,
            Outcome::Status(200),
            "attempt {n}"
        );
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 15);
}

#[tokio::test]
async fn concurrent_attempts_make_as_many_connections_as_are_busy_at_once_and_keep_them() {
    let (addr, accepted) = server(usize::MAX).await;
    let (pool, kind) = client(addr, 8);
    for round in 0..10u64 {
        let tasks: Vec<_> = (0..8)
            .map(|i| {
                let (pool, kind) = (pool.clone(), kind.clone());
                tokio::spawn(async move { send(&pool, &kind, round * 8 + i).await })
            })
            .collect();
        for task in tasks {
            assert_eq!(task.await.expect("a send"), Outcome::Status(200));
        }
    }
    // Eight at once in the first round; every later round finds them idle.
    assert_eq!(accepted.load(Ordering::SeqCst), 8);
}

#[test]
fn a_target_that_is_not_plain_http_is_refused() {
    let error = Pool::new("https://127.0.0.1:1", 1, None).expect_err("https");
    assert!(error.to_string().contains("only http://"), "{error}");
}
