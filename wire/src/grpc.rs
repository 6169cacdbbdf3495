//! gRPC over HTTP/2 (grpc `doc/PROTOCOL-HTTP2.md`): the names a unary call and its answer
//! carry, and the status codes (`google/rpc/code.proto`), by name and number.
//!
//! The one table of codes: the retry core classifies by it, the fault-server answers by
//! it, the harness reads answers and parses plans by it.

use std::time::Duration;

/// The content type that makes a request a gRPC call (`application/grpc+proto` too).
pub const CONTENT_TYPE: &str = "application/grpc";
/// The call's status, in the trailers (or the headers of a Trailers-Only answer).
pub const STATUS: &str = "grpc-status";
/// The status's message, percent-encoded.
pub const MESSAGE: &str = "grpc-message";
/// gRFC A6's server pushback: wait this many milliseconds before a retry; a negative or
/// malformed value means "do not retry".
pub const PUSHBACK: &str = "grpc-retry-pushback-ms";
/// gRFC A6: how many attempts of this call came before this one.
pub const PREVIOUS_ATTEMPTS: &str = "grpc-previous-rpc-attempts";

/// Every code's name as `code.proto` spells it, indexed by its number.
pub const NAMES: [&str; 17] = [
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
];

/// The names in snake_case, as reports, metrics and the ledger write them (`unavailable`):
/// [`NAMES`] lower-cased, kept as literals so that a name is a `&'static str`.
const SNAKE: [&str; 17] = [
    "ok",
    "cancelled",
    "unknown",
    "invalid_argument",
    "deadline_exceeded",
    "not_found",
    "already_exists",
    "permission_denied",
    "resource_exhausted",
    "failed_precondition",
    "aborted",
    "out_of_range",
    "unimplemented",
    "internal",
    "unavailable",
    "data_loss",
    "unauthenticated",
];

/// The call succeeded.
pub const OK: u8 = 0;
/// An error with no better code; what a client makes of an answer without a status.
pub const UNKNOWN: u8 = 2;
/// The deadline passed: the analogue of 504.
pub const DEADLINE_EXCEEDED: u8 = 4;
/// A quota or a rate limit ran out: the analogue of 429.
pub const RESOURCE_EXHAUSTED: u8 = 8;
/// The service cannot answer now: the analogue of 503.
pub const UNAVAILABLE: u8 = 14;

/// Whether a request's `content-type` makes it a gRPC call.
pub fn is_grpc(content_type: &[u8]) -> bool {
    content_type
        .get(..CONTENT_TYPE.len())
        .is_some_and(|head| head.eq_ignore_ascii_case(CONTENT_TYPE.as_bytes()))
        && matches!(
            content_type.get(CONTENT_TYPE.len()),
            None | Some(b'+' | b';')
        )
}

/// A code by name in any case, with `_` or `-` (`UNAVAILABLE`, `resource-exhausted`, as
/// Envoy's `retry_on` spells them). Numbers are not names: see [`parse_code`].
pub fn code_by_name(name: &str) -> Option<u8> {
    let name = name.trim().to_ascii_uppercase().replace('-', "_");
    NAMES.iter().position(|n| *n == name).map(|i| i as u8)
}

/// A code by name ([`code_by_name`]) or by number (`14`), as a script may give it.
pub fn parse_code(text: &str) -> Option<u8> {
    match text.trim().parse::<u8>() {
        Ok(n) if usize::from(n) < NAMES.len() => Some(n),
        Ok(_) => None,
        Err(_) => code_by_name(text),
    }
}

/// The snake_case name of a code (`unavailable`), `None` past the table.
pub fn snake_name(code: u8) -> Option<&'static str> {
    SNAKE.get(usize::from(code)).copied()
}

/// The ledger's and the metrics' name of a code: its [`snake_name`], `code_N` past the table.
pub fn label(code: u8) -> String {
    snake_name(code).map_or_else(|| format!("code_{code}"), str::to_owned)
}

/// A `grpc-retry-pushback-ms` value as gRFC A6 reads it: a non-negative whole number of
/// milliseconds is how long to wait before the retry; anything else (negative,
/// malformed) means "do not retry" (`None`).
pub fn pushback(value: &[u8]) -> Option<Duration> {
    let text = std::str::from_utf8(value).ok()?;
    text.trim().parse::<u64>().ok().map(Duration::from_millis)
}

/// The code a gRPC client reads from an HTTP answer that carries no `grpc-status` (grpc
/// `doc/http-grpc-status-mapping.md`): an intermediary's 503 is UNAVAILABLE. A 200
/// without a status is no answer to a call: UNKNOWN, as any status the table lacks.
pub fn code_of_http_status(status: u16) -> u8 {
    match status {
        400 => 13,
        401 => 16,
        403 => 7,
        404 => 12,
        429 | 502 | 503 | 504 => UNAVAILABLE,
        _ => UNKNOWN,
    }
}

/// The code the fault-server answers a gRPC call with when its HTTP answer was `status`:
/// a 200 is the call served (OK); any other status is what a client would read of it
/// ([`code_of_http_status`]). The live server and the simulated one both answer by it.
pub fn code_answering(status: u16) -> u8 {
    match status {
        200 => OK,
        other => code_of_http_status(other),
    }
}

/// The HTTP status `code.proto` maps a code to ("HTTP Mapping: 503 Service
/// Unavailable"): what a gRPC fault answers a client that is not speaking gRPC.
pub fn http_status(code: u8) -> u16 {
    match code {
        0 => 200,
        1 => 499,
        3 | 9 | 11 => 400,
        4 => 504,
        5 => 404,
        6 | 10 => 409,
        7 => 403,
        8 => 429,
        12 => 501,
        14 => 503,
        16 => 401,
        _ => 500,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_content_types_and_only_those() {
        for ct in [
            "application/grpc",
            "application/grpc+proto",
            "Application/GRPC;x=1",
        ] {
            assert!(is_grpc(ct.as_bytes()), "{ct}");
        }
        for ct in [
            "application/grpc-web",
            "application/json",
            "application/grp",
            "",
        ] {
            assert!(!is_grpc(ct.as_bytes()), "{ct}");
        }
    }

    #[test]
    fn pushback_is_a_whole_number_of_milliseconds_or_do_not_retry() {
        assert_eq!(pushback(b"0"), Some(Duration::ZERO));
        assert_eq!(pushback(b"300"), Some(Duration::from_millis(300)));
        assert_eq!(pushback(b" 7 "), Some(Duration::from_millis(7)));
        for stop in [&b"-1"[..], b"1.5", b"soon", b"", b"\xff"] {
            assert_eq!(pushback(stop), None, "{stop:?}");
        }
    }

    #[test]
    fn codes_by_name_number_and_label_round_trip() {
        for (n, name) in NAMES.iter().enumerate() {
            let code = n as u8;
            assert_eq!(code_by_name(name), Some(code));
            assert_eq!(
                code_by_name(&name.to_ascii_lowercase().replace('_', "-")),
                Some(code)
            );
            assert_eq!(parse_code(&n.to_string()), Some(code));
            assert_eq!(parse_code(name), Some(code));
            assert_eq!(code_by_name(&n.to_string()), None, "a number is no name");
            assert_eq!(snake_name(code), Some(name.to_ascii_lowercase().as_str()));
            assert_eq!(label(code), name.to_ascii_lowercase());
        }
        assert_eq!(parse_code("17"), None);
        assert_eq!(code_by_name("unavailabl"), None);
        assert_eq!(snake_name(17), None);
        assert_eq!(label(99), "code_99");
    }

    #[test]
    fn http_statuses_map_as_grpc_documents_them() {
        assert_eq!(code_of_http_status(503), UNAVAILABLE);
        assert_eq!(code_of_http_status(429), UNAVAILABLE);
        assert_eq!(code_of_http_status(404), 12);
        assert_eq!(code_of_http_status(500), UNKNOWN);
        assert_eq!(http_status(14), 503);
        assert_eq!(http_status(8), 429);
        assert_eq!(http_status(0), 200);
    }

    /// The drift issue 46 found: the fault-server's copy read a 200 without `grpc-status`
    /// as OK and the retry core's as UNKNOWN. A client reads it as UNKNOWN; only the
    /// server, answering a call it served, says OK.
    #[test]
    fn a_200_without_a_status_is_unknown_to_a_client_and_ok_from_the_server() {
        assert_eq!(code_of_http_status(200), UNKNOWN);
        assert_eq!(code_answering(200), OK);
        for status in [204, 400, 404, 429, 500, 503] {
            assert_eq!(code_answering(status), code_of_http_status(status));
        }
    }
}
