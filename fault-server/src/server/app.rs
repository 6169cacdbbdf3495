//! The application behind the faults when no upstream is given: the idempotency-key
//! check, the side effect (POST, PATCH) and the 200 that reports it; and the facts of a
//! request it needs. With `--upstream`, the user's service is the application instead
//! ([`super::upstream`]), and only [`execute`] (the ledger's side effect) is shared.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::request::Parts;
use axum::http::{HeaderValue, Method, StatusCode};
use axum::response::Response;

use super::answer::{ANONYMOUS_OK, OkBody, json, problem, replay};
use super::arrival::fingerprint;
use super::flight::InFlight;
use super::kept::{Kept, Text};
use super::state::Shared;
use crate::effect::{KEY_IN_FLIGHT_STATUS, KEY_MISMATCH_STATUS};
use crate::ledger::{
    Disposition, Epoch, Execution, KeyCheck, KeyClaim, RequestIdentity, StoredResponse,
};
use crate::wire::DUPLICATE;

/// Releases an idempotency key if its request is abandoned before executing.
struct ClaimGuard<'a> {
    shared: &'a Shared,
    claim: Option<KeyClaim>,
}

impl Drop for ClaimGuard<'_> {
    fn drop(&mut self) {
        if let Some(claim) = self.claim.take() {
            self.shared.ledger.release_key(claim);
        }
    }
}

/// What the application did with a request.
pub(super) enum AppResult {
    /// Executed (a side effect for POST/PATCH, nothing for the others).
    Done(Response),
    /// Answered from an idempotency key.
    Replayed(Arc<StoredResponse>),
    KeyInFlight,
    KeyMismatch,
}

/// What an `Idempotency-Key` already used answers instead of executing.
enum KeyAnswer {
    Replayed(Arc<StoredResponse>),
    InFlight,
    Mismatch,
}

impl From<KeyAnswer> for AppResult {
    fn from(answer: KeyAnswer) -> AppResult {
        match answer {
            KeyAnswer::Replayed(stored) => AppResult::Replayed(stored),
            KeyAnswer::InFlight => AppResult::KeyInFlight,
            KeyAnswer::Mismatch => AppResult::KeyMismatch,
        }
    }
}

/// The facts of one request the handler needs after its body is read.
pub(super) struct Facts {
    method: Method,
    pub(super) request_id: Option<Text>,
    pub(super) attempt: Option<u32>,
    policy: Option<Text>,
    key: Option<Text>,
    /// Identifies "the same request" for idempotency keys (computed only with a key).
    fingerprint: u64,
    /// A gRPC call: a scripted gRPC fault answers it with its code.
    pub(super) grpc: bool,
}

impl Facts {
    pub(super) fn new(parts: &Parts, body: &Bytes, kept: Kept) -> Facts {
        Facts {
            fingerprint: if kept.key.is_some() {
                fingerprint(&parts.method, &parts.uri, body)
            } else {
                0
            },
            method: parts.method.clone(),
            request_id: kept.request_id,
            attempt: kept.attempt,
            policy: kept.policy,
            key: kept.key,
            grpc: kept.grpc,
        }
    }

    fn identity(&self) -> RequestIdentity<'_> {
        RequestIdentity {
            request_id: self.request_id.as_deref(),
            policy: self.policy.as_deref(),
            attempt: self.attempt,
        }
    }

    pub(super) fn has_side_effect(&self) -> bool {
        crate::wire::has_side_effect(self.method.as_str())
    }
}

/// The response to what the application did, with its outcome.
pub(super) fn respond(done: AppResult, flight: &mut InFlight) -> Response {
    match done {
        AppResult::Done(response) => {
            flight.outcome(Disposition::Served);
            response
        }
        AppResult::Replayed(stored) => {
            flight.span(|span| {
                span.set("chaos.side_effect", "replayed");
                span.status(stored.status);
            });
            flight.outcome(Disposition::Replayed);
            replay(&stored)
        }
        AppResult::KeyInFlight => {
            flight.outcome(Disposition::KeyInFlight);
            problem(
                status(KEY_IN_FLIGHT_STATUS),
                "a request with this Idempotency-Key is still being processed",
            )
        }
        AppResult::KeyMismatch => {
            flight.outcome(Disposition::KeyMismatch);
            problem(
                status(KEY_MISMATCH_STATUS),
                "this Idempotency-Key was used with a different request",
            )
        }
    }
}

/// One of [`crate::effect`]'s statuses, which are valid ones.
fn status(code: u16) -> StatusCode {
    StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

/// The application: idempotency-key check, service time, side effect, response.
pub(super) async fn app(
    shared: &Shared,
    facts: &Facts,
    service_time: Duration,
    flight: &mut InFlight,
) -> AppResult {
    let guard = match claim_key(shared, facts, flight.epoch()) {
        Ok(guard) => guard,
        Err(answered) => return answered.into(),
    };
    if !service_time.is_zero() {
        tokio::time::sleep(service_time).await;
    }
    execute_and_answer(guard, facts, flight)
}

/// The application without a service time: all of it at once, nothing to wait for.
pub(super) fn app_now(shared: &Shared, facts: &Facts, flight: &mut InFlight) -> AppResult {
    match claim_key(shared, facts, flight.epoch()) {
        Ok(guard) => execute_and_answer(guard, facts, flight),
        Err(answered) => answered.into(),
    }
}

/// Checks a side effect's `Idempotency-Key`: a claim on a fresh key (released if the
/// request is abandoned before it executes), or the answer for a key already used.
fn claim_key<'a>(
    shared: &'a Shared,
    facts: &Facts,
    epoch: Epoch,
) -> Result<ClaimGuard<'a>, KeyAnswer> {
    let mut guard = ClaimGuard {
        shared,
        claim: None,
    };
    if facts.has_side_effect()
        && let Some(key) = &facts.key
    {
        match shared.ledger.begin_keyed_in(
            epoch,
            key,
            facts.fingerprint,
            facts.identity(),
            shared.ledger_now(),
        ) {
            KeyCheck::Fresh(claim) => guard.claim = Some(claim),
            KeyCheck::Replay(stored) => {
                shared
                    .metrics
                    .idempotent_replays
                    .fetch_add(1, Ordering::Relaxed);
                return Err(KeyAnswer::Replayed(stored));
            }
            KeyCheck::InFlight => return Err(KeyAnswer::InFlight),
            KeyCheck::Mismatch => return Err(KeyAnswer::Mismatch),
        }
    }
    Ok(guard)
}

/// Executes the side effect (POST, PATCH) and answers 200, completing the key's claim.
fn execute_and_answer(
    mut guard: ClaimGuard<'_>,
    facts: &Facts,
    flight: &mut InFlight,
) -> AppResult {
    let shared = guard.shared;
    let effect = if facts.has_side_effect() {
        execute(shared, facts, flight)
    } else {
        None
    };
    if effect.is_none() && facts.request_id.is_none() && facts.attempt.is_none() {
        return AppResult::Done(json(Body::from(ANONYMOUS_OK)));
    }
    let body = OkBody {
        ok: true,
        id: facts.request_id.as_deref(),
        attempt: facts.attempt,
        effect: effect.map(|e| e.number),
    }
    .to_json();
    if let Some(claim) = guard.claim.take() {
        shared.ledger.complete_key(
            claim,
            StoredResponse {
                status: 200,
                body: body.clone(),
            },
        );
    }
    let mut response = json(Body::from(body));
    if effect.is_some_and(|e| e.duplicate) {
        // Tells a tracing client that this logical request broke an invariant here.
        response
            .headers_mut()
            .insert(DUPLICATE, HeaderValue::from_static("1"));
    }
    AppResult::Done(response)
}

/// Executes the side effect (the built-in application's, or one the upstream answered);
/// the ledger's receipt, unless the request is a straggler (arrived before a reset
/// since), which only the metrics count. The span says which it was.
pub(super) fn execute(shared: &Shared, facts: &Facts, flight: &mut InFlight) -> Option<Execution> {
    let now = shared.ledger_now();
    let execution = shared
        .ledger
        .execute_in(flight.epoch(), facts.identity(), now);
    shared.metrics.side_effects.fetch_add(1, Ordering::Relaxed);
    if execution.is_some_and(|e| e.duplicate) {
        shared
            .metrics
            .duplicate_side_effects
            .fetch_add(1, Ordering::Relaxed);
    }
    if let Some(effect) = &execution {
        flight.span(|span| {
            span.set(
                "chaos.side_effect",
                if effect.duplicate { "duplicate" } else { "ran" },
            );
            span.set("chaos.side_effect.number", effect.number as i64);
            if effect.duplicate {
                // A side effect run twice: the trace users need, whatever the ratio.
                span.force();
            }
        });
    }
    execution
}
