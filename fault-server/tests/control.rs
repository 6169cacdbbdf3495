//! The control API, metrics and health, the library handle (start, set_script, reset,
//! ledger, shutdown), the binary (bad script, port taken, SIGTERM), and bad input
//! (invalid scripts, malformed HTTP).

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{
    chain, client, client_with_timeout, exit_of, is_incomplete, metric, server, server_with,
};
use fault_server::{LedgerSnapshot, Script, ServerConfig, StartError, TokenError, start};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn get(url: &str) -> reqwest::Response {
    client().get(url).send().await.expect("response")
}

#[tokio::test]
async fn control_endpoints_are_never_faulted_nor_counted() {
    let server = server("faults: [ { respond: { fault: reset } } ]").await;
    let url = server.url();
    assert_eq!(get(&format!("{url}/healthz")).await.status().as_u16(), 200);
    assert_eq!(get(&format!("{url}/metrics")).await.status().as_u16(), 200);
    let ledger = get(&format!("{url}/__chaos/ledger")).await;
    assert_eq!(ledger.status().as_u16(), 200);
    let snapshot: LedgerSnapshot =
        serde_json::from_str(&ledger.text().await.expect("body")).expect("ledger JSON");
    assert_eq!(snapshot, LedgerSnapshot::default());
    assert_eq!(
        get(&format!("{url}/__chaos/nope")).await.status().as_u16(),
        404
    );
    assert_eq!(server.ledger().requests, 0);
}

#[tokio::test]
async fn paths_beside_the_control_routes_are_faulted_like_any_other() {
    let server = server("faults: [ { respond: { status: 503 } } ]").await;
    let url = server.url();
    let beside = [
        "/__chaosx",
        "/healthz/",
        "/healthzz",
        "/metrics/x",
        "/",
        "/items/1",
    ];
    for path in beside {
        let status = get(&format!("{url}{path}")).await.status().as_u16();
        assert_eq!(status, 503, "{path} is not a control route");
    }
    assert_eq!(server.ledger().requests, beside.len() as u64);
}

#[tokio::test]
async fn put_script_replaces_the_script_and_bad_scripts_get_400() {
    let server = server("").await;
    let url = server.url();
    assert_eq!(get(&format!("{url}/x")).await.status().as_u16(), 200);

    let installed = client()
        .put(format!("{url}/__chaos/script"))
        .body("faults:\n  - name: drill\n    respond: { status: 503 }\n")
        .send()
        .await
        .expect("response");
    assert_eq!(installed.status().as_u16(), 200);
    let summary: serde_json::Value =
        serde_json::from_str(&installed.text().await.expect("body")).expect("json");
    assert_eq!(summary["phases"], serde_json::json!(["drill"]));
    assert_eq!(get(&format!("{url}/x")).await.status().as_u16(), 503);

    let json = client()
        .put(format!("{url}/__chaos/script"))
        .header("content-type", "application/json")
        .body(r#"{"faults":[{"respond":{"status":418}}]}"#)
        .send()
        .await
        .expect("response");
    assert_eq!(json.status().as_u16(), 200);
    assert_eq!(get(&format!("{url}/x")).await.status().as_u16(), 418);

    let bad = client()
        .put(format!("{url}/__chaos/script"))
        .body("faults:\n  - name: a\n    probability: 1.5\n    respond: { status: 503 }\n")
        .send()
        .await
        .expect("response");
    assert_eq!(bad.status().as_u16(), 400);
    let message = bad.text().await.expect("body");
    assert!(message.contains("faults[0].probability"), "{message}");
    assert!(message.contains("line 3 column 18"), "{message}");
    // The old script stays in force.
    assert_eq!(get(&format!("{url}/x")).await.status().as_u16(), 418);

    let echoed = get(&format!("{url}/__chaos/script")).await;
    let spec: serde_json::Value =
        serde_json::from_str(&echoed.text().await.expect("body")).expect("json");
    assert_eq!(spec["faults"][0]["respond"][0]["status"], 418);
}

/// Issue 50: a script whose fault sets a header that frames the response (here
/// `content-length: "0"` before a body, and `transfer-encoding`) desynchronised the next
/// response on a kept-alive connection. The control API refuses it with 400, the reason
/// and its line and column, and the script in force stays.
#[tokio::test]
async fn a_script_setting_a_framing_header_is_refused_with_its_place() {
    let server =
        server("faults: [ { name: kept, match: { path: /kept }, respond: { status: 418 } } ]")
            .await;
    let url = server.url();
    for (name, value) in [
        ("content-length", "\"0\""),
        ("Transfer-Encoding", "chunked"),
        ("connection", "close"),
        ("upgrade", "h2c"),
    ] {
        let refused = client()
            .put(format!("{url}/__chaos/script"))
            .body(format!(
                "faults:\n  - name: drill\n    respond:\n      status: 200\n      body: hello\n      headers: {{ {name}: {value} }}\n"
            ))
            .send()
            .await
            .expect("response");
        assert_eq!(refused.status().as_u16(), 400, "{name}");
        let message = refused.text().await.expect("body");
        assert!(
            message.contains(&format!("`{}`", name.to_ascii_lowercase())),
            "{message}"
        );
        assert!(message.contains("frames the response"), "{message}");
        assert!(message.contains("line 6 column"), "{message}");
    }
    assert_eq!(get(&format!("{url}/kept")).await.status().as_u16(), 418);
}

/// Sends one request on a kept-alive connection and reads its answer whole; returns the
/// status.
async fn exchange(stream: &mut tokio::net::TcpStream, head: &str, body: &str) -> u16 {
    let request = format!(
        "{head} HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut reply = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let read = stream.read(&mut chunk).await.expect("read");
        assert!(read > 0, "the connection closed mid-answer");
        reply.extend_from_slice(&chunk[..read]);
        let text = String::from_utf8_lossy(&reply).to_string();
        if let Some(end) = text.find("\r\n\r\n") {
            let length: usize = text[..end]
                .lines()
                .find_map(|line| line.strip_prefix("content-length: "))
                .map_or(0, |n| n.trim().parse().expect("a length"));
            if reply.len() >= end + 4 + length {
                return text[9..12].parse().expect("a status");
            }
        }
    }
}

#[tokio::test]
async fn a_new_script_applies_to_the_next_request_on_an_open_connection() {
    // Each connection keeps the script it read until the script changes: a script put
    // on the very connection that then sends the next request must still take effect.
    let server = server("").await;
    let mut stream = tokio::net::TcpStream::connect(server.addr())
        .await
        .expect("connect");
    assert_eq!(exchange(&mut stream, "GET /x", "").await, 200);
    let script = "faults: [ { respond: { status: 503 } } ]";
    assert_eq!(
        exchange(&mut stream, "PUT /__chaos/script", script).await,
        200
    );
    assert_eq!(exchange(&mut stream, "GET /x", "").await, 503);
    server.set_script(Script::from_yaml_str("").expect("an empty script"));
    assert_eq!(exchange(&mut stream, "GET /x", "").await, 200);
    assert_eq!(server.ledger().requests, 3);
}

#[tokio::test]
async fn reset_clears_the_ledger_but_keeps_the_script() {
    let server = server("faults: [ { match: { path: /f }, respond: { status: 500 } } ]").await;
    let url = server.url();
    for path in ["/a", "/f"] {
        client()
            .post(format!("{url}{path}"))
            .header("x-request-id", "r")
            .send()
            .await
            .expect("response");
    }
    assert_eq!(server.ledger().attempts, 2);
    let reset = client()
        .post(format!("{url}/__chaos/reset"))
        .send()
        .await
        .expect("response");
    assert_eq!(reset.status().as_u16(), 200);
    assert_eq!(server.ledger(), LedgerSnapshot::default());
    assert_eq!(get(&format!("{url}/f")).await.status().as_u16(), 500);
}

/// A sharded run's keeper resets ahead of the agreed start: the ledger is cleared at
/// once, the run clock starts `clock_in_ms` later, and until then a request sees time 0
/// (here, inside a phase that ends at 300 ms, long after it would have ended).
#[tokio::test]
async fn a_reset_can_start_the_run_clock_later() {
    let server = server("faults: [ { until: 300ms, respond: { status: 503 } } ]").await;
    let url = server.url();
    assert_eq!(get(&format!("{url}/a")).await.status().as_u16(), 503);
    let reset = client()
        .post(format!("{url}/__chaos/reset?clock_in_ms=60000"))
        .send()
        .await
        .expect("response");
    assert_eq!(reset.status().as_u16(), 200);
    assert_eq!(server.ledger(), LedgerSnapshot::default());
    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    assert_eq!(
        get(&format!("{url}/a")).await.status().as_u16(),
        503,
        "the clock has not started: still at 0"
    );
    for bad in ["60001", "soon", "-1"] {
        let reset = client()
            .post(format!("{url}/__chaos/reset?clock_in_ms={bad}"))
            .send()
            .await
            .expect("response");
        assert_eq!(reset.status().as_u16(), 400, "{bad}");
        let text = reset.text().await.unwrap_or_default();
        assert!(text.contains("clock_in_ms"), "{text}");
    }
    client()
        .post(format!("{url}/__chaos/reset?clock_in_ms=0"))
        .send()
        .await
        .expect("response");
    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    assert_eq!(get(&format!("{url}/a")).await.status().as_u16(), 200);
}

/// Issue 26: a request in flight across a reset belongs to the ledger it arrived in.
/// Three payments arrive (their heads, and half their bodies: counted, then held until
/// the rest comes), the ledger is reset, then their bodies come: their delay fault, key,
/// side effect and outcome land nowhere, and the new ledger counts them only as
/// stragglers. A payment after the reset is counted whole.
#[tokio::test]
async fn a_request_in_flight_across_a_reset_stays_out_of_the_new_ledger() {
    let server = server(
        "faults: [ { name: slow, match: { path: /pay }, respond: { fault: delay, delay: 1ms } } ]",
    )
    .await;
    let (addr, url) = (server.addr(), server.url());
    let mut held = Vec::new();
    for i in 0..3 {
        let key = if i == 0 {
            "idempotency-key: k-0\r\n"
        } else {
            ""
        };
        let head = format!(
            "POST /pay HTTP/1.1\r\nhost: t\r\nx-request-id: pay-{i}\r\nx-chaos-policy: p\r\n{key}content-length: 4\r\n\r\nab"
        );
        held.push(common::send_raw(addr, &head).await);
    }
    common::eventually("the three payments arrived", || async {
        server.ledger().requests == 3
    })
    .await;
    let reset = client()
        .post(format!("{url}/__chaos/reset"))
        .send()
        .await
        .expect("response");
    assert_eq!(reset.status().as_u16(), 200);
    for stream in &mut held {
        stream.write_all(b"cd").await.expect("the rest of the body");
        let mut answer = [0u8; 12];
        stream.read_exact(&mut answer).await.expect("an answer");
        assert_eq!(
            &answer,
            b"HTTP/1.1 200",
            "{:?}",
            String::from_utf8_lossy(&answer)
        );
    }
    assert_eq!(
        server.ledger(),
        LedgerSnapshot {
            stragglers: 3,
            // The key k-0 executed, so it is remembered (not counted): a retry under it
            // replays what it answered rather than paying again.
            tracked_keys: 1,
            ..LedgerSnapshot::default()
        },
        "nothing of the payments that arrived before the reset"
    );
    let retry = client()
        .post(format!("{url}/pay"))
        .header("x-request-id", "pay-0")
        .header("idempotency-key", "k-0")
        .body("abcd")
        .send()
        .await
        .expect("response");
    assert_eq!(retry.status().as_u16(), 200);
    let ledger = server.ledger();
    assert_eq!(
        (ledger.side_effects, ledger.idempotent_replays),
        (0, 1),
        "the straggler's key is replayed, not executed again"
    );
    client()
        .post(format!("{url}/__chaos/reset"))
        .send()
        .await
        .expect("response");

    let after = client()
        .post(format!("{url}/pay"))
        .header("x-request-id", "pay-9")
        .send()
        .await
        .expect("response");
    assert_eq!(after.status().as_u16(), 200);
    let ledger = server.ledger();
    assert_eq!(
        (
            ledger.requests,
            ledger.attempts,
            ledger.logical,
            ledger.untracked
        ),
        (1, 1, 1, 0)
    );
    assert_eq!(ledger.by_outcome.values().sum::<u64>(), ledger.requests);
    assert_eq!((ledger.side_effects, ledger.by_fault["delay"]), (1, 1));
    assert_eq!(
        ledger.stragglers, 0,
        "counted in the ledger they ended in, now reset"
    );
}

#[tokio::test]
async fn the_token_guards_the_control_api_only() {
    let server = server_with("", |config| config.token = Some("s3cret".into())).await;
    let url = server.url();
    let unauthorized = get(&format!("{url}/__chaos/ledger")).await;
    assert_eq!(unauthorized.status().as_u16(), 401);
    assert!(unauthorized.headers().contains_key("www-authenticate"));
    let wrong = client()
        .get(format!("{url}/__chaos/ledger"))
        .bearer_auth("guess")
        .send()
        .await
        .expect("response");
    assert_eq!(wrong.status().as_u16(), 401);
    let put = client()
        .put(format!("{url}/__chaos/script"))
        .body("faults: [ { respond: { status: 503 } } ]")
        .send()
        .await
        .expect("response");
    assert_eq!(put.status().as_u16(), 401);
    assert_eq!(
        get(&format!("{url}/x")).await.status().as_u16(),
        200,
        "script unchanged"
    );
    let authorized = client()
        .get(format!("{url}/__chaos/ledger"))
        .bearer_auth("s3cret")
        .send()
        .await
        .expect("response");
    assert_eq!(authorized.status().as_u16(), 200);
    assert_eq!(get(&format!("{url}/healthz")).await.status().as_u16(), 200);
    assert_eq!(get(&format!("{url}/metrics")).await.status().as_u16(), 200);
}

/// Issue 50: a wrong method got axum's 405 before any token check, so a caller without
/// the token could map the control routes. The token comes first; then the 405 says the
/// methods the route takes.
#[tokio::test]
async fn a_wrong_method_on_a_control_route_is_unauthorized_before_it_is_not_allowed() {
    let server = server_with("", |config| config.token = Some("s3cret".into())).await;
    let url = server.url();
    for (method, path, allow) in [
        (reqwest::Method::DELETE, "/__chaos/script", "GET, PUT"),
        (reqwest::Method::GET, "/__chaos/reset", "POST"),
        (reqwest::Method::POST, "/__chaos/ledger", "GET"),
    ] {
        let anonymous = client()
            .request(method.clone(), format!("{url}{path}"))
            .send()
            .await
            .expect("response");
        assert_eq!(anonymous.status().as_u16(), 401, "{method} {path}");
        let known = client()
            .request(method.clone(), format!("{url}{path}"))
            .bearer_auth("s3cret")
            .send()
            .await
            .expect("response");
        assert_eq!(known.status().as_u16(), 405, "{method} {path}");
        assert_eq!(
            known.headers().get("allow").and_then(|v| v.to_str().ok()),
            Some(allow),
            "{method} {path}"
        );
    }
}

#[tokio::test]
async fn the_bearer_scheme_is_matched_case_insensitively() {
    let server = server_with("", |config| config.token = Some("s3cret".into())).await;
    let url = format!("{}/__chaos/ledger", server.url());
    let status = |authorization: &'static str| {
        let url = url.clone();
        async move {
            client()
                .get(url)
                .header("authorization", authorization)
                .send()
                .await
                .expect("response")
                .status()
                .as_u16()
        }
    };
    for accepted in [
        "Bearer s3cret",
        "bearer s3cret",
        "BEARER s3cret",
        "bEaReR   s3cret",
    ] {
        assert_eq!(status(accepted).await, 200, "{accepted}");
    }
    for refused in [
        "Bearer guess",
        "Basic s3cret",
        "Bearers3cret",
        "s3cret",
        "Bearer",
    ] {
        assert_eq!(status(refused).await, 401, "{refused}");
    }
}

#[tokio::test]
async fn metrics_count_outcomes_faults_and_side_effects() {
    let server = server(
        "faults: [ { match: { path: /boom }, respond: { status: 503 } }, { match: { path: /rst }, respond: { fault: reset } } ]",
    )
    .await;
    let url = server.url();
    for _ in 0..2 {
        client()
            .post(format!("{url}/pay"))
            .header("x-request-id", "same")
            .send()
            .await
            .expect("served");
    }
    get(&format!("{url}/boom")).await;
    let _ = client().get(format!("{url}/rst")).send().await;
    let text = get(&format!("{url}/metrics"))
        .await
        .text()
        .await
        .expect("body");
    for line in [
        "fault_server_requests_total{outcome=\"served\"} 2",
        "fault_server_requests_total{outcome=\"status\",code=\"503\"} 1",
        "fault_server_requests_total{outcome=\"reset\"} 1",
        "fault_server_faults_total{kind=\"status\"} 1",
        "fault_server_faults_total{kind=\"reset\"} 1",
        "fault_server_side_effects_total 2",
        "fault_server_duplicate_side_effects_total 1",
        "fault_server_script_phases 2",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in\n{text}"
        );
    }
    assert_eq!(metric(&server, "fault_server_in_flight").await, Some(0));
    // Metrics are not reset with the ledger: Prometheus counters only go up.
    server.reset();
    assert_eq!(
        metric(&server, "fault_server_side_effects_total").await,
        Some(2)
    );
}

#[tokio::test]
async fn library_handle_starts_scripts_resets_and_shuts_down() {
    let server = start(ServerConfig::default()).await.expect("starts");
    assert!(server.addr().ip().is_loopback());
    assert_ne!(server.addr().port(), 0);
    assert_eq!(
        server.url(),
        format!("http://127.0.0.1:{}", server.addr().port())
    );
    let url = server.url();
    assert_eq!(get(&url).await.status().as_u16(), 200);

    server.set_script(
        Script::from_yaml_str("seed: 99\nfaults: [ { name: n, respond: { status: 504 } } ]")
            .expect("valid"),
    );
    assert_eq!(server.seed(), 99, "a script's seed replaces the server's");
    assert_eq!(server.script().phase_name(0), Some("n"));
    assert_eq!(get(&url).await.status().as_u16(), 504);
    assert_eq!(server.ledger().requests, 2);
    server.reset();
    assert_eq!(server.ledger().requests, 0);
    assert_eq!(
        get(&url).await.status().as_u16(),
        504,
        "reset keeps the script"
    );

    let addr = server.addr();
    server.shutdown().await;
    let refused = client().get(format!("http://{addr}/")).send().await;
    assert!(refused.is_err(), "nothing listens after shutdown");
}

#[tokio::test]
async fn shutdown_ends_hung_requests() {
    let server = server("faults: [ { respond: { fault: timeout } } ]").await;
    let url = server.url();
    let hung = tokio::spawn(async move {
        client_with_timeout(Duration::from_secs(120))
            .get(url)
            .send()
            .await
    });
    let probe = server.clone();
    common::eventually("the request is held", || {
        let probe = probe.clone();
        async move { probe.ledger().by_outcome.get("timeout") == Some(&1) }
    })
    .await;
    server.shutdown().await;
    let error = hung
        .await
        .expect("task")
        .expect_err("the held request gets no answer");
    assert!(
        !error.is_timeout() && is_incomplete(&error),
        "{}",
        chain(&error)
    );
}

#[tokio::test(start_paused = true)]
async fn set_script_and_reset_restart_the_run_clock() {
    let yaml = "faults: [ { from: 10s, until: 20s, respond: { status: 503 } } ]";
    let server = server(yaml).await;
    let url = server.url();
    let client = reqwest::Client::builder()
        .retry(reqwest::retry::never())
        .pool_max_idle_per_host(0)
        .no_proxy()
        .build()
        .expect("client");
    let status = |client: reqwest::Client, url: String| async move {
        client
            .get(url)
            .send()
            .await
            .expect("response")
            .status()
            .as_u16()
    };
    assert_eq!(
        status(client.clone(), url.clone()).await,
        200,
        "before the window"
    );
    tokio::time::advance(Duration::from_secs(15)).await;
    assert_eq!(
        status(client.clone(), url.clone()).await,
        503,
        "inside the window"
    );
    server.set_script(Script::from_yaml_str(yaml).expect("valid"));
    assert_eq!(
        status(client.clone(), url.clone()).await,
        200,
        "clock restarted by set_script"
    );
    tokio::time::advance(Duration::from_secs(15)).await;
    assert_eq!(status(client.clone(), url.clone()).await, 503);
    server.reset();
    assert_eq!(
        status(client.clone(), url.clone()).await,
        200,
        "clock restarted by reset"
    );
    tokio::time::advance(Duration::from_secs(10)).await;
    assert_eq!(
        status(client.clone(), url.clone()).await,
        503,
        "from is inclusive"
    );
    tokio::time::advance(Duration::from_secs(10)).await;
    assert_eq!(status(client, url).await, 200, "until is exclusive");
}

#[tokio::test]
async fn start_reports_a_taken_port() {
    let first = start(ServerConfig::default()).await.expect("starts");
    let error = start(ServerConfig {
        listen: first.addr(),
        ..ServerConfig::default()
    })
    .await
    .expect_err("the port is taken");
    assert!(matches!(error, StartError::AddrInUse { .. }), "{error:?}");
    assert!(error.to_string().contains("already in use"), "{error}");
}

/// An empty or blank token would guard nothing (and would pass the non-loopback rule):
/// `start` refuses it, whatever the address.
#[tokio::test]
async fn start_refuses_an_empty_or_blank_token() {
    for (token, expected) in [
        ("", TokenError::Empty),
        (" ", TokenError::Blank),
        ("\t", TokenError::Blank),
        ("\u{a0}", TokenError::Blank),
        ("\u{3000}\u{85}", TokenError::Blank),
        ("\u{200b}", TokenError::Blank),
        ("\u{feff}\u{200d} \u{2060}", TokenError::Blank),
    ] {
        for listen in ["127.0.0.1:0", "0.0.0.0:0"] {
            let config = ServerConfig {
                listen: listen.parse().expect("an address"),
                token: Some(token.into()),
                ..ServerConfig::default()
            };
            match start(config).await {
                Err(StartError::Token(error)) => assert_eq!(error, expected, "{token:?}"),
                Err(other) => panic!("{token:?} on {listen}: {other}"),
                Ok(server) => panic!("{token:?} on {listen}: started on {}", server.url()),
            }
        }
    }
}

#[tokio::test]
async fn malformed_http_never_crashes_the_server() {
    let server = server("").await;
    let garbage: [&[u8]; 6] = [
        b"\x00\x01\x02\xff\xfe garbage\r\n\r\n",
        b"GET / HTTP/9.9\r\n\r\n",
        b"GET /\r\nHost: x\r\n\r\n",
        b"POST / HTTP/1.1\r\nContent-Length: -5\r\n\r\n",
        b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nZZZ\r\n",
        b"GET / HTTP/1.1\r\nHost: x\r\nBad Header Without Colon\r\n\r\n",
    ];
    for bytes in garbage {
        let mut stream = tokio::net::TcpStream::connect(server.addr())
            .await
            .expect("connect");
        stream.write_all(bytes).await.expect("write");
        let mut reply = Vec::new();
        // The server answers 400 or closes; either way the read ends.
        let _ = tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut reply)).await;
        let text = String::from_utf8_lossy(&reply);
        assert!(
            reply.is_empty() || text.starts_with("HTTP/1.1 4"),
            "{:?} got {text:?}",
            String::from_utf8_lossy(bytes)
        );
    }
    // A request cut off halfway, and an oversized header block.
    {
        let mut stream = tokio::net::TcpStream::connect(server.addr())
            .await
            .expect("connect");
        stream
            .write_all(b"GET /half HTTP/1.1\r\nHo")
            .await
            .expect("write");
    }
    {
        let mut stream = tokio::net::TcpStream::connect(server.addr())
            .await
            .expect("connect");
        let mut huge = b"GET / HTTP/1.1\r\nX-Big: ".to_vec();
        huge.extend(std::iter::repeat_n(b'a', 1 << 20));
        let _ = stream.write_all(&huge).await;
    }
    let response = get(&format!("{}/still-alive", server.url())).await;
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(
        get(&format!("{}/healthz", server.url()))
            .await
            .status()
            .as_u16(),
        200
    );
}

#[tokio::test]
async fn oversized_bodies_get_413() {
    let server = server_with("", |config| config.max_body = 1024).await;
    let response = client()
        .post(format!("{}/upload", server.url()))
        .body(vec![b'x'; 4096])
        .send()
        .await
        .expect("response");
    assert_eq!(response.status().as_u16(), 413);
    assert_eq!(server.ledger().by_outcome.get("bad_request"), Some(&1));
}

// ---- the binary ----

fn binary() -> Command {
    Command::new(env!("CARGO_BIN_EXE_fault-server"))
}

fn temp_file(name: &str, contents: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("fault-server-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join(name);
    std::fs::write(&path, contents).expect("write temp file");
    path
}

#[test]
fn binary_refuses_a_bad_script_with_its_location() {
    let path = temp_file(
        "bad.yaml",
        "name: plan\nfaults:\n  - name: outage\n    respnd: { status: 503 }\n",
    );
    let output = binary()
        .args(["--listen", "127.0.0.1:0", "--script"])
        .arg(&path)
        .output()
        .expect("runs");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("unknown field `respnd`"), "{stderr}");
    assert!(stderr.contains("line 4 column 5"), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");

    let path = temp_file(
        "cross.yaml",
        "faults:\n  - name: outage\n    from: 20s\n    until: 10s\n    respond: { status: 503 }\n",
    );
    let output = binary().arg("--script").arg(&path).output().expect("runs");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("faults[0] \"outage\": `until`"), "{stderr}");
}

#[tokio::test]
async fn binary_reports_a_taken_port() {
    let holder = start(ServerConfig::default()).await.expect("starts");
    let output = binary()
        .args(["--listen", &holder.addr().to_string()])
        .output()
        .expect("runs");
    assert_eq!(output.status.code(), Some(3));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("already in use"), "{stderr}");
}

#[tokio::test]
async fn binary_serves_a_plan_and_stops_on_sigterm() {
    let path = temp_file(
        "plan.yaml",
        "name: p\nseed: 5\nload: { rate: 10 }\nfaults: [ { match: { path: /down }, respond: { status: 503 } } ]\n",
    );
    let mut child = binary()
        .args(["--listen", "127.0.0.1:0", "--script"])
        .arg(&path)
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawns");
    let first_line = first_line(&mut child).await;
    assert!(first_line.contains("seed 5"), "{first_line}");
    let url = first_line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .expect("the line names the URL")
        .to_string();
    assert_eq!(get(&format!("{url}/up")).await.status().as_u16(), 200);
    assert_eq!(get(&format!("{url}/down")).await.status().as_u16(), 503);

    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(killed.success());
    let status = tokio::task::spawn_blocking(move || child.wait())
        .await
        .expect("waiter")
        .expect("exits");
    assert_eq!(status.code(), Some(0));
}

/// `--token ''`, a blank `--token`, and `FAULT_SERVER_TOKEN=` (an unset variable in a
/// template) or a blank one: exit 2 before listening, one line naming where the token came
/// from and what is wrong with it. On loopback too, where no token at all is accepted:
/// whoever passed one meant the control API to be guarded.
#[test]
fn binary_refuses_an_empty_or_blank_token() {
    for listen in ["127.0.0.1:0", "0.0.0.0:0"] {
        for (token, says) in [
            ("", "is empty"),
            ("  ", "only whitespace"),
            ("\t \u{a0}\u{3000}\u{85}", "only whitespace"),
            ("\u{200b}", "invisible characters"),
        ] {
            let (code, stderr) = exit_of(
                binary()
                    .args(["--listen", listen, "--token", token])
                    .env_remove("FAULT_SERVER_TOKEN"),
            );
            assert_eq!(code, Some(2), "--token {token:?} on {listen}: {stderr}");
            assert!(stderr.contains("--token: the control token"), "{stderr}");
            assert!(stderr.contains(says), "{stderr}");
            assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");

            let (code, stderr) = exit_of(
                binary()
                    .args(["--listen", listen])
                    .env("FAULT_SERVER_TOKEN", token),
            );
            assert_eq!(
                code,
                Some(2),
                "FAULT_SERVER_TOKEN={token:?} on {listen}: {stderr}"
            );
            assert!(
                stderr.contains("FAULT_SERVER_TOKEN: the control token"),
                "{stderr}"
            );
            assert!(stderr.contains(says), "{stderr}");
        }
    }
}

/// The binary, killed when dropped (a failed assertion must not leave it running).
struct Running(std::process::Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The first line the binary says on its piped stderr (the one naming its URL, once it
/// listens).
async fn first_line(child: &mut std::process::Child) -> String {
    let stderr = child.stderr.take().expect("piped");
    tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stderr).read_line(&mut line).map(|_| line)
    })
    .await
    .expect("reader")
    .expect("a line")
}

/// Starts the binary on a free loopback port with these arguments; returns it and its URL
/// (read from the line it prints once listening).
async fn run_binary(args: &[&str]) -> (Running, String) {
    let child = binary()
        .args(["--listen", "127.0.0.1:0"])
        .args(args)
        .env_remove("FAULT_SERVER_TOKEN")
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawns");
    // Killed if the line never comes.
    let mut running = Running(child);
    let line = first_line(&mut running.0).await;
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("the line names the URL: {line}"))
        .to_string();
    (running, url)
}

/// Around the credentials only SP and HTAB are trimmed (RFC 9110 OWS): U+00A0, U+3000 or
/// U+0085 around the right token are part of a wrong one, so 401, and a script `PUT`
/// with them installs nothing. Spaces and tabs around the right token are fine.
#[tokio::test]
async fn binary_trims_only_spaces_and_tabs_around_the_bearer_token() {
    use reqwest::header::HeaderValue;

    let (_running, url) = run_binary(&["--token", "s3cret"]).await;
    let status = |method: reqwest::Method, path: &str, authorization: &str| {
        let request = client()
            .request(method, format!("{url}{path}"))
            .header(
                "authorization",
                HeaderValue::from_bytes(authorization.as_bytes()).expect("a header value"),
            )
            .body("faults: [ { respond: { status: 503 } } ]");
        async move { request.send().await.expect("response").status().as_u16() }
    };
    for refused in [
        "Bearer \u{a0}",
        "Bearer \u{3000}",
        "Bearer \u{85}",
        "Bearer \u{a0}s3cret",
        "Bearer s3cret\u{a0}",
        "Bearer \u{3000}s3cret\u{3000}",
        "Bearer s3cret\u{85}",
        "Bearer \u{85}s3cret",
    ] {
        let get = status(reqwest::Method::GET, "/__chaos/ledger", refused).await;
        assert_eq!(get, 401, "GET with {refused:?}");
        let put = status(reqwest::Method::PUT, "/__chaos/script", refused).await;
        assert_eq!(put, 401, "PUT with {refused:?}");
    }
    assert_eq!(
        get(&format!("{url}/x")).await.status().as_u16(),
        200,
        "no script was installed"
    );
    for accepted in [
        "Bearer s3cret",
        "Bearer  s3cret ",
        "Bearer \ts3cret\t",
        "Bearer \t s3cret \t",
    ] {
        let get = status(reqwest::Method::GET, "/__chaos/ledger", accepted).await;
        assert_eq!(get, 200, "GET with {accepted:?}");
    }
}

/// What the harness reads before it scripts a running fault-server: `/healthz` says a
/// fault-server answered, `GET /__chaos/script` where the script in force came from, and
/// every script put over the control API is told to the log, with what it replaced.
#[tokio::test]
async fn a_script_says_where_it_came_from_and_every_change_is_logged() {
    let said = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let log = std::sync::Arc::clone(&said);
    let server = server_with(
        "faults: [ { name: brownout, respond: { status: 503 } } ]",
        |c| {
            c.script_log = Some(fault_server::ScriptLog(std::sync::Arc::new(
                move |line: &str| {
                    log.lock().expect("lock").push(line.to_owned());
                },
            )));
        },
    )
    .await;
    let url = server.url();
    let health = get(&format!("{url}/healthz")).await;
    let name = health
        .headers()
        .get(fault_server::wire::SERVER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    assert_eq!(name, Some(fault_server::wire::server_name()));
    let origin = |response: &reqwest::Response| {
        response
            .headers()
            .get(fault_server::wire::SCRIPT_ORIGIN)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let script = get(&format!("{url}/__chaos/script")).await;
    assert_eq!(origin(&script).as_deref(), Some("startup"));

    for (by, expected) in [(Some("harness"), "harness"), (None, "control")] {
        let mut put = client()
            .put(format!("{url}/__chaos/script"))
            .body("faults: [ { name: other, respond: { status: 500 } } ]");
        if let Some(by) = by {
            put = put.header(fault_server::wire::SCRIPT_BY, by);
        }
        assert_eq!(put.send().await.expect("put").status().as_u16(), 200);
        let script = get(&format!("{url}/__chaos/script")).await;
        assert_eq!(origin(&script).as_deref(), Some(expected));
        // A reset keeps the script, and where it came from.
        let reset = client().post(format!("{url}/__chaos/reset")).send().await;
        assert_eq!(reset.expect("reset").status().as_u16(), 200);
        let script = get(&format!("{url}/__chaos/script")).await;
        assert_eq!(origin(&script).as_deref(), Some(expected));
    }
    let said = said.lock().expect("lock").clone();
    assert_eq!(said.len(), 2, "{said:?}");
    assert!(
        said[0].contains("by harness: now 1 fault phase(s) (other) [harness]; was 1 fault phase(s) (brownout) [startup]"),
        "{said:?}"
    );
    assert!(said[1].contains("by control"), "{said:?}");
}
