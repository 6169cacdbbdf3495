//! A request in flight: counted while it runs, ending with exactly one outcome in the
//! ledger (the one it arrived in: after a reset, none), and carrying its SERVER span (when
//! tracing is on) to that end.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::state::View;
use crate::ledger::{Disposition, Epoch, Resent};
use crate::otel::ServerSpan;
use crate::wire::Arrival;

/// Counts a request in flight and makes sure every request ends with exactly one
/// recorded outcome (`abandoned` when its future is dropped before one). With tracing on,
/// it carries the request's span and ends it when the request ends.
pub(super) struct InFlight {
    view: Arc<View>,
    done: bool,
    /// The ledger's generation the request arrived in ([`InFlight::arrived`]).
    epoch: Epoch,
    /// The peer it arrived at and its place among the arrivals of its stated attempt
    /// ([`InFlight::at_peer`]).
    peer: Option<u32>,
    resent: Resent,
    /// Boxed: the request's future carries an `InFlight`, and hyper moves that future
    /// into place for every request, traced or not.
    pub(super) span: Option<Box<ServerSpan>>,
}

impl InFlight {
    pub(super) fn new(view: &Arc<View>) -> InFlight {
        view.shared
            .metrics
            .in_flight
            .fetch_add(1, Ordering::Relaxed);
        InFlight {
            view: Arc::clone(view),
            done: false,
            epoch: view.shared.ledger.epoch(),
            peer: None,
            resent: Resent::default(),
            span: None,
        }
    }

    /// The request was counted in the ledger's generation `epoch`
    /// ([`crate::ledger::Ledger::record_request`]): what it records from now on goes there.
    pub(super) fn arrived(&mut self, epoch: Epoch) {
        self.epoch = epoch;
    }

    /// It arrived at `peer`, as the ledger's `resent` arrival of its stated attempt.
    pub(super) fn at_peer(&mut self, peer: Option<u32>, resent: Resent) {
        self.peer = peer;
        self.resent = resent;
    }

    /// What its fault draws mix in ([`crate::wire::DrawSeeds::at`]).
    pub(super) fn arrival(&self) -> Arrival {
        Arrival {
            peer: self.peer,
            repeat: self.resent.repeat,
        }
    }

    pub(super) fn epoch(&self) -> Epoch {
        self.epoch
    }

    pub(super) fn outcome(&mut self, outcome: Disposition) {
        if !self.done {
            self.done = true;
            let ledger = &self.view.shared.ledger;
            ledger.record_outcome_in(self.epoch, outcome);
            ledger.resend_answered(self.epoch, &self.resent, outcome);
            if let Some(span) = &mut self.span {
                annotate(span, outcome);
            }
        }
    }

    /// Adds to the span, when there is one.
    pub(super) fn span(&mut self, note: impl FnOnce(&mut ServerSpan)) {
        if let Some(span) = &mut self.span {
            note(span);
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.outcome(Disposition::Abandoned);
        if let (Some(tracing), Some(span)) = (&self.view.shared.tracing, self.span.take()) {
            tracing.end(*span);
        }
        self.view
            .shared
            .metrics
            .in_flight
            .fetch_sub(1, Ordering::Relaxed);
    }
}

/// What the outcome says on the span: the status, or why there was none.
fn annotate(span: &mut ServerSpan, outcome: Disposition) {
    match outcome {
        Disposition::Served => span.status(200),
        Disposition::Status(status) | Disposition::Upstream(status) => span.status(status),
        Disposition::UpstreamUnreachable | Disposition::UpstreamFailed => span.status(502),
        Disposition::UpstreamTimeout => span.status(504),
        // A Trailers-Only answer is an HTTP 200; its gRPC status is the RPC conventions'.
        Disposition::Grpc(code) => {
            span.status(200);
            span.set("rpc.grpc.status_code", i64::from(code));
        }
        Disposition::KeyInFlight => span.status(409),
        Disposition::KeyMismatch => span.status(422),
        Disposition::Reset => span.error("reset"),
        Disposition::Close => span.error("closed"),
        Disposition::Truncate => span.error("truncated"),
        Disposition::Timeout => span.error("timeout"),
        Disposition::Refused => span.error("refused_stream"),
        Disposition::Abandoned => span.error("abandoned"),
        // The status is set where it is known.
        Disposition::Replayed
        | Disposition::Rejected
        | Disposition::BadHeader
        | Disposition::BadRequest
        | Disposition::LoopDetected => {}
    }
    span.set("chaos.server.outcome", outcome.fixed_label());
}
