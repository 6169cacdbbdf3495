//! One attempt to the next hop: the request as it came, with the tier's own attempt
//! number, the chain above it and the caller's deadline, and the answer as it went.

use std::time::Duration;

use axum::body::Bytes;
use axum::http::HeaderMap;
use bytes::BytesMut;
use chaos_policy::{Outcome, Reply};

use fault_server::wire::{
    self, ATTEMPT, DEADLINE_MS, RETRY_ALLOWANCE, TRACEPARENT, UPSTREAM_ATTEMPTS,
};

use super::{MAX_ANSWER, Shared};
use crate::attempt::{classify, status_reply};

/// What the next hop answered: what it tells the tier's policy, and the headers and body
/// the tier passes upstream if it passes the answer on.
pub(super) struct Forwarded {
    /// The outcome, `Retry-After`, `x-chaos-no-retry` and the allowance left.
    pub(super) reply: Reply,
    /// The answer's headers, passed upstream but for hop-by-hop ones.
    pub(super) headers: HeaderMap,
    pub(super) body: Bytes,
}

impl Forwarded {
    fn failed(outcome: Outcome) -> Forwarded {
        Forwarded {
            reply: Reply::bare(outcome),
            headers: HeaderMap::new(),
            body: Bytes::new(),
        }
    }
}

/// Headers that belong to one connection, or that a tier sets itself for the next hop:
/// never copied across a hop.
pub(super) fn hop_by_hop(name: &str) -> bool {
    wire::is_hop_by_hop(name)
        || matches!(name, "host" | "content-length")
        || wire::PER_HOP.contains(&name)
}

/// What one forwarded attempt carries besides the request.
pub(super) struct Hop<'a> {
    pub(super) attempt: u32,
    pub(super) timeout: Option<Duration>,
    pub(super) chain: &'a str,
    /// The tier's own CLIENT span as the next hop's parent, when the tier traces.
    pub(super) traceparent: Option<&'a str>,
    /// The shared retry allowance the hops below may spend, when the chain shares one.
    pub(super) allowance: Option<u32>,
}

pub(super) async fn forward(
    shared: &Shared,
    parts: &axum::http::request::Parts,
    body: &Bytes,
    hop: Hop<'_>,
) -> Forwarded {
    let Hop {
        attempt,
        timeout,
        chain,
        traceparent,
        allowance,
    } = hop;
    let target = format!(
        "{}{}",
        shared.next,
        parts.uri.path_and_query().map_or("/", |p| p.as_str())
    );
    let method = reqwest::Method::from_bytes(parts.method.as_str().as_bytes())
        .unwrap_or(reqwest::Method::GET);
    let mut request = shared
        .http
        .request(method, target)
        .header(ATTEMPT, attempt.to_string());
    // End to end: the request kind's own headers, x-request-id, traceparent, ...
    for (name, value) in &parts.headers {
        // With a span of its own, the tier is the next hop's parent.
        let replaced = traceparent.is_some() && name == TRACEPARENT;
        if !hop_by_hop(name.as_str()) && !replaced {
            request = request.header(name.as_str(), value.as_bytes());
        }
    }
    if let Some(traceparent) = traceparent {
        request = request.header(TRACEPARENT, traceparent);
    }
    // After the `Via` fields it received (appended, not replacing them): the tier that
    // finds this entry in a request has been passed by it before.
    request = request.header(wire::VIA, shared.via.entry());
    if !chain.is_empty() {
        request = request.header(UPSTREAM_ATTEMPTS, chain);
    }
    if let Some(allowance) = allowance {
        request = request.header(RETRY_ALLOWANCE, allowance.to_string());
    }
    if let Some(timeout) = timeout {
        request = request
            .timeout(timeout)
            .header(DEADLINE_MS, wire::deadline_ms(timeout).to_string());
    }
    if !body.is_empty() {
        request = request.body(body.clone());
    }
    match request.send().await {
        Ok(response) => {
            let reply = status_reply(response.status().as_u16(), response.headers());
            let mut headers = HeaderMap::new();
            for (name, value) in response.headers() {
                if !hop_by_hop(name.as_str()) {
                    headers.append(name.clone(), value.clone());
                }
            }
            match read_capped(shared, response).await {
                Ok(body) => Forwarded {
                    reply,
                    headers,
                    body,
                },
                Err(outcome) => Forwarded::failed(outcome),
            }
        }
        Err(e) => Forwarded::failed(classify(&e)),
    }
}

/// The answer's body, chunk by chunk, at most [`MAX_ANSWER`] bytes: a longer one (an
/// endless chunked body, a `Content-Length` over the cap) is not read further and is a
/// [`Outcome::TruncatedBody`], the outcome of a body that did not arrive whole. The
/// attempt's timeout covers the read (reqwest's covers the body).
async fn read_capped(shared: &Shared, mut response: reqwest::Response) -> Result<Bytes, Outcome> {
    if response
        .content_length()
        .is_some_and(|n| n > MAX_ANSWER as u64)
    {
        return Err(Outcome::TruncatedBody);
    }
    let mut body = BytesMut::new();
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                if body.len() + chunk.len() > MAX_ANSWER {
                    shared.note_read(body.len());
                    return Err(Outcome::TruncatedBody);
                }
                body.extend_from_slice(&chunk);
            }
            Ok(None) => {
                shared.note_read(body.len());
                return Ok(body.freeze());
            }
            Err(e) => {
                shared.note_read(body.len());
                return Err(if e.is_timeout() {
                    Outcome::AttemptTimeout
                } else {
                    Outcome::TruncatedBody
                });
            }
        }
    }
}
