//! Helpers shared by the integration tests: a server from YAML, a reqwest client without
//! retries or pooling, and classification of client errors by their source chain.
#![allow(dead_code)]

use std::error::Error;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use fault_server::{Script, ServerConfig, ServerHandle, start};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Starts a server on 127.0.0.1:0 with this script.
pub(crate) async fn server(yaml: &str) -> ServerHandle {
    server_with(yaml, |_| {}).await
}

/// Starts a server on 127.0.0.1:0 with this script and a tweak of the configuration.
pub(crate) async fn server_with(yaml: &str, tweak: impl FnOnce(&mut ServerConfig)) -> ServerHandle {
    let script = Script::from_yaml_str(yaml).expect("test script is valid");
    let mut config = ServerConfig::with_script(script);
    config.seed = 7;
    tweak(&mut config);
    start(config).await.expect("server starts on port 0")
}

/// A client that never retries, never reuses a connection a fault may have killed,
/// ignores proxy settings, and gives up only after a generous timeout.
pub(crate) fn client() -> reqwest::Client {
    client_with_timeout(Duration::from_secs(30))
}

pub(crate) fn client_with_timeout(timeout: Duration) -> reqwest::Client {
    reqwest::Client::builder()
        .retry(reqwest::retry::never())
        .pool_max_idle_per_host(0)
        .no_proxy()
        .timeout(timeout)
        .build()
        .expect("client builds")
}

/// Every `io::ErrorKind` in the error's source chain.
pub(crate) fn io_kinds(error: &(dyn Error + 'static)) -> Vec<io::ErrorKind> {
    let mut kinds = Vec::new();
    let mut current: Option<&(dyn Error + 'static)> = Some(error);
    while let Some(e) = current {
        if let Some(io) = e.downcast_ref::<io::Error>() {
            kinds.push(io.kind());
        }
        current = e.source();
    }
    kinds
}

/// True when the chain holds a connection reset (an RST from the peer).
pub(crate) fn is_reset(error: &(dyn Error + 'static)) -> bool {
    io_kinds(error).contains(&io::ErrorKind::ConnectionReset)
}

/// True when the chain holds hyper's "connection closed before message completed".
pub(crate) fn is_incomplete(error: &(dyn Error + 'static)) -> bool {
    let mut current: Option<&(dyn Error + 'static)> = Some(error);
    while let Some(e) = current {
        if e.downcast_ref::<hyper::Error>()
            .is_some_and(hyper::Error::is_incomplete_message)
        {
            return true;
        }
        current = e.source();
    }
    false
}

/// The error and its sources, for assertion messages.
pub(crate) fn chain(error: &(dyn Error + 'static)) -> String {
    let mut parts = Vec::new();
    let mut current: Option<&(dyn Error + 'static)> = Some(error);
    while let Some(e) = current {
        parts.push(format!("{e} [{e:?}]"));
        current = e.source();
    }
    parts.join("\n  caused by: ")
}

/// Polls `check` until it holds; panics after a minute (a deadlock, not a slow machine).
pub(crate) async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..6000 {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("never happened: {what}");
}

/// One value of the server's /metrics.
pub(crate) async fn metric(server: &ServerHandle, series: &str) -> Option<u64> {
    let text = client()
        .get(format!("{}/metrics", server.url()))
        .send()
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// Opens a connection and writes `request` (raw HTTP/1.1) on it, without waiting for an
/// answer.
pub(crate) async fn send_raw(addr: SocketAddr, request: &str) -> TcpStream {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    stream
        .write_all(request.as_bytes())
        .await
        .expect("write the request");
    stream
}

/// Hangs up as a client that gave up does (FIN), then waits until the server has seen it
/// and closed the connection: reading ends, with EOF or a reset. Panics after a minute.
pub(crate) async fn hang_up(mut stream: TcpStream) {
    stream.shutdown().await.expect("send FIN");
    let mut sink = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(60), stream.read_to_end(&mut sink));
    assert!(
        read.await.is_ok(),
        "the server never closed the connection of a client that hung up"
    );
}

/// Runs the binary to its exit, or kills it after ten seconds (a server that started
/// runs until stopped): its exit code (None when it had to be killed) and its stderr.
pub(crate) fn exit_of(command: &mut std::process::Command) -> (Option<i32>, String) {
    let mut child = command
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawns");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let code = loop {
        if let Some(status) = child.try_wait().expect("waits") {
            break status.code();
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    let _ = std::io::Read::read_to_string(&mut child.stderr.take().expect("piped"), &mut stderr);
    (code, stderr)
}
