//! The run's counts, recorded without contention: each thread records on a recorder of
//! its own, and the recorders are folded into one (exactly: [`Recorder::absorb`]) once a
//! second and at the end, instead of every request taking one shared lock several times.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use super::lock;
use crate::stats::Recorder;

/// How many recorders requests spread over: more than the threads that record (the
/// runtime's workers and the dispatcher) on this kind of machine, so each has its own.
const SHARDS: usize = 8;

static NEXT_SHARD: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's place among a run's recorders.
    static SHARD: usize = NEXT_SHARD.fetch_add(1, Ordering::Relaxed);
}

pub(super) struct Recorders {
    /// The run's counts, as of the last fold of `shards` into it.
    folded: Mutex<Recorder>,
    /// Where requests record their events: a thread takes the one at its place in
    /// [`SHARD`], so a request's bookkeeping takes a lock no other thread wants.
    shards: Box<[Mutex<Recorder>]>,
}

impl Recorders {
    pub(super) fn new(fault_window: Option<(Duration, Duration)>) -> Recorders {
        Recorders {
            folded: Mutex::new(Recorder::new(fault_window)),
            shards: (0..SHARDS)
                .map(|_| Mutex::new(Recorder::new(fault_window)))
                .collect(),
        }
    }

    /// Records on this thread's recorder.
    pub(super) fn record<R>(&self, event: impl FnOnce(&mut Recorder) -> R) -> R {
        let shard = SHARD.with(|i| *i) % self.shards.len();
        event(&mut lock(&self.shards[shard]))
    }

    /// The run's counts so far: every thread's recorder folded into one.
    pub(super) fn merged(&self) -> MutexGuard<'_, Recorder> {
        let mut merged = lock(&self.folded);
        for shard in &self.shards {
            merged.absorb(&mut lock(shard));
        }
        merged
    }
}
