//! Selecting: windows, matches, attempts, weights and probabilities, sticky phases, and
//! the pinned decisions of a seed.

use proptest::prelude::*;

use super::*;
use crate::wire;

#[test]
fn windows_are_half_open() {
    let s = script("faults: [ { from: 10s, until: 20s, respond: { status: 503 } } ]");
    let table = [
        (0.0, None),
        (9.999, None),
        (10.0, Some((0, FaultKind::Status))),
        (19.999, Some((0, FaultKind::Status))),
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
    assert_eq!(
        decide(&s, "GET", "/", &[], 0.0),
        Some((1, FaultKind::Reset))
    );
    assert_eq!(decide(&s, "GET", "/", &[], 3.0), None);
    assert_eq!(
        decide(&s, "GET", "/", &[], 5.0),
        Some((0, FaultKind::Close))
    );
    assert_eq!(
        decide(&s, "GET", "/", &[], 1e6),
        Some((0, FaultKind::Close))
    );
    assert_eq!(s.last_fault_end(), Some(secs(2.0)));
}

/// A table row: method, path, headers, expected decision.
type Row<'a> = (
    &'a str,
    &'a str,
    &'a [(&'a str, &'a str)],
    Option<(usize, FaultKind)>,
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
        ("POST", "/payments", &[], Some((0, FaultKind::Status))),
        ("post", "/anything", &[], Some((0, FaultKind::Status))),
        ("GET", "/payments/7", &[], Some((1, FaultKind::Reset))),
        ("GET", "/paymentsX", &[], Some((1, FaultKind::Reset))),
        ("GET", "/pay", &[], None),
        (
            "GET",
            "/x",
            &[("x-tenant", "blue-2")],
            Some((2, FaultKind::Close)),
        ),
        (
            "GET",
            "/x",
            &[("X-TENANT", "blue")],
            Some((2, FaultKind::Close)),
        ),
        ("GET", "/x", &[("x-tenant", "green")], None),
        ("GET", "/x", &[(wire::ATTEMPT, "1")], None),
        (
            "GET",
            "/x",
            &[(wire::ATTEMPT, "2")],
            Some((3, FaultKind::Truncate)),
        ),
        (
            "GET",
            "/x",
            &[(wire::ATTEMPT, "3")],
            Some((3, FaultKind::Truncate)),
        ),
        ("GET", "/x", &[(wire::ATTEMPT, "4")], None),
        ("GET", "/x", &[(wire::ATTEMPT, "two")], None),
        ("GET", "/items/7/price", &[], Some((5, FaultKind::Timeout))),
        ("HEAD", "/items/7/price", &[], Some((5, FaultKind::Timeout))),
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
        Some((1, FaultKind::Status))
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
        action: FaultAction::Status(response),
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
        fault("/b", &mut rng).action,
        FaultAction::Delay(Duration::from_millis(300))
    );
    assert_eq!(
        fault("/c", &mut rng),
        Fault {
            action: FaultAction::Timeout {
                hold: Some(secs(2.0))
            },
            processed: true
        }
    );
    let FaultAction::Truncate(response) = fault("/d", &mut rng).action else {
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
        grpc: None,
    };
    assert_eq!(response(0).retry_after_secs(), Some(0));
    assert_eq!(response(1).retry_after_secs(), Some(1));
    assert_eq!(response(1000).retry_after_secs(), Some(1));
    assert_eq!(response(1001).retry_after_secs(), Some(2));
}

#[test]
fn the_decisions_of_a_seed_are_pinned() {
    // Seed 42, attempt 1 of req-0 … req-11, against probability 0.5 and weights 3:1:
    // a change to the seeding, the uniform draw or the weighted pick shows up here.
    let s = probability_script(0.5);
    let decisions: Vec<Option<FaultKind>> = (0..12)
        .map(|i| {
            let mut rng = request_rng(42, &format!("req-{i}"), 1);
            match s.select(&facts("GET", "/", &&[][..]), Duration::ZERO, &mut rng) {
                Decision::Serve => None,
                Decision::Fault { fault, .. } => Some(fault.kind()),
            }
        })
        .collect();
    let (status, reset) = (Some(FaultKind::Status), Some(FaultKind::Reset));
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
                if fault.kind() == FaultKind::Status {
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
        let expected = if inside { (0, FaultKind::Status) } else { (1, FaultKind::Close) };
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
                    (wire::REQUEST_ID, id),
                    (wire::ATTEMPT, &*attempt.to_string()),
                ];
                let headers: &[(&str, &str)] = &headers;
                let facts = facts("GET", "/", &headers);
                // Each attempt has its own per-attempt stream, as on the live server.
                let mut rng = request_rng(7, id, attempt);
                match s.select(&facts, Duration::ZERO, &mut rng) {
                    Decision::Fault {
                        fault:
                            Fault {
                                action: FaultAction::Status(r),
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
