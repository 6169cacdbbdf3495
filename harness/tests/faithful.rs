//! The simulator against the live run: the same plan and seed, run both ways, must agree
//! on amplification (client and server) within 3% and on the success rate within 2
//! points, policy by policy.
//!
//! CI runs a short plan; `just sim-vs-live` runs every shipped plan (about ten minutes:
//! the live runs take real time) and prints the comparison.

mod common;

use std::path::Path;

use harness::report::Report;

/// Amplification may differ by this share, the success rate by this many points.
const AMPLIFICATION: f64 = 0.03;
const SUCCESS_POINTS: f64 = 2.0;

struct Row {
    plan: String,
    policy: String,
    live: [f64; 3],
    simulated: [f64; 3],
}

impl Row {
    fn failures(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (i, what) in ["client amplification", "server amplification"]
            .iter()
            .enumerate()
        {
            let (l, s) = (self.live[i], self.simulated[i]);
            if (s - l).abs() > AMPLIFICATION * l.max(1e-9) {
                out.push(format!(
                    "{} / {}: {what} live {l:.3}, simulated {s:.3} ({:+.1}%)",
                    self.plan,
                    self.policy,
                    (s / l - 1.0) * 100.0
                ));
            }
        }
        let (l, s) = (self.live[2], self.simulated[2]);
        if (s - l).abs() > SUCCESS_POINTS {
            out.push(format!(
                "{} / {}: success live {l:.1}%, simulated {s:.1}%",
                self.plan, self.policy
            ));
        }
        out
    }
}

fn figures(report: &Report, name: &str) -> [f64; 3] {
    let p = common::policy(report, name);
    [
        p.amplification.client,
        p.amplification.server.unwrap_or(f64::NAN),
        p.succeeded as f64 * 100.0 / (p.logical.max(1)) as f64,
    ]
}

fn compare(plan: &harness::plan::Plan) -> Vec<Row> {
    let live = common::live(plan);
    let simulated = common::simulated(plan);
    assert_eq!(simulated.mode, "simulated");
    live.policies
        .iter()
        .map(|p| Row {
            plan: plan.name.clone(),
            policy: p.name.clone(),
            live: figures(&live, &p.name),
            simulated: figures(&simulated, &p.name),
        })
        .collect()
}

fn print(rows: &[Row]) {
    eprintln!(
        "{:<16} {:<18} {:>22} {:>22} {:>18}",
        "plan", "policy", "client ampl live/sim", "server ampl live/sim", "success live/sim"
    );
    for r in rows {
        eprintln!(
            "{:<16} {:<18} {:>10.3} / {:<9.3} {:>10.3} / {:<9.3} {:>7} / {:<8}",
            r.plan,
            r.policy,
            r.live[0],
            r.simulated[0],
            r.live[1],
            r.simulated[1],
            format!("{:.1}%", r.live[2]),
            format!("{:.1}%", r.simulated[2])
        );
    }
}

const SHORT_OUTAGE: &str = r#"
name: short-outage
seed: 7
duration: 4s
drain: 2s
load:
  rate: 150
  arrivals: poisson
  requests:
    - { name: read,   method: GET,  path: "/items/{n}", weight: 3 }
    - { name: charge, method: POST, path: /payments, weight: 1, idempotency_key: true }
faults:
  - { name: outage, from: 1s, until: 2500ms, respond: [ { status: 503, weight: 6, retry_after: 1s }, { fault: reset, weight: 1 }, { fault: timeout, weight: 1 } ] }
  - { name: flaky, probability: 0.05, respond: [ { status: 429 } ] }
policies:
  - { name: naive, max_attempts: 4, attempt_timeout: 500ms, backoff: { fixed: 100ms } }
  - name: budgeted
    max_attempts: 4
    attempt_timeout: 500ms
    backoff: { exponential: { base: 50ms, multiplier: 2, cap: 1s }, jitter: full }
    budget: { ratio: 0.1, min_per_sec: 5, ttl: 10s }
"#;

#[test]
fn a_short_outage_simulated_agrees_with_the_live_run() {
    let rows = compare(&common::plan(SHORT_OUTAGE));
    print(&rows);
    let failures: Vec<String> = rows.iter().flat_map(Row::failures).collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// `just sim-vs-live`: every shipped plan the simulator models, live and simulated.
#[test]
#[ignore = "runs every shipped plan live: minutes; `just sim-vs-live`"]
fn every_shipped_plan_simulated_agrees_with_its_live_run() {
    let dir = common::repo().join("plans");
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .expect("plans/")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    names.sort();
    let only = std::env::var("PLANS").unwrap_or_default();
    let mut rows = Vec::new();
    for path in names {
        let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
        if !only.is_empty() && !only.split(',').any(|o| o == stem) {
            continue;
        }
        let mut plan = harness::plan::load(&path).unwrap_or_else(|e| panic!("{e}"));
        if !simulable(&plan, &path) {
            continue;
        }
        // A plan aimed at a running fault-server (compose) runs against an embedded one.
        plan.target = harness::plan::Target::Embedded;
        eprintln!("running {} live, then simulated", path.display());
        rows.extend(compare(&plan));
    }
    print(&rows);
    let failures: Vec<String> = rows.iter().flat_map(Row::failures).collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

fn simulable(plan: &harness::plan::Plan, path: &Path) -> bool {
    let ok = harness::simulate::simulate(plan, &[]).is_ok();
    if !ok {
        eprintln!(
            "skipping {}: the simulator does not model it",
            path.display()
        );
    }
    ok
}
