//! Baselines: a run's figures saved as a small versioned JSON (`chaos-baseline/v1`), and the
//! comparison of a later run against them, the nightly regression gate.
//!
//! A live run on a shared machine varies, so each figure has a tolerance that says how much
//! worse it may get before it is a regression: an absolute one for rates and ratios that the
//! seed mostly fixes, and for latency a ratio with an absolute floor, since a few
//! milliseconds of noise on a fast percentile is a large ratio and no regression. A figure
//! that got better is never a failure. A plan or seed that changed since the baseline is
//! said plainly (the digests differ), and the figures are compared all the same.

use serde::{Deserialize, Serialize};

pub use crate::plan::{Relative, Tolerance, bounds};
use crate::report::{Comparison, Drift, PolicyReport, Report, Row};
pub use read::{MAX_POLICIES, read};

pub const SCHEMA: &str = "chaos-baseline/v1";

/// A saved run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Baseline {
    pub schema: String,
    pub generated_at: String,
    pub plan: PlanIdentity,
    /// The tolerance in force when it was saved: `harness compare` uses it.
    pub tolerance: Tolerance,
    #[serde(deserialize_with = "read::at_most_policies")]
    pub policies: Vec<Figures>,
}

/// Which plan and seed a run came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanIdentity {
    pub name: String,
    pub file: String,
    pub seed: u64,
    /// Of the plan's text and the seed: equal digests, same experiment.
    pub digest: String,
}

/// One policy's figures, as a baseline keeps them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Figures {
    pub name: String,
    pub offered: u64,
    pub logical: u64,
    pub succeeded: u64,
    pub attempts: u64,
    pub retries: u64,
    pub dropped: u64,
    pub amplification: f64,
    pub server_amplification: Option<f64>,
    pub peak_amplification: f64,
    pub success_rate: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub recovery_s: Option<f64>,
    pub dropped_ratio: f64,
    /// Retries of permanent or non-idempotent requests and duplicate side effects.
    pub violations: u64,
    /// The policy as it resolved (every field, as `validate --explain` writes it): a
    /// regression then says which fields of the policy changed, not only that the plan
    /// did. Absent from baselines saved before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved: Option<crate::plan::resolved::Value>,
}

impl Figures {
    pub fn of(p: &PolicyReport) -> Figures {
        read::Reported::of(p).figures()
    }
}

impl Baseline {
    pub fn of(report: &Report, tolerance: Tolerance) -> Baseline {
        Baseline {
            schema: SCHEMA.to_owned(),
            generated_at: report.generated_at.clone(),
            plan: identity(report),
            tolerance,
            policies: report.policies.iter().map(Figures::of).collect(),
        }
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a baseline always serialises") + "\n"
    }
}

fn identity(report: &Report) -> PlanIdentity {
    PlanIdentity {
        name: report.plan.name.clone(),
        file: report.plan.file.clone(),
        seed: report.plan.seed,
        digest: report.plan.digest.clone().unwrap_or_default(),
    }
}

/// Why a file could not be read as a baseline or a report.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("cannot read {file}: {source}")]
    Io {
        file: String,
        source: std::io::Error,
    },
    #[error("{file} is neither a baseline (`{SCHEMA}`) nor a report (`chaos-report/v1`): {detail}")]
    Format { file: String, detail: String },
    #[error(
        "{file} is larger than {} MiB: not a baseline (a baseline is a few KiB; a report.json read as one, a few MiB)",
        MAX_BASELINE_BYTES >> 20
    )]
    TooLarge { file: String },
    #[error("{file} cannot be compared: {reason}")]
    Invalid { file: String, reason: Invalid },
}

/// Why a `chaos-baseline/v1` file that parsed is refused: a baseline that passes
/// everything, or fails unchanged figures, is no gate.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Invalid {
    #[error("it has no policies (`policies: []`), so every run would pass against it")]
    NoPolicies,
    #[error(
        "`tolerance.{field}` is {value:?}: it must be a number from 0 to {max} (a larger tolerance turns the check off)"
    )]
    Tolerance {
        field: &'static str,
        value: f64,
        max: f64,
    },
    #[error("policy `{policy}`: `{field}` is {value:?}: it must be {range}")]
    Figure {
        policy: String,
        field: &'static str,
        value: f64,
        range: &'static str,
    },
    #[error("policy `{policy}` appears more than once: the policies' names must differ")]
    DuplicatePolicy { policy: String },
}

impl Baseline {
    /// Checks a baseline read from a file: at least one policy, each named once, each
    /// tolerance within [`bounds`], and each figure within its range (no NaN anywhere).
    pub fn validate(&self) -> Result<(), Invalid> {
        if self.policies.is_empty() {
            return Err(Invalid::NoPolicies);
        }
        if let Some((field, value, max)) = self.tolerance.out_of_range() {
            return Err(Invalid::Tolerance { field, value, max });
        }
        // A set, not a scan: a 64 MiB file may hold many policies.
        let mut names = std::collections::HashSet::new();
        for p in &self.policies {
            if !names.insert(p.name.as_str()) {
                return Err(Invalid::DuplicatePolicy {
                    policy: p.name.clone(),
                });
            }
            p.validate()?;
        }
        Ok(())
    }
}

impl Figures {
    /// Rates and ratios within [0, 1]; amplification, latency and recovery zero or more;
    /// all finite. (Counts are unsigned: a negative one does not parse.)
    fn validate(&self) -> Result<(), Invalid> {
        const RATIO: (f64, &str) = (1.0, "a number from 0 to 1");
        const NON_NEGATIVE: (f64, &str) = (f64::INFINITY, "a number, zero or more");
        let fields = [
            ("success_rate", Some(self.success_rate), RATIO),
            ("dropped_ratio", Some(self.dropped_ratio), RATIO),
            ("amplification", Some(self.amplification), NON_NEGATIVE),
            (
                "server_amplification",
                self.server_amplification,
                NON_NEGATIVE,
            ),
            (
                "peak_amplification",
                Some(self.peak_amplification),
                NON_NEGATIVE,
            ),
            ("p50_ms", Some(self.p50_ms), NON_NEGATIVE),
            ("p90_ms", Some(self.p90_ms), NON_NEGATIVE),
            ("p99_ms", Some(self.p99_ms), NON_NEGATIVE),
            ("p999_ms", Some(self.p999_ms), NON_NEGATIVE),
            ("recovery_s", self.recovery_s, NON_NEGATIVE),
        ];
        for (field, value, (max, range)) in fields {
            let Some(value) = value else { continue };
            if !(value.is_finite() && (0.0..=max).contains(&value)) {
                return Err(Invalid::Figure {
                    policy: self.name.clone(),
                    field,
                    value,
                    range,
                });
            }
        }
        Ok(())
    }
}

/// The largest file read as a baseline: a report.json of a long run (its series holds a
/// row a second per policy) fits many times over.
pub const MAX_BASELINE_BYTES: u64 = 64 << 20;

/// Which way is worse for a figure.
#[derive(Clone, Copy)]
enum Worse {
    /// Higher is worse by more than an absolute amount.
    Up(f64),
    /// Lower is worse by more than an absolute amount.
    Down(f64),
    /// Higher is worse by more than a ratio of the baseline and a floor.
    UpRelative(Relative),
}

impl Worse {
    fn regressed(self, base: f64, now: f64) -> bool {
        // A hair of slack so a figure saved and read back as decimal text compares equal.
        const EPS: f64 = 1e-9;
        match self {
            Worse::Up(t) => now > base + t + EPS,
            Worse::Down(t) => now < base - t - EPS,
            Worse::UpRelative(r) => {
                now > base * (1.0 + r.ratio) + EPS && now > base + r.floor + EPS
            }
        }
    }

    fn describe(self) -> String {
        match self {
            Worse::Up(t) => format!("+{}", round(t)),
            Worse::Down(t) => format!("-{}", round(t)),
            Worse::UpRelative(r) => {
                format!("+{}% and +{} ms", round(r.ratio * 100.0), round(r.floor))
            }
        }
    }
}

fn round(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// Compares this run's policies (`now`, with its plan digest) against `baseline`, with
/// `tolerance`.
pub fn compare(
    baseline: &Baseline,
    file: &str,
    now: &[Figures],
    now_plan: &PlanIdentity,
    tolerance: &Tolerance,
) -> Comparison {
    let mut notes = Vec::new();
    let same_plan = baseline.plan.digest == now_plan.digest && !now_plan.digest.is_empty();
    if !same_plan {
        notes.push(format!(
            "the plan or seed changed since the baseline ({} seed {}, digest {}; now {} seed {}, digest {}): the figures are compared all the same; save a new baseline if the change is intended",
            baseline.plan.file,
            baseline.plan.seed,
            baseline.plan.digest,
            now_plan.file,
            now_plan.seed,
            now_plan.digest
        ));
    }
    let mut rows = Vec::new();
    for base in &baseline.policies {
        let Some(current) = now.iter().find(|p| p.name == base.name) else {
            rows.push(Row {
                policy: base.name.clone(),
                metric: "policy".to_owned(),
                baseline: None,
                now: None,
                change: None,
                tolerance: "present".to_owned(),
                verdict: Drift::Missing,
            });
            continue;
        };
        if let (Some(was), Some(now)) = (&base.resolved, &current.resolved)
            && !was.same(now)
        {
            notes.push(format!(
                "policy `{}` changed since the baseline: {}",
                base.name,
                changed_fields(was, now)
            ));
        }
        rows.extend(policy_rows(base, current, tolerance));
    }
    for current in now {
        if !baseline.policies.iter().any(|b| b.name == current.name) {
            notes.push(format!(
                "policy `{}` is not in the baseline: nothing to compare it with",
                current.name
            ));
            rows.push(Row {
                policy: current.name.clone(),
                metric: "policy".to_owned(),
                baseline: None,
                now: None,
                change: None,
                tolerance: "–".to_owned(),
                verdict: Drift::New,
            });
        }
    }
    Comparison {
        file: file.to_owned(),
        same_plan,
        notes,
        rows,
    }
}

/// What differs between two resolved policies, field by field: `max_attempts 2 → 5`.
fn changed_fields(
    was: &crate::plan::resolved::Value,
    now: &crate::plan::resolved::Value,
) -> String {
    use crate::plan::resolved::Value;
    let (Value::Map(old), Value::Map(new)) = (was, now) else {
        return format!("{} → {}", was.flow(), now.flow());
    };
    let mut changes: Vec<String> = Vec::new();
    for (key, value) in new {
        match old.iter().find(|(k, _)| k == key) {
            Some((_, before)) if before.same(value) => {}
            Some((_, before)) => {
                changes.push(format!("{key} {} → {}", before.flow(), value.flow()))
            }
            None => changes.push(format!("{key} {} (new)", value.flow())),
        }
    }
    for (key, _) in old {
        if !new.iter().any(|(k, _)| k == key) {
            changes.push(format!("{key} (gone)"));
        }
    }
    changes.join(", ")
}

fn policy_rows(base: &Figures, now: &Figures, t: &Tolerance) -> Vec<Row> {
    let figures: [(&str, Option<f64>, Option<f64>, Worse); 9] = [
        (
            "amplification",
            Some(base.amplification),
            Some(now.amplification),
            Worse::Up(t.amplification),
        ),
        (
            "server_amplification",
            base.server_amplification,
            now.server_amplification,
            Worse::Up(t.amplification),
        ),
        (
            "peak_amplification",
            Some(base.peak_amplification),
            Some(now.peak_amplification),
            Worse::Up(t.peak_amplification),
        ),
        (
            "success_rate",
            Some(base.success_rate),
            Some(now.success_rate),
            Worse::Down(t.success_rate),
        ),
        (
            "p50_ms",
            Some(base.p50_ms),
            Some(now.p50_ms),
            Worse::UpRelative(t.p50_ms),
        ),
        (
            "p99_ms",
            Some(base.p99_ms),
            Some(now.p99_ms),
            Worse::UpRelative(t.p99_ms),
        ),
        (
            "recovery_s",
            base.recovery_s,
            now.recovery_s,
            Worse::Up(t.recovery_s),
        ),
        (
            "dropped_ratio",
            Some(base.dropped_ratio),
            Some(now.dropped_ratio),
            Worse::Up(t.dropped_ratio),
        ),
        (
            "violations",
            Some(base.violations as f64),
            Some(now.violations as f64),
            Worse::Up(0.0),
        ),
    ];
    figures
        .into_iter()
        .filter(|(_, b, n, _)| b.is_some() || n.is_some())
        .map(|(metric, b, n, worse)| {
            let verdict = match (b, n) {
                (Some(b), Some(n)) if worse.regressed(b, n) => Drift::Regressed,
                // A recovery that was measured and is now lost (never got back).
                (Some(_), None) => Drift::Regressed,
                _ => Drift::Ok,
            };
            Row {
                policy: base.name.clone(),
                metric: metric.to_owned(),
                baseline: b,
                now: n,
                change: b.zip(n).map(|(b, n)| round(n - b)),
                tolerance: worse.describe(),
                verdict,
            }
        })
        .collect()
}

/// Compares a finished run's report against a baseline and records the outcome in it: the
/// verdict fails on any regression.
/// Judges `report` against `baseline` and attaches the comparison. The policies in
/// `not_run` (the plan has them, `--policy` left them out) are not judged: they are not
/// missing, only not asked for.
pub fn attach(
    report: &mut Report,
    baseline: &Baseline,
    file: &str,
    tolerance: &Tolerance,
    not_run: &[String],
) {
    let now: Vec<Figures> = report.policies.iter().map(Figures::of).collect();
    let mut asked = baseline.clone();
    asked.policies.retain(|p| !not_run.contains(&p.name));
    let mut comparison = compare(&asked, file, &now, &identity(report), tolerance);
    let skipped: Vec<String> = baseline
        .policies
        .iter()
        .filter(|p| not_run.contains(&p.name))
        .map(|p| format!("`{}`", p.name))
        .collect();
    if !skipped.is_empty() {
        comparison.notes.push(format!(
            "{} of the baseline not judged: this run did not run {} (--policy)",
            skipped.join(", "),
            if skipped.len() == 1 { "it" } else { "them" }
        ));
    }
    if !comparison.passed() {
        report.verdict = "fail".to_owned();
    }
    report.baseline = Some(comparison);
}

mod read;

#[cfg(test)]
mod tests;
