//! Reports: the model, how it is built from a run, and its renderers.

mod build;
pub(crate) mod chart;
mod client;
mod context;
pub use client::{BackoffRow, ClientView, tolerance_ms};
mod drift;
pub mod gates;
mod html;
mod junit;
mod markdown;
mod model;
mod proxy;
mod rank;
mod sentences;
pub(crate) mod table;
mod tables;
#[cfg(test)]
mod tests;
mod upstream;
mod verdict;
mod write;

pub use build::{
    PolicyOutcome, Reconciliation, describe_policy, judged, offered_quantile_ms, peak_1s,
    policy_report, reconciliation, recovery_s, repeats,
};
pub use context::{
    DROPPED_WARNING, Draft, Ending, FaultsInForce, Mode, Relayed, RunContext, build,
};
pub use drift::{Comparison, Drift, Row};
pub use html::render as html;
pub use junit::render as junit;
pub use markdown::{baseline_table, describe_row, render as markdown, summary_table};
pub use model::*;
pub use rank::{Delta, RankRow, Ranking, order as rank_order, rank, row as rank_row};
pub use upstream::UpstreamSplit;
pub use verdict::failed_gates_cell;
pub use write::{Files, WriteError, Written, run_id, timestamp, write, write_to_temp};

/// `report.json`.
pub fn json(report: &Report) -> String {
    serde_json::to_string_pretty(report).expect("the report model always serialises") + "\n"
}
