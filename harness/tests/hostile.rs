//! A run is never lost: a target that dies mid-run, a load the client cannot carry, a
//! report that cannot go where it was asked.

mod common;

use std::time::Duration;

use common::run;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_that_dies_mid_run_still_gets_a_report_of_what_ran() {
    let server = fault_server::start(fault_server::ServerConfig::default())
        .await
        .expect("start a fault-server");
    let url = server.url();
    // Kill the server once the second policy's requests reach it.
    let killer = tokio::spawn(async move {
        loop {
            if server.ledger().by_policy.contains_key("second") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        server.shutdown().await;
    });
    let report = run(&format!(
        r#"
name: dies
duration: 6s
drain: 1s
target: {{ url: "{url}" }}
load:
  rate: 100
  arrivals: uniform
  requests: [ {{ name: r, path: "/items/{{n}}" }} ]
policies:
  - {{ name: first, max_attempts: 2, backoff: {{ fixed: 5ms }} }}
  - {{ name: second, max_attempts: 2, backoff: {{ fixed: 5ms }} }}
  - {{ name: third }}
"#
    ))
    .await;
    killer.await.expect("the killer ran");
    let error = report.error.as_deref().expect("the run says what failed");
    assert!(error.contains("refused every connection"), "{error}");
    assert_eq!(report.verdict_label(), "INCOMPLETE");
    let names: Vec<&str> = report.policies.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["first", "second"], "the third never ran");
    // The first policy is complete: a whole 6 s of arrivals...
    let first = &report.policies[0];
    assert!(!first.partial);
    assert_eq!(first.offered, 600);
    assert!(first.ledger.is_some());
    // ...the second stopped early, marked so, instead of offering 6 s of load to nothing.
    let second = &report.policies[1];
    assert!(second.partial);
    assert!(second.offered < 600, "{}", second.offered);
    assert!(second.outcomes.contains_key("connect_refused"));
}
