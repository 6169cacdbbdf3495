//! What a tier answers upstream: the next hop's answer passed on, why it gave up, or a
//! fault of its own.

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use chaos_policy::{GiveUp, Outcome, Verdict};
use fault_server::script::FaultResponse;

use super::forward::Answer;
use super::{NO_RETRY, Ordering, Shared};

/// The answer upstream: what the next hop finally said, or why the tier gave up. A tier
/// that gave up when it could have retried (or heard "don't retry" from below) says
/// `x-chaos-no-retry: 1`; one that only forwards once passes on what it got.
pub(super) fn respond(shared: &Shared, verdict: Verdict, last: Option<Answer>) -> Response {
    let counts = &shared.counts;
    let below_said_stop = last.as_ref().is_some_and(|a| a.no_retry);
    let (reason, mark) = match verdict {
        Verdict::Succeeded { .. } => {
            counts.succeeded.fetch_add(1, Ordering::Relaxed);
            (None, false)
        }
        Verdict::GaveUp { reason, .. } => {
            counts.gave_up.fetch_add(1, Ordering::Relaxed);
            (
                Some(reason),
                says_no_retry(reason, shared.retries, below_said_stop),
            )
        }
    };
    let mut response = match last {
        Some(Answer {
            outcome: Outcome::Status(code),
            headers,
            body,
            ..
        }) => {
            let mut response = Response::new(Body::from(body));
            *response.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::BAD_GATEWAY);
            *response.headers_mut() = headers;
            response
        }
        Some(Answer { outcome, .. }) => problem(
            gave_up_status(timed_out(outcome)),
            &format!(
                "tier `{}` gave up: its last attempt ended in {outcome}",
                shared.name
            ),
        ),
        None => problem(
            gave_up_status(reason == Some(GiveUp::Deadline)),
            &format!(
                "tier `{}` sent nothing: {}",
                shared.name,
                reason.map_or("no attempt", GiveUp::name)
            ),
        ),
    };
    if mark {
        response
            .headers_mut()
            .insert(NO_RETRY, HeaderValue::from_static("1"));
    }
    if let Some(reason) = reason {
        response
            .headers_mut()
            .insert("x-chaos-gave-up", HeaderValue::from_static(reason.name()));
    }
    response
}

/// Whether a tier that gave up for `reason` tells its caller not to retry
/// (`x-chaos-no-retry`): when it could have retried itself (`retries`), or was told not
/// to by the hop below (`below_said_stop`). The one rule the live tier and the
/// simulator's share.
pub(crate) fn says_no_retry(reason: GiveUp, retries: bool, below_said_stop: bool) -> bool {
    match reason {
        GiveUp::MaxAttempts => retries || below_said_stop,
        GiveUp::Permanent => below_said_stop,
        GiveUp::BudgetExhausted
        | GiveUp::BreakerOpen
        | GiveUp::NonIdempotent
        | GiveUp::Deadline
        | GiveUp::NoRetry => true,
    }
}

/// Whether a last attempt that ended this way ran out of time (the answer is then 504).
pub(crate) fn timed_out(outcome: Outcome) -> bool {
    matches!(outcome, Outcome::AttemptTimeout | Outcome::ConnectTimeout)
}

/// A gateway's answer when it got none it could pass on: 504 when time ran out.
pub(crate) fn gave_up_status(timed_out: bool) -> StatusCode {
    if timed_out {
        StatusCode::GATEWAY_TIMEOUT
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    }
}

/// A status fault of the tier's own, as the fault-server writes one.
pub(super) fn injected(tier: &str, phase: &str, fault: &FaultResponse) -> Response {
    let status = StatusCode::from_u16(fault.status).unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
    let body = fault.body.clone().unwrap_or_else(|| {
        serde_json::json!({ "error": "injected fault", "status": fault.status, "phase": phase, "tier": tier })
            .to_string()
    });
    let mut response = (status, [("content-type", "application/json")], body).into_response();
    let headers = response.headers_mut();
    if let Some(secs) = fault.retry_after_secs()
        && let Ok(v) = HeaderValue::from_str(&secs.to_string())
    {
        headers.insert("retry-after", v);
    }
    for (name, value) in &fault.headers {
        if let (Ok(name), Ok(value)) = (
            axum::http::HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            headers.insert(name, value);
        }
    }
    if let Ok(v) = HeaderValue::from_str(phase) {
        headers.insert("x-chaos-fault", v);
    }
    response
}

pub(super) fn problem(status: StatusCode, detail: &str) -> Response {
    let body = serde_json::json!({ "error": detail, "status": status.as_u16() }).to_string();
    (status, [("content-type", "application/json")], body).into_response()
}
