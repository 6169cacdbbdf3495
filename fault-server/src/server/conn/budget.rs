//! The budget of open connections: how many are served in full, how many over budget,
//! which one is closed to make room (the one idle longest), and when a newcomer must wait
//! for descriptors ([`Admission`]). The accept loop asks it; see [`super`] for why.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// One open connection, as the budget sees it.
#[derive(Debug)]
pub(super) struct Open {
    /// Requests being handled on it.
    pub(super) busy: AtomicUsize,
    /// When it last finished a request (or opened), in nanoseconds since `epoch`: a clock
    /// read rather than a counter every connection shares, whose cache line would cross
    /// between the cores on every request. A connection with nothing busy is waiting for
    /// its next request's headers since then ([`HEADER_READ_TIMEOUT`]).
    pub(super) last_active: AtomicU64,
    /// The budget's epoch.
    pub(super) epoch: Instant,
    /// Ends the connection, fired by the budget (evicted), by a handler (reset, close:
    /// this is its [`ConnControl`](super::socket::ConnControl)'s kill signal) and, a child
    /// of [`Stop::force`], by the end of the grace period. One token for the three, so a
    /// connection waking to serve a request looks at one signal of its own, not at three.
    pub(super) kill: CancellationToken,
}

impl Open {
    pub(super) fn now(epoch: Instant) -> u64 {
        nanos(epoch.elapsed())
    }
}

/// A duration as the nanoseconds [`Open::last_active`] counts in.
fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

/// What the budget does with a newcomer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Admission {
    /// Served in full.
    Within,
    /// Over budget, every connection busy: one request, and only one that must stay
    /// reachable.
    Over,
    /// No descriptors to give: ask again once a connection has closed its own.
    Wait,
}

/// The open connections, bounded.
#[derive(Debug)]
pub(super) struct Budget {
    /// Connections served in full.
    pub(super) max: usize,
    /// Connections served over budget at once.
    pub(super) over: usize,
    pub(super) epoch: Instant,
    pub(super) next_id: AtomicU64,
    pub(super) open: Mutex<Table>,
    /// A connection's descriptors were closed.
    pub(super) left: Notify,
}

/// Every connection whose descriptors are open, in one of three sets. The budget bounds
/// all three together, not `within` alone: a connection told to close holds its two
/// descriptors until its task runs, and the accept loop outruns the tasks, so a burst of
/// newcomers, each closing an older connection, took every descriptor the process had
/// while `within` stayed within budget; and connections over budget were not bounded at
/// all (issue 26, bug 4).
#[derive(Debug, Default)]
pub(super) struct Table {
    /// The connections served in full.
    pub(super) within: HashMap<u64, Arc<Open>>,
    /// The connections served over budget.
    pub(super) over: HashMap<u64, Arc<Open>>,
    /// Connections the budget closed whose task has not ended yet.
    pub(super) closing: usize,
}

impl Table {
    pub(super) fn held(&self) -> usize {
        self.within.len() + self.over.len() + self.closing
    }

    /// The connection of `set` that has waited longest for a request, if one is waiting.
    pub(super) fn idlest(set: &HashMap<u64, Arc<Open>>) -> Option<u64> {
        set.iter()
            .filter(|(_, o)| o.busy.load(Ordering::Relaxed) == 0)
            .min_by_key(|(_, o)| o.last_active.load(Ordering::Relaxed))
            .map(|(id, _)| *id)
    }

    /// Closes a connection; it is `closing` until its task ends.
    pub(super) fn close(&mut self, id: u64) {
        if let Some(open) = self.within.remove(&id).or_else(|| self.over.remove(&id)) {
            open.kill.cancel();
            self.closing += 1;
        }
    }
}

impl Budget {
    pub(super) fn new(max: usize, over: usize) -> Budget {
        Budget {
            max: max.max(1),
            over,
            epoch: Instant::now(),
            next_id: AtomicU64::new(0),
            open: Mutex::new(Table::default()),
            left: Notify::new(),
        }
    }

    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.open
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Registers a newcomer. Within budget it is served in full. Past it, the
    /// connection idle longest is closed to make room; when every one is busy, the
    /// newcomer is served over budget. When `max + over` connections hold descriptors,
    /// it must wait: the connection that has waited longest for a request (one served
    /// in full first, else one over budget) is closed, unless some are closing already.
    pub(super) fn admit(&self, id: u64, open: &Arc<Open>) -> Admission {
        let mut table = self.lock();
        if table.held() >= self.max.saturating_add(self.over) {
            if table.closing == 0
                && let Some(idlest) =
                    Table::idlest(&table.within).or_else(|| Table::idlest(&table.over))
            {
                table.close(idlest);
            }
            return Admission::Wait;
        }
        if table.within.len() >= self.max {
            match Table::idlest(&table.within) {
                Some(idlest) => table.close(idlest),
                None => {
                    table.over.insert(id, Arc::clone(open));
                    return Admission::Over;
                }
            }
        }
        table.within.insert(id, Arc::clone(open));
        Admission::Within
    }

    /// Closes every connection served in full that has waited for a request's headers
    /// longer than `timeout`: nothing in progress on it, and its last response (or its
    /// opening) that long ago. Returns how many it closed.
    pub(super) fn close_stalled(&self, timeout: Duration) -> usize {
        let (now, timeout) = (Open::now(self.epoch), nanos(timeout));
        let mut table = self.lock();
        let stalled: Vec<u64> = table
            .within
            .iter()
            .filter(|(_, open)| {
                open.busy.load(Ordering::Relaxed) == 0
                    && now.saturating_sub(open.last_active.load(Ordering::Relaxed)) >= timeout
            })
            .map(|(id, _)| *id)
            .collect();
        for id in &stalled {
            table.close(*id);
        }
        stalled.len()
    }

    /// A connection's descriptors are closed.
    pub(super) fn leave(&self, id: u64) {
        {
            let mut table = self.lock();
            if table.within.remove(&id).is_none() && table.over.remove(&id).is_none() {
                table.closing -= 1;
            }
        }
        self.left.notify_one();
    }
}
