//! Exact counts, against servers the harness does not control: a black box that logs every
//! request, a listener that never accepts; and a dispatcher that crashes.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::HeaderMap;
use common::{plan, run};
use harness::engine::{self, EngineConfig, EngineError};
use harness::report::{PolicyReport, Report};
use harness::schedule::Arrival;
use tokio_util::sync::CancellationToken;

fn only(report: &Report) -> &PolicyReport {
    assert_eq!(report.policies.len(), 1);
    &report.policies[0]
}

#[derive(Default)]
struct Log {
    requests: AtomicU64,
    without_id: AtomicU64,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_black_box_receives_exactly_the_planned_requests() {
    let log = Arc::new(Log::default());
    let app = Router::new()
        .fallback(
            |State(log): State<Arc<Log>>, headers: HeaderMap| async move {
                log.requests.fetch_add(1, Ordering::SeqCst);
                if !headers.contains_key("x-request-id") {
                    log.without_id.fetch_add(1, Ordering::SeqCst);
                }
                "ok"
            },
        )
        .with_state(Arc::clone(&log));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let report = run(&format!(
        r#"
name: black-box-count
duration: 1s
drain: 1s
target: {{ url: "http://{addr}", fault_server: false }}
load:
  rate: 40
  arrivals: uniform
  requests: [ {{ name: hello, path: /hello }} ]
policies: [ {{ name: once, max_attempts: 1 }} ]
"#
    ))
    .await;
    server.abort();
    let p = only(&report);
    assert_eq!(p.attempts, 40);
    assert_eq!(
        log.requests.load(Ordering::SeqCst),
        p.attempts,
        "the server saw what the report counts, no reachability probe"
    );
    assert_eq!(log.without_id.load(Ordering::SeqCst), 0);
}

/// A listener that completes one handshake and never accepts: its queue is full, so every
/// later connect hangs in SYN retransmission.
fn full_backlog() -> (std::net::TcpListener, std::net::SocketAddr) {
    let socket =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("socket");
    socket
        .bind(&std::net::SocketAddr::from(([127, 0, 0, 1], 0)).into())
        .expect("bind");
    socket.listen(0).expect("listen");
    let listener: std::net::TcpListener = socket.into();
    let addr = listener.local_addr().expect("addr");
    (listener, addr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attempts_stopped_while_connecting_are_cut_not_counted() {
    let (listener, addr) = full_backlog();
    // Fill the queue so that no connect of the run completes.
    let mut fillers = Vec::new();
    while fillers.len() < 8 {
        match tokio::time::timeout(
            Duration::from_millis(300),
            tokio::net::TcpStream::connect(addr),
        )
        .await
        {
            Ok(Ok(stream)) => fillers.push(stream),
            _ => break,
        }
    }
    assert!(
        !fillers.is_empty() && fillers.len() < 8,
        "{}",
        fillers.len()
    );
    let plan = plan(&format!(
        r#"
name: never-accepts
duration: 1s
drain: 500ms
target: {{ url: "http://{addr}", fault_server: false }}
load:
  rate: 20
  arrivals: uniform
  requests: [ {{ name: r, path: / }} ]
policies: [ {{ name: once, max_attempts: 1 }} ]
"#
    ));
    let run = engine::run(EngineConfig {
        plan: &plan,
        policy: &plan.policies[0],
        base_url: format!("http://{addr}"),
        abort: CancellationToken::new(),
        progress: None,
        telemetry: None,
    })
    .await
    .expect("the run completes");
    let r = &run.recorder;
    assert_eq!(r.logical, 20);
    assert_eq!(r.unfinished, 20, "no connect ever completed");
    assert_eq!(r.cut, 20, "every attempt was stopped while connecting");
    assert_eq!(r.attempts, 0, "none left the process");
    assert_eq!(r.abandoned, 0);
    drop(listener);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_in_the_dispatcher_is_an_error_not_an_interruption() {
    let plan = plan(
        r#"
name: crash
duration: 1s
drain: 100ms
load: { rate: 10, requests: [ { name: r, path: / } ] }
policies: [ { name: once } ]
"#,
    );
    let arrivals = (0..3u64).map(|index| {
        assert!(index < 2, "the schedule broke at arrival {index}");
        Arrival {
            index,
            at: Duration::from_millis(index),
            kind: 0,
            n: index,
        }
    });
    let server = fault_server::start(fault_server::ServerConfig::default())
        .await
        .expect("start a fault-server");
    let result = engine::run_arrivals(
        EngineConfig {
            plan: &plan,
            policy: &plan.policies[0],
            base_url: server.url(),
            abort: CancellationToken::new(),
            progress: None,
            telemetry: None,
        },
        arrivals,
    )
    .await;
    server.shutdown().await;
    match result {
        Err(EngineError::Dispatcher(message)) => {
            assert!(
                message.contains("the schedule broke at arrival 2"),
                "{message}"
            );
        }
        Err(other) => panic!("the wrong error: {other}"),
        Ok(run) => panic!(
            "a crashed dispatcher reported a run (aborted: {})",
            run.aborted
        ),
    }
}
