//! What a tune found (`chaos-tune/v1`, tune.json): every candidate simulated, in the
//! ranking's order, the policy's current settings beside them, and what the live runs
//! confirmed.

use serde::Serialize;

use crate::report::RankRow;

/// One setting of a candidate: a key of the policy and its value, as a plan writes it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KeyValue {
    pub key: String,
    pub value: String,
}

/// Where a candidate came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// The policy as the plan has it.
    Current,
    /// The first, even spread over every range.
    Coarse,
    /// A finer look around the best so far.
    Fine,
    /// The exported config, imported back: what the deployed file runs.
    Exported,
}

impl Stage {
    pub fn name(self) -> &'static str {
        match self {
            Stage::Current => "current",
            Stage::Coarse => "coarse",
            Stage::Fine => "fine",
            Stage::Exported => "exported",
        }
    }
}

/// One candidate, simulated.
#[derive(Debug, Clone, Serialize)]
pub struct Candidate {
    /// The varied keys' values (none for the current settings).
    pub settings: Vec<KeyValue>,
    pub stage: Stage,
    /// The ranking's row for it: whether it passes every gate, its server load (attempts
    /// per logical request at the server), worst second, success rate, p99.
    pub figures: RankRow,
    /// The gates it failed, by name.
    pub failed_gates: Vec<String>,
    /// No other candidate has as little server load and as high a success rate, one of
    /// them strictly better.
    pub frontier_success: bool,
    /// No other candidate has as little server load and as low a p99.
    pub frontier_p99: bool,
    /// The same settings run live, when confirmed.
    pub live: Option<Live>,
}

impl Candidate {
    /// `budget.ratio=0.1 max_attempts=3`; `current settings` for none.
    pub fn label(&self) -> String {
        if self.settings.is_empty() {
            return match self.stage {
                Stage::Exported => "exported config".to_owned(),
                _ => "current settings".to_owned(),
            };
        }
        let parts: Vec<String> = self
            .settings
            .iter()
            .map(|kv| format!("{}={}", kv.key, kv.value))
            .collect();
        parts.join(" ")
    }
}

/// A candidate run live, against the simulation that picked it.
#[derive(Debug, Clone, Serialize)]
pub struct Live {
    pub figures: RankRow,
    pub failed_gates: Vec<String>,
    /// Server and client amplification within the simulator's documented tolerance of
    /// the simulated ones, and the success rate within its points.
    pub agrees: bool,
    /// What differed beyond the tolerance, or that nothing did.
    pub detail: String,
    /// The live run's report, relative to tune.json.
    pub report: String,
}

/// The simulator's documented agreement with a live run (docs/simulator.md).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Tolerance {
    /// Amplification, client and server, may differ by this share.
    pub amplification: f64,
    /// The success rate may differ by this many percentage points.
    pub success_points: f64,
}

/// A gate's limit on one of the charts' figures.
#[derive(Debug, Clone, Serialize)]
pub struct GateLine {
    /// `success_rate` or `p99_ms`.
    pub metric: &'static str,
    pub limit: f64,
    /// The gate as the report names it: `success_rate >= 0.55`.
    pub gate: String,
}

/// The exported choice.
#[derive(Debug, Clone, Serialize)]
pub struct ExportView {
    pub format: &'static str,
    /// The files, relative to tune.json.
    pub files: Vec<String>,
    pub warnings: Vec<String>,
    /// The files' policy, imported back and simulated.
    pub simulated: Candidate,
}

#[derive(Debug, Clone, Serialize)]
pub struct TuneTable {
    pub schema: &'static str,
    pub plan: String,
    pub policy: String,
    pub seed: u64,
    /// Each `--vary`, as given.
    pub vary: Vec<String>,
    /// `grid` (every combination) or `coarse-then-fine`.
    pub search: &'static str,
    /// Simulated runs allowed, stated before the search.
    pub budget: usize,
    /// Simulated runs made.
    pub ran: usize,
    /// The search was interrupted.
    pub partial: bool,
    /// Wall time of the simulated search, in seconds.
    pub search_s: f64,
    pub tolerance: Tolerance,
    pub current: Candidate,
    /// The plan's success-rate and p99 gates on the policy, drawn on the charts.
    pub gate_lines: Vec<GateLine>,
    /// Every candidate, in the ranking's order.
    pub candidates: Vec<Candidate>,
    /// Index into `candidates` of the choice: the first that passes every gate, simulated
    /// and (when confirmed) live.
    pub chosen: Option<usize>,
    /// Why, or why there is none.
    pub reason: String,
    /// How many of the best were asked to be confirmed live.
    pub confirm: usize,
    pub export: Option<ExportView>,
    /// The command that exports the choice.
    pub export_command: Option<String>,
}
