//! HTTP/1.1 to the upstream, without IO: a request head written from the client's parsed
//! request, a response head parsed, and a response body's framing decoded. The pool
//! (`pool.rs`) moves the bytes; everything here takes a buffer and gives data back, so
//! the tests drive it byte by byte.
//!
//! Why not hyper's client: the proxy needs only a request written once and a response read
//! once per connection at a time, and hyper's client connection is a dispatcher behind two
//! channels (the request goes in through one, the answer comes back through another, the
//! body through a third), polled through layers built for every case. Measured against
//! nginx's `proxy_pass` (docs/benchmarks.md), that machinery was a tenth of the proxy's
//! cost a request. What is written here is what RFC 9112 asks of a client that forwards:
//! the head as it came (less the hop-by-hop headers, removed before), the body framed by
//! its `Content-Length` or chunked, and the response's body read by the rules of §6.3.

use std::mem::MaybeUninit;

use axum::body::Bytes;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Version};
use bytes::BytesMut;

/// The most header fields a response may carry: hyper's default, as for requests
/// (`config::MAX_HEADERS`).
const MAX_HEADERS: usize = 100;

/// The longest response head read: the server's own limit for request heads
/// (`config::MAX_HEADER_BYTES`, 400 KiB).
pub(super) const MAX_HEAD: usize = super::super::config::MAX_HEADER_BYTES;

/// The longest chunk-size line (with its extensions) and trailer section taken.
const MAX_CHUNK_LINE: usize = 4096;
const MAX_TRAILERS: usize = 64 * 1024;

/// Why the upstream's bytes are not HTTP/1.1.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum H1Error {
    #[error("the upstream's response head is malformed ({0})")]
    Head(&'static str),
    #[error("the upstream's response head is larger than {MAX_HEAD} bytes")]
    HeadTooLarge,
    #[error("the upstream's chunked body is malformed ({0})")]
    Chunked(&'static str),
    #[error("the upstream closed the connection before the end of the response body")]
    Incomplete,
}

/// Writes the request head: the request line in origin form, every header as it is in
/// the map, and `Transfer-Encoding: chunked` when the body has no length of its own.
pub(super) fn encode_head(
    out: &mut Vec<u8>,
    method: &Method,
    target: &str,
    headers: &HeaderMap,
    chunked: bool,
) {
    out.clear();
    out.extend_from_slice(method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    for (name, value) in headers {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if chunked {
        out.extend_from_slice(b"transfer-encoding: chunked\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

/// The size line of a chunk of `len` bytes (`1a2b\r\n`).
pub(super) fn chunk_size_line(len: usize) -> Bytes {
    Bytes::from(format!("{len:x}\r\n"))
}

/// What ends a chunked body: the last chunk and an empty trailer section.
pub(super) const LAST_CHUNK: &[u8] = b"0\r\n\r\n";

/// A response head, parsed.
#[derive(Debug)]
pub(super) struct Head {
    pub(super) status: StatusCode,
    pub(super) headers: HeaderMap,
    /// How its body is delimited.
    pub(super) body: Decoder,
    /// Whether the connection may serve another request once this response is read
    /// (HTTP/1.1 without `Connection: close`, and a body with an end of its own).
    pub(super) keep_alive: bool,
}

/// Parses a response head at the front of `buf`, taking it (and any interim `1xx`
/// response before it) off: `None` until a whole head is there. The header values are
/// slices of the buffer's bytes, not copies.
pub(super) fn parse_head(buf: &mut BytesMut, method: &Method) -> Result<Option<Head>, H1Error> {
    loop {
        let mut slots = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
        let mut response = httparse::Response::new(&mut []);
        let parsed = httparse::ParserConfig::default()
            .parse_response_with_uninit_headers(&mut response, buf, &mut slots)
            .map_err(|e| match e {
                httparse::Error::TooManyHeaders => H1Error::Head("more than 100 header fields"),
                httparse::Error::Status => H1Error::Head("bad status"),
                httparse::Error::Version => H1Error::Head("bad version"),
                _ => H1Error::Head("bad header"),
            })?;
        let httparse::Status::Complete(len) = parsed else {
            if buf.len() > MAX_HEAD {
                return Err(H1Error::HeadTooLarge);
            }
            return Ok(None);
        };
        let code = response.code.ok_or(H1Error::Head("no status"))?;
        let status = StatusCode::from_u16(code).map_err(|_| H1Error::Head("bad status"))?;
        let version = match response.version {
            Some(1) => Version::HTTP_11,
            _ => Version::HTTP_10,
        };
        // Where each name and value lies in the head, to slice them out of it once it
        // is taken off the buffer.
        let base = buf.as_ptr() as usize;
        let mut fields = Vec::with_capacity(response.headers.len());
        for header in response.headers.iter() {
            let name = HeaderName::from_bytes(header.name.as_bytes())
                .map_err(|_| H1Error::Head("bad header name"))?;
            let start = header.value.as_ptr() as usize - base;
            fields.push((name, start, start + header.value.len()));
        }
        let head = buf.split_to(len).freeze();
        if status.is_informational() && status != StatusCode::SWITCHING_PROTOCOLS {
            // 100 Continue, 103 Early Hints: the response follows.
            continue;
        }
        let mut headers = HeaderMap::with_capacity(fields.len());
        for (name, start, end) in fields {
            let value = HeaderValue::from_maybe_shared(head.slice(start..end))
                .map_err(|_| H1Error::Head("bad header value"))?;
            headers.append(name, value);
        }
        let body = framing(method, status, &headers)?;
        let close = connection_close(&headers);
        // After a 101 the connection speaks another protocol: never used again.
        let keep_alive = version == Version::HTTP_11
            && !close
            && !matches!(body, Decoder::Close)
            && status != StatusCode::SWITCHING_PROTOCOLS;
        return Ok(Some(Head {
            status,
            headers,
            body,
            keep_alive,
        }));
    }
}

/// Whether `Connection` says `close`.
fn connection_close(headers: &HeaderMap) -> bool {
    headers
        .get_all(axum::http::header::CONNECTION)
        .iter()
        .flat_map(|v| v.as_bytes().split(|b| *b == b','))
        .any(|token| token.trim_ascii().eq_ignore_ascii_case(b"close"))
}

/// How a response's body is delimited (RFC 9112 §6.3): none after HEAD and for 1xx,
/// 204 and 304; chunked when `Transfer-Encoding` ends in `chunked`; until the connection
/// closes for any other `Transfer-Encoding`; by `Content-Length`; else until the close.
fn framing(method: &Method, status: StatusCode, headers: &HeaderMap) -> Result<Decoder, H1Error> {
    if method == Method::HEAD
        || status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
    {
        return Ok(Decoder::Length(0));
    }
    if let Some(last) = headers
        .get_all(axum::http::header::TRANSFER_ENCODING)
        .iter()
        .flat_map(|v| v.as_bytes().split(|b| *b == b','))
        .map(<[u8]>::trim_ascii)
        .rfind(|coding| !coding.is_empty())
    {
        return Ok(if last.eq_ignore_ascii_case(b"chunked") {
            Decoder::Chunked(Chunk::Size)
        } else {
            Decoder::Close
        });
    }
    let mut length = None;
    for value in headers.get_all(axum::http::header::CONTENT_LENGTH) {
        for part in value.as_bytes().split(|b| *b == b',') {
            let part = std::str::from_utf8(part.trim_ascii())
                .ok()
                .filter(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|p| p.parse::<u64>().ok())
                .ok_or(H1Error::Head("bad content-length"))?;
            if length.is_some_and(|l| l != part) {
                return Err(H1Error::Head("content-lengths that differ"));
            }
            length = Some(part);
        }
    }
    Ok(length.map_or(Decoder::Close, Decoder::Length))
}

/// Where a chunked body is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Chunk {
    /// At a chunk-size line.
    Size,
    /// In a chunk's data, this many bytes left.
    Data(u64),
    /// At the CRLF after a chunk's data.
    DataEnd,
    /// In the trailer section, this many bytes of it read.
    Trailers(usize),
}

/// A response body's framing, as it is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Decoder {
    /// This many bytes left.
    Length(u64),
    Chunked(Chunk),
    /// Everything until the connection closes.
    Close,
    /// Read to its end.
    Done,
}

/// What the decoder made of the buffer.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Decoded {
    /// Body data, taken off the buffer.
    Data(Bytes),
    /// More bytes are needed.
    More,
    /// The body ended (what is left in the buffer is not its).
    End,
}

impl Decoder {
    /// Whether the body has ended.
    pub(super) fn is_done(&self) -> bool {
        matches!(self, Decoder::Done | Decoder::Length(0))
    }

    /// The body's length left, when it is known.
    pub(super) fn remaining(&self) -> Option<u64> {
        match self {
            Decoder::Length(n) => Some(*n),
            Decoder::Done => Some(0),
            _ => None,
        }
    }

    /// Takes the next piece of the body off `buf`; `eof`: the connection has closed and
    /// `buf` is all there will be.
    pub(super) fn decode(&mut self, buf: &mut BytesMut, eof: bool) -> Result<Decoded, H1Error> {
        loop {
            match *self {
                Decoder::Done => return Ok(Decoded::End),
                Decoder::Length(0) => {
                    *self = Decoder::Done;
                    return Ok(Decoded::End);
                }
                Decoder::Length(left) => {
                    return if buf.is_empty() {
                        if eof {
                            Err(H1Error::Incomplete)
                        } else {
                            Ok(Decoded::More)
                        }
                    } else {
                        let take = usize::try_from(left).unwrap_or(usize::MAX).min(buf.len());
                        *self = Decoder::Length(left - take as u64);
                        Ok(Decoded::Data(buf.split_to(take).freeze()))
                    };
                }
                Decoder::Close => {
                    return if !buf.is_empty() {
                        Ok(Decoded::Data(buf.split().freeze()))
                    } else if eof {
                        *self = Decoder::Done;
                        Ok(Decoded::End)
                    } else {
                        Ok(Decoded::More)
                    };
                }
                Decoder::Chunked(chunk) => match chunked(chunk, buf)? {
                    Step::Next(next) => *self = Decoder::Chunked(next),
                    Step::Data(data, next) => {
                        *self = Decoder::Chunked(next);
                        return Ok(Decoded::Data(data));
                    }
                    Step::End => {
                        *self = Decoder::Done;
                        return Ok(Decoded::End);
                    }
                    Step::More if eof => return Err(H1Error::Incomplete),
                    Step::More => return Ok(Decoded::More),
                },
            }
        }
    }
}

/// One step through a chunked body.
enum Step {
    Next(Chunk),
    Data(Bytes, Chunk),
    More,
    End,
}

fn chunked(chunk: Chunk, buf: &mut BytesMut) -> Result<Step, H1Error> {
    Ok(match chunk {
        Chunk::Size => {
            let Some(end) = buf.iter().position(|b| *b == b'\n') else {
                if buf.len() > MAX_CHUNK_LINE {
                    return Err(H1Error::Chunked("chunk-size line too long"));
                }
                return Ok(Step::More);
            };
            let line = buf.split_to(end + 1);
            let line = line
                .strip_suffix(b"\r\n")
                .ok_or(H1Error::Chunked("chunk-size line without CRLF"))?;
            let digits = line
                .split(|b| *b == b';')
                .next()
                .map(<[u8]>::trim_ascii)
                .filter(|d| !d.is_empty() && d.len() <= 16)
                .ok_or(H1Error::Chunked("bad chunk size"))?;
            let size = std::str::from_utf8(digits)
                .ok()
                .and_then(|d| u64::from_str_radix(d, 16).ok())
                .ok_or(H1Error::Chunked("bad chunk size"))?;
            Step::Next(if size == 0 {
                Chunk::Trailers(0)
            } else {
                Chunk::Data(size)
            })
        }
        Chunk::Data(left) => {
            if buf.is_empty() {
                return Ok(Step::More);
            }
            let take = usize::try_from(left).unwrap_or(usize::MAX).min(buf.len());
            let data = buf.split_to(take).freeze();
            let left = left - take as u64;
            Step::Data(
                data,
                if left == 0 {
                    Chunk::DataEnd
                } else {
                    Chunk::Data(left)
                },
            )
        }
        Chunk::DataEnd => {
            if buf.len() < 2 {
                return Ok(Step::More);
            }
            if &buf[..2] != b"\r\n" {
                return Err(H1Error::Chunked("chunk data without CRLF"));
            }
            let _ = buf.split_to(2);
            Step::Next(Chunk::Size)
        }
        Chunk::Trailers(read) => {
            // Trailer fields are dropped (as nginx drops them): only the empty line ends.
            let Some(end) = buf.iter().position(|b| *b == b'\n') else {
                if read + buf.len() > MAX_TRAILERS {
                    return Err(H1Error::Chunked("trailers too long"));
                }
                return Ok(Step::More);
            };
            let line = buf.split_to(end + 1);
            if &line[..] == b"\r\n" {
                Step::End
            } else {
                Step::Next(Chunk::Trailers(read + line.len()))
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(bytes: &str, method: Method) -> Result<Option<Head>, H1Error> {
        parse_head(&mut BytesMut::from(bytes), &method)
    }

    /// The whole body of `wire` under `decoder`, fed `step` bytes at a time, and what was
    /// left after it.
    fn body(decoder: Decoder, wire: &[u8], step: usize) -> Result<(Vec<u8>, Vec<u8>), H1Error> {
        let mut decoder = decoder;
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        let mut fed = 0;
        loop {
            let eof = fed == wire.len();
            match decoder.decode(&mut buf, eof)? {
                Decoded::Data(data) => out.extend_from_slice(&data),
                Decoded::End => return Ok((out, buf.to_vec())),
                Decoded::More => {
                    let next = (fed + step).min(wire.len());
                    buf.extend_from_slice(&wire[fed..next]);
                    fed = next;
                }
            }
        }
    }

    #[test]
    fn the_request_head_is_written_as_it_came() {
        let mut headers = HeaderMap::new();
        headers.insert("host", HeaderValue::from_static("127.0.0.1:9"));
        headers.append("x-a", HeaderValue::from_static("1"));
        headers.append("x-a", HeaderValue::from_static("2"));
        let mut out = Vec::new();
        encode_head(&mut out, &Method::POST, "/p?q=1", &headers, true);
        assert_eq!(
            String::from_utf8(out).expect("text"),
            "POST /p?q=1 HTTP/1.1\r\nhost: 127.0.0.1:9\r\nx-a: 1\r\nx-a: 2\r\ntransfer-encoding: chunked\r\n\r\n"
        );
        assert_eq!(&chunk_size_line(4096)[..], b"1000\r\n");
    }

    #[test]
    fn a_head_is_taken_off_the_buffer_with_its_framing() {
        let mut buf =
            BytesMut::from("HTTP/1.1 201 Created\r\nContent-Length: 5\r\nX-A: b\r\n\r\nhello");
        let head = parse_head(&mut buf, &Method::GET)
            .expect("parses")
            .expect("whole");
        assert_eq!(head.status, StatusCode::CREATED);
        assert_eq!(head.headers["x-a"], "b");
        assert_eq!(head.body, Decoder::Length(5));
        assert!(head.keep_alive);
        assert_eq!(&buf[..], b"hello");
    }

    #[test]
    fn an_incomplete_head_waits_and_interim_responses_are_skipped() {
        assert!(
            head("HTTP/1.1 200 OK\r\nContent-Le", Method::GET)
                .expect("ok")
                .is_none()
        );
        let head = head(
            "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
            Method::GET,
        )
        .expect("parses")
        .expect("whole");
        assert_eq!(head.status, StatusCode::OK);
        assert!(head.headers.get("link").is_none());
    }

    #[test]
    fn framing_follows_rfc_9112() {
        let framing = |text: &str, method: Method| {
            head(text, method).map(|h| h.map(|h| (h.body, h.keep_alive)))
        };
        let ok = |text: &str| framing(text, Method::GET).expect("parses").expect("whole");
        assert_eq!(
            ok("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"),
            (Decoder::Chunked(Chunk::Size), true)
        );
        assert_eq!(
            ok("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n").0,
            Decoder::Chunked(Chunk::Size)
        );
        assert_eq!(
            ok("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n"),
            (Decoder::Close, false)
        );
        assert_eq!(ok("HTTP/1.1 200 OK\r\n\r\n"), (Decoder::Close, false));
        assert_eq!(
            ok("HTTP/1.1 200 OK\r\nContent-Length: 3, 3\r\n\r\n").0,
            Decoder::Length(3)
        );
        assert_eq!(
            ok("HTTP/1.1 204 No Content\r\n\r\n"),
            (Decoder::Length(0), true)
        );
        assert_eq!(
            ok("HTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\n\r\n").0,
            Decoder::Length(0)
        );
        assert!(
            !ok("HTTP/1.1 200 OK\r\nContent-Length: 9\r\nConnection: keep-alive, close\r\n\r\n").1
        );
        assert!(!ok("HTTP/1.0 200 OK\r\nContent-Length: 9\r\n\r\n").1);
        let after_head = framing("HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n", Method::HEAD);
        assert_eq!(
            after_head.expect("parses").expect("whole").0,
            Decoder::Length(0)
        );
        for bad in [
            "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: +1\r\n\r\n",
            "HTTP/1.1 2x0 OK\r\n\r\n",
            "NOT HTTP\r\n\r\n",
        ] {
            assert!(framing(bad, Method::GET).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_head_too_large_is_refused() {
        let text = format!("HTTP/1.1 200 OK\r\nx-big: {}", "a".repeat(MAX_HEAD));
        assert_eq!(head(&text, Method::GET).err(), Some(H1Error::HeadTooLarge));
        let many: String = (0..101).map(|i| format!("x-{i}: 1\r\n")).collect();
        let text = format!("HTTP/1.1 200 OK\r\n{many}\r\n");
        assert!(head(&text, Method::GET).is_err(), "more than 100 fields");
    }

    #[test]
    fn a_body_of_known_length_ends_at_its_length_whatever_the_reads() {
        for step in [1, 3, 1000] {
            let (data, left) = body(Decoder::Length(5), b"helloNEXT", step).expect("decodes");
            assert_eq!(data, b"hello");
            assert!(left.is_empty() || b"NEXT".starts_with(&left), "{left:?}");
        }
        assert_eq!(
            body(Decoder::Length(5), b"hel", 2).err(),
            Some(H1Error::Incomplete)
        );
        assert_eq!(
            body(Decoder::Close, b"all of it", 4).expect("decodes").0,
            b"all of it"
        );
    }

    #[test]
    fn a_chunked_body_decodes_whatever_the_reads() {
        let wire =
            b"5;ext=1\r\nhello\r\n1A\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\nx-sum: 1\r\n\r\nNEXT";
        for step in [1, 2, 7, 1000] {
            let (data, left) = body(Decoder::Chunked(Chunk::Size), wire, step).expect("decodes");
            assert_eq!(data, b"helloabcdefghijklmnopqrstuvwxyz", "step {step}");
            assert!(b"NEXT".starts_with(&left), "{left:?}");
        }
        for bad in [
            &b"zz\r\nhello\r\n0\r\n\r\n"[..],
            b"5\r\nhelloXX0\r\n\r\n",
            b"5\nhello\r\n0\r\n\r\n",
        ] {
            assert!(
                body(Decoder::Chunked(Chunk::Size), bad, 1000).is_err(),
                "{bad:?}"
            );
        }
        assert_eq!(
            body(Decoder::Chunked(Chunk::Size), b"5\r\nhel", 1000).err(),
            Some(H1Error::Incomplete)
        );
    }
}
