//! The counters of outcomes and fault kinds: lock-free atomics that live as long as the
//! process (the metrics read them as they are), and the baseline a reset takes so the
//! ledger can report them since the last reset; less the outcomes of stragglers, counted
//! apart.

use std::sync::atomic::{AtomicU64, Ordering};

use super::{Epoch, Ledger};
use crate::script::FaultKind;

/// How one request ended, as the server answered it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Disposition {
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
    /// A gRPC fault answered to a gRPC call, Trailers-Only, with this `grpc-status`.
    Grpc(u8),
    /// A `reset` fault.
    Reset,
    /// A `close` fault.
    Close,
    /// A `truncate` fault.
    Truncate,
    /// A `timeout` fault (held, then closed).
    Timeout,
    /// A `refuse` fault: the stream reset with `REFUSED_STREAM`, not processed.
    Refused,
    /// Refused before the script saw it: a header the ledger keeps was too long (431),
    /// not UTF-8 text or an empty `Idempotency-Key` (400).
    BadHeader,
    /// The request's body could not be read: too large (413), malformed or cut off (400);
    /// or its target was refused before the script saw it: `CONNECT` (501), a path that
    /// climbs above the root or holds an encoded slash (400).
    BadRequest,
    /// Refused before the script saw it: its `Via` named this server, so it had come round
    /// a loop of proxies (508, never forwarded).
    LoopDetected,
    /// Forwarded to the upstream (`--upstream`), which answered with this status: the
    /// upstream's own statuses, counted apart from the injected ones ([`Disposition::Status`]).
    Upstream(u16),
    /// Not forwarded: the upstream could not be connected to (refused, unreachable, its
    /// name not resolved); answered 502.
    UpstreamUnreachable,
    /// Forwarded, and the upstream's answer did not begin within the upstream timeout
    /// (`--upstream-timeout`); answered 504.
    UpstreamTimeout,
    /// Forwarded, and the upstream's connection failed before a whole response head came
    /// back (closed, reset, a malformed response); answered 502.
    UpstreamFailed,
    /// Dropped before it ended: its connection went away while the request was still
    /// tied to it (before serving detaches from the connection), or the server stopped
    /// while it was in progress. A client that leaves during serving does not end its
    /// request: that request is still served.
    Abandoned,
}

const FIXED_OUTCOMES: [Disposition; 17] = [
    Disposition::Served,
    Disposition::Replayed,
    Disposition::KeyInFlight,
    Disposition::KeyMismatch,
    Disposition::Rejected,
    Disposition::Reset,
    Disposition::Close,
    Disposition::Truncate,
    Disposition::Timeout,
    Disposition::Refused,
    Disposition::BadHeader,
    Disposition::BadRequest,
    Disposition::LoopDetected,
    Disposition::UpstreamUnreachable,
    Disposition::UpstreamTimeout,
    Disposition::UpstreamFailed,
    Disposition::Abandoned,
];

/// What the ledger notes of a request beside its one outcome: facts that cut across
/// outcomes, so a report can say them without a disposition for every combination.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Note {
    /// The upstream (`--upstream`) answered the request it was forwarded, whatever the
    /// caller got: its `upstream_<code>` outcome, or a `processed: true` fault's.
    UpstreamAnswered,
    /// Of those, one whose caller had gone (hung up, timed out, or its connection ended
    /// by another request's fault) before the answer came.
    CallerGone,
}

impl Note {
    const ALL: [Note; 2] = [Note::UpstreamAnswered, Note::CallerGone];
}

/// The gRPC codes counted, 0 to 16.
const GRPC_CODES: usize = crate::wire::grpc::NAMES.len();

/// The statuses counted by code: 100 to 599 (an injected status is at least 200).
const CODES: std::ops::RangeInclusive<u16> = 100..=599;

impl Disposition {
    /// Whether the client was answered with a status that forbids a retry: a 4xx but 408
    /// and 429, a 501 or a 508, as the policy core's `Outcome::forbids_retry` reads one. What a
    /// resend after it is counted by ([`super::RepeatLedger::after_4xx`]): a proxy that
    /// resends a 429 retries a transient refusal, not a permanent one.
    pub fn is_4xx(self) -> bool {
        match self {
            Disposition::Status(code) | Disposition::Upstream(code) => {
                crate::wire::status_forbids_retry(code)
            }
            Disposition::KeyInFlight
            | Disposition::KeyMismatch
            | Disposition::BadHeader
            | Disposition::BadRequest
            | Disposition::LoopDetected => true,
            // The reject status is the script's (503 by default): not known here.
            _ => false,
        }
    }

    /// The label used in the ledger and in metrics: `served`, `status_503`, `reset`,
    /// `upstream_200`, `upstream_unreachable`, …
    pub fn label(self) -> String {
        match self {
            Disposition::Status(code) => format!("status_{code}"),
            Disposition::Upstream(code) => format!("upstream_{code}"),
            Disposition::Grpc(code) => format!("grpc_{}", crate::wire::grpc::label(code)),
            other => other.fixed_label().to_string(),
        }
    }

    /// The label without the status code (`status` for every status fault, `upstream`
    /// for every answer of the upstream).
    pub(crate) fn fixed_label(self) -> &'static str {
        match self {
            Disposition::Served => "served",
            Disposition::Replayed => "replayed",
            Disposition::KeyInFlight => "key_in_flight",
            Disposition::KeyMismatch => "key_mismatch",
            Disposition::Rejected => "rejected",
            Disposition::Status(_) => FaultKind::Status.name(),
            Disposition::Grpc(_) => "grpc",
            Disposition::Reset => FaultKind::Reset.name(),
            Disposition::Close => FaultKind::Close.name(),
            Disposition::Truncate => FaultKind::Truncate.name(),
            Disposition::Timeout => FaultKind::Timeout.name(),
            Disposition::Refused => FaultKind::Refuse.name(),
            Disposition::BadHeader => "bad_header",
            Disposition::BadRequest => "bad_request",
            Disposition::LoopDetected => "loop_detected",
            Disposition::Upstream(_) => "upstream",
            Disposition::UpstreamUnreachable => "upstream_unreachable",
            Disposition::UpstreamTimeout => "upstream_timeout",
            Disposition::UpstreamFailed => "upstream_failed",
            Disposition::Abandoned => "abandoned",
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
    /// Status faults by code, index `code - 100` for codes 100..=599.
    status: Box<[AtomicU64]>,
    /// The upstream's answers by code, indexed as `status`.
    upstream: Box<[AtomicU64]>,
    /// gRPC faults by code.
    grpc: [AtomicU64; GRPC_CODES],
    faults: [AtomicU64; FaultKind::ALL.len()],
    notes: [AtomicU64; Note::ALL.len()],
}

impl Default for OutcomeCounters {
    fn default() -> Self {
        OutcomeCounters {
            fixed: Default::default(),
            status: CODES.map(|_| AtomicU64::new(0)).collect(),
            upstream: CODES.map(|_| AtomicU64::new(0)).collect(),
            grpc: Default::default(),
            faults: Default::default(),
            notes: Default::default(),
        }
    }
}

impl OutcomeCounters {
    pub(crate) fn add(&self, outcome: Disposition) {
        let counter = match outcome {
            Disposition::Status(code) => CODES
                .contains(&code)
                .then(|| &self.status[usize::from(code - CODES.start())]),
            Disposition::Upstream(code) => CODES
                .contains(&code)
                .then(|| &self.upstream[usize::from(code - CODES.start())]),
            Disposition::Grpc(code) => self.grpc.get(usize::from(code)),
            other => other.fixed_index().map(|i| &self.fixed[i]),
        };
        if let Some(counter) = counter {
            counter.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(crate) fn add_fault(&self, kind: FaultKind) {
        self.faults[kind as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn add_note(&self, note: Note) {
        self.notes[note as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Every counter's current value.
    pub(super) fn load(&self) -> Counts {
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Counts {
            fixed: self.fixed.iter().map(load).collect(),
            status: self.status.iter().map(load).collect(),
            upstream: self.upstream.iter().map(load).collect(),
            grpc: self.grpc.iter().map(load).collect(),
            faults: self.faults.iter().map(load).collect(),
            notes: self.notes.iter().map(load).collect(),
        }
    }
}

/// A copy of [`OutcomeCounters`], taken at a reset: the ledger reports the outcome
/// counters minus this baseline (and minus the stragglers'), while the metrics report
/// the counters themselves (Prometheus counters only go up). One set of atomics serves
/// both. The ledger's faults are counted in its tables instead, under the lock their
/// phases take anyway, which is what keeps a straggler's out.
#[derive(Debug, Default)]
pub(super) struct Counts {
    fixed: Vec<u64>,
    status: Vec<u64>,
    upstream: Vec<u64>,
    grpc: Vec<u64>,
    faults: Vec<u64>,
    notes: Vec<u64>,
}

impl Counts {
    pub(super) fn since(&self, baseline: &Counts) -> Counts {
        let minus = |now: &[u64], then: &[u64]| -> Vec<u64> {
            now.iter()
                .enumerate()
                .map(|(i, n)| n.saturating_sub(then.get(i).copied().unwrap_or(0)))
                .collect()
        };
        Counts {
            fixed: minus(&self.fixed, &baseline.fixed),
            status: minus(&self.status, &baseline.status),
            upstream: minus(&self.upstream, &baseline.upstream),
            grpc: minus(&self.grpc, &baseline.grpc),
            faults: minus(&self.faults, &baseline.faults),
            notes: minus(&self.notes, &baseline.notes),
        }
    }

    /// How many requests were noted `note`.
    pub(super) fn noted(&self, note: Note) -> u64 {
        self.notes.get(note as usize).copied().unwrap_or(0)
    }

    pub(super) fn outcomes(&self) -> impl Iterator<Item = (Disposition, u64)> + '_ {
        FIXED_OUTCOMES
            .iter()
            .copied()
            .zip(self.fixed.iter().copied())
            .chain(
                CODES
                    .map(Disposition::Status)
                    .zip(self.status.iter().copied()),
            )
            .chain(
                CODES
                    .map(Disposition::Upstream)
                    .zip(self.upstream.iter().copied()),
            )
            .chain(
                (0..GRPC_CODES as u8)
                    .map(Disposition::Grpc)
                    .zip(self.grpc.iter().copied()),
            )
            .filter(|(_, n)| *n > 0)
    }
}

#[cfg(feature = "server")]
/// Non-zero outcome counts, and every fault kind's count, since the process started.
pub(crate) type LifetimeCounts = (Vec<(Disposition, u64)>, Vec<(FaultKind, u64)>);

impl Ledger {
    /// How a request ended, in the generation in force.
    pub fn record_outcome(&self, outcome: Disposition) {
        self.outcome(None, outcome);
    }

    /// How a request that arrived in `epoch` ended. After a reset since, it is a
    /// straggler: in the metrics, not in the ledger.
    pub fn record_outcome_in(&self, epoch: Epoch, outcome: Disposition) {
        self.outcome(Some(epoch), outcome);
    }

    fn outcome(&self, epoch: Option<Epoch>, outcome: Disposition) {
        // Under the thread's queue, which a reset holds while it takes its baselines.
        let queue = self.pending.mine();
        self.counters.add(outcome);
        if epoch.is_some_and(|e| e.0 != queue.epoch) {
            self.stragglers.add(outcome);
        }
    }

    /// A note of a request that arrived in `epoch`: after a reset since, a straggler's,
    /// left out of the ledger as its outcome is.
    pub fn record_note_in(&self, epoch: Epoch, note: Note) {
        let queue = self.pending.mine();
        self.counters.add_note(note);
        if epoch.0 != queue.epoch {
            self.stragglers.add_note(note);
        }
    }

    /// A fault fired (a delay is recorded here and its request's outcome separately),
    /// in the generation in force.
    pub fn record_fault(&self, kind: FaultKind, phase: &str) {
        self.fault(None, kind, phase);
    }

    /// A fault fired for a request that arrived in `epoch`: not in the ledger after a
    /// reset since.
    pub fn record_fault_in(&self, epoch: Epoch, kind: FaultKind, phase: &str) {
        self.fault(Some(epoch), kind, phase);
    }

    fn fault(&self, epoch: Option<Epoch>, kind: FaultKind, phase: &str) {
        self.counters.add_fault(kind);
        // Phases are none of the queued arrivals' business.
        let mut inner = self.lock_tables();
        if epoch.is_some_and(|e| e.0 != inner.epoch) {
            return;
        }
        inner.faults[kind as usize] += 1;
        if let Some(count) = inner.by_phase.get_mut(phase) {
            *count += 1;
        } else {
            inner.by_phase.insert(phase.to_string(), 1);
        }
    }

    #[cfg(feature = "server")]
    /// Requests since the process started.
    pub(crate) fn lifetime_requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    #[cfg(feature = "server")]
    /// Disposition and fault counts since the process started.
    pub(crate) fn lifetime_counts(&self) -> LifetimeCounts {
        let counts = self.counters.load();
        let faults = FaultKind::ALL
            .iter()
            .copied()
            .zip(counts.faults.iter().copied())
            .collect();
        (counts.outcomes().collect(), faults)
    }
}
