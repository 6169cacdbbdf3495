//! The comparison a sweep makes (`chaos-sweep/v1`): one point per value and policy, each
//! naming the value's full report.

use serde::Serialize;

use crate::report::Report;

/// One policy at one value.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Point {
    pub value: String,
    pub policy: String,
    pub verdict: String,
    pub success_rate: f64,
    pub amplification_client: f64,
    pub amplification_server: Option<f64>,
    pub peak_1s: Option<f64>,
    pub budget_bound: Option<f64>,
    pub recovery_s: Option<f64>,
    pub p99_ms: f64,
    /// The value's full report, relative to the sweep's directory.
    pub report: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct SweepTable {
    pub schema: &'static str,
    pub plan: String,
    pub seed: u64,
    pub key: String,
    /// Every value asked for, in order.
    pub values: Vec<String>,
    /// How many of `values`, the first ones, ran; `points` hold theirs.
    pub ran: usize,
    /// Fewer values ran than were asked: the sweep was interrupted (or is still running,
    /// when read while it writes as it goes).
    pub partial: bool,
    pub points: Vec<Point>,
}

impl SweepTable {
    /// The policies, in the order they first appear: each keeps its colour in every chart.
    pub(super) fn policies(&self) -> Vec<&str> {
        let mut seen: Vec<&str> = Vec::new();
        for p in &self.points {
            if !seen.contains(&p.policy.as_str()) {
                seen.push(&p.policy);
            }
        }
        seen
    }
}

/// Every policy of one value's report, its report in `dir`.
pub(super) fn points(report: &Report, value: &str, dir: &str) -> Vec<Point> {
    report
        .policies
        .iter()
        .map(|p| Point {
            value: value.to_owned(),
            policy: p.name.clone(),
            verdict: if p.gates.iter().all(|g| g.pass) {
                "pass"
            } else {
                "fail"
            }
            .to_owned(),
            success_rate: p.success_rate,
            amplification_client: p.amplification.client,
            amplification_server: p.amplification.server,
            peak_1s: Some(p.amplification.peak_1s),
            budget_bound: p.amplification.budget_bound,
            recovery_s: p.recovery_s,
            p99_ms: p.latency_ms.p99,
            report: format!("{dir}/report.html"),
        })
        .collect()
}

/// `3-0.2`: the value's place and the value, made safe for a directory name.
pub(super) fn value_dir(i: usize, value: &str) -> String {
    let safe: String = value
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .take(40)
        .collect();
    format!("{}-{safe}", i + 1)
}

#[cfg(test)]
mod tests {
    use super::value_dir;

    #[test]
    fn value_directories_are_safe_names() {
        assert_eq!(value_dir(0, "0.1"), "1-0.1");
        assert_eq!(value_dir(2, "{ fixed: 1s }"), "3-__fixed__1s__");
    }
}
