//! The simulator: a plan in virtual time, through the very policy code that runs live.
//!
//! `harness simulate PLAN` is the third shell around `chaos-policy` (after the live engine
//! and the relay tier): a discrete-event loop on one thread ([`world`]) that drives each
//! policy's [`chaos_policy::Client`] and one [`chaos_policy::Session`] per logical request,
//! against a modelled fault-server ([`server`]) built from the fault-server's own pure
//! parts (the script's selection, the capacity model, the ledger), over a modelled
//! network ([`network`]). It fills the same `Recorder` and ledger a live run does, so the
//! report, its gates, baselines and comparisons are the live ones; the report says
//! `mode: simulated`.
//!
//! Deterministic: the same plan and seed give the same figures. Its memory is the
//! requests in flight (and the ledger, bounded as live), not the run's length.

mod bound;
mod hops;
mod lazy;
mod network;
mod proxy;
mod queue;
mod request;
mod server;
mod slab;
pub mod sweep;
mod tier;
mod timers;
mod world;

use std::time::{Duration, Instant, SystemTime};

use fault_server::script::Script;
use tokio_util::sync::CancellationToken;

use crate::plan::{Plan, Target};
use crate::report::{self, Draft, Ending, Mode, PolicyOutcome, Report, RunContext};
use crate::schedule::Schedule;

pub use world::{Scratch, Simulated, run as run_policy, run_arrivals};

/// Why a plan cannot be simulated (exit code 2: it is the plan's or the command's).
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("no policy of the plan is named {0}")]
    UnknownPolicy(String),
    #[error(
        "a black-box target (`fault_server: false`) cannot be simulated: nothing models what it does"
    )]
    BlackBox,
    #[error("the plan's fault script does not resolve: {0}")]
    Script(String),
}

/// What a simulation took, besides its report.
#[derive(Debug, Clone, Copy, Default)]
pub struct Effort {
    /// Logical requests offered, over every policy.
    pub logical: u64,
    /// Events handled (arrivals, deliveries, service ends, timers).
    pub events: u64,
    /// The most events that waited at once in one policy's run: what its memory holds.
    pub peak_pending: usize,
    /// Wall time.
    pub wall: Duration,
    /// The process's peak resident memory when the simulation ended, in KiB.
    pub peak_kib: Option<u64>,
}

impl Effort {
    /// One line for the terminal.
    pub fn describe(&self) -> String {
        format!(
            "simulated {} logical requests ({} events, at most {} waiting) in {:.3} s: {:.2} M logical requests per second",
            self.logical,
            self.events,
            self.peak_pending,
            self.wall.as_secs_f64(),
            self.rate() / 1e6
        ) + &self
            .peak_kib
            .map(|kib| format!("; peak memory {:.1} MB", kib as f64 / 1024.0))
            .unwrap_or_default()
    }

    /// Logical requests simulated per second of wall time.
    pub fn rate(&self) -> f64 {
        self.logical as f64 / self.wall.as_secs_f64().max(1e-9)
    }
}

/// How closely a simulated run agrees with the live run of the same plan and seed, as
/// `tests/faithful.rs` holds it and docs/simulator.md documents it: amplification (client
/// and server) within this share of the live figure...
pub const FAITHFUL_AMPLIFICATION: f64 = 0.03;
/// ...and the success rate within this many percentage points.
pub const FAITHFUL_SUCCESS_POINTS: f64 = 2.0;

/// Simulates every selected policy of `plan` (all when `policies` is empty) and builds
/// the report.
pub fn simulate(plan: &Plan, policies: &[String]) -> Result<(Report, Effort), SimError> {
    simulate_until(plan, policies, &CancellationToken::new(), |_| {})
}

/// [`simulate`], stopping once `stop` is cancelled ([`simulate_draft`]), and builds the
/// report.
pub fn simulate_until(
    plan: &Plan,
    policies: &[String],
    stop: &CancellationToken,
    starting: impl FnMut(&str),
) -> Result<(Report, Effort), SimError> {
    let (draft, effort) = simulate_draft(plan, policies, stop, starting)?;
    Ok((draft.build(plan), effort))
}

/// [`simulate`], stopping once `stop` is cancelled (the user's interrupt): the policy
/// running then stops at its next checkpoint, counted as a live run stopped by Ctrl-C is,
/// no later policy runs, and the report is marked aborted. `starting` is told each
/// policy's name as its run begins. The policies' reports and the run's context, for the
/// caller to add its run id to before the report is built.
pub fn simulate_draft(
    plan: &Plan,
    policies: &[String],
    stop: &CancellationToken,
    mut starting: impl FnMut(&str),
) -> Result<(Draft, Effort), SimError> {
    let selected = crate::plan::select(plan, policies)
        .map_err(|crate::plan::UnknownPolicy(name)| SimError::UnknownPolicy(name))?;
    if let Target::BlackBox { .. } = plan.target {
        return Err(SimError::BlackBox);
    }
    let script =
        Script::from_spec(plan.script.clone()).map_err(|e| SimError::Script(e.to_string()))?;
    let started = Instant::now();
    let mut effort = Effort::default();
    let mut outcomes = Vec::new();
    let mut scratch = Scratch::default();
    // A policy cut short ends the run there, as a live one whose target is gone does.
    let mut error = None;
    let mut aborted = false;
    for policy in selected {
        if stop.is_cancelled() {
            aborted = true;
            break;
        }
        starting(&policy.name);
        let Simulated {
            run,
            ledger,
            events,
            peak_pending,
            tiers,
            proxies,
        } = run_arrivals(
            plan,
            policy,
            &script,
            Schedule::new(&plan.load, plan.seed),
            &mut scratch,
            stop,
        );
        effort.logical += run.recorder.offered();
        effort.events += events;
        effort.peak_pending = effort.peak_pending.max(peak_pending);
        error.clone_from(&run.gone);
        aborted |= run.aborted;
        outcomes.push(report::policy_report(
            plan,
            Mode::Simulated,
            PolicyOutcome {
                policy,
                run,
                ledger: Some(ledger),
                tiers,
                proxies,
            },
        ));
        if aborted || error.is_some() {
            break;
        }
    }
    effort.wall = started.elapsed();
    effort.peak_kib = crate::stats::peak_resident_kib();
    let (_, generated_at) = report::timestamp(SystemTime::now());
    let context = RunContext::new(
        Mode::Simulated,
        Ending {
            aborted,
            error,
            generated_at,
        },
    );
    Ok((
        Draft {
            policies: outcomes,
            context,
        },
        effort,
    ))
}
