//! What one attempt produced, and how the design's vocabulary classifies it.
//!
//! Outcomes are typed, never strings: the shells map an HTTP status or an `io::Error` kind to
//! an [`Outcome`], and everything downstream (classification, budgets, breaker, reports)
//! matches on the variant.

use std::fmt;

use crate::request::Request;

/// Where in the exchange a connection reset hit, where the shell can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ResetPhase {
    /// The request had not been fully written. Still no proof the server never acted on it:
    /// part of it may have arrived, so it does not count as "unsent".
    BeforeWrite,
    /// The request was written; the response never came.
    AfterWrite,
    /// The shell's HTTP stack does not say.
    Unknown,
}

/// What one attempt produced. Ordered (statuses first, by code) so reports can key
/// counters by it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Outcome {
    /// A complete response with this status code.
    Status(u16),
    /// The TCP connection was refused: the server never saw the request.
    ConnectRefused,
    /// No connection was ready in time (a TCP connect that did not complete, or, under a
    /// client's cap on connections, none came free): the server never saw the request.
    ConnectTimeout,
    /// The connection was reset (RST).
    Reset(ResetPhase),
    /// The connection closed cleanly (FIN) before any response: an empty reply.
    Closed,
    /// The attempt timed out after the request was sent.
    AttemptTimeout,
    /// The status line and headers arrived, then the body was cut short.
    TruncatedBody,
    /// A gRPC call ended with this status code (`grpc-status`; 0 is OK). A gRPC shell
    /// reads it from the trailers, or maps an HTTP status sent without one
    /// ([`grpc::code_of_http_status`]).
    Grpc(u8),
    /// HTTP/2 proves the server never processed the stream: it was refused
    /// (`RST_STREAM` `REFUSED_STREAM`) or lay above a GOAWAY's last-stream-id.
    Unprocessed(Unprocessed),
}

/// How HTTP/2 proved a stream unprocessed (RFC 9113 §8.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Unprocessed {
    /// `RST_STREAM` with `REFUSED_STREAM`.
    RefusedStream,
    /// The stream's id was above the last-stream-id of a GOAWAY.
    GoAway,
}

/// The gRPC status codes (`google/rpc/code.proto`): the one table, shared with the
/// fault-server and the harness.
pub use chaos_wire::grpc;

/// The design's classification of an outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Class {
    /// 1xx, 2xx, 3xx: the request was served.
    Success,
    /// Worth retrying: connect errors, resets, timeouts, 408, 429, 502, 503, 504.
    Transient,
    /// Retrying will not help: other 4xx, 501, 508 and the other 5xx, and 500 (ambiguous;
    /// see [`Outcome::class`]).
    Permanent,
}

impl Outcome {
    /// Every outcome that carries no number: all but `Status` and `Grpc`. Where a list of
    /// every kind of outcome is wanted (to read a name back, to compare what two retry
    /// conditions match), this is its part that a range cannot make.
    pub const TRANSPORT: [Outcome; 10] = [
        Outcome::ConnectRefused,
        Outcome::ConnectTimeout,
        Outcome::Reset(ResetPhase::BeforeWrite),
        Outcome::Reset(ResetPhase::AfterWrite),
        Outcome::Reset(ResetPhase::Unknown),
        Outcome::Closed,
        Outcome::AttemptTimeout,
        Outcome::TruncatedBody,
        Outcome::Unprocessed(Unprocessed::RefusedStream),
        Outcome::Unprocessed(Unprocessed::GoAway),
    ];

    /// The design's vocabulary. A 500 is ambiguous (AWS SDKs retry it, gRPC does not), so it
    /// is permanent unless a policy's `retry_on` names it.
    pub fn class(self) -> Class {
        match self {
            Outcome::Status(code) => match code {
                100..=399 => Class::Success,
                408 | 429 | 502 | 503 | 504 => Class::Transient,
                _ => Class::Permanent,
            },
            // The analogues of 504, 429 and 503.
            Outcome::Grpc(code) => match code {
                grpc::OK => Class::Success,
                grpc::DEADLINE_EXCEEDED | grpc::RESOURCE_EXHAUSTED | grpc::UNAVAILABLE => {
                    Class::Transient
                }
                _ => Class::Permanent,
            },
            Outcome::ConnectRefused
            | Outcome::ConnectTimeout
            | Outcome::Reset(_)
            | Outcome::Closed
            | Outcome::AttemptTimeout
            | Outcome::TruncatedBody
            | Outcome::Unprocessed(_) => Class::Transient,
        }
    }

    /// The request was served: the session ends, and budgets and breakers count it as
    /// good news.
    pub fn is_success(self) -> bool {
        self.class() == Class::Success
    }

    /// The failure proves the server never saw the request, so even a non-idempotent
    /// request may be sent again.
    pub fn proves_unsent(self) -> bool {
        matches!(
            self,
            Outcome::ConnectRefused | Outcome::ConnectTimeout | Outcome::Unprocessed(_)
        )
    }

    /// HTTP/2 proved the server never processed it: A6's transparent retry, once per
    /// logical request, free of the budget and of `max_attempts`.
    pub fn is_unprocessed(self) -> bool {
        matches!(self, Outcome::Unprocessed(_))
    }

    /// Retrying after this outcome is a violation whatever a policy says: a 4xx other than
    /// 408 and 429, a 501, or a 508 (which no policy retries: [`RetryOn::matches`]).
    /// (A 500 is ambiguous and not flagged.)
    /// For gRPC, the codes those map to: INVALID_ARGUMENT, NOT_FOUND, ALREADY_EXISTS,
    /// PERMISSION_DENIED, FAILED_PRECONDITION, OUT_OF_RANGE, UNIMPLEMENTED, UNAUTHENTICATED.
    pub fn forbids_retry(self) -> bool {
        match self {
            Outcome::Status(code) => chaos_wire::status_forbids_retry(code),
            Outcome::Grpc(code) => matches!(code, 3 | 5 | 6 | 7 | 9 | 11 | 12 | 16),
            _ => false,
        }
    }

    /// Counts as a failure of the server for a circuit breaker: transient outcomes and 5xx.
    /// A 4xx other than 408/429 is the client's fault and says nothing of the server's health.
    pub fn is_server_failure(self) -> bool {
        match self {
            Outcome::Status(code) => code >= 500 || self.class() == Class::Transient,
            // UNKNOWN, INTERNAL, DATA_LOSS: the 500s.
            Outcome::Grpc(code) => matches!(code, 2 | 13 | 15) || self.class() == Class::Transient,
            // The server refused work it had not started: a sign of load, not of failure.
            Outcome::Unprocessed(_) => false,
            other => other.class() == Class::Transient,
        }
    }

    /// A stable snake_case name for reports and metrics.
    pub fn kind(self) -> &'static str {
        match self {
            Outcome::Status(_) => "status",
            Outcome::ConnectRefused => "connect_refused",
            Outcome::ConnectTimeout => "connect_timeout",
            Outcome::Reset(_) => "reset",
            Outcome::Closed => "closed",
            Outcome::AttemptTimeout => "attempt_timeout",
            Outcome::TruncatedBody => "truncated_body",
            Outcome::Grpc(_) => "grpc",
            Outcome::Unprocessed(Unprocessed::RefusedStream) => "refused_stream",
            Outcome::Unprocessed(Unprocessed::GoAway) => "goaway_unprocessed",
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Status(code) => write!(f, "{code}"),
            Outcome::Grpc(code) => write!(
                f,
                "grpc_{}",
                grpc::snake_name(*code).unwrap_or("unknown_code")
            ),
            other => f.write_str(other.kind()),
        }
    }
}

/// One entry of a policy's `retry_on` list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RetryCondition {
    /// Every failure, permanent ones included. Deliberately wrong; the gates catch it.
    Any,
    /// The design's transient set (the default).
    Transient,
    /// This exact status code.
    Status(u16),
    /// Any 5xx status (Envoy's `5xx`).
    ServerError,
    /// 502, 503, 504 (Envoy's `gateway-error`).
    GatewayError,
    /// Connect refused or connect timeout (Envoy's `connect-failure`).
    ConnectFailure,
    /// Reset, clean close or truncated body (Envoy's `reset`).
    Reset,
    /// The attempt timed out after sending.
    Timeout,
    /// This gRPC status code (`unavailable`, `resource-exhausted`, ...).
    Grpc(u8),
    /// HTTP/2 proved the stream unprocessed (Envoy's `refused-stream`; a stream above a
    /// GOAWAY's last-stream-id too).
    RefusedStream,
}

impl RetryCondition {
    fn matches(self, outcome: Outcome) -> bool {
        match self {
            RetryCondition::Any => !outcome.is_success(),
            RetryCondition::Transient => outcome.class() == Class::Transient,
            RetryCondition::Status(code) => outcome == Outcome::Status(code),
            RetryCondition::ServerError => matches!(outcome, Outcome::Status(500..=599)),
            RetryCondition::GatewayError => matches!(outcome, Outcome::Status(502..=504)),
            RetryCondition::ConnectFailure => outcome.proves_unsent(),
            RetryCondition::Reset => matches!(
                outcome,
                Outcome::Reset(_) | Outcome::Closed | Outcome::TruncatedBody
            ),
            RetryCondition::Timeout => outcome == Outcome::AttemptTimeout,
            RetryCondition::Grpc(code) => outcome == Outcome::Grpc(code),
            RetryCondition::RefusedStream => outcome.is_unprocessed(),
        }
    }

    /// Parses one `retry_on` entry: `any`, `transient`, `5xx`, `gateway-error`,
    /// `connect-failure`, `reset`, `timeout`, `refused-stream`, a gRPC status code by name
    /// (`unavailable`, `RESOURCE_EXHAUSTED`), or an HTTP status code such as `500`.
    pub fn parse(text: &str) -> Option<RetryCondition> {
        let condition = match text.trim().to_ascii_lowercase().replace('_', "-").as_str() {
            "any" => RetryCondition::Any,
            "transient" => RetryCondition::Transient,
            "5xx" => RetryCondition::ServerError,
            "gateway-error" => RetryCondition::GatewayError,
            "connect-failure" => RetryCondition::ConnectFailure,
            "reset" => RetryCondition::Reset,
            "timeout" => RetryCondition::Timeout,
            "refused-stream" => RetryCondition::RefusedStream,
            name => match (grpc::code_by_name(name), name.parse::<u16>()) {
                (Some(code), _) if code != grpc::OK => RetryCondition::Grpc(code),
                (_, Ok(code @ 100..=599)) => RetryCondition::Status(code),
                _ => return None,
            },
        };
        Some(condition)
    }
}

/// A policy's `retry_on`: the outcomes it considers retryable. A failure is retryable when
/// any condition matches; a success never is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryOn(Vec<RetryCondition>);

impl RetryOn {
    /// Retries a failure that any of `conditions` matches.
    pub fn new(conditions: impl IntoIterator<Item = RetryCondition>) -> RetryOn {
        RetryOn(conditions.into_iter().collect())
    }

    /// The conditions in the order given, for writing the policy back out.
    pub fn conditions(&self) -> &[RetryCondition] {
        &self.0
    }

    /// Whether the policy may retry after `outcome`: a failure some condition names, but
    /// never a 508 Loop Detected ([`chaos_wire::LOOP_DETECTED`]), which no condition
    /// retries (`any` and `5xx` included): every retry would go round the same loop.
    pub fn matches(&self, outcome: Outcome) -> bool {
        !outcome.is_success()
            && outcome != Outcome::Status(chaos_wire::LOOP_DETECTED)
            && self.0.iter().any(|c| c.matches(outcome))
    }
}

impl Default for RetryOn {
    fn default() -> RetryOn {
        RetryOn(vec![RetryCondition::Transient])
    }
}

/// A retry that breaks one of the invariants the harness proves, whatever the policy said.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Violation {
    /// Retried after a 4xx other than 408/429, or after a 501 or a 508.
    RetriedPermanent,
    /// Retried a non-idempotent request after an outcome that does not prove it was unsent.
    RetriedNonIdempotent,
}

impl Violation {
    /// The violations a retry of `request` after `previous` commits (none, one or both).
    /// The one definition: [`Session::violations`](crate::Session::violations) reports it, so
    /// every shell flags exactly the same retries.
    pub fn of_retry(request: Request, previous: Outcome) -> impl Iterator<Item = Violation> {
        let permanent = previous
            .forbids_retry()
            .then_some(Violation::RetriedPermanent);
        let unsafe_retry = (!request.is_idempotent() && !previous.proves_unsent())
            .then_some(Violation::RetriedNonIdempotent);
        permanent.into_iter().chain(unsafe_retry)
    }

    /// A stable snake_case name for reports and traces.
    pub fn name(self) -> &'static str {
        match self {
            Violation::RetriedPermanent => "retried_permanent",
            Violation::RetriedNonIdempotent => "retried_non_idempotent",
        }
    }
}
