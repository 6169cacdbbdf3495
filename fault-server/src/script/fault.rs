//! What a decision tells the shell to do: serve, or execute one fault with every random
//! parameter already drawn.

use std::sync::Arc;
use std::time::Duration;

/// The outcome of [`Script::select`].
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// No phase applies: serve the request normally.
    Serve,
    /// Phase number `phase` (an index into the script's phases) fires with `fault`.
    Fault {
        /// Index of the phase that fired (see [`Script::phase_name`]).
        phase: usize,
        /// What to do, with every random draw already made.
        fault: Fault,
    },
}

/// One fault to execute.
#[derive(Debug, Clone, PartialEq)]
pub struct Fault {
    /// The kind and its parameters.
    pub kind: FaultKind,
    /// Execute the request's side effect before the fault.
    pub processed: bool,
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

/// The fault kinds, resolved.
#[derive(Debug, Clone, PartialEq)]
pub enum FaultKind {
    /// Answer with this response.
    Status(Arc<FaultResponse>),
    /// Wait this long, then serve normally.
    Delay(Duration),
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
}

impl FaultKind {
    /// The kind's tag.
    pub fn tag(&self) -> FaultTag {
        match self {
            FaultKind::Status(_) => FaultTag::Status,
            FaultKind::Delay(_) => FaultTag::Delay,
            FaultKind::Timeout { .. } => FaultTag::Timeout,
            FaultKind::Reset => FaultTag::Reset,
            FaultKind::Close => FaultTag::Close,
            FaultKind::Truncate(_) => FaultTag::Truncate,
        }
    }
}

/// The fault kinds without their parameters: for counters and labels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FaultTag {
    /// `status`
    Status,
    /// `delay`
    Delay,
    /// `timeout`
    Timeout,
    /// `reset`
    Reset,
    /// `close`
    Close,
    /// `truncate`
    Truncate,
}

impl FaultTag {
    /// Every tag, in a fixed order (`as usize` indexes it).
    pub const ALL: [FaultTag; 6] = [
        FaultTag::Status,
        FaultTag::Delay,
        FaultTag::Timeout,
        FaultTag::Reset,
        FaultTag::Close,
        FaultTag::Truncate,
    ];

    /// The name used in plans, metrics and the ledger.
    pub fn name(self) -> &'static str {
        match self {
            FaultTag::Status => "status",
            FaultTag::Delay => "delay",
            FaultTag::Timeout => "timeout",
            FaultTag::Reset => "reset",
            FaultTag::Close => "close",
            FaultTag::Truncate => "truncate",
        }
    }
}
