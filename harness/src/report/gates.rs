//! Gates: what a plan requires of each policy, judged on the report's figures.
//!
//! Each result records what was measured, the limit, and one line naming example request
//! ids, so a failed gate in CI says which requests to look for in the server's logs.

use super::model::{Expectation, GateResult, PolicyReport, RetryViolations};
use crate::plan::{Check, Expect, Gate, GateKind, Metric, Plan};

/// The gates of `plan` that apply to the policy of `report`, evaluated.
pub fn evaluate(plan: &Plan, report: &PolicyReport) -> Vec<GateResult> {
    plan.gates
        .iter()
        .filter(|g| g.applies_to(&report.name))
        .map(|g| super::client::on_a_guess(evaluate_one(g, report), report))
        .collect()
}

/// A counterexample's expectation judged on its evaluated gates: each gate it names must
/// have failed (for a bare `expect: fail`, some gate), and on something measured, since a
/// policy that ran nothing fails every gate and proves no detector works.
pub fn expectation(expect: &Expect, r: &PolicyReport) -> Expectation {
    let judged = |met: bool, detail: String| Expectation {
        fail: expect.fail.clone(),
        met,
        detail,
    };
    if r.logical == 0 {
        return judged(
            false,
            "it started no logical request, so its gates' failures prove nothing: the detectors were not tried".to_owned(),
        );
    }
    let caught = |gates: Vec<&GateResult>| {
        let said: Vec<String> = gates
            .iter()
            .map(|g| format!("`{}` ({})", g.name, g.detail))
            .collect();
        format!("caught as expected: {}", said.join("; "))
    };
    if expect.fail.is_empty() {
        let failed: Vec<&GateResult> = r.gates.iter().filter(|g| !g.pass).collect();
        return if failed.is_empty() {
            judged(
                false,
                format!(
                    "expected a gate to fail: none of its {} did, the detectors did not fire",
                    r.gates.len()
                ),
            )
        } else {
            judged(true, caught(failed))
        };
    }
    let mut missed = Vec::new();
    let mut failed = Vec::new();
    for name in &expect.fail {
        let named: Vec<&GateResult> = r
            .gates
            .iter()
            .filter(|g| Expect::names(name, &g.name))
            .collect();
        match named.iter().find(|g| !g.pass) {
            Some(g) => failed.push(*g),
            None => missed.push(match named.first() {
                Some(g) => format!(
                    "expected `{name}` to fail: the detector did not fire ({})",
                    g.detail
                ),
                None => format!("expected `{name}` to fail: no such gate judged it"),
            }),
        }
    }
    if missed.is_empty() {
        judged(true, caught(failed))
    } else {
        judged(false, missed.join("; "))
    }
}

fn examples(report: &PolicyReport, key: &str) -> String {
    match report.violation_examples.get(key) {
        Some(ids) if !ids.is_empty() => format!("; e.g. {}", ids.join(", ")),
        _ => String::new(),
    }
}

fn count_gate(name: String, measured: u64, what: &str, example: String) -> GateResult {
    GateResult {
        name,
        pass: measured == 0,
        measured: Some(measured as f64),
        limit: Some(0.0),
        detail: if measured == 0 {
            format!("no {what}")
        } else {
            format!("{measured} {what}{example}")
        },
    }
}

fn evaluate_one(gate: &Gate, r: &PolicyReport) -> GateResult {
    let name = gate.name();
    if r.logical == 0 {
        return nothing_measured(name, r);
    }
    match &gate.kind {
        GateKind::Check(Check::AmplificationWithinBudget) => amplification_within_budget(name, r),
        GateKind::Check(Check::NoRetryOfPermanent) => no_retry_of_permanent(name, r),
        GateKind::Check(Check::NoRetryOfNonIdempotent) => no_retry_of_non_idempotent(name, r),
        GateKind::Check(Check::NoDuplicateSideEffects) => no_duplicate_side_effects(name, r),
        GateKind::Check(Check::RetriesAtOneTier) => retries_at_one_tier(name, r),
        GateKind::Check(Check::ClientServerAgree) => client_server_agree(name, r),
        GateKind::Check(Check::RetryAfterHonoured) => super::client::retry_after_honoured(name, r),
        GateKind::Check(Check::BackoffWithinPreset) => {
            super::client::backoff_within_preset(name, r)
        }
        GateKind::Check(Check::NoRetryWithFreshKey) => {
            super::client::no_retry_with_fresh_key(name, r)
        }
        GateKind::Metric { metric, min, max } => metric_within(name, r, *metric, *min, *max),
    }
}

/// Any gate of a policy that started no logical request: every figure is vacuous, and a
/// green gate would hide a plan that measured nothing.
fn nothing_measured(name: String, r: &PolicyReport) -> GateResult {
    let detail = if r.dropped > 0 {
        format!(
            "nothing was measured: all {} arrivals were dropped at max_in_flight",
            r.dropped
        )
    } else {
        "nothing was measured: the policy started no logical request".to_owned()
    };
    GateResult {
        name,
        pass: false,
        measured: None,
        limit: None,
        detail,
    }
}

fn amplification_within_budget(name: String, r: &PolicyReport) -> GateResult {
    // The bound is per logical request the client issued, so the server's count of
    // attempts is held to it over the same requests.
    // Behind relay tiers the client's own attempts are what the first tier received;
    // the leaf's count holds every tier's retries too, which no client budget bounds,
    // unless every hop drew them from the client's budget (`share_budget`).
    let server = match r.tiers.first() {
        Some(_) if r.shared_budget => r.leaf_amplification,
        Some(first) => Some(first.received as f64 / r.logical as f64),
        None => r
            .ledger
            .as_ref()
            .map(|l| l.attempts as f64 / r.logical as f64),
    };
    let measured = server.unwrap_or(0.0).max(r.amplification.client);
    match r.amplification.budget_bound {
        Some(bound) => GateResult {
            name,
            pass: measured <= bound + 1e-9,
            measured: Some(measured),
            limit: Some(bound),
            detail: format!(
                "amplification {measured:.3} (client {:.3}{}) vs the budget's bound {bound:.3}",
                r.amplification.client,
                server.map_or(String::new(), |s| match r.shared_budget {
                    true => format!(", at the leaf, every hop's retries drawn from it, {s:.3}"),
                    false => format!(", server-counted attempts per logical request {s:.3}"),
                }),
            ),
        },
        None => GateResult {
            name,
            pass: true,
            measured: Some(measured),
            limit: None,
            detail: "not applicable: the policy has no ratio budget; bound it with `{ metric: amplification, max: X }`".to_owned(),
        },
    }
}

fn no_retry_of_permanent(name: String, r: &PolicyReport) -> GateResult {
    retry_gate(
        name,
        r,
        "retried_permanent",
        "retries after a permanent outcome (4xx other than 408/429, 501 or 508)",
        |v| v.retried_permanent,
    )
}

fn no_retry_of_non_idempotent(name: String, r: &PolicyReport) -> GateResult {
    retry_gate(
        name,
        r,
        "retried_non_idempotent",
        "retries of a non-idempotent request without proof it was unsent",
        |v| v.retried_non_idempotent,
    )
}

/// A gate on retries that broke an invariant (`key`), at every hop: the client's, and
/// behind relay tiers each tier's, named, so a careful client does not hide a tier
/// that retries what it must not.
fn retry_gate(
    name: String,
    r: &PolicyReport,
    key: &str,
    what: &str,
    count: fn(&RetryViolations) -> u64,
) -> GateResult {
    let client = count(&r.violations.retries());
    if r.tiers.is_empty() {
        return count_gate(name, client, what, examples(r, key));
    }
    let mut hops = vec![("client", client, r.violation_examples.get(key))];
    hops.extend(r.tiers.iter().map(|t| {
        (
            t.name.as_str(),
            count(&t.violations),
            t.violation_examples.get(key),
        )
    }));
    let total: u64 = hops.iter().map(|(_, n, _)| n).sum();
    let detail = if total == 0 {
        format!("no {what} at any hop")
    } else {
        hops.iter()
            .filter(|(_, n, _)| *n > 0)
            .map(|(hop, n, ids)| {
                let ids = match ids {
                    Some(ids) if !ids.is_empty() => format!(" (e.g. {})", ids.join(", ")),
                    _ => String::new(),
                };
                format!("{hop} sent {n} {what}{ids}")
            })
            .collect::<Vec<_>>()
            .join("; ")
    };
    GateResult {
        name,
        pass: total == 0,
        measured: Some(total as f64),
        limit: Some(0.0),
        detail,
    }
}

fn no_duplicate_side_effects(name: String, r: &PolicyReport) -> GateResult {
    match r.violations.duplicate_side_effects {
        Some(n) => count_gate(
            name,
            n,
            "duplicate side effects (ledger)",
            examples(r, "duplicate_side_effects"),
        ),
        None => GateResult {
            name,
            pass: false,
            measured: None,
            limit: Some(0.0),
            detail: "cannot be checked without a fault-server ledger".to_owned(),
        },
    }
}

fn retries_at_one_tier(name: String, r: &PolicyReport) -> GateResult {
    let mut hops = vec![("client", r.retries)];
    hops.extend(r.tiers.iter().map(|t| (t.name.as_str(), t.retries)));
    let retrying = hops.iter().filter(|(_, n)| *n > 0).count();
    GateResult {
        name,
        pass: retrying <= 1,
        measured: Some(retrying as f64),
        limit: Some(1.0),
        detail: format!(
            "{retrying} hop(s) sent retries: {}",
            hops.iter()
                .map(|(hop, n)| format!("{hop} {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

fn client_server_agree(name: String, r: &PolicyReport) -> GateResult {
    match &r.ledger {
        // Behind relay tiers: every hop, the last one's attempts against the leaf's.
        Some(l) if !r.tiers.is_empty() => GateResult {
            name,
            pass: l.reconciled,
            measured: Some(l.attempts as f64),
            limit: r.tiers.last().map(|t| t.sent as f64),
            detail: hop_detail(r, l.attempts),
        },
        Some(l) => GateResult {
            name,
            pass: l.reconciled,
            measured: Some(l.attempts as f64),
            limit: Some(r.attempts as f64),
            detail: format!(
                "server saw {} attempts of {} logical requests; the client sent {} attempts of {} logical requests, {} of which reached the server ({} attempts failed to connect, {} were abandoned on the wire at the end)",
                l.attempts,
                l.logical,
                r.attempts,
                r.logical,
                l.client_reached,
                l.client_unsent,
                l.client_abandoned
            ),
        },
        None => GateResult {
            name,
            pass: false,
            measured: None,
            limit: None,
            detail: "cannot be checked without a fault-server ledger".to_owned(),
        },
    }
}

/// What the attempts that did not succeed ended in, most first: what a failed success
/// gate is made of ("attempts that failed ended 532 × 404, 20 × 503").
fn failed_outcomes(r: &PolicyReport) -> String {
    let mut failed: Vec<(&String, &u64)> = r
        .outcomes
        .iter()
        .filter(|(outcome, n)| **n > 0 && !succeeded(outcome))
        .collect();
    if failed.is_empty() {
        return "no attempt failed (the requests that did not succeed were dropped or unfinished)"
            .to_owned();
    }
    failed.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    let shown: Vec<String> = failed
        .iter()
        .take(4)
        .map(|(outcome, n)| format!("{n} × {outcome}"))
        .collect();
    let more = match failed.len().saturating_sub(4) {
        0 => String::new(),
        n => format!(" and {n} more kinds"),
    };
    format!("attempts that failed ended {}{more}", shown.join(", "))
}

/// Whether an outcome label is an answer that succeeded, in any of the vocabularies a
/// report's outcomes come in: the client's (`200`, `grpc_ok`) or, for a client test, the
/// ledger's (`served`, `replayed`, a 2xx `status_…` fault or `upstream_…` answer).
fn succeeded(outcome: &str) -> bool {
    let status = outcome
        .strip_prefix("status_")
        .or_else(|| outcome.strip_prefix("upstream_"))
        .unwrap_or(outcome);
    matches!(outcome, "served" | "replayed" | "grpc_ok")
        || (status.len() == 3
            && status.starts_with('2')
            && status.bytes().all(|b| b.is_ascii_digit()))
}

/// `{ metric, min, max }`: the metric measured, and within its bounds.
fn metric_within(
    name: String,
    r: &PolicyReport,
    metric: Metric,
    min: Option<f64>,
    max: Option<f64>,
) -> GateResult {
    let measured = measure(metric, r);
    let pass = measured.is_some_and(|m| min.is_none_or(|x| m >= x) && max.is_none_or(|x| m <= x));
    let limit = max.or(min);
    let detail = match measured {
        None if metric == Metric::RecoveryS => {
            "did not recover to the pre-fault success rate (or no fault window)".to_owned()
        }
        None if metric == Metric::Synchrony => {
            "no synchrony: the plan has no windowed fault phase (`from:`/`until:`) to measure it across, or fewer retries were sent in it than it has 50 ms buckets (under one per 50 ms: too few to tell waves from chance)".to_owned()
        }
        None if is_latency(metric) => format!(
            "{} of the offered load is unbounded: {} of {} arrivals ({:.1}%) were dropped, and a dropped arrival never completes",
            metric.name(),
            r.dropped,
            r.offered,
            r.dropped as f64 * 100.0 / r.offered.max(1) as f64
        ),
        None => "not measured in this run".to_owned(),
        Some(m) if is_latency(metric) && r.dropped > 0 => format!(
            "{} = {} (must be {}; over the offered load, its {} dropped arrivals ranked slowest)",
            metric.name(),
            round(m),
            bound_text(min, max),
            r.dropped
        ),
        Some(m) if metric == Metric::SuccessRate && !pass => format!(
            "{} = {} (must be {}); {}",
            metric.name(),
            round(m),
            bound_text(min, max),
            failed_outcomes(r)
        ),
        Some(m) => format!(
            "{} = {} (must be {})",
            metric.name(),
            round(m),
            bound_text(min, max)
        ),
    };
    GateResult {
        name,
        pass,
        measured,
        limit,
        detail,
    }
}

fn is_latency(metric: Metric) -> bool {
    matches!(
        metric,
        Metric::P50Ms | Metric::P90Ms | Metric::P99Ms | Metric::P999Ms
    )
}

fn bound_text(min: Option<f64>, max: Option<f64>) -> String {
    match (min, max) {
        (Some(a), Some(b)) => format!("within [{a}, {b}]"),
        (Some(a), None) => format!(">= {a}"),
        (None, Some(b)) => format!("<= {b}"),
        (None, None) => String::new(),
    }
}

/// Every hop of a chain: what each sent and the next received.
fn hop_detail(r: &PolicyReport, leaf: u64) -> String {
    let mut parts = Vec::new();
    let mut from = ("client", r.attempts);
    for t in &r.tiers {
        parts.push(format!(
            "{} sent {} → {} received {}",
            from.0, from.1, t.name, t.received
        ));
        from = (t.name.as_str(), t.sent);
    }
    parts.push(format!("{} sent {} → leaf received {leaf}", from.0, from.1));
    parts.join("; ")
}

fn round(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

fn measure(metric: Metric, r: &PolicyReport) -> Option<f64> {
    Some(match metric {
        Metric::SuccessRate => r.success_rate,
        Metric::P50Ms => r.offered_latency_ms.p50?,
        Metric::P90Ms => r.offered_latency_ms.p90?,
        Metric::P99Ms => r.offered_latency_ms.p99?,
        Metric::P999Ms => r.offered_latency_ms.p999?,
        Metric::Amplification => r.amplification.client,
        Metric::ServerAmplification => r.amplification.server?,
        Metric::PeakAmplification => r.amplification.peak_1s,
        Metric::RecoveryS => r.recovery_s?,
        Metric::Dropped => r.dropped as f64,
        Metric::DroppedRatio => r.dropped as f64 / r.offered.max(1) as f64,
        Metric::Retries => r.retries as f64,
        Metric::Synchrony => r.synchrony?,
        Metric::LeafAmplification => r.leaf_amplification?,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // Tests: a panic is the failure report.

    use super::{failed_outcomes, succeeded};
    use crate::report::PolicyReport;

    /// A policy whose attempts ended in these outcomes.
    fn ended(outcomes: &[(&str, u64)]) -> PolicyReport {
        let outcomes: serde_json::Map<String, serde_json::Value> = outcomes
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).into()))
            .collect();
        let p = serde_json::json!({ "p50": 1.0, "p90": 1.0, "p99": 1.0, "p999": 1.0, "max": 1.0 });
        serde_json::from_value(serde_json::json!({
            "name": "p", "summary": "", "offered": 100, "logical": 100, "succeeded": 20,
            "failed": 80, "dropped": 0, "unfinished": 0, "attempts": 100, "retries": 0,
            "cut": 0, "success_rate": 0.2,
            "amplification": { "client": 1.0, "server": 1.0, "peak_1s": 1.0, "budget_bound": null },
            "give_ups": {}, "violations": { "retried_permanent": 0, "retried_non_idempotent": 0 },
            "violation_examples": {}, "latency_ms": p, "attempt_latency_ms": p,
            "arrival_lag_ms": p,
            "offered_latency_ms": { "p50": 1.0, "p90": 1.0, "p99": 1.0, "p999": 1.0 },
            "recovery_s": null, "outcomes": outcomes, "breaker_trips": 0, "series": [],
            "gates": []
        }))
        .unwrap()
    }

    #[test]
    fn a_successful_answer_is_never_listed_among_the_failed_attempts() {
        for ok in [
            "200",
            "204",
            "served",
            "replayed",
            "grpc_ok",
            "upstream_200",
            "status_201",
        ] {
            assert!(succeeded(ok), "{ok}");
        }
        for failed in [
            "503",
            "404",
            "status_503",
            "upstream_404",
            "upstream_timeout",
            "reset",
            "grpc_unavailable",
            "2xx",
            "",
        ] {
            assert!(!succeeded(failed), "{failed}");
        }
        // A client test's outcomes are the ledger's: `served` is a success.
        let said = failed_outcomes(&ended(&[("served", 20), ("status_503", 70), ("reset", 10)]));
        assert_eq!(
            said,
            "attempts that failed ended 70 × status_503, 10 × reset"
        );
        let said = failed_outcomes(&ended(&[("200", 20), ("upstream_404", 80)]));
        assert_eq!(said, "attempts that failed ended 80 × upstream_404");
        assert!(failed_outcomes(&ended(&[("served", 20)])).starts_with("no attempt failed"));
    }
}
