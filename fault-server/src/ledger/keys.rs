//! Idempotency keys, after the IETF httpapi draft: the first request with a key
//! executes and its response is stored, later ones replay it; a key still executing
//! answers 409, a key reused with a different request 422.

use std::sync::Arc;
use std::time::Duration;

use super::{Epoch, Inner, Ledger, LedgerLimits, RequestIdentity, expire, remember};

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
    /// The ledger's generation the key was claimed in: entries' generations restart
    /// with each, so a claim from before a reset must not touch the new table's entry.
    epoch: u64,
    /// The request's fingerprint and when it was claimed: what a straggler's completed
    /// key is stored with in the table of the generation it completes in.
    fingerprint: u64,
    claimed_at: Duration,
}

#[derive(Debug)]
enum KeyState {
    InFlight,
    Done(Arc<StoredResponse>),
}

#[derive(Debug)]
pub(super) struct KeyEntry {
    generation: u64,
    fingerprint: u64,
    state: KeyState,
    /// Stored by a straggler that completed after the reset: its client's retry replays
    /// it, but a request that states it is a first attempt (a later run's request of the
    /// same id) executes afresh.
    carried: bool,
}

impl Inner {
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

impl Ledger {
    /// A request carrying `Idempotency-Key: key` is about to execute, in the generation
    /// in force. `fingerprint` identifies the request (method, path, body), so a key
    /// reused for a different request is caught.
    pub fn begin_keyed(
        &self,
        key: &str,
        fingerprint: u64,
        who: RequestIdentity<'_>,
        now: Duration,
    ) -> KeyCheck {
        self.begin_keyed_at(None, key, fingerprint, who, now)
    }

    /// [`Ledger::begin_keyed`] for a request that arrived in `epoch`. After a reset
    /// since, the key is none of the new ledger's business: the request executes as if
    /// fresh, under a claim that touches nothing.
    pub fn begin_keyed_in(
        &self,
        epoch: Epoch,
        key: &str,
        fingerprint: u64,
        who: RequestIdentity<'_>,
        now: Duration,
    ) -> KeyCheck {
        self.begin_keyed_at(Some(epoch), key, fingerprint, who, now)
    }

    fn begin_keyed_at(
        &self,
        epoch: Option<Epoch>,
        key: &str,
        fingerprint: u64,
        who: RequestIdentity<'_>,
        now: Duration,
    ) -> KeyCheck {
        let mut inner = self.lock();
        let inner = &mut *inner;
        if let Some(Epoch(past)) = epoch.filter(|e| e.0 != inner.epoch) {
            return KeyCheck::Fresh(KeyClaim {
                key: Arc::from(key),
                generation: 0,
                epoch: past,
                fingerprint,
                claimed_at: now,
            });
        }
        inner.expire_keys(now, &self.limits);
        if who.attempt == Some(1) && inner.keys.get(key).is_some_and(|e| e.carried) {
            // Its order entry stays, and expires as stale (its generation is gone).
            inner.keys.remove(key);
        }
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
                let entry = KeyEntry {
                    generation,
                    fingerprint,
                    state: KeyState::InFlight,
                    carried: false,
                };
                let key: Arc<str> = Arc::from(key);
                remember(
                    &mut inner.key_order,
                    &mut inner.keys,
                    Arc::clone(&key),
                    now,
                    generation,
                    entry,
                );
                inner.expire_keys(now, &self.limits);
                KeyCheck::Fresh(KeyClaim {
                    key,
                    generation,
                    epoch: inner.epoch,
                    fingerprint,
                    claimed_at: now,
                })
            }
        }
    }

    /// Stores the response of the execution that held `claim`; later requests with the
    /// key replay it.
    ///
    /// A straggler (claimed before a reset) stores its key too, in the new table, if the
    /// key is not there already: it executed, as a real service's request would have, and
    /// a retry under the same key after the reset must replay it, not execute it again
    /// where no count can see the duplicate. Nothing is counted for it.
    pub fn complete_key(&self, claim: KeyClaim, response: StoredResponse) {
        // Keys are none of the queued arrivals' business.
        let mut inner = self.lock_tables();
        if inner.epoch != claim.epoch {
            if !inner.keys.contains_key(&claim.key) {
                let inner = &mut *inner;
                let generation = inner.next_generation();
                let entry = KeyEntry {
                    generation,
                    fingerprint: claim.fingerprint,
                    state: KeyState::Done(Arc::new(response)),
                    carried: true,
                };
                remember(
                    &mut inner.key_order,
                    &mut inner.keys,
                    claim.key,
                    claim.claimed_at,
                    generation,
                    entry,
                );
                inner.expire_keys(claim.claimed_at, &self.limits);
            }
            return;
        }
        if let Some(entry) = inner.keys.get_mut(&claim.key)
            && entry.generation == claim.generation
        {
            entry.state = KeyState::Done(Arc::new(response));
        }
    }

    /// The request that held `claim` was abandoned before executing: forget the key so a
    /// retry may execute.
    pub fn release_key(&self, claim: KeyClaim) {
        let mut inner = self.lock_tables();
        if inner.epoch == claim.epoch
            && inner.keys.get(&claim.key).is_some_and(|e| {
                e.generation == claim.generation && matches!(e.state, KeyState::InFlight)
            })
        {
            inner.keys.remove(&claim.key);
        }
    }
}
