//! Table tests and property tests of script parsing, validation and selection.

use std::time::Duration;

use proptest::prelude::*;
use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;

use super::*;
use crate::seed::{request_rng, request_seed};

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
        attempt: headers
            .header("x-chaos-attempt")
            .and_then(|a| a.parse().ok()),
        headers,
        sticky_seed: headers
            .header("x-request-id")
            .map(|id| request_seed(7, id, 0)),
    }
}

/// What a decision looks like in a table: `None` for serve, or (phase index, fault tag).
fn decide(
    script: &Script,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    now: f64,
) -> Option<(usize, FaultTag)> {
    decide_at(script, method, path, headers, secs(now))
}

fn decide_at(
    script: &Script,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    now: Duration,
) -> Option<(usize, FaultTag)> {
    let mut rng = ChaCha8Rng::seed_from_u64(0);
    match script.select(&facts(method, path, &headers), now, &mut rng) {
        Decision::Serve => None,
        Decision::Fault { phase, fault } => Some((phase, fault.kind.tag())),
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

#[test]
fn a_whole_plan_reads_as_a_script() {
    let script = script(PLAN);
    assert_eq!(script.phase_count(), 3);
    assert_eq!(script.phase_name(0), Some("outage"));
    assert_eq!(script.phase_name(2), Some("bad-input"));
    assert_eq!(script.seed(), Some(42));
    assert_eq!(script.last_fault_end(), Some(secs(20.0)));
    let capacity = script.capacity().expect("server block");
    assert_eq!(capacity.capacity.map(|c| c.get()), Some(300));
    assert_eq!(capacity.queue, 200);
    assert_eq!(capacity.reject_status, 503);
    assert_eq!(
        capacity.service_time,
        Distribution::Fixed(Duration::from_millis(5))
    );
}

#[test]
fn empty_text_and_empty_script_serve_everything() {
    for text in ["", "  \n", "faults: []", "name: x\nload: { rate: 5 }"] {
        let script = script(text);
        assert!(script.is_empty(), "{text:?}");
        assert_eq!(decide(&script, "GET", "/", &[], 0.0), None);
        assert_eq!(script.last_fault_end(), None);
    }
    assert!(Script::empty().capacity().is_none());
}

#[test]
fn windows_are_half_open() {
    let s = script("faults: [ { from: 10s, until: 20s, respond: { status: 503 } } ]");
    let table = [
        (0.0, None),
        (9.999, None),
        (10.0, Some((0, FaultTag::Status))),
        (19.999, Some((0, FaultTag::Status))),
        (20.0, None),
        (25.0, None),
    ];
    for (now, expected) in table {
        assert_eq!(decide(&s, "GET", "/", &[], now), expected, "at {now}s");
    }
}

#[test]
fn open_ended_windows() {
    let s = script(
        "faults: [ { from: 5s, respond: { fault: close } }, { until: 2s, respond: { fault: reset } } ]",
    );
    assert_eq!(decide(&s, "GET", "/", &[], 0.0), Some((1, FaultTag::Reset)));
    assert_eq!(decide(&s, "GET", "/", &[], 3.0), None);
    assert_eq!(decide(&s, "GET", "/", &[], 5.0), Some((0, FaultTag::Close)));
    assert_eq!(decide(&s, "GET", "/", &[], 1e6), Some((0, FaultTag::Close)));
    assert_eq!(s.last_fault_end(), Some(secs(2.0)));
}

/// A table row: method, path, headers, expected decision.
type Row<'a> = (
    &'a str,
    &'a str,
    &'a [(&'a str, &'a str)],
    Option<(usize, FaultTag)>,
);

#[test]
fn first_matching_phase_wins() {
    let s = script(
        r#"
faults:
  - { name: posts, match: { method: POST }, respond: { status: 500 } }
  - { name: payments, match: { path: /payments }, respond: { fault: reset } }
  - { name: tenant, match: { header: { X-Tenant: "blue*" } }, respond: { fault: close } }
  - { name: retries, attempts: [2, 3], respond: { fault: truncate } }
  - { name: never, probability: 0, respond: { status: 418 } }
  - { name: rest, match: { method: [get, head], path: "/items/*/price" }, respond: { fault: timeout } }
"#,
    );
    let table: &[Row] = &[
        ("POST", "/payments", &[], Some((0, FaultTag::Status))),
        ("post", "/anything", &[], Some((0, FaultTag::Status))),
        ("GET", "/payments/7", &[], Some((1, FaultTag::Reset))),
        ("GET", "/paymentsX", &[], Some((1, FaultTag::Reset))),
        ("GET", "/pay", &[], None),
        (
            "GET",
            "/x",
            &[("x-tenant", "blue-2")],
            Some((2, FaultTag::Close)),
        ),
        (
            "GET",
            "/x",
            &[("X-TENANT", "blue")],
            Some((2, FaultTag::Close)),
        ),
        ("GET", "/x", &[("x-tenant", "green")], None),
        ("GET", "/x", &[("x-chaos-attempt", "1")], None),
        (
            "GET",
            "/x",
            &[("x-chaos-attempt", "2")],
            Some((3, FaultTag::Truncate)),
        ),
        (
            "GET",
            "/x",
            &[("x-chaos-attempt", "3")],
            Some((3, FaultTag::Truncate)),
        ),
        ("GET", "/x", &[("x-chaos-attempt", "4")], None),
        ("GET", "/x", &[("x-chaos-attempt", "two")], None),
        ("GET", "/items/7/price", &[], Some((5, FaultTag::Timeout))),
        ("HEAD", "/items/7/price", &[], Some((5, FaultTag::Timeout))),
        ("PUT", "/items/7/price", &[], None),
        ("GET", "/items/7", &[], None),
    ];
    for (method, path, headers, expected) in table {
        assert_eq!(
            decide(&s, method, path, headers, 0.0),
            *expected,
            "{method} {path} {headers:?}"
        );
    }
}

#[test]
fn a_phase_that_matches_but_does_not_fire_falls_through() {
    let s = script(
        "faults: [ { probability: 0, respond: { status: 500 } }, { respond: { status: 503 } } ]",
    );
    assert_eq!(
        decide(&s, "GET", "/", &[], 0.0),
        Some((1, FaultTag::Status))
    );
}

#[test]
fn resolved_faults_carry_their_parameters() {
    let s = script(
        r#"
faults:
  - match: { path: /a }
    respond: { status: 429, retry_after: 1500ms, body: slow down, headers: { X-Why: drill } }
  - match: { path: /b }
    respond: { fault: delay, delay: 300ms }
  - match: { path: /c }
    respond: { fault: timeout, hold: 2s, processed: true }
  - match: { path: /d }
    respond: { fault: truncate }
"#,
    );
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let fault = |path: &str, rng: &mut ChaCha8Rng| match s.select(
        &facts("GET", path, &&[][..]),
        Duration::ZERO,
        rng,
    ) {
        Decision::Fault { fault, .. } => fault,
        Decision::Serve => panic!("{path} should fault"),
    };
    let Fault {
        kind: FaultKind::Status(response),
        processed: false,
    } = fault("/a", &mut rng)
    else {
        panic!("status fault")
    };
    assert_eq!(response.status, 429);
    assert_eq!(response.retry_after_secs(), Some(2));
    assert_eq!(response.body.as_deref(), Some("slow down"));
    assert_eq!(
        response.headers,
        vec![("x-why".to_string(), "drill".to_string())]
    );
    assert_eq!(
        fault("/b", &mut rng).kind,
        FaultKind::Delay(Duration::from_millis(300))
    );
    assert_eq!(
        fault("/c", &mut rng),
        Fault {
            kind: FaultKind::Timeout {
                hold: Some(secs(2.0))
            },
            processed: true
        }
    );
    let FaultKind::Truncate(response) = fault("/d", &mut rng).kind else {
        panic!("truncate")
    };
    assert_eq!(response.status, 200);
}

#[test]
fn retry_after_rounds_up_to_whole_seconds() {
    let response = |ms: u64| FaultResponse {
        status: 503,
        retry_after: Some(Duration::from_millis(ms)),
        body: None,
        headers: Vec::new(),
    };
    assert_eq!(response(0).retry_after_secs(), Some(0));
    assert_eq!(response(1).retry_after_secs(), Some(1));
    assert_eq!(response(1000).retry_after_secs(), Some(1));
    assert_eq!(response(1001).retry_after_secs(), Some(2));
}

/// Parse errors: (script, expected line, needle in the message).
#[test]
fn serde_errors_carry_line_column_and_field() {
    let cases: &[(&str, usize, &str)] = &[
        (
            "faults:\n  - name: a\n    respnd: { status: 503 }\n",
            3,
            "unknown field `respnd`",
        ),
        (
            "faults:\n  - name: a\n    probability: 1.5\n    respond: { status: 503 }\n",
            3,
            "probability must be within [0, 1], got 1.5",
        ),
        (
            "faults:\n  - respond: { status: 503, wieght: 2 }\n",
            2,
            "unknown field `wieght`",
        ),
        (
            "faults:\n  - respond: { status: 99 }\n",
            2,
            "status must be within 200..=599",
        ),
        (
            "faults:\n  - respond: { status: 503, weight: -1 }\n",
            2,
            "weight must be a finite number >= 0",
        ),
        (
            "faults:\n  - attempts: [0]\n    respond: { status: 503 }\n",
            2,
            "attempt numbers start at 1",
        ),
        (
            "faults:\n  - from: 10\n    respond: { status: 503 }\n",
            2,
            "no unit",
        ),
        (
            "faults:\n  - respond: { fault: explode }\n",
            2,
            "unknown variant `explode`",
        ),
        (
            "faults:\n  - match: { path: payments }\n    respond: { status: 503 }\n",
            2,
            "must start with /",
        ),
        (
            "faults:\n  - match: { verb: GET }\n    respond: { status: 503 }\n",
            2,
            "unknown field `verb`",
        ),
        (
            "faults:\n  - respond:\n      - { fault: delay, delay: { uniform: [2s, 1s] } }\n",
            3,
            "above the high bound",
        ),
        ("server:\n  capacity: 0\n", 2, "nonzero"),
        (
            "server:\n  capacity: 5\n  qeue: 5\n",
            3,
            "unknown field `qeue`",
        ),
        ("faults:\n\t- name: a\n", 2, "cannot start any token"),
        ("faults:\n  - name: a\n", 2, "missing field `respond`"),
    ];
    for (text, line, needle) in cases {
        match Script::from_yaml_str(text) {
            Err(ScriptError::Parse {
                message,
                line: Some(got_line),
                column: Some(_),
            }) => {
                assert!(message.contains(needle), "{text:?}: {message}");
                assert_eq!(got_line, *line, "{text:?}: {message}");
                assert!(message.contains(&format!("line {line}")), "{message}");
            }
            other => panic!("{text:?}: expected a located parse error, got {other:?}"),
        }
    }
}

#[test]
fn the_field_path_is_in_the_message() {
    let error = Script::from_yaml_str(
        "faults:\n  - name: a\n    probability: 1.5\n    respond: { status: 503 }\n",
    )
    .expect_err("invalid");
    assert!(
        error.to_string().starts_with("faults[0].probability: "),
        "{error}"
    );
}

/// Cross-field errors: (script, phase, field, needle).
#[test]
fn cross_field_errors_name_the_phase_and_the_field() {
    let cases: &[(&str, &str, &str, &str)] = &[
        (
            "faults: [ { name: outage, from: 20s, until: 10s, respond: { status: 503 } } ]",
            "faults[0] \"outage\"",
            "until",
            "must be after `from`",
        ),
        (
            "faults: [ { respond: { status: 503 } }, { from: 5s, until: 5s, respond: { status: 503 } } ]",
            "faults[1]",
            "until",
            "would be empty",
        ),
        (
            "faults: [ { name: x, respond: { fault: reset, retry_after: 1s } } ]",
            "faults[0] \"x\"",
            "respond[0].retry_after",
            "does not apply to a reset fault",
        ),
        (
            "faults: [ { name: x, respond: [ { status: 503 }, { weight: 2 } ] } ]",
            "faults[0] \"x\"",
            "respond[1]",
            "needs `status: CODE` or `fault: KIND`",
        ),
        (
            "faults: [ { respond: { fault: delay } } ]",
            "faults[0]",
            "respond[0].delay",
            "is required",
        ),
        (
            "faults: [ { respond: { fault: status } } ]",
            "faults[0]",
            "respond[0].status",
            "is required",
        ),
        (
            "faults: [ { respond: { fault: delay, delay: 1s, processed: true } } ]",
            "faults[0]",
            "respond[0].processed",
            "does not apply to a delay",
        ),
        (
            "faults: [ { respond: { fault: close, delay: 1s } } ]",
            "faults[0]",
            "respond[0].delay",
            "does not apply to a close fault",
        ),
        (
            "faults: [ { respond: { fault: reset, hold: 1s } } ]",
            "faults[0]",
            "respond[0].hold",
            "only to timeout",
        ),
        (
            "faults: [ { respond: [ { status: 503, weight: 0 }, { fault: reset, weight: 0 } ] } ]",
            "faults[0]",
            "respond[].weight",
            "sum to zero",
        ),
        (
            "faults: [ { respond: [] } ]",
            "faults[0]",
            "respond",
            "is empty",
        ),
        (
            "faults: [ { attempts: [], respond: { status: 503 } } ]",
            "faults[0]",
            "attempts",
            "empty list",
        ),
        (
            "faults: [ { name: a, respond: { status: 503 } }, { name: a, respond: { status: 500 } } ]",
            "faults[1] \"a\"",
            "name",
            "already used by faults[0]",
        ),
        (
            "server: { queue: 5 }",
            "server",
            "queue",
            "needs `capacity`",
        ),
    ];
    for (text, phase, field, needle) in cases {
        match Script::from_yaml_str(text) {
            Err(ScriptError::Invalid {
                phase: got_phase,
                field: got_field,
                message,
            }) => {
                assert_eq!(&got_phase, phase, "{text}");
                assert_eq!(&got_field, field, "{text}");
                assert!(message.contains(needle), "{text}: {message}");
            }
            other => panic!("{text}: expected an invalid-script error, got {other:?}"),
        }
    }
}

#[test]
fn json_is_accepted_too() {
    let s = script(r#"{"faults": [{"name": "j", "respond": {"status": 502}}]}"#);
    assert_eq!(
        decide(&s, "GET", "/", &[], 0.0),
        Some((0, FaultTag::Status))
    );
}

#[test]
fn specs_round_trip_through_yaml() {
    let original = script(PLAN);
    let text = serde_yaml::to_string(original.spec()).expect("serialises");
    let again = script(&text);
    assert_eq!(original, again);
}

#[test]
fn the_decisions_of_a_seed_are_pinned() {
    // Seed 42, attempt 1 of req-0 … req-11, against probability 0.5 and weights 3:1:
    // a change to the seeding, the uniform draw or the weighted pick shows up here.
    let s = probability_script(0.5);
    let decisions: Vec<Option<FaultTag>> = (0..12)
        .map(|i| {
            let mut rng = request_rng(42, &format!("req-{i}"), 1);
            match s.select(&facts("GET", "/", &&[][..]), Duration::ZERO, &mut rng) {
                Decision::Serve => None,
                Decision::Fault { fault, .. } => Some(fault.kind.tag()),
            }
        })
        .collect();
    let (status, reset) = (Some(FaultTag::Status), Some(FaultTag::Reset));
    assert_eq!(
        decisions,
        [
            None, status, status, None, status, status, status, status, status, None, reset, reset
        ]
    );
}

fn probability_script(p: f64) -> Script {
    script(&format!(
        "faults: [ {{ probability: {p}, respond: [ {{ status: 503, weight: 3 }}, {{ fault: reset, weight: 1 }} ] }} ]"
    ))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Over n seeded requests the fault rate stays within 5 standard deviations of p,
    /// and the weights split the faults 3:1 within 5 standard deviations.
    #[test]
    fn probabilities_and_weights_hold_over_seeded_samples(p in 0.0f64..=1.0, seed in any::<u64>()) {
        let s = probability_script(p);
        let n = 4000u32;
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let (mut faults, mut statuses) = (0u32, 0u32);
        for _ in 0..n {
            if let Decision::Fault { fault, .. } = s.select(&facts("GET", "/", &&[][..]), Duration::ZERO, &mut rng) {
                faults += 1;
                if fault.kind.tag() == FaultTag::Status {
                    statuses += 1;
                }
            }
        }
        let n = f64::from(n);
        let sd = (n * p * (1.0 - p)).sqrt();
        prop_assert!((f64::from(faults) - n * p).abs() <= 5.0 * sd + 1.0, "p {p}: {faults} of {n}");
        if faults > 0 {
            let f = f64::from(faults);
            let sd = (f * 0.75 * 0.25).sqrt();
            prop_assert!((f64::from(statuses) - 0.75 * f).abs() <= 5.0 * sd + 1.0, "{statuses} of {faults}");
        }
    }

    /// The same seed gives the same decisions; the decision is a function of the inputs.
    #[test]
    fn same_seed_same_decisions(seed in any::<u64>(), times in prop::collection::vec(0.0f64..40.0, 1..50)) {
        let s = script(PLAN);
        let run = || {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            times
                .iter()
                .map(|t| s.select(&facts("POST", "/payments", &&[][..]), secs(*t), &mut rng))
                .collect::<Vec<_>>()
        };
        prop_assert_eq!(run(), run());
    }

    /// Whatever the time, a request outside every window and match is served, and one
    /// inside a certain phase is faulted by the first such phase.
    #[test]
    fn windows_are_half_open_at_any_bounds(from_ms in 0u64..100_000, len_ms in 1u64..100_000, t_ms in 0u64..250_000) {
        let s = script(&format!(
            "faults: [ {{ from: {from_ms}ms, until: {}ms, respond: {{ status: 503 }} }}, {{ respond: {{ fault: close }} }} ]",
            from_ms + len_ms
        ));
        let inside = t_ms >= from_ms && t_ms < from_ms + len_ms;
        let got = decide_at(&s, "GET", "/", &[], Duration::from_millis(t_ms));
        let expected = if inside { (0, FaultTag::Status) } else { (1, FaultTag::Close) };
        prop_assert_eq!(got, Some(expected));
    }
}

#[test]
fn a_sticky_phase_gives_every_attempt_of_a_request_the_same_answer() {
    let sticky = script(
        "faults: [ { sticky: true, probability: 0.5, respond: [ { status: 400 }, { status: 404 } ] } ]",
    );
    let loose =
        script("faults: [ { probability: 0.5, respond: [ { status: 400 }, { status: 404 } ] } ]");
    let answers = |s: &Script, id: &str| -> Vec<Option<u16>> {
        (1..=8u32)
            .map(|attempt| {
                let headers = [
                    ("x-request-id", id),
                    ("x-chaos-attempt", &*attempt.to_string()),
                ];
                let headers: &[(&str, &str)] = &headers;
                let facts = facts("GET", "/", &headers);
                // Each attempt has its own per-attempt stream, as on the live server.
                let mut rng = request_rng(7, id, attempt);
                match s.select(&facts, Duration::ZERO, &mut rng) {
                    Decision::Fault {
                        fault:
                            Fault {
                                kind: FaultKind::Status(r),
                                ..
                            },
                        ..
                    } => Some(r.status),
                    _ => None,
                }
            })
            .collect()
    };
    let mut faulted = 0;
    for i in 0..200 {
        let id = format!("req-{i}");
        let a = answers(&sticky, &id);
        assert!(a.windows(2).all(|w| w[0] == w[1]), "{id}: {a:?}");
        faulted += usize::from(a[0].is_some());
    }
    // About half the requests, not half the attempts.
    assert!((70..=130).contains(&faulted), "{faulted}");
    let varied = (0..50).filter(|i| {
        let a = answers(&loose, &format!("req-{i}"));
        a.windows(2).any(|w| w[0] != w[1])
    });
    assert!(
        varied.count() > 40,
        "a phase that is not sticky draws per attempt"
    );
}
