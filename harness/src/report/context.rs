//! The one report builder: a run's policies and everything else the report says of the
//! run (its mode, id, how it ended, the faults in force, telemetry, shards), given up
//! front, so that no shell patches a report after it is made.

use std::collections::BTreeSet;

use super::model::{PlanInfo, PolicyReport, Report, SCHEMA, ShardsInfo, TelemetryView};
use crate::plan::{Plan, Target};

/// Which shell measured the run: the report's `mode`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Mode {
    /// Real sockets in real time (`harness chaos`, `harness merge`).
    #[default]
    Live,
    /// The same plan and policy core in virtual time (`harness simulate`).
    Simulated,
    /// A program under test, judged by the ledger (`harness client-test`).
    Client,
}

impl Mode {
    /// The report's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Live => "live",
            Mode::Simulated => "simulated",
            Mode::Client => "client",
        }
    }
}

/// How a run ended, besides its measurements.
#[derive(Debug, Clone, Default)]
pub struct Ending {
    /// Interrupted by the user.
    pub aborted: bool,
    /// Why the run could not be completed.
    pub error: Option<String>,
    pub generated_at: String,
}

/// The faults in force, where the run knows better than the plan: a running
/// fault-server's own script kept, or a sharded run's keeper's account. `None` leaves the
/// plan's word.
#[derive(Debug, Clone, Default)]
pub struct FaultsInForce {
    /// The target as the run saw it.
    pub target: Option<String>,
    /// The names of the fault phases in force.
    pub phases: Option<Vec<String>>,
    /// Where they came from.
    pub from: Option<String>,
}

/// A warning another process reported (a shard's), said once, after `from`.
#[derive(Debug, Clone)]
pub struct Relayed {
    /// Who said it: `shard 2`.
    pub from: String,
    pub text: String,
}

/// Everything the report says of a run besides its policies' figures.
#[derive(Debug, Clone, Default)]
pub struct RunContext {
    pub mode: Mode,
    /// This run among every run of every plan ([`super::run_id`]); empty for none yet.
    pub run_id: String,
    pub ending: Ending,
    pub faults: FaultsInForce,
    /// The run's own warnings, after those of the plan and of the figures.
    pub warnings: Vec<String>,
    /// Other processes' warnings, after those: each one the report does not say already.
    pub relayed: Vec<Relayed>,
    pub telemetry: Option<TelemetryView>,
    pub shards: Option<ShardsInfo>,
}

impl RunContext {
    /// A run of `mode` that ended as `ending`, with nothing else to say.
    pub fn new(mode: Mode, ending: Ending) -> RunContext {
        RunContext {
            mode,
            ending,
            ..RunContext::default()
        }
    }
}

/// A run's policies, each one's report made as it ended, and the run's context: what a
/// shell hands its caller, which adds what only it knows (the run's id, its telemetry)
/// before the report is built, once.
#[derive(Debug)]
pub struct Draft {
    pub policies: Vec<PolicyReport>,
    pub context: RunContext,
}

impl Draft {
    /// The report of the run.
    pub fn build(self, plan: &Plan) -> Report {
        build(plan, self.policies, self.context)
    }
}

/// Above this share of dropped arrivals the planned load was not delivered: say so.
pub const DROPPED_WARNING: f64 = 0.01;

/// A warning when more than [`DROPPED_WARNING`] of a policy's arrivals were dropped.
fn undelivered(plan: &Plan, p: &PolicyReport) -> Option<String> {
    (p.dropped as f64 > DROPPED_WARNING * p.offered as f64).then(|| {
        format!(
            "policy `{}` dropped {} of its {} arrivals ({:.1}%) at max_in_flight {}: the planned load was not delivered; raise load.max_in_flight or lower the rate, and gate on `{{ metric: dropped_ratio, max: {DROPPED_WARNING} }}`",
            p.name,
            p.dropped,
            p.offered,
            p.dropped as f64 * 100.0 / p.offered as f64,
            plan.load.max_in_flight
        )
    })
}

/// A warning when more than [`DROPPED_WARNING`] of a policy's attempts ran out of time
/// waiting for one of the client's capped connections: the cap, not the server, failed
/// them.
fn starved_of_connections(p: &PolicyReport) -> Option<String> {
    let wait = p.connection_wait.as_ref()?;
    (wait.timed_out as f64 > DROPPED_WARNING * p.attempts as f64).then(|| {
        format!(
            "policy `{}`: {} of its {} attempts ({:.1}%) ran out of time waiting for one of its {} connections (load.max_connections) and never reached the server; raise the cap if the production client allows more",
            p.name,
            wait.timed_out,
            p.attempts,
            wait.timed_out as f64 * 100.0 / p.attempts.max(1) as f64,
            wait.max_connections
        )
    })
}

/// Above this many connections opened in one second, the load generator is busy making
/// connections: on the bench machine a storm of 9,000 a second left two arrivals in three
/// unsent (docs/benchmarks.md), while a capped client makes a few in a whole run.
pub(super) const CONNECT_STORM_PER_SECOND: u64 = 1_000;

/// A warning when the client opened connections at a storm's rate: then the run measured
/// the load generator's connects as much as the target.
fn connection_storm(plan: &Plan, p: &PolicyReport) -> Option<String> {
    let opened = p.connections_opened?;
    (opened.peak_per_second > CONNECT_STORM_PER_SECOND).then(|| {
        let advice = match plan.load.connection_cap() {
            None if !plan.load.protocol.is_http2() => format!("`load.max_connections: per_attempt` opens one for every attempt that finds none idle; give a cap (the default is {}) unless the production client has none", crate::plan::DEFAULT_MAX_CONNECTIONS),
            _ => "the target closed connections as fast as they were made (resets, lost responses, GOAWAY); the figures include the cost of reconnecting".to_owned(),
        };
        format!(
            "policy `{}`: the client opened {} connections in its busiest second ({} in the run): {advice}",
            p.name, opened.peak_per_second, opened.total
        )
    })
}

/// What a reader should know before trusting the figures: the plan's warnings, the
/// figures' own, the run's, then what other processes relayed that is not said already.
fn warnings(plan: &Plan, policies: &[PolicyReport], context: &mut RunContext) -> Vec<String> {
    let mut said: Vec<String> = plan
        .warnings
        .iter()
        .map(|w| w.message.clone())
        .chain(policies.iter().filter_map(|p| undelivered(plan, p)))
        .chain(policies.iter().filter_map(starved_of_connections))
        .chain(policies.iter().filter_map(|p| connection_storm(plan, p)))
        .chain(std::mem::take(&mut context.warnings))
        .collect();
    let mut seen: BTreeSet<String> = said.iter().cloned().collect();
    for Relayed { from, text } in std::mem::take(&mut context.relayed) {
        if !seen.contains(&text) {
            said.push(format!("{from}: {text}"));
            seen.insert(text);
        }
    }
    said
}

/// How the report's target names a service the embedded fault-server stands in front of
/// (`target: { upstream }`): the words before its address.
pub(super) const IN_FRONT_OF: &str = "embedded, in front of ";

/// The plan as the report describes it, with the faults the run says were in force.
fn plan_info(plan: &Plan, faults: FaultsInForce) -> PlanInfo {
    PlanInfo {
        name: plan.name.clone(),
        file: plan.file.display().to_string(),
        description: plan.description.clone(),
        seed: plan.seed,
        duration_s: plan.duration.as_secs_f64(),
        target: faults.target.unwrap_or_else(|| match &plan.target {
            Target::Embedded => "embedded".to_owned(),
            Target::Proxy { upstream } => format!("{IN_FRONT_OF}{upstream}"),
            Target::FaultServer { url, .. } | Target::BlackBox { url } => url.clone(),
        }),
        ledger: plan.target.has_ledger(),
        faults: faults.phases.unwrap_or_else(|| plan.script.phase_names()),
        faults_from: faults.from.unwrap_or_else(|| {
            match plan.target {
                Target::BlackBox { .. } => "none: a black box gets only the plan's requests",
                _ => "the plan",
            }
            .to_owned()
        }),
        fault_window_s: plan
            .fault_window
            .map(|(a, b)| [a.as_secs_f64(), b.as_secs_f64()]),
        digest: Some(plan.digest()),
    }
}

/// The report of a run: each policy's report as it was made when the policy ended
/// ([`super::policy_report`]), and the run's context.
pub fn build(plan: &Plan, policies: Vec<PolicyReport>, mut context: RunContext) -> Report {
    let ending = std::mem::take(&mut context.ending);
    let pass =
        !ending.aborted && ending.error.is_none() && policies.iter().all(PolicyReport::as_expected);
    let unfinished = if ending.aborted {
        Some("was interrupted")
    } else if ending.error.is_some() {
        Some("could not be completed")
    } else {
        None
    };
    Report {
        schema: SCHEMA.to_owned(),
        mode: context.mode.as_str().to_owned(),
        verdict: if pass { "pass" } else { "fail" }.to_owned(),
        aborted: ending.aborted,
        generated_at: ending.generated_at,
        run_id: std::mem::take(&mut context.run_id),
        error: ending.error,
        warnings: warnings(plan, &policies, &mut context),
        plan: plan_info(plan, std::mem::take(&mut context.faults)),
        ranking: super::rank::rank_run(&policies, unfinished),
        telemetry: context.telemetry,
        shards: context.shards,
        policies,
        baseline: None,
    }
}
