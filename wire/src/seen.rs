//! How an attempt was answered, as its client saw it: the vocabulary the fault-server's
//! ledger judges retries by and writes in a snapshot (`retries[].after`), and the harness
//! reads back. A type with one spelling each way, so that no reader can miss a kind.

use std::fmt;
use std::str::FromStr;

/// How an attempt was answered. Ordered as declared (statuses by code first): the order
/// of a snapshot's `retries`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Seen {
    /// A status line (a fault's, the capacity model's, the service's or the upstream's).
    Status(u16),
    /// The connection was reset.
    Reset,
    /// The connection was closed without an answer.
    Close,
    /// The answer's body was cut short.
    Truncate,
    /// No answer before the client gave up (a held request, a slow service).
    Timeout,
    /// The stream was refused (`REFUSED_STREAM`): not processed.
    Refused,
}

impl Seen {
    /// Whether the attempt was served (a 2xx).
    pub fn succeeded(self) -> bool {
        matches!(self, Seen::Status(code) if (200..300).contains(&code))
    }

    /// Whether the answer forbids a retry ([`status_forbids_retry`]).
    pub fn forbids_retry(self) -> bool {
        matches!(self, Seen::Status(code) if status_forbids_retry(code))
    }
}

/// A status no retry can change: a 4xx but 408 (the request timed out) and 429 (too
/// many requests), 501 (not implemented), or 508 (loop detected: a hop saw the request
/// come back to it, and every retry would go round the same loop). The one reading of
/// it: the policy core's `Outcome::forbids_retry`, the ledger's resends after a permanent
/// answer, and the judge of a client's calls all call this.
pub fn status_forbids_retry(code: u16) -> bool {
    ((400..500).contains(&code) && code != 408 && code != 429)
        || code == 501
        || code == LOOP_DETECTED
}

/// 508 Loop Detected (RFC 5842 §7.2): what a hop answers a request that came back to it
/// (its own `Via` entry in the request, or more hops than any chain has). No policy
/// retries it, whatever its `retry_on` says (`any` and `5xx` included): the retry would
/// go round the same loop.
pub const LOOP_DETECTED: u16 = 508;

/// `status_503`, `reset`, `close`, `truncate`, `timeout`, `refuse`.
impl fmt::Display for Seen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Seen::Status(code) => write!(f, "status_{code}"),
            Seen::Reset => f.write_str("reset"),
            Seen::Close => f.write_str("close"),
            Seen::Truncate => f.write_str("truncate"),
            Seen::Timeout => f.write_str("timeout"),
            Seen::Refused => f.write_str("refuse"),
        }
    }
}

/// A label that is none of [`Seen`]'s.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownSeen(pub String);

impl fmt::Display for UnknownSeen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "`{}` is not how an attempt was answered (status_N, reset, close, truncate, timeout, refuse)",
            self.0
        )
    }
}

impl std::error::Error for UnknownSeen {}

/// The [`Display`](fmt::Display) label back.
impl FromStr for Seen {
    type Err = UnknownSeen;

    fn from_str(label: &str) -> Result<Seen, UnknownSeen> {
        Ok(match label {
            "reset" => Seen::Reset,
            "close" => Seen::Close,
            "truncate" => Seen::Truncate,
            "timeout" => Seen::Timeout,
            "refuse" => Seen::Refused,
            other => Seen::Status(
                other
                    .strip_prefix("status_")
                    .and_then(|code| code.parse().ok())
                    .ok_or_else(|| UnknownSeen(other.to_owned()))?,
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_reads_back_as_itself() {
        for seen in [
            Seen::Status(503),
            Seen::Status(200),
            Seen::Reset,
            Seen::Close,
            Seen::Truncate,
            Seen::Timeout,
            Seen::Refused,
        ] {
            assert_eq!(seen.to_string().parse::<Seen>(), Ok(seen));
        }
        assert!("status_x".parse::<Seen>().is_err());
        assert!("refused".parse::<Seen>().is_err());
    }

    #[test]
    fn a_loop_is_as_permanent_as_a_bad_request() {
        for code in [400, 404, 409, 422, 501, 508] {
            assert!(status_forbids_retry(code), "{code}");
        }
        for code in [200, 408, 429, 500, 502, 503, 504, 507, 509] {
            assert!(!status_forbids_retry(code), "{code}");
        }
    }
}
