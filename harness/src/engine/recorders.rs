//! The run's counts, recorded without contention: each thread records on a recorder of
//! its own, and the recorders are folded into one (exactly: [`Recorder::absorb`]) once a
//! second and at the end, instead of every request taking one shared lock several times.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use super::lock;
use crate::stats::Recorder;

/// How many recorders requests spread over: more than the threads that record (the
/// runtime's workers and the dispatcher) on this kind of machine, so each has its own.
const SHARDS: usize = 8;

static NEXT_SHARD: AtomicUsize = AtomicUsize::new(0);

/// The recorders of the runs that ended, emptied and kept for the next: a plan's policies
/// run one after the other, and making nine recorders (~7 MB) again for each, while the
/// allocator had not yet reused or returned the last policy's, raised the process's peak
/// with the number of policies. At most one run's worth is kept.
static SPARE: Mutex<Vec<Recorder>> = Mutex::new(Vec::new());

thread_local! {
    /// This thread's place among a run's recorders.
    static SHARD: usize = NEXT_SHARD.fetch_add(1, Ordering::Relaxed);
}

pub(super) struct Recorders {
    /// The run's counts, as of the last fold of `shards` into it; `None` once taken.
    folded: Mutex<Option<Recorder>>,
    /// Where requests record their events: a thread takes the one at its place in
    /// [`SHARD`], so a request's bookkeeping takes a lock no other thread wants.
    shards: Box<[Mutex<Recorder>]>,
}

impl Recorders {
    pub(super) fn new(fault_window: Option<(Duration, Duration)>) -> Recorders {
        let mut spare = lock(&SPARE);
        let mut recorder = || match spare.pop() {
            Some(used) => used.renewed(fault_window),
            None => Recorder::new(fault_window),
        };
        Recorders {
            folded: Mutex::new(Some(recorder())),
            shards: (0..SHARDS).map(|_| Mutex::new(recorder())).collect(),
        }
    }

    /// Records on this thread's recorder.
    pub(super) fn record<R>(&self, event: impl FnOnce(&mut Recorder) -> R) -> R {
        let shard = SHARD.with(|i| *i) % self.shards.len();
        event(&mut lock(&self.shards[shard]))
    }

    /// The run's counts so far: every thread's recorder folded into one, given to `read`.
    pub(super) fn merged<R>(&self, read: impl FnOnce(&mut Recorder) -> R) -> R {
        let mut folded = lock(&self.folded);
        let merged = folded
            .as_mut()
            .expect("the counts are taken at the run's end, once the sampler has stopped folding");
        for shard in &self.shards {
            merged.absorb(&mut lock(shard));
        }
        read(merged)
    }

    /// The run's counts at its end, every thread's recorder folded into one, taken.
    pub(super) fn take(&self) -> Recorder {
        self.merged(|_| ());
        lock(&self.folded)
            .take()
            .expect("only `conclude` takes the counts, once")
    }
}

impl Drop for Recorders {
    /// The recorders go to [`SPARE`], for the next run.
    fn drop(&mut self) {
        let shards = std::mem::take(&mut self.shards).into_vec();
        let folded = self.folded.get_mut().map_or(None, Option::take);
        let mut spare = lock(&SPARE);
        for recorder in shards
            .into_iter()
            .map(Mutex::into_inner)
            .chain(folded.map(Ok))
        {
            if spare.len() > SHARDS {
                break;
            }
            spare.push(recorder.unwrap_or_else(std::sync::PoisonError::into_inner));
        }
    }
}
