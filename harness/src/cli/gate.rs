//! `harness gate`: the regression gate for any CI. Each plan runs against its own baseline
//! (`BASELINES/NAME.json` for `NAME.yaml`), its gates and its baseline both, and writes its
//! report to `OUT/NAME/`; the exit code is the worst of the plans'. `--save` writes the
//! baselines instead, from a run the user has looked at.

use std::path::{Path, PathBuf};

use super::{
    ChaosArgs, EXIT_CANNOT_RUN, EXIT_GATE_FAILED, EXIT_INTERRUPTED, EXIT_INVALID, EXIT_PASS,
    PlanArgs, ReportArgs,
};

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
    #[arg(long)]
    pub save: bool,
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

pub(super) fn gate(args: GateArgs) -> u8 {
    let GateArgs {
        plans,
        baselines,
        out,
        save,
    } = args;
    if save && let Err(e) = std::fs::create_dir_all(&baselines) {
        eprintln!("error: cannot make {}: {e}", baselines.display());
        return EXIT_CANNOT_RUN;
    }
    let mut worst = EXIT_PASS;
    let mut lines = Vec::new();
    for plan in plans {
        let name = plan
            .file_stem()
            .map_or_else(|| "plan".into(), |s| s.to_string_lossy().into_owned());
        let baseline = baseline_of(&baselines, &plan);
        let dir = out.join(&name);
        let code = if !save && !baseline.is_file() {
            eprintln!(
                "error: {}: no baseline at {}",
                plan.display(),
                baseline.display()
            );
            eprintln!(
                "  hint: run it once and look at the report, then save its baseline: harness gate --save --baselines {} {}",
                baselines.display(),
                plan.display()
            );
            EXIT_INVALID
        } else {
            eprintln!("{name}: running {}", plan.display());
            super::chaos(ChaosArgs {
                run: PlanArgs {
                    plan: plan.clone(),
                    policies: Vec::new(),
                    report: ReportArgs {
                        seed: None,
                        out: Some(dir.clone()),
                        quiet: true,
                        baseline: (!save).then(|| baseline.clone()),
                        save_baseline: save.then(|| baseline.clone()),
                    },
                },
                otlp: None,
                threads: None,
                target: None,
                shard: None,
                start_at: None,
                partial: None,
            })
        };
        let report = dir.join("report.html");
        let line = match report.is_file() {
            true => format!(
                "{name}: {} (exit {code}), report {}",
                verdict(code),
                report.display()
            ),
            false => format!("{name}: {} (exit {code})", verdict(code)),
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
