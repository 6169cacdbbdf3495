//! The ledger's counts, duplicates, idempotency keys, expiry and bounds, and its JSON.

use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::script::FaultKind;

fn who<'a>(id: &'a str, policy: &'a str) -> RequestIdentity<'a> {
    RequestIdentity {
        request_id: Some(id),
        policy: Some(policy),
        attempt: None,
    }
}

const T0: Duration = Duration::ZERO;

#[test]
fn counts_attempts_and_logical_requests_per_policy() {
    let ledger = Ledger::default();
    for (id, policy) in [
        ("a", "naive"),
        ("a", "naive"),
        ("a", "naive"),
        ("b", "naive"),
        ("c", "budget"),
    ] {
        ledger.record_request(who(id, policy), T0);
    }
    ledger.record_request(RequestIdentity::default(), T0);
    let snap = ledger.snapshot();
    assert_eq!(
        (snap.requests, snap.attempts, snap.logical, snap.untracked),
        (6, 5, 3, 1)
    );
    assert_eq!(snap.by_policy["naive"].attempts, 4);
    assert_eq!(snap.by_policy["naive"].logical, 2);
    assert_eq!(snap.by_policy["budget"].logical, 1);
}

#[test]
fn a_second_execution_of_an_id_is_a_duplicate() {
    let ledger = Ledger::default();
    ledger.record_request(who("pay-1", "naive"), T0);
    assert!(!ledger.execute(who("pay-1", "naive"), T0).duplicate);
    ledger.record_request(who("pay-1", "naive"), T0);
    let second = ledger.execute(who("pay-1", "naive"), T0);
    assert!(second.duplicate);
    assert_eq!(second.number, 2);
    ledger.record_request(who("pay-2", "naive"), T0);
    assert!(!ledger.execute(who("pay-2", "naive"), T0).duplicate);
    let snap = ledger.snapshot();
    assert_eq!(snap.side_effects, 3);
    assert_eq!(snap.duplicate_side_effects, 1);
    assert_eq!(snap.duplicate_examples, vec!["pay-1".to_string()]);
    assert_eq!(snap.by_policy["naive"].duplicate_side_effects, 1);
}

#[test]
fn idempotency_keys_follow_the_draft() {
    let ledger = Ledger::default();
    let id = who("r1", "p");
    let KeyCheck::Fresh(claim) = ledger.begin_keyed("k1", 7, id, T0) else {
        panic!("first use is fresh")
    };
    assert_eq!(ledger.begin_keyed("k1", 7, id, T0), KeyCheck::InFlight);
    ledger.execute(id, T0);
    let stored = StoredResponse {
        status: 200,
        body: "{\"effect\":1}".into(),
    };
    ledger.complete_key(claim, stored.clone());
    assert_eq!(
        ledger.begin_keyed("k1", 7, id, T0),
        KeyCheck::Replay(Arc::new(stored))
    );
    assert_eq!(ledger.begin_keyed("k1", 8, id, T0), KeyCheck::Mismatch);
    let snap = ledger.snapshot();
    assert_eq!(
        (
            snap.idempotent_replays,
            snap.idempotency_conflicts,
            snap.idempotency_mismatches
        ),
        (1, 1, 1)
    );
    assert_eq!(snap.side_effects, 1);
    assert_eq!(snap.by_policy["p"].idempotent_replays, 1);
}

#[test]
fn a_released_key_may_execute_again() {
    let ledger = Ledger::default();
    let id = who("r1", "p");
    let KeyCheck::Fresh(claim) = ledger.begin_keyed("k", 1, id, T0) else {
        panic!("fresh")
    };
    ledger.release_key(claim);
    assert!(matches!(
        ledger.begin_keyed("k", 1, id, T0),
        KeyCheck::Fresh(_)
    ));
}

#[test]
fn ids_expire_after_the_ttl_and_beyond_the_cap() {
    let limits = LedgerLimits {
        id_ttl: Duration::from_secs(10),
        max_ids: 3,
        ..LedgerLimits::default()
    };
    let ledger = Ledger::new(limits);
    for (i, id) in ["a", "b", "c", "d"].iter().enumerate() {
        ledger.record_request(who(id, "p"), Duration::from_secs(i as u64));
    }
    let snap = ledger.snapshot();
    assert_eq!(
        (snap.tracked_ids, snap.evicted_ids, snap.logical),
        (3, 1, 4)
    );
    // "a" was evicted by the cap: it comes back as a new logical request.
    ledger.record_request(who("a", "p"), Duration::from_secs(5));
    assert_eq!(ledger.snapshot().logical, 5);
    // Everything is older than the TTL at t = 100 s.
    ledger.record_request(who("z", "p"), Duration::from_secs(100));
    let snap = ledger.snapshot();
    assert_eq!(snap.tracked_ids, 1);
    assert!(snap.evicted_ids >= 4);
}

#[test]
fn a_presized_ledger_counts_as_one_grown_from_nothing_and_never_grows() {
    let limits = LedgerLimits {
        max_ids: 5_000,
        ..LedgerLimits::default()
    };
    let (grown, presized) = (Ledger::new(limits), Ledger::presized(limits));
    let room = |l: &Ledger| {
        let inner = l.lock();
        (inner.ids.slots(), inner.id_order.capacity())
    };
    let before = room(&presized);
    for i in 0..12_000u64 {
        // Every third id repeats an earlier one; the cap evicts the oldest beyond 5,000.
        let id = format!("id-{}", if i % 3 == 0 { i / 2 } else { i });
        for ledger in [&grown, &presized] {
            ledger.record_request(who(&id, "p"), Duration::from_millis(i));
        }
    }
    let (a, b) = (grown.snapshot(), presized.snapshot());
    assert_eq!(
        (a.attempts, a.logical, a.tracked_ids, a.evicted_ids),
        (b.attempts, b.logical, b.tracked_ids, b.evicted_ids)
    );
    assert_eq!(room(&presized), before, "a presized ledger never grows");
}

#[test]
fn keys_expire_and_are_capped() {
    let limits = LedgerLimits {
        key_ttl: Duration::from_secs(10),
        max_keys: 2,
        ..LedgerLimits::default()
    };
    let ledger = Ledger::new(limits);
    let id = who("r", "p");
    for key in ["k1", "k2", "k3"] {
        let KeyCheck::Fresh(claim) = ledger.begin_keyed(key, 1, id, T0) else {
            panic!("fresh")
        };
        ledger.complete_key(
            claim,
            StoredResponse {
                status: 200,
                body: String::new(),
            },
        );
    }
    let snap = ledger.snapshot();
    assert_eq!((snap.tracked_keys, snap.evicted_keys), (2, 1));
    assert!(matches!(
        ledger.begin_keyed("k3", 1, id, T0),
        KeyCheck::Replay(_)
    ));
    assert!(matches!(
        ledger.begin_keyed("k3", 1, id, Duration::from_secs(11)),
        KeyCheck::Fresh(_)
    ));
}

#[test]
fn examples_and_policies_are_bounded() {
    let limits = LedgerLimits {
        max_examples: 2,
        max_policies: 2,
        ..LedgerLimits::default()
    };
    let ledger = Ledger::new(limits);
    for i in 0..10 {
        let id = format!("id-{i}");
        let policy = format!("policy-{i}");
        for _ in 0..2 {
            ledger.record_request(who(&id, &policy), T0);
            ledger.execute(who(&id, &policy), T0);
        }
    }
    let snap = ledger.snapshot();
    assert_eq!(snap.duplicate_side_effects, 10);
    assert_eq!(snap.duplicate_examples.len(), 2);
    assert_eq!(snap.by_policy.len(), 3);
    assert_eq!(snap.by_policy[OTHER_POLICIES].attempts, 16);
}

#[test]
fn outcomes_and_faults_are_counted_and_reset() {
    let ledger = Ledger::default();
    ledger.record_outcome(Disposition::Served);
    ledger.record_outcome(Disposition::Status(503));
    ledger.record_outcome(Disposition::Status(503));
    ledger.record_outcome(Disposition::Reset);
    ledger.record_fault(FaultKind::Status, "outage");
    ledger.record_fault(FaultKind::Reset, "outage");
    let snap = ledger.snapshot();
    assert_eq!(snap.by_outcome["served"], 1);
    assert_eq!(snap.by_outcome["status_503"], 2);
    assert_eq!(snap.by_outcome["reset"], 1);
    assert_eq!(snap.by_fault["status"], 1);
    assert_eq!(snap.by_phase["outage"], 2);
    ledger.reset();
    assert_eq!(ledger.snapshot(), LedgerSnapshot::default());
}

#[test]
fn snapshot_serialises_with_the_contract_names() {
    let ledger = Ledger::default();
    ledger.record_request(who("a", "p"), T0);
    let json = serde_json::to_value(ledger.snapshot()).expect("serialises");
    for key in [
        "attempts",
        "logical",
        "side_effects",
        "duplicate_side_effects",
        "duplicate_examples",
        "idempotent_replays",
        "by_outcome",
        "by_policy",
    ] {
        assert!(json.get(key).is_some(), "{key} missing from {json}");
    }
    let back: LedgerSnapshot = serde_json::from_value(json).expect("deserialises");
    assert_eq!(back, ledger.snapshot());
}

#[test]
fn an_arrival_queued_on_another_thread_counts_before_its_side_effect() {
    let ledger = Ledger::default();
    // Fewer than a batch: the arrival stays queued on the thread that recorded it.
    std::thread::scope(|s| {
        s.spawn(|| ledger.record_request(who("pay-1", "naive"), T0));
    });
    let first = ledger.execute(who("pay-1", "naive"), T0);
    assert!(!first.duplicate, "the queued arrival is the id's first");
    let snap = ledger.snapshot();
    assert_eq!((snap.attempts, snap.logical, snap.tracked_ids), (1, 1, 1));
    assert_eq!(snap.by_policy["naive"].logical, 1);
    std::thread::scope(|s| {
        s.spawn(|| ledger.record_request(who("pay-1", "naive"), T0));
    });
    assert!(ledger.execute(who("pay-1", "naive"), T0).duplicate);
    let snap = ledger.snapshot();
    assert_eq!((snap.attempts, snap.logical), (2, 1));
    assert_eq!(snap.duplicate_side_effects, 1);
}

#[test]
fn threads_recording_the_same_ids_at_once_count_exactly() {
    let ledger = Ledger::default();
    let (threads, per_thread, ids) = (6, 20_000, 5_000);
    std::thread::scope(|s| {
        for t in 0..threads {
            let ledger = &ledger;
            s.spawn(move || {
                for i in 0..per_thread {
                    // Each thread walks the ids from its own place, so the same id comes
                    // from several threads at nearly the same time.
                    let id = format!("id-{}", (i * 7 + t * 811) % ids);
                    let policy = ["a", "b", "c"][i % 3];
                    ledger.record_request(who(&id, policy), T0);
                }
            });
        }
    });
    let snap = ledger.snapshot();
    let attempts = (threads * per_thread) as u64;
    assert_eq!(snap.requests, attempts);
    assert_eq!((snap.attempts, snap.untracked), (attempts, 0));
    assert_eq!(snap.logical, ids as u64);
    assert_eq!(snap.tracked_ids, ids as u64);
    let by_policy: u64 = snap.by_policy.values().map(|p| p.attempts).sum();
    assert_eq!(by_policy, attempts);
    let logical: u64 = snap.by_policy.values().map(|p| p.logical).sum();
    assert_eq!(logical, ids as u64);
}

#[test]
fn a_reset_forgets_arrivals_still_queued() {
    let ledger = Ledger::default();
    std::thread::scope(|s| {
        s.spawn(|| {
            for id in ["a", "b", "c"] {
                ledger.record_request(who(id, "naive"), T0);
            }
        });
    });
    ledger.reset();
    let snap = ledger.snapshot();
    assert_eq!((snap.requests, snap.attempts, snap.logical), (0, 0, 0));
    assert!(snap.by_policy.is_empty());
    ledger.record_request(who("a", "naive"), T0);
    assert_eq!(
        ledger.snapshot().logical,
        1,
        "a is new again after the reset"
    );
}

#[test]
fn queued_arrivals_with_many_policy_names_count_each_under_its_own() {
    let ledger = Ledger::default();
    for i in 0..40 {
        ledger.record_request(who(&format!("id-{i}"), &format!("policy-{i}")), T0);
    }
    let snap = ledger.snapshot();
    assert_eq!(snap.logical, 40);
    assert_eq!(snap.by_policy.len(), 40);
    assert!(
        snap.by_policy
            .values()
            .all(|p| p.attempts == 1 && p.logical == 1)
    );
}

#[test]
fn a_request_that_arrived_before_a_reset_counts_in_neither_ledger() {
    let ledger = Ledger::default();
    let before = ledger.record_request(who("pay-1", "p"), T0);
    let KeyCheck::Fresh(old_claim) = ledger.begin_keyed_in(before, "k", 1, who("pay-1", "p"), T0)
    else {
        panic!("a fresh key")
    };
    ledger.reset();
    let after = ledger.record_request(who("pay-2", "p"), T0);
    let KeyCheck::Fresh(claim) = ledger.begin_keyed_in(after, "k", 2, who("pay-2", "p"), T0) else {
        panic!("the key is fresh in the new ledger")
    };

    // The straggler goes on: its fault, key, side effect and outcome land nowhere.
    ledger.record_fault_in(before, FaultKind::Delay, "slow");
    assert!(matches!(
        ledger.begin_keyed_in(before, "k", 1, who("pay-1", "p"), T0),
        KeyCheck::Fresh(_)
    ));
    assert_eq!(ledger.execute_in(before, who("pay-1", "p"), T0), None);
    ledger.complete_key(
        old_claim,
        StoredResponse {
            status: 200,
            body: "{}".into(),
        },
    );
    ledger.record_outcome_in(before, Disposition::Served);

    let snap = ledger.snapshot();
    assert_eq!(
        (snap.requests, snap.attempts, snap.logical, snap.stragglers),
        (1, 1, 1, 1)
    );
    assert_eq!(
        (snap.side_effects, snap.tracked_ids, snap.tracked_keys),
        (0, 1, 1)
    );
    assert!(snap.by_outcome.is_empty() && snap.by_fault.is_empty() && snap.by_phase.is_empty());
    assert_eq!(
        ledger.begin_keyed_in(after, "k", 2, who("pay-2", "p"), T0),
        KeyCheck::InFlight,
        "the straggler's claim did not complete the new request's key"
    );
    ledger.release_key(claim);
    ledger.record_outcome_in(after, Disposition::Served);
    let snap = ledger.snapshot();
    assert_eq!((snap.by_outcome["served"], snap.stragglers), (1, 1));
    assert_eq!(
        snap.tracked_keys, 0,
        "the new request's own claim is released"
    );
}

#[test]
fn a_key_a_straggler_executed_is_replayed_after_the_reset_not_executed_again() {
    let ledger = Ledger::default();
    let before = ledger.record_request(who("pay-1", "p"), T0);
    let KeyCheck::Fresh(claim) = ledger.begin_keyed_in(before, "k", 7, who("pay-1", "p"), T0)
    else {
        panic!("a fresh key")
    };
    ledger.reset();
    // The straggler executes and completes after the reset.
    let stored = StoredResponse {
        status: 201,
        body: "{\"order\":1}".into(),
    };
    ledger.complete_key(claim, stored.clone());
    ledger.record_outcome_in(before, Disposition::Served);

    // The client's retry under the same key, in the new ledger: a replay.
    let after = ledger.record_request(who("pay-1", "p"), T0);
    assert_eq!(
        ledger.begin_keyed_in(after, "k", 7, who("pay-1", "p"), T0),
        KeyCheck::Replay(std::sync::Arc::new(stored))
    );
    // The same key for a different request is still a mismatch.
    assert_eq!(
        ledger.begin_keyed_in(after, "k", 8, who("pay-9", "p"), T0),
        KeyCheck::Mismatch
    );
    let snap = ledger.snapshot();
    assert_eq!(
        (snap.side_effects, snap.idempotent_replays, snap.stragglers),
        (0, 1, 1)
    );

    // A later run's request of the same id, stating it is a first attempt: not the
    // straggler's retry, so it executes rather than replays.
    let first = RequestIdentity {
        attempt: Some(1),
        ..who("pay-1", "p")
    };
    let later = ledger.record_request(first, T0);
    assert!(matches!(
        ledger.begin_keyed_in(later, "k", 7, first, T0),
        KeyCheck::Fresh(_)
    ));
}

#[test]
fn resets_under_load_leave_each_ledger_whole() {
    let ledger = Ledger::default();
    let (threads, per_thread) = (4, 20_000);
    let done = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for t in 0..threads {
            let (ledger, done) = (&ledger, &done);
            s.spawn(move || {
                for i in 0..per_thread {
                    let epoch = ledger.record_request(who(&format!("id-{t}-{i}"), "p"), T0);
                    ledger.record_outcome_in(epoch, Disposition::Served);
                }
                done.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            });
        }
        s.spawn(|| {
            while done.load(std::sync::atomic::Ordering::Relaxed) < threads {
                ledger.reset();
            }
        });
    });
    // Every request of the last generation ended in it: its counts agree exactly.
    let snap = ledger.snapshot();
    assert_eq!((snap.attempts, snap.untracked), (snap.requests, 0));
    assert_eq!(snap.logical, snap.requests);
    assert_eq!(
        snap.by_policy.get("p").map_or(0, |p| p.attempts),
        snap.requests
    );
    assert_eq!(
        snap.by_outcome.values().sum::<u64>(),
        snap.requests,
        "{snap:?}"
    );
}
