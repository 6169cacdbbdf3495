//! A relay tier listening as several peers: one core counting each peer's requests and
//! the resends of one stated attempt, and fault phases that match a peer.

use fault_server::wire;
use harness::relay::{Relay, RelayConfig};

async fn relay(next: String, peers: u32, script: Option<&str>) -> Relay {
    Relay::start(RelayConfig {
        name: "mid".into(),
        next,
        policy: harness::plan::forward_once(),
        seed: 1,
        listen: "127.0.0.1:0".parse().expect("an address"),
        script: script.map(|yaml| fault_server::Script::from_yaml_str(yaml).expect("a script")),
        tracing: None,
        peers,
        max_connections: None,
    })
    .await
    .expect("a relay")
}

async fn get(url: &str, id: &str) -> u16 {
    reqwest::Client::builder()
        .retry(reqwest::retry::never())
        .no_proxy()
        .build()
        .expect("a client")
        .get(url)
        .header(wire::REQUEST_ID, id)
        .header(wire::ATTEMPT, "1")
        .send()
        .await
        .expect("a response")
        .status()
        .as_u16()
}

#[tokio::test]
async fn a_relay_with_three_peers_counts_each_and_faults_only_the_peer_its_phase_names() {
    let server = fault_server::start(fault_server::ServerConfig::default())
        .await
        .expect("a server");
    let yaml = "faults: [ { peer: 2, respond: { status: 429 } } ]";
    let tier = relay(server.url(), 3, Some(yaml)).await;
    let urls = tier.peer_urls().to_vec();
    assert_eq!(urls.len(), 3);
    assert_eq!(urls[0], tier.url(), "the hop above sends to peer 1");
    for (i, url) in urls.iter().enumerate() {
        for j in 0..=i {
            let status = get(url, &format!("r-{i}-{j}")).await;
            assert_eq!(status, if i == 1 { 429 } else { 200 }, "peer {}", i + 1);
        }
    }
    // Resent unchanged, to another peer and to the same one.
    get(&urls[0], "r-2-0").await;
    get(&urls[2], "r-2-0").await;
    let counts = tier.counts();
    assert_eq!(counts.received_by_peer, [2, 2, 4]);
    assert_eq!((counts.received, counts.repeats, counts.faulted), (8, 2, 2));
    // What reached the server: the tier sends to it as one peer.
    let ledger = server.ledger();
    assert!(ledger.by_peer.is_empty());
    assert_eq!(
        ledger.repeats, 2,
        "the resends reach the next hop as resends"
    );
    tier.shutdown().await;
    server.shutdown().await;
}

#[tokio::test]
async fn a_relay_with_one_peer_counts_no_peers() {
    let server = fault_server::start(fault_server::ServerConfig::default())
        .await
        .expect("a server");
    let tier = relay(server.url(), 1, None).await;
    assert_eq!(tier.peer_urls(), [tier.url().to_string()]);
    assert_eq!(get(tier.url(), "r").await, 200);
    let counts = tier.counts();
    assert!(counts.received_by_peer.is_empty());
    let json = serde_json::to_value(&counts).expect("json");
    assert!(json.get("received_by_peer").is_none() && json.get("repeats").is_none());
    tier.shutdown().await;
    server.shutdown().await;
}
