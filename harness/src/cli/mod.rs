//! The command line: a raw layer that parses what was typed (clap), and the calls it makes.
//! Exit codes are the design's: 0 all gates pass, 1 a gate failed, 2 the plan or the
//! command line is invalid, 3 the run could not be carried out, 130 interrupted.

// The command line is the one place that writes to stdout: the summary and verdict.
#![allow(clippy::print_stdout)]

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::SystemTime;

use clap::{Parser, Subcommand};

mod audit;
mod client_test;
mod compare;
mod export;
mod gate;
mod progress;
mod relay;
mod runtime;
mod shard;
mod simulate;
mod sweep;
mod tune;
mod validate;
pub use simulate::SimulateArgs;
use tokio_util::sync::CancellationToken;

use crate::baseline;
use crate::plan::{self, Plan};
use crate::report;
use crate::run::{self, RunOptions};
use crate::telemetry::Telemetry;
pub use audit::AuditArgs;
pub use client_test::ClientTestArgs;
pub use export::ExportArgs;
pub use gate::GateArgs;
pub use relay::RelayArgs;
use runtime::Interrupts;
pub use shard::MergeArgs;
pub use tune::TuneArgs;

/// The annotated reference plan, `docs/plan-reference.yaml`.
pub const PLAN_REFERENCE: &str = include_str!("../../../docs/plan-reference.yaml");

pub const EXIT_PASS: u8 = 0;
pub const EXIT_GATE_FAILED: u8 = 1;
pub const EXIT_INVALID: u8 = 2;
pub const EXIT_CANNOT_RUN: u8 = 3;
pub const EXIT_INTERRUPTED: u8 = 130;

#[derive(Debug, Parser)]
#[command(
    name = "harness",
    version,
    about = "Chaos load tests for client retry policies: inject faults, drive open-loop load, prove the invariants",
    after_help = "Exit codes: 0 all gates pass, 1 a gate failed, 2 invalid plan or arguments, 3 the run could not be carried out, 130 interrupted."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a plan: each policy in turn against a freshly reset fault-server; write a report.
    Chaos(ChaosArgs),
    /// Run a plan in virtual time: the same policies, script and capacity model against a
    /// modelled fault-server and network; the same report (`mode: simulated`) and gates.
    Simulate(SimulateArgs),
    /// The regression gate for any CI: each plan against its baseline
    /// (`--baselines DIR`, `DIR/NAME.json` for `NAME.yaml`); exit with the worst plan's code.
    Gate(GateArgs),
    /// Run a program of your own against the plan's faults and judge its retries from the
    /// fault-server's ledger: `harness client-test PLAN -- COMMAND ARGS…` (`{url}` in its
    /// arguments and CHAOS_TARGET_URL give it the server's URL); the same report and exit
    /// codes, `mode: client`.
    ClientTest(ClientTestArgs),
    /// Merge the partial reports of a sharded run (`chaos --shard I/N`) into one report,
    /// then judge its gates and `--baseline` once; a shard missing or failed makes it
    /// INCOMPLETE (exit 3), naming the shard.
    Merge(MergeArgs),
    /// Compare a run with a baseline offline: exit 1 on a regression beyond tolerance.
    Compare {
        /// The baseline (`chaos-baseline/v1`, from `chaos --save-baseline`) or a report.json;
        /// its tolerance is used.
        baseline: PathBuf,
        /// The run to judge: a report.json or another baseline.
        now: PathBuf,
        /// Only what regressed, is missing or is new, and a count of the rest.
        #[arg(long)]
        short: bool,
    },
    /// Check a plan without running it: errors carry file:line:column and a hint.
    Validate {
        /// One or more plan files.
        #[arg(required = true)]
        plans: Vec<PathBuf>,
        /// Print every field of every policy as it resolved (after its preset, its import
        /// and the plan's keys), as YAML a plan takes back; absent limits say `none`.
        #[arg(long)]
        explain: bool,
    },
    /// A stack's worst case from its configs, nothing sent: attempts at the leaf in a total
    /// outage, budgets, time, resent POSTs, each at its line; exit 1 if a gate cannot hold.
    Audit(AuditArgs),
    /// Run one relay tier as its own process: forward every request to `--to` through a
    /// retry policy, answer with what came back (`x-chaos-no-retry: 1` when it gave up).
    Relay(RelayArgs),
    /// Search a policy's settings in the simulator for the least server load that passes
    /// every gate (`--vary KEY=RANGE`), confirm the best live, write tune.html with the
    /// trade-off frontier and the current settings on it.
    Tune(TuneArgs),
    /// Write a plan's policy as the production config that runs it (a gRPC service config,
    /// an Envoy route and cluster), each setting the format cannot say named on stderr.
    Export(ExportArgs),
    /// List the policy presets: their sources, caveats and every field of their policies.
    Presets,
    /// Print every key a plan can hold, with defaults and examples (a valid plan); with
    /// `--json`, the plan's JSON Schema (docs/plan.schema.json) for editors.
    PlanSchema {
        /// The JSON Schema (draft-07) instead of the annotated plan.
        #[arg(long)]
        json: bool,
    },
}

/// What `chaos` and `simulate` both take: the plan, which of its policies, and what every
/// run takes ([`ReportArgs`]).
#[derive(Debug, clap::Args)]
pub struct PlanArgs {
    /// The plan file (see plans/README.md).
    pub plan: PathBuf,
    /// Run only this policy (repeat for several).
    #[arg(long = "policy", value_name = "NAME")]
    pub policies: Vec<String>,
    #[command(flatten)]
    pub report: ReportArgs,
}

/// What every run takes (`chaos`, `simulate`, `client-test`): the seed, where the report
/// goes, and the baselines it is compared with or saved as.
#[derive(Debug, clap::Args)]
pub struct ReportArgs {
    /// Override the plan's seed.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Write the report into this directory instead of reports/<plan>/<timestamp>/.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// No progress bar and no summary table (the report is still written).
    #[arg(long, short)]
    pub quiet: bool,
    /// Compare each policy with this baseline too: a regression beyond the plan's
    /// `baseline.tolerance` fails the run (exit 1).
    #[arg(long, value_name = "FILE")]
    pub baseline: Option<PathBuf>,
    /// Save this run's figures as a baseline (`chaos-baseline/v1`) to FILE.
    #[arg(long, value_name = "FILE")]
    pub save_baseline: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
pub struct ChaosArgs {
    #[command(flatten)]
    pub run: PlanArgs,
    /// Export traces and metrics to this OTLP/HTTP collector (e.g. http://127.0.0.1:4318).
    /// Without it, `OTEL_EXPORTER_OTLP_ENDPOINT` and the other `OTEL_*` variables decide;
    /// with neither, no telemetry (see docs/telemetry.md).
    #[arg(long, value_name = "ENDPOINT")]
    pub otlp: Option<String>,
    /// Worker threads for the load (and an embedded fault-server and relay tiers).
    /// Default: one when the target is a process of its own and the plan's peak rate
    /// times its most attempts per request is at most 15,000 a second (one thread spares
    /// the wake-ups of threads taking work from each other, and leaves a loopback target
    /// its cores: docs/benchmarks.md); else one per core.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub threads: Option<u16>,
    /// Drive this running fault-server (on loopback) instead of the plan's target; its
    /// token from FAULT_SERVER_TOKEN.
    #[arg(long, value_name = "URL")]
    pub target: Option<String>,
    /// Run one shard of the plan: I/N, I from 0. It sends the arrivals whose index is I
    /// mod N (the same seed, schedule and request ids as the unsharded run), as one client
    /// instance (its own budget, breaker and connections), and writes a partial report
    /// instead of judging; `harness merge` judges every shard's together. Shard 0 resets
    /// the fault-server and reads its ledger. Kubernetes: $(JOB_COMPLETION_INDEX)/N.
    #[arg(long, value_name = "I/N")]
    pub shard: Option<crate::shard::Shard>,
    /// The shards' common start, the same for every shard: RFC 3339 UTC
    /// (2026-12-07T08:00:00Z) or Unix seconds. Each policy gets a slot of the timeline
    /// from it; a shard more than 1 s late for a slot refuses to run it.
    #[arg(long, value_name = "TIME")]
    pub start_at: Option<String>,
    /// Where a shard writes its partial report (default: the --out directory, else
    /// reports/<plan>/shards/, as partial-I-of-N.json); `-` prints it on stdout as one line
    /// after `chaos-partial/v1 `, for a pod's log.
    #[arg(long, value_name = "FILE", requires = "shard")]
    pub partial: Option<PathBuf>,
}

/// Parses the process's arguments and runs; the binary's whole `main`.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() {
                EXIT_INVALID
            } else {
                EXIT_PASS
            });
        }
    };
    ExitCode::from(execute(cli))
}

/// Runs a parsed command and returns its exit code.
pub fn execute(cli: Cli) -> u8 {
    match cli.command {
        Command::Validate { plans, explain } => validate::validate(&plans, explain),
        Command::Audit(args) => audit::audit(&args),
        Command::Presets => {
            validate::presets();
            EXIT_PASS
        }
        Command::PlanSchema { json: false } => {
            print!("{PLAN_REFERENCE}");
            EXIT_PASS
        }
        Command::PlanSchema { json: true } => {
            print!("{}", crate::plan::schema::plan_schema());
            EXIT_PASS
        }
        Command::Chaos(args) => chaos(args),
        Command::Simulate(args) => simulate::simulate(args),
        Command::ClientTest(args) => client_test::client_test(args),
        Command::Compare {
            baseline,
            now,
            short,
        } => compare::compare(&baseline, &now, short),
        Command::Relay(args) => relay::relay(args),
        Command::Merge(args) => shard::merge(args),
        Command::Gate(args) => gate::gate(args),
        Command::Export(args) => export::export(args),
        Command::Tune(args) => tune::tune(args),
    }
}

/// The notes and the regressions of a comparison, on stderr.
pub(super) fn say_regressions(comparison: &crate::report::Comparison) {
    for note in &comparison.notes {
        eprintln!("note: {note}");
    }
    for row in comparison.regressions() {
        eprintln!(
            "REGRESSION {} / {}: {}",
            row.policy,
            row.metric,
            report::describe_row(row)
        );
    }
}

fn chaos(args: ChaosArgs) -> u8 {
    chaos_judged(args).map_or_else(|code| code, |judged| judged.code)
}

/// `chaos`, keeping what it judged: the exit code, the report and its plan; `Err` with
/// the exit code when it came to no verdict (the plan or a setting refused, the run
/// failed, or a shard wrote its partial report).
fn chaos_judged(args: ChaosArgs) -> Result<gate::Judged, u8> {
    let ChaosArgs {
        run,
        otlp,
        threads,
        target,
        shard: shard_of,
        start_at,
        partial: partial_file,
    } = args;
    let PlanArgs {
        plan: path,
        policies,
        report:
            ReportArgs {
                seed,
                out,
                quiet,
                baseline: baseline_file,
                save_baseline,
            },
    } = run;
    let (path, out) = (path.as_path(), out.as_deref());
    // Before anything else: from here on Ctrl-C or SIGTERM ends the run with a report
    // marked aborted, however early it comes.
    let abort = CancellationToken::new();
    let listening = Interrupts::listen_or_exit(abort.clone())?;
    runtime::raise_fd_limit();
    let (mut plan, against) = plan_and_baseline(path, seed, baseline_file.as_deref(), false)?;
    let judged_here = baseline_file.is_some() || save_baseline.is_some();
    let sharding = shard::prepare(
        &mut plan,
        target.as_deref(),
        shard_of,
        start_at.as_deref(),
        judged_here,
    )?;
    let workers = threads.map(usize::from).or_else(|| runtime::workers(&plan));
    let Some(runtime) = runtime::runtime(workers) else {
        return Err(EXIT_CANNOT_RUN);
    };
    let run_id = report::run_id(SystemTime::now());
    let telemetry = start_telemetry(otlp.as_deref(), &plan, &run_id, quiet)?;
    let show_progress = !quiet && std::io::stderr().is_terminal();
    let options = RunOptions {
        policies,
        abort: abort.clone(),
        progress: show_progress.then(progress::progress_bars),
        announce: !quiet,
        telemetry: telemetry.clone(),
        sharding,
    };
    if sharding.is_some() {
        if !quiet && let Some(s) = sharding {
            shard::announce(&s, &plan);
        }
        let partial = runtime.block_on(run::run_shard(&plan, &options));
        drop(listening);
        if let Some(t) = telemetry {
            say_telemetry(&t.shutdown(), quiet);
        }
        return Err(shard::conclude(
            &partial,
            &plan,
            partial_file.as_deref(),
            out,
            quiet,
        ));
    }
    let result = runtime.block_on(run::run_measured(&plan, &options));
    drop(listening);
    if !quiet {
        say_peak_memory();
    }
    // Bounded: a collector that is down or slow costs at most a few seconds here.
    let telemetry_view = telemetry.map(|t| t.shutdown());
    let mut ran = result.map_err(|e| run_failed(&e))?;
    if let Some(view) = &telemetry_view {
        say_telemetry(view, quiet);
    }
    ran.context.telemetry = telemetry_view;
    ran.context.run_id = run_id;
    let concluded = conclude_keeping(
        ran.build(&plan),
        &plan,
        against.as_ref(),
        out,
        quiet,
        save_baseline.as_deref(),
    );
    Ok(gate::Judged::of(concluded, plan))
}

/// Telemetry for the run, when `--otlp` or the environment asks for it, said unless
/// `quiet`; exit 2 when its settings are wrong.
fn start_telemetry(
    otlp: Option<&str>,
    plan: &Plan,
    run_id: &str,
    quiet: bool,
) -> Result<Option<Arc<Telemetry>>, u8> {
    let identity = crate::telemetry::RunIdentity {
        id: run_id,
        plan: &plan.name,
        seed: plan.seed,
    };
    let telemetry = match Telemetry::start(otlp, plan.sampling_ratio, &identity, |m| {
        eprintln!("{m}");
    }) {
        Ok(telemetry) => telemetry.map(Arc::new),
        Err(e) => {
            eprintln!("error: {e}");
            eprintln!("  hint: see docs/telemetry.md for the settings telemetry reads");
            return Err(EXIT_INVALID);
        }
    };
    if let Some(t) = &telemetry
        && !quiet
    {
        eprintln!(
            "exporting traces (sampling {:.0}% of logical requests, and every one that breaks an invariant) to {} and metrics to {}",
            t.ratio() * 100.0,
            t.endpoint(),
            t.metrics_endpoint()
        );
    }
    Ok(telemetry)
}

/// Where the run's telemetry went, unless `quiet` and every span arrived.
fn say_telemetry(view: &report::TelemetryView, quiet: bool) {
    if !quiet || view.spans_dropped > 0 {
        eprintln!("{}", view.describe());
    }
}

/// As `simulate` does: what the run held at its most (the kernel's VmHWM), which grows
/// with the load and the connections, not with the number of policies.
fn say_peak_memory() {
    if let Some(kib) = crate::stats::peak_resident_kib() {
        eprintln!("peak memory {:.1} MB", kib as f64 / 1024.0);
    }
}

/// A live run that measured nothing: exit 2 when the plan must say something
/// differently (nothing was sent but a probe), else 3.
fn run_failed(e: &run::RunError) -> u8 {
    eprintln!("error: {e}");
    match e {
        run::RunError::UnknownPolicy(_)
        | run::RunError::Control(
            run::ControlError::NotAFaultServer { .. } | run::ControlError::ScriptInForce { .. },
        ) => EXIT_INVALID,
        _ => {
            eprintln!("  hint: the run could not be carried out; nothing was measured");
            EXIT_CANNOT_RUN
        }
    }
}

/// The plan (with `--seed` applied) and the baseline to compare with, both read before
/// the run, so a wrong path costs seconds, not the whole run; exit 2 when either is bad.
fn plan_and_baseline(
    path: &Path,
    seed: Option<u64>,
    baseline_file: Option<&Path>,
    client_test: bool,
) -> Result<(Plan, Option<(baseline::Baseline, String)>), u8> {
    let fail = |e: &dyn std::fmt::Display| {
        eprintln!("error: {e}");
        EXIT_INVALID
    };
    let mut plan = plan::load(path).map_err(|e| fail(&e))?;
    match (plan.client.is_some(), client_test) {
        (true, false) => {
            eprintln!(
                "error: {} is a client test (`client:`): the program under test is its load",
                path.display()
            );
            eprintln!(
                "  hint: run it with `harness client-test {} -- COMMAND ARGS…`",
                path.display()
            );
            return Err(EXIT_INVALID);
        }
        (false, true) => {
            eprintln!(
                "error: {}: the plan has no `client:` section: `harness client-test` judges a program against it",
                path.display()
            );
            eprintln!(
                "  hint: add `client: {{ name: mine }}` (and drop `load:` and `policies:`), or run this plan with `harness chaos`"
            );
            return Err(EXIT_INVALID);
        }
        _ => {}
    }
    if let Some(seed) = seed {
        plan.reseed(seed);
    }
    let against = match baseline_file {
        Some(file) => Some((
            baseline::read(file).map_err(|e| fail(&e))?,
            file.display().to_string(),
        )),
        None => None,
    };
    Ok((plan, against))
}

/// Attaches the baseline comparison, writes the report (atomically; somewhere, whatever
/// happens), prints the summary and says the verdict: the exit code of a run.
fn conclude(
    report: report::Report,
    plan: &Plan,
    against: Option<&(baseline::Baseline, String)>,
    out: Option<&Path>,
    quiet: bool,
    save_baseline: Option<&Path>,
) -> u8 {
    conclude_keeping(report, plan, against, out, quiet, save_baseline).0
}

/// [`conclude`], giving the report back with the exit code.
fn conclude_keeping(
    mut report: report::Report,
    plan: &Plan,
    against: Option<&(baseline::Baseline, String)>,
    out: Option<&Path>,
    quiet: bool,
    save_baseline: Option<&Path>,
) -> (u8, report::Report) {
    if let Some((b, file)) = against {
        // A run that ended early lacks policies it was asked for: those are missing.
        let not_run: Vec<String> = match report.aborted || report.error.is_some() {
            true => Vec::new(),
            false => plan
                .policies
                .iter()
                .filter(|p| !report.policies.iter().any(|r| r.name == p.name))
                .map(|p| p.name.clone())
                .collect(),
        };
        baseline::attach(&mut report, b, file, &plan.baseline, &not_run);
    }
    let (stamp, _) = report::timestamp(SystemTime::now());
    // A measured run is never lost: where it cannot go where asked, it goes to a
    // temporary directory, and the exit code says something went wrong.
    let mut misplaced = false;
    let written = report::write(&report, Path::new("."), out, &stamp).or_else(|e| {
        eprintln!("error: {e}");
        misplaced = true;
        report::write_to_temp(&report, &stamp)
    });
    if !quiet {
        print!("{}", report::summary_table(&report));
        println!("{}", report.ranking.line());
        let proxied = report.plan.in_front_of_a_service();
        for p in &report.policies {
            if let Some(split) = p.ledger.as_ref().and_then(|l| l.upstream(proxied)) {
                println!("{}: {}", p.name, split.sentence());
            }
        }
        for p in &report.policies {
            if p.partial && report.error.is_some() {
                // Its figures stop short (or are partly someone else's): the error says
                // why, and no gate of it is a verdict on the policy.
                println!("not judged: {} (its run did not complete)", p.name);
                continue;
            }
            for g in p.gates.iter().filter(|g| !g.pass) {
                println!("{} {} / {}: {}", p.gate_word(g), p.name, g.name, g.detail);
            }
            if let Some(e) = p.expect.as_ref().filter(|e| !e.met) {
                println!("FAIL {} (counterexample): {}", p.name, e.detail);
            }
        }
    }
    for warning in &report.warnings {
        eprintln!("warning: {warning}");
    }
    if let Some(comparison) = &report.baseline {
        say_regressions(comparison);
    }
    let mut unsaved = false;
    if let Some(file) = save_baseline {
        unsaved = !save(&report, plan, file);
    }
    if let Some(e) = &report.error {
        eprintln!("error: {e}");
        eprintln!("  hint: the report covers the policies that ran, the last one marked partial");
    }
    match &written {
        Ok(written) => {
            if let Some(w) = &written.warning {
                eprintln!("warning: {w}");
            }
            if misplaced {
                eprintln!(
                    "  the report was written to {} instead",
                    written.dir.display()
                );
            }
            println!(
                "{}: report in {}",
                report.verdict_label(),
                written.dir.join("report.html").display()
            );
        }
        Err(e) => eprintln!("error: {e}: the report could not be written anywhere"),
    }
    let code = if report.aborted {
        EXIT_INTERRUPTED
    } else if misplaced || unsaved || written.is_err() || report.error.is_some() {
        EXIT_CANNOT_RUN
    } else if report.passed() {
        EXIT_PASS
    } else {
        EXIT_GATE_FAILED
    };
    (code, report)
}

/// Saves the run as a baseline, atomically; says why not when it cannot. A run that was
/// interrupted or could not complete is no baseline.
fn save(report: &report::Report, plan: &Plan, file: &Path) -> bool {
    if report.aborted || report.error.is_some() {
        eprintln!(
            "error: not saving {}: an interrupted or incomplete run is no baseline",
            file.display()
        );
        return false;
    }
    let text = baseline::Baseline::of(report, plan.baseline).to_json();
    let tmp = file.with_extension("json.tmp");
    match std::fs::write(&tmp, text).and_then(|()| std::fs::rename(&tmp, file)) {
        Ok(()) => {
            eprintln!("baseline saved to {}", file.display());
            true
        }
        Err(e) => {
            eprintln!("error: cannot save the baseline to {}: {e}", file.display());
            false
        }
    }
}
