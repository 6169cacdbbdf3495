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
    /// The names of the gates that failed, in the plan's order; empty when none did.
    pub failed_gates: Vec<String>,
    /// The same in the table's words (a counterexample's expected failures, and the
    /// gates it named that did not fail): [`crate::report::PolicyReport::failed_gates_text`].
    #[serde(skip)]
    pub failed_gates_text: String,
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

impl Point {
    /// The figures without the value and the report: equal at every value when the swept
    /// key is not this policy's.
    fn figures(&self) -> impl PartialEq + '_ {
        (
            &self.policy,
            &self.verdict,
            &self.failed_gates,
            self.success_rate,
            self.amplification_client,
            self.amplification_server,
            self.peak_1s,
            self.budget_bound,
            self.recovery_s,
            self.p99_ms,
        )
    }
}

impl SweepTable {
    /// The policies whose figures are the same at every value that ran (more than one):
    /// the sweep did not touch them.
    pub(super) fn unchanged(&self) -> Vec<&str> {
        let ran: Vec<&String> = self
            .values
            .iter()
            .filter(|v| self.points.iter().any(|p| &&p.value == v))
            .collect();
        if ran.len() < 2 {
            return Vec::new();
        }
        self.policies()
            .into_iter()
            .filter(|policy| {
                let mine: Vec<&Point> =
                    self.points.iter().filter(|p| p.policy == *policy).collect();
                mine.len() == ran.len() && mine.windows(2).all(|w| w[0].figures() == w[1].figures())
            })
            .collect()
    }

    /// The table's rows: every point of the policies the sweep changed, then one row,
    /// valued `every value (not swept)`, for each it did not, rather than the same row
    /// per value.
    pub(super) fn rows(&self) -> Vec<(String, &Point)> {
        let unchanged = self.unchanged();
        let mut rows: Vec<(String, &Point)> = self
            .points
            .iter()
            .filter(|p| !unchanged.contains(&p.policy.as_str()))
            .map(|p| (p.value.clone(), p))
            .collect();
        for policy in unchanged {
            if let Some(p) = self.points.iter().find(|p| p.policy == policy) {
                rows.push(("every value (not swept)".to_owned(), p));
            }
        }
        rows
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
            verdict: if p.as_expected() { "pass" } else { "fail" }.to_owned(),
            failed_gates: p.failed_gates(),
            failed_gates_text: p.failed_gates_text(),
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
    fn a_policy_the_sweep_did_not_change_is_one_row_at_the_end() {
        let point = |value: &str, policy: &str, success: f64| super::Point {
            value: value.into(),
            policy: policy.into(),
            verdict: "pass".into(),
            failed_gates: Vec::new(),
            failed_gates_text: "—".into(),
            success_rate: success,
            amplification_client: 1.0,
            amplification_server: Some(1.0),
            peak_1s: Some(1.0),
            budget_bound: None,
            recovery_s: None,
            p99_ms: 1.0,
            report: format!("{value}/report.html"),
        };
        let table = super::SweepTable {
            schema: "chaos-sweep/v1",
            plan: "p".into(),
            seed: 1,
            key: "swept.max_attempts".into(),
            values: vec!["1".into(), "2".into()],
            points: vec![
                point("1", "swept", 0.5),
                point("1", "other", 0.7),
                point("2", "swept", 0.6),
                point("2", "other", 0.7),
            ],
            ran: 2,
            partial: false,
        };
        assert_eq!(table.unchanged(), ["other"]);
        let rows: Vec<(String, &str)> = table
            .rows()
            .into_iter()
            .map(|(v, p)| (v, p.policy.as_str()))
            .collect();
        assert_eq!(
            rows,
            [
                ("1".to_owned(), "swept"),
                ("2".to_owned(), "swept"),
                ("every value (not swept)".to_owned(), "other")
            ]
        );
    }

    #[test]
    fn value_directories_are_safe_names() {
        assert_eq!(value_dir(0, "0.1"), "1-0.1");
        assert_eq!(value_dir(2, "{ fixed: 1s }"), "3-__fixed__1s__");
    }
}
