//! From a run's measurements to the report model.

use std::collections::BTreeMap;
use std::ops::RangeInclusive;
use std::time::Duration;

use chaos_policy::{Backoff, BreakerState, BudgetConfig, Jitter, Outcome, Unprocessed};
use fault_server::ledger::LedgerSnapshot;
use hdrhistogram::Histogram;

use super::Mode;
use super::gates;
use super::model::{
    Amplification, ConnectionWait, ConnectionsOpened, LedgerView, OfferedPercentiles, Percentiles,
    PolicyReport, RetryViolations, SeriesPoint, TierReport, Violations,
};
use crate::hop::HopCounts;
use crate::plan::{NamedPolicy, Plan, TierKind};
use crate::stats::{PolicyRun, Recorder, Second, quantile_ms, synchrony};

/// One policy's run and what the server's ledger said of it.
#[derive(Debug)]
pub struct PolicyOutcome<'a> {
    pub policy: &'a NamedPolicy,
    pub run: PolicyRun,
    pub ledger: Option<LedgerSnapshot>,
    /// What each relay tier counted, outermost first (empty without tiers).
    pub tiers: Vec<HopCounts>,
    /// What each proxy tier counted besides, in the same order (`None`: a relay tier, or
    /// a real proxy, counted from the next hop's ledger alone).
    pub proxies: Vec<Option<crate::hop::proxy::ProxyCounts>>,
}

pub(crate) fn percentiles(h: &Histogram<u64>) -> Percentiles {
    Percentiles {
        p50: quantile_ms(h, 0.50),
        p90: quantile_ms(h, 0.90),
        p99: quantile_ms(h, 0.99),
        p999: quantile_ms(h, 0.999),
        max: if h.is_empty() {
            0.0
        } else {
            h.max() as f64 / 1000.0
        },
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 { 0.0 } else { a as f64 / b as f64 }
}

/// The amplification of each second's traffic: the attempts its logical requests made,
/// whenever they were sent, over the requests sent in it; the worst second.
pub fn peak_1s(series: &[Second]) -> f64 {
    series
        .iter()
        .filter(|s| s.offered > s.dropped)
        .map(|s| ratio(s.scheduled_attempts, s.offered - s.dropped))
        .fold(0.0, f64::max)
}

/// Each relay tier's row: what it received from the hop above and sent to the next, its
/// amplification over the client's logical requests, and whether the next hop received
/// exactly what it sent (the next tier's count, or the leaf's ledger).
fn tier_reports(
    policy: &NamedPolicy,
    r: &Recorder,
    tiers: &[HopCounts],
    leaf_attempts: Option<u64>,
) -> Vec<TierReport> {
    tiers
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let set = policy.tiers.get(i);
            let next = match tiers.get(i + 1) {
                Some(next) => Some(next.received),
                None => leaf_attempts,
            };
            TierReport {
                name: set.map_or_else(|| format!("tier{i}"), |s| s.tier.clone()),
                policy: set.map_or_else(String::new, |s| match (&s.proxy, s.kind) {
                    (Some(p), _) => format!(
                        "{} ({}, {}, {} peers)",
                        p.model.kind.name(),
                        p.file.display(),
                        p.block,
                        p.model.peers.len()
                    ),
                    (None, TierKind::None) => "none (forward once)".to_owned(),
                    (None, TierKind::Same) => format!("same: {}", describe_policy(&s.policy)),
                    (None, TierKind::Mesh) => format!(
                        "{} ({}, route {}): {}",
                        s.mesh.as_ref().map_or("mesh", |m| m.kind()),
                        s.mesh
                            .as_ref()
                            .map_or(String::new(), |m| m.virtual_service.display().to_string()),
                        s.mesh.as_ref().map_or("", |m| m.route.as_str()),
                        describe_policy(&s.policy)
                    ),
                    (None, TierKind::Own | TierKind::Proxy) => describe_policy(&s.policy),
                }),
                received: t.received,
                logical: t.logical,
                sent: t.sent,
                retries: t.retries,
                succeeded: t.succeeded,
                gave_up: t.gave_up,
                no_retry_received: t.no_retry_received,
                faulted: t.faulted,
                amplification: ratio(t.sent, r.logical),
                // An attempt that failed to connect never reached the next hop.
                agrees: next.is_none_or(|n| n == t.sent - t.unsent.min(t.sent)),
                sent_per_second: t.sent_per_second.clone(),
                violations: RetryViolations {
                    retried_permanent: t.violations.retried_permanent.count,
                    retried_non_idempotent: t.violations.retried_non_idempotent.count,
                },
                violation_examples: [
                    (
                        "retried_permanent",
                        &t.violations.retried_permanent.examples,
                    ),
                    (
                        "retried_non_idempotent",
                        &t.violations.retried_non_idempotent.examples,
                    ),
                ]
                .into_iter()
                .filter(|(_, ids)| !ids.is_empty())
                .map(|(name, ids)| (name.to_owned(), ids.clone()))
                .collect(),
                proxy: None,
            }
        })
        .collect()
}

/// The client's connections, when the plan caps them or multiplexes on them (HTTP/2);
/// the simulator has no HTTP/2 connections to multiplex on, nor streams to wait for.
fn connection_wait(plan: &Plan, mode: Mode, r: &Recorder) -> Option<ConnectionWait> {
    let http2 = plan.load.protocol.is_http2();
    if http2 && mode == Mode::Simulated {
        return None;
    }
    let max = plan
        .load
        .connection_cap()
        .or(plan.load.multiplexed_over())?;
    Some(ConnectionWait {
        max_connections: max,
        wait_ms: percentiles(&r.connection_wait),
        timed_out: r.connection_wait_timeouts,
        streams_waited: http2.then_some(r.streams_waited),
    })
}

/// The range of ledger counts that agrees with what the client sent: every attempt that
/// left the process, except those that failed to connect or went out above a GOAWAY's
/// last-stream-id (the server cannot have seen them); attempts abandoned on the wire at
/// the run's end may not have been read yet, nor refused streams (refused by the
/// server's handler, which the ledger counts, or by its HTTP/2 layer, which it does not).
/// The same holds of logical requests: those with an attempt that reached the server, and
/// perhaps those whose only such attempt was abandoned.
pub fn reconciliation(r: &Recorder) -> Reconciliation {
    let count = |o: &Outcome| r.outcomes.get(o).copied().unwrap_or(0);
    let unsent = [
        Outcome::ConnectRefused,
        Outcome::ConnectTimeout,
        Outcome::Unprocessed(Unprocessed::GoAway),
    ]
    .iter()
    .map(count)
    .sum::<u64>();
    let refused = count(&Outcome::Unprocessed(Unprocessed::RefusedStream));
    let may_have = r.attempts.saturating_sub(unsent);
    let (surely, perhaps) = r.reached;
    Reconciliation {
        unsent,
        attempts: may_have.saturating_sub(r.abandoned + refused)..=may_have,
        logical: surely..=surely + perhaps,
    }
}

/// What the ledger must hold to agree with the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reconciliation {
    /// Attempts that failed to connect, or went out above a GOAWAY's last-stream-id.
    pub unsent: u64,
    pub attempts: RangeInclusive<u64>,
    pub logical: RangeInclusive<u64>,
}

impl Reconciliation {
    pub fn agrees(&self, ledger_attempts: u64, ledger_logical: u64) -> bool {
        self.attempts.contains(&ledger_attempts) && self.logical.contains(&ledger_logical)
    }
}

/// The `q` quantile of the offered load's latency: a dropped arrival never completed, so
/// it ranks after every request that was sent. `None` when the quantile falls among the
/// drops (the offered load's latency there is unbounded).
pub fn offered_quantile_ms(
    latency: &Histogram<u64>,
    sent: u64,
    dropped: u64,
    q: f64,
) -> Option<f64> {
    let offered = sent + dropped;
    if offered == 0 {
        return Some(0.0);
    }
    let rank = q * offered as f64;
    if sent == 0 || rank > sent as f64 {
        return None;
    }
    Some(quantile_ms(latency, (rank / sent as f64).min(1.0)))
}

/// A policy's part of the report, made as soon as the policy has run: its recorder (four
/// histograms, ~790 KB) is dropped then, so a plan of many policies holds one recorder at a
/// time, not one per policy until the end. `mode` is the shell's that ran it.
pub fn policy_report(plan: &Plan, mode: Mode, outcome: PolicyOutcome<'_>) -> PolicyReport {
    let PolicyOutcome {
        policy,
        run,
        ledger,
        tiers,
        proxies,
    } = outcome;
    let r: &Recorder = &run.recorder;
    let ledger = ledger.map(|l| own_share(l, &policy.name));
    let mut tier_reports = tier_reports(policy, r, &tiers, ledger.as_ref().map(|l| l.attempts));
    for ((report, set), counts) in tier_reports.iter_mut().zip(&policy.tiers).zip(&proxies) {
        if let (Some(proxy), Some(counts)) = (&set.proxy, counts) {
            report.proxy = Some(super::proxy::report(proxy, counts));
        }
    }
    let ledger_view = ledger
        .as_ref()
        .map(|l| ledger_view(l, r, &tiers, &tier_reports));
    let report = PolicyReport {
        name: policy.name.clone(),
        preset: policy.preset.map(|p| p.name().to_owned()),
        summary: describe(policy),
        resolved: Some(crate::plan::resolved::named(policy)),
        // A script someone else installed during the run: not the policy's figures.
        partial: run.aborted
            || run.gone.is_some()
            || ledger
                .as_ref()
                .is_some_and(|l| l.foreign_script().is_some()),
        offered: r.offered(),
        logical: r.logical,
        succeeded: r.succeeded,
        failed: r.failed,
        dropped: r.dropped,
        unfinished: r.unfinished,
        attempts: r.attempts,
        retries: r.retries,
        retries_succeeded: r.retries_succeeded(),
        cut: r.cut,
        success_rate: ratio(r.succeeded, r.offered()),
        amplification: Amplification {
            client: ratio(r.attempts, r.logical),
            server: ledger.as_ref().map(|l| ratio(l.attempts, l.logical)),
            peak_1s: peak_1s(&r.series),
            budget_bound: run.budget_bound,
        },
        give_ups: r
            .give_ups
            .iter()
            .map(|(k, v)| (k.name().to_owned(), *v))
            .collect(),
        violations: Violations {
            retried_permanent: r.retried_permanent.count,
            retried_non_idempotent: r.retried_non_idempotent.count,
            duplicate_side_effects: ledger.as_ref().map(|l| l.duplicate_side_effects),
            retried_with_fresh_key: None,
        },
        violation_examples: violation_examples(r, ledger.as_ref()),
        latency_ms: percentiles(&r.latency),
        offered_latency_ms: offered_percentiles(r),
        attempt_latency_ms: percentiles(&r.attempt_latency),
        arrival_lag_ms: percentiles(&r.lag),
        connection_wait: connection_wait(plan, mode, r),
        connections_opened: r.connects.map(|c| ConnectionsOpened {
            total: c.opened,
            peak_per_second: c.peak_per_second,
        }),
        recovery_s: plan
            .fault_window
            .and_then(|(from, until)| recovery_s(&r.series, from, until)),
        outcomes: outcome_counts(r),
        breaker_trips: run.breaker_trips,
        ledger: ledger_view,
        series: series_points(&r.series),
        gates: Vec::new(),
        synchrony: r.waves.as_ref().and_then(|w| synchrony(&w.buckets)),
        waves_50ms: r
            .waves
            .as_ref()
            .map(|w| w.buckets.clone())
            .unwrap_or_default(),
        leaf_amplification: ledger.as_ref().map(|l| ratio(l.attempts, r.logical)),
        shared_budget: policy.share_budget.is_some(),
        tiers: tier_reports,
        client: None,
        expect: None,
    };
    judged(plan, policy, report)
}

/// A policy's report with its gates judged, and its expectation when `policy` is a
/// counterexample (`expect: fail`): the last step of every policy's report, whichever
/// shell ran it (a client test's expected policy has no `expect`).
pub fn judged(plan: &Plan, policy: &NamedPolicy, mut report: PolicyReport) -> PolicyReport {
    report.gates = gates::evaluate(plan, &report);
    report.expect = policy
        .expect
        .as_ref()
        .map(|e| gates::expectation(e, &report));
    report
}

/// The ledger's share of a policy beside the client's counts, and whether the two
/// agree (see [`reconciliation`]).
fn ledger_view(
    l: &LedgerSnapshot,
    r: &Recorder,
    tiers: &[HopCounts],
    tier_reports: &[TierReport],
) -> LedgerView {
    let agree = reconciliation(r);
    // Behind relay tiers the leaf's attempts are the last tier's, and every hop must
    // agree with the next; the logical requests are the client's, end to end.
    let reconciled = match tiers.first() {
        None => agree.agrees(l.attempts, l.logical),
        // A tier may answer a request itself (its own fault, an open breaker): the
        // leaf sees at most the client's logical requests, and some whenever the last
        // tier sent anything.
        Some(first) => {
            agree.attempts.contains(&first.received)
                // A tier counts a first attempt as a logical request: one whose first
                // attempt failed to connect reached it as a retry.
                && first.logical <= *agree.logical.end()
                && tier_reports.iter().all(|t| t.agrees)
                && l.logical <= *agree.logical.end()
                && (l.logical > 0) == tiers.last().is_some_and(|t| t.sent > 0)
        }
    };
    LedgerView {
        attempts: l.attempts,
        logical: l.logical,
        side_effects: l.side_effects,
        duplicate_side_effects: l.duplicate_side_effects,
        idempotent_replays: l.idempotent_replays,
        client_unsent: agree.unsent,
        client_abandoned: r.abandoned,
        client_reached: r.reached.0,
        reconciled,
        by_outcome: l.by_outcome.clone(),
        by_peer: l.by_peer.clone(),
        repeats_by_method: repeats(l),
    }
}

/// The ledger's resends by method, in the report's terms.
pub fn repeats(l: &LedgerSnapshot) -> BTreeMap<String, super::model::Repeats> {
    l.repeats_by_method
        .iter()
        .map(|(method, r)| {
            let split = super::model::Repeats {
                repeats: r.repeats,
                after_4xx: r.after_4xx,
            };
            (method.clone(), split)
        })
        .collect()
}

/// The ids of a few requests that broke each invariant: the client's sampled retries,
/// and the ledger's duplicate side effects.
fn violation_examples(
    r: &Recorder,
    ledger: Option<&LedgerSnapshot>,
) -> BTreeMap<String, Vec<String>> {
    let mut examples = BTreeMap::new();
    examples.insert(
        "retried_permanent".to_owned(),
        r.retried_permanent.examples.clone(),
    );
    examples.insert(
        "retried_non_idempotent".to_owned(),
        r.retried_non_idempotent.examples.clone(),
    );
    if let Some(l) = ledger {
        examples.insert(
            "duplicate_side_effects".to_owned(),
            l.duplicate_examples.clone(),
        );
    }
    examples
}

/// The offered load's latency percentiles (see [`offered_quantile_ms`]).
fn offered_percentiles(r: &Recorder) -> OfferedPercentiles {
    let offered_latency = |q| offered_quantile_ms(&r.latency, r.logical, r.dropped, q);
    OfferedPercentiles {
        p50: offered_latency(0.50),
        p90: offered_latency(0.90),
        p99: offered_latency(0.99),
        p999: offered_latency(0.999),
    }
}

/// Attempts by outcome, by the outcome's name.
fn outcome_counts(r: &Recorder) -> BTreeMap<String, u64> {
    let mut outcomes = BTreeMap::new();
    for (outcome, n) in &r.outcomes {
        // Resets whose phase differs read the same in a report.
        *outcomes.entry(outcome.to_string()).or_insert(0) += n;
    }
    outcomes
}

fn series_points(series: &[Second]) -> Vec<SeriesPoint> {
    series
        .iter()
        .enumerate()
        .map(|(t, s)| SeriesPoint {
            t: t as u64,
            offered: s.offered,
            dropped: s.dropped,
            attempts: s.attempts,
            succeeded: s.succeeded,
            failed: s.failed,
            retries: s.retries,
            budget_tokens: s.budget_tokens,
            breaker_open: matches!(s.breaker, Some(BreakerState::Open)),
        })
        .collect()
}

/// The ledger's figures for this policy alone: a request of the previous policy that the
/// server finished after the reset lands in the new ledger, under its own policy's name.
pub(crate) fn own_share(mut l: LedgerSnapshot, policy: &str) -> LedgerSnapshot {
    // A policy none of whose requests reached the server has no entry: it saw nothing.
    let own = l.by_policy.get(policy).cloned().unwrap_or_default();
    l.attempts = own.attempts;
    l.logical = own.logical;
    l.side_effects = own.side_effects;
    l.duplicate_side_effects = own.duplicate_side_effects;
    l.idempotent_replays = own.idempotent_replays;
    let prefix = format!("{policy}-");
    l.duplicate_examples.retain(|id| id.starts_with(&prefix));
    l
}

/// Seconds from `until` (the end of the last fault phase) to the first second from which
/// the success rate of the requests scheduled in each later second stays within 5 points
/// of its level before `from`. Both rates count the same way ([`Second::settled`]).
/// `None`: no traffic before the faults to compare with, or it never got back.
pub fn recovery_s(series: &[Second], from: Duration, until: Duration) -> Option<f64> {
    let before = &series[..(from.as_secs() as usize).min(series.len())];
    let (ok, done) = before
        .iter()
        .map(Second::settled)
        .fold((0, 0), |(a, b), (ok, done)| (a + ok, b + done));
    if done == 0 {
        return None;
    }
    let target = ok as f64 / done as f64 - 0.05;
    let end = until.as_secs_f64().ceil() as usize;
    if end >= series.len() {
        return None;
    }
    let mut recovered_at = None;
    for (t, s) in series.iter().enumerate().skip(end) {
        match s.settled() {
            (_, 0) => {}
            (ok, done) if (ok as f64 / done as f64) < target => recovered_at = None,
            _ => {
                recovered_at.get_or_insert(t);
            }
        }
    }
    recovered_at.map(|t| (t as f64 - until.as_secs_f64()).max(0.0))
}

fn describe(policy: &NamedPolicy) -> String {
    describe_policy(&policy.policy)
}

/// A policy in a line: attempts, backoff, timeout, budget, breaker.
pub fn describe_policy(policy: &chaos_policy::Policy) -> String {
    let c = policy.config();
    let mut parts = vec![format!("{} attempts", c.max_attempts)];
    parts.push(describe_backoff(&c.backoff));
    if let Some(t) = c.attempt_timeout {
        parts.push(format!("timeout {}", fmt_duration(t)));
    }
    if let Some(b) = &c.budget {
        parts.push(match *b {
            BudgetConfig::TokenBucket {
                ratio, max_tokens, ..
            } => {
                format!("token bucket {ratio} (max {max_tokens})")
            }
            BudgetConfig::TtlWindow {
                ratio,
                min_per_sec,
                ttl,
            } => {
                format!(
                    "budget {ratio} + {min_per_sec}/s over {}",
                    fmt_duration(ttl)
                )
            }
            BudgetConfig::GrpcThrottle {
                max_tokens,
                token_ratio,
            } => {
                format!("gRPC throttle {max_tokens} tokens, {token_ratio}/success")
            }
            BudgetConfig::RetryQuota {
                capacity, costs, ..
            } => {
                format!("retry quota {capacity} ({} per retry)", costs.retry)
            }
            BudgetConfig::Concurrency {
                percent,
                min_concurrency,
            } => {
                format!("{percent}% concurrent retries (min {min_concurrency})")
            }
        });
    } else {
        parts.push("no budget".to_owned());
    }
    if let Some(b) = &c.breaker {
        parts.push(format!(
            "breaker {}% / {}",
            b.failure_ratio * 100.0,
            fmt_duration(b.window)
        ));
    }
    if c.honor_no_retry {
        parts.push(format!("honours {}", fault_server::wire::NO_RETRY));
    }
    parts.join(", ")
}

fn describe_backoff(b: &Backoff) -> String {
    let (base, cap) = b.base_and_cap();
    if cap.is_zero() {
        return "no backoff".to_owned();
    }
    let shape = if base == cap {
        format!("fixed {}", fmt_duration(base))
    } else {
        format!("backoff {}..{}", fmt_duration(base), fmt_duration(cap))
    };
    match b.jitter() {
        Jitter::None => shape,
        Jitter::Full => format!("{shape} full jitter"),
        Jitter::Equal => format!("{shape} equal jitter"),
        Jitter::Decorrelated => format!("{shape} decorrelated jitter"),
        Jitter::Additive(f) => format!("{shape} +{f} jitter"),
        Jitter::Proportional(s) => format!("{shape} ±{}% jitter", s * 100.0),
    }
}

pub(crate) fn fmt_duration(d: Duration) -> String {
    fault_server::duration::format_duration(d)
}
