//! The ledger's count of peers and resends: attempts per peer and method, and the
//! arrivals that resend a stated attempt already seen ([`super::resends`]).
//!
//! Why apart from the id tables: the fault draw needs a request's repeat index as it
//! arrives, while ids are applied a batch at a time ([`super::pending`]); and sharded by
//! the stated attempt's key, so the requests of a busy server seldom wait on one another
//! here.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use super::resends::{METHODS, Resends, Resent, Stated, method_index};
use super::{Disposition, Epoch, Ledger, LedgerLimits};
use crate::wire::MAX_PEERS;

/// Shards of the book: a power of two, as many as the pending queues.
const SHARDS: usize = 8;

/// One arrival as the peer count sees it.
#[derive(Debug, Clone, Copy)]
pub struct PeerArrival<'a> {
    /// The peer it arrived at, numbered from 1; `None` at a server with one peer.
    pub peer: Option<u32>,
    /// Its method.
    pub method: &'a str,
    /// Its stated attempt, when it has an `x-request-id`.
    pub stated: Option<Stated<'a>>,
}

/// Resends of one method in a [`super::LedgerSnapshot`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct RepeatLedger {
    /// Arrivals that resent a stated attempt already seen.
    pub repeats: u64,
    /// Of which the previous arrival of the same stated attempt was answered with a 4xx.
    pub after_4xx: u64,
}

type PerMethod = [u64; METHODS.len()];

#[derive(Debug)]
struct Book {
    epoch: u64,
    resends: Resends,
    by_peer: [PerMethod; MAX_PEERS],
    repeats: PerMethod,
    after_4xx: PerMethod,
}

/// The shards.
#[derive(Debug)]
pub(super) struct Books(Box<[Mutex<Book>]>);

/// What a snapshot shows of the books.
#[derive(Debug, Default)]
pub(super) struct BookTotals {
    pub(super) by_peer: BTreeMap<u32, BTreeMap<String, u64>>,
    pub(super) repeats: u64,
    pub(super) repeats_by_method: BTreeMap<String, RepeatLedger>,
}

impl Books {
    pub(super) fn new(limits: &LedgerLimits) -> Books {
        let max = limits.max_ids.div_ceil(SHARDS);
        Books(
            (0..SHARDS)
                .map(|_| {
                    Mutex::new(Book {
                        epoch: 0,
                        resends: Resends::new(limits.id_ttl, max),
                        by_peer: [[0; METHODS.len()]; MAX_PEERS],
                        repeats: [0; METHODS.len()],
                        after_4xx: [0; METHODS.len()],
                    })
                })
                .collect(),
        )
    }

    fn shard(&self, key: u64) -> MutexGuard<'_, Book> {
        // A panic while counting leaves counts that are still meaningful.
        self.0[(key as usize) % SHARDS]
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Forgets everything and counts in `epoch` from now on.
    pub(super) fn reset(&self, epoch: u64) {
        for shard in self.0.iter() {
            let mut book = shard
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            book.epoch = epoch;
            book.resends.clear();
            book.by_peer = [[0; METHODS.len()]; MAX_PEERS];
            book.repeats = [0; METHODS.len()];
            book.after_4xx = [0; METHODS.len()];
        }
    }

    pub(super) fn totals(&self) -> BookTotals {
        let mut by_peer = [[0; METHODS.len()]; MAX_PEERS];
        let (mut repeats, mut after_4xx) = ([0; METHODS.len()], [0; METHODS.len()]);
        for shard in self.0.iter() {
            let book = shard
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            for (total, counts) in by_peer.iter_mut().zip(&book.by_peer) {
                add(total, counts);
            }
            add(&mut repeats, &book.repeats);
            add(&mut after_4xx, &book.after_4xx);
        }
        let named = |counts: &PerMethod| -> BTreeMap<String, u64> {
            METHODS
                .iter()
                .zip(counts)
                .filter(|(_, n)| **n > 0)
                .map(|(m, n)| ((*m).to_string(), *n))
                .collect()
        };
        BookTotals {
            by_peer: (1..)
                .zip(&by_peer)
                .filter(|(_, counts)| counts.iter().any(|n| *n > 0))
                .map(|(peer, counts)| (peer, named(counts)))
                .collect(),
            repeats: repeats.iter().sum(),
            repeats_by_method: METHODS
                .iter()
                .zip(repeats.iter().zip(after_4xx))
                .filter(|(_, (n, _))| **n > 0)
                .map(|(m, (n, after_4xx))| {
                    let split = RepeatLedger {
                        repeats: *n,
                        after_4xx,
                    };
                    ((*m).to_string(), split)
                })
                .collect(),
        }
    }
}

fn add(total: &mut PerMethod, counts: &PerMethod) {
    for (t, n) in total.iter_mut().zip(counts) {
        *t += n;
    }
}

impl Ledger {
    /// An arrival at a peer (call once per request, with the generation
    /// [`Ledger::record_request`] gave it): counted per peer and method, and, when it
    /// states an attempt, how many times that stated attempt arrived before, the repeat
    /// its fault draw mixes in ([`crate::wire::Arrival`]). Nothing counts after a reset.
    pub fn arrive_at(&self, epoch: Epoch, arrival: PeerArrival<'_>, now: Duration) -> Resent {
        if arrival.peer.is_none() && arrival.stated.is_none() {
            return Resent::default();
        }
        let key = arrival.stated.map(|s| self.id_key_of(s));
        let mut book = self.books.shard(key.unwrap_or(0));
        if book.epoch != epoch.0 {
            return Resent::default();
        }
        let method = method_index(arrival.method);
        if let Some(counts) = arrival
            .peer
            .and_then(|p| usize::try_from(p).ok()?.checked_sub(1))
            .and_then(|i| book.by_peer.get_mut(i))
        {
            counts[method] += 1;
        }
        let Some(key) = key else {
            return Resent::default();
        };
        let resent = book.resends.arrive_key(key, now);
        if resent.repeat > 0 {
            book.repeats[method] += 1;
            if resent.after_4xx {
                book.after_4xx[method] += 1;
            }
        }
        resent
    }

    /// How the arrival [`Ledger::arrive_at`] said `resent` of was answered: a later
    /// resend of it counts as one after a 4xx when this was one.
    pub fn resend_answered(&self, epoch: Epoch, resent: &Resent, outcome: Disposition) {
        if *resent == Resent::default() {
            return;
        }
        let mut book = self.books.shard(resent.key);
        if book.epoch == epoch.0 {
            book.resends.answered(resent, outcome.is_4xx());
        }
    }

    fn id_key_of(&self, stated: Stated<'_>) -> u64 {
        use std::hash::BuildHasher;
        self.id_keys.hash_one(stated)
    }
}
