//! Table tests and property tests of the script: `parse` (reading, validation and its
//! error messages), `select` (the decisions, their parameters and their draws). The
//! helpers and the reference plan here serve both.

mod parse;
mod select;

use std::time::Duration;

use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;

use super::*;
use crate::dist::Distribution;
use crate::seed::IdSeed;
use crate::wire;

/// The per-attempt seed of a request with no tier above it.
fn request_seed(seed: u64, request_id: &str, attempt: u32) -> u64 {
    IdSeed::new(seed, request_id).attempt(attempt)
}

/// A fresh RNG for one attempt, seeded as the server seeds it.
fn request_rng(seed: u64, request_id: &str, attempt: u32) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(request_seed(seed, request_id, attempt))
}

fn script(yaml: &str) -> Script {
    match Script::from_yaml_str(yaml) {
        Ok(script) => script,
        Err(error) => panic!("script should parse: {error}\n{yaml}"),
    }
}

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

fn facts<'a>(
    method: &'a str,
    path: &'a str,
    headers: &'a &'a [(&'a str, &'a str)],
) -> RequestFacts<'a> {
    RequestFacts {
        method,
        path,
        attempt: headers.header(wire::ATTEMPT).and_then(|a| a.parse().ok()),
        headers,
        sticky_seed: headers
            .header(wire::REQUEST_ID)
            .map(|id| request_seed(7, id, 0)),
        peer: None,
    }
}

/// What a decision looks like in a table: `None` for serve, or (phase index, fault kind).
fn decide(
    script: &Script,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    now: f64,
) -> Option<(usize, FaultKind)> {
    decide_at(script, method, path, headers, secs(now))
}

fn decide_at(
    script: &Script,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    now: Duration,
) -> Option<(usize, FaultKind)> {
    let mut rng = ChaCha8Rng::seed_from_u64(0);
    match script.select(&facts(method, path, &headers), now, &mut rng) {
        Decision::Serve => None,
        Decision::Fault { phase, fault } => Some((phase, fault.kind())),
    }
}

const PLAN: &str = r#"
name: outage
description: steady traffic, a 10 s full outage, then recovery
seed: 42
duration: 30s
target: embedded
load:
  rate: 200
  requests:
    - { name: read, method: GET, path: "/items/{n}", weight: 7 }
server:
  capacity: 300
  queue: 200
  service_time: 5ms
faults:
  - name: outage
    from: 10s
    until: 20s
    respond:
      - { status: 503, weight: 8, retry_after: 1s }
      - { fault: reset, weight: 1 }
      - { fault: timeout, weight: 1 }
  - name: lost-responses
    match: { method: POST }
    probability: 0.02
    respond:
      - { fault: reset, processed: true }
  - name: bad-input
    match: { path: /payments }
    probability: 0.05
    respond: [ { status: 400 } ]
policies:
  - name: naive
    max_attempts: 4
gates: [ amplification_within_budget ]
"#;
