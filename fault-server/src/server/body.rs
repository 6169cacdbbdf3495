//! Reading a request body whole, within a size limit, telling the ways it can fail apart:
//! too large (413), malformed or cut off (400), or too slow for the accept loop's body
//! deadline (408). The fault handler and the control API both read bodies this way.

use std::future;
use std::pin::Pin;

use axum::body::{Body, Bytes};
use axum::http::StatusCode;
use hyper::body::Body as _;

use super::conn::BodyTimedOut;

/// Why a request body was not read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BodyError {
    /// Longer than the limit: announced by `Content-Length` (refused before a byte is
    /// read), or found while reading.
    #[error("the request body is larger than {limit} bytes")]
    TooLarge { limit: usize },
    /// Not a well-formed body (a bad chunk size, a `Content-Length` not met) or cut off
    /// by the client.
    #[error("the request body is malformed or was cut off")]
    Malformed,
    /// Did not arrive within the body deadline (a trickle).
    #[error("{0}")]
    TimedOut(BodyTimedOut),
}

impl BodyError {
    pub(crate) fn status(&self) -> StatusCode {
        match self {
            BodyError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            BodyError::Malformed => StatusCode::BAD_REQUEST,
            BodyError::TimedOut(_) => StatusCode::REQUEST_TIMEOUT,
        }
    }
}

/// Reads a whole body of at most `limit` bytes. Unlike `axum::body::to_bytes`, it tells
/// a body too large (413) from a malformed one (400), and refuses an announced length
/// above the limit without reading.
pub(crate) async fn read_body(mut body: Body, limit: usize) -> Result<Bytes, BodyError> {
    let hint = body.size_hint();
    if hint.exact() == Some(0) {
        return Ok(Bytes::new());
    }
    if hint.lower() > limit as u64 {
        return Err(BodyError::TooLarge { limit });
    }
    // `lower()` is at most `limit` here.
    let mut bytes = Vec::with_capacity(usize::try_from(hint.lower()).unwrap_or(limit));
    while let Some(frame) = future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
        let Ok(data) = frame.map_err(body_error)?.into_data() else {
            continue; // Trailers.
        };
        if bytes.len() + data.len() > limit {
            return Err(BodyError::TooLarge { limit });
        }
        bytes.extend_from_slice(&data);
    }
    Ok(Bytes::from(bytes))
}

/// Reads a whole body and drops it as it comes, whatever its length: the body of a
/// faulted request in front of an upstream, which never sees it. The body deadline
/// bounds how long this takes.
pub(crate) async fn discard_body(mut body: Body) -> Result<(), BodyError> {
    if body.is_end_stream() {
        return Ok(());
    }
    while let Some(frame) = future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
        frame.map_err(body_error)?;
    }
    Ok(())
}

/// What a failed body frame means: the accept loop's deadline, or a malformed body.
fn body_error(error: axum::Error) -> BodyError {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&error);
    while let Some(e) = source {
        if let Some(timed_out) = e.downcast_ref::<BodyTimedOut>() {
            return BodyError::TimedOut(*timed_out);
        }
        source = e.source();
    }
    BodyError::Malformed
}
