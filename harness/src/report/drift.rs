//! A run against its baseline, as data the renderers show: every figure's drift. The
//! baseline module computes it (`baseline::compare`); the report carries and
//! renders it.

use serde::{Deserialize, Serialize};

/// How a figure moved against its baseline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Drift {
    /// Within tolerance (or better).
    Ok,
    /// Worse than the tolerance allows.
    Regressed,
    /// The policy is in the baseline and not in this run.
    Missing,
    /// The policy is new: nothing to compare with.
    New,
}

/// One figure of one policy, against the baseline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    pub policy: String,
    pub metric: String,
    pub baseline: Option<f64>,
    pub now: Option<f64>,
    /// `now - baseline`.
    pub change: Option<f64>,
    /// What the tolerance allows, in words (`+0.05`, `+25% or +50 ms`).
    pub tolerance: String,
    pub verdict: Drift,
}

/// A run against its baseline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    /// The baseline's file.
    pub file: String,
    /// The plan and seed are those the baseline came from.
    pub same_plan: bool,
    /// What the reader must know: a changed plan or seed, a policy that is new.
    pub notes: Vec<String>,
    pub rows: Vec<Row>,
}

impl Comparison {
    pub fn regressions(&self) -> impl Iterator<Item = &Row> {
        self.rows
            .iter()
            .filter(|r| matches!(r.verdict, Drift::Regressed | Drift::Missing))
    }

    pub fn passed(&self) -> bool {
        self.regressions().next().is_none()
    }

    /// The rows worst first (regressed and missing, then new, then within tolerance), in
    /// their own order otherwise: what a reader must see comes before what is fine.
    pub fn worst_first(&self) -> Vec<&Row> {
        let rank = |r: &Row| match r.verdict {
            Drift::Regressed | Drift::Missing => 0,
            Drift::New => 1,
            Drift::Ok => 2,
        };
        let mut rows: Vec<&Row> = self.rows.iter().collect();
        rows.sort_by_key(|r| rank(r));
        rows
    }

    /// How `policy` fares: `None` when it is within tolerance, else what regressed
    /// (`REGRESSED amplification, p99_ms`, `MISSING`) or `new`.
    pub fn verdict_of(&self, policy: &str) -> Option<String> {
        let mine: Vec<&Row> = self.rows.iter().filter(|r| r.policy == policy).collect();
        if mine.iter().any(|r| r.verdict == Drift::New) {
            return Some("new".to_owned());
        }
        if mine.iter().any(|r| r.verdict == Drift::Missing) {
            return Some("MISSING".to_owned());
        }
        let regressed: Vec<&str> = mine
            .iter()
            .filter(|r| r.verdict == Drift::Regressed)
            .map(|r| r.metric.as_str())
            .collect();
        (!regressed.is_empty()).then(|| format!("REGRESSED {}", regressed.join(", ")))
    }
}
