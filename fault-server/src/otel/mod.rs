//! OpenTelemetry for both binaries: where telemetry goes ([`config`]), the W3C trace
//! context every attempt carries ([`context`]), export with counts and one warning
//! ([`export`]), and the fault-server's own spans ([`server`]).
//!
//! The harness builds its client spans and metrics on the same pieces (it depends on this
//! crate; this crate knows nothing of it). Telemetry is a shell concern: the pure cores
//! (script selection, capacity, ledger) never see it.

pub mod config;
pub mod context;
pub mod export;
pub mod server;

pub use config::{OtelConfig, OtelConfigError};
pub use context::{Ids, TRACEPARENT, TraceParent};
pub use export::{SpanCounts, SpanSink, Warn};
pub use server::{ServerSpan, ServerTracing};
