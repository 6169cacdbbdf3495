//! `harness tune PLAN --policy NAME --vary KEY=RANGE …`: the search, said and written.
//!
//! The budget of simulated runs is said before the search starts, with a progress bar;
//! the best `--confirm` candidates then run live, one after another, each with its
//! policy's progress bar as `chaos` shows it. Exit 0 with a choice (passing every gate
//! simulated, and live where confirmed), 1 when no candidate passes, 2 when the plan or
//! the command is wrong, 3 when a live run or the writing failed, 130 interrupted (what
//! ran is written, marked partial).

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use indicatif::{ProgressBar, ProgressStyle};
use tokio_util::sync::CancellationToken;

use super::runtime::{self, Interrupts};
use super::{EXIT_CANNOT_RUN, EXIT_GATE_FAILED, EXIT_INTERRUPTED, EXIT_INVALID, EXIT_PASS};
use crate::export::Format;
use crate::report;
use crate::run::RunOptions;
use crate::tune::{self, Request, Tuned};

#[derive(Debug, clap::Args)]
pub struct TuneArgs {
    /// The plan: its load, faults and gates are what every candidate must meet.
    pub plan: PathBuf,
    /// The policy to tune.
    #[arg(long, value_name = "NAME")]
    pub policy: String,
    /// A key of the policy and its range (repeat for several): `budget.ratio=0.05..0.5`,
    /// `max_attempts=2..5`, `attempt_timeout=200ms..2s`, `backoff.jitter=full,decorrelated`.
    #[arg(long, value_name = "KEY=RANGE", required = true)]
    pub vary: Vec<String>,
    /// Simulated runs at most: every combination when they fit, else an even spread and
    /// finer looks around the best.
    #[arg(long, value_name = "N", default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub budget: u64,
    /// Run the best N candidates live, each checked against its simulation (0: none).
    #[arg(long, value_name = "N", default_value_t = 2)]
    pub confirm: usize,
    /// Write the choice as this production config too (in export/ beside tune.json), and
    /// simulate what it runs.
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub export: Option<Format>,
    /// Override the plan's seed.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Write into this directory instead of reports/<plan>/tune-<timestamp>/.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// No progress bars and no table (the files are still written).
    #[arg(long, short)]
    pub quiet: bool,
}

pub(super) fn tune(args: TuneArgs) -> u8 {
    let abort = CancellationToken::new();
    let listening = match Interrupts::listen_or_exit(abort.clone()) {
        Ok(listening) => listening,
        Err(code) => return code,
    };
    if let Err(e) = crate::plan::load_simulable(&args.plan) {
        eprintln!("error: {e}");
        return EXIT_INVALID;
    }
    let mut tuned = match search(&args, &abort) {
        Ok(tuned) => tuned,
        Err(code) => return code,
    };
    let mut failed = false;
    if args.confirm > 0 && !tuned.table.partial && tuned.table.chosen.is_some() {
        failed = confirm(&mut tuned, args.confirm, &abort, args.quiet).is_err();
    }
    drop(listening);
    if let Some(format) = args.export {
        tuned.table.export_command = tuned.export_command(format);
        if let Err(e) = tuned.export(format) {
            eprintln!("error: {e}");
            failed = true;
        }
    }
    if !args.quiet {
        print!("{}", tune::markdown(&tuned.table));
    }
    let (stamp, _) = report::timestamp(SystemTime::now());
    match write(&tuned, args.out.as_deref(), &stamp) {
        Ok(dir) => println!(
            "tune of {}: {}",
            tuned.table.policy,
            dir.join("tune.html").display()
        ),
        Err(e) => {
            eprintln!("error: {e}");
            return EXIT_CANNOT_RUN;
        }
    }
    if tuned.table.partial || abort.is_cancelled() {
        eprintln!("interrupted: what ran is written, marked partial");
        EXIT_INTERRUPTED
    } else if failed {
        EXIT_CANNOT_RUN
    } else if tuned.table.chosen.is_none() {
        EXIT_GATE_FAILED
    } else {
        EXIT_PASS
    }
}

/// The simulated search, its budget said before it starts and its progress shown on a
/// terminal (neither with `--quiet`); or the exit code of why it stopped: 130
/// interrupted, 2 the plan or the command is wrong, 3 otherwise.
fn search(args: &TuneArgs, abort: &CancellationToken) -> Result<Tuned, u8> {
    let budget = usize::try_from(args.budget).unwrap_or(usize::MAX);
    let request = Request {
        plan: args.plan.clone(),
        policy: args.policy.clone(),
        vary: args.vary.clone(),
        budget,
        seed: args.seed,
    };
    let shown = !args.quiet && std::io::stderr().is_terminal();
    if !args.quiet {
        eprintln!(
            "tuning `{}` of {}: up to {budget} simulated runs, then the best {} live",
            args.policy,
            args.plan.display(),
            args.confirm
        );
    }
    let bar = shown.then(|| search_bar(budget));
    let result = tune::simulate(&request, abort, |step| {
        if let Some(bar) = &bar {
            bar.set_position(step.ran as u64);
            bar.set_message(step.label.clone());
        }
    });
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    let tuned = result.map_err(|e| {
        eprintln!("error: {e}");
        if matches!(e, tune::TuneError::Interrupted) {
            EXIT_INTERRUPTED
        } else if e.is_invalid() {
            EXIT_INVALID
        } else {
            EXIT_CANNOT_RUN
        }
    })?;
    if !args.quiet {
        eprintln!(
            "simulated {} candidates ({}) in {:.1} s",
            tuned.table.ran, tuned.table.search, tuned.table.search_s
        );
    }
    Ok(tuned)
}

/// The search's progress bar: simulated runs out of the budget, the candidate running.
fn search_bar(budget: usize) -> ProgressBar {
    let bar = ProgressBar::new(budget as u64);
    bar.set_style(
        ProgressStyle::with_template("{prefix:>10} [{bar:30}] {pos:>4}/{len} runs {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    bar.set_prefix("simulating");
    bar
}

/// The live runs, in a runtime of their own.
fn confirm(tuned: &mut Tuned, k: usize, abort: &CancellationToken, quiet: bool) -> Result<(), ()> {
    let Some(runtime) = runtime::runtime(None) else {
        return Err(());
    };
    let options = RunOptions {
        abort: abort.clone(),
        progress: (!quiet && std::io::stderr().is_terminal()).then(super::progress::progress_bars),
        ..RunOptions::default()
    };
    let result = runtime.block_on(tuned.confirm(k, &options, |label| {
        if !quiet {
            eprintln!("confirming live: {label}");
        }
    }));
    result.map_err(|e| eprintln!("error: {e}"))
}

fn write(tuned: &Tuned, out: Option<&Path>, stamp: &str) -> Result<PathBuf, report::WriteError> {
    let files = tuned.files();
    match out {
        Some(dir) => files.write_into(dir),
        None => files.write_new(
            &Path::new("reports").join(&tuned.table.plan),
            &format!("tune-{stamp}"),
        ),
    }
}
