//! `harness gate`: the regression gate for any CI. Each plan runs against its own baseline
//! (`BASELINES/NAME.json` for `NAME.yaml`), its gates and its baseline both, and writes its
//! report to `OUT/NAME/`; the exit code is the worst of the plans'. Before a plan's verdict
//! it says what failed: each gate (its figure and bound) and each regression (the figure,
//! its baseline, now and the tolerance). `--save` writes the baselines instead, from a run
//! the user has looked at, and only from one that passed its gates, unless `--force`.

use std::path::{Path, PathBuf};

use super::{
    ChaosArgs, EXIT_CANNOT_RUN, EXIT_GATE_FAILED, EXIT_INTERRUPTED, EXIT_INVALID, EXIT_PASS,
    PlanArgs, ReportArgs,
};
use crate::plan::Plan;
use crate::report::Report;

#[derive(Debug, clap::Args)]
pub struct GateArgs {
    /// The plans to run, each against the baseline named after its file.
    #[arg(required = true, value_name = "PLAN")]
    pub plans: Vec<PathBuf>,
    /// Where the baselines are: `DIR/NAME.json` for `NAME.yaml`.
    #[arg(long, value_name = "DIR", default_value = "reports/baselines")]
    pub baselines: PathBuf,
    /// Where the reports go: `DIR/NAME/` (report.html, report.json, junit.xml, ...).
    #[arg(long, value_name = "DIR", default_value = "reports/gate")]
    pub out: PathBuf,
    /// Save each plan's baseline from this run instead of judging against it: the first
    /// day, or after an intended change (look at the reports, then commit the files).
    /// A run that fails a gate is not saved (exit 1) unless `--force` is given too.
    #[arg(long)]
    pub save: bool,
    /// With `--save`: save the baselines even from a run that failed a gate.
    #[arg(long, requires = "save")]
    pub force: bool,
}

/// What a `chaos` run judged: its exit code, its report and the plan it ran (so the gate
/// says what failed, and saves the baseline itself).
pub(super) struct Judged {
    pub code: u8,
    pub report: Report,
    pub plan: Plan,
}

impl Judged {
    /// The exit code and report `conclude` gave, and the plan.
    pub(super) fn of((code, report): (u8, Report), plan: Plan) -> Self {
        Judged { code, report, plan }
    }
}

/// The baseline of `plan`: `dir/NAME.json` for `.../NAME.yaml`.
fn baseline_of(dir: &Path, plan: &Path) -> PathBuf {
    let name = plan
        .file_stem()
        .map_or_else(|| "plan".into(), |s| s.to_string_lossy());
    dir.join(format!("{name}.json"))
}

/// What an exit code means, for the per-plan line.
fn verdict(code: u8) -> &'static str {
    match code {
        EXIT_PASS => "PASS",
        EXIT_GATE_FAILED => "FAIL (a gate failed or a figure regressed)",
        EXIT_INVALID => "INVALID (the plan or its baseline)",
        EXIT_CANNOT_RUN => "INCOMPLETE (the run could not be carried out)",
        EXIT_INTERRUPTED => "INTERRUPTED",
        _ => "FAIL",
    }
}

/// A figure as a person reads it: whole numbers without decimals, else three at most.
fn figure(value: Option<f64>) -> String {
    match value {
        None => "none".to_owned(),
        Some(v) if v.fract() == 0.0 && v.abs() < 1e15 => format!("{v:.0}"),
        Some(v) => {
            let text = format!("{v:.3}");
            text.trim_end_matches('0').trim_end_matches('.').to_owned()
        }
    }
}

/// Says on stderr each gate that failed the run (its figure and bound) and each
/// counterexample its gates did not catch; returns them as `policy / gate` for the
/// verdict line. (The regressions `chaos` has already said, with their baseline, figure
/// and tolerance.)
fn say_failed_gates(report: &Report) -> Vec<String> {
    let mut failed = Vec::new();
    for p in &report.policies {
        for g in p.gates.iter().filter(|g| !g.pass && !p.expects_failure(g)) {
            eprintln!(
                "FAIL {} / {}: measured {}, bound {}: {}",
                p.name,
                g.name,
                figure(g.measured),
                figure(g.limit),
                g.detail
            );
            failed.push(format!("{} / {}", p.name, g.name));
        }
        if let Some(e) = p.expect.as_ref().filter(|e| !e.met) {
            eprintln!("FAIL {} (counterexample): {}", p.name, e.detail);
            failed.push(format!("{} (counterexample)", p.name));
        }
    }
    failed
}

/// The regressions of a run against its baseline, as `policy / metric`.
fn regressed(report: &Report) -> Vec<String> {
    report.baseline.as_ref().map_or_else(Vec::new, |c| {
        c.regressions()
            .map(|r| format!("{} / {}", r.policy, r.metric))
            .collect()
    })
}

/// What failed, for the verdict line: `: gates failed: a / b; regressed: c / d`.
fn what_failed(gates: &[String], regressions: &[String]) -> String {
    let mut parts = Vec::new();
    if !gates.is_empty() {
        parts.push(format!("gates failed: {}", gates.join(", ")));
    }
    if !regressions.is_empty() {
        parts.push(format!("regressed: {}", regressions.join(", ")));
    }
    match parts.is_empty() {
        true => String::new(),
        false => format!(": {}", parts.join("; ")),
    }
}

/// `--save`: the run's baseline written to `file` when it passed its gates (or `force`);
/// the exit code after it. A failed run keeps its code (1) and saves nothing.
fn save_baseline(
    report: &Report,
    plan: &Plan,
    file: &Path,
    force: bool,
    code: u8,
    retry: impl FnOnce() -> String,
) -> u8 {
    // An interrupted or incomplete run is refused by `save` itself.
    let failed = !report.passed() && !report.aborted && report.error.is_none();
    if failed && !force {
        eprintln!(
            "error: not saving {}: the run failed a gate, and a baseline is a run that passed",
            file.display()
        );
        eprintln!(
            "  hint: look at the report and fix the plan or the policy; to keep this run as the baseline all the same: {}",
            retry()
        );
        return code;
    }
    if failed {
        eprintln!(
            "warning: saving {} from a run that failed a gate (--force)",
            file.display()
        );
    }
    match super::save(report, plan, file) {
        true => code,
        false => code.max(EXIT_CANNOT_RUN),
    }
}

/// Where a gate reads and writes, and whether it saves.
struct Gate {
    baselines: PathBuf,
    save: bool,
    force: bool,
}

impl Gate {
    /// One plan (`name`) run into `dir`, against its baseline or saved as it: the exit
    /// code, and what failed (for the verdict line).
    fn run(&self, name: &str, plan: &Path, dir: &Path) -> (u8, String) {
        let baseline = baseline_of(&self.baselines, plan);
        if !self.save && !baseline.is_file() {
            eprintln!(
                "error: {}: no baseline at {}",
                plan.display(),
                baseline.display()
            );
            eprintln!(
                "  hint: run it once and look at the report, then save its baseline: harness gate --save --baselines {} {}",
                self.baselines.display(),
                plan.display()
            );
            return (EXIT_INVALID, String::new());
        }
        eprintln!("{name}: running {}", plan.display());
        let judged = super::chaos_judged(ChaosArgs {
            run: PlanArgs {
                plan: plan.to_owned(),
                policies: Vec::new(),
                report: ReportArgs {
                    seed: None,
                    out: Some(dir.to_owned()),
                    quiet: true,
                    baseline: (!self.save).then(|| baseline.clone()),
                    // Saved below, once the verdict is known.
                    save_baseline: None,
                },
            },
            otlp: None,
            threads: None,
            target: None,
            shard: None,
            start_at: None,
            partial: None,
        });
        let Judged {
            code,
            report,
            plan: judged_plan,
        } = match judged {
            Ok(judged) => judged,
            Err(code) => return (code, String::new()),
        };
        let failed = what_failed(&say_failed_gates(&report), &regressed(&report));
        if !self.save {
            return (code, failed);
        }
        let retry = || {
            format!(
                "harness gate --save --force --baselines {} {}",
                self.baselines.display(),
                plan.display()
            )
        };
        let code = save_baseline(&report, &judged_plan, &baseline, self.force, code, retry);
        (code, failed)
    }
}

pub(super) fn gate(args: GateArgs) -> u8 {
    let GateArgs {
        plans,
        baselines,
        out,
        save,
        force,
    } = args;
    if save && let Err(e) = std::fs::create_dir_all(&baselines) {
        eprintln!("error: cannot make {}: {e}", baselines.display());
        return EXIT_CANNOT_RUN;
    }
    let gate = Gate {
        baselines,
        save,
        force,
    };
    let mut worst = EXIT_PASS;
    let mut lines = Vec::new();
    for plan in plans {
        let name = plan
            .file_stem()
            .map_or_else(|| "plan".into(), |s| s.to_string_lossy().into_owned());
        let dir = out.join(&name);
        let (code, failed) = gate.run(&name, &plan, &dir);
        // What failed, when it is known, says more than the exit code's meaning.
        let said = match (code, failed.is_empty()) {
            (EXIT_GATE_FAILED, false) => format!("FAIL{failed}"),
            _ => format!("{}{failed}", verdict(code)),
        };
        let report = dir.join("report.html");
        let line = match report.is_file() {
            true => format!("{name}: {said} (exit {code}), report {}", report.display()),
            false => format!("{name}: {said} (exit {code})"),
        };
        println!("{line}");
        lines.push(line);
        // A worse code wins, but an interruption ends the gate at once.
        if code == EXIT_INTERRUPTED {
            return EXIT_INTERRUPTED;
        }
        worst = worst.max(code);
    }
    if lines.len() > 1 {
        println!(
            "gate: {} plans, {}",
            lines.len(),
            match worst {
                EXIT_PASS => "every one passed".to_owned(),
                code => format!("worst exit {code}: {}", verdict(code)),
            }
        );
    }
    worst
}
