//! A server listening as several peers of one service (`--peers`): one ledger counting
//! each peer's requests, phases that fault one peer, and resends of one stated attempt
//! drawing anew.

mod common;

use std::collections::BTreeMap;

use common::{client, server_with};
use fault_server::wire;

/// Sends one GET to `url` as attempt 1 of `id` (policy `p`); its status.
async fn get(url: &str, id: &str) -> u16 {
    client()
        .get(url)
        .header(wire::REQUEST_ID, id)
        .header(wire::ATTEMPT, "1")
        .header(wire::POLICY, "p")
        .send()
        .await
        .expect("a response")
        .status()
        .as_u16()
}

fn by_method(n: u64) -> BTreeMap<String, u64> {
    BTreeMap::from([("GET".to_string(), n)])
}

#[tokio::test]
async fn a_phase_of_peer_2_faults_only_the_second_listener_and_one_ledger_counts_all_three() {
    let yaml = "faults: [ { name: bad, peer: 2, respond: { status: 503 } } ]";
    let server = server_with(yaml, |c| c.peers = 3).await;
    let urls = server.peer_urls();
    assert_eq!(urls.len(), 3);
    assert_eq!(urls[0], server.url(), "peer 1 is the server's own address");
    let mut statuses = Vec::new();
    for (i, url) in urls.iter().enumerate() {
        for j in 0..(i + 1) {
            statuses.push((i + 1, get(url, &format!("r-{i}-{j}")).await));
        }
    }
    for (peer, status) in &statuses {
        assert_eq!(*status, if *peer == 2 { 503 } else { 200 }, "{statuses:?}");
    }
    // The control API answers on every peer and is never counted.
    let healthy = client()
        .get(format!("{}/healthz", urls[2]))
        .send()
        .await
        .expect("healthz");
    assert!(healthy.status().is_success());
    let ledger = server.ledger();
    assert_eq!(
        ledger.by_peer,
        BTreeMap::from([(1, by_method(1)), (2, by_method(2)), (3, by_method(3))])
    );
    assert_eq!((ledger.requests, ledger.repeats), (6, 0));
    assert_eq!(ledger.by_phase.get("bad"), Some(&2));
}

#[tokio::test]
async fn one_peer_counts_no_peers_and_a_peer_phase_never_fires() {
    let yaml = "faults: [ { peer: 1, respond: { status: 503 } } ]";
    let server = server_with(yaml, |_| {}).await;
    assert_eq!(server.peer_urls(), [server.url()]);
    assert_eq!(get(&server.url(), "r").await, 200);
    let json = serde_json::to_value(server.ledger()).expect("json");
    for absent in ["by_peer", "repeats", "repeats_by_method"] {
        assert!(json.get(absent).is_none(), "{absent} in {json}");
    }
}

#[tokio::test]
async fn a_resend_of_the_same_stated_attempt_draws_anew_and_is_counted_as_a_repeat() {
    // Half the requests fail: a resend that drew the same as its first arrival every time
    // would repeat its status forever.
    let yaml = "faults: [ { probability: 0.5, respond: { status: 400 } } ]";
    let server = server_with(yaml, |c| c.peers = 2).await;
    let url = &server.peer_urls()[1];
    let mut changed = 0;
    for i in 0..20 {
        let id = format!("r-{i}");
        let statuses = [
            get(url, &id).await,
            get(url, &id).await,
            get(url, &id).await,
        ];
        if statuses.iter().any(|s| *s != statuses[0]) {
            changed += 1;
        }
    }
    assert!(changed > 0, "some resend drew another answer");
    let ledger = server.ledger();
    assert_eq!(ledger.repeats, 40);
    let split = ledger.repeats_by_method.get("GET").expect("GETs resent");
    assert_eq!(split.repeats, 40);
    let after_400 = ledger.by_outcome.get("status_400").copied().unwrap_or(0);
    assert!(
        split.after_4xx > 0 && split.after_4xx <= after_400,
        "{ledger:?}"
    );
}

#[tokio::test]
async fn peer_numbers_are_checked_where_they_are_given() {
    let error =
        fault_server::Script::from_yaml_str("faults: [ { peer: 0, respond: { status: 503 } } ]")
            .expect_err("peer 0");
    assert!(error.to_string().contains("numbered from 1"), "{error}");
    let error =
        fault_server::Script::from_yaml_str("faults: [ { peer: [], respond: { status: 503 } } ]")
            .expect_err("no peer");
    assert!(error.to_string().contains("peer"), "{error}");
    let config = fault_server::ServerConfig {
        peers: 17,
        ..fault_server::ServerConfig::default()
    };
    let error = fault_server::start(config).await.expect_err("17 peers");
    assert!(error.to_string().contains("1 to 16 peers"), "{error}");
}

/// What the simulator's server core must agree with (`harness/src/simulate/server.rs`,
/// `the_simulated_server_counts_peers_and_draws_as_the_live_one`): ids `p-…` as the
/// harness writes them, seed 7, peer `i % 3 + 1`, then each resent to peer 2.
#[tokio::test]
async fn the_scripted_case_the_simulator_agrees_with() {
    let yaml = "faults: [ { peer: 2, probability: 0.5, respond: { status: 503 } } ]";
    let server = server_with(yaml, |c| c.peers = 3).await;
    let urls = server.peer_urls();
    for i in 0..30 {
        get(&urls[i % 3], &wire::request_id("p", i as u64)).await;
    }
    for i in 0..30 {
        get(&urls[1], &wire::request_id("p", i as u64)).await;
    }
    let ledger = server.ledger();
    assert_eq!(
        ledger.by_peer,
        BTreeMap::from([(1, by_method(10)), (2, by_method(40)), (3, by_method(10))])
    );
    assert_eq!(
        ledger.repeats, 30,
        "each id arrives again, at whichever peer"
    );
    let faulted = ledger.by_outcome.get("status_503").copied().unwrap_or(0);
    assert_eq!(faulted, SCRIPTED_503, "{ledger:?}");
}

/// The 503s of [`the_scripted_case_the_simulator_agrees_with`], pinned in both tests.
const SCRIPTED_503: u64 = 21;
