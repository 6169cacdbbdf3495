//! A target the harness did not start: a fault-server someone scripted themselves, whose
//! script a plan replaces only when it says so, and a service of the user's own that is no
//! fault-server, which gets nothing but one `GET /healthz` before the run is refused.

mod common;

use std::sync::{Arc, Mutex};

use common::{harness, policy, scratch, stderr, write_plan};
use fault_server::wire;

/// A brownout and a capacity limit, as an operator starts a fault-server with.
const BROWNOUT: &str = "faults:\n  - { name: brownout, probability: 0.5, respond: { status: 503 } }\nserver: { capacity: 50, queue: 10 }\n";

async fn brownout_server() -> fault_server::ServerHandle {
    let script = fault_server::Script::from_yaml_str(BROWNOUT).expect("a script");
    fault_server::start(fault_server::ServerConfig::with_script(script))
        .await
        .expect("a fault-server")
}

/// A plan against `url`, with `script:` as given under `target:` and no faults of its own.
fn plan(url: &str, consent: &str) -> String {
    format!(
        "name: consent\nseed: 3\nduration: 1s\ndrain: 1s\ntarget: {{ url: \"{url}\"{consent} }}\nload: {{ rate: 50, arrivals: uniform, requests: [ {{ name: r, path: / }} ] }}\npolicies: [ {{ name: once, max_attempts: 1 }} ]\n"
    )
}

/// The script the server has now, and where it came from.
async fn in_force(url: &str) -> (fault_server::ScriptSpec, String) {
    let response = reqwest::get(format!("{url}/__chaos/script"))
        .await
        .expect("the script");
    let origin = response
        .headers()
        .get(wire::SCRIPT_ORIGIN)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let spec = serde_json::from_str(&response.text().await.expect("text")).expect("a spec");
    (spec, origin)
}

async fn run(yaml: &str) -> Result<harness::report::Report, harness::run::RunError> {
    harness::run::run(&common::plan(yaml), &harness::run::RunOptions::default()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_the_harness_did_not_install_is_replaced_only_when_the_plan_says_so() {
    let server = brownout_server().await;
    let url = server.url();
    let (theirs, _) = in_force(&url).await;

    // Unsaid: refused before a request of the plan's is sent; the script stays.
    let refused = run(&plan(&url, ""))
        .await
        .expect_err("no silent replacement");
    let said = refused.to_string();
    assert!(
        said.contains("script: replace") && said.contains("script: keep"),
        "{said}"
    );
    assert!(said.contains("brownout"), "{said}");
    assert_eq!(in_force(&url).await, (theirs.clone(), "startup".to_owned()));
    assert_eq!(server.ledger().requests, 0, "nothing was sent");

    // Kept: the run meets the server's own brownout, and the report says whose it was.
    let kept = run(&plan(&url, ", script: keep")).await.expect("a run");
    assert_eq!(kept.plan.faults, ["brownout"]);
    assert!(
        kept.plan.faults_from.contains("own script, kept"),
        "{}",
        kept.plan.faults_from
    );
    assert!(
        policy(&kept, "once").success_rate < 0.9,
        "the brownout was in force"
    );
    assert_eq!(in_force(&url).await.0, theirs);

    // Replaced: the plan's (no faults) for the run, said in a warning, then put back.
    let replaced = run(&plan(&url, ", script: replace")).await.expect("a run");
    assert!(replaced.plan.faults.is_empty());
    let once = policy(&replaced, "once");
    assert_eq!(once.succeeded, once.logical, "no fault was in force");
    assert!(
        replaced
            .warnings
            .iter()
            .any(|w| w.contains("was replaced by the plan's")
                && w.contains("put back after the run")),
        "{:?}",
        replaced.warnings
    );
    let (back, origin) = in_force(&url).await;
    assert_eq!(back, theirs, "the server's own script is back");
    assert_eq!(
        origin, "control",
        "and not marked as the harness's: a later run asks again"
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_puts_back_the_script_it_found_faults_or_none() {
    let server = fault_server::start(fault_server::ServerConfig::default())
        .await
        .expect("a fault-server");
    let url = server.url();
    let (before, _) = in_force(&url).await;
    let first = format!(
        "{}faults: [ {{ name: flaky, probability: 0.2, respond: {{ status: 503 }} }} ]\n",
        plan(&url, "")
    );
    let report = run(&first).await.expect("an empty server is scripted");
    assert!(
        report
            .plan
            .faults_from
            .contains("installed on the running fault-server")
    );
    // The plan's faults end with the run: a proxy in front of a real service would
    // otherwise keep failing its real traffic.
    let (after, origin) = in_force(&url).await;
    assert_eq!(after, before, "the server's own (empty) script is back");
    assert!(after.faults.is_empty());
    assert_eq!(origin, "control");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_a_harness_run_left_is_replaced_without_asking_and_put_back() {
    let server = fault_server::start(fault_server::ServerConfig::default())
        .await
        .expect("a fault-server");
    let url = server.url();
    // What an earlier run that never finished left behind, marked as a harness's.
    let left = reqwest::Client::new()
        .put(format!("{url}/__chaos/script"))
        .header(wire::SCRIPT_BY, wire::ORIGIN_HARNESS)
        .body("faults: [ { name: flaky, probability: 0.2, respond: { status: 503 } } ]\n")
        .send()
        .await
        .expect("a script");
    assert!(left.status().is_success());
    let (leftover, _) = in_force(&url).await;
    let next = run(&plan(&url, ""))
        .await
        .expect("the harness's own script is replaced");
    let once = policy(&next, "once");
    assert_eq!(once.succeeded, once.logical, "no fault was in force");
    assert_eq!(
        in_force(&url).await,
        (leftover, "harness".to_owned()),
        "put back as it was found, still the harness's"
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_someone_else_installs_during_a_run_makes_it_incomplete_naming_it() {
    let server = fault_server::start(fault_server::ServerConfig::default())
        .await
        .expect("a fault-server");
    let url = server.url();
    let yaml = plan(&url, "").replace("duration: 1s", "duration: 3s");
    let foreign = {
        let url = url.clone();
        tokio::spawn(async move {
            let client = reqwest::Client::new();
            // Once the run's traffic has begun: the ledger was reset for it.
            loop {
                let text = client
                    .get(format!("{url}/__chaos/ledger"))
                    .send()
                    .await
                    .expect("the ledger")
                    .text()
                    .await
                    .expect("text");
                let ledger: serde_json::Value = serde_json::from_str(&text).expect("json");
                if ledger["requests"].as_u64().unwrap_or(0) > 0 {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            let put = client
                .put(format!("{url}/__chaos/script"))
                .body(
                    "faults: [ { name: other-job, probability: 1.0, respond: { status: 503 } } ]\n",
                )
                .send()
                .await
                .expect("a script");
            assert!(put.status().is_success());
        })
    };
    let report = run(&yaml).await.expect("a report");
    foreign.await.expect("the foreign PUT");
    assert_eq!(report.verdict_label(), "INCOMPLETE");
    let error = report.error.as_deref().unwrap_or_default();
    assert!(
        error.contains("replaced during the run by someone else") && error.contains("other-job"),
        "{error}"
    );
    assert!(error.contains("policy `once`"), "{error}");
    assert!(
        policy(&report, "once").partial,
        "its figures are not the policy's"
    );
    server.shutdown().await;
}

#[test]
fn a_service_that_is_no_fault_server_gets_one_probe_and_a_hint_to_say_so() {
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let recorded = Arc::clone(&seen);
    // The user's own service: it answers 404 to what it does not know, like most.
    let url = runtime.block_on(async move {
        let app = axum::Router::new().fallback(move |request: axum::extract::Request| {
            let recorded = Arc::clone(&recorded);
            async move {
                recorded.lock().expect("lock").push(format!(
                    "{} {}",
                    request.method(),
                    request.uri().path()
                ));
                (
                    axum::http::StatusCode::NOT_FOUND,
                    "<!DOCTYPE HTML><html>not found</html>",
                )
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("an address");
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        format!("http://{addr}")
    });
    let dir = scratch("consent-not-a-fault-server");
    let path = write_plan(&dir, "plan.yaml", &plan(&url, ""));
    let out = harness()
        .current_dir(&dir)
        .args(["chaos", "--quiet"])
        .arg(&path)
        .output()
        .expect("run harness");
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let said = stderr(&out);
    assert!(
        said.contains("is not a fault-server") && said.contains("fault_server: false"),
        "{said}"
    );
    assert!(
        !said.contains("DOCTYPE"),
        "no HTML page in the message: {said}"
    );
    assert_eq!(
        *seen.lock().expect("lock"),
        ["GET /healthz"],
        "one probe, nothing else"
    );
    assert!(!dir.join("reports").exists(), "nothing ran");
}
