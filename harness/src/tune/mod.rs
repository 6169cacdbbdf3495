//! `harness tune PLAN --policy NAME --vary KEY=RANGE …`: the settings of one policy that
//! ask least of a failing server while passing every gate of the plan, found in the
//! simulator, confirmed live, and written as the config to deploy.
//!
//! Why in the simulator: a live run of a plan takes its real time (outage.yaml: 12 s a
//! policy), a simulated one milliseconds, and the two agree within the documented
//! tolerance ([`crate::simulate::FAITHFUL_AMPLIFICATION`]). So the search spends a budget
//! of simulated runs (`search.rs`) and only the best few are run live (`confirm`), each
//! checked against its simulation. Candidates are judged as the report's ranking judges
//! policies (`report::rank_order`): every gate of the plan, then server load, then the
//! worst second; the policy's `expect: fail`, if any, is dropped, since a tuned policy is
//! meant to pass.
//!
//! - `vary.rs`: `KEY=RANGE` ([`Vary`]);
//! - `search.rs`: grid, or coarse-then-fine, within the budget; the frontiers;
//! - `model.rs`: `chaos-tune/v1` ([`TuneTable`]);
//! - `render.rs`: tune.md and tune.html (the frontier charts).

mod model;
mod render;
mod search;
mod vary;

use std::path::{Path, PathBuf};
use std::time::Instant;

use tokio_util::sync::CancellationToken;

use crate::export::{self, ExportError, Format, Scope};
use crate::plan::{self, Plan, PlanError, Setting};
use crate::report::{self, Files, PolicyReport, Report};
use crate::run::{RunError, RunOptions};
use crate::simulate::{FAITHFUL_AMPLIFICATION, FAITHFUL_SUCCESS_POINTS, SimError};
pub use model::{Candidate, ExportView, GateLine, KeyValue, Live, Stage, Tolerance, TuneTable};
pub use render::{html, markdown};
pub use search::TooSmall;
pub use vary::{Vary, VaryError};

/// Why a tune did not run: the plan's or the command's (exit 2), or the run's (exit 3).
#[derive(Debug, thiserror::Error)]
pub enum TuneError {
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error("--vary {0}")]
    Vary(#[from] VaryError),
    #[error("--policy {0}: the plan has no such policy (it has: {1})")]
    UnknownPolicy(String, String),
    #[error(
        "nothing to tune: give at least one --vary KEY=RANGE, e.g. --vary budget.ratio=0.05..0.5"
    )]
    NothingVaried,
    #[error(transparent)]
    TooSmall(#[from] TooSmall),
    #[error(transparent)]
    Simulate(#[from] SimError),
    #[error("the live confirmation could not run: {0}")]
    Live(#[from] RunError),
    #[error(transparent)]
    Export(#[from] ExportError),
    #[error("interrupted before the current settings were simulated: nothing was written")]
    Interrupted,
}

impl TuneError {
    /// The plan's or the command line's, rather than the run's.
    pub fn is_invalid(&self) -> bool {
        !matches!(
            self,
            TuneError::Live(_) | TuneError::Export(_) | TuneError::Interrupted
        )
    }
}

/// What to tune.
#[derive(Debug, Clone)]
pub struct Request {
    pub plan: PathBuf,
    pub policy: String,
    /// Each `--vary KEY=RANGE`, as given.
    pub vary: Vec<String>,
    /// Simulated runs at most.
    pub budget: usize,
    pub seed: Option<u64>,
}

/// One simulated run done, for a progress bar.
#[derive(Debug, Clone)]
pub struct Step {
    pub ran: usize,
    pub budget: usize,
    pub label: String,
    pub qualifies: bool,
}

/// A tune under way: the request read against the plan, and the table so far.
#[derive(Debug, Clone)]
pub struct Tuned {
    pub table: TuneTable,
    /// The live runs' reports, by the directory each goes in beside tune.json.
    pub live: Vec<(String, Report)>,
    /// The exported files, when asked.
    pub exported: Option<export::Exported>,
    context: Context,
}

/// The plan as read, and what every candidate's plan is made from.
#[derive(Debug, Clone)]
struct Context {
    path: PathBuf,
    text: String,
    policy: String,
    seed: u64,
}

/// Simulates the policy's current settings, then searches the `--vary` ranges.
pub fn simulate(
    request: &Request,
    stop: &CancellationToken,
    mut step: impl FnMut(&Step),
) -> Result<Tuned, TuneError> {
    let text = plan::read(&request.plan)?;
    let base = plan::parse(&request.plan, &text)?;
    if !base.policies.iter().any(|p| p.name == request.policy) {
        let names: Vec<&str> = base.policies.iter().map(|p| p.name.as_str()).collect();
        return Err(TuneError::UnknownPolicy(
            request.policy.clone(),
            names.join(", "),
        ));
    }
    let vary = parse_vary(request)?;
    let context = Context {
        path: request.plan.clone(),
        text,
        policy: request.policy.clone(),
        seed: request.seed.unwrap_or(base.seed),
    };
    let started = Instant::now();
    let (current, gate_lines) = context.simulated_with_lines(&[], Stage::Current, stop)?;
    // Checked before any budget is spent.
    context.check_ends(&vary)?;
    let budget = request.budget;
    let mut ran = 0;
    let searched = search::search(&vary, budget, |levels, stage| {
        if stop.is_cancelled() {
            return Ok(None);
        }
        let settings: Vec<KeyValue> = vary
            .iter()
            .zip(levels)
            .map(|(v, l)| KeyValue {
                key: v.name(),
                value: l.text.clone(),
            })
            .collect();
        let candidate = match context.simulated(&settings, stage, stop) {
            // Stopped mid-run: the search ends with what finished, marked partial.
            Err(TuneError::Interrupted) => return Ok(None),
            other => other?,
        };
        ran += 1;
        step(&Step {
            ran,
            budget,
            label: candidate.label(),
            qualifies: candidate.figures.qualifies,
        });
        Ok::<_, TuneError>(Some(candidate))
    })??;
    let ran = searched.candidates.len();
    let mut candidates: Vec<Candidate> = searched.candidates.into_iter().map(|(_, c)| c).collect();
    candidates.sort_by(|a, b| report::rank_order(&a.figures, &b.figures));
    search::mark_frontiers(&mut candidates);
    let mut tuned = Tuned {
        table: TuneTable {
            schema: "chaos-tune/v1",
            plan: base.name.clone(),
            policy: request.policy.clone(),
            seed: context.seed,
            vary: request.vary.clone(),
            search: searched.search,
            budget,
            ran,
            partial: searched.stopped,
            search_s: started.elapsed().as_secs_f64(),
            tolerance: Tolerance {
                amplification: FAITHFUL_AMPLIFICATION,
                success_points: FAITHFUL_SUCCESS_POINTS,
            },
            current,
            gate_lines,
            candidates,
            chosen: None,
            reason: String::new(),
            confirm: 0,
            export: None,
            export_command: None,
        },
        live: Vec::new(),
        exported: None,
        context,
    };
    tuned.choose();
    Ok(tuned)
}

/// The `--vary` ranges asked for: at least one, and no key twice.
fn parse_vary(request: &Request) -> Result<Vec<Vary>, TuneError> {
    if request.vary.is_empty() {
        return Err(TuneError::NothingVaried);
    }
    let mut vary: Vec<Vary> = Vec::new();
    for spec in &request.vary {
        let v = Vary::parse(spec, &request.policy)?;
        if vary.iter().any(|w| w.key == v.key) {
            return Err(VaryError::Twice(v.name()).into());
        }
        vary.push(v);
    }
    Ok(vary)
}

impl Context {
    /// Every key of `vary` makes a plan at both ends of its range.
    fn check_ends(&self, vary: &[Vary]) -> Result<(), TuneError> {
        for v in vary {
            for level in v.levels(2) {
                self.plan_of(&[KeyValue {
                    key: v.name(),
                    value: level.text,
                }])?;
            }
        }
        Ok(())
    }

    /// The plan with `settings` applied to the tuned policy, under the tune's seed, its
    /// `expect` dropped.
    fn plan_of(&self, settings: &[KeyValue]) -> Result<Plan, PlanError> {
        let keys: Vec<Vec<&str>> = settings
            .iter()
            .map(|kv| kv.key.split('.').collect())
            .collect();
        let settings: Vec<Setting<'_>> = settings
            .iter()
            .zip(&keys)
            .map(|(kv, key)| Setting {
                policy: Some(&self.policy),
                key,
                value: &kv.value,
            })
            .collect();
        let mut plan = plan::parse_with(&self.path, &self.text, &settings)?;
        plan.reseed(self.seed);
        if let Some(p) = plan.policies.iter_mut().find(|p| p.name == self.policy) {
            p.expect = None;
        }
        Ok(plan)
    }

    fn simulated(
        &self,
        settings: &[KeyValue],
        stage: Stage,
        stop: &CancellationToken,
    ) -> Result<Candidate, TuneError> {
        Ok(self.simulated_with_lines(settings, stage, stop)?.0)
    }

    /// [`Self::simulated`], and the plan's success-rate and p99 limits for the policy:
    /// the lines the charts draw.
    fn simulated_with_lines(
        &self,
        settings: &[KeyValue],
        stage: Stage,
        stop: &CancellationToken,
    ) -> Result<(Candidate, Vec<GateLine>), TuneError> {
        let plan = self.plan_of(settings)?;
        self.simulate_plan(&plan, settings, stage, stop)
    }

    fn simulate_plan(
        &self,
        plan: &Plan,
        settings: &[KeyValue],
        stage: Stage,
        stop: &CancellationToken,
    ) -> Result<(Candidate, Vec<GateLine>), TuneError> {
        let (report, _) = crate::simulate::simulate_until(
            plan,
            std::slice::from_ref(&self.policy),
            stop,
            |_| {},
        )?;
        let p = self.policy_of(&report)?;
        let lines = p
            .gates
            .iter()
            .filter_map(|g| {
                let metric = ["success_rate", "p99_ms"]
                    .into_iter()
                    .find(|m| g.name.starts_with(&format!("{m} ")))?;
                Some(GateLine {
                    metric,
                    limit: g.limit?,
                    gate: g.name.clone(),
                })
            })
            .collect();
        let candidate = Candidate {
            settings: settings.to_vec(),
            stage,
            figures: report::rank_row(p),
            failed_gates: failed(p),
            frontier_success: false,
            frontier_p99: false,
            live: None,
        };
        Ok((candidate, lines))
    }

    /// The tuned policy's part of a run's report; a run stopped before the policy ran
    /// has none.
    fn policy_of<'r>(&self, report: &'r Report) -> Result<&'r PolicyReport, TuneError> {
        report
            .policies
            .iter()
            .find(|p| p.name == self.policy)
            .filter(|_| !report.aborted)
            .ok_or(TuneError::Interrupted)
    }
}

impl Tuned {
    /// The choice: the first candidate, in the ranking's order, that passes every gate
    /// simulated and, where it was run live, live.
    fn choose(&mut self) {
        let t = &mut self.table;
        t.chosen = t.candidates.iter().position(|c| {
            c.figures.qualifies && c.live.as_ref().is_none_or(|l| l.figures.qualifies)
        });
        let passing = t.candidates.iter().filter(|c| c.figures.qualifies).count();
        t.reason = match t.chosen {
            None if passing == 0 => format!(
                "none of the {} candidates passes every gate of the plan in the simulator",
                t.candidates.len()
            ),
            None => format!(
                "{passing} candidates pass every gate simulated, but none of the {} run live passed them live",
                t.candidates.iter().filter(|c| c.live.is_some()).count()
            ),
            Some(i) => {
                let c = &t.candidates[i];
                let confirmed = match &c.live {
                    Some(l) if l.agrees => ", confirmed live within the simulator's tolerance",
                    Some(_) => {
                        ", passing every gate live, though live and simulated differ beyond the tolerance"
                    }
                    None => ", not run live",
                };
                format!(
                    "the least server load of the {passing} of {} candidates that pass every gate: {:.3} attempts per logical request at the server, {:.2} in the worst second, success {:.1}%{confirmed}",
                    t.candidates.len(),
                    c.figures.server_load,
                    c.figures.peak_1s,
                    c.figures.success_rate * 100.0
                )
            }
        };
    }

    /// Runs the best `k` candidates that pass every gate simulated live, one after
    /// another, and compares each with its simulation; then chooses again.
    pub async fn confirm(
        &mut self,
        k: usize,
        options: &RunOptions,
        mut starting: impl FnMut(&str),
    ) -> Result<(), TuneError> {
        self.table.confirm = k;
        let best: Vec<usize> = self
            .table
            .candidates
            .iter()
            .enumerate()
            .filter(|(_, c)| c.figures.qualifies)
            .map(|(i, _)| i)
            .take(k)
            .collect();
        for (n, i) in best.into_iter().enumerate() {
            if options.abort.is_cancelled() {
                break;
            }
            let settings = self.table.candidates[i].settings.clone();
            starting(&self.table.candidates[i].label());
            let plan = self.context.plan_of(&settings)?;
            let options = RunOptions {
                policies: vec![self.table.policy.clone()],
                ..options.clone()
            };
            let report = crate::run::run(&plan, &options).await?;
            if report.aborted {
                break;
            }
            let dir = format!("live-{}", n + 1);
            let p = self.context.policy_of(&report)?;
            let figures = report::rank_row(p);
            let (agrees, detail) = agreement(&self.table.candidates[i].figures, &figures);
            self.table.candidates[i].live = Some(Live {
                figures,
                failed_gates: failed(p),
                agrees,
                detail,
                report: format!("{dir}/report.html"),
            });
            self.live.push((dir, report));
        }
        self.choose();
        Ok(())
    }

    /// Writes the choice as `format`, and simulates what the files run (imported back).
    pub fn export(&mut self, format: Format) -> Result<(), TuneError> {
        let Some(i) = self.table.chosen else {
            return Ok(());
        };
        let settings = self.table.candidates[i].settings.clone();
        let mut plan = self.context.plan_of(&settings)?;
        let named = plan
            .policies
            .iter_mut()
            .find(|p| p.name == self.table.policy)
            .expect("the plan has the tuned policy");
        let exported = export::export(named.policy.config(), format, &Scope::default())?;
        named.policy =
            chaos_policy::Policy::new(exported.policy.clone()).map_err(|e| ExportError {
                format: format.name(),
                message: e.to_string(),
            })?;
        let (simulated, _) =
            self.context
                .simulate_plan(&plan, &[], Stage::Exported, &CancellationToken::new())?;
        self.table.export = Some(ExportView {
            format: format.name(),
            files: exported
                .files
                .iter()
                .map(|f| format!("export/{}", f.name))
                .collect(),
            warnings: exported.warnings.clone(),
            simulated,
        });
        self.exported = Some(exported);
        Ok(())
    }

    /// The command that exports the choice from the plan.
    pub fn export_command(&self, format: Format) -> Option<String> {
        let c = &self.table.candidates[self.table.chosen?];
        let sets: Vec<String> = c
            .settings
            .iter()
            .map(|kv| format!(" --set {}={}", kv.key, shell_word(&kv.value)))
            .collect();
        Some(format!(
            "harness export {} --policy {}{} --format {}",
            self.context.path.display(),
            self.table.policy,
            sets.concat(),
            format.name()
        ))
    }

    /// tune.json, tune.md, tune.html, each live run's report in `live-N/`, and the
    /// exported files in `export/`.
    pub fn files(&self) -> Files {
        let mut files = Files::new("tune");
        for (dir, report) in &self.live {
            files.nest(dir, Files::report(report));
        }
        if let Some(exported) = &self.exported {
            for f in &exported.files {
                files.add(Path::new("export").join(f.name), f.text.clone());
            }
        }
        let json = serde_json::to_string_pretty(&self.table).expect("the tune always serialises");
        files.add("tune.json", json);
        files.add("tune.md", markdown(&self.table));
        files.add("tune.html", html(&self.table));
        files
    }
}

/// A value as one shell word.
fn shell_word(value: &str) -> String {
    if value
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
    {
        value.to_owned()
    } else {
        format!("'{}'", value.replace('\'', "'\\''"))
    }
}

fn failed(p: &PolicyReport) -> Vec<String> {
    p.gates
        .iter()
        .filter(|g| !g.pass)
        .map(|g| g.name.clone())
        .collect()
}

/// Live against simulated, by the simulator's documented tolerance.
fn agreement(simulated: &report::RankRow, live: &report::RankRow) -> (bool, String) {
    let mut off = Vec::new();
    for (what, s, l) in [
        (
            "server amplification",
            simulated.server_load,
            live.server_load,
        ),
        (
            "client amplification",
            simulated.amplification_client,
            live.amplification_client,
        ),
    ] {
        if (s - l).abs() > FAITHFUL_AMPLIFICATION * l.abs().max(1e-9) {
            off.push(format!(
                "{what} simulated {s:.3}, live {l:.3} ({:+.1}%)",
                (s / l - 1.0) * 100.0
            ));
        }
    }
    let (s, l) = (simulated.success_rate * 100.0, live.success_rate * 100.0);
    if (s - l).abs() > FAITHFUL_SUCCESS_POINTS {
        off.push(format!("success simulated {s:.1}%, live {l:.1}%"));
    }
    if off.is_empty() {
        (
            true,
            format!(
                "within tolerance: server amplification {:.3} simulated, {:.3} live; success {s:.1}% and {l:.1}%",
                simulated.server_load, live.server_load
            ),
        )
    } else {
        (false, format!("beyond tolerance: {}", off.join("; ")))
    }
}
