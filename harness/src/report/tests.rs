//! Table tests for the figures the report derives from a run: recovery, peak, the ledger's
//! share of a policy, reconciliation, the offered load's percentiles, server amplification.

#![allow(clippy::unwrap_used, clippy::float_cmp)] // Tests: a panic is the failure report.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use chaos_policy::{GiveUp, Outcome, Verdict};
use fault_server::ledger::{LedgerSnapshot, PolicyLedger};

use super::build::{
    PolicyOutcome, offered_quantile_ms, own_share, peak_1s, policy_report, reconciliation,
    recovery_s,
};
use super::context::{Mode, RunContext, build};
use crate::stats::{PolicyRun, Reached, Recorder, Second};

/// A second with these settled counts: `(succeeded, gave up, unfinished, dropped)`.
fn second(succeeded: u64, gave_up: u64, unfinished: u64, dropped: u64) -> Second {
    Second {
        offered: succeeded + gave_up + unfinished + dropped,
        succeeded,
        failed: gave_up + unfinished,
        unfinished,
        dropped,
        ..Second::default()
    }
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

#[test]
fn recovery_counts_failures_the_same_way_before_and_after_the_faults() {
    // Before the faults (0..2 s) all settled requests succeeded; the requests the drain cut
    // off have no verdict and do not lower the baseline (100%, so the bar is 95%).
    let cut_before = [second(90, 0, 10, 0), second(100, 0, 0, 0)];
    let table: &[(&str, Vec<Second>, Option<f64>)] = &[
        (
            "back at once",
            [
                &cut_before[..],
                &[second(0, 100, 0, 0), second(100, 0, 0, 0)],
            ]
            .concat(),
            Some(0.0),
        ),
        (
            // 88% is within 5 points of a baseline that counted the cut-off requests as
            // failures (90%), not of the true 100%.
            "88% is not recovered",
            [
                &cut_before[..],
                &[
                    second(0, 100, 0, 0),
                    second(88, 12, 0, 0),
                    second(100, 0, 0, 0),
                ],
            ]
            .concat(),
            Some(1.0),
        ),
        (
            "drops are failures after the faults too",
            [
                &cut_before[..],
                &[
                    second(0, 100, 0, 0),
                    second(50, 0, 0, 50),
                    second(100, 0, 0, 0),
                ],
            ]
            .concat(),
            Some(1.0),
        ),
        (
            "a second with nothing settled neither breaks nor makes recovery",
            [
                &cut_before[..],
                &[
                    second(0, 100, 0, 0),
                    second(100, 0, 0, 0),
                    second(0, 0, 30, 0),
                ],
            ]
            .concat(),
            Some(0.0),
        ),
        (
            "never back",
            [
                &cut_before[..],
                &[second(0, 100, 0, 0), second(10, 90, 0, 0)],
            ]
            .concat(),
            None,
        ),
        (
            "nothing before the faults to compare with",
            vec![second(0, 0, 0, 0), second(0, 0, 0, 0), second(100, 0, 0, 0)],
            None,
        ),
        ("the faults outlast the run", cut_before.to_vec(), None),
    ];
    for (name, series, expected) in table {
        assert_eq!(recovery_s(series, secs(2), secs(3)), *expected, "{name}");
    }
}

#[test]
fn peak_is_the_worst_seconds_attempts_per_sent_request() {
    let mut quiet = second(10, 0, 0, 0);
    quiet.scheduled_attempts = 10;
    let mut storm = second(1, 9, 0, 10);
    storm.scheduled_attempts = 34;
    let mut all_dropped = second(0, 0, 0, 5);
    all_dropped.scheduled_attempts = 0;
    assert_eq!(peak_1s(&[]), 0.0);
    assert_eq!(peak_1s(&[quiet.clone()]), 1.0);
    // 34 attempts by the 10 requests sent in the storm's second; its drops made none.
    assert_eq!(peak_1s(&[quiet, storm, all_dropped]), 3.4);
}

fn share(attempts: u64, logical: u64, duplicates: u64) -> PolicyLedger {
    PolicyLedger {
        attempts,
        logical,
        side_effects: duplicates * 2,
        duplicate_side_effects: duplicates,
        idempotent_replays: 0,
    }
}

#[test]
fn the_ledger_share_of_a_policy_is_its_own_requests_only() {
    let ledger = LedgerSnapshot {
        attempts: 130,
        logical: 70,
        duplicate_side_effects: 3,
        duplicate_examples: vec!["a-0000001".into(), "b-0000002".into(), "a-0000009".into()],
        by_policy: [
            ("a".into(), share(100, 50, 2)),
            ("b".into(), share(30, 20, 1)),
        ]
        .into_iter()
        .collect(),
        ..LedgerSnapshot::default()
    };
    let a = own_share(ledger.clone(), "a");
    assert_eq!(
        (a.attempts, a.logical, a.duplicate_side_effects),
        (100, 50, 2)
    );
    assert_eq!(a.duplicate_examples, ["a-0000001", "a-0000009"]);
    let b = own_share(ledger.clone(), "b");
    assert_eq!(
        (b.attempts, b.logical, b.duplicate_side_effects),
        (30, 20, 1)
    );
    // A policy the server never heard from saw nothing.
    let c = own_share(ledger, "c");
    assert_eq!((c.attempts, c.logical, c.duplicate_side_effects), (0, 0, 0));
    assert!(c.duplicate_examples.is_empty());
}

#[test]
fn reconciliation_allows_for_failed_connects_and_abandoned_attempts_only() {
    let mut r = Recorder {
        attempts: 100,
        abandoned: 3,
        reached: (60, 2),
        ..Recorder::default()
    };
    r.outcomes.insert(Outcome::Status(200), 90);
    r.outcomes.insert(Outcome::ConnectRefused, 4);
    r.outcomes.insert(Outcome::ConnectTimeout, 1);
    let agree = reconciliation(&r);
    assert_eq!(agree.unsent, 5);
    assert_eq!(agree.attempts, 92..=95);
    assert_eq!(agree.logical, 60..=62);
    for (attempts, logical, ok) in [
        (95, 60, true),
        (92, 62, true),
        (96, 60, false), // an attempt the client never sent: a hidden retry
        (91, 60, false), // an attempt the server never saw
        (95, 63, false),
        (95, 59, false),
    ] {
        assert_eq!(agree.agrees(attempts, logical), ok, "{attempts} {logical}");
    }
}

/// Within the histogram's precision (three significant digits).
fn near(measured: Option<f64>, expected: Option<f64>) -> bool {
    match (measured, expected) {
        (Some(m), Some(e)) => (m - e).abs() <= e * 1e-3,
        (m, e) => m == e,
    }
}

#[test]
fn offered_percentiles_rank_drops_after_every_sent_request() {
    let mut h = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3).unwrap();
    for ms in 1..=100u64 {
        h.record(ms * 1000).unwrap();
    }
    assert!(near(offered_quantile_ms(&h, 100, 0, 0.99), Some(99.0)));
    // 100 sent and 100 dropped: the offered median is the slowest sent request...
    assert!(near(offered_quantile_ms(&h, 100, 100, 0.50), Some(100.0)));
    assert!(near(offered_quantile_ms(&h, 100, 100, 0.25), Some(50.0)));
    // ...and anything above it falls among the drops.
    assert!(near(offered_quantile_ms(&h, 100, 100, 0.51), None));
    assert!(near(offered_quantile_ms(&h, 100, 1, 0.99), Some(100.0)));
    assert!(near(offered_quantile_ms(&h, 100, 2, 0.99), None));
    assert!(near(offered_quantile_ms(&h, 0, 5, 0.5), None));
    assert!(near(offered_quantile_ms(&h, 0, 0, 0.5), Some(0.0)));
}

#[test]
fn server_amplification_is_the_ledgers_own_ratio() {
    let plan = crate::plan::parse(
        Path::new("t.yaml"),
        "name: t\nduration: 1s\nload: { rate: 10, requests: [ { name: r, path: / } ] }\npolicies: [ { name: a } ]\ngates: [ client_server_agree, amplification_within_budget ]\n",
    )
    .unwrap();
    let mut recorder = Recorder {
        logical: 10,
        attempts: 12,
        ..Recorder::default()
    };
    recorder.outcomes.insert(Outcome::Status(200), 12);
    for _ in 0..8 {
        recorder.reached(Reached::Yes);
        recorder.finished(
            Duration::ZERO,
            Duration::ZERO,
            &Verdict::Succeeded { attempts: 1 },
        );
    }
    // Two requests the breaker refused outright: they never reached the server.
    for _ in 0..2 {
        recorder.reached(Reached::No);
        recorder.finished(
            Duration::ZERO,
            Duration::ZERO,
            &Verdict::GaveUp {
                reason: GiveUp::BreakerOpen,
                attempts: 0,
                last: None,
            },
        );
    }
    let ledger = |attempts, logical| LedgerSnapshot {
        by_policy: [("a".into(), share(attempts, logical, 0))]
            .into_iter()
            .collect(),
        ..LedgerSnapshot::default()
    };
    let outcome = |ledger| PolicyOutcome {
        policy: &plan.policies[0],
        run: PolicyRun {
            recorder: recorder.clone(),
            budget_bound: None,
            breaker_trips: 1,
            elapsed: Duration::from_secs(1),
            aborted: false,
            gone: None,
        },
        ledger: Some(ledger),
        tiers: Vec::new(),
        proxies: Vec::new(),
    };
    let report = build(
        &plan,
        vec![policy_report(&plan, Mode::Live, outcome(ledger(12, 8)))],
        RunContext::default(),
    );
    let p = &report.policies[0];
    assert_eq!(p.amplification.client, 1.2);
    assert_eq!(
        p.amplification.server,
        Some(1.5),
        "12 attempts of 8 requests it saw"
    );
    assert!(p.gates[0].pass, "{:?}", p.gates[0]);
    assert!(
        p.gates[0].detail.contains(
            "the client sent 12 attempts of 10 logical requests, 8 of which reached the server"
        ),
        "{}",
        p.gates[0].detail
    );

    // A server that saw fewer logical requests than reached it does not agree.
    let report = build(
        &plan,
        vec![policy_report(&plan, Mode::Live, outcome(ledger(12, 7)))],
        RunContext::default(),
    );
    assert!(!report.policies[0].gates[0].pass);
}

#[test]
fn the_peer_table_shows_only_when_the_server_listened_as_several_peers() {
    let plan = crate::plan::parse(
        Path::new("t.yaml"),
        "name: t\nduration: 1s\nload: { rate: 10, requests: [ { name: r, path: / } ] }\npolicies: [ { name: a } ]\n",
    )
    .unwrap();
    let get = |n| BTreeMap::from([("GET".to_string(), n)]);
    let report_of = |by_peer: BTreeMap<u32, BTreeMap<String, u64>>| {
        let ledger = LedgerSnapshot {
            by_peer,
            repeats: 2,
            repeats_by_method: BTreeMap::from([(
                "GET".to_string(),
                fault_server::ledger::RepeatLedger {
                    repeats: 2,
                    after_4xx: 1,
                },
            )]),
            ..LedgerSnapshot::default()
        };
        let outcome = PolicyOutcome {
            policy: &plan.policies[0],
            run: PolicyRun {
                recorder: Recorder::default(),
                budget_bound: None,
                breaker_trips: 0,
                elapsed: Duration::from_secs(1),
                aborted: false,
                gone: None,
            },
            ledger: Some(ledger),
            tiers: Vec::new(),
            proxies: Vec::new(),
        };
        build(
            &plan,
            vec![policy_report(&plan, Mode::Live, outcome)],
            RunContext::default(),
        )
    };
    let three = report_of(BTreeMap::from([(1, get(3)), (2, get(5)), (3, get(3))]));
    let md = crate::report::markdown(&three);
    assert!(md.contains("peer by peer"), "{md}");
    assert!(md.contains("| 2 | 5 | 5 |"), "{md}");
    assert!(md.contains("2 (1)"), "{md}");
    assert!(crate::report::html(&three).contains("peer by peer"));
    let one = report_of(BTreeMap::new());
    assert!(!crate::report::markdown(&one).contains("peer by peer"));
}
