//! The handler's answers, as bytes on the wire: a 200's JSON body, an injected status
//! with its headers, a truncated response, a replay, a problem.

use axum::body::Body;
use axum::http::header::{CONTENT_LENGTH, CONTENT_TYPE, RETRY_AFTER};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::ledger::StoredResponse;
use crate::script::FaultResponse;
use crate::wire::{FAULT as FAULT_HEADER, REPLAYED as REPLAYED_HEADER};

pub(super) const JSON: &str = "application/json";

/// A 200's body (serialized by [`OkBody::to_json`]; serde's reading of it, in the tests,
/// is the reference).
#[cfg_attr(test, derive(Serialize))]
pub(super) struct OkBody<'a> {
    pub(super) ok: bool,
    pub(super) id: Option<&'a str>,
    pub(super) attempt: Option<u32>,
    #[cfg_attr(test, serde(skip_serializing_if = "Option::is_none"))]
    pub(super) effect: Option<u64>,
}

#[derive(Serialize)]
pub(super) struct FaultBody<'a> {
    pub(super) error: &'a str,
    pub(super) status: u16,
    pub(super) phase: &'a str,
}

impl OkBody<'_> {
    /// The body as JSON, the text `serde_json` writes for it, written directly into a
    /// buffer of exactly its length unless the id needs escaping: serde's generic writer
    /// took 1,100 instructions a request for these few fields, and `Bytes` takes a full
    /// `Vec` over as it is, where one with room to spare costs a second allocation.
    pub(super) fn to_json(&self) -> String {
        let mut out = String::with_capacity(self.plain_len());
        out.push_str(if self.ok {
            r#"{"ok":true,"id":"#
        } else {
            r#"{"ok":false,"id":"#
        });
        match self.id {
            Some(id) => push_json_string(&mut out, id),
            None => out.push_str("null"),
        }
        out.push_str(r#","attempt":"#);
        match self.attempt {
            Some(attempt) => push_number(&mut out, u64::from(attempt)),
            None => out.push_str("null"),
        }
        if let Some(effect) = self.effect {
            out.push_str(r#","effect":"#);
            push_number(&mut out, effect);
        }
        out.push('}');
        out
    }

    /// The length of the JSON when the id needs no escaping.
    fn plain_len(&self) -> usize {
        let ok = if self.ok { 4 } else { 5 };
        let id = self.id.map_or(4, |id| id.len() + 2);
        let attempt = self.attempt.map_or(4, |a| digits(u64::from(a)));
        let effect = self.effect.map_or(0, |e| r#","effect":"#.len() + digits(e));
        r#"{"ok":,"id":"#.len() + ok + id + r#","attempt":"#.len() + attempt + effect + 1
    }
}

fn digits(n: u64) -> usize {
    n.checked_ilog10().map_or(1, |d| d as usize + 1)
}

fn push_number(out: &mut String, n: u64) {
    let mut buf = [0u8; 20];
    let at = crate::wire::decimal(&mut buf, n);
    out.extend(buf[at..].iter().map(|&d| char::from(d)));
}

/// A JSON string, escaped as `serde_json` escapes it: quote, backslash and the control
/// characters, the common ones by letter and the rest as `\u00xx`.
fn push_json_string(out: &mut String, text: &str) {
    out.push('"');
    let mut plain = 0;
    for (at, byte) in text.bytes().enumerate() {
        let short = match byte {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0x08 => "\\b",
            0x0c => "\\f",
            0x00..=0x1f => "",
            _ => continue,
        };
        // Every escaped byte is ASCII, so `at` is a character boundary.
        out.push_str(&text[plain..at]);
        if short.is_empty() {
            out.push_str("\\u00");
            out.push(char::from(HEX[usize::from(byte >> 4)]));
            out.push(char::from(HEX[usize::from(byte & 0xf)]));
        } else {
            out.push_str(short);
        }
        plain = at + 1;
    }
    out.push_str(&text[plain..]);
    out.push('"');
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// The body of a normal response to a request without `x-request-id` nor
/// `x-chaos-attempt`, and without a side effect: the hot path of a benchmark.
pub(super) const ANONYMOUS_OK: &str = r#"{"ok":true,"id":null,"attempt":null}"#;

pub(super) trait WithStatus {
    fn with_status(self, status: StatusCode) -> Self;
}

impl WithStatus for Response {
    fn with_status(mut self, status: StatusCode) -> Response {
        *self.status_mut() = status;
        self
    }
}

/// A 200 answer with a JSON body.
pub(super) fn json(body: Body) -> Response {
    let mut response = Response::new(body);
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(JSON));
    response
}

pub(super) fn status_response(fault: &FaultResponse, phase: &str) -> Response {
    let status = StatusCode::from_u16(fault.status).unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
    let mut headers = HeaderMap::new();
    let body = match &fault.body {
        Some(body) => {
            headers.insert(
                CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            );
            body.clone()
        }
        None => {
            headers.insert(CONTENT_TYPE, HeaderValue::from_static(JSON));
            serde_json::to_string(&FaultBody {
                error: "injected fault",
                status: fault.status,
                phase,
            })
            .unwrap_or_default()
        }
    };
    if let Some(secs) = fault.retry_after_secs() {
        headers.insert(RETRY_AFTER, HeaderValue::from(secs));
    }
    if let Ok(value) = HeaderValue::from_str(phase) {
        headers.insert(HeaderName::from_static(FAULT_HEADER), value);
    }
    for (name, value) in &fault.headers {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            headers.insert(name, value);
        }
    }
    (status, headers, body).into_response()
}

/// A status line, headers announcing the full body, and the first half of it.
pub(super) fn truncated_bytes(
    fault: &FaultResponse,
    phase: &str,
    id: Option<&str>,
    attempt: Option<u32>,
) -> Vec<u8> {
    let status = StatusCode::from_u16(fault.status).unwrap_or(StatusCode::OK);
    let (content_type, body) = match &fault.body {
        Some(body) if !body.is_empty() => ("text/plain; charset=utf-8", body.clone()),
        _ => (
            JSON,
            OkBody {
                ok: true,
                id,
                attempt,
                effect: None,
            }
            .to_json(),
        ),
    };
    let sent = body.len() / 2;
    let mut out = format!(
        "HTTP/1.1 {} {}\r\n{CONTENT_TYPE}: {content_type}\r\n{CONTENT_LENGTH}: {}\r\n{FAULT_HEADER}: {}\r\n",
        status.as_u16(),
        status.canonical_reason().unwrap_or("Status"),
        body.len(),
        sanitize_header_value(phase),
    );
    for (name, value) in &fault.headers {
        if name.as_str() != "content-length" {
            out.push_str(&format!("{name}: {}\r\n", sanitize_header_value(value)));
        }
    }
    out.push_str("\r\n");
    let mut bytes = out.into_bytes();
    bytes.extend_from_slice(&body.as_bytes()[..sent]);
    bytes
}

fn sanitize_header_value(value: &str) -> String {
    value
        .chars()
        .filter(|c| *c == '\t' || (' '..='~').contains(c))
        .collect()
}

pub(super) fn replay(stored: &StoredResponse) -> Response {
    let status = StatusCode::from_u16(stored.status).unwrap_or(StatusCode::OK);
    (
        status,
        [
            (CONTENT_TYPE, HeaderValue::from_static(JSON)),
            (
                HeaderName::from_static(REPLAYED_HEADER),
                HeaderValue::from_static("true"),
            ),
        ],
        Body::from(stored.body.clone()),
    )
        .into_response()
}

pub(super) fn problem(status: StatusCode, detail: &str) -> Response {
    let body = serde_json::json!({ "error": detail, "status": status.as_u16() }).to_string();
    (status, [(CONTENT_TYPE, JSON)], body).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ok_body_is_serde_json_s_text_in_a_buffer_of_its_exact_length() {
        let ascii: String = (0..=0x7fu8).map(char::from).collect();
        let ids = [
            None,
            Some(""),
            Some("bench-1-1"),
            Some("ünïcode-✓"),
            Some("quote\"back\\slash\nnewline\u{1}"),
            Some(ascii.as_str()),
        ];
        for id in ids {
            for attempt in [None, Some(0), Some(7), Some(10), Some(u32::MAX)] {
                for effect in [None, Some(0), Some(99), Some(100), Some(u64::MAX)] {
                    let body = OkBody {
                        ok: attempt != Some(7),
                        id,
                        attempt,
                        effect,
                    };
                    let json = body.to_json();
                    assert_eq!(json, serde_json::to_string(&body).expect("serializes"));
                    let escaped =
                        id.is_some_and(|id| id.chars().any(|c| c < ' ' || "\"\\".contains(c)));
                    if !escaped {
                        assert_eq!(json.len(), json.capacity(), "{json}");
                    }
                }
            }
        }
    }
}
