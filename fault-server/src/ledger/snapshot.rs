//! The ledger as JSON: the snapshot DTOs (`GET /__chaos/ledger`, the harness's reports)
//! and how a snapshot is taken.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use serde::{Deserialize, Serialize};

use super::Ledger;
use crate::script::FaultKind;

/// Per-policy totals in a [`LedgerSnapshot`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PolicyLedger {
    /// Requests received with an `x-request-id` from this policy.
    pub attempts: u64,
    /// Distinct `x-request-id`s first seen from this policy.
    pub logical: u64,
    /// Side effects executed for this policy's requests.
    pub side_effects: u64,
    /// Of which duplicates (the id had executed before).
    pub duplicate_side_effects: u64,
    /// Requests answered from a stored idempotent response.
    pub idempotent_replays: u64,
}

/// The ledger as JSON (`GET /__chaos/ledger`). Counts since the last reset.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct LedgerSnapshot {
    /// Every request outside the control API.
    pub requests: u64,
    /// Requests that carried an `x-request-id`.
    pub attempts: u64,
    /// Distinct `x-request-id`s seen.
    pub logical: u64,
    /// Requests without an `x-request-id`, or refused for a header before it was read
    /// (`bad_header`): counted in `requests` and `by_outcome` only.
    pub untracked: u64,
    /// Side effects executed (non-idempotent requests served, or faulted with
    /// `processed: true`).
    pub side_effects: u64,
    /// Executions beyond the first for the same `x-request-id`: double charges.
    pub duplicate_side_effects: u64,
    /// A few `x-request-id`s that executed more than once.
    pub duplicate_examples: Vec<String>,
    /// Requests answered from a stored `Idempotency-Key` response, without executing.
    pub idempotent_replays: u64,
    /// Requests answered 409 because their key was still executing.
    pub idempotency_conflicts: u64,
    /// Requests answered 422 because their key was used by a different request.
    pub idempotency_mismatches: u64,
    /// Requests by how they ended: `served`, `replayed`, `rejected`, `status_503`,
    /// `reset`, `close`, `truncate`, `timeout`, `key_in_flight`, `key_mismatch`,
    /// `bad_header`, `bad_request`, `loop_detected`, `abandoned`.
    ///
    /// With an upstream (`fault-server --upstream`), what the upstream did is counted
    /// apart from the faults the script injected: `upstream_<code>` for a request
    /// forwarded and answered by the upstream, one label per status it answered
    /// (`upstream_200`, `upstream_503`: its own 5xx are never `status_503`, which is an
    /// injected one); `upstream_unreachable` for one that could not be forwarded (the
    /// connection to the upstream failed: 502), `upstream_timeout` for one whose answer
    /// did not begin within the upstream timeout (504), and `upstream_failed` for one
    /// whose upstream connection broke before a response head came back (502). The
    /// requests the upstream received are the `upstream_*` outcomes but
    /// `upstream_unreachable` (a timed-out or failed one may or may not have reached it),
    /// plus the faults with `processed: true`, which are forwarded before they fail;
    /// those it answered are `upstream_answered`.
    pub by_outcome: BTreeMap<String, u64>,
    /// With an upstream: the forwarded requests it answered (with a status, 101 aside),
    /// whatever their caller got: each `upstream_<code>` outcome and each `processed:
    /// true` fault whose forward was answered. A request's forward goes on when its
    /// caller leaves (bounded by the upstream timeout), so this is what the service did.
    #[serde(skip_serializing_if = "is_zero")]
    pub upstream_answered: u64,
    /// Of `upstream_answered`, those whose caller had gone (hung up, timed out, or its
    /// connection ended by another request's fault) before the upstream answered.
    #[serde(skip_serializing_if = "is_zero")]
    pub upstream_caller_gone: u64,
    /// Faults injected by kind (`status`, `delay`, `timeout`, `reset`, `close`,
    /// `truncate`); a delay is followed by another outcome.
    pub by_fault: BTreeMap<String, u64>,
    /// Faults injected by phase name.
    pub by_phase: BTreeMap<String, u64>,
    /// Totals per `x-chaos-policy`.
    pub by_policy: BTreeMap<String, PolicyLedger>,
    /// Request ids remembered now.
    pub tracked_ids: u64,
    /// Request ids forgotten to bound memory (TTL or cap) since the last reset.
    pub evicted_ids: u64,
    /// Idempotency keys remembered now.
    pub tracked_keys: u64,
    /// Idempotency keys forgotten to bound memory since the last reset.
    pub evicted_keys: u64,
    /// Requests that arrived before the last reset and ended after it. They count in
    /// neither ledger: not their arrival, which was the last one's, nor anything they did
    /// after the reset (fault, side effect, key, outcome).
    pub stragglers: u64,
    /// Requests per peer (numbered from 1) and method, at a server that listens as
    /// several peers (`--peers`); empty with one.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub by_peer: BTreeMap<u32, BTreeMap<String, u64>>,
    /// Requests that resent a stated attempt already seen (the same `x-request-id`,
    /// attempt number and upstream chain): a proxy's retries to another peer, or the
    /// same one, as this server saw them.
    #[serde(skip_serializing_if = "is_zero")]
    pub repeats: u64,
    /// `repeats` by method, each with those whose previous arrival was answered 4xx.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub repeats_by_method: BTreeMap<String, super::RepeatLedger>,
    /// Scripts installed over the control API since the last reset (at most
    /// [`super::changes::MAX_KEPT`]; `script_changes_dropped` counts the rest). A run
    /// resets after installing its own, so any here came from someone else during it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub script_changes: Vec<super::ScriptChange>,
    #[serde(skip_serializing_if = "is_zero")]
    pub script_changes_dropped: u64,
    /// The judgement of the client's retries, when the server judges (`client-test`, a
    /// proxy in front of a service).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub judged: Option<super::Judged>,
}

impl Ledger {
    #[cfg(feature = "server")]
    /// Attempts and logical requests since the last reset, without the rest of a
    /// snapshot: what `/metrics` shows of the ledger.
    pub(crate) fn totals(&self) -> (u64, u64) {
        let inner = self.lock();
        (inner.attempts, inner.logical)
    }

    /// The current totals.
    pub fn snapshot(&self) -> LedgerSnapshot {
        // Every queue held, as a reset holds them: no request is counting its arrival or
        // its outcome (a straggler's in two counters) while they are read.
        let mut queues: Vec<_> = self.pending.each().collect();
        for queue in &mut queues {
            self.apply(queue);
        }
        let inner = self.lock_tables();
        let then = self
            .baseline
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let requests = self
            .requests
            .load(Ordering::Relaxed)
            .saturating_sub(then.requests);
        let stragglers = self.stragglers.load().since(&then.stragglers);
        let counts = self.counters.load().since(&then.counts).since(&stragglers);
        let books = self.books.totals();
        drop(queues);
        LedgerSnapshot {
            requests,
            attempts: inner.attempts,
            logical: inner.logical,
            // Requests are counted before their id is looked at: never below zero.
            untracked: requests.saturating_sub(inner.attempts),
            side_effects: inner.side_effects,
            duplicate_side_effects: inner.duplicate_side_effects,
            duplicate_examples: inner.duplicate_examples.clone(),
            idempotent_replays: inner.idempotent_replays,
            idempotency_conflicts: inner.idempotency_conflicts,
            idempotency_mismatches: inner.idempotency_mismatches,
            by_outcome: counts.outcomes().map(|(o, n)| (o.label(), n)).collect(),
            upstream_answered: counts.noted(super::Note::UpstreamAnswered),
            upstream_caller_gone: counts.noted(super::Note::CallerGone),
            by_fault: FaultKind::ALL
                .iter()
                .zip(inner.faults)
                .filter(|(_, n)| *n > 0)
                .map(|(t, n)| (t.name().to_string(), n))
                .collect(),
            by_phase: inner.by_phase.clone(),
            by_policy: inner.by_policy.clone(),
            tracked_ids: inner.ids.len() as u64,
            evicted_ids: inner.evicted_ids,
            tracked_keys: inner.keys.len() as u64,
            evicted_keys: inner.evicted_keys,
            stragglers: stragglers.outcomes().map(|(_, n)| n).sum(),
            by_peer: books.by_peer,
            repeats: books.repeats,
            repeats_by_method: books.repeats_by_method,
            script_changes: inner.script_changes.kept.clone(),
            script_changes_dropped: inner.script_changes.dropped,
            judged: self.retries().map(|r| r.snapshot()),
        }
    }
}

impl LedgerSnapshot {
    /// Why these figures are not the run's own, when a script was installed during it.
    pub fn foreign_script(&self) -> Option<String> {
        super::changes::foreign(&self.script_changes, self.script_changes_dropped)
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}
