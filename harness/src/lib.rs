//! The harness: plans, the live load engine, reports and gates.
//!
//! `harness chaos PLAN` loads a plan ([`plan`]), starts or scripts a fault-server, drives
//! open-loop load through each policy with the [`engine`], reconciles the client's counts
//! with the server's ledger, evaluates the gates ([`report::gates`]) and writes a
//! [`report`]. Behind relay tiers ([`relay`]), each hop is a shell of the [`hop`] core.
//!
//! The live side (the engine, the relay, the pool, the control client, telemetry, client
//! tests, the tuner and the command line) is the `live` feature, on by default. Without it
//! the library is the pure side, [`simulate`] and what it reads, and links no HTTP crate.

// Without `live`, what the pure side shares only with the live side (a sweep's helpers the
// tuner reads, say) goes unused; the default build, which clippy holds to -D warnings,
// still finds what nothing uses.
#![cfg_attr(not(feature = "live"), allow(dead_code, unused_imports))]

pub use chaos_policy as policy;

#[cfg(feature = "live")]
pub mod attempt;
pub mod audit;
pub mod baseline;
pub mod bounded;
#[cfg(feature = "live")]
pub mod cli;
#[cfg(feature = "live")]
pub mod client;
pub mod connection_wait;
#[cfg(feature = "live")]
mod control;
#[cfg(feature = "live")]
pub mod engine;
pub mod export;
pub mod hop;
pub mod logical;
pub mod plan;
#[cfg(feature = "live")]
pub mod pool;
#[cfg(feature = "live")]
pub mod relay;
pub mod report;
#[cfg(feature = "live")]
pub mod run;
pub mod schedule;
pub mod shard;
pub mod simulate;
pub mod stats;
#[cfg(feature = "live")]
pub mod telemetry;
#[cfg(feature = "live")]
pub mod tune;
