//! What a tier answers upstream, as HTTP: the next hop's answer passed on, why it gave
//! up (the hop core's [`Upward`]), or a fault of its own.

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use chaos_policy::GiveUp;
use fault_server::script::FaultResponse;
use fault_server::wire::{FAULT, GAVE_UP, NO_RETRY, RETRY_ALLOWANCE_LEFT};

use super::forward::Forwarded;
use crate::hop::Upward;

/// The hop core's answer upstream as HTTP: the next hop's last status passed on with its
/// headers and body, or a problem saying why the tier gave up, marked
/// `x-chaos-no-retry` and `x-chaos-gave-up` as the core decided.
pub(super) fn respond(tier: &str, up: Upward, last: Option<Forwarded>) -> Response {
    let status = StatusCode::from_u16(up.status).unwrap_or(StatusCode::BAD_GATEWAY);
    let mut response = match (last, up.last) {
        (Some(Forwarded { headers, body, .. }), _) if up.passes_last_status() => {
            let mut response = Response::new(Body::from(body));
            *response.status_mut() = status;
            *response.headers_mut() = headers;
            response
        }
        (_, Some(outcome)) => problem(
            status,
            &format!("tier `{tier}` gave up: its last attempt ended in {outcome}"),
        ),
        (_, None) => problem(
            status,
            &format!(
                "tier `{tier}` sent nothing: {}",
                up.gave_up.map_or("no attempt", GiveUp::name)
            ),
        ),
    };
    if up.no_retry {
        response
            .headers_mut()
            .insert(NO_RETRY, HeaderValue::from_static("1"));
    }
    if let Some(reason) = up.gave_up {
        response
            .headers_mut()
            .insert(GAVE_UP, HeaderValue::from_static(reason.name()));
    }
    say_allowance_left(&mut response, up.allowance_left);
    response
}

/// `x-chaos-retry-allowance-left` on an answer upstream, when the caller shares its
/// chain's budget.
pub(super) fn say_allowance_left(response: &mut Response, left: Option<u32>) {
    if let Some(left) = left {
        response
            .headers_mut()
            .insert(RETRY_ALLOWANCE_LEFT, HeaderValue::from(left));
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
        headers.insert(FAULT, v);
    }
    response
}

pub(super) fn problem(status: StatusCode, detail: &str) -> Response {
    let body = serde_json::json!({ "error": detail, "status": status.as_u16() }).to_string();
    (status, [("content-type", "application/json")], body).into_response()
}
