//! The request headers the ledger keeps (`x-request-id`, `x-chaos-policy`,
//! `Idempotency-Key`), read and bounded before the script sees the request.

use std::ops::Deref;

use axum::http::{HeaderMap, HeaderValue, StatusCode};

use axum::http::HeaderName;
use axum::http::header::CONTENT_TYPE;

use crate::wire::{
    ATTEMPT, AWS_REQUEST, ENVOY_ATTEMPT_COUNT, IDEMPOTENCY_KEY, POLICY, REQUEST_ID, StatedAttempt,
    grpc,
};

// The names read on every request, made once: a lookup by `&str` parses and checks the
// name each time.
const REQUEST_ID_NAME: HeaderName = HeaderName::from_static(REQUEST_ID);
const POLICY_NAME: HeaderName = HeaderName::from_static(POLICY);
const IDEMPOTENCY_KEY_NAME: HeaderName = HeaderName::from_static(IDEMPOTENCY_KEY);
const ATTEMPT_NAME: HeaderName = HeaderName::from_static(ATTEMPT);
const PREVIOUS_ATTEMPTS_NAME: HeaderName = HeaderName::from_static(grpc::PREVIOUS_ATTEMPTS);
const AWS_REQUEST_NAME: HeaderName = HeaderName::from_static(AWS_REQUEST);
const ENVOY_ATTEMPT_COUNT_NAME: HeaderName = HeaderName::from_static(ENVOY_ATTEMPT_COUNT);

/// The request headers the ledger keeps, checked by [`kept_headers`].
pub(super) struct Kept {
    pub(super) request_id: Option<Text>,
    pub(super) policy: Option<Text>,
    pub(super) key: Option<Text>,
    /// The attempt number the request states ([`StatedAttempt::number`]: `x-chaos-attempt`,
    /// an AWS SDK's, Envoy's, or gRPC's previous attempts plus one).
    pub(super) attempt: Option<u32>,
    /// Whether the request is a gRPC call (`content-type: application/grpc`).
    pub(super) grpc: bool,
}

/// A header value found to be UTF-8 text, kept as the value itself: a reference-counted
/// slice of the buffer hyper read the request into, so keeping it for the rest of the
/// request copies and allocates nothing (two `String`s a request cost the faultless
/// server about 2% of its throughput under wrk).
#[derive(Debug, Clone)]
pub(super) struct Text(HeaderValue);

impl Text {
    /// A logical id the ledger made (a header's value behind a prefix, or a guess's id),
    /// kept as a request id is. `None` for text no header value can hold.
    pub(super) fn made(id: String) -> Option<Text> {
        HeaderValue::try_from(id).ok().map(Text)
    }
}

impl Deref for Text {
    type Target = str;

    fn deref(&self) -> &str {
        // Checked when made: reading it again costs a few nanoseconds and no `unsafe`.
        std::str::from_utf8(self.0.as_bytes()).unwrap_or_default()
    }
}

/// Why a request was refused before the script saw it.
#[derive(Debug, thiserror::Error)]
pub(super) enum BadHeader {
    /// Longer than the ledger keeps (431, RFC 6585: the body names the field).
    #[error("{name} is {len} bytes long; at most {max} are accepted")]
    TooLong {
        name: &'static str,
        len: usize,
        max: usize,
    },
    /// Not UTF-8 (400): the ledger keeps text, and a lossy reading could merge two ids.
    #[error("{name} is not UTF-8 text")]
    NotUtf8 { name: &'static str },
    /// An empty `Idempotency-Key` (400): a key names a request, "" names none.
    #[error("{name} is empty")]
    Empty { name: &'static str },
}

impl BadHeader {
    pub(super) fn status(&self) -> StatusCode {
        match self {
            BadHeader::TooLong { .. } => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            BadHeader::NotUtf8 { .. } | BadHeader::Empty { .. } => StatusCode::BAD_REQUEST,
        }
    }
}

/// A header's value as text, when it is.
fn text(value: Option<&HeaderValue>) -> Option<&str> {
    value.and_then(|v| v.to_str().ok())
}

/// Reads the headers the ledger keeps, each at most `max` bytes of UTF-8 text and a key
/// not empty, the headers that state an attempt number ([`StatedAttempt`]) and the content
/// type that makes a gRPC call: the first value of each, in one pass over the
/// headers (a lookup by name hashes the name and probes: four of them cost more than
/// looking once at the few headers a request has).
pub(super) fn kept_headers(headers: &HeaderMap, max: usize) -> Result<Kept, BadHeader> {
    let (mut request_id, mut policy, mut key, mut attempt) = (None, None, None, None);
    let (mut content_type, mut previous, mut aws, mut envoy) = (None, None, None, None);
    for (name, value) in headers {
        let first = if *name == REQUEST_ID_NAME {
            &mut request_id
        } else if *name == POLICY_NAME {
            &mut policy
        } else if *name == IDEMPOTENCY_KEY_NAME {
            &mut key
        } else if *name == ATTEMPT_NAME {
            &mut attempt
        } else if *name == CONTENT_TYPE {
            &mut content_type
        } else if *name == PREVIOUS_ATTEMPTS_NAME {
            &mut previous
        } else if *name == AWS_REQUEST_NAME {
            &mut aws
        } else if *name == ENVOY_ATTEMPT_COUNT_NAME {
            &mut envoy
        } else {
            continue;
        };
        first.get_or_insert(value);
    }
    let read = |value: Option<&HeaderValue>, name: &'static str| {
        let Some(value) = value else {
            return Ok(None);
        };
        if value.len() > max {
            return Err(BadHeader::TooLong {
                name,
                len: value.len(),
                max,
            });
        }
        match std::str::from_utf8(value.as_bytes()) {
            Ok(_) => Ok(Some(Text(value.clone()))),
            Err(_) => Err(BadHeader::NotUtf8 { name }),
        }
    };
    let key = match read(key, IDEMPOTENCY_KEY)? {
        Some(key) if key.is_empty() => {
            return Err(BadHeader::Empty {
                name: IDEMPOTENCY_KEY,
            });
        }
        key => key,
    };
    let grpc = content_type.is_some_and(|c| grpc::is_grpc(c.as_bytes()));
    let attempt = StatedAttempt {
        chaos: text(attempt),
        aws: text(aws),
        envoy: text(envoy),
        grpc_previous: text(previous),
        grpc_call: grpc,
    }
    .number();
    Ok(Kept {
        // A blank id names no request, as it names none to the judge (`group::claim`):
        // otherwise every request sending `x-request-id:` empty would be one logical
        // request.
        request_id: read(request_id, REQUEST_ID)?.filter(|id| !id.trim().is_empty()),
        policy: read(policy, POLICY)?,
        key,
        attempt,
        grpc,
    })
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn headers(pairs: &[(&'static str, &[u8])]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            let value = HeaderValue::from_bytes(value).expect("a valid header value");
            map.append(*name, value);
        }
        map
    }

    #[test]
    fn the_first_value_of_each_kept_header_is_read_in_one_pass() {
        let map = headers(&[
            ("host", b"x"),
            ("x-request-id", b"first"),
            ("x-chaos-attempt", b" 3 "),
            ("x-request-id", b"second"),
            ("x-chaos-policy", b"naive"),
            ("x-chaos-attempt", b"4"),
        ]);
        let kept = kept_headers(&map, 256).expect("fine headers");
        assert_eq!(kept.request_id.as_deref(), Some("first"));
        assert_eq!(kept.policy.as_deref(), Some("naive"));
        assert!(kept.key.is_none());
        assert_eq!(kept.attempt, Some(3));
        let none = kept_headers(&headers(&[("x-chaos-attempt", b"three")]), 256)
            .expect("an attempt that is not a number is no attempt");
        assert_eq!(none.attempt, None);
    }

    #[test]
    fn a_grpc_call_numbers_its_attempt_from_grpc_previous_rpc_attempts() {
        let attempt = |pairs: &[(&'static str, &[u8])]| {
            let kept = kept_headers(&headers(pairs), 256).expect("fine headers");
            (kept.grpc, kept.attempt)
        };
        let grpc: (&'static str, &[u8]) = ("content-type", b"application/grpc+proto");
        assert_eq!(attempt(&[grpc]), (true, Some(1)));
        assert_eq!(
            attempt(&[grpc, ("grpc-previous-rpc-attempts", b"2")]),
            (true, Some(3))
        );
        assert_eq!(
            attempt(&[
                grpc,
                ("grpc-previous-rpc-attempts", b"2"),
                ("x-chaos-attempt", b"7")
            ]),
            (true, Some(7)),
            "the harness's own number wins"
        );
        assert_eq!(
            attempt(&[
                ("content-type", b"application/grpcx"),
                ("grpc-previous-rpc-attempts", b"2")
            ]),
            (false, Some(3)),
            "not a gRPC call, but the header says two attempts came before"
        );
    }

    /// The drift issue 46 found: the fault draw's seed read `x-chaos-attempt: 0` as
    /// attempt 0 (the sticky seed) and `grpc-previous-rpc-attempts` only on a gRPC call,
    /// while the ledger's judge read neither so. One rule now; the two readers agree.
    #[test]
    fn the_seed_and_the_ledger_read_one_attempt_number() {
        let cases: [&[(&'static str, &[u8])]; 8] = [
            &[("x-chaos-attempt", b"0")],
            &[("x-chaos-attempt", b"2")],
            &[("grpc-previous-rpc-attempts", b"1")],
            &[("content-type", b"application/grpc")],
            &[("amz-sdk-request", b"attempt=3; max=3")],
            &[("x-envoy-attempt-count", b"2")],
            &[("x-chaos-attempt", b"0"), ("x-envoy-attempt-count", b"4")],
            &[],
        ];
        for pairs in cases {
            let map = headers(pairs);
            let kept = kept_headers(&map, 256).expect("fine headers");
            assert_eq!(
                kept.attempt,
                crate::ledger::group::stated_attempt(&map),
                "{pairs:?}"
            );
        }
        let zero = kept_headers(&headers(&[("x-chaos-attempt", b"0")]), 256).expect("fine");
        assert_eq!(zero.attempt, None, "attempts count from 1");
    }

    #[test]
    fn a_bad_kept_header_is_refused_key_first() {
        let refused = |pairs: &[(&'static str, &[u8])]| {
            kept_headers(&headers(pairs), 8)
                .err()
                .map(|bad| bad.to_string())
        };
        assert_eq!(
            refused(&[("x-request-id", b"nine-long")]).as_deref(),
            Some("x-request-id is 9 bytes long; at most 8 are accepted")
        );
        assert_eq!(
            refused(&[("x-chaos-policy", b"\xff")]).as_deref(),
            Some("x-chaos-policy is not UTF-8 text")
        );
        assert_eq!(
            refused(&[("x-request-id", b"nine-long"), ("idempotency-key", b"")]).as_deref(),
            Some("idempotency-key is empty")
        );
        assert_eq!(
            refused(&[("x-request-id", b"ok"), ("x-chaos-attempt", b"\xff")]),
            None
        );
    }
}
