//! What a decision tells the shell to do: serve, or execute one fault with every random
//! parameter already drawn; and [`FaultKind`], the one list of fault kinds.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The outcome of [`super::Script::select`].
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// No phase applies: serve the request normally.
    Serve,
    /// Phase number `phase` (an index into the script's phases) fires with `fault`.
    Fault {
        /// Index of the phase that fired (see [`super::Script::phase_name`]).
        phase: usize,
        /// What to do, with every random draw already made.
        fault: Fault,
    },
}

/// One fault to execute.
#[derive(Debug, Clone, PartialEq)]
pub struct Fault {
    /// What to do, with its parameters.
    pub action: FaultAction,
    /// Execute the request's side effect before the fault.
    pub processed: bool,
}

impl Fault {
    /// The fault's kind.
    pub fn kind(&self) -> FaultKind {
        self.action.kind()
    }
}

/// The fault kinds: what a script writes after `fault:`, and the names the ledger
/// (`by_fault`) and the metrics (`fault_server_faults_total{kind}`) count them under.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Deserialize,
    Serialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum FaultKind {
    /// Answer with a status code.
    Status,
    /// Wait, then serve normally.
    Delay,
    /// Hold the request without answering, then close the connection.
    Timeout,
    /// Send a TCP RST instead of a response.
    Reset,
    /// Close the connection (FIN) without a response.
    Close,
    /// Send the status and headers and part of the body, then RST.
    Truncate,
    /// HTTP/2: reset the stream with `REFUSED_STREAM`, which tells the client the
    /// request was not processed (on HTTP/1.1, close the connection).
    Refuse,
    /// Serve the request, and tell its connection to go away: HTTP/2 GOAWAY (streams the
    /// client opens past its last-stream-id are not processed), HTTP/1.1 `connection:
    /// close`. A server draining for a deploy.
    #[serde(rename = "goaway")]
    GoAway,
}

impl FaultKind {
    /// Every kind, in declaration order (`kind as usize` indexes it).
    pub const ALL: [FaultKind; 8] = [
        FaultKind::Status,
        FaultKind::Delay,
        FaultKind::Timeout,
        FaultKind::Reset,
        FaultKind::Close,
        FaultKind::Truncate,
        FaultKind::Refuse,
        FaultKind::GoAway,
    ];

    /// The name used in scripts, metrics and the ledger (the serde name too).
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Status => "status",
            FaultKind::Delay => "delay",
            FaultKind::Timeout => "timeout",
            FaultKind::Reset => "reset",
            FaultKind::Close => "close",
            FaultKind::Truncate => "truncate",
            FaultKind::Refuse => "refuse",
            FaultKind::GoAway => "goaway",
        }
    }
}

/// A status (or truncated) response a fault sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FaultResponse {
    /// The status code.
    pub status: u16,
    /// `Retry-After`, sent in whole seconds rounded up.
    pub retry_after: Option<Duration>,
    /// The body; `None` lets the server write a small default body.
    pub body: Option<String>,
    /// Extra headers (lower-case names).
    pub headers: Vec<(String, String)>,
    /// A gRPC fault (`grpc: unavailable`): a gRPC call gets this status as a
    /// Trailers-Only answer; any other request `status`, the code's HTTP mapping.
    pub grpc: Option<GrpcStatus>,
}

/// The status a gRPC fault answers a gRPC call with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GrpcStatus {
    /// The code, 1..=16.
    pub code: u8,
    pub pushback: Option<Pushback>,
}

/// gRFC A6's `grpc-retry-pushback-ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pushback {
    /// Retry no sooner than this.
    After(Duration),
    /// A negative pushback: do not retry.
    Stop,
}

impl FaultResponse {
    /// The `Retry-After` value in whole seconds, rounded up (RFC 9110 delay-seconds).
    pub fn retry_after_secs(&self) -> Option<u64> {
        self.retry_after.map(|d| {
            let whole = d.as_secs();
            if d.subsec_nanos() > 0 {
                whole + 1
            } else {
                whole
            }
        })
    }
}

/// A fault with its parameters. `D` is how a delay is given: a [`Duration`] once drawn
/// (what [`Fault`] carries), a [`crate::dist::Distribution`] in a resolved script before
/// the draw.
#[derive(Debug, Clone, PartialEq)]
pub enum FaultAction<D = Duration> {
    /// Answer with this response.
    Status(Arc<FaultResponse>),
    /// Wait this long, then serve normally.
    Delay(D),
    /// Hold the request without answering for `hold` (or the server's hang cap, whichever
    /// is shorter), then close the connection.
    Timeout {
        /// How long to hold; `None` is the server's cap.
        hold: Option<Duration>,
    },
    /// TCP RST instead of a response.
    Reset,
    /// FIN without a response.
    Close,
    /// Status line, headers (with the full `Content-Length`) and part of the body, then RST.
    Truncate(Arc<FaultResponse>),
    /// `RST_STREAM` `REFUSED_STREAM` (HTTP/1.1: FIN), the request not processed.
    Refuse,
    /// Serve, and drain the connection: GOAWAY (HTTP/1.1: `connection: close`).
    GoAway,
}

impl<D> FaultAction<D> {
    /// The action's kind.
    pub fn kind(&self) -> FaultKind {
        match self {
            FaultAction::Status(_) => FaultKind::Status,
            FaultAction::Delay(_) => FaultKind::Delay,
            FaultAction::Timeout { .. } => FaultKind::Timeout,
            FaultAction::Reset => FaultKind::Reset,
            FaultAction::Close => FaultKind::Close,
            FaultAction::Truncate(_) => FaultKind::Truncate,
            FaultAction::Refuse => FaultKind::Refuse,
            FaultAction::GoAway => FaultKind::GoAway,
        }
    }

    /// The same action with its delay given by `f` (the other parameters are shared).
    pub(super) fn map_delay<E>(&self, f: impl FnOnce(&D) -> E) -> FaultAction<E> {
        match self {
            FaultAction::Status(response) => FaultAction::Status(Arc::clone(response)),
            FaultAction::Delay(delay) => FaultAction::Delay(f(delay)),
            FaultAction::Timeout { hold } => FaultAction::Timeout { hold: *hold },
            FaultAction::Reset => FaultAction::Reset,
            FaultAction::Close => FaultAction::Close,
            FaultAction::Truncate(response) => FaultAction::Truncate(Arc::clone(response)),
            FaultAction::Refuse => FaultAction::Refuse,
            FaultAction::GoAway => FaultAction::GoAway,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_is_listed_in_order_under_its_serde_name() {
        for (index, kind) in FaultKind::ALL.iter().enumerate() {
            assert_eq!(*kind as usize, index, "{kind:?}");
            let written = serde_yaml::to_string(kind).expect("serialises");
            assert_eq!(written.trim(), kind.name());
            let read: FaultKind = serde_yaml::from_str(kind.name()).expect("deserialises");
            assert_eq!(read, *kind);
        }
    }
}
