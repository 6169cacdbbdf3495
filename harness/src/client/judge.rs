//! The ledger's judgement of a program under test, as a policy's report: the same figures
//! a run of the harness's own policies has where the server can know them, the rest
//! empty, and what only a client test measures (`ClientView`: grouping, backoff, waits
//! for `Retry-After`).

use std::collections::BTreeMap;

use chaos_policy::{
    Client, Method, Outcome, Request, ResetPhase, RunCounts, Unprocessed, Violation,
};
use fault_server::Judged;
use fault_server::ledger::Seen;
use fault_server::ledger::retries::RetryAfter;

use super::Tested;
use crate::plan::{NamedPolicy, Plan};
use crate::report::{
    self, Amplification, BackoffRow, ClientView, LedgerView, OfferedPercentiles, Percentiles,
    PolicyReport, Violations,
};

/// The report of the program's run: its one entry of `policies`.
pub fn policy_report(plan: &Plan, tested: &Tested) -> PolicyReport {
    let named = &plan.policies[0];
    let expected = plan.client.as_ref().is_some_and(|c| c.expected);
    let l = &tested.ledger;
    let judged = l.judged.clone().unwrap_or_default();
    let Retried {
        permanent: retried_permanent,
        non_idempotent: retried_non_idempotent,
        fresh_key: retried_with_fresh_key,
    } = violations(&judged.retries);
    let logical = l.logical;
    let succeeded = judged.succeeded.min(logical);
    let ratio = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
    let budget_bound = expected
        .then(|| {
            Client::new(named.policy.clone()).budget_bound(RunCounts {
                logical,
                duration: plan.duration,
            })
        })
        .flatten();
    let latency = latency(&judged);
    let report = PolicyReport {
        name: named.name.clone(),
        preset: named.preset.map(|p| p.name().to_owned()),
        summary: if expected {
            format!(
                "the program, expected to follow {}",
                report::describe_policy(&named.policy)
            )
        } else {
            "the program (no expected policy)".to_owned()
        },
        resolved: expected.then(|| crate::plan::resolved::named(named)),
        partial: !matches!(tested.program.ended, super::Ended::Exited(_)),
        offered: logical,
        logical,
        succeeded,
        failed: logical - succeeded,
        dropped: 0,
        unfinished: 0,
        attempts: l.attempts,
        retries: l.attempts.saturating_sub(logical),
        retries_succeeded: 0,
        cut: 0,
        success_rate: ratio(succeeded, logical),
        amplification: Amplification {
            client: ratio(l.attempts, logical),
            server: Some(ratio(l.attempts, logical)),
            // Attempts per call that sent one in the second: the series' calls are
            // the ones that began in it, which counts a call begun the second before as
            // all retries.
            peak_1s: judged.busiest_second.ratio(),
            budget_bound,
        },
        give_ups: BTreeMap::new(),
        violations: Violations {
            retried_permanent,
            retried_non_idempotent,
            duplicate_side_effects: Some(l.duplicate_side_effects),
            retried_with_fresh_key: Some(retried_with_fresh_key),
        },
        violation_examples: BTreeMap::from([
            (
                "duplicate_side_effects".to_owned(),
                l.duplicate_examples.clone(),
            ),
            (
                "retried_with_fresh_key".to_owned(),
                judged.fresh_keys.examples.clone(),
            ),
        ]),
        offered_latency_ms: OfferedPercentiles {
            p50: Some(latency.p50),
            p90: Some(latency.p90),
            p99: Some(latency.p99),
            p999: Some(latency.p999),
        },
        latency_ms: latency,
        attempt_latency_ms: Percentiles::default(),
        arrival_lag_ms: Percentiles::default(),
        connection_wait: None,
        connections_opened: None,
        recovery_s: None,
        outcomes: l.by_outcome.clone(),
        breaker_trips: 0,
        ledger: Some(ledger_view(tested)),
        series: tested.series.clone(),
        gates: Vec::new(),
        synchrony: None,
        leaf_amplification: Some(ratio(l.attempts, logical)),
        shared_budget: false,
        tiers: Vec::new(),
        waves_50ms: Vec::new(),
        client: Some(client_view(tested, &judged, expected.then_some(named))),
        expect: None,
    };
    report::judged(plan, named, report)
}

/// The ledger beside the program's counts, which are the ledger's own.
fn ledger_view(tested: &Tested) -> LedgerView {
    let l = &tested.ledger;
    LedgerView {
        attempts: l.attempts,
        logical: l.logical,
        side_effects: l.side_effects,
        duplicate_side_effects: l.duplicate_side_effects,
        idempotent_replays: l.idempotent_replays,
        client_unsent: 0,
        client_abandoned: 0,
        client_reached: l.logical,
        // The program's counts are the ledger's: nothing to disagree with.
        reconciled: true,
        by_outcome: l.by_outcome.clone(),
        by_peer: l.by_peer.clone(),
        repeats_by_method: crate::report::repeats(l),
    }
}

/// What only a client test measures: the program, how the server grouped its requests,
/// the retries it judged, and the waits against the `expected` policy's.
fn client_view(tested: &Tested, judged: &Judged, expected: Option<&NamedPolicy>) -> ClientView {
    ClientView {
        command: tested.program.command.clone(),
        exit: tested.program.ended.describe(),
        grouped_by: judged.grouped_by.clone(),
        guessed_attempts: judged.guessed_attempts,
        window_ms: judged.window_ms,
        split: judged.split.clone(),
        fresh_keys: judged.fresh_keys.clone(),
        overlapping: judged.overlapping,
        retries_after: judged.retries.clone(),
        retry_after: judged.retry_after.clone(),
        backoff: backoff(judged, expected),
        stdout: tested.program.stdout.clone(),
        stderr: tested.program.stderr.clone(),
    }
}

/// What a retry after `after` (a [`Seen`] label of the ledger's) means, in
/// `chaos-policy`'s vocabulary: the one definition of a retry that breaks an invariant.
/// A label the ledger does not write judges nothing.
fn outcome(after: &str) -> Option<Outcome> {
    Some(match after.parse::<Seen>().ok()? {
        Seen::Status(code) => Outcome::Status(code),
        Seen::Reset => Outcome::Reset(ResetPhase::AfterWrite),
        Seen::Close => Outcome::Closed,
        Seen::Truncate => Outcome::TruncatedBody,
        Seen::Timeout => Outcome::AttemptTimeout,
        Seen::Refused => Outcome::Unprocessed(Unprocessed::RefusedStream),
    })
}

/// The retries that broke an invariant, by which.
#[derive(Debug, Default, PartialEq, Eq)]
struct Retried {
    permanent: u64,
    non_idempotent: u64,
    /// Side effects resent under a key other than the call's: judged as if unkeyed (a
    /// changed key protects nothing), and counted apart from keyless ones.
    fresh_key: u64,
}

/// Retries after a permanent answer, retried side effects without a key, and with a
/// fresh one.
fn violations(retries: &[RetryAfter]) -> Retried {
    let mut retried = Retried::default();
    for r in retries {
        let request = Request {
            method: if r.side_effect {
                Method::parse("POST")
            } else {
                Method::parse("GET")
            },
            idempotency_key: r.keyed && !r.fresh_key,
        };
        let Some(outcome) = outcome(&r.after) else {
            continue;
        };
        for violation in Violation::of_retry(request, outcome) {
            match violation {
                Violation::RetriedPermanent => retried.permanent += r.retries,
                Violation::RetriedNonIdempotent if r.fresh_key && r.keyed => {
                    retried.fresh_key += r.retries
                }
                Violation::RetriedNonIdempotent => retried.non_idempotent += r.retries,
            }
        }
    }
    retried
}

fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

/// From a logical request's first attempt to its first 2xx.
fn latency(judged: &Judged) -> Percentiles {
    let at = |name: &str| ms(judged.latency_us.get(name).copied().unwrap_or(0));
    Percentiles {
        p50: at("p50"),
        p90: at("p90"),
        p99: at("p99"),
        p999: at("p99.9"),
        max: at("max"),
    }
}

/// The measured waits per attempt number, each against the expected policy's range.
fn backoff(judged: &Judged, expected: Option<&NamedPolicy>) -> Vec<BackoffRow> {
    judged
        .gaps
        .iter()
        .map(|g| {
            let range = expected.map(|named| {
                let retry = g.attempt.saturating_sub(1).max(1);
                let (low, high) = named.policy.config().backoff.range(retry, None);
                let (low, high) = (low.as_secs_f64() * 1e3, high.as_secs_f64() * 1e3);
                let tolerance = report::tolerance_ms(high);
                [(low - tolerance).max(0.0), high + tolerance]
            });
            let (p10, p90) = (ms(g.p10_us), ms(g.p90_us));
            BackoffRow {
                attempt: g.attempt,
                count: g.count,
                min_ms: ms(g.min_us),
                p10_ms: p10,
                p50_ms: ms(g.p50_us),
                p90_ms: p90,
                p99_ms: ms(g.p99_us),
                max_ms: ms(g.max_us),
                expected_ms: range,
                within: range.map(|[low, high]| p10 >= low && p90 <= high),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    use fault_server::ledger::group::{Claim, GroupedBy};
    use fault_server::ledger::{Arriving, Judging, Ledger, LedgerLimits};

    #[test]
    fn latency_p99_9_is_the_ledgers_own_not_its_p99() {
        let ledger = Ledger::new(LedgerLimits::default()).judging(Judging::default());
        // 1,000 logical requests answered 1 ms, 2 ms, ... 1,000 ms after they arrived.
        for i in 1..=1000u64 {
            let id = format!("r{i}");
            let arriving = Arriving {
                claim: Claim::Named(GroupedBy::RequestId, &id),
                fingerprint: i,
                stated_attempt: None,
                side_effect: false,
                key: None,
            };
            let grouped = ledger
                .group(arriving, Duration::ZERO)
                .expect("the ledger judges");
            ledger.answered(&grouped, Duration::from_millis(i), Seen::Status(200), None);
        }
        let judged = ledger.snapshot().judged.expect("the ledger judges");
        let latency = super::latency(&judged);
        // The histogram keeps three significant digits.
        assert!((latency.p99 - 990.0).abs() <= 1.0, "{latency:?}");
        assert!((latency.p999 - 999.0).abs() <= 1.0, "{latency:?}");
    }

    fn retried(after: &str, side_effect: bool) -> RetryAfter {
        RetryAfter {
            after: after.into(),
            side_effect,
            keyed: false,
            fresh_key: false,
            retries: 1,
        }
    }

    fn counts(permanent: u64, non_idempotent: u64, fresh_key: u64) -> Retried {
        Retried {
            permanent,
            non_idempotent,
            fresh_key,
        }
    }

    /// A key minted per attempt: a keyed POST resent under a fresh key is judged as the
    /// keyless one it amounts to, and counted apart; after a refusal (never run) it is
    /// safe whatever its key.
    #[test]
    fn a_retry_under_a_fresh_key_is_judged_as_unkeyed_and_counted_apart() {
        let fresh = |after: &str, keyed| RetryAfter {
            keyed,
            fresh_key: true,
            ..retried(after, true)
        };
        assert_eq!(violations(&[fresh("close", true)]), counts(0, 0, 1));
        assert_eq!(violations(&[fresh("close", false)]), counts(0, 1, 0));
        assert_eq!(violations(&[fresh("status_400", true)]), counts(1, 0, 1));
        assert_eq!(violations(&[fresh("refuse", true)]), counts(0, 0, 0));
        let same_key = RetryAfter {
            keyed: true,
            ..retried("close", true)
        };
        assert_eq!(violations(&[same_key]), counts(0, 0, 0));
    }

    /// The drift issue 46 found: the ledger writes `refuse` after a refused stream, which
    /// this judge did not parse and read as a 200, so a POST resent after a refusal (which
    /// proves the server never ran it) was a non-idempotent retry.
    #[test]
    fn a_retry_after_a_refused_stream_breaks_nothing() {
        assert_eq!(violations(&[retried("refuse", true)]), counts(0, 0, 0));
        assert_eq!(violations(&[retried("refuse", false)]), counts(0, 0, 0));
    }

    #[test]
    fn each_label_of_the_ledger_is_judged_as_what_it_is() {
        assert_eq!(violations(&[retried("status_400", false)]), counts(1, 0, 0));
        assert_eq!(violations(&[retried("status_503", false)]), counts(0, 0, 0));
        assert_eq!(violations(&[retried("status_503", true)]), counts(0, 1, 0));
        assert_eq!(violations(&[retried("reset", true)]), counts(0, 1, 0));
        assert_eq!(violations(&[retried("timeout", false)]), counts(0, 0, 0));
        assert_eq!(violations(&[retried("not-a-label", true)]), counts(0, 0, 0));
    }
}
