//! Seeded fuzzing of the proxy's HTTP/1.1 side: a few hundred mutated raw requests (odd
//! and bad methods, paths with dot segments and escapes, duplicate and conflicting
//! framing headers, huge headers, truncated bodies) over TCP through the proxy to a
//! counting service. Whatever came: no panic, every answer a valid status or a closed
//! connection, nothing forwarded outside the upstream's base path, and the ledger's
//! count of what the upstream answered equal to the service's own.

mod common;
mod proxy_support;

use std::sync::atomic::{AtomicU64, Ordering};

use common::send_raw;
use proxy_support::{Counting, proxy, read_to_close, settled};
use rand_chacha::ChaCha8Rng;
use rand_core::{Rng, SeedableRng};
use tokio::io::AsyncWriteExt;

/// The seed of the requests; a failure names it with the request.
const SEED: u64 = 50;
const REQUESTS: usize = 300;
/// Requests in flight at once.
const AT_ONCE: usize = 16;

static PANICS: AtomicU64 = AtomicU64::new(0);

const METHODS: &[&str] = &[
    "GET", "GET", "GET", "POST", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS", "TRACE",
    "CONNECT", "get", "G3T", "X-CUSTOM",
];

const PIECES: &[&str] = &[
    "a", "b.json", "..", ".", "", "%2e%2e", "%2E%2e", ".%2E", "%2e", "%2f", "%2F", "..%2f",
    "%61dmin", "%zz", "%", "%20", "~x", "a;b", "?q=1", "?q=/../x",
];

/// One mutated request: its bytes, and whether its body is cut off (the client then
/// hangs up after it, as one whose upload broke).
struct Mutant {
    bytes: Vec<u8>,
    truncated: bool,
}

fn pick<'a>(rng: &mut ChaCha8Rng, from: &[&'a str]) -> &'a str {
    from[rng.next_u32() as usize % from.len()]
}

fn chance(rng: &mut ChaCha8Rng, in_hundred: u32) -> bool {
    rng.next_u32() % 100 < in_hundred
}

fn path(rng: &mut ChaCha8Rng) -> String {
    if chance(rng, 3) {
        return ["*", "abc", "http://other/x/../y"][rng.next_u32() as usize % 3].to_string();
    }
    let mut path = String::new();
    for _ in 0..1 + rng.next_u32() % 5 {
        path.push('/');
        if chance(rng, 15) {
            path.push('/');
        }
        path.push_str(pick(rng, PIECES));
    }
    path
}

fn mutant(rng: &mut ChaCha8Rng, index: usize) -> Mutant {
    let method = pick(rng, METHODS);
    let mut head = format!("{method} {} HTTP/1.1\r\n", path(rng));
    if !chance(rng, 5) {
        head.push_str("Host: proxy\r\n");
    }
    head.push_str(&format!(
        "x-request-id: fuzz-{index}\r\nConnection: close\r\n"
    ));
    if chance(rng, 10) {
        let size = 1 + rng.next_u32() as usize % (80 * 1024);
        head.push_str(&format!("x-huge: {}\r\n", "h".repeat(size)));
    }
    if chance(rng, 5) {
        for i in 0..150 {
            head.push_str(&format!("x-many-{i}: 1\r\n"));
        }
    }
    if chance(rng, 10) {
        head.push_str("X-Forwarded-For: 10.0.0.1\r\n");
    }
    let body: Vec<u8> = (0..rng.next_u32() % 64)
        .map(|i| b'a' + (i % 26) as u8)
        .collect();
    let mut truncated = false;
    let mut wire = Vec::new();
    match rng.next_u32() % 8 {
        // No body.
        0 | 1 => {}
        // A body of the length it says.
        2 | 3 => {
            head.push_str(&format!("Content-Length: {}\r\n", body.len()));
            wire.extend_from_slice(&body);
        }
        // Shorter than it says.
        4 => {
            head.push_str(&format!("Content-Length: {}\r\n", body.len() + 10));
            wire.extend_from_slice(&body);
            truncated = true;
        }
        // Two lengths that disagree, or a length that is not one.
        5 => {
            let second = [
                "Content-Length: 3\r\n",
                "Content-Length: -1\r\n",
                "Content-Length: 99999999999999999999\r\n",
            ];
            head.push_str(&format!("Content-Length: {}\r\n", body.len()));
            head.push_str(pick(rng, &second));
            wire.extend_from_slice(&body);
        }
        // Chunked, whole or cut off, beside a length or not.
        6 => {
            head.push_str("Transfer-Encoding: chunked\r\n");
            if chance(rng, 50) {
                head.push_str("Content-Length: 5\r\n");
            }
            wire.extend_from_slice(format!("{:x}\r\n", body.len()).as_bytes());
            wire.extend_from_slice(&body);
            if chance(rng, 50) {
                wire.extend_from_slice(b"\r\n0\r\n\r\n");
            } else {
                truncated = true;
            }
        }
        // A framing header that means nothing, or chunked twice.
        _ => {
            let odd = [
                "Transfer-Encoding: gzip\r\n",
                "Transfer-Encoding: chunked, chunked\r\n",
                "Transfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n",
            ];
            head.push_str(pick(rng, &odd));
            wire.extend_from_slice(b"0\r\n\r\n");
        }
    }
    head.push_str("\r\n");
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(&wire);
    Mutant { bytes, truncated }
}

/// Sends a request on a connection of its own: the answer's bytes, empty when the
/// connection closed without one.
async fn exchange(addr: std::net::SocketAddr, mutant: Mutant) -> Vec<u8> {
    let mut stream = send_raw(addr, "").await;
    if stream.write_all(&mutant.bytes).await.is_err() {
        return Vec::new();
    }
    if mutant.truncated {
        let _ = stream.shutdown().await;
    }
    read_to_close(&mut stream).await
}

/// The first answer's status, if the bytes start with a valid status line.
fn status(answer: &[u8]) -> Option<u16> {
    let code: u16 = std::str::from_utf8(answer.strip_prefix(b"HTTP/1.1 ")?.get(..3)?)
        .ok()?
        .parse()
        .ok()?;
    (100..=599).contains(&code).then_some(code)
}

/// Whether a path the service saw stays under its base: below `/base/`, with no
/// segment that is or decodes to `.` or `..`, even for a service that decodes an
/// encoded slash into a separator (an encoded slash itself is data, kept).
fn under_base(path: &str) -> bool {
    let decoded = path
        .to_ascii_lowercase()
        .replace("%2f", "/")
        .replace("%2e", ".");
    path.starts_with("/base/")
        && !decoded
            .split('/')
            .any(|segment| matches!(segment, "." | ".."))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutated_requests_through_the_proxy_are_answered_bounded_and_counted() {
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        PANICS.fetch_add(1, Ordering::SeqCst);
        default_hook(info);
    }));
    let service = Counting::start(false).await;
    let server = proxy("faults: []", &format!("{}/base/", service.url)).await;
    let mut rng = ChaCha8Rng::seed_from_u64(SEED);
    let mutants: Vec<Mutant> = (0..REQUESTS).map(|i| mutant(&mut rng, i)).collect();
    let mut statuses = std::collections::BTreeMap::<Option<u16>, u64>::new();
    let mut mutants = mutants.into_iter().enumerate().peekable();
    while mutants.peek().is_some() {
        let batch: Vec<_> = mutants.by_ref().take(AT_ONCE).collect();
        let mut answers = Vec::new();
        for (index, mutant) in batch {
            let head =
                String::from_utf8_lossy(&mutant.bytes[..mutant.bytes.len().min(120)]).into_owned();
            answers.push((index, head, tokio::spawn(exchange(server.addr(), mutant))));
        }
        for (index, head, answer) in answers {
            let answer = answer.await.expect("the exchange ran");
            *statuses.entry(status(&answer)).or_default() += 1;
            assert!(
                answer.is_empty() || status(&answer).is_some(),
                "seed {SEED}, request {index} ({head:?}): not an HTTP answer: {:?}",
                String::from_utf8_lossy(&answer[..answer.len().min(200)])
            );
        }
    }
    let normal = common::client()
        .get(format!("{}/after", server.url()))
        .send()
        .await
        .expect("the server still answers");
    assert_eq!(normal.status(), 200);
    settled(&server).await;
    let ledger = server.ledger();
    for (path, _) in service.seen() {
        assert!(under_base(&path), "seed {SEED}: {path} left the base path");
    }
    assert_eq!(
        ledger.upstream_answered,
        service.served(),
        "seed {SEED}: the ledger counts what the service served: {:?}",
        ledger.by_outcome
    );
    assert!(
        service.served() > 50,
        "seed {SEED}: enough reached the service to mean something (answers by status: {statuses:?})"
    );
    assert_eq!(PANICS.load(Ordering::SeqCst), 0, "no panic anywhere");
}
