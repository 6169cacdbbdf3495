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
//! - every id, key and policy name is at most `max_value_bytes` long (the server refuses
//!   longer ones before they get here), and a stored response is the short body that
//!   echoes the id, so entries are bounded in bytes too;
//! - duplicate examples are capped at `max_examples` ids; policies (the
//!   `x-chaos-policy` header) at `max_policies` names, the rest pooled under `(other)`.
//!
//! A reset starts a new generation ([`Epoch`]) rather than clearing counts under
//! requests still running: a request takes the generation in force when it arrives, and
//! what it records later (its fault, side effect, key, outcome) counts in that
//! generation or, after a reset, nowhere. A request in flight across a reset is in
//! neither ledger; the new one counts it among its `stragglers`.
//!
//! Time comes in as `now` (an offset from a fixed epoch the caller owns); the ledger
//! never reads a clock.

pub mod changes;
mod counters;
pub mod group;
mod ids;
mod keys;
mod peers;
mod pending;
pub mod resends;
pub mod retries;
mod snapshot;
mod table;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::hash::{BuildHasher, Hash, RandomState};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::script::FaultKind;
pub use changes::ScriptChange;
use counters::{Counts, OutcomeCounters};
pub use counters::{Disposition, Note};
pub use ids::Execution;
use keys::KeyEntry;
pub use keys::{KeyCheck, KeyClaim, StoredResponse};
use peers::Books;
pub use peers::{PeerArrival, RepeatLedger};
use pending::Pending;
pub use resends::{Resends, Resent, Stated};
use retries::Retries;
pub use retries::{Arriving, Grouped, Judged, Judging, Seen};
pub use snapshot::{LedgerSnapshot, PolicyLedger};
use table::IdTable;

/// The pool that policy names beyond `max_policies` are counted under.
pub const OTHER_POLICIES: &str = "(other)";

/// How much the ledger remembers. With the defaults the ledger's worst case, every cap
/// full of values `max_value_bytes` long, is 75 MB resident (42 MB with 36-byte UUIDs),
/// as `examples/ledger_memory.rs` measures; a ledger that judges ([`Ledger::judging`])
/// adds 73 MB at most for its `max_ids` logical requests and as many guesses, whatever
/// the values' length (it keeps their hashes).
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
    /// The longest `x-request-id`, `Idempotency-Key` or `x-chaos-policy` value, in bytes:
    /// the server refuses a request carrying a longer one (431) before it reaches the
    /// ledger, so each id, key, policy name and stored response is bounded in bytes.
    pub max_value_bytes: usize,
}

impl Default for LedgerLimits {
    fn default() -> Self {
        LedgerLimits {
            // Ten minutes: well beyond any sane retry deadline (AWS SDKs, gRPC and Envoy
            // give up within seconds to a couple of minutes).
            id_ttl: Duration::from_secs(600),
            // 250k ids: ten minutes of 400 new logical requests per second; about 17 MB
            // whatever the ids' length, as only their keyed hash is kept.
            max_ids: 250_000,
            key_ttl: Duration::from_secs(600),
            max_keys: 50_000,
            max_examples: 20,
            max_policies: 64,
            // 256 bytes: above Stripe's limit on idempotency keys (255 characters) and
            // Heroku's on request ids (200); a UUID takes 36, a W3C traceparent 55.
            max_value_bytes: 256,
        }
    }
}

/// A generation of the ledger: each [`Ledger::reset`] starts the next. A request gets
/// the one in force from [`Ledger::record_request`] and hands it to what it records
/// later (the `*_in` methods), which counts only while that generation lasts: once the
/// ledger is reset, a request that arrived before it adds nothing to the new ledger but
/// its count among the `stragglers`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Epoch(u64);

/// Who sent a request, as far as the ledger cares.
#[derive(Debug, Clone, Copy, Default)]
pub struct RequestIdentity<'a> {
    /// `x-request-id`: the logical request.
    pub request_id: Option<&'a str>,
    /// `x-chaos-policy`: the client policy that sent it.
    pub policy: Option<&'a str>,
    /// `x-chaos-attempt`: the attempt its client says it is, when it says.
    pub attempt: Option<u32>,
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
    /// By the id's keyed hash ([`Ledger::id_key`]), not the id itself.
    ids: IdTable,
    id_order: VecDeque<(Duration, u64, u64)>,
    evicted_ids: u64,
    keys: HashMap<Arc<str>, KeyEntry>,
    key_order: VecDeque<(Duration, u64, Arc<str>)>,
    evicted_keys: u64,
    generation: u64,
    effects: u64,
    /// Faults injected, by kind ([`FaultKind`] as an index).
    faults: [u64; FaultKind::ALL.len()],
    /// The ledger's generation these tables count.
    epoch: u64,
    /// Scripts installed over the control API since the last reset.
    script_changes: changes::Changes,
}

impl Inner {
    fn policy(&mut self, name: &str, max: usize) -> &mut PolicyLedger {
        // Two lookups for a name already counted, the case of every request but the first.
        if !self.by_policy.contains_key(name) {
            let name = if self.by_policy.len() < max {
                name
            } else {
                OTHER_POLICIES
            };
            return self.by_policy.entry(name.to_string()).or_default();
        }
        self.by_policy
            .get_mut(name)
            .expect("the name was found just above")
    }

    fn next_generation(&mut self) -> u64 {
        self.generation += 1;
        self.generation
    }
}

/// The ledger. Thread-safe: counters are atomics, and the per-id and per-key tables sit
/// behind one mutex. A request's `x-request-id` is queued on its thread and reaches the
/// tables with a batch of others ([`pending`]); whatever reads the tables applies every
/// queue first, so nothing ever sees a count short.
#[derive(Debug)]
pub struct Ledger {
    limits: LedgerLimits,
    /// Requests since the process started (the metrics read it as is).
    requests: AtomicU64,
    /// Outcomes and faults since the process started.
    counters: OutcomeCounters,
    /// Of the outcomes, those of requests that arrived before the reset in force.
    stragglers: OutcomeCounters,
    /// `requests`, `counters` and `stragglers` at the last reset.
    baseline: Mutex<Baseline>,
    /// The generation in force (each queue of `pending` and `inner` hold it too).
    epoch: AtomicU64,
    inner: Mutex<Inner>,
    /// Request ids recorded and not yet in `inner`.
    pending: Pending,
    /// Keys the hash request ids are remembered by: random per ledger, so no client can
    /// choose ids that collide.
    id_keys: RandomState,
    /// The judge of a client's retries, when the server groups and judges attempts
    /// ([`Ledger::judging`]).
    /// How it judges (read on every judged request, so outside the lock) and the judge.
    retries: Option<(Judging, Mutex<Retries>)>,
    /// Attempts per peer and method, and resends of stated attempts ([`peers`]).
    books: Books,
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
            stragglers: OutcomeCounters::default(),
            baseline: Mutex::new(Baseline::default()),
            epoch: AtomicU64::new(0),
            inner: Mutex::new(Inner::default()),
            pending: Pending::default(),
            id_keys: RandomState::new(),
            retries: None,
            books: Books::new(&limits),
        }
    }

    /// This ledger, grouping every attempt into its logical request (by the headers real
    /// clients send, else by a guess) and judging each retry ([`retries`]).
    pub fn judging(mut self, judging: Judging) -> Ledger {
        let retries = Retries::new(judging.clone(), self.limits.max_ids, self.limits.id_ttl);
        self.retries = Some((judging, Mutex::new(retries)));
        self
    }

    /// Whether it groups and judges attempts.
    pub fn judges(&self) -> bool {
        self.retries.is_some()
    }

    /// How it judges, when it does.
    pub fn judged_by(&self) -> Option<&Judging> {
        self.retries.as_ref().map(|(judging, _)| judging)
    }

    fn retries(&self) -> Option<MutexGuard<'_, Retries>> {
        self.retries
            .as_ref()
            .map(|(_, r)| r.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    /// Groups an attempt into its logical request (`None` when the ledger does not
    /// judge): the id and attempt number to record it under.
    pub fn group(&self, arriving: Arriving<'_>, now: Duration) -> Option<Grouped> {
        self.retries().map(|mut r| r.arrive(arriving, now))
    }

    /// An attempt [`Ledger::group`] grouped was answered (or given up on) at `now`.
    pub fn answered(&self, grouped: &Grouped, now: Duration, seen: Seen, asked: Option<Duration>) {
        if let Some(mut r) = self.retries() {
            r.answered(grouped.entry, now, seen, asked);
        }
    }

    /// An empty ledger with the room for its `max_ids` request ids made now, as a server
    /// wants: a table that grows doubles under the ledger's lock, and every request with
    /// an id waits for it (2.2 ms at 65,536 ids and 5.0 ms at 131,072 on the bench
    /// machine, stalls long enough to pile up a load generator's connections). The cost
    /// is the table's 8 MB (with the default limits) from the start instead of after the
    /// first 131,072 ids. The simulator does not want it: it runs many short ledgers, and
    /// memory it never touches is faster.
    pub fn presized(limits: LedgerLimits) -> Ledger {
        let ledger = Ledger::new(limits);
        {
            let mut inner = ledger.lock();
            inner.ids = IdTable::with_room(limits.max_ids);
            // One more than the cap: a new id is queued before the oldest is evicted.
            inner.id_order = VecDeque::with_capacity(limits.max_ids.saturating_add(1));
        }
        ledger
    }

    /// What a request id is remembered by: its 64-bit SipHash under this ledger's random
    /// keys. Remembering a hash instead of the id makes an entry a few dozen bytes
    /// whatever the id's length, and costs the hot path no allocation and one hash. Two
    /// distinct ids share a hash with probability 2⁻⁶⁴ per pair: with `max_ids` ids
    /// remembered, a new id is mistaken for a known one about once in 7·10¹³ requests.
    fn id_key(&self, id: &str) -> u64 {
        self.id_keys.hash_one(id)
    }

    /// The generation in force.
    pub fn epoch(&self) -> Epoch {
        Epoch(self.epoch.load(Ordering::Acquire))
    }

    /// The limits it was made with.
    pub fn limits(&self) -> &LedgerLimits {
        &self.limits
    }

    /// The tables, with every queued arrival applied: what anything reading or changing
    /// what an id did takes.
    fn lock(&self) -> MutexGuard<'_, Inner> {
        for mut queue in self.pending.each() {
            self.apply(&mut queue);
        }
        self.lock_tables()
    }

    /// The tables as they are, queued arrivals aside.
    fn lock_tables(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves counters that are still meaningful;
        // keep serving rather than poisoning every later request.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Notes a script installed over the control API: a reset forgets it, as it forgets
    /// the counts the script's faults made.
    pub fn note_script(&self, change: changes::ScriptChange) {
        self.lock_tables().script_changes.note(change);
    }

    /// Forgets everything (counts, ids, keys) and starts the next generation. The
    /// tables keep their room: the next run is likely the size of the last, and a table
    /// regrown from nothing costs a run at these rates a good part of its time in page
    /// faults and rehashes.
    pub fn reset(&self) {
        // Every queue at once: a request counts its arrival and its outcome under its
        // thread's queue, so with all of them held, each count falls wholly before the
        // baselines below or wholly in the next generation.
        let mut queues: Vec<_> = self.pending.each().collect();
        let epoch = self.epoch.load(Ordering::Relaxed) + 1;
        for queue in &mut queues {
            queue.clear();
            queue.epoch = epoch;
        }
        let mut inner = self.lock_tables();
        let mut ids = std::mem::take(&mut inner.ids);
        let mut id_order = std::mem::take(&mut inner.id_order);
        let mut keys = std::mem::take(&mut inner.keys);
        let mut key_order = std::mem::take(&mut inner.key_order);
        ids.clear();
        id_order.clear();
        keys.clear();
        key_order.clear();
        *inner = Inner {
            ids,
            id_order,
            keys,
            key_order,
            epoch,
            ..Inner::default()
        };
        *self
            .baseline
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Baseline {
            requests: self.requests.load(Ordering::Relaxed),
            counts: self.counters.load(),
            stragglers: self.stragglers.load(),
        };
        if let Some(mut retries) = self.retries() {
            retries.reset();
        }
        self.books.reset(epoch);
        self.epoch.store(epoch, Ordering::Release);
    }
}

/// The lifetime counts at the last reset, which the ledger reports its counts since.
#[derive(Debug, Default)]
struct Baseline {
    requests: u64,
    counts: Counts,
    stragglers: Counts,
}

/// Inserts `value` (of this `generation`) under `key` and appends it to `order`, the
/// expiry order [`expire`] walks.
fn remember<K: Hash + Eq + Clone, V, S: BuildHasher>(
    order: &mut VecDeque<(Duration, u64, K)>,
    map: &mut HashMap<K, V, S>,
    key: K,
    now: Duration,
    generation: u64,
    value: V,
) {
    map.insert(key.clone(), value);
    order.push_back((now, generation, key));
}

/// Drops, oldest first, the entries older than `ttl` and those beyond `max`; returns how
/// many it removed. `order` lists (time, generation, key) in insertion order; an entry
/// renewed since (a newer generation) stays, and its stale place in `order` just goes.
fn expire<K: Hash + Eq, V, S: BuildHasher>(
    order: &mut VecDeque<(Duration, u64, K)>,
    map: &mut HashMap<K, V, S>,
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
            && let std::collections::hash_map::Entry::Occupied(entry) = map.entry(key)
            && generation_of(entry.get()) == generation
        {
            entry.remove();
            evicted += 1;
        }
    }
    evicted
}

#[cfg(test)]
mod tests;
