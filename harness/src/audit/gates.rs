//! The plan's gates the worst case decides, and what a counterexample expects of them.
//!
//! Why only these: `leaf_amplification`'s maximum, `no_retry_of_non_idempotent`,
//! `retries_at_one_tier` and (when the plan's faults answer a permanent status)
//! `no_retry_of_permanent` follow from the configs alone; the other gates measure what
//! only a run has (latency, success, what the ledger reconciled).

use super::findings::{self, Trace};
use super::walk::Class;
use super::{Case, GateCheck, HopInfo};
use crate::plan::{Check, GateKind, Metric, NamedPolicy, Plan};

/// Each gate of `plan` that applies to `policy` and that the worst case decides.
/// `leaf_amplification` bounds a run's mean: the worst request's figure, or the budgets'
/// bound over the run when that is less (`budgeted`).
pub(super) fn checks(
    plan: &Plan,
    policy: &NamedPolicy,
    infos: &[HopInfo],
    traces: &[Trace],
    worst: &Case,
    budgeted: Option<f64>,
) -> Vec<GateCheck> {
    let mut out = Vec::new();
    for gate in plan.gates.iter().filter(|g| g.applies_to(&policy.name)) {
        let (holds, why) = match &gate.kind {
            GateKind::Metric {
                metric: Metric::LeafAmplification,
                max: Some(max),
                ..
            } => leaf(worst, budgeted, *max),
            GateKind::Check(Check::NoRetryOfNonIdempotent) => {
                let hops = findings::resenders(infos, traces);
                match hops.is_empty() {
                    true => (true, "no hop resends a non-idempotent request".into()),
                    false => (false, format!("resent by {}", hops.join(", "))),
                }
            }
            GateKind::Check(Check::NoRetryOfPermanent) => {
                let permanent = traces.iter().any(|t| match t.class {
                    Class::Status(s) => chaos_policy::Outcome::Status(s).forbids_retry(),
                    _ => false,
                });
                if !permanent {
                    continue;
                }
                let hops = findings::permanent_retriers(infos, traces);
                match hops.is_empty() {
                    true => (true, "no hop retries the plan's permanent statuses".into()),
                    false => (false, format!("retried by {}", hops.join(", "))),
                }
            }
            GateKind::Check(Check::RetriesAtOneTier) => {
                let hops = findings::retrying_hops(infos, traces);
                let why = match hops.is_empty() {
                    true => "no hop retries".to_owned(),
                    false => format!("retried by {}", hops.join(", ")),
                };
                (hops.len() <= 1, why)
            }
            _ => continue,
        };
        let name = gate.name();
        let expected_to_fail = policy
            .expect
            .as_ref()
            .is_some_and(|e| !e.fail.is_empty() && e.covers(&name));
        out.push(GateCheck {
            gate: name,
            holds,
            expected_to_fail,
            why,
        });
    }
    out
}

fn leaf(worst: &Case, budgeted: Option<f64>, max: f64) -> (bool, String) {
    let per_request = format!(
        "worst case {} attempts at the leaf per logical request ({}, {})",
        worst.leaf, worst.method, worst.failure
    );
    match budgeted.filter(|b| *b < worst.leaf as f64) {
        Some(b) => (
            b <= max,
            format!("{per_request}; {b:.2} over the run once the budgets bind"),
        ),
        None => (worst.leaf as f64 <= max, per_request),
    }
}

/// Whether a policy's gates come out as the plan expects: each as expected, and a
/// counterexample that names no gate fails at least one (when the audit judges any).
pub(super) fn as_expected(policy: &NamedPolicy, gates: &[GateCheck]) -> bool {
    match &policy.expect {
        Some(e) if e.fail.is_empty() => gates.is_empty() || gates.iter().any(|g| !g.holds),
        _ => gates.iter().all(GateCheck::as_expected),
    }
}
