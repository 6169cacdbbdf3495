//! The simulator against the live run: the same plan and seed, run both ways, must agree
//! on amplification (client and server) within 3% and on the success rate within 2
//! points, policy by policy.
//!
//! CI runs a short outage, and a call chain with partial failure (plans/chain-partial.yaml)
//! compared hop by hop; `just sim-vs-live` runs every shipped plan (about ten minutes: the
//! live runs take real time) and prints the comparison.

mod common;

use std::path::Path;
use std::sync::{Mutex, PoisonError};

use harness::report::{PolicyReport, Report};

/// Amplification may differ by this share, the success rate by this many points: the
/// library's own figures, which `harness tune` confirms its choices against.
const AMPLIFICATION: f64 = harness::simulate::FAITHFUL_AMPLIFICATION;
const SUCCESS_POINTS: f64 = harness::simulate::FAITHFUL_SUCCESS_POINTS;

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
    let (live, simulated) = both(plan);
    rows(plan, &live, &simulated)
}

/// Live runs take turns. Two at once on a 2-core machine load each other: with both
/// cores busy, the short outage's naive policy measured up to 4 points more success live
/// (its retries around the outage's end are timed by the OS's timers).
static LIVE: Mutex<()> = Mutex::new(());

/// The plan run live, then simulated.
fn both(plan: &harness::plan::Plan) -> (Report, Report) {
    let live = {
        let _turn = LIVE.lock().unwrap_or_else(PoisonError::into_inner);
        common::live(plan)
    };
    let simulated = common::simulated(plan);
    assert_eq!(simulated.mode, "simulated");
    (live, simulated)
}

fn rows(plan: &harness::plan::Plan, live: &Report, simulated: &Report) -> Vec<Row> {
    live.policies
        .iter()
        .map(|p| Row {
            plan: plan.name.clone(),
            policy: p.name.clone(),
            live: figures(live, &p.name),
            simulated: figures(simulated, &p.name),
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

/// A call chain with partial failure (plans/chain-partial.yaml): client → api → backend →
/// leaf, half the leaf's attempts failing (503s, resets, hangs), `api` shedding 5% with
/// faults of its own, `backend` slow for 10%; one policy retries at every hop, the other
/// at `backend` within a budget (and the client retries the sheds). Every hop's figures,
/// not only the client's, are held to the documented tolerance.
///
/// Measured on the project's 2-vCPU machine kind (debug build, seed 12, 196 logical
/// requests a policy, ten runs, five of them with both cores busy with other work): every
/// figure of `everywhere` agreed exactly but once under load, when two leaf attempts were
/// served after the backend's 200 ms attempt timeout had run out and were retried (the
/// backend sent 377 live, 375 simulated: 0.5%). In `one-tier` the backend's budget lets
/// a retry through to a different request live than simulated (when a budget runs dry
/// depends on when its requests end): 153 to 156 requests succeeded live at every hop,
/// 154 simulated, under a point apart. The live run takes about 5 s.
#[test]
fn a_call_chain_with_partial_failure_agrees_hop_by_hop() {
    let plan = harness::plan::load(&common::repo().join("plans/chain-partial.yaml"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(plan.tiers.len() >= 2, "the plan runs through relay tiers");
    let started = std::time::Instant::now();
    let (live, simulated) = both(&plan);
    eprintln!(
        "live and simulated in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let rows = rows(&plan, &live, &simulated);
    print(&rows);
    let mut failures: Vec<String> = rows.iter().flat_map(Row::failures).collect();
    for l in &live.policies {
        let s = common::policy(&simulated, &l.name);
        for report in [l, s] {
            partial_failure_at_every_hop(report);
        }
        let hops = hop_figures(&plan, l, s);
        print_hops(&hops);
        failures.extend(hops.iter().filter_map(HopFigure::failure));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// plans/grpc-outage.yaml: gRPC calls over HTTP/2, UNAVAILABLE with pushback, then a
/// GOAWAY and refused-stream storm. Measured (debug build, seed 29, 845 calls a policy):
/// every count agreed exactly but the naive policy's, 1789 attempts live against 1791
/// simulated. The streams a GOAWAY sends away before the server reads them are live only.
#[test]
fn the_grpc_outage_simulated_agrees_with_the_live_run() {
    let plan = harness::plan::load(&common::repo().join("plans/grpc-outage.yaml"))
        .unwrap_or_else(|e| panic!("{e}"));
    let rows = compare(&plan);
    print(&rows);
    let failures: Vec<String> = rows.iter().flat_map(Row::failures).collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The plan is what the test says it is: at every hop some attempts failed and some
/// succeeded, more than one hop retried, and each hop's counts agree with the next one's.
fn partial_failure_at_every_hop(p: &PolicyReport) {
    let ledger = p.ledger.as_ref().expect("a ledger");
    let served = ledger.by_outcome.get("served").copied().unwrap_or(0);
    let mut hops = vec![("client", p.attempts, p.succeeded, p.retries)];
    hops.extend(
        p.tiers
            .iter()
            .map(|t| (t.name.as_str(), t.sent, t.succeeded, t.retries)),
    );
    // A session that succeeded had one attempt succeed; every other attempt failed.
    for (hop, sent, succeeded, _) in &hops {
        assert!(
            *succeeded > 0 && sent > succeeded,
            "{}: at {hop} {sent} attempts, {succeeded} succeeded: not a partial failure",
            p.name
        );
    }
    assert!(
        served > 0 && ledger.attempts > served,
        "{}: the leaf served {served} of {} attempts",
        p.name,
        ledger.attempts
    );
    let retrying = hops.iter().filter(|h| h.3 > 0).count();
    assert!(retrying >= 2, "{}: only {retrying} hop(s) retried", p.name);
    assert!(
        p.tiers.iter().all(|t| t.agrees),
        "{}: {:?}",
        p.name,
        p.tiers
    );
    assert!(ledger.reconciled, "{}: {:?}", p.name, p.gates);
}

/// One figure of one hop, live and simulated, and how far apart they may be, in the
/// figure's own unit.
struct HopFigure {
    plan: String,
    policy: String,
    hop: String,
    what: String,
    live: f64,
    simulated: f64,
    within: f64,
}

impl HopFigure {
    fn failure(&self) -> Option<String> {
        ((self.simulated - self.live).abs() > self.within + 1e-9).then(|| {
            format!(
                "{} / {} / {}: {} live {:.4}, simulated {:.4} (at most {:.4} apart)",
                self.plan, self.policy, self.hop, self.what, self.live, self.simulated, self.within
            )
        })
    }
}

/// What a figure of a hop is, which says how far apart live and simulated may be.
#[derive(Clone, Copy)]
enum Kind {
    /// Attempts per logical request of the client: an amplification, within 3%.
    Amplification,
    /// A part of an amplification of the same hop (its retries, of what it sent): it may
    /// move as much as the whole may, 3% of the whole.
    PartOf(f64),
    /// A share of what the hop handled, in percent: within 2 points.
    Rate,
}

/// One hop's figure in one run.
struct Figure {
    hop: String,
    what: String,
    value: f64,
    kind: Kind,
}

/// Every hop's figures in one run: the client, each tier, the leaf (its ledger; one rate
/// for each outcome of `outcomes`).
fn chain_figures(p: &PolicyReport, outcomes: &[String]) -> Vec<Figure> {
    let per = |n: u64| n as f64 / p.logical.max(1) as f64;
    let pct = |n: u64, of: u64| n as f64 * 100.0 / of.max(1) as f64;
    let mut out = Vec::new();
    let mut push = |hop: &str, what: &str, value: f64, kind: Kind| {
        out.push(Figure {
            hop: hop.to_owned(),
            what: what.to_owned(),
            value,
            kind,
        });
    };
    push(
        "client",
        "attempts per request",
        per(p.attempts),
        Kind::Amplification,
    );
    push(
        "client",
        "retries per request",
        per(p.retries),
        Kind::PartOf(per(p.attempts)),
    );
    push(
        "client",
        "succeeded, % of requests",
        pct(p.succeeded, p.logical),
        Kind::Rate,
    );
    for t in &p.tiers {
        let hop = t.name.as_str();
        // The tier's sessions: what it received and did not answer with a fault of its own.
        let sessions = t.received.saturating_sub(t.faulted);
        push(
            hop,
            "received per request",
            per(t.received),
            Kind::Amplification,
        );
        push(
            hop,
            "first attempts per request",
            per(t.logical),
            Kind::Amplification,
        );
        push(hop, "sent per request", per(t.sent), Kind::Amplification);
        push(
            hop,
            "retries per request",
            per(t.retries),
            Kind::PartOf(per(t.sent)),
        );
        push(
            hop,
            "faulted, % of received",
            pct(t.faulted, t.received),
            Kind::Rate,
        );
        push(
            hop,
            "succeeded, % of sessions",
            pct(t.succeeded, sessions),
            Kind::Rate,
        );
        push(
            hop,
            "gave up, % of sessions",
            pct(t.gave_up, sessions),
            Kind::Rate,
        );
        push(
            hop,
            "marked no-retry, % of sent",
            pct(t.no_retry_received, t.sent),
            Kind::Rate,
        );
    }
    let ledger = p.ledger.as_ref().expect("a ledger");
    push(
        "leaf",
        "attempts per request",
        per(ledger.attempts),
        Kind::Amplification,
    );
    push(
        "leaf",
        "logical per request",
        per(ledger.logical),
        Kind::Amplification,
    );
    for outcome in outcomes {
        let n = ledger.by_outcome.get(outcome).copied().unwrap_or(0);
        push(
            "leaf",
            &format!("{outcome}, % of attempts"),
            pct(n, ledger.attempts),
            Kind::Rate,
        );
    }
    out
}

/// Every hop's figures, live against simulated. The documented bound (docs/simulator.md)
/// is 3% of an amplification and 2 points of a success rate: both runs make the same
/// decisions from the same seeds, and only when things happen differs (the network
/// model, the engine's own delays, a phase boundary, and so which retries a budget or a
/// deadline lets through). A hop's count of attempts (received, first attempts, sent; the
/// leaf's attempts and logical requests) per logical request of the client is that hop's
/// amplification: within 3%, and its retries, part of what it sent, may move as much as
/// its sent count. A count of what a hop decided or was told (succeeded, gave up,
/// faulted, answers marked `x-chaos-no-retry`, each outcome in the leaf's ledger) is a
/// rate of what it handled, as the success rate is: within 2 points.
fn hop_figures(
    plan: &harness::plan::Plan,
    live: &PolicyReport,
    simulated: &PolicyReport,
) -> Vec<HopFigure> {
    let hops = |p: &PolicyReport| p.tiers.iter().map(|t| t.name.clone()).collect::<Vec<_>>();
    assert_eq!(hops(live), hops(simulated), "{}: the same tiers", live.name);
    // Every outcome either ledger saw, in both.
    let mut outcomes: Vec<String> = [live, simulated]
        .iter()
        .filter_map(|p| p.ledger.as_ref())
        .flat_map(|l| l.by_outcome.keys().cloned())
        .collect();
    outcomes.sort();
    outcomes.dedup();
    chain_figures(live, &outcomes)
        .into_iter()
        .zip(chain_figures(simulated, &outcomes))
        .map(|(l, s)| HopFigure {
            plan: plan.name.clone(),
            policy: live.name.clone(),
            within: match l.kind {
                Kind::Amplification => AMPLIFICATION * l.value,
                Kind::PartOf(whole) => AMPLIFICATION * whole,
                Kind::Rate => SUCCESS_POINTS,
            },
            hop: l.hop,
            what: l.what,
            live: l.value,
            simulated: s.value,
        })
        .collect()
}

fn print_hops(figures: &[HopFigure]) {
    eprintln!(
        "{:<16} {:<18} {:<8} {:<30} {:>10} {:>10} {:>9}",
        "plan", "policy", "hop", "figure", "live", "simulated", "within"
    );
    for f in figures {
        eprintln!(
            "{:<16} {:<18} {:<8} {:<30} {:>10.4} {:>10.4} {:>9.4}",
            f.plan, f.policy, f.hop, f.what, f.live, f.simulated, f.within
        );
    }
}

/// `just sim-vs-live`: every shipped plan the simulator models, live and simulated; behind
/// relay tiers, hop by hop as well.
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
    let mut hops = Vec::new();
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
        let (live, simulated) = both(&plan);
        rows.extend(self::rows(&plan, &live, &simulated));
        // Behind relay tiers, every hop's figures too.
        if !plan.tiers.is_empty() {
            for l in &live.policies {
                hops.extend(hop_figures(&plan, l, common::policy(&simulated, &l.name)));
            }
        }
    }
    print(&rows);
    print_hops(&hops);
    let failures: Vec<String> = rows
        .iter()
        .flat_map(Row::failures)
        .chain(hops.iter().filter_map(HopFigure::failure))
        .collect();
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
