//! A service that counts what it executed, for the proxy's tests (`proxy.rs`,
//! `proxy_fuzz.rs`): an axum app on 127.0.0.1:0 that reads each request's body whole,
//! counts it as served, keeps its path and `X-Forwarded-For`, and (while its gate is
//! shut) holds its answer, so a test can make the callers leave first.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::HeaderMap;
use axum::routing::any;
use fault_server::{ServerHandle, Upstream};
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::common::server_with;

#[derive(Default)]
pub(crate) struct Books {
    /// Requests whose body was read whole: served (counted before the answer is held).
    pub(crate) served: AtomicU64,
    /// Each served request's path and its `X-Forwarded-For`, by arrival.
    pub(crate) seen: Mutex<Vec<(String, Option<String>)>>,
}

/// The counting service.
pub(crate) struct Counting {
    pub(crate) url: String,
    pub(crate) books: Arc<Books>,
    gate: watch::Sender<bool>,
}

impl Counting {
    /// A service whose answers are held until [`Counting::open`] when `held`.
    pub(crate) async fn start(held: bool) -> Counting {
        let books = Arc::new(Books::default());
        let (gate, opened) = watch::channel(!held);
        let app = Router::new()
            .fallback(any(serve))
            .with_state((Arc::clone(&books), opened));
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("an address");
        tokio::spawn(async move { axum::serve(listener, app).await });
        Counting {
            url: format!("http://{addr}"),
            books,
            gate,
        }
    }

    pub(crate) fn served(&self) -> u64 {
        self.books.served.load(Ordering::SeqCst)
    }

    pub(crate) fn seen(&self) -> Vec<(String, Option<String>)> {
        self.books.seen.lock().expect("not poisoned").clone()
    }

    /// Lets every held answer (and every later one) go.
    pub(crate) fn open(&self) {
        self.gate.send_replace(true);
    }
}

type Shared = (Arc<Books>, watch::Receiver<bool>);

async fn serve(State((books, mut opened)): State<Shared>, request: Request) -> String {
    let (parts, body) = request.into_parts();
    // A body cut off or malformed is no request served: hyper fails it, and the handler
    // never runs past here.
    let Ok(body) = axum::body::to_bytes(body, usize::MAX).await else {
        return String::new();
    };
    let xff = text(&parts.headers, "x-forwarded-for");
    books
        .seen
        .lock()
        .expect("not poisoned")
        .push((parts.uri.path().to_string(), xff));
    books.served.fetch_add(1, Ordering::SeqCst);
    let _ = opened.wait_for(|open| *open).await;
    format!("served {} {}", parts.uri.path(), body.len())
}

fn text(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// A fault-server on 127.0.0.1:0 in front of `upstream` with this script.
pub(crate) async fn proxy(script: &str, upstream: &str) -> ServerHandle {
    let upstream = Upstream::parse(upstream, false)
        .expect("a loopback upstream")
        .with_timeout(Duration::from_secs(30));
    server_with(script, |config| config.upstream = Some(upstream)).await
}

/// Waits until every request the ledger counted has its one outcome (the detached ones
/// record theirs when the upstream answers), then gives the ledger's outcomes.
pub(crate) async fn settled(server: &ServerHandle) -> BTreeMap<String, u64> {
    crate::common::eventually("every request has its outcome", || async {
        let ledger = server.ledger();
        ledger.by_outcome.values().sum::<u64>() == ledger.requests
    })
    .await;
    server.ledger().by_outcome
}

/// Reads until the peer closes (or resets, or 10 s pass): everything it sent.
pub(crate) async fn read_to_close(stream: &mut TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => out.extend_from_slice(&buf[..n]),
            _ => return out,
        }
    }
}
