//! `load.max_connections`: the client never has more attempts on the wire than its cap,
//! attempts beyond it wait in turn, and one whose timeout runs out while it waits is a
//! `connect_timeout` that never reached the server. Live (the real engine against the
//! embedded fault-server) and simulated alike.

mod common;

use common::{live, simulated};
use harness::report::PolicyReport;

fn outcome(p: &PolicyReport, name: &str) -> u64 {
    p.outcomes.get(name).copied().unwrap_or(0)
}

/// A server that serves one request at a time and refuses (503) any that comes while it
/// is busy, fed faster than it serves.
fn one_at_a_time(cap: &str) -> String {
    format!(
        r#"
name: one-connection
duration: 1s
drain: 10s
load:
  rate: 40
  arrivals: uniform
  {cap}
  requests: [ {{ name: read, path: "/items/{{n}}" }} ]
server: {{ capacity: 1, queue: 0, service_time: 30ms }}
policies: [ {{ name: single, max_attempts: 1 }} ]
"#
    )
}

#[test]
fn one_connection_means_one_attempt_at_a_time_on_the_server() {
    let plan = common::plan(&one_at_a_time("max_connections: 1"));
    for (mode, report) in [("live", live(&plan)), ("simulated", simulated(&plan))] {
        let p = common::policy(&report, "single");
        // An arrival every 25 ms, each 30 ms of service: every one overlaps the one
        // before; one connection turns that into a queue, never a refusal.
        assert_eq!(p.logical, 40, "{mode}");
        assert_eq!(p.succeeded, 40, "{mode}: {:?}", p.outcomes);
        assert_eq!(outcome(p, "503"), 0, "{mode}: the server saw two at once");
        let wait = p
            .connection_wait
            .as_ref()
            .unwrap_or_else(|| panic!("{mode}: a capped run reports its waits"));
        assert_eq!((wait.max_connections, wait.timed_out), (1, 0), "{mode}");
        assert!(wait.wait_ms.max > 0.0, "{mode}: {wait:?}");
        assert!(
            p.latency_ms.max >= wait.wait_ms.max,
            "{mode}: the latency counts the wait"
        );
    }

    // The same load with a connection per attempt: arrivals overlap on the server, which
    // refuses them.
    let uncapped = common::plan(&one_at_a_time("max_connections: per_attempt"));
    for (mode, report) in [
        ("live", live(&uncapped)),
        ("simulated", simulated(&uncapped)),
    ] {
        let p = common::policy(&report, "single");
        assert!(outcome(p, "503") > 0, "{mode}: {:?}", p.outcomes);
        assert!(p.connection_wait.is_none(), "{mode}: no cap, no waits");
        if mode == "live" {
            let opened = p
                .connections_opened
                .expect("a live run counts its connects");
            assert!(
                opened.total >= 2,
                "{mode}: two at once need two: {opened:?}"
            );
        } else {
            assert!(p.connections_opened.is_none(), "the simulator has none");
        }
    }
}

/// Without `max_connections` the client has a cap all the same, oha's and hey's 50, so
/// a stall of the server cannot become a connection storm in the load generator.
#[test]
fn a_plan_without_a_cap_gets_the_default_one() {
    let plan = common::plan(&one_at_a_time(""));
    assert_eq!(plan.load.max_connections, Some(50));
    let report = live(&plan);
    let p = common::policy(&report, "single");
    let wait = p.connection_wait.as_ref().expect("capped by default");
    assert_eq!(wait.max_connections, 50);
    let opened = p.connections_opened.expect("counted live");
    assert!((1..=50).contains(&opened.total), "{opened:?}");
    assert!(opened.peak_per_second <= opened.total, "{opened:?}");
    assert!(
        report
            .warnings
            .iter()
            .all(|w| !w.contains("busiest second")),
        "{:?}",
        report.warnings
    );
}

/// A target that resets every connection makes the client reconnect for every attempt:
/// at 1,500 attempts in a second that is a storm, counted and warned of.
#[test]
fn connects_at_a_storm_rate_are_counted_and_warned_of() {
    let plan = common::plan(
        r#"
name: resets
duration: 1s
drain: 2s
load:
  rate: 1500
  arrivals: uniform
  requests: [ { name: read, path: "/items/{n}" } ]
faults: [ { name: rst, respond: { fault: reset } } ]
policies: [ { name: single, max_attempts: 1 } ]
"#,
    );
    let report = live(&plan);
    let p = common::policy(&report, "single");
    let opened = p.connections_opened.expect("counted live");
    // Every attempt needed a connection of its own: none survived its reset.
    assert_eq!(opened.total, p.attempts, "{opened:?} {:?}", p.outcomes);
    assert!(opened.peak_per_second > 1000, "{opened:?}");
    assert!(
        report
            .warnings
            .iter()
            .any(|w| w.contains("connections in its busiest second")
                && w.contains("closed connections as fast as they were made")),
        "{:?}",
        report.warnings
    );
}

/// One connection that the server holds past every timeout. Waiters are served first
/// come first served, and the one ahead always times out before the one behind would, so
/// with one timeout for all a wait never runs out: what makes one run out is a retry,
/// whose timeout the request's deadline has cut short, queued behind first attempts.
const STARVED: &str = r#"
name: starved
duration: 1s
drain: 5s
load:
  rate: 50
  arrivals: uniform
  max_connections: 1
  requests: [ { name: read, path: "/items/{n}" } ]
faults: [ { name: hung, respond: { fault: delay, delay: 1s } } ]
policies:
  - name: retrying
    max_attempts: 3
    attempt_timeout: 300ms
    deadline: 400ms
    backoff: { fixed: 10ms }
"#;

#[test]
fn an_attempt_that_waits_out_its_timeout_is_a_connect_timeout_that_never_reached_the_server() {
    let plan = common::plan(STARVED);
    for (mode, report) in [("live", live(&plan)), ("simulated", simulated(&plan))] {
        let p = common::policy(&report, "retrying");
        let wait = p.connection_wait.as_ref().expect("a capped run");
        let timed_out = outcome(p, "connect_timeout");
        assert_eq!(wait.timed_out, timed_out, "{mode}: {:?}", p.outcomes);
        assert!(timed_out > 0, "{mode}: {:?}", p.outcomes);
        assert_eq!(p.succeeded, 0, "{mode}: the server answers nothing in time");
        // Waits never reach the server: its ledger holds the other attempts only.
        let ledger = p.ledger.as_ref().expect("the embedded server's ledger");
        assert_eq!(
            ledger.attempts,
            p.attempts - timed_out,
            "{mode}: {ledger:?}"
        );
        assert!(ledger.reconciled, "{mode}: {ledger:?}");
        // Live, a slot that comes free as the timeout fires is seen late by as much as
        // the machine delays a wake-up: the bound is the timeout plus that slack.
        let slack = if mode == "live" { 100.0 } else { 0.5 };
        assert!(
            wait.wait_ms.max <= 300.0 + slack,
            "{mode}: a wait outlasted the timeout that covers it: {wait:?}"
        );
        assert!(p.retries > 0, "{mode}: {:?}", p.outcomes);
        assert!(
            report
                .warnings
                .iter()
                .any(|w| w.contains("ran out of time waiting for one of its 1 connections")),
            "{mode}: {:?}",
            report.warnings
        );
    }
}

/// The real binary, on one worker thread, with a capped plan: the report says what the
/// cap cost; and a thread count of 0 is refused before anything runs.
#[test]
fn one_thread_and_a_cap_run_end_to_end_from_the_command_line() {
    let dir = common::scratch("connections-cli");
    let plan = common::write_plan(&dir, "capped.yaml", &one_at_a_time("max_connections: 1"));
    let out = common::harness()
        .current_dir(&dir)
        .args(["chaos", "--quiet", "--threads", "1"])
        .arg(&plan)
        .output()
        .expect("run harness");
    assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
    let report: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("reports/one-connection/latest/report.json"))
            .expect("report.json"),
    )
    .expect("json");
    let p = &report["policies"][0];
    assert_eq!(p["succeeded"], 40, "{p}");
    assert_eq!(p["connection_wait"]["max_connections"], 1, "{p}");
    let md = std::fs::read_to_string(dir.join("reports/one-connection/latest/report.md"))
        .expect("report.md");
    assert!(md.contains("At most 1 connection:"), "{md}");
    assert!(
        md.contains("The client opened 1 connection (1 in its busiest second)."),
        "{md}"
    );
    assert_eq!(p["connections_opened"]["total"], 1, "{p}");

    let out = common::harness()
        .args(["chaos", "--threads", "0"])
        .arg(&plan)
        .output()
        .expect("run harness");
    assert_eq!(out.status.code(), Some(2), "{}", common::stderr(&out));
    assert!(
        common::stderr(&out).contains("--threads"),
        "{}",
        common::stderr(&out)
    );
}
