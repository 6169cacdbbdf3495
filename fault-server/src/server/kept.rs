//! The request headers the ledger keeps (`x-request-id`, `x-chaos-policy`,
//! `Idempotency-Key`), read and bounded before the script sees the request.

use std::ops::Deref;

use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};

use super::handler::{
    IDEMPOTENCY_KEY, IDEMPOTENCY_KEY_NAME, POLICY, POLICY_NAME, REQUEST_ID, REQUEST_ID_NAME,
};

/// The request headers the ledger keeps, checked by [`kept_headers`].
pub(super) struct Kept {
    pub(super) request_id: Option<Text>,
    pub(super) policy: Option<Text>,
    pub(super) key: Option<Text>,
}

/// A header value found to be UTF-8 text, kept as the value itself: a reference-counted
/// slice of the buffer hyper read the request into, so keeping it for the rest of the
/// request copies and allocates nothing (two `String`s a request cost the faultless
/// server about 2% of its throughput under wrk).
#[derive(Debug, Clone)]
pub(super) struct Text(HeaderValue);

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

/// Reads the headers the ledger keeps: each at most `max` bytes of UTF-8 text, and a key
/// not empty.
pub(super) fn kept_headers(headers: &HeaderMap, max: usize) -> Result<Kept, BadHeader> {
    let read = |header: &HeaderName, name: &'static str| {
        let Some(value) = headers.get(header) else {
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
    let key = match read(&IDEMPOTENCY_KEY_NAME, IDEMPOTENCY_KEY)? {
        Some(key) if key.is_empty() => {
            return Err(BadHeader::Empty {
                name: IDEMPOTENCY_KEY,
            });
        }
        key => key,
    };
    Ok(Kept {
        request_id: read(&REQUEST_ID_NAME, REQUEST_ID)?,
        policy: read(&POLICY_NAME, POLICY)?,
        key,
    })
}
