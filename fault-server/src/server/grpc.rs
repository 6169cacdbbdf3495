//! A gRPC call's answer (grpc `doc/PROTOCOL-HTTP2.md`): the handler answers every request
//! as HTTP, and a request with `content-type: application/grpc` has that answer rewritten
//! here, so the faults, the capacity model and the application need not know gRPC.
//!
//! - a 200 becomes a unary response: HTTP 200, one length-prefixed message (the 200's
//!   JSON, uncompressed: a client that reads the message as bytes sees the ledger's
//!   answer), then trailers with `grpc-status: 0`;
//! - a scripted gRPC fault (`respond: [ { grpc: unavailable } ]`) becomes a
//!   Trailers-Only response with its code, message and pushback: HTTP 200 and one
//!   HEADERS frame that ends the stream, as a real server answers a call it fails early;
//! - any other status (over capacity, a bad body, a key in flight) becomes Trailers-Only
//!   with the code gRPC's `http-grpc-status-mapping.md` gives that status, which is what a
//!   gRPC client would make of the bare HTTP answer itself.

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use axum::body::{Body, Bytes};
use axum::http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::Response;
use bytes::{BufMut, BytesMut};
use hyper::body::Frame;

use crate::script::{GrpcStatus, Pushback};
use crate::wire::grpc::{self, MESSAGE, PUSHBACK, STATUS};

/// Marks the answer of a scripted gRPC fault, for [`answer`] to give its code.
#[derive(Clone, Copy)]
struct Scripted(GrpcStatus);

/// `response` (a status fault's HTTP answer) marked with the gRPC status to answer a
/// gRPC call with.
pub(super) fn scripted(mut response: Response, status: GrpcStatus) -> Response {
    response.extensions_mut().insert(Scripted(status));
    response
}

/// The gRPC answer to a call the handler answered `response`.
pub(super) fn answer(response: Response) -> Response {
    let (mut parts, body) = response.into_parts();
    if let Some(Scripted(status)) = parts.extensions.remove::<Scripted>() {
        let message = format!("injected fault: {}", grpc::label(status.code));
        return trailers_only(parts.headers, status.code, &message, status.pushback);
    }
    if parts.status != StatusCode::OK {
        let code = grpc::code_answering(parts.status.as_u16());
        let message = format!(
            "HTTP {} {}",
            parts.status.as_u16(),
            parts.status.canonical_reason().unwrap_or("")
        );
        return trailers_only(parts.headers, code, message.trim_end(), None);
    }
    parts.headers.remove(CONTENT_LENGTH);
    parts
        .headers
        .insert(CONTENT_TYPE, HeaderValue::from_static(grpc::CONTENT_TYPE));
    let body = Body::new(Unary {
        inner: body,
        message: BytesMut::new(),
        state: State::Reading,
    });
    Response::from_parts(parts, body)
}

/// A Trailers-Only answer: the status in the headers of an empty, ended stream. The
/// handler's own headers (`x-chaos-fault`, a scripted header) are kept beside it.
fn trailers_only(
    mut headers: HeaderMap,
    code: u8,
    message: &str,
    pushback: Option<Pushback>,
) -> Response {
    headers.remove(CONTENT_LENGTH);
    headers.remove(axum::http::header::RETRY_AFTER);
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(grpc::CONTENT_TYPE));
    headers.insert(
        HeaderName::from_static(STATUS),
        HeaderValue::from(u16::from(code)),
    );
    if let Ok(message) = HeaderValue::from_str(&percent_encode(message)) {
        headers.insert(HeaderName::from_static(MESSAGE), message);
    }
    match pushback {
        Some(Pushback::After(wait)) => {
            let ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
            headers.insert(HeaderName::from_static(PUSHBACK), HeaderValue::from(ms));
        }
        Some(Pushback::Stop) => {
            headers.insert(
                HeaderName::from_static(PUSHBACK),
                HeaderValue::from_static("-1"),
            );
        }
        None => {}
    }
    let mut response = Response::new(Body::empty());
    *response.headers_mut() = headers;
    response
}

/// `grpc-message`'s encoding: printable ASCII but `%` as it is, every other byte as
/// `%XX`.
fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if (0x20..=0x7e).contains(&byte) && byte != b'%' {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// A unary response's body: the inner body read whole, sent as one length-prefixed
/// message (flag 0: not compressed), then the trailers of a success.
struct Unary {
    inner: Body,
    message: BytesMut,
    state: State,
}

enum State {
    Reading,
    Trailers,
    Done,
}

impl hyper::body::Body for Unary {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = self.get_mut();
        loop {
            match this.state {
                State::Reading => match ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
                    Some(Ok(frame)) => {
                        if let Ok(data) = frame.into_data() {
                            this.message.extend_from_slice(&data);
                        }
                    }
                    Some(Err(error)) => {
                        this.state = State::Done;
                        return Poll::Ready(Some(Err(error)));
                    }
                    None => {
                        this.state = State::Trailers;
                        let message = std::mem::take(&mut this.message);
                        let len = u32::try_from(message.len()).unwrap_or(u32::MAX);
                        let mut framed = BytesMut::with_capacity(5 + message.len());
                        framed.put_u8(0);
                        framed.put_u32(len);
                        framed.extend_from_slice(&message);
                        return Poll::Ready(Some(Ok(Frame::data(framed.freeze()))));
                    }
                },
                State::Trailers => {
                    this.state = State::Done;
                    let mut trailers = HeaderMap::new();
                    trailers.insert(
                        HeaderName::from_static(STATUS),
                        HeaderValue::from_static("0"),
                    );
                    return Poll::Ready(Some(Ok(Frame::trailers(trailers))));
                }
                State::Done => return Poll::Ready(None),
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self.state, State::Done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_message_is_percent_encoded() {
        assert_eq!(percent_encode("over capacity"), "over capacity");
        assert_eq!(percent_encode("100% ünï\n"), "100%25 %C3%BCn%C3%AF%0A");
    }
}
