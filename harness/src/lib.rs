//! The harness: plans, the live load engine, reports and gates.
//!
//! `harness chaos PLAN` loads a plan ([`plan`]), starts or scripts a fault-server, drives
//! open-loop load through each policy with the [`engine`], reconciles the client's counts
//! with the server's ledger, evaluates the gates ([`report::gates`]) and writes a
//! [`report`]. Behind relay tiers ([`relay`]), each hop is a shell of the [`hop`] core.

pub use chaos_policy as policy;

pub mod attempt;
pub mod baseline;
pub mod cli;
pub mod client;
pub mod connection_wait;
mod control;
pub mod engine;
pub mod export;
pub mod hop;
pub mod logical;
pub mod plan;
pub mod pool;
pub mod relay;
pub mod report;
pub mod run;
pub mod schedule;
pub mod shard;
pub mod simulate;
pub mod stats;
pub mod telemetry;
pub mod tune;
