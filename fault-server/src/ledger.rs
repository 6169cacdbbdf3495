//! The ledger: what the server received and what it executed, the truth a client's own
//! numbers are checked against.
//!
//! Why: a harness that only believes its client cannot prove anything. The ledger counts
//! attempts and distinct logical requests (by `x-request-id`) as the server saw them, so
//! amplification is measured on both sides; and it records every executed side effect
//! of a non-idempotent request (POST, PATCH), so a double charge is a number, not a
//! suspicion.
//!
//! `Idempotency-Key` follows the IETF httpapi draft ("The Idempotency-Key HTTP Header
//! Field"): the first request with a key executes and its response is stored; a later
//! request with the same key gets the stored response without executing again (a
//! replay); a request whose key is still being executed gets 409 Conflict; a key reused
//! with a different request (method, path or body) gets 422 Unprocessable Content.
//!
//! How memory stays bounded on long runs:
//! - totals (requests, attempts, outcomes, side effects, duplicates) are counters;
//! - a per-id entry (attempts and executions of one `x-request-id`) lives for `id_ttl`
//!   (10 min by default, far beyond any retry deadline) and at most `max_ids` entries
//!   are kept, oldest evicted first; an evicted id that comes back counts as a new
//!   logical request, and `evicted_ids` says how often that could have happened;
//! - idempotency keys (with their stored responses) likewise expire after `key_ttl` and
//!   are capped at `max_keys`;
//! - duplicate examples are capped at `max_examples` ids; policies (the
//!   `x-chaos-policy` header) at `max_policies` names, the rest pooled under `(other)`.
//!
//! Time comes in as `now` (an offset from a fixed epoch the caller owns); the ledger
//! never reads a clock.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::script::FaultTag;

/// The pool that policy names beyond `max_policies` are counted under.
pub const OTHER_POLICIES: &str = "(other)";

/// How much the ledger remembers. The defaults keep the ledger under roughly 50 MB in
/// the worst case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LedgerLimits {
    /// How long a request id is remembered after it was first seen.
    pub id_ttl: Duration,
    /// At most this many request ids are remembered (oldest evicted first).
    pub max_ids: usize,
    /// How long an idempotency key and its stored response are remembered.
    pub key_ttl: Duration,
    /// At most this many idempotency keys are remembered (oldest evicted first).
    pub max_keys: usize,
    /// At most this many example ids of duplicate side effects are kept.
    pub max_examples: usize,
    /// At most this many policy names get their own entry.
    pub max_policies: usize,
}

impl Default for LedgerLimits {
    fn default() -> Self {
        LedgerLimits {
            // Ten minutes: well beyond any sane retry deadline (AWS SDKs, gRPC and Envoy
            // give up within seconds to a couple of minutes).
            id_ttl: Duration::from_secs(600),
            // 250k ids: ten minutes of 400 new logical requests per second, ~40 MB.
            max_ids: 250_000,
            key_ttl: Duration::from_secs(600),
            max_keys: 50_000,
            max_examples: 20,
            max_policies: 64,
        }
    }
}

/// How one request ended, as the server answered it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// Served normally (possibly after a delay), side effect executed if any.
    Served,
    /// Answered with a stored response for its `Idempotency-Key`.
    Replayed,
    /// 409: its `Idempotency-Key` was still being executed by another request.
    KeyInFlight,
    /// 422: its `Idempotency-Key` was used before by a different request.
    KeyMismatch,
    /// Refused by the capacity model (queue full).
    Rejected,
    /// A `status` fault with this code.
    Status(u16),
    /// A `reset` fault.
    Reset,
    /// A `close` fault.
    Close,
    /// A `truncate` fault.
    Truncate,
    /// A `timeout` fault (held, then closed).
    Timeout,
    /// The request could not be read (body too large, client aborted).
    BadRequest,
    /// The client went away (or the server shut down) before the request was answered.
    Abandoned,
}

const FIXED_OUTCOMES: [Outcome; 11] = [
    Outcome::Served,
    Outcome::Replayed,
    Outcome::KeyInFlight,
    Outcome::KeyMismatch,
    Outcome::Rejected,
    Outcome::Reset,
    Outcome::Close,
    Outcome::Truncate,
    Outcome::Timeout,
    Outcome::BadRequest,
    Outcome::Abandoned,
];

impl Outcome {
    /// The label used in the ledger and in metrics: `served`, `status_503`, `reset`, …
    pub fn label(self) -> String {
        match self {
            Outcome::Status(code) => format!("status_{code}"),
            other => other.fixed_label().to_string(),
        }
    }

    /// The label without the status code (`status` for every status fault).
    pub(crate) fn fixed_label(self) -> &'static str {
        match self {
            Outcome::Served => "served",
            Outcome::Replayed => "replayed",
            Outcome::KeyInFlight => "key_in_flight",
            Outcome::KeyMismatch => "key_mismatch",
            Outcome::Rejected => "rejected",
            Outcome::Status(_) => "status",
            Outcome::Reset => "reset",
            Outcome::Close => "close",
            Outcome::Truncate => "truncate",
            Outcome::Timeout => "timeout",
            Outcome::BadRequest => "bad_request",
            Outcome::Abandoned => "abandoned",
        }
    }

    fn fixed_index(self) -> Option<usize> {
        FIXED_OUTCOMES.iter().position(|o| *o == self)
    }
}

/// Lock-free counters of outcomes and fault kinds since the process started.
#[derive(Debug)]
pub(crate) struct OutcomeCounters {
    fixed: [AtomicU64; FIXED_OUTCOMES.len()],
    /// Status faults by code, index `code - 200` for codes 200..=599.
    status: Box<[AtomicU64]>,
    faults: [AtomicU64; FaultTag::ALL.len()],
}

impl Default for OutcomeCounters {
    fn default() -> Self {
        OutcomeCounters {
            fixed: Default::default(),
            status: (200..=599).map(|_| AtomicU64::new(0)).collect(),
            faults: Default::default(),
        }
    }
}

impl OutcomeCounters {
    pub(crate) fn add(&self, outcome: Outcome) {
        let counter = match outcome {
            Outcome::Status(code) => (200..=599)
                .contains(&code)
                .then(|| &self.status[usize::from(code - 200)]),
            other => other.fixed_index().map(|i| &self.fixed[i]),
        };
        if let Some(counter) = counter {
            counter.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(crate) fn add_fault(&self, tag: FaultTag) {
        self.faults[tag as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Every counter's current value.
    fn load(&self) -> Counts {
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Counts {
            fixed: self.fixed.iter().map(load).collect(),
            status: self.status.iter().map(load).collect(),
            faults: self.faults.iter().map(load).collect(),
        }
    }
}

/// A copy of [`OutcomeCounters`], taken at a reset: the ledger reports the counters
/// minus this baseline, while the metrics report the counters themselves (Prometheus
/// counters only go up). One set of atomics serves both.
#[derive(Debug, Default)]
struct Counts {
    fixed: Vec<u64>,
    status: Vec<u64>,
    faults: Vec<u64>,
}

impl Counts {
    fn since(&self, baseline: &Counts) -> Counts {
        let minus = |now: &[u64], then: &[u64]| -> Vec<u64> {
            now.iter()
                .enumerate()
                .map(|(i, n)| n.saturating_sub(then.get(i).copied().unwrap_or(0)))
                .collect()
        };
        Counts {
            fixed: minus(&self.fixed, &baseline.fixed),
            status: minus(&self.status, &baseline.status),
            faults: minus(&self.faults, &baseline.faults),
        }
    }

    fn outcomes(&self) -> impl Iterator<Item = (Outcome, u64)> + '_ {
        FIXED_OUTCOMES
            .iter()
            .copied()
            .zip(self.fixed.iter().copied())
            .chain(
                (200u16..)
                    .map(Outcome::Status)
                    .zip(self.status.iter().copied()),
            )
            .filter(|(_, n)| *n > 0)
    }

    fn faults(&self) -> impl Iterator<Item = (FaultTag, u64)> + '_ {
        FaultTag::ALL
            .iter()
            .copied()
            .zip(self.faults.iter().copied())
            .filter(|(_, n)| *n > 0)
    }
}

/// Non-zero outcome counts, and every fault kind's count, since the process started.
pub(crate) type LifetimeCounts = (Vec<(Outcome, u64)>, Vec<(FaultTag, u64)>);

/// Who sent a request, as far as the ledger cares.
#[derive(Debug, Clone, Copy, Default)]
pub struct RequestIdentity<'a> {
    /// `x-request-id`: the logical request.
    pub request_id: Option<&'a str>,
    /// `x-chaos-policy`: the client policy that sent it.
    pub policy: Option<&'a str>,
}

/// A response stored for an idempotency key, replayed to later requests with that key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredResponse {
    /// The status.
    pub status: u16,
    /// The (JSON) body.
    pub body: String,
}

/// What [`Ledger::begin_keyed`] says about a request carrying an `Idempotency-Key`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyCheck {
    /// First use: execute, then [`Ledger::complete_key`] (or [`Ledger::release_key`] if
    /// the request is abandoned before it executes).
    Fresh(KeyClaim),
    /// Already executed: answer the stored response, execute nothing.
    Replay(Arc<StoredResponse>),
    /// Another request with this key is executing now: answer 409.
    InFlight,
    /// The key was used with a different request: answer 422.
    Mismatch,
}

/// The right to execute under one idempotency key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyClaim {
    key: Arc<str>,
    generation: u64,
}

/// The receipt of one executed side effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Execution {
    /// The effect's sequence number (1-based, since the last reset).
    pub number: u64,
    /// This request id had already executed at least once: a duplicate side effect.
    pub duplicate: bool,
}

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
    /// Requests without an `x-request-id` (counted in `requests` and `by_outcome` only).
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
    /// `bad_request`, `abandoned`.
    pub by_outcome: BTreeMap<String, u64>,
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
}

#[derive(Debug, Default)]
struct IdEntry {
    generation: u64,
    side_effects: u32,
}

#[derive(Debug)]
enum KeyState {
    InFlight,
    Done(Arc<StoredResponse>),
}

#[derive(Debug)]
struct KeyEntry {
    generation: u64,
    fingerprint: u64,
    state: KeyState,
}

#[derive(Debug, Default)]
struct Inner {
    attempts: u64,
    logical: u64,
    side_effects: u64,
    duplicate_side_effects: u64,
    duplicate_examples: Vec<String>,
    idempotent_replays: u64,
    idempotency_conflicts: u64,
    idempotency_mismatches: u64,
    by_phase: BTreeMap<String, u64>,
    by_policy: BTreeMap<String, PolicyLedger>,
    ids: HashMap<Arc<str>, IdEntry>,
    id_order: VecDeque<(Duration, u64, Arc<str>)>,
    evicted_ids: u64,
    keys: HashMap<Arc<str>, KeyEntry>,
    key_order: VecDeque<(Duration, u64, Arc<str>)>,
    evicted_keys: u64,
    generation: u64,
    effects: u64,
}

impl Inner {
    fn policy(&mut self, name: &str, max: usize) -> &mut PolicyLedger {
        let name = if self.by_policy.contains_key(name) || self.by_policy.len() < max {
            name
        } else {
            OTHER_POLICIES
        };
        if !self.by_policy.contains_key(name) {
            self.by_policy
                .insert(name.to_string(), PolicyLedger::default());
        }
        self.by_policy
            .get_mut(name)
            .expect("the entry was inserted just above")
    }

    fn next_generation(&mut self) -> u64 {
        self.generation += 1;
        self.generation
    }

    /// Starts tracking `id` (new, or evicted since it was last seen), in expiry order.
    fn track_id(&mut self, id: &str, now: Duration, side_effects: u32) {
        let generation = self.next_generation();
        let id: Arc<str> = Arc::from(id);
        self.ids.insert(
            Arc::clone(&id),
            IdEntry {
                generation,
                side_effects,
            },
        );
        self.id_order.push_back((now, generation, id));
    }

    fn expire_ids(&mut self, now: Duration, limits: &LedgerLimits) {
        self.evicted_ids += expire(
            &mut self.id_order,
            &mut self.ids,
            now,
            limits.id_ttl,
            limits.max_ids,
            |e| e.generation,
        );
    }

    fn expire_keys(&mut self, now: Duration, limits: &LedgerLimits) {
        self.evicted_keys += expire(
            &mut self.key_order,
            &mut self.keys,
            now,
            limits.key_ttl,
            limits.max_keys,
            |e| e.generation,
        );
    }
}

/// The ledger. Thread-safe: counters are atomics, the per-id and per-key tables sit
/// behind one mutex that is taken only for requests carrying an `x-request-id` or an
/// `Idempotency-Key`.
#[derive(Debug)]
pub struct Ledger {
    limits: LedgerLimits,
    /// Requests since the process started (the metrics read it as is).
    requests: AtomicU64,
    /// Outcomes and faults since the process started.
    counters: OutcomeCounters,
    /// `requests` and `counters` at the last reset.
    baseline: Mutex<(u64, Counts)>,
    inner: Mutex<Inner>,
}

impl Default for Ledger {
    fn default() -> Self {
        Ledger::new(LedgerLimits::default())
    }
}

impl Ledger {
    /// An empty ledger.
    pub fn new(limits: LedgerLimits) -> Ledger {
        Ledger {
            limits,
            requests: AtomicU64::new(0),
            counters: OutcomeCounters::default(),
            baseline: Mutex::new((0, Counts::default())),
            inner: Mutex::new(Inner::default()),
        }
    }

    /// The limits it was made with.
    pub fn limits(&self) -> &LedgerLimits {
        &self.limits
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves counters that are still meaningful;
        // keep serving rather than poisoning every later request.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A request arrived (call once per request, before any fault).
    pub fn record_request(&self, who: RequestIdentity<'_>, now: Duration) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let Some(id) = who.request_id else {
            return;
        };
        let mut inner = self.lock();
        let inner = &mut *inner;
        inner.attempts += 1;
        let new_id = !inner.ids.contains_key(id);
        if new_id {
            inner.track_id(id, now, 0);
            inner.logical += 1;
        }
        if let Some(policy) = who.policy {
            let entry = inner.policy(policy, self.limits.max_policies);
            entry.attempts += 1;
            if new_id {
                entry.logical += 1;
            }
        }
        inner.expire_ids(now, &self.limits);
    }

    /// How a request ended.
    pub fn record_outcome(&self, outcome: Outcome) {
        self.counters.add(outcome);
    }

    /// A fault fired (a delay is recorded here and its request's outcome separately).
    pub fn record_fault(&self, tag: FaultTag, phase: &str) {
        self.counters.add_fault(tag);
        let mut inner = self.lock();
        if let Some(count) = inner.by_phase.get_mut(phase) {
            *count += 1;
        } else {
            inner.by_phase.insert(phase.to_string(), 1);
        }
    }

    /// A request carrying `Idempotency-Key: key` is about to execute. `fingerprint`
    /// identifies the request (method, path, body), so a key reused for a different
    /// request is caught.
    pub fn begin_keyed(
        &self,
        key: &str,
        fingerprint: u64,
        who: RequestIdentity<'_>,
        now: Duration,
    ) -> KeyCheck {
        let mut inner = self.lock();
        let inner = &mut *inner;
        inner.expire_keys(now, &self.limits);
        match inner.keys.get(key) {
            Some(entry) if entry.fingerprint != fingerprint => {
                inner.idempotency_mismatches += 1;
                KeyCheck::Mismatch
            }
            Some(KeyEntry {
                state: KeyState::InFlight,
                ..
            }) => {
                inner.idempotency_conflicts += 1;
                KeyCheck::InFlight
            }
            Some(KeyEntry {
                state: KeyState::Done(stored),
                ..
            }) => {
                let stored = Arc::clone(stored);
                inner.idempotent_replays += 1;
                if let Some(policy) = who.policy {
                    inner
                        .policy(policy, self.limits.max_policies)
                        .idempotent_replays += 1;
                }
                KeyCheck::Replay(stored)
            }
            None => {
                let generation = inner.next_generation();
                let key: Arc<str> = Arc::from(key);
                inner.keys.insert(
                    Arc::clone(&key),
                    KeyEntry {
                        generation,
                        fingerprint,
                        state: KeyState::InFlight,
                    },
                );
                inner
                    .key_order
                    .push_back((now, generation, Arc::clone(&key)));
                inner.expire_keys(now, &self.limits);
                KeyCheck::Fresh(KeyClaim { key, generation })
            }
        }
    }

    /// Stores the response of the execution that held `claim`; later requests with the
    /// key replay it.
    pub fn complete_key(&self, claim: KeyClaim, response: StoredResponse) {
        let mut inner = self.lock();
        if let Some(entry) = inner.keys.get_mut(&claim.key)
            && entry.generation == claim.generation
        {
            entry.state = KeyState::Done(Arc::new(response));
        }
    }

    /// The request that held `claim` was abandoned before executing: forget the key so a
    /// retry may execute.
    pub fn release_key(&self, claim: KeyClaim) {
        let mut inner = self.lock();
        if inner.keys.get(&claim.key).is_some_and(|e| {
            e.generation == claim.generation && matches!(e.state, KeyState::InFlight)
        }) {
            inner.keys.remove(&claim.key);
        }
    }

    /// Executes the side effect of a non-idempotent request.
    pub fn execute(&self, who: RequestIdentity<'_>, now: Duration) -> Execution {
        let mut inner = self.lock();
        let inner = &mut *inner;
        inner.effects += 1;
        inner.side_effects += 1;
        let number = inner.effects;
        let mut duplicate = false;
        if let Some(id) = who.request_id {
            if let Some(entry) = inner.ids.get_mut(id) {
                entry.side_effects += 1;
                duplicate = entry.side_effects > 1;
            } else {
                // Evicted since it arrived (or never recorded): remember it again.
                inner.track_id(id, now, 1);
                inner.expire_ids(now, &self.limits);
            }
            if duplicate {
                inner.duplicate_side_effects += 1;
                if inner.duplicate_examples.len() < self.limits.max_examples
                    && !inner.duplicate_examples.iter().any(|e| e == id)
                {
                    inner.duplicate_examples.push(id.to_string());
                }
            }
        }
        if let Some(policy) = who.policy {
            let entry = inner.policy(policy, self.limits.max_policies);
            entry.side_effects += 1;
            if duplicate {
                entry.duplicate_side_effects += 1;
            }
        }
        Execution { number, duplicate }
    }

    /// Forgets everything (counts, ids, keys).
    pub fn reset(&self) {
        let mut inner = self.lock();
        *inner = Inner::default();
        *self
            .baseline
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) =
            (self.requests.load(Ordering::Relaxed), self.counters.load());
    }

    /// Requests since the process started.
    pub(crate) fn lifetime_requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// Outcome and fault counts since the process started.
    pub(crate) fn lifetime_counts(&self) -> LifetimeCounts {
        let counts = self.counters.load();
        let faults = FaultTag::ALL
            .iter()
            .copied()
            .zip(counts.faults.iter().copied())
            .collect();
        (counts.outcomes().collect(), faults)
    }

    /// The current totals.
    pub fn snapshot(&self) -> LedgerSnapshot {
        let inner = self.lock();
        let (requests_then, counts_then) = &*self
            .baseline
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let requests = self
            .requests
            .load(Ordering::Relaxed)
            .saturating_sub(*requests_then);
        let counts = self.counters.load().since(counts_then);
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
            by_fault: counts
                .faults()
                .map(|(t, n)| (t.name().to_string(), n))
                .collect(),
            by_phase: inner.by_phase.clone(),
            by_policy: inner.by_policy.clone(),
            tracked_ids: inner.ids.len() as u64,
            evicted_ids: inner.evicted_ids,
            tracked_keys: inner.keys.len() as u64,
            evicted_keys: inner.evicted_keys,
        }
    }
}

/// Drops, oldest first, the entries older than `ttl` and those beyond `max`; returns how
/// many it removed. `order` lists (time, generation, key) in insertion order; an entry
/// renewed since (a newer generation) stays, and its stale place in `order` just goes.
fn expire<V>(
    order: &mut VecDeque<(Duration, u64, Arc<str>)>,
    map: &mut HashMap<Arc<str>, V>,
    now: Duration,
    ttl: Duration,
    max: usize,
    generation_of: impl Fn(&V) -> u64,
) -> u64 {
    let mut evicted = 0;
    while let Some((at, generation, _)) = order.front() {
        let expired = now.saturating_sub(*at) >= ttl;
        if !expired && order.len() <= max {
            break;
        }
        let generation = *generation;
        if let Some((_, _, key)) = order.pop_front()
            && map
                .get(&key)
                .is_some_and(|e| generation_of(e) == generation)
        {
            map.remove(&key);
            evicted += 1;
        }
    }
    evicted
}

#[cfg(test)]
mod tests {
    use super::*;

    fn who<'a>(id: &'a str, policy: &'a str) -> RequestIdentity<'a> {
        RequestIdentity {
            request_id: Some(id),
            policy: Some(policy),
        }
    }

    const T0: Duration = Duration::ZERO;

    #[test]
    fn counts_attempts_and_logical_requests_per_policy() {
        let ledger = Ledger::default();
        for (id, policy) in [
            ("a", "naive"),
            ("a", "naive"),
            ("a", "naive"),
            ("b", "naive"),
            ("c", "budget"),
        ] {
            ledger.record_request(who(id, policy), T0);
        }
        ledger.record_request(RequestIdentity::default(), T0);
        let snap = ledger.snapshot();
        assert_eq!(
            (snap.requests, snap.attempts, snap.logical, snap.untracked),
            (6, 5, 3, 1)
        );
        assert_eq!(snap.by_policy["naive"].attempts, 4);
        assert_eq!(snap.by_policy["naive"].logical, 2);
        assert_eq!(snap.by_policy["budget"].logical, 1);
    }

    #[test]
    fn a_second_execution_of_an_id_is_a_duplicate() {
        let ledger = Ledger::default();
        ledger.record_request(who("pay-1", "naive"), T0);
        assert!(!ledger.execute(who("pay-1", "naive"), T0).duplicate);
        ledger.record_request(who("pay-1", "naive"), T0);
        let second = ledger.execute(who("pay-1", "naive"), T0);
        assert!(second.duplicate);
        assert_eq!(second.number, 2);
        ledger.record_request(who("pay-2", "naive"), T0);
        assert!(!ledger.execute(who("pay-2", "naive"), T0).duplicate);
        let snap = ledger.snapshot();
        assert_eq!(snap.side_effects, 3);
        assert_eq!(snap.duplicate_side_effects, 1);
        assert_eq!(snap.duplicate_examples, vec!["pay-1".to_string()]);
        assert_eq!(snap.by_policy["naive"].duplicate_side_effects, 1);
    }

    #[test]
    fn idempotency_keys_follow_the_draft() {
        let ledger = Ledger::default();
        let id = who("r1", "p");
        let KeyCheck::Fresh(claim) = ledger.begin_keyed("k1", 7, id, T0) else {
            panic!("first use is fresh")
        };
        assert_eq!(ledger.begin_keyed("k1", 7, id, T0), KeyCheck::InFlight);
        ledger.execute(id, T0);
        let stored = StoredResponse {
            status: 200,
            body: "{\"effect\":1}".into(),
        };
        ledger.complete_key(claim, stored.clone());
        assert_eq!(
            ledger.begin_keyed("k1", 7, id, T0),
            KeyCheck::Replay(Arc::new(stored))
        );
        assert_eq!(ledger.begin_keyed("k1", 8, id, T0), KeyCheck::Mismatch);
        let snap = ledger.snapshot();
        assert_eq!(
            (
                snap.idempotent_replays,
                snap.idempotency_conflicts,
                snap.idempotency_mismatches
            ),
            (1, 1, 1)
        );
        assert_eq!(snap.side_effects, 1);
        assert_eq!(snap.by_policy["p"].idempotent_replays, 1);
    }

    #[test]
    fn a_released_key_may_execute_again() {
        let ledger = Ledger::default();
        let id = who("r1", "p");
        let KeyCheck::Fresh(claim) = ledger.begin_keyed("k", 1, id, T0) else {
            panic!("fresh")
        };
        ledger.release_key(claim);
        assert!(matches!(
            ledger.begin_keyed("k", 1, id, T0),
            KeyCheck::Fresh(_)
        ));
    }

    #[test]
    fn ids_expire_after_the_ttl_and_beyond_the_cap() {
        let limits = LedgerLimits {
            id_ttl: Duration::from_secs(10),
            max_ids: 3,
            ..LedgerLimits::default()
        };
        let ledger = Ledger::new(limits);
        for (i, id) in ["a", "b", "c", "d"].iter().enumerate() {
            ledger.record_request(who(id, "p"), Duration::from_secs(i as u64));
        }
        let snap = ledger.snapshot();
        assert_eq!(
            (snap.tracked_ids, snap.evicted_ids, snap.logical),
            (3, 1, 4)
        );
        // "a" was evicted by the cap: it comes back as a new logical request.
        ledger.record_request(who("a", "p"), Duration::from_secs(5));
        assert_eq!(ledger.snapshot().logical, 5);
        // Everything is older than the TTL at t = 100 s.
        ledger.record_request(who("z", "p"), Duration::from_secs(100));
        let snap = ledger.snapshot();
        assert_eq!(snap.tracked_ids, 1);
        assert!(snap.evicted_ids >= 4);
    }

    #[test]
    fn keys_expire_and_are_capped() {
        let limits = LedgerLimits {
            key_ttl: Duration::from_secs(10),
            max_keys: 2,
            ..LedgerLimits::default()
        };
        let ledger = Ledger::new(limits);
        let id = who("r", "p");
        for key in ["k1", "k2", "k3"] {
            let KeyCheck::Fresh(claim) = ledger.begin_keyed(key, 1, id, T0) else {
                panic!("fresh")
            };
            ledger.complete_key(
                claim,
                StoredResponse {
                    status: 200,
                    body: String::new(),
                },
            );
        }
        let snap = ledger.snapshot();
        assert_eq!((snap.tracked_keys, snap.evicted_keys), (2, 1));
        assert!(matches!(
            ledger.begin_keyed("k3", 1, id, T0),
            KeyCheck::Replay(_)
        ));
        assert!(matches!(
            ledger.begin_keyed("k3", 1, id, Duration::from_secs(11)),
            KeyCheck::Fresh(_)
        ));
    }

    #[test]
    fn examples_and_policies_are_bounded() {
        let limits = LedgerLimits {
            max_examples: 2,
            max_policies: 2,
            ..LedgerLimits::default()
        };
        let ledger = Ledger::new(limits);
        for i in 0..10 {
            let id = format!("id-{i}");
            let policy = format!("policy-{i}");
            for _ in 0..2 {
                ledger.record_request(who(&id, &policy), T0);
                ledger.execute(who(&id, &policy), T0);
            }
        }
        let snap = ledger.snapshot();
        assert_eq!(snap.duplicate_side_effects, 10);
        assert_eq!(snap.duplicate_examples.len(), 2);
        assert_eq!(snap.by_policy.len(), 3);
        assert_eq!(snap.by_policy[OTHER_POLICIES].attempts, 16);
    }

    #[test]
    fn outcomes_and_faults_are_counted_and_reset() {
        let ledger = Ledger::default();
        ledger.record_outcome(Outcome::Served);
        ledger.record_outcome(Outcome::Status(503));
        ledger.record_outcome(Outcome::Status(503));
        ledger.record_outcome(Outcome::Reset);
        ledger.record_fault(FaultTag::Status, "outage");
        ledger.record_fault(FaultTag::Reset, "outage");
        let snap = ledger.snapshot();
        assert_eq!(snap.by_outcome["served"], 1);
        assert_eq!(snap.by_outcome["status_503"], 2);
        assert_eq!(snap.by_outcome["reset"], 1);
        assert_eq!(snap.by_fault["status"], 1);
        assert_eq!(snap.by_phase["outage"], 2);
        ledger.reset();
        assert_eq!(ledger.snapshot(), LedgerSnapshot::default());
    }

    #[test]
    fn snapshot_serialises_with_the_contract_names() {
        let ledger = Ledger::default();
        ledger.record_request(who("a", "p"), T0);
        let json = serde_json::to_value(ledger.snapshot()).expect("serialises");
        for key in [
            "attempts",
            "logical",
            "side_effects",
            "duplicate_side_effects",
            "duplicate_examples",
            "idempotent_replays",
            "by_outcome",
            "by_policy",
        ] {
            assert!(json.get(key).is_some(), "{key} missing from {json}");
        }
        let back: LedgerSnapshot = serde_json::from_value(json).expect("deserialises");
        assert_eq!(back, ledger.snapshot());
    }
}
