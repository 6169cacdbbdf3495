//! `harness simulate PLAN --sweep KEY=V1,V2,...`: the plan simulated once per value of one
//! key, and one comparison of what changed: amplification, success rate, recovery time.
//!
//! The key is a policy's (`jittered-budget.budget.ratio`), or the plan's own
//! (`load.rate`); a policy's key may leave the policy out when only one policy runs. Each
//! value's full report is written beside the comparison (`<n>-<value>/`), so any point of
//! the curve can be opened as a run of its own.
//!
//! A library, not a command: [`run`] returns the reports and the comparison (or a typed
//! [`SweepError`]) and hands its caller the sweep so far after each value, so the caller
//! can write it as it goes: an interrupted sweep keeps the values that ran, its
//! comparison marked `partial`. [`Swept::write`] and [`Swept::write_to_temp`] write the
//! files through [`crate::report::Files`]. Printing, progress and exit codes are the
//! command line's (`cli/sweep.rs`).
//!
//! - `spec.rs`: `KEY=V1,V2,...` read against the plan ([`Sweep`], [`SpecError`]);
//! - `table.rs`: the `chaos-sweep/v1` model ([`SweepTable`], [`Point`]);
//! - `render.rs`: `sweep.md` and `sweep.html`;
//! - `write.rs`: the files and where they go.

mod render;
mod spec;
mod table;
mod write;

use std::path::Path;

use tokio_util::sync::CancellationToken;

use crate::plan::{self, PlanError, Setting};
use crate::report::Report;

use super::{Effort, SimError};
pub use render::{html, markdown};
pub(crate) use spec::{PLAN_KEYS, split_values};
pub use spec::{SpecError, Sweep};
pub use table::{Point, SweepTable};

/// Why a sweep did not run; every one is the plan's or the command's (exit code 2).
#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    /// The plan, or the plan a value makes, is not a plan.
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error("--sweep {0}")]
    Spec(#[from] SpecError),
    #[error(transparent)]
    Simulate(#[from] SimError),
}

/// One value simulated: what a caller may say while the sweep goes on.
#[derive(Debug, Clone, Copy)]
pub struct Step<'a> {
    /// The key, as [`Sweep::name`] writes it back.
    pub key: &'a str,
    pub value: &'a str,
    pub effort: &'a Effort,
}

/// One value's run: its report, and the directory it goes in beside the comparison.
#[derive(Debug, Clone)]
pub struct ValueRun {
    pub value: String,
    /// `<n>-<value>`, made safe for a directory name.
    pub dir: String,
    pub report: Report,
}

/// A sweep that ran: every value's report, in the order of the values, and the comparison.
#[derive(Debug, Clone)]
pub struct Swept {
    pub runs: Vec<ValueRun>,
    pub table: SweepTable,
}

/// Simulates the plan at `path` once per value of `spec` (`KEY=V1,V2,...`), every policy
/// of `policies` (all when empty), under `seed` when given, and compares the runs. Calls
/// `done` after each value with the sweep so far. Once `stop` is cancelled no further
/// value runs, and the one running stops and is left out: the comparison holds the
/// values that ran, `partial`. A sweep explores: a value whose gates fail is a finding, a
/// point of the comparison, not an error.
pub fn run(
    path: &Path,
    policies: &[String],
    seed: Option<u64>,
    spec: &str,
    stop: &CancellationToken,
    mut done: impl FnMut(Step<'_>, &Swept),
) -> Result<Swept, SweepError> {
    let text = plan::read(path)?;
    let base = plan::parse(path, &text)?;
    let sweep = Sweep::parse(spec, &base, policies)?;
    let name = sweep.name();
    let key: Vec<&str> = sweep.key.iter().map(String::as_str).collect();
    let mut swept = Swept {
        runs: Vec::new(),
        table: SweepTable {
            schema: "chaos-sweep/v1",
            plan: base.name.clone(),
            seed: seed.unwrap_or(base.seed),
            key: name.clone(),
            values: sweep.values.clone(),
            ran: 0,
            partial: !sweep.values.is_empty(),
            points: Vec::new(),
        },
    };
    for (i, value) in sweep.values.iter().enumerate() {
        if stop.is_cancelled() {
            break;
        }
        let setting = Setting {
            policy: sweep.policy.as_deref(),
            key: &key,
            value,
        };
        let mut plan = plan::parse_with(path, &text, &[setting])?;
        if let Some(seed) = seed {
            plan.reseed(seed);
        }
        let (report, effort) = super::simulate_until(&plan, policies, stop, |_| {})?;
        if report.aborted {
            break;
        }
        let dir = table::value_dir(i, value);
        swept
            .table
            .points
            .extend(table::points(&report, value, &dir));
        swept.runs.push(ValueRun {
            value: value.clone(),
            dir,
            report,
        });
        swept.table.ran = swept.runs.len();
        swept.table.partial = swept.table.ran < sweep.values.len();
        done(
            Step {
                key: &name,
                value,
                effort: &effort,
            },
            &swept,
        );
    }
    Ok(swept)
}
