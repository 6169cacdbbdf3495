//! What happens as a request arrives, on either path of the handler (the hot one and the
//! judged one): its count in the ledger and the script's decision.

use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::body::Bytes;
use axum::http::Method;
use axum::http::request::Parts;
use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;
use tokio::time::Instant;

use super::conn::Peer;
use super::flight::InFlight;
use super::handler::text;
use super::kept::Kept;
use super::state::{Active, Shared};
use crate::ledger::{PeerArrival, RequestIdentity, Stated};
use crate::script::{Decision, RequestFacts, Script};
use crate::wire::{Arrival, DrawSeeds, UPSTREAM_ATTEMPTS};

// Made once: a lookup by `&str` parses and checks the name each time.
const UPSTREAM_ATTEMPTS_NAME: axum::http::HeaderName =
    axum::http::HeaderName::from_static(UPSTREAM_ATTEMPTS);

/// Counts a request's arrival in the ledger (and at its peer, with how many times its
/// stated attempt arrived before) and names it on its span.
pub(super) fn record_arrival(
    shared: &Shared,
    flight: &mut InFlight,
    kept: &Kept,
    parts: &Parts,
    at: Instant,
) {
    flight.span(|span| {
        if let Some(id) = &kept.request_id {
            span.set("chaos.request_id", id.to_string());
        }
        if let Some(attempt) = kept.attempt {
            span.set("chaos.attempt", i64::from(attempt));
        }
        if let Some(policy) = &kept.policy {
            span.set("chaos.policy", policy.to_string());
        }
    });
    let now = shared.ledger_time(at);
    let epoch = shared.ledger.record_request(
        RequestIdentity {
            request_id: kept.request_id.as_deref(),
            policy: kept.policy.as_deref(),
            attempt: kept.attempt,
        },
        now,
    );
    flight.arrived(epoch);
    let peer = parts.extensions.get::<Peer>().map(|p| p.0);
    let stated = kept.request_id.as_deref().map(|id| Stated {
        request_id: id,
        attempt: kept.attempt,
        upstream: text(&parts.headers, &UPSTREAM_ATTEMPTS_NAME),
    });
    let arrival = PeerArrival {
        peer,
        method: parts.method.as_str(),
        stated,
    };
    flight.at_peer(peer, shared.ledger.arrive_at(epoch, arrival, now));
}

/// The script's decision for a request, and the RNG its service time draws from: seeded
/// from (seed, request id, attempt, the chain above), or from the seed and a counter for a
/// request without an id; mixed with where and how often it arrived (`arrival`).
pub(super) fn decide(
    active: &Active,
    shared: &Shared,
    parts: &Parts,
    kept: &Kept,
    arrival: Arrival,
    now: Duration,
) -> (Option<ChaCha8Rng>, Decision) {
    let headers = &parts.headers;
    let script = &active.script;
    let needs_rng = script.phase_count() > 0 || has_service_time(script);
    let seeds = needs_rng.then(|| {
        DrawSeeds::new(
            active.seed,
            kept.request_id.as_deref(),
            kept.attempt,
            text(headers, &UPSTREAM_ATTEMPTS_NAME),
            || shared.anonymous.fetch_add(1, Ordering::Relaxed),
        )
        .at(arrival)
    });
    let mut rng = seeds.map(|s| ChaCha8Rng::seed_from_u64(s.attempt));
    let decision = match rng.as_mut() {
        Some(rng) if script.phase_count() > 0 => script.select(
            &RequestFacts {
                method: parts.method.as_str(),
                path: parts.uri.path(),
                attempt: kept.attempt,
                headers,
                sticky_seed: seeds.and_then(|s| s.sticky),
                peer: arrival.peer,
            },
            now,
            rng,
        ),
        _ => Decision::Serve,
    };

    (rng, decision)
}

/// "The same request" for idempotency keys ([`crate::wire::fingerprint`]).
pub(super) fn fingerprint(method: &Method, uri: &axum::http::Uri, body: &Bytes) -> u64 {
    crate::wire::fingerprint(
        method.as_str(),
        uri.path_and_query().map_or("/", |p| p.as_str()),
        body,
    )
}

/// Whether the script's server takes time to serve a request (drawn per request).
pub(super) fn has_service_time(script: &Script) -> bool {
    script.capacity().is_some_and(|c| !c.service_time.is_zero())
}
