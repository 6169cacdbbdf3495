//! The fault proxy (`--upstream`): a real service on 127.0.0.1:0 written in the test (an
//! axum app that counts its requests, or a raw socket where the bytes matter), the
//! fault-server in front of it, and real clients; what is forwarded, streamed, faulted,
//! counted and refused.

mod common;

use std::collections::BTreeMap;
use std::future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{any, get};
use common::{client, send_raw, server_with};
use fault_server::{ServerHandle, Upstream};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};

/// What the test's service saw.
#[derive(Default)]
struct Seen {
    requests: AtomicU64,
    last: Mutex<Option<(String, String, HeaderMap)>>,
}

/// The test's service: counts every request, keeps the last one's method, URI and
/// headers, and answers by path.
struct Service {
    url: String,
    seen: Arc<Seen>,
}

impl Service {
    async fn start() -> Service {
        let seen = Arc::new(Seen::default());
        let app = Router::new()
            .route("/slow", get(slow))
            .route("/big/{bytes}", get(big))
            .fallback(any(echo))
            .layer(axum::middleware::from_fn_with_state(
                Arc::clone(&seen),
                count,
            ))
            .with_state(Arc::clone(&seen));
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("an address");
        tokio::spawn(async move { axum::serve(listener, app).await });
        Service {
            url: format!("http://{addr}"),
            seen,
        }
    }

    fn requests(&self) -> u64 {
        self.seen.requests.load(Ordering::SeqCst)
    }

    fn last(&self) -> (String, String, HeaderMap) {
        self.seen
            .last
            .lock()
            .expect("not poisoned")
            .clone()
            .expect("the service saw a request")
    }
}

async fn count(
    State(seen): State<Arc<Seen>>,
    request: Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    seen.requests.fetch_add(1, Ordering::SeqCst);
    *seen.last.lock().expect("not poisoned") = Some((
        request.method().to_string(),
        request.uri().to_string(),
        request.headers().clone(),
    ));
    next.run(request).await
}

/// 201 with a header of its own, the body's length and FNV-1a, and the body back.
async fn echo(request: Request) -> impl IntoResponse {
    let body = read_all(request.into_body()).await;
    (
        StatusCode::CREATED,
        [
            ("x-service", "yes".to_string()),
            ("x-length", body.len().to_string()),
            ("x-fnv", fnv(&body).to_string()),
        ],
        body,
    )
}

async fn slow() -> &'static str {
    tokio::time::sleep(Duration::from_secs(30)).await;
    "late"
}

async fn big(axum::extract::Path(bytes): axum::extract::Path<usize>) -> Vec<u8> {
    pattern(bytes)
}

fn pattern(bytes: usize) -> Vec<u8> {
    (0..bytes).map(|i| (i * 7 % 251) as u8).collect()
}

fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, b| {
        (hash ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

async fn read_all(mut body: Body) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(frame) = future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
        if let Ok(data) = frame.expect("a body frame").into_data() {
            out.extend_from_slice(&data);
        }
    }
    out
}

use hyper::body::Body as _;

/// A fault-server on 127.0.0.1:0 in front of `upstream`, with this script.
async fn proxy(script: &str, upstream: &str) -> ServerHandle {
    proxy_with(script, upstream, Duration::from_secs(30)).await
}

async fn proxy_with(script: &str, upstream: &str, timeout: Duration) -> ServerHandle {
    let upstream = Upstream::parse(upstream, false)
        .expect("a loopback upstream")
        .with_timeout(timeout);
    server_with(script, |config| config.upstream = Some(upstream)).await
}

fn outcomes(server: &ServerHandle) -> BTreeMap<String, u64> {
    server.ledger().by_outcome
}

#[tokio::test]
async fn a_faultless_request_is_forwarded_and_its_answer_comes_back() {
    let service = Service::start().await;
    let server = proxy("faults: []", &format!("{}/api/", service.url)).await;
    let response = client()
        .post(format!("{}/items/7?x=1", server.url()))
        .header("x-request-id", "r1")
        .header("x-custom", "kept")
        .body("hello")
        .send()
        .await
        .expect("an answer");
    assert_eq!(response.status().as_u16(), 201);
    assert_eq!(response.headers()["x-service"], "yes");
    assert_eq!(response.text().await.expect("a body"), "hello");

    let (method, uri, headers) = service.last();
    assert_eq!(
        (method.as_str(), uri.as_str()),
        ("POST", "/api/items/7?x=1")
    );
    let authority = service.url.trim_start_matches("http://");
    assert_eq!(
        headers["host"], authority,
        "the upstream's Host, as nginx sends"
    );
    assert_eq!(headers["x-custom"], "kept");
    assert_eq!(headers["x-request-id"], "r1");
    assert_eq!(headers["x-forwarded-for"], "127.0.0.1");
    // `1.1 fault-server-<16 hex digits>`: this server's own name, unique to it.
    let via = headers["via"].to_str().expect("text");
    let id = via
        .strip_prefix("1.1 fault-server-")
        .expect("this server's entry");
    assert!(
        id.len() == 16 && id.bytes().all(|b| b.is_ascii_hexdigit()),
        "{via}"
    );
    assert_eq!(outcomes(&server).get("upstream_201"), Some(&1));
    assert_eq!(server.ledger().side_effects, 1);
}

#[tokio::test]
async fn the_control_api_stays_the_fault_servers_own() {
    let service = Service::start().await;
    let server = proxy("faults: []", &service.url).await;
    for path in ["/healthz", "/metrics", "/__chaos/ledger"] {
        let response = client()
            .get(format!("{}{path}", server.url()))
            .send()
            .await
            .expect("an answer");
        assert_eq!(response.status().as_u16(), 200, "{path}");
    }
    assert_eq!(service.requests(), 0);
    assert_eq!(server.ledger().requests, 0);
}

/// A service on a raw socket: it answers every request on a connection with `response`,
/// and sends each request head it read to the test.
async fn raw_service(response: &'static str) -> (String, mpsc::UnboundedReceiver<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("an address");
    let (heads, received) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let heads = heads.clone();
            tokio::spawn(async move {
                while let Some(head) = read_head(&mut stream).await {
                    let _ = heads.send(head);
                    if stream.write_all(response.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (format!("http://{addr}"), received)
}

/// A request or response head, up to its blank line, lower-cased.
async fn read_head(stream: &mut TcpStream) -> Option<String> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte).await {
            Ok(1) => head.push(byte[0]),
            _ => return None,
        }
    }
    Some(String::from_utf8_lossy(&head).to_ascii_lowercase())
}

fn header_names(head: &str) -> Vec<&str> {
    head.lines()
        .skip(1)
        .filter_map(|line| line.split_once(':').map(|(name, _)| name))
        .collect()
}

#[tokio::test]
async fn hop_by_hop_headers_are_removed_both_ways() {
    let (url, mut heads) = raw_service(
        "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: keep-alive, X-Hop\r\n\
         Keep-Alive: timeout=5\r\nX-Hop: 1\r\nProxy-Authenticate: Basic\r\nTrailer: x-sum\r\n\
         Upgrade: h2c\r\nX-End: kept\r\n\r\nok",
    )
    .await;
    let server = proxy("faults: []", &url).await;
    let mut stream = send_raw(
        server.addr(),
        "GET /hop HTTP/1.1\r\nHost: proxy.test\r\nConnection: keep-alive, X-Foo\r\n\
         X-Foo: gone\r\nKeep-Alive: timeout=9\r\nTE: trailers\r\nTrailer: x-sum\r\n\
         Proxy-Authorization: Basic eA==\r\nProxy-Connection: keep-alive\r\nX-Bar: kept\r\n\r\n",
    )
    .await;
    let response = read_head(&mut stream).await.expect("a response");
    assert!(response.starts_with("http/1.1 200"), "{response}");
    let names = header_names(&response);
    for gone in [
        "x-hop",
        "keep-alive",
        "proxy-authenticate",
        "trailer",
        "upgrade",
    ] {
        assert!(!names.contains(&gone), "{gone} came back:\n{response}");
    }
    assert!(names.contains(&"x-end"), "{response}");
    assert!(
        !response.contains("connection: keep-alive, x-hop"),
        "{response}"
    );

    let request = heads.recv().await.expect("the service saw the request");
    let names = header_names(&request);
    for gone in [
        "x-foo",
        "keep-alive",
        "te",
        "trailer",
        "proxy-authorization",
        "proxy-connection",
    ] {
        assert!(!names.contains(&gone), "{gone} was forwarded:\n{request}");
    }
    assert!(names.contains(&"x-bar"), "{request}");
    assert!(request.contains("host: 127.0.0.1:"), "{request}");
    assert!(
        !request.contains("connection: keep-alive, x-foo"),
        "{request}"
    );
}

#[tokio::test]
async fn bodies_of_several_mib_go_through_byte_for_byte() {
    const BYTES: usize = 6 << 20; // Six times the server's own body limit.
    let service = Service::start().await;
    let server = proxy("faults: []", &service.url).await;
    let sent = pattern(BYTES);
    let response = client()
        .put(format!("{}/upload", server.url()))
        .body(sent.clone())
        .send()
        .await
        .expect("an answer");
    assert_eq!(response.status().as_u16(), 201);
    assert_eq!(response.headers()["x-length"], BYTES.to_string().as_str());
    assert_eq!(response.headers()["x-fnv"], fnv(&sent).to_string().as_str());
    let echoed = response.bytes().await.expect("the body back");
    assert!(echoed[..] == sent[..], "the echoed body differs");

    let response = client()
        .get(format!("{}/big/{BYTES}", server.url()))
        .send()
        .await
        .expect("an answer");
    assert_eq!(response.status().as_u16(), 200);
    let body = response.bytes().await.expect("a body");
    assert_eq!(body.len(), BYTES);
    assert!(body[..] == pattern(BYTES)[..], "the big body differs");
    assert_eq!(outcomes(&server).get("upstream_200"), Some(&1));
}

/// The first half of the request body reaches the service before the client sends the
/// second half: the proxy did not wait for the whole body.
#[tokio::test]
async fn the_request_body_streams_to_the_upstream() {
    let (first, got_first) = mpsc::unbounded_channel::<usize>();
    let app = Router::new().fallback(any(move |request: Request| {
        let first = first.clone();
        async move {
            let mut body = request.into_body();
            let mut total = 0;
            while let Some(frame) = future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
                if let Ok(data) = frame.expect("a frame").into_data() {
                    total += data.len();
                    let _ = first.send(total);
                }
            }
            total.to_string()
        }
    }));
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("an address");
    tokio::spawn(async move { axum::serve(listener, app).await });
    let server = proxy("faults: []", &format!("http://{addr}")).await;

    let half = vec![b'a'; 1 << 20];
    let mut stream = TcpStream::connect(server.addr()).await.expect("connect");
    let head = format!(
        "POST /stream HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n",
        2 * half.len()
    );
    stream.write_all(head.as_bytes()).await.expect("write");
    stream.write_all(&half).await.expect("write the first half");
    let mut got_first = got_first;
    let seen = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let total = got_first.recv().await.expect("the service reads");
            if total >= half.len() {
                return total;
            }
        }
    })
    .await
    .expect("the first half reached the service before the second was sent");
    assert!(seen <= half.len(), "{seen}");
    stream
        .write_all(&half)
        .await
        .expect("write the second half");
    let answer = read_head(&mut stream).await.expect("an answer");
    assert!(answer.starts_with("http/1.1 200"), "{answer}");
}

/// The client reads the first half of the response body while the service holds the
/// second half back: the proxy did not wait for the whole body.
#[tokio::test]
async fn the_response_body_streams_back() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("an address");
    let (release, released) = oneshot::channel::<()>();
    let half = 1 << 20;
    tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.expect("accept");
        read_head(&mut stream).await.expect("a request");
        let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", 2 * half);
        stream.write_all(head.as_bytes()).await.expect("write");
        stream.write_all(&vec![b'x'; half]).await.expect("write");
        let _ = released.await;
        stream.write_all(&vec![b'y'; half]).await.expect("write");
        // Keep the connection until the proxy is done with it.
        let mut rest = Vec::new();
        let _ = stream.read_to_end(&mut rest).await;
    });
    let server = proxy("faults: []", &format!("http://{addr}")).await;
    let mut response = client()
        .get(format!("{}/stream", server.url()))
        .send()
        .await
        .expect("an answer");
    let mut got = 0;
    while got < half {
        let chunk = tokio::time::timeout(Duration::from_secs(10), response.chunk())
            .await
            .expect("the first half arrives before the second is sent")
            .expect("a chunk")
            .expect("more body");
        assert!(chunk.iter().all(|b| *b == b'x'));
        got += chunk.len();
    }
    release.send(()).expect("the service waits");
    let mut rest = 0;
    while let Some(chunk) = response.chunk().await.expect("a chunk") {
        rest += chunk.len();
    }
    assert_eq!(got + rest, 2 * half);
}

#[tokio::test]
async fn injected_faults_never_reach_the_upstream() {
    let service = Service::start().await;
    let server = proxy(
        r#"
faults:
  - name: outage
    match: { path: /fail }
    respond: { status: 503 }
  - name: cut
    match: { path: /reset }
    respond: { fault: reset }
"#,
        &service.url,
    )
    .await;
    let failed = client()
        .get(format!("{}/fail", server.url()))
        .send()
        .await
        .expect("an injected status is an answer");
    assert_eq!(failed.status().as_u16(), 503);
    assert_eq!(failed.headers()["x-chaos-fault"], "outage");
    let cut = client()
        .post(format!("{}/reset", server.url()))
        .body(vec![b'x'; 64 * 1024])
        .send()
        .await;
    assert!(cut.is_err(), "a reset is no answer");
    assert_eq!(
        service.requests(),
        0,
        "a faulted request reached the service"
    );
    let served = client()
        .get(format!("{}/ok", server.url()))
        .send()
        .await
        .expect("an answer");
    assert_eq!(served.status().as_u16(), 201);
    assert_eq!(service.requests(), 1);
    let ledger = server.ledger();
    assert_eq!(ledger.by_outcome.get("status_503"), Some(&1));
    assert_eq!(ledger.by_outcome.get("reset"), Some(&1));
    assert_eq!(ledger.by_outcome.get("upstream_201"), Some(&1));
    assert_eq!(ledger.by_fault.values().sum::<u64>(), 2);
}

#[tokio::test]
async fn a_processed_fault_reaches_the_upstream_and_loses_its_answer() {
    let service = Service::start().await;
    let server = proxy(
        "faults: [ { match: { method: POST }, respond: { status: 502, processed: true } } ]",
        &service.url,
    )
    .await;
    let response = client()
        .post(format!("{}/pay", server.url()))
        .header("x-request-id", "p1")
        .body("charge")
        .send()
        .await
        .expect("an answer");
    assert_eq!(response.status().as_u16(), 502);
    assert_eq!(response.headers()["x-chaos-fault"], "faults[0]");
    assert_eq!(service.requests(), 1, "the work was done upstream");
    let ledger = server.ledger();
    assert_eq!(ledger.side_effects, 1);
    assert_eq!(ledger.by_outcome.get("status_502"), Some(&1));
}

#[tokio::test]
async fn an_unreachable_upstream_is_a_502_counted_apart_from_injected_faults() {
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().expect("an address")
    };
    let server = proxy("faults: []", &format!("http://{closed}")).await;
    let response = client()
        .get(format!("{}/x", server.url()))
        .header("x-request-id", "u1")
        .send()
        .await
        .expect("an answer");
    assert_eq!(response.status().as_u16(), 502);
    let body = response.text().await.expect("a body");
    assert!(body.contains(&closed.to_string()), "{body}");
    let ledger = server.ledger();
    assert_eq!(
        ledger.by_outcome,
        BTreeMap::from([("upstream_unreachable".to_string(), 1)])
    );
    assert!(ledger.by_fault.is_empty());
    assert_eq!(ledger.attempts, 1);
}

#[tokio::test]
async fn a_slow_upstream_past_the_timeout_is_a_504() {
    let service = Service::start().await;
    let server = proxy_with("faults: []", &service.url, Duration::from_millis(300)).await;
    let response = client()
        .get(format!("{}/slow", server.url()))
        .send()
        .await
        .expect("an answer");
    assert_eq!(response.status().as_u16(), 504);
    let body = response.text().await.expect("a body");
    assert!(body.contains("did not answer within 300ms"), "{body}");
    assert_eq!(
        outcomes(&server),
        BTreeMap::from([("upstream_timeout".to_string(), 1)])
    );
}

#[tokio::test]
async fn the_ledger_counts_in_front_of_the_upstream() {
    let service = Service::start().await;
    let server = proxy("faults: []", &service.url).await;
    let send = |method: reqwest::Method, id: &'static str| {
        client()
            .request(method, format!("{}/orders", server.url()))
            .header("x-request-id", id)
            .header("idempotency-key", "k1")
            .body("order")
            .send()
    };
    let first = send(reqwest::Method::POST, "o1").await.expect("an answer");
    assert!(first.headers().get("x-chaos-duplicate").is_none());
    let again = send(reqwest::Method::POST, "o1").await.expect("an answer");
    assert_eq!(again.headers()["x-chaos-duplicate"], "1");
    assert!(again.headers().get("idempotent-replayed").is_none());
    send(reqwest::Method::GET, "o2").await.expect("an answer");
    assert_eq!(
        service.requests(),
        3,
        "Idempotency-Key is the service's business"
    );
    assert_eq!(service.last().2["idempotency-key"], "k1");
    let ledger = server.ledger();
    assert_eq!((ledger.attempts, ledger.logical), (3, 2));
    assert_eq!(ledger.side_effects, 2);
    assert_eq!(ledger.duplicate_side_effects, 1);
    assert_eq!(ledger.duplicate_examples, ["o1"]);
    assert_eq!(ledger.idempotent_replays, 0);
    assert_eq!(ledger.by_outcome.get("upstream_201"), Some(&3));
}

#[tokio::test]
async fn the_capacity_model_stands_in_front_of_the_upstream() {
    let service = Service::start().await;
    let server = proxy_with(
        "server: { capacity: 1, queue: 0 }",
        &service.url,
        Duration::from_secs(1),
    )
    .await;
    let url = server.url();
    let slow = tokio::spawn(async move { client().get(format!("{url}/slow")).send().await });
    common::eventually("the slow request holds the slot", || async {
        service.requests() == 1
    })
    .await;
    let rejected = client()
        .get(format!("{}/x", server.url()))
        .send()
        .await
        .expect("an answer");
    assert_eq!(rejected.status().as_u16(), 503);
    let slow = slow.await.expect("joins").expect("an answer");
    assert_eq!(slow.status().as_u16(), 504);
    assert_eq!(service.requests(), 1);
    let ledger = server.ledger();
    assert_eq!(ledger.by_outcome.get("rejected"), Some(&1));
    assert_eq!(ledger.by_outcome.get("upstream_timeout"), Some(&1));
}

/// The upstream's own 5xx are its, not the script's: `upstream_503`, never `status_503`,
/// in the ledger and in `/metrics`.
#[tokio::test]
async fn the_upstreams_own_errors_are_labelled_as_its_own() {
    let (url, _heads) =
        raw_service("HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\n\r\nbusy").await;
    let server = proxy("faults: []", &url).await;
    let response = client().get(server.url()).send().await.expect("an answer");
    assert_eq!(response.status().as_u16(), 503);
    assert_eq!(response.text().await.expect("a body"), "busy");
    assert_eq!(
        outcomes(&server),
        BTreeMap::from([("upstream_503".to_string(), 1)])
    );
    assert_eq!(
        common::metric(
            &server,
            "fault_server_requests_total{outcome=\"upstream\",code=\"503\"}"
        )
        .await,
        Some(1)
    );
}

fn fault_server() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_fault-server"));
    command
        .stdin(Stdio::null())
        .env_remove("FAULT_SERVER_TOKEN");
    command
}

#[test]
fn the_binary_refuses_an_upstream_off_loopback_or_over_https() {
    for (url, says) in [
        ("http://192.0.2.1:8080", "--allow-remote"),
        ("http://example.com", "not on loopback"),
        ("https://127.0.0.1:8443", "http://"),
        ("127.0.0.1:8080", "http://"),
    ] {
        let out = fault_server()
            .args(["--listen", "127.0.0.1:0", "--upstream", url])
            .output()
            .expect("run fault-server");
        assert_eq!(out.status.code(), Some(2), "{url}");
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(said.contains("--upstream"), "{said}");
        assert!(said.contains(says), "{url}: {said}");
    }
    let out = fault_server()
        .args(["--allow-remote"])
        .output()
        .expect("run fault-server");
    assert_eq!(
        out.status.code(),
        Some(2),
        "--allow-remote needs --upstream"
    );
}

#[test]
fn the_binary_forwards_to_a_remote_upstream_only_when_allowed() {
    use std::io::{BufRead, BufReader};
    let mut child = fault_server()
        .args([
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            "http://192.0.2.1:8080/base",
            "--allow-remote",
            "--upstream-timeout",
            "2s",
        ])
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn fault-server");
    let stderr = child.stderr.take().expect("stderr");
    let line = BufReader::new(stderr)
        .lines()
        .map(|line| line.expect("text"))
        .find(|line| line.contains("listening on"))
        .expect("the line that says where it listens");
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        line.contains("forwarding to http://192.0.2.1:8080/base (timeout 2s)"),
        "{line}"
    );
    let _: SocketAddr = line
        .split("listening on http://")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|addr| addr.parse().ok())
        .expect("the address it listens on");
}

/// A service on a raw socket that counts its connections and answers every request on
/// one with `response`; `close_after`: it closes each connection after one answer,
/// without saying so (as a server whose keep-alive timeout just ran out does).
async fn counting_service(
    response: &'static str,
    close_after: bool,
) -> (String, Arc<AtomicU64>, mpsc::UnboundedReceiver<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("an address");
    let connections = Arc::new(AtomicU64::new(0));
    let counted = Arc::clone(&connections);
    let (heads, received) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            let heads = heads.clone();
            tokio::spawn(async move {
                while let Some(head) = read_head(&mut stream).await {
                    let _ = heads.send(head);
                    if stream.write_all(response.as_bytes()).await.is_err() || close_after {
                        return;
                    }
                }
            });
        }
    });
    (format!("http://{addr}"), connections, received)
}

#[tokio::test]
async fn a_chunked_answer_comes_back_whole_and_its_connection_serves_again() {
    let (url, connections, _heads) = counting_service(
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;x=1\r\nhello\r\n6\r\n world\r\n0\r\nx-sum: 9\r\n\r\n",
        false,
    )
    .await;
    let server = proxy("faults: []", &url).await;
    for _ in 0..3 {
        let response = client().get(server.url()).send().await.expect("an answer");
        assert_eq!(response.status().as_u16(), 200);
        assert!(
            response
                .headers()
                .get("transfer-encoding")
                .is_none_or(|v| v == "chunked")
        );
        assert_eq!(response.text().await.expect("a body"), "hello world");
    }
    assert_eq!(
        connections.load(Ordering::SeqCst),
        1,
        "one pooled connection"
    );
    assert_eq!(outcomes(&server).get("upstream_200"), Some(&3));
}

#[tokio::test]
async fn a_connection_the_upstream_closed_while_idle_is_replaced() {
    let (url, connections, _heads) =
        counting_service("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", true).await;
    let server = proxy("faults: []", &url).await;
    for _ in 0..3 {
        let response = client().get(server.url()).send().await.expect("an answer");
        assert_eq!(response.status().as_u16(), 200);
        assert_eq!(response.text().await.expect("a body"), "ok");
        // Time for the close to arrive while the connection is idle.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(connections.load(Ordering::SeqCst), 3);
    assert_eq!(outcomes(&server).get("upstream_200"), Some(&3));
}

#[tokio::test]
async fn an_answer_that_is_not_http_is_a_502_counted_as_upstream_failed() {
    let (url, _connections, _heads) = counting_service("SMTP ready\r\n\r\n", true).await;
    let server = proxy("faults: []", &url).await;
    let response = client().get(server.url()).send().await.expect("an answer");
    assert_eq!(response.status().as_u16(), 502);
    assert_eq!(
        outcomes(&server),
        BTreeMap::from([("upstream_failed".to_string(), 1)])
    );
}

#[tokio::test]
async fn a_chunked_upload_reaches_the_service_whole() {
    let service = Service::start().await;
    let server = proxy("faults: []", &service.url).await;
    let mut stream = TcpStream::connect(server.addr()).await.expect("connect");
    stream
        .write_all(
            b"POST /up HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n4\r\ndefg\r\n0\r\n\r\n",
        )
        .await
        .expect("write");
    let head = read_head(&mut stream).await.expect("an answer");
    assert!(head.starts_with("http/1.1 201"), "{head}");
    assert!(head.contains("x-length: 7\r\n"), "{head}");
    assert!(
        head.contains(&format!("x-fnv: {}\r\n", fnv(b"abcdefg"))),
        "{head}"
    );
    let (_, _, headers) = service.last();
    assert_eq!(headers["transfer-encoding"], "chunked");
}

#[tokio::test]
async fn a_head_request_gets_the_head_alone_and_its_connection_serves_again() {
    let (url, connections, _heads) =
        counting_service("HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\n", false).await;
    let server = proxy("faults: []", &url).await;
    for _ in 0..2 {
        let response = client().head(server.url()).send().await.expect("an answer");
        assert_eq!(response.status().as_u16(), 200);
        assert_eq!(response.headers()["content-length"], "12");
    }
    assert_eq!(connections.load(Ordering::SeqCst), 1);
}

/// A chunked answer that says a Content-Length too (RFC 9112 forbids it, some servers
/// send it): the chunks frame the body, and the length does not reach the client.
#[tokio::test]
async fn a_content_length_beside_chunked_is_dropped() {
    let (url, _connections, _heads) = counting_service(
        "HTTP/1.1 200 OK\r\nContent-Length: 99\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
        false,
    )
    .await;
    let server = proxy("faults: []", &url).await;
    let response = client().get(server.url()).send().await.expect("an answer");
    assert!(
        response
            .headers()
            .get("content-length")
            .is_none_or(|v| v == "2")
    );
    assert_eq!(response.text().await.expect("a body"), "ok");
}

/// Your client in front of your service: the proxy groups a client's attempts without its
/// help, the body it read to group them still reaches the service whole, and a fault it
/// injected never does.
#[tokio::test]
async fn a_judging_proxy_groups_a_clients_retries_in_front_of_the_service() {
    let service = Service::start().await;
    let upstream = Upstream::parse(&service.url, false).expect("a loopback upstream");
    let server = server_with(
        "faults: [ { name: first, attempts: [1], respond: [ { status: 503 } ] } ]",
        |config| {
            config.upstream = Some(upstream);
            config.judging = Some(fault_server::Judging::default());
        },
    )
    .await;
    let body = pattern(512 << 10);
    let send = || {
        client()
            .put(format!("{}/files/a", server.url()))
            .body(body.clone())
            .send()
    };
    assert_eq!(send().await.expect("an answer").status(), 503);
    let second = send().await.expect("an answer");
    assert_eq!(second.status(), 201, "the retry reaches the service");
    assert_eq!(second.headers()["x-fnv"], fnv(&body).to_string());
    assert_eq!(service.requests(), 1, "the injected 503 never reached it");
    let ledger = server.ledger();
    assert_eq!((ledger.attempts, ledger.logical), (2, 1));
    let judged = ledger.judged.expect("the proxy judges");
    assert_eq!(judged.grouped_by.get("guess"), Some(&1));
    assert_eq!(judged.succeeded, 1);
    assert_eq!(ledger.by_outcome.get("upstream_201"), Some(&1));
}
