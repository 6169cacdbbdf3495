//! A request's path in normal form, the one rule every hop reads a path by: the
//! fault-server normalises each request's path once before its script's `match: { path }`
//! and an upstream's base path see it, a script's path patterns are normalised as they
//! are compiled, and a plan's request paths must be normal already (so the simulator,
//! which takes them as written, sees what the live server sees). It is the path the
//! service would resolve, so `//admin`, `/./admin` and `/%61dmin` meet a fault on
//! `/admin`, and `/base/../secret` cannot leave `--upstream http://h:p/base/`.
//!
//! The steps (RFC 3986 §6.2.2): percent-escapes of unreserved characters are decoded
//! (`%2e` is `.`, `%41` is `A`; §2.3 says they are equivalent), runs of slashes are one
//! slash (nginx's `merge_slashes`), then `remove_dot_segments` (§5.2.4). Every other
//! escape is kept as it came.
//!
//! An encoded slash (`%2F`) is data, not a separator: it is kept as it came (GitLab's
//! `/projects/group%2Fproj`, RabbitMQ's `/queues/%2F/q` put one inside a segment, and
//! nginx and Envoy pass it through).
//!
//! The normal form is what the script matches and what is joined to an upstream's base
//! path; without a base path the upstream gets the path as the client sent it (an S3
//! key `a//b` is not `a/b`, and a signature covers the raw path).
//!
//! Two paths are refused (400) rather than rewritten, because no rewrite is what the
//! client meant:
//! - one whose `..` segments climb above the root: RFC 3986 would clamp `/../x` to `/x`,
//!   but a client sending it is probing, not asking for `/x`, and nginx refuses it too;
//! - one with a segment holding both `..` and an encoded slash (`..%2f`, any case), which
//!   an upstream that decodes it later would resolve past its base path.

use std::borrow::Cow;
use std::fmt;

/// Why a path is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathError {
    Climbs,
    EncodedSlash,
}

impl fmt::Display for PathError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PathError::Climbs => {
                "the request path climbs above the root with `..` segments (after decoding %2e): refused rather than clamped"
            }
            PathError::EncodedSlash => {
                "the request path holds `..` beside an encoded slash (%2F), which a service that decodes it would resolve as a parent: refused"
            }
        })
    }
}

impl std::error::Error for PathError {}

/// The normal form of `path`: borrowed when it is already normal (the common case costs
/// one look at its bytes). A path that does not start with `/` (`*`) is left alone.
pub fn normalise(path: &str) -> Result<Cow<'_, str>, PathError> {
    if !path.starts_with('/') || !may_change(path.as_bytes()) {
        return Ok(Cow::Borrowed(path));
    }
    let decoded = decode_unreserved(path)?;
    let mut out: Vec<&str> = Vec::new();
    let segments: Vec<&str> = decoded[1..].split('/').collect();
    let last = segments.len() - 1;
    for (at, segment) in segments.iter().enumerate() {
        match *segment {
            // A run of slashes is one: only the last empty segment (a trailing slash) stays.
            "" | "." => {}
            ".." => {
                if out.pop().is_none() {
                    return Err(PathError::Climbs);
                }
            }
            segment if segment.contains("..") && has_encoded_slash(segment) => {
                return Err(PathError::EncodedSlash);
            }
            segment => out.push(segment),
        }
        let dot = matches!(*segment, "." | ".." | "");
        if at == last && dot && !out.is_empty() {
            // `/a/.`, `/a/b/..` and `/a/` end with a slash (§5.2.4's output buffer).
            out.push("");
        }
    }
    let normal = format!("/{}", out.join("/"));
    if normal == path {
        return Ok(Cow::Borrowed(path));
    }
    Ok(Cow::Owned(normal))
}

/// Whether a path holds anything normalising could change: an escape, a doubled slash,
/// or a segment starting with a dot.
fn may_change(path: &[u8]) -> bool {
    path.windows(2)
        .any(|pair| pair[0] == b'%' || pair[0] == b'/' && matches!(pair[1], b'/' | b'.'))
        || path.last() == Some(&b'%')
}

fn has_encoded_slash(segment: &str) -> bool {
    segment
        .as_bytes()
        .windows(3)
        .any(|w| w[0] == b'%' && w[1] == b'2' && matches!(w[2], b'f' | b'F'))
}

/// Decodes the escapes of unreserved characters (never a slash's).
fn decode_unreserved(path: &str) -> Result<String, PathError> {
    let bytes = path.as_bytes();
    let mut out = String::with_capacity(path.len());
    let mut at = 0;
    while at < bytes.len() {
        if bytes[at] == b'%'
            && let Some(byte) = bytes.get(at + 1..at + 3).and_then(hex_pair)
        {
            if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
                out.push(char::from(byte));
            } else {
                out.push_str(&path[at..at + 3]);
            }
            at += 3;
            continue;
        }
        let len = utf8_len(bytes[at]);
        out.push_str(&path[at..(at + len).min(path.len())]);
        at += len;
    }
    Ok(out)
}

fn hex_pair(pair: &[u8]) -> Option<u8> {
    let digit = |b: u8| char::from(b).to_digit(16);
    u8::try_from(digit(pair[0])? * 16 + digit(pair[1])?).ok()
}

/// The length of the UTF-8 character starting with `lead` (a request path is ASCII in
/// practice; this keeps the slicing on character boundaries whatever came).
fn utf8_len(lead: u8) -> usize {
    match lead {
        0xF0..=0xFF => 4,
        0xE0..=0xEF => 3,
        0xC0..=0xDF => 2,
        _ => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(path: &str, expected: Result<&str, PathError>) {
        assert_eq!(
            normalise(path).as_deref().map_err(|e| *e),
            expected,
            "{path}"
        );
    }

    #[test]
    fn normal_paths_are_borrowed_as_they_are() {
        for path in [
            "/",
            "/a",
            "/a/",
            "/a/b.json",
            "/.well-known/x",
            "*",
            "/a%20b",
        ] {
            assert!(
                matches!(normalise(path), Ok(Cow::Borrowed(_))),
                "{path} is already normal"
            );
        }
    }

    #[test]
    fn duplicate_slashes_and_dot_segments_go() {
        check("//admin", Ok("/admin"));
        check("/./admin", Ok("/admin"));
        check("/a//b///c", Ok("/a/b/c"));
        check("/a/b/../c", Ok("/a/c"));
        check("/a/b/..", Ok("/a/"));
        check("/a/.", Ok("/a/"));
        check("/a/..", Ok("/"));
        check("/a/../", Ok("/"));
        check("//", Ok("/"));
        check("/a/b/", Ok("/a/b/"));
        check("/a/..b/.c", Ok("/a/..b/.c"));
    }

    #[test]
    fn escapes_of_unreserved_characters_are_decoded_and_others_kept() {
        check("/%61dmin", Ok("/admin"));
        check("/a/%2e/b", Ok("/a/b"));
        check("/a/%2E%2e/b", Ok("/b"));
        check("/a/.%2E/b", Ok("/b"));
        check("/a%20b/%3F", Ok("/a%20b/%3F"));
        check("/a/%zz/%", Ok("/a/%zz/%"));
        check("/é//x", Ok("/é/x"));
    }

    #[test]
    fn a_climb_above_the_root_and_a_parent_beside_an_encoded_slash_are_refused() {
        check("/..", Err(PathError::Climbs));
        check("/../x", Err(PathError::Climbs));
        check("/a/../../x", Err(PathError::Climbs));
        check("/%2e%2e/x", Err(PathError::Climbs));
        check("/%2E%2E", Err(PathError::Climbs));
        check("//..//x", Err(PathError::Climbs));
        check("/a/..%2f..%2fx", Err(PathError::EncodedSlash));
        check("/a/%2F..", Err(PathError::EncodedSlash));
    }

    #[test]
    fn an_encoded_slash_is_data_kept_as_it_came() {
        for path in [
            "/api/v4/projects/group%2Fproj",
            "/api/queues/%2F/q",
            "/a%2fb",
        ] {
            assert!(matches!(normalise(path), Ok(Cow::Borrowed(_))), "{path}");
        }
        check("/api//queues/%2F/q", Ok("/api/queues/%2F/q"));
    }
}
