//! The handler's path when the ledger judges a client: the body is read first, because a
//! request no header names is grouped by its method, path and body; the attempt is then
//! grouped into its logical request (`ledger::group`), and goes on as one the harness
//! sent, with that id and attempt number (so `attempts: [1, 2]` faults the first two
//! attempts of every call of any client); when it ends, the ledger is told how it was
//! answered and what wait the answer asked for.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::HeaderMap;
use axum::http::header::RETRY_AFTER;
use axum::response::Response;
use tokio::time::Instant;

use super::arrival::{decide, fingerprint, record_arrival};
use super::body::read_body;
use super::flight::InFlight;
use super::handler::{bad_body, proceed};
use super::kept::{Kept, Text};
use super::state::View;
use crate::ledger::group::{self, GroupedBy};
use crate::ledger::{Arriving, Grouped, Seen};
use crate::script::{Decision, FaultAction};
use crate::wire;

/// Reads the body, groups the attempt, then serves it as [`super::handler::handle`] would.
pub(super) async fn handle(
    view: Arc<View>,
    mut flight: InFlight,
    parts: axum::http::request::Parts,
    body: Body,
    mut kept: Kept,
    arrived: Instant,
) -> Response {
    let shared = &view.shared;
    let body = match read_body(body, shared.max_body).await {
        Ok(body) => body,
        Err(error) => {
            record_arrival(shared, &mut flight, &kept, &parts, arrived);
            return bad_body(&mut flight, &error);
        }
    };
    let header = shared.ledger.judged_by().and_then(|j| j.header.as_deref());
    let fingerprint = fingerprint(&parts.method, &parts.uri, &body);
    let claim = group::claim(&parts.headers, header, || fingerprint);
    let grouped = shared.ledger.group(
        Arriving {
            claim,
            fingerprint,
            stated_attempt: group::stated_attempt(&parts.headers),
            side_effect: crate::wire::has_side_effect(parts.method.as_str()),
            key: kept.key.as_deref(),
        },
        shared.ledger_time(arrived),
    );
    let mut answer = None;
    if let Some(grouped) = grouped {
        flight.span(|span| span.set("chaos.grouped_by", grouped.by.name()));
        if grouped.by != GroupedBy::RequestId {
            kept.request_id = Text::made(grouped.id.clone());
        }
        kept.attempt = Some(grouped.attempt);
        answer = Some(Answer {
            view: Arc::clone(&view),
            grouped,
            seen: Seen::Timeout,
            asked: None,
        });
    }
    record_arrival(shared, &mut flight, &kept, &parts, arrived);
    let now = arrived.saturating_duration_since(view.active.epoch);
    let arrival = flight.arrival();
    let (rng, decision) = decide(&view.active, shared, &parts, &kept, arrival, now);
    if let (Some(answer), Decision::Fault { fault, .. }) = (&mut answer, &decision) {
        // These never produce a response: the guard sees them end with their connection.
        match fault.action {
            FaultAction::Reset => answer.seen = Seen::Reset,
            FaultAction::Close => answer.seen = Seen::Close,
            FaultAction::Truncate(_) => answer.seen = Seen::Truncate,
            FaultAction::Refuse => answer.seen = Seen::Refused,
            FaultAction::Timeout { .. }
            | FaultAction::Status(_)
            | FaultAction::Delay(_)
            | FaultAction::GoAway => {}
        }
    }
    // In front of an upstream, the body read for the grouping streams on to it.
    let stream = (shared.upstream.is_some() && super::upstream::sees(&decision))
        .then(|| Body::from(body.clone()));
    let response = proceed(
        Arc::clone(&view),
        flight,
        parts,
        body,
        stream,
        kept,
        rng,
        decision,
    )
    .await;
    if let Some(answer) = &mut answer
        && !super::conn::refuses(&response)
    {
        answer.seen = Seen::Status(response.status().as_u16());
        answer.asked = asked_wait(response.headers());
    }
    response
}

/// The wait an answer asks for: `retry-after-ms` or `x-amz-retry-after` in milliseconds,
/// else `Retry-After` in seconds (an HTTP date is not read).
pub(super) fn asked_wait(headers: &HeaderMap) -> Option<Duration> {
    let text = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    wire::RETRY_AFTER_MS
        .iter()
        .find_map(|name| text(name).and_then(wire::retry_after_ms))
        .or_else(|| text(RETRY_AFTER.as_str()).and_then(wire::retry_after))
}

/// Tells the ledger how an attempt ended, when it ends: with a response, or with its
/// connection (a reset, a close, a held request the client gave up on).
struct Answer {
    view: Arc<View>,
    grouped: Grouped,
    seen: Seen,
    asked: Option<Duration>,
}

impl Drop for Answer {
    fn drop(&mut self) {
        let shared = &self.view.shared;
        shared
            .ledger
            .answered(&self.grouped, shared.ledger_now(), self.seen, self.asked);
    }
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn wait(pairs: &[(&'static str, &'static str)]) -> Option<Duration> {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.insert(*name, HeaderValue::from_static(value));
        }
        asked_wait(&headers)
    }

    #[test]
    fn every_form_of_the_wait_an_answer_asks_for_is_read() {
        assert_eq!(wait(&[("retry-after", "2")]), Some(Duration::from_secs(2)));
        assert_eq!(
            wait(&[("x-amz-retry-after", "1500")]),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(
            wait(&[("retry-after", "9"), ("retry-after-ms", "250")]),
            Some(Duration::from_millis(250)),
            "the precise form first"
        );
        assert_eq!(
            wait(&[("retry-after", "Wed, 21 Oct 2015 07:28:00 GMT")]),
            None
        );
        assert_eq!(wait(&[("retry-after", "-1")]), None);
        assert_eq!(wait(&[]), None);
    }
}
