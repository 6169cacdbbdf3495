//! The fault-server: scripted faults, a finite-capacity model and a ledger of the truth.
//!
//! Why it exists: a retrying client is only as trustworthy as the failures it was tested
//! against. This server produces every failure a client meets in production, per request
//! and over keep-alive connections (a status with `Retry-After`, a delay, a hang, a TCP
//! RST, a FIN without a response, a truncated body), models a server of finite capacity
//! so retry storms sustain themselves as they do in real outages, and keeps a ledger of
//! what it received and executed, so a harness's numbers are checked, not believed.
//!
//! The shape (see ARCHITECTURE.md): pure, sans-IO decisions ([`script`] picks the fault
//! for a request at a time, [`capacity`] serves, queues or rejects, [`seed`] mixes the
//! seed of each request's draws) and a thin HTTP shell around them ([`start`],
//! [`ServerHandle`]), and [`wire`], the contract every hop of a call chain reads and
//! writes. The decisions take time and randomness as arguments and never touch a
//! socket, so the harness's simulator drives them in virtual time with the same seeds
//! as this HTTP shell. No module here depends on the harness or the retry-policy crate.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use fault_server::{ServerConfig, Script, start};
//!
//! let script = Script::from_yaml_str("faults: [ { until: 10s, respond: { status: 503 } } ]")?;
//! let server = start(ServerConfig::with_script(script)).await?;
//! println!("faulting {}", server.url());
//! // … drive load against server.url() …
//! let ledger = server.ledger();
//! println!("{} attempts for {} logical requests", ledger.attempts, ledger.logical);
//! server.shutdown().await;
//! # Ok(()) }
//! ```

pub mod capacity;
pub mod dist;
pub mod duration;
pub mod effect;
#[cfg(feature = "server")]
pub mod fd_limit;
pub mod ledger;
#[cfg(feature = "server")]
mod metrics;
#[cfg(feature = "server")]
pub mod otel;
pub mod script;
#[cfg(feature = "server")]
mod server;
pub mod upstream_url;
pub mod yaml_guard;

/// The contract between the hops, and the seeds behind every draw: the `chaos-wire` crate,
/// under the names this crate has always given them.
pub use chaos_wire::{self as wire, seed};

pub use capacity::{Admission, CapacityLimits, CapacityModel, Started, Ticket};
pub use dist::Distribution;
pub use duration::{DurationSpec, format_duration, parse_duration};
pub use effect::DEFAULT_HANG_CAP;
pub use ledger::{Disposition, Judged, Judging, LedgerLimits, LedgerSnapshot, PolicyLedger};
pub use script::{
    Decision, Fault, FaultAction, FaultKind, RequestFacts, Script, ScriptError, ScriptSpec,
};
#[cfg(feature = "server")]
pub use server::{
    DEFAULT_BODY_TIMEOUT, DEFAULT_MAX_BODY, DEFAULT_MAX_CONCURRENT_STREAMS, DEFAULT_SHUTDOWN_GRACE,
    MAX_HEADER_BYTES, MAX_HEADERS, Peer, ScriptLog, ServerConfig, ServerHandle, StartError,
    TokenError, check_token, serve_bounded, start,
};
pub use upstream_url::{DEFAULT_UPSTREAM_TIMEOUT, Upstream, UpstreamError};
