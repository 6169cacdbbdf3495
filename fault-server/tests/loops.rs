//! What the fault proxy (`--upstream`) refuses so that one request stays one request: an
//! upstream that is its own address or names no port a socket can have (at start, through
//! the binary), a request that comes back round a loop of proxies (a 508, at the first hop
//! that sees its own `Via` entry), and the `x-chaos-` headers of an upstream's answers,
//! which speak for this hop and never pass it.

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use axum::routing::any;
use common::{client_with_timeout, exit_of};
use fault_server::{ServerConfig, ServerHandle, StartError, Upstream, start};
use tokio::net::TcpListener;

fn fault_server() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_fault-server"));
    command
        .stdin(Stdio::null())
        .env_remove("FAULT_SERVER_TOKEN");
    command
}

/// Runs the binary with `args` to its exit, or kills it after ten seconds: its exit
/// code (`None` when it had to be killed) and its stderr.
fn run_briefly(args: &[&str]) -> (Option<i32>, String) {
    exit_of(fault_server().args(args))
}

/// A port nothing listens on just now (bound, then let go).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

#[test]
fn the_binary_refuses_an_upstream_that_is_its_own_address() {
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    for upstream in [
        format!("http://127.0.0.1:{port}"),
        format!("http://localhost:{port}/api"),
    ] {
        let (code, said) = run_briefly(&["--listen", &listen, "--upstream", &upstream]);
        assert_eq!(code, Some(2), "{upstream}: {said}");
        assert!(said.contains("this server's own address"), "{said}");
        assert!(said.contains(&format!("127.0.0.1:{port}")), "{said}");
    }
    // Listening on every address reaches the loopback one too.
    let (code, said) = run_briefly(&[
        "--listen",
        &format!("0.0.0.0:{port}"),
        "--allow-open-control",
        "--upstream",
        &format!("http://127.0.0.1:{port}"),
    ]);
    assert_eq!(code, Some(2), "{said}");
}

#[test]
fn the_binary_refuses_an_upstream_port_no_socket_has() {
    for (url, port) in [
        ("http://127.0.0.1:0", "0"),
        ("http://127.0.0.1:99999", "99999"),
        ("http://localhost:65536/api", "65536"),
    ] {
        let (code, said) = run_briefly(&["--listen", "127.0.0.1:0", "--upstream", url]);
        assert_eq!(code, Some(2), "{url}: {said}");
        assert!(said.contains("--upstream"), "{said}");
        assert!(said.contains(&format!("port `{port}`")), "{said}");
        assert!(said.contains("1 to 65535"), "{said}");
    }
}

#[tokio::test]
async fn the_library_refuses_to_forward_to_its_own_address_too() {
    let port = free_port();
    let config = ServerConfig {
        listen: SocketAddr::from(([127, 0, 0, 1], port)),
        upstream: Some(Upstream::parse(&format!("http://127.0.0.1:{port}"), false).expect("a URL")),
        ..ServerConfig::default()
    };
    let error = start(config).await.expect_err("refused");
    assert!(
        matches!(error, StartError::UpstreamIsSelf { addr, .. } if addr.port() == port),
        "{error}"
    );
}

/// A proxy on `port` forwarding to `upstream`.
async fn proxy_on(port: u16, upstream: &str) -> Result<ServerHandle, StartError> {
    start(ServerConfig {
        listen: SocketAddr::from(([127, 0, 0, 1], port)),
        upstream: Some(Upstream::parse(upstream, false).expect("a URL")),
        ..ServerConfig::default()
    })
    .await
}

/// Two proxies, each the other's upstream: B is started forwarding to a port nothing
/// listens on yet, then A on that port, forwarding to B.
async fn two_proxies_in_a_loop() -> (ServerHandle, ServerHandle) {
    for _ in 0..5 {
        let a_port = free_port();
        let b = proxy_on(0, &format!("http://127.0.0.1:{a_port}"))
            .await
            .expect("B starts");
        if let Ok(a) = proxy_on(a_port, &b.url()).await {
            return (a, b);
        }
    }
    panic!("no free port for A in five tries");
}

fn outcomes(server: &ServerHandle) -> BTreeMap<String, u64> {
    server.ledger().by_outcome
}

#[tokio::test]
async fn two_proxies_pointed_at_each_other_answer_one_request_with_one_508() {
    let (a, b) = two_proxies_in_a_loop().await;
    // Before the fix the request went round for ever (6,265 hops in 4 s): the client's
    // timeout ends this test then, rather than the machine's memory.
    let response = client_with_timeout(Duration::from_secs(10))
        .get(format!("{}/items/1", a.url()))
        .header("x-request-id", "looped-1")
        .send()
        .await
        .expect("an answer");
    assert_eq!(response.status(), StatusCode::LOOP_DETECTED);
    let body = response.text().await.expect("a body");
    assert!(body.contains("loop detected"), "{body}");
    // The hops, counted by the ledgers: client → A → B → A (it sees its own Via: 508).
    let hops = a.ledger().requests + b.ledger().requests;
    assert_eq!(hops, 3, "A: {:?}, B: {:?}", outcomes(&a), outcomes(&b));
    assert_eq!(
        outcomes(&a),
        BTreeMap::from([
            ("loop_detected".to_string(), 1),
            ("upstream_508".to_string(), 1),
        ])
    );
    assert_eq!(
        outcomes(&b),
        BTreeMap::from([("upstream_508".to_string(), 1)])
    );
    // The second request is no different: nothing was learnt, nothing leaks.
    let again = client_with_timeout(Duration::from_secs(10))
        .post(format!("{}/pay", b.url()))
        .send()
        .await
        .expect("an answer");
    assert_eq!(again.status(), StatusCode::LOOP_DETECTED);
    assert_eq!(a.ledger().requests + b.ledger().requests, 6);
}

#[tokio::test]
async fn the_upstreams_contract_headers_never_reach_the_client() {
    // A service that says what only a hop of the chain may say: "don't retry", a fault.
    let app = Router::new().fallback(any(|| async {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            [
                ("x-chaos-no-retry", "1"),
                ("X-Chaos-Fault", "forged"),
                ("x-chaos-gave-up", "budget_exhausted"),
                ("retry-after", "1"),
                ("x-service", "kept"),
            ],
            "busy",
        )
    }));
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("an address");
    tokio::spawn(async move { axum::serve(listener, app).await });
    let server = proxy_on(0, &format!("http://{addr}"))
        .await
        .expect("starts");
    let response = client_with_timeout(Duration::from_secs(10))
        .get(format!("{}/x", server.url()))
        .send()
        .await
        .expect("an answer");
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    let headers = response.headers();
    for gone in ["x-chaos-no-retry", "x-chaos-fault", "x-chaos-gave-up"] {
        assert!(headers.get(gone).is_none(), "{gone} reached the client");
    }
    assert_eq!(headers["retry-after"], "1");
    assert_eq!(headers["x-service"], "kept");
    assert_eq!(response.text().await.expect("a body"), "busy");
}
