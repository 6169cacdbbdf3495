//! The proxy (`--upstream`) counted and kept honest: what the upstream executed is what
//! the ledger counts whatever the callers did (left, or lost their connection to a
//! fault); `X-Forwarded-For` on every forward; request paths normalised before the
//! script and the upstream's base path see them; `CONNECT` and an upstream's `101`
//! refused. Real sockets on 127.0.0.1:0 throughout.

mod common;
mod proxy_support;

use std::time::Duration;

use axum::body::Bytes;
use common::{eventually, hang_up, send_raw};
use http_body_util::{BodyExt, Full};
use hyper::http::Request;
use hyper_util::rt::{TokioExecutor, TokioIo};
use proxy_support::{Counting, proxy, read_to_close, settled};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

/// One raw HTTP/1.1 request on a connection of its own, closed after the answer: the
/// answer's status (None when the connection closed without one) and its bytes.
async fn raw(server: &fault_server::ServerHandle, request: &str) -> (Option<u16>, String) {
    let mut stream = send_raw(server.addr(), request).await;
    let answer = String::from_utf8_lossy(&read_to_close(&mut stream).await).into_owned();
    let status = answer
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok());
    (status, answer)
}

fn get(path: &str, extra: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: proxy\r\n{extra}Connection: close\r\n\r\n")
}

#[tokio::test]
async fn every_forward_the_upstream_answered_is_counted_when_http1_callers_left() {
    let service = Counting::start(true).await;
    let server = proxy(
        "faults: [ { match: { method: PATCH }, respond: { status: 500, processed: true } } ]",
        &service.url,
    )
    .await;
    let mut callers = Vec::new();
    for i in 0..6 {
        let request = match i % 3 {
            0 => format!("GET /get/{i} HTTP/1.1\r\nHost: p\r\nx-request-id: g{i}\r\n\r\n"),
            1 => format!(
                "POST /post/{i} HTTP/1.1\r\nHost: p\r\nx-request-id: p{i}\r\nContent-Length: 3\r\n\r\nabc"
            ),
            _ => format!(
                "PATCH /patch/{i} HTTP/1.1\r\nHost: p\r\nx-request-id: x{i}\r\nContent-Length: 1\r\n\r\nz"
            ),
        };
        callers.push(send_raw(server.addr(), &request).await);
    }
    // Every request is at the service, its answer held; then every caller leaves, and
    // the proxy has closed each connection (its request's wait dropped) before the
    // service answers.
    eventually("the service has every request", || async {
        service.served() == 6
    })
    .await;
    for caller in callers {
        hang_up(caller).await;
    }
    service.open();
    let outcomes = settled(&server).await;
    let ledger = server.ledger();
    assert_eq!(
        ledger.upstream_answered,
        service.served(),
        "every request the service served, counted: {outcomes:?}"
    );
    assert_eq!(ledger.upstream_caller_gone, 6, "{outcomes:?}");
    assert_eq!(outcomes.get("upstream_200"), Some(&4), "{outcomes:?}");
    assert_eq!(
        outcomes.get("status_500"),
        Some(&2),
        "the processed faults: {outcomes:?}"
    );
    assert_eq!(outcomes.get("abandoned"), None, "{outcomes:?}");
    assert_eq!(
        ledger.side_effects, 4,
        "the POSTs and the processed PATCHes"
    );
}

#[tokio::test]
async fn every_forward_is_counted_when_a_reset_ends_the_http2_connection() {
    let service = Counting::start(true).await;
    let server = proxy(
        "faults:\n  - { match: { path: /boom }, respond: { fault: reset } }\n  - { match: { path: /done }, respond: { fault: reset, processed: true } }\n",
        &service.url,
    )
    .await;
    let stream = TcpStream::connect(server.addr()).await.expect("connects");
    let (send, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .expect("an HTTP/2 handshake");
    let connection = tokio::spawn(connection);
    let mut streams = Vec::new();
    for (i, (method, path)) in [
        ("GET", "/a"),
        ("POST", "/b"),
        ("GET", "/c"),
        ("POST", "/done"),
    ]
    .into_iter()
    .enumerate()
    {
        let request = Request::builder()
            .method(method)
            .uri(format!("{}{path}", server.url()))
            .header("x-request-id", format!("h2-{i}"))
            .body(Full::new(Bytes::from_static(b"body")))
            .expect("a request");
        let mut send = send.clone();
        streams.push(tokio::spawn(
            async move { send.send_request(request).await },
        ));
    }
    eventually("the service has every stream's request", || async {
        service.served() == 4
    })
    .await;
    // The reset ends the connection, and with it every stream still waiting on it.
    let boom = Request::get(format!("{}/boom", server.url()))
        .body(Full::new(Bytes::new()))
        .expect("a request");
    let mut last = send.clone();
    assert!(
        last.send_request(boom).await.is_err(),
        "the reset's stream fails"
    );
    for stream in streams {
        assert!(
            stream.await.expect("joins").is_err(),
            "every stream died with it"
        );
    }
    let _ = connection.await;
    service.open();
    let outcomes = settled(&server).await;
    let ledger = server.ledger();
    assert_eq!(ledger.upstream_answered, service.served(), "{outcomes:?}");
    assert_eq!(ledger.upstream_caller_gone, 4, "{outcomes:?}");
    assert_eq!(outcomes.get("upstream_200"), Some(&3), "{outcomes:?}");
    assert_eq!(outcomes.get("reset"), Some(&2), "{outcomes:?}");
    assert_eq!(outcomes.get("abandoned"), None, "{outcomes:?}");
}

#[tokio::test]
async fn x_forwarded_for_gets_the_peer_appended_for_every_method_and_protocol() {
    let service = Counting::start(false).await;
    let server = proxy("faults: []", &service.url).await;
    for method in ["GET", "POST"] {
        let request = format!(
            "{method} /h1/{method} HTTP/1.1\r\nHost: p\r\nX-Forwarded-For: 10.0.0.1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        );
        assert_eq!(raw(&server, &request).await.0, Some(200), "{method}");
    }
    let stream = TcpStream::connect(server.addr()).await.expect("connects");
    let (mut send, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .expect("an HTTP/2 handshake");
    tokio::spawn(connection);
    for method in ["GET", "POST"] {
        let request = Request::builder()
            .method(method)
            .uri(format!("{}/h2/{method}", server.url()))
            .header("x-forwarded-for", "10.0.0.1")
            .body(Full::new(Bytes::new()))
            .expect("a request");
        let response = send.send_request(request).await.expect("an answer");
        assert_eq!(response.status(), 200, "{method}");
        response.into_body().collect().await.expect("the body");
    }
    let seen = service.seen();
    assert_eq!(seen.len(), 4);
    for (path, xff) in seen {
        assert_eq!(
            xff.as_deref(),
            Some("10.0.0.1, 127.0.0.1"),
            "{path}: the peer appended to the client's own list"
        );
    }
}

#[tokio::test]
async fn a_path_that_climbs_out_of_the_base_never_reaches_the_upstream() {
    let service = Counting::start(false).await;
    let server = proxy("faults: []", &format!("{}/base/", service.url)).await;
    for path in [
        "/../secret",
        "/x/../../secret",
        "/%2e%2e/secret",
        "/%2E%2e/secret",
        "/.%2E/secret",
        "/x/..%2f..%2fsecret",
        "/x/..%2F..%2Fsecret",
    ] {
        let (status, answer) = raw(&server, &get(path, "")).await;
        assert_eq!(status, Some(400), "{path}: {answer}");
        assert!(
            answer.contains("climbs above the root") || answer.contains("encoded slash"),
            "{path}: the problem says why: {answer}"
        );
    }
    let (status, answer) = raw(&server, &get("/a/./b//c/../d?q=1", "")).await;
    assert_eq!(status, Some(200), "{answer}");
    assert!(answer.ends_with("served /base/a/b/d 0"), "{answer}");
    let paths: Vec<String> = service.seen().into_iter().map(|(path, _)| path).collect();
    assert_eq!(
        paths,
        ["/base/a/b/d"],
        "nothing outside the base, nothing refused"
    );
    assert_eq!(settled(&server).await.get("bad_request"), Some(&7));
}

#[tokio::test]
async fn dot_segments_doubled_slashes_and_escapes_meet_a_path_matched_fault() {
    let service = Counting::start(false).await;
    let server = proxy(
        "faults: [ { match: { path: /admin }, respond: { status: 403 } } ]",
        &service.url,
    )
    .await;
    for path in [
        "/admin",
        "//admin",
        "/./admin",
        "/x/../admin",
        "/%61dmin",
        "/%2e/admin",
    ] {
        let (status, answer) = raw(&server, &get(path, "")).await;
        assert_eq!(status, Some(403), "{path} meets the fault: {answer}");
    }
    assert_eq!(service.served(), 0, "none reached the upstream");
    assert_eq!(raw(&server, &get("/other", "")).await.0, Some(200));
}

/// Without a base path the service gets the path as the client sent it (an S3 key
/// `a//b` is not `a/b`); an encoded slash is data, kept; and a control path written
/// another way is refused here, never forwarded to an upstream that may be a
/// fault-server itself.
#[tokio::test]
async fn without_a_base_the_path_goes_as_sent_and_control_paths_are_never_forwarded() {
    let service = Counting::start(false).await;
    let server = proxy(
        "faults: [ { match: { path: /admin }, respond: { status: 403 } } ]",
        &service.url,
    )
    .await;
    for path in ["/keys/a//b", "/api/v4/projects/group%2Fproj", "/q/%2F/x"] {
        let (status, answer) = raw(&server, &get(path, "")).await;
        assert_eq!(status, Some(200), "{path}: {answer}");
    }
    let paths: Vec<String> = service.seen().into_iter().map(|(path, _)| path).collect();
    assert_eq!(
        paths,
        ["/keys/a//b", "/api/v4/projects/group%2Fproj", "/q/%2F/x"],
        "each as it was sent"
    );
    for path in [
        "//__chaos/script",
        "/%5F_chaos/ledger",
        "/./__chaos/ledger",
        "//metrics",
    ] {
        let (status, answer) = raw(&server, &get(path, "")).await;
        assert_eq!(status, Some(404), "{path}: {answer}");
    }
    assert_eq!(service.served(), 3, "no control path was forwarded");
}

#[tokio::test]
async fn connect_is_refused_with_a_problem_and_never_forwarded() {
    let service = Counting::start(false).await;
    let server = proxy("faults: []", &service.url).await;
    let (status, answer) = raw(
        &server,
        "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(status, Some(501), "{answer}");
    assert!(answer.contains("CONNECT is not supported"), "{answer}");
    assert_eq!(service.served(), 0);
    assert_eq!(settled(&server).await.get("bad_request"), Some(&1));
}

#[tokio::test]
async fn an_upstreams_switch_of_protocols_is_a_502_counted_as_its_failure() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("an address"));
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let _ = tokio::time::timeout(Duration::from_secs(1), async {
                    let mut head = [0u8; 1024];
                    let _ = tokio::io::AsyncReadExt::read(&mut stream, &mut head).await;
                })
                .await;
                let _ = stream
                    .write_all(b"HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\nnot http any more")
                    .await;
                let _ = read_to_close(&mut stream).await;
            });
        }
    });
    let server = proxy("faults: []", &url).await;
    let (status, answer) = raw(
        &server,
        &get("/ws", "Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\n"),
    )
    .await;
    assert_eq!(status, Some(502), "{answer}");
    assert!(answer.contains("101 Switching Protocols"), "{answer}");
    let outcomes = settled(&server).await;
    assert_eq!(outcomes.get("upstream_failed"), Some(&1), "{outcomes:?}");
    assert_eq!(server.ledger().upstream_answered, 0);
}
