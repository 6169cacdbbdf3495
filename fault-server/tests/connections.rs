//! Clients that hold resources without using them: idle connections past the budget, a
//! low descriptor limit, a body trickled a byte at a time; and a server asked to listen
//! beyond loopback without a token.

mod common;

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{eventually, server_with};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A keep-alive connection that has been served one request and now sits idle.
async fn idle_connection(addr: SocketAddr) -> TcpStream {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: t\r\n\r\n")
        .await
        .expect("write");
    let mut buf = [0u8; 512];
    let n = stream.read(&mut buf).await.expect("a response");
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"), "{:?}", &buf[..n]);
    stream
}

/// One request on a fresh connection; the status line's code.
async fn status_of(addr: SocketAddr, path: &str) -> u16 {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .expect("write");
    let mut response = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut response)).await;
    let text = String::from_utf8_lossy(&response);
    text.split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status line for {path}: {text:?}"))
}

/// Whether the server has closed `stream` (EOF or reset). It waits 10 s: eviction is
/// immediate, and the server's own idle cut-off (30 s, the header read timeout) must not
/// be what closes it.
async fn closed_by_server(stream: &mut TcpStream) -> bool {
    let mut buf = [0u8; 64];
    matches!(
        tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf)).await,
        Ok(Ok(0) | Err(_))
    )
}

#[tokio::test]
async fn past_the_budget_the_idlest_connection_makes_room() {
    let server = server_with("faults: []", |c| c.max_connections = Some(4)).await;
    let addr = server.addr();
    let mut idle = Vec::new();
    for _ in 0..4 {
        idle.push(idle_connection(addr).await);
    }
    // A fifth client: the oldest idle connection is closed for it, and it is served.
    assert_eq!(status_of(addr, "/items/1").await, 200);
    assert!(
        closed_by_server(&mut idle[0]).await,
        "the idlest was closed"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn when_every_connection_is_busy_the_control_api_is_still_served() {
    let server = server_with(
        "faults: [ { name: hang, match: { path: /hang }, respond: { fault: timeout } } ]",
        |c| c.max_connections = Some(3),
    )
    .await;
    let addr = server.addr();
    let mut busy = Vec::new();
    for _ in 0..3 {
        busy.push(common::send_raw(addr, "GET /hang HTTP/1.1\r\nhost: t\r\n\r\n").await);
    }
    eventually("three requests held", || async { server.in_flight() == 3 }).await;
    assert_eq!(status_of(addr, "/healthz").await, 200);
    assert_eq!(status_of(addr, "/__chaos/ledger").await, 200);
    assert_eq!(
        status_of(addr, "/items/1").await,
        503,
        "no idle connection to close: ordinary traffic waits"
    );
    drop(busy);
    server.shutdown().await;
}

#[tokio::test]
async fn a_body_trickled_a_byte_at_a_time_is_cut() {
    let server = server_with("faults: []", |c| c.body_timeout = Duration::from_secs(1)).await;
    let mut stream = TcpStream::connect(server.addr()).await.expect("connect");
    stream
        .write_all(b"POST /payments HTTP/1.1\r\nhost: t\r\ncontent-length: 1000\r\n\r\n")
        .await
        .expect("write");
    // Trickle for up to 20 s; the server must answer long before: 408 Request Timeout.
    let started = Instant::now();
    let mut buf = [0u8; 256];
    let answer = loop {
        if started.elapsed() > Duration::from_secs(20) {
            panic!("the server waited 20 s for a trickled body");
        }
        let _ = stream.write_all(b"x").await;
        match tokio::time::timeout(Duration::from_millis(100), stream.read(&mut buf)).await {
            Ok(Ok(n)) => break String::from_utf8_lossy(&buf[..n]).into_owned(),
            Ok(Err(e)) => panic!("the connection failed instead of an answer: {e}"),
            Err(_) => continue,
        }
    };
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer:?}");
    server.shutdown().await;
}

#[test]
fn a_non_loopback_listen_without_a_token_is_refused() {
    let out = Command::new(env!("CARGO_BIN_EXE_fault-server"))
        .args(["--listen", "0.0.0.0:0"])
        .env_remove("FAULT_SERVER_TOKEN")
        .stdin(Stdio::null())
        .output()
        .expect("run fault-server");
    assert_eq!(out.status.code(), Some(2));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("without a token"), "{said}");
    assert!(said.contains("--allow-open-control"), "{said}");
}

/// The binary under a hard limit of 256 descriptors, with 300 idle clients: it says the
/// limit is low, and `/healthz` still answers.
#[cfg(target_os = "linux")]
#[test]
fn a_low_descriptor_limit_is_said_and_idle_clients_cannot_starve_healthz() {
    use std::io::{BufRead, BufReader, Read, Write};
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -n 256 && ulimit -Hn 256 && exec {} --listen 127.0.0.1:0",
            env!("CARGO_BIN_EXE_fault-server")
        ))
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn fault-server");
    let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
    let mut said = String::new();
    let url = loop {
        let line = lines.next().expect("a line").expect("utf-8");
        said.push_str(&line);
        said.push('\n');
        if let Some(rest) = line.split("listening on http://").nth(1) {
            break rest.split(' ').next().expect("an address").to_owned();
        }
    };
    assert!(said.contains("only 256 file descriptors"), "{said}");
    let addr: SocketAddr = url.parse().expect("an address");
    let mut idle = Vec::new();
    for _ in 0..300 {
        let mut s = std::net::TcpStream::connect(addr).expect("connect");
        s.write_all(b"GET /healthz HTTP/1.1\r\nhost: t\r\n\r\n")
            .expect("write");
        idle.push(s);
    }
    let mut health = std::net::TcpStream::connect(addr).expect("connect");
    // Well below the server's 30 s idle cut-off, which would free the descriptors anyway.
    health
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    health
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n")
        .expect("write");
    let mut response = String::new();
    let _ = health.read_to_string(&mut response);
    let _ = child.kill();
    let _ = child.wait();
    assert!(response.starts_with("HTTP/1.1 200"), "{response:?}");
}
