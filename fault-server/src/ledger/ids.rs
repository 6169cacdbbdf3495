//! Request ids: attempts and logical requests as the server saw them, and the side
//! effects each id executed, so a second execution of one id is a duplicate.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::pending::Queue;
use super::{Epoch, Inner, Ledger, LedgerLimits, RequestIdentity};

/// The receipt of one executed side effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Execution {
    /// The effect's sequence number (1-based, since the last reset).
    pub number: u64,
    /// This request id had already executed at least once: a duplicate side effect.
    pub duplicate: bool,
}

/// Eight bytes, so a bucket of the id table is sixteen: the table is the ledger's
/// biggest, and every new id touches two of its buckets at random.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct IdEntry {
    /// The low 32 bits of the entry's generation: enough to tell it from a stale place in
    /// `id_order`, which never holds more than `max_ids` places (far fewer than 2^32).
    pub(super) generation: u32,
    pub(super) side_effects: u32,
}

/// The generation an id entry and its place in `id_order` both carry.
fn id_generation(generation: u64) -> u32 {
    generation as u32
}

impl Inner {
    /// Starts tracking `id` (new, or evicted since it was last seen), in expiry order.
    fn track_id(&mut self, id: u64, now: Duration, side_effects: u32) {
        let generation = id_generation(self.next_generation());
        self.ids.insert(
            id,
            IdEntry {
                generation,
                side_effects,
            },
        );
        self.id_order.push_back((now, u64::from(generation), id));
    }

    /// One arrival of the id whose keyed hash is `key`: an attempt, and a logical
    /// request if the id is new (or was forgotten).
    fn arrive(&mut self, key: u64, now: Duration, policy: Option<&str>, limits: &LedgerLimits) {
        self.attempts += 1;
        // A full ledger evicts its oldest id below: both that id's slot and the new one's
        // are random places in a table no cache holds, so start both misses together.
        if self.id_order.len() >= limits.max_ids
            && let Some(&(_, _, oldest)) = self.id_order.front()
        {
            self.ids.touch(oldest);
        }
        // One probe: a new id is inserted where the lookup found no entry.
        let generation = self.generation + 1;
        let new_id = self.ids.insert_new(
            key,
            IdEntry {
                generation: id_generation(generation),
                side_effects: 0,
            },
        );
        if new_id {
            self.generation = generation;
            self.id_order
                .push_back((now, u64::from(id_generation(generation)), key));
            self.logical += 1;
        }
        if let Some(policy) = policy {
            let entry = self.policy(policy, limits.max_policies);
            entry.attempts += 1;
            if new_id {
                entry.logical += 1;
            }
        }
        self.expire_ids(now, limits);
    }

    /// Drops, oldest first, the ids older than the TTL and those beyond `max_ids`. A place
    /// in `id_order` whose id was tracked again since (a newer generation) just goes.
    fn expire_ids(&mut self, now: Duration, limits: &LedgerLimits) {
        while let Some(&(at, generation, id)) = self.id_order.front() {
            let expired = now.saturating_sub(at) >= limits.id_ttl;
            if !expired && self.id_order.len() <= limits.max_ids {
                break;
            }
            self.id_order.pop_front();
            if self
                .ids
                .remove_if(id, |e| u64::from(e.generation) == generation)
            {
                self.evicted_ids += 1;
            }
        }
    }
}

impl Ledger {
    /// A request arrived (call once per request, before any fault); returns the
    /// generation it arrived in, for what it records later. Its id is queued on the
    /// calling thread and reaches the tables with its batch, or before anything reads
    /// them ([`super::pending`]).
    pub fn record_request(&self, who: RequestIdentity<'_>, now: Duration) -> Epoch {
        let key = who.request_id.map(|id| self.id_key(id));
        // Counted and queued under the queue, which a reset holds: both in one generation.
        let mut queue = self.pending.mine();
        self.requests.fetch_add(1, Ordering::Relaxed);
        let epoch = Epoch(queue.epoch);
        let Some(key) = key else {
            return epoch;
        };
        if !queue.push(key, now, who.policy) {
            self.apply(&mut queue);
            queue.push(key, now, who.policy);
        }
        if queue.is_full() {
            self.apply(&mut queue);
        }
        epoch
    }

    /// Applies a queue's arrivals, in the order they came, and empties it.
    pub(super) fn apply(&self, queue: &mut Queue) {
        if queue.arrivals.is_empty() {
            return;
        }
        let mut inner = self.lock_tables();
        let inner = &mut *inner;
        // Each new id's slot is a random place in a table no cache holds: start every
        // miss of the batch before waiting on the first.
        for arrival in &queue.arrivals {
            inner.ids.touch(arrival.key);
        }
        for arrival in &queue.arrivals {
            inner.arrive(
                arrival.key,
                arrival.now,
                queue.policy(arrival),
                &self.limits,
            );
        }
        queue.clear();
    }

    /// Executes the side effect of a non-idempotent request, in the generation in force.
    pub fn execute(&self, who: RequestIdentity<'_>, now: Duration) -> Execution {
        self.execute_at(None, who, now)
            .expect("the generation in force is never past")
    }

    /// Executes the side effect of a non-idempotent request that arrived in `epoch`;
    /// `None`, recording nothing, after a reset since.
    pub fn execute_in(
        &self,
        epoch: Epoch,
        who: RequestIdentity<'_>,
        now: Duration,
    ) -> Option<Execution> {
        self.execute_at(Some(epoch), who, now)
    }

    fn execute_at(
        &self,
        epoch: Option<Epoch>,
        who: RequestIdentity<'_>,
        now: Duration,
    ) -> Option<Execution> {
        let mut inner = self.lock();
        let inner = &mut *inner;
        if epoch.is_some_and(|e| e.0 != inner.epoch) {
            return None;
        }
        inner.effects += 1;
        inner.side_effects += 1;
        let number = inner.effects;
        let mut duplicate = false;
        if let Some(id) = who.request_id {
            let key = self.id_key(id);
            if let Some(entry) = inner.ids.get_mut(key) {
                entry.side_effects += 1;
                duplicate = entry.side_effects > 1;
            } else {
                // Evicted since it arrived (or never recorded): remember it again.
                inner.track_id(key, now, 1);
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
        Some(Execution { number, duplicate })
    }
}
