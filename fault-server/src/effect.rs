//! What a fault the script chose does to one attempt, and what an idempotency key's check
//! answers: the decisions between the script's choice and the wire, made once for the live
//! handler (`server/handler.rs`, `server/app.rs`) and the harness's simulated server,
//! which only carry them out (bytes on a socket, or an event in virtual time).
//!
//! Pure: no IO, no clock. Why one home: the simulator promises to run the very code the
//! live run does; a rule written in both shells (how long a `timeout` holds, which faults
//! answer in front of the capacity model, which code a gRPC call gets, what the ledger
//! counts) drifts.

use std::sync::Arc;
use std::time::Duration;

use crate::ledger::{Disposition, KeyCheck};
use crate::script::{Fault, FaultAction, FaultResponse, GrpcStatus};

/// The default cap on how long a `timeout` fault holds a request: a minute, well above
/// the attempt timeouts clients use (AWS SDKs and gRPC default to seconds) and low enough
/// that hung requests cannot pile up for ever.
pub const DEFAULT_HANG_CAP: Duration = Duration::from_secs(60);

/// What a fault does to its attempt.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Served as usual, through the capacity model: the attempt holds its slot `extra`
    /// longer (a `delay` fault), and with `drain` its connection goes away behind the
    /// answer (a `goaway`: GOAWAY on HTTP/2, `connection: close` on HTTP/1.1).
    Serve {
        /// How much longer than its service time the attempt holds its slot.
        extra: Duration,
        /// The connection is drained after the answer.
        drain: bool,
    },
    /// Answered now, in front of the capacity model, as a load balancer or a proxy in
    /// front of the service would. With `processed`, the side effect runs first: the work
    /// is done, then the answer is lost or replaced.
    Answer {
        /// How the attempt ends.
        ending: Ending,
        /// The side effect runs before the ending.
        processed: bool,
    },
}

/// How an attempt the fault answers ends.
#[derive(Debug, Clone, PartialEq)]
pub enum Ending {
    /// Not processed: the stream refused (`REFUSED_STREAM`), on HTTP/1.1 the connection
    /// closed.
    Refuse,
    /// A status line: `response`, or to a gRPC call the gRPC status `grpc` as a
    /// Trailers-Only answer.
    Status {
        /// The response a client not speaking gRPC gets.
        response: Arc<FaultResponse>,
        /// The status a gRPC call gets instead, when the fault names one.
        grpc: Option<GrpcStatus>,
    },
    /// The connection reset (RST).
    Reset,
    /// The connection closed (FIN) with no answer.
    Close,
    /// The status line, headers and part of `response`'s body, then a reset.
    Truncate(Arc<FaultResponse>),
    /// Held without an answer this long, then the connection closed.
    Hold(Duration),
}

impl Ending {
    /// What the ledger counts the attempt as.
    pub fn disposition(&self) -> Disposition {
        match self {
            Ending::Refuse => Disposition::Refused,
            Ending::Status {
                grpc: Some(grpc), ..
            } => Disposition::Grpc(grpc.code),
            Ending::Status { response, .. } => Disposition::Status(response.status),
            Ending::Reset => Disposition::Reset,
            Ending::Close => Disposition::Close,
            Ending::Truncate(_) => Disposition::Truncate,
            Ending::Hold(_) => Disposition::Timeout,
        }
    }
}

/// What `fault` does to an attempt. `hang_cap` bounds how long a `timeout` holds;
/// `grpc_answer` says the attempt is a gRPC call whose answer this server writes (not an
/// upstream's), so a gRPC fault answers with its code.
pub fn effect(fault: &Fault, hang_cap: Duration, grpc_answer: bool) -> Effect {
    let ending = match &fault.action {
        FaultAction::Delay(extra) => {
            return Effect::Serve {
                extra: *extra,
                drain: false,
            };
        }
        FaultAction::GoAway => {
            return Effect::Serve {
                extra: Duration::ZERO,
                drain: true,
            };
        }
        FaultAction::Refuse => Ending::Refuse,
        FaultAction::Status(response) => Ending::Status {
            response: Arc::clone(response),
            grpc: response.grpc.filter(|_| grpc_answer),
        },
        FaultAction::Reset => Ending::Reset,
        FaultAction::Close => Ending::Close,
        FaultAction::Truncate(response) => Ending::Truncate(Arc::clone(response)),
        FaultAction::Timeout { hold } => Ending::Hold(hold.map_or(hang_cap, |h| h.min(hang_cap))),
    };
    Effect::Answer {
        // A refused stream was not processed, whatever else the fault says (a script
        // that says both is refused when it is loaded).
        processed: fault.processed && ending != Ending::Refuse,
        ending,
    }
}

/// The answer to a request whose `Idempotency-Key` another request is executing now.
pub const KEY_IN_FLIGHT_STATUS: u16 = 409;
/// The answer to a request whose `Idempotency-Key` was used for another request.
pub const KEY_MISMATCH_STATUS: u16 = 422;

/// What an idempotency key's check answers at once, if anything, and how the ledger
/// counts it: a replay the stored status, a key still executing 409, a key used for
/// another request 422. `None`: the request goes on to execute.
pub fn key_answer(check: &KeyCheck) -> Option<(Disposition, u16)> {
    match check {
        KeyCheck::Fresh(_) => None,
        KeyCheck::Replay(stored) => Some((Disposition::Replayed, stored.status)),
        KeyCheck::InFlight => Some((Disposition::KeyInFlight, KEY_IN_FLIGHT_STATUS)),
        KeyCheck::Mismatch => Some((Disposition::KeyMismatch, KEY_MISMATCH_STATUS)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::StoredResponse;
    use crate::script::Pushback;

    fn fault(action: FaultAction, processed: bool) -> Fault {
        Fault { action, processed }
    }

    fn response(status: u16, grpc: Option<GrpcStatus>) -> Arc<FaultResponse> {
        Arc::new(FaultResponse {
            status,
            retry_after: None,
            body: None,
            headers: Vec::new(),
            grpc,
        })
    }

    const CAP: Duration = Duration::from_secs(30);

    #[test]
    fn a_delay_and_a_goaway_are_served() {
        let delay = fault(FaultAction::Delay(Duration::from_millis(40)), false);
        assert_eq!(
            effect(&delay, CAP, false),
            Effect::Serve {
                extra: Duration::from_millis(40),
                drain: false
            }
        );
        assert_eq!(
            effect(&fault(FaultAction::GoAway, false), CAP, true),
            Effect::Serve {
                extra: Duration::ZERO,
                drain: true
            }
        );
    }

    #[test]
    fn a_timeout_holds_no_longer_than_the_cap() {
        let hold = |hold| match effect(&fault(FaultAction::Timeout { hold }, false), CAP, false) {
            Effect::Answer {
                ending: Ending::Hold(d),
                ..
            } => d,
            other => panic!("a timeout holds, not {other:?}"),
        };
        assert_eq!(hold(None), CAP);
        assert_eq!(hold(Some(Duration::from_secs(2))), Duration::from_secs(2));
        assert_eq!(hold(Some(Duration::from_secs(90))), CAP);
    }

    #[test]
    fn a_grpc_fault_answers_its_code_only_to_a_grpc_call_the_server_answers() {
        let unavailable = GrpcStatus {
            code: 14,
            pushback: Some(Pushback::Stop),
        };
        let status = fault(FaultAction::Status(response(503, Some(unavailable))), false);
        let Effect::Answer { ending, .. } = effect(&status, CAP, true) else {
            panic!("a status fault answers");
        };
        assert_eq!(ending.disposition(), Disposition::Grpc(14));
        let Effect::Answer { ending, .. } = effect(&status, CAP, false) else {
            panic!("a status fault answers");
        };
        assert_eq!(ending.disposition(), Disposition::Status(503));
    }

    #[test]
    fn each_ending_is_counted_as_its_kind_and_a_refusal_runs_nothing() {
        let cases = [
            (FaultAction::Reset, Disposition::Reset),
            (FaultAction::Close, Disposition::Close),
            (
                FaultAction::Truncate(response(200, None)),
                Disposition::Truncate,
            ),
            (FaultAction::Timeout { hold: None }, Disposition::Timeout),
        ];
        for (action, counted) in cases {
            let Effect::Answer { ending, processed } = effect(&fault(action, true), CAP, false)
            else {
                panic!("answered");
            };
            assert_eq!(ending.disposition(), counted);
            assert!(processed);
        }
        let Effect::Answer { ending, processed } =
            effect(&fault(FaultAction::Refuse, true), CAP, false)
        else {
            panic!("answered");
        };
        assert_eq!(ending.disposition(), Disposition::Refused);
        assert!(!processed, "a refused stream was never processed");
    }

    #[test]
    fn a_key_check_answers_a_replay_a_key_in_flight_and_a_mismatch() {
        let stored = Arc::new(StoredResponse {
            status: 201,
            body: String::new(),
        });
        assert_eq!(
            key_answer(&KeyCheck::Replay(stored)),
            Some((Disposition::Replayed, 201))
        );
        assert_eq!(
            key_answer(&KeyCheck::InFlight),
            Some((Disposition::KeyInFlight, 409))
        );
        assert_eq!(
            key_answer(&KeyCheck::Mismatch),
            Some((Disposition::KeyMismatch, 422))
        );
    }
}
