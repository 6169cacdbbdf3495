//! The ranking: which of a run's policies to roll out, and what each other one costs
//! against it.
//!
//! Why this order: the plan's gates are the goals, so a policy that fails one is out
//! however cheap it is; among those that pass every gate, the one that asks least of the
//! server is the safest to roll out, because the server is what an outage leaves short.
//! "Least server load" is the fewest attempts per logical request as the fault-server
//! counted them (`amplification.server`; the client's count for a black box), ties going
//! to the lower worst second (`peak_1s`), then to the plan's order. A policy that did not
//! run its whole plan (`partial`) is never recommended.

use serde::{Deserialize, Serialize};

use super::model::PolicyReport;

/// The policies of a run, best first.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Ranking {
    /// The policy to roll out; null when none passes every gate.
    pub recommended: Option<String>,
    /// Why, in one sentence.
    pub reason: String,
    pub rows: Vec<RankRow>,
}

/// One policy's place: what the server received, what the user saw, the invariants.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankRow {
    pub policy: String,
    /// Every gate passed and the run completed.
    pub qualifies: bool,
    pub gates_passed: usize,
    pub gates: usize,
    /// The names of the gates that failed, in the plan's order; empty when none did.
    #[serde(default)]
    pub failed_gates: Vec<String>,
    pub partial: bool,
    /// Attempts per logical request the server received: what the ranking orders by.
    pub server_load: f64,
    pub amplification_client: f64,
    pub amplification_server: Option<f64>,
    pub peak_1s: f64,
    pub success_rate: f64,
    /// Of the sent logical requests, in milliseconds.
    pub p99_ms: f64,
    pub recovery_s: Option<f64>,
    /// Retries of permanent outcomes and of non-idempotent requests, duplicate side effects.
    pub violations: u64,
    pub synchrony: Option<f64>,
    /// This row minus the recommended one; null for the recommended row, and when none is.
    pub delta: Option<Delta>,
    /// Relay tiers between the client and the server that counted `server_load`.
    #[serde(default)]
    pub tiers: usize,
    /// A counterexample (`expect: fail`): shown for comparison, never recommended.
    #[serde(default)]
    pub counterexample: bool,
}

/// A policy's figures minus the recommended policy's: positive is more.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Delta {
    pub server_load: f64,
    pub peak_1s: f64,
    /// In points (0.05 is five points more).
    pub success_rate: f64,
    pub p99_ms: f64,
    /// Null unless both recovered.
    pub recovery_s: Option<f64>,
    pub violations: i64,
    pub synchrony: Option<f64>,
}

/// Ranks the policies of a run. Pure: the same reports give the same ranking.
/// [`rank`], for a run that may not have finished: one that was interrupted or could not
/// be completed recommends nothing, since the policies that never ran (or ran in part)
/// cannot be compared with those that did. The rows stay, for what they show.
pub(super) fn rank_run(policies: &[PolicyReport], unfinished: Option<&str>) -> Ranking {
    let mut ranking = rank(policies);
    if let Some(why) = unfinished {
        ranking.recommended = None;
        ranking.reason = format!(
            "the run {why}: a run that did not finish recommends nothing ({} of its policies ran, {} in full)",
            policies.len(),
            policies.iter().filter(|p| !p.partial).count()
        );
    }
    ranking
}

pub fn rank(policies: &[PolicyReport]) -> Ranking {
    let mut rows: Vec<RankRow> = policies.iter().map(row).collect();
    // Qualifiers first, cheapest first; then the rest, fewest failed gates first. A stable
    // sort keeps the plan's order for what remains equal.
    rows.sort_by(order);
    let Some(best) = rows.first().filter(|r| r.qualifies).cloned() else {
        let reason = if rows.is_empty() {
            "no policy ran".to_owned()
        } else {
            let why: Vec<String> = rows.iter().map(shortfall).collect();
            format!("no policy passes every gate: {}", why.join("; "))
        };
        return Ranking {
            recommended: None,
            reason,
            rows,
        };
    };
    let qualifying = rows.iter().filter(|r| r.qualifies).count();
    let among = match (qualifying, rows.len()) {
        (1, 1) => "the only policy, and it passes every gate".to_owned(),
        (1, _) => "the only policy that passes every gate".to_owned(),
        (n, _) => format!("the least server load of the {n} policies that pass every gate"),
    };
    let reason = format!(
        "{among}{}: {}{}",
        match rows.iter().filter(|r| r.counterexample).count() {
            0 => String::new(),
            1 => ", its counterexample left out".to_owned(),
            n => format!(", its {n} counterexamples left out"),
        },
        load_words(&best),
        if rows.iter().all(|r| r.gates == 0) {
            " (the plan sets no gates, so load alone decides)"
        } else {
            ""
        }
    );
    for r in rows.iter_mut().skip(1) {
        r.delta = Some(delta(r, &best));
    }
    Ranking {
        recommended: Some(best.policy),
        reason,
        rows,
    }
}

/// The ranking's order: qualifiers first, cheapest first (server load, then the worst
/// second); then the rest, fewest failed gates first. `harness tune` orders its candidates
/// by it too.
pub fn order(a: &RankRow, b: &RankRow) -> std::cmp::Ordering {
    b.qualifies
        .cmp(&a.qualifies)
        .then((a.gates - a.gates_passed).cmp(&(b.gates - b.gates_passed)))
        .then(a.server_load.total_cmp(&b.server_load))
        .then(a.peak_1s.total_cmp(&b.peak_1s))
}

/// A policy's place in the ranking, from its report.
pub fn row(p: &PolicyReport) -> RankRow {
    let v = &p.violations;
    let gates_passed = p.gates.iter().filter(|g| g.pass).count();
    RankRow {
        policy: p.name.clone(),
        qualifies: !p.partial && gates_passed == p.gates.len() && p.expect.is_none(),
        gates_passed,
        gates: p.gates.len(),
        failed_gates: p.failed_gates(),
        partial: p.partial,
        server_load: p.amplification.server.unwrap_or(p.amplification.client),
        amplification_client: p.amplification.client,
        amplification_server: p.amplification.server,
        peak_1s: p.amplification.peak_1s,
        success_rate: p.success_rate,
        p99_ms: p.latency_ms.p99,
        recovery_s: p.recovery_s,
        violations: {
            let retries = p.retry_violations();
            retries.retried_permanent
                + retries.retried_non_idempotent
                + v.duplicate_side_effects.unwrap_or(0)
        },
        synchrony: p.synchrony,
        delta: None,
        tiers: p.tiers.len(),
        counterexample: p.expect.is_some(),
    }
}

/// Where a row's load was counted, and the worst second's, in words: the server's ledger,
/// the leaf's behind tiers (while the worst second is the client's), or the client's own
/// count against a black box.
fn load_words(r: &RankRow) -> String {
    match (r.amplification_server.is_some(), r.tiers) {
        (true, 0) => format!(
            "{:.2} attempts per logical request at the server, {:.2} in the worst second",
            r.server_load, r.peak_1s
        ),
        (true, n) => format!(
            "{:.2} attempts per logical request at the server behind {n} tier{}, and the client's worst second {:.2}",
            r.server_load,
            if n == 1 { "" } else { "s" },
            r.peak_1s
        ),
        (false, _) => format!(
            "{:.2} attempts per logical request as the client counted them (a black box keeps no count), {:.2} in the worst second",
            r.server_load, r.peak_1s
        ),
    }
}

fn delta(r: &RankRow, best: &RankRow) -> Delta {
    let both = |a: Option<f64>, b: Option<f64>| Some(a? - b?);
    Delta {
        server_load: r.server_load - best.server_load,
        peak_1s: r.peak_1s - best.peak_1s,
        success_rate: r.success_rate - best.success_rate,
        p99_ms: r.p99_ms - best.p99_ms,
        recovery_s: both(r.recovery_s, best.recovery_s),
        violations: i64::try_from(r.violations).unwrap_or(i64::MAX)
            - i64::try_from(best.violations).unwrap_or(i64::MAX),
        synchrony: both(r.synchrony, best.synchrony),
    }
}

/// Why a policy does not qualify: `naive fails 2 of 9 gates`, `grpc stopped early`.
fn shortfall(r: &RankRow) -> String {
    if r.counterexample {
        return format!("{} is a counterexample", r.policy);
    }
    let failed = r.gates - r.gates_passed;
    match (failed, r.partial) {
        (0, _) => format!("{} stopped early", r.policy),
        (n, false) => format!("{} fails {n} of {} gates", r.policy, r.gates),
        (n, true) => format!(
            "{} fails {n} of {} gates and stopped early",
            r.policy, r.gates
        ),
    }
}

impl Ranking {
    /// `recommended: NAME (why)`, or `recommended: none (why)`: the terminal's line.
    pub fn line(&self) -> String {
        format!(
            "recommended: {} ({})",
            self.recommended.as_deref().unwrap_or("none"),
            self.reason
        )
    }

    /// The table's header and one row of cells per policy, as every renderer shows them.
    pub fn cells(&self) -> Vec<[String; 13]> {
        let opt = |x: Option<f64>, digits: usize| {
            x.map_or_else(|| "–".to_owned(), |v| format!("{v:.digits$}"))
        };
        let signed = |x: Option<f64>, digits: usize| {
            x.map_or_else(|| "–".to_owned(), |v| format!("{v:+.digits$}"))
        };
        let mut out = vec![
            [
                "rank",
                "policy",
                "gates",
                "failed gates",
                "server load",
                "peak 1s",
                "success",
                "p99 ms",
                "recovery s",
                "violations",
                "synchrony",
                "Δ load / peak",
                "Δ success / p99 ms",
            ]
            .map(str::to_owned),
        ];
        for (i, r) in self.rows.iter().enumerate() {
            let d = r.delta.as_ref();
            let recommended = self.recommended.as_deref() == Some(r.policy.as_str());
            out.push([
                (i + 1).to_string(),
                if recommended {
                    format!("{} (recommended)", r.policy)
                } else if r.counterexample {
                    format!("{} (counterexample)", r.policy)
                } else {
                    r.policy.clone()
                },
                format!(
                    "{}/{}{}",
                    r.gates_passed,
                    r.gates,
                    if r.partial { " partial" } else { "" }
                ),
                super::verdict::failed_gates_cell(&r.failed_gates),
                format!("{:.2}", r.server_load),
                format!("{:.2}", r.peak_1s),
                format!("{:.1}%", r.success_rate * 100.0),
                format!("{:.0}", r.p99_ms),
                opt(r.recovery_s, 0),
                r.violations.to_string(),
                opt(r.synchrony, 2),
                d.map_or_else(
                    || "–".to_owned(),
                    |d| {
                        format!(
                            "{} / {}",
                            signed(Some(d.server_load), 2),
                            signed(Some(d.peak_1s), 2)
                        )
                    },
                ),
                d.map_or_else(
                    || "–".to_owned(),
                    |d| {
                        format!(
                            "{} pts / {}",
                            signed(Some(d.success_rate * 100.0), 1),
                            signed(Some(d.p99_ms), 0)
                        )
                    },
                ),
            ]);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::float_cmp)] // Tests: a panic is the failure report.

    use super::{Ranking, rank, rank_run};
    use crate::report::{GateResult, PolicyReport};

    /// A policy with these figures: `(name, server load, peak 1s, gates passed of 3,
    /// partial)`; the other figures derive from the load so deltas are checkable.
    fn policy(name: &str, load: f64, peak: f64, passed: usize, partial: bool) -> PolicyReport {
        let json = serde_json::json!({
            "name": name, "summary": "", "partial": partial,
            "offered": 100, "logical": 100, "succeeded": 90, "failed": 10, "dropped": 0,
            "unfinished": 0, "attempts": 100, "retries": 0, "cut": 0,
            "success_rate": 1.0 - load / 10.0,
            "amplification": { "client": load - 0.5, "server": load, "peak_1s": peak, "budget_bound": null },
            "give_ups": {},
            "violations": { "retried_permanent": 3 - passed as u64, "retried_non_idempotent": 0, "duplicate_side_effects": 0 },
            "violation_examples": {},
            "latency_ms": { "p50": 1.0, "p90": 1.0, "p99": load * 100.0, "p999": 1.0, "max": 1.0 },
            "offered_latency_ms": { "p50": 1.0, "p90": 1.0, "p99": 1.0, "p999": 1.0 },
            "attempt_latency_ms": { "p50": 1.0, "p90": 1.0, "p99": 1.0, "p999": 1.0, "max": 1.0 },
            "arrival_lag_ms": { "p50": 1.0, "p90": 1.0, "p99": 1.0, "p999": 1.0, "max": 1.0 },
            "recovery_s": load.floor(), "outcomes": {}, "breaker_trips": 0,
            "series": [], "gates": [], "synchrony": peak
        });
        let mut p: PolicyReport = serde_json::from_value(json).unwrap();
        p.gates = (0..3)
            .map(|i| GateResult {
                name: format!("g{i}"),
                pass: i < passed,
                measured: None,
                limit: None,
                detail: String::new(),
            })
            .collect();
        p
    }

    fn order(r: &Ranking) -> Vec<&str> {
        r.rows.iter().map(|r| r.policy.as_str()).collect()
    }

    #[test]
    fn the_reason_says_where_the_load_was_counted() {
        let mut p = policy("a", 1.5, 2.0, 3, false);
        assert!(
            rank(std::slice::from_ref(&p)).reason.contains(
                "1.50 attempts per logical request at the server, 2.00 in the worst second"
            )
        );
        p.amplification.server = None;
        let black_box = rank(std::slice::from_ref(&p)).reason;
        assert!(
            black_box.contains("as the client counted them (a black box keeps no count)"),
            "{black_box}"
        );
        let mut chained = policy("a", 1.5, 2.0, 3, false);
        chained.tiers = vec![serde_json::from_value(serde_json::json!({"name": "api", "policy": "same", "received": 1, "logical": 1, "sent": 1, "retries": 0, "succeeded": 1, "gave_up": 0, "no_retry_received": 0, "amplification": 1.0, "agrees": true})).unwrap(); 2];
        let chain = rank(std::slice::from_ref(&chained)).reason;
        assert!(
            chain.contains("at the server behind 2 tiers, and the client's worst second 2.00"),
            "{chain}"
        );
    }

    #[test]
    fn a_run_that_did_not_finish_recommends_nothing() {
        let ran = [
            policy("grpc", 1.0, 1.0, 3, false),
            policy("naive", 1.8, 3.4, 3, true),
        ];
        assert_eq!(rank_run(&ran, None).recommended.as_deref(), Some("grpc"));
        let r = rank_run(&ran, Some("could not be completed"));
        assert_eq!(r.recommended, None);
        assert_eq!(
            r.reason,
            "the run could not be completed: a run that did not finish recommends nothing (2 of its policies ran, 1 in full)"
        );
        assert_eq!(order(&r), ["grpc", "naive"], "the rows stay");
    }

    #[test]
    fn recommends_the_least_server_load_among_those_that_pass_every_gate() {
        // (case, policies in the plan's order, recommended, the rows' order)
        type Case<'a> = (&'a str, Vec<PolicyReport>, Option<&'a str>, &'a [&'a str]);
        let table: &[Case<'_>] = &[
            (
                "cheapest qualifier wins over a cheaper failer",
                vec![
                    policy("naive", 3.0, 4.0, 3, false),
                    policy("cheap-but-failing", 1.0, 1.0, 2, false),
                    policy("jittered", 1.2, 1.5, 3, false),
                ],
                Some("jittered"),
                &["jittered", "naive", "cheap-but-failing"],
            ),
            (
                "a tie in load goes to the lower worst second",
                vec![
                    policy("a", 1.2, 2.0, 3, false),
                    policy("b", 1.2, 1.5, 3, false),
                ],
                Some("b"),
                &["b", "a"],
            ),
            (
                "a full tie keeps the plan's order",
                vec![
                    policy("first", 1.2, 1.5, 3, false),
                    policy("second", 1.2, 1.5, 3, false),
                ],
                Some("first"),
                &["first", "second"],
            ),
            (
                "a partial run is never recommended",
                vec![
                    policy("stopped", 1.0, 1.0, 3, true),
                    policy("whole", 2.0, 2.0, 3, false),
                ],
                Some("whole"),
                &["whole", "stopped"],
            ),
            (
                "none passes: none recommended, fewest failed gates first",
                vec![
                    policy("x", 1.0, 1.0, 0, false),
                    policy("y", 2.0, 2.0, 2, false),
                    policy("z", 1.5, 1.5, 2, false),
                ],
                None,
                &["z", "y", "x"],
            ),
            ("nothing ran", vec![], None, &[]),
        ];
        for (name, policies, recommended, expected) in table {
            let r = rank(policies);
            assert_eq!(r.recommended.as_deref(), *recommended, "{name}");
            assert_eq!(order(&r), *expected, "{name}");
            assert_eq!(
                r.rows.iter().filter(|row| row.delta.is_some()).count(),
                if recommended.is_some() {
                    expected.len() - 1
                } else {
                    0
                },
                "{name}: every row but the recommended one has deltas, and none without one"
            );
        }
    }

    #[test]
    fn deltas_are_each_policy_minus_the_recommended_one() {
        let r = rank(&[
            policy("naive", 3.0, 4.0, 2, false),
            policy("jittered", 1.5, 1.5, 3, false),
        ]);
        let naive = &r.rows[1];
        let d = naive.delta.as_ref().unwrap();
        assert_eq!(naive.policy, "naive");
        assert_eq!(d.server_load, 1.5);
        assert_eq!(d.peak_1s, 2.5);
        assert!((d.success_rate - -0.15).abs() < 1e-12, "{}", d.success_rate);
        assert_eq!(d.p99_ms, 150.0);
        assert_eq!(d.recovery_s, Some(2.0));
        assert_eq!(d.violations, 1);
        assert_eq!(d.synchrony, Some(2.5));
    }

    #[test]
    fn the_reason_says_why_in_one_line() {
        let one = rank(&[
            policy("naive", 3.0, 4.0, 2, false),
            policy("jittered", 1.5, 1.5, 3, false),
        ]);
        assert_eq!(
            one.line(),
            "recommended: jittered (the only policy that passes every gate: 1.50 attempts per logical request at the server, 1.50 in the worst second)"
        );
        let none = rank(&[
            policy("naive", 3.0, 4.0, 2, false),
            policy("grpc", 1.5, 1.5, 3, true),
        ]);
        assert_eq!(
            none.line(),
            "recommended: none (no policy passes every gate: grpc stopped early; naive fails 1 of 3 gates)"
        );
        let cells = one.cells();
        assert_eq!(cells.len(), 3, "a header and a row per policy");
        assert_eq!(cells[1][1], "jittered (recommended)");
        assert_eq!(cells[1][3], "—", "jittered failed no gate");
        assert_eq!(cells[2][3], "g2", "naive failed its third gate");
        assert_eq!(cells[2][11], "+1.50 / +2.50");
        assert_eq!(cells[2][12], "-15.0 pts / +150");
    }
}
