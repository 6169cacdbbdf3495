//! Hostile input against the documented limits (README, "Limits"): over-long and
//! non-UTF-8 headers, huge, empty and deeply nested scripts, malformed bodies. Each
//! hostile input is generated here and sent over a real socket.

mod common;

use std::time::Duration;

use common::server;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Writes `request` (raw HTTP/1.1) on a fresh connection and reads until the server
/// closes it or a minute passes; returns what came back.
async fn exchange(addr: std::net::SocketAddr, request: &[u8]) -> String {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    stream.write_all(request).await.expect("write the request");
    let mut reply = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(60), stream.read_to_end(&mut reply)).await;
    String::from_utf8_lossy(&reply).into_owned()
}

#[tokio::test]
async fn a_malformed_chunked_body_gets_400_not_413() {
    let server = server("").await;
    let reply = exchange(
        server.addr(),
        b"POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nZZZ\r\n",
    )
    .await;
    assert!(reply.starts_with("HTTP/1.1 400"), "{reply}");
    assert!(reply.contains("malformed"), "{reply}");
    assert_eq!(server.ledger().by_outcome.get("bad_request"), Some(&1));

    // Too large is still 413, and an announced length above the limit is refused
    // before the body is sent.
    let reply = exchange(
        server.addr(),
        format!(
            "POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n",
            fault_server::DEFAULT_MAX_BODY + 1
        )
        .as_bytes(),
    )
    .await;
    assert!(reply.starts_with("HTTP/1.1 413"), "{reply}");
}
