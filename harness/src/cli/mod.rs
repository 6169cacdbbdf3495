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

mod runtime;
mod simulate;
mod sweep;
use indicatif::{ProgressBar, ProgressStyle};
pub use simulate::SimulateArgs;
use tokio_util::sync::CancellationToken;

use crate::baseline;
use crate::plan::{self, NamedPolicy, Plan};
use crate::policy::Preset;
use crate::report;
use crate::run::{self, ProgressFactory, RunOptions};
use crate::telemetry::Telemetry;
use runtime::Interrupts;

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
    /// Compare a run with a baseline offline: exit 1 on a regression beyond tolerance.
    Compare {
        /// The baseline (`chaos-baseline/v1`, from `chaos --save-baseline`) or a report.json;
        /// its tolerance is used.
        baseline: PathBuf,
        /// The run to judge: a report.json or another baseline.
        now: PathBuf,
    },
    /// Check a plan without running it: errors carry file:line:column and a hint.
    Validate {
        /// One or more plan files.
        #[arg(required = true)]
        plans: Vec<PathBuf>,
    },
    /// Run one relay tier as its own process: forward every request to `--to` through a
    /// retry policy, answer with what came back (`x-chaos-no-retry: 1` when it gave up).
    Relay(RelayArgs),
    /// List the policy presets, with their sources and caveats.
    Presets,
    /// Print every key a plan can hold, with defaults and examples (a valid plan).
    PlanSchema,
}

/// What `chaos` and `simulate` both take: the plan, which of its policies, the seed, and
/// where the report and the baselines go.
#[derive(Debug, clap::Args)]
pub struct PlanArgs {
    /// The plan file (see plans/README.md).
    pub plan: PathBuf,
    /// Run only this policy (repeat for several).
    #[arg(long = "policy", value_name = "NAME")]
    pub policies: Vec<String>,
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
}

#[derive(Debug, clap::Args)]
pub struct RelayArgs {
    /// Where to listen.
    #[arg(long, default_value = "127.0.0.1:8081")]
    pub listen: std::net::SocketAddr,
    /// The next hop: another relay or the fault-server (`http://127.0.0.1:8080`).
    #[arg(long, value_name = "URL")]
    pub to: String,
    /// The tier's retry policy: a YAML file with a plan's policy keys (`preset`, `import`,
    /// `max_attempts`, `backoff`, `budget`, `honor_no_retry`, ...). Without it the tier
    /// forwards once and never retries.
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
    /// The tier's name, in its answers and its counts.
    #[arg(long, default_value = "relay")]
    pub name: String,
    /// Seeds the jitter of each request, with its id.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Listen, or forward, outside loopback. Load and faults are for machines you own.
    #[arg(long)]
    pub allow_remote: bool,
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
        Command::Validate { plans } => validate(&plans),
        Command::Presets => {
            presets();
            EXIT_PASS
        }
        Command::PlanSchema => {
            print!("{PLAN_REFERENCE}");
            EXIT_PASS
        }
        Command::Chaos(args) => chaos(args),
        Command::Simulate(args) => simulate::simulate(args),
        Command::Compare { baseline, now } => compare(&baseline, &now),
        Command::Relay(args) => relay(args),
    }
}

fn relay(args: RelayArgs) -> u8 {
    let url = reqwest::Url::parse(&args.to)
        .ok()
        .filter(|u| u.scheme() == "http");
    let Some((url, host)) = url.and_then(|u| {
        let host = u.host_str()?.to_owned();
        Some((u, host))
    }) else {
        eprintln!("error: --to {} is not an http:// URL", args.to);
        eprintln!("  hint: e.g. --to http://127.0.0.1:8080");
        return EXIT_INVALID;
    };
    // A name is resolved as the tier's client will resolve it: `localhost` is 127.0.0.1.
    let to = url.socket_addrs(|| None).unwrap_or_default();
    if forwards_to_itself(args.listen, &to) {
        eprintln!(
            "error: --to {} is the relay's own --listen address ({}): every request would come back to it",
            args.to, args.listen
        );
        eprintln!(
            "  hint: point --to at the next hop (another relay or the fault-server, e.g. --to http://127.0.0.1:8080), or listen on another port"
        );
        return EXIT_INVALID;
    }
    if !args.listen.ip().is_loopback() && !args.allow_remote {
        eprintln!("error: --listen {} is not on loopback", args.listen);
        eprintln!(
            "  hint: a tier forwards whatever reaches it; pass --allow-remote to listen there anyway"
        );
        return EXIT_INVALID;
    }
    if !plan::is_loopback_host(&host) && !args.allow_remote {
        eprintln!("error: --to {} is not on loopback", args.to);
        eprintln!(
            "  hint: load and faults are for machines you own; pass --allow-remote to forward there anyway"
        );
        return EXIT_INVALID;
    }
    let policy = match &args.policy {
        Some(path) => match plan::load_policy(path) {
            Ok(policy) => policy,
            Err(e) => {
                eprintln!("error: {e}");
                return EXIT_INVALID;
            }
        },
        None => plan::forward_once(),
    };
    let Some(runtime) = runtime::runtime(None) else {
        return EXIT_CANNOT_RUN;
    };
    runtime.block_on(async move {
        let signals = match Interrupts::install() {
            Ok(signals) => signals,
            Err(e) => {
                eprintln!("error: cannot listen for Ctrl-C: {e}");
                return EXIT_CANNOT_RUN;
            }
        };
        let summary = crate::report::describe_policy(&policy);
        let relay = match crate::relay::Relay::start(crate::relay::RelayConfig {
            name: args.name.clone(),
            next: args.to.clone(),
            policy,
            seed: args.seed,
            listen: args.listen,
            script: None,
            tracing: None,
        })
        .await
        {
            Ok(relay) => relay,
            Err(e) => {
                eprintln!("error: {e}");
                eprintln!("  hint: pick another address with --listen");
                return EXIT_CANNOT_RUN;
            }
        };
        eprintln!(
            "relay `{}` on {} → {} ({summary})",
            args.name,
            relay.url(),
            args.to
        );
        signals.received().await;
        let c = relay.counts();
        relay.shutdown().await;
        eprintln!(
            "relay `{}`: received {} ({} logical), sent {} ({} retries), {} succeeded, {} gave up",
            args.name, c.received, c.logical, c.sent, c.retries, c.succeeded, c.gave_up
        );
        EXIT_PASS
    })
}

/// Whether a tier listening on `listen` and forwarding to `to` (the addresses `--to`
/// resolves to) would forward to itself: the same port on the same address, or on a
/// loopback one when it listens on every address. A port given as 0 is chosen at start,
/// so it cannot be named in `--to`. (Two tiers forwarding to each other are found by the
/// hop count instead: a 508.)
fn forwards_to_itself(listen: std::net::SocketAddr, to: &[std::net::SocketAddr]) -> bool {
    listen.port() != 0
        && to.iter().any(|t| {
            t.port() == listen.port()
                && (t.ip() == listen.ip()
                    || (listen.ip().is_unspecified()
                        && (t.ip().is_loopback() || t.ip().is_unspecified())))
        })
}

fn validate(paths: &[PathBuf]) -> u8 {
    let mut code = EXIT_PASS;
    for path in paths {
        match plan::load(path) {
            Ok(p) => {
                println!(
                    "ok: {}: plan `{}`, {} s, {} polic{}, {} fault phase{}, {} gate{}",
                    path.display(),
                    p.name,
                    p.duration.as_secs_f64(),
                    p.policies.len(),
                    if p.policies.len() == 1 { "y" } else { "ies" },
                    p.script.faults.len(),
                    if p.script.faults.len() == 1 { "" } else { "s" },
                    p.gates.len(),
                    if p.gates.len() == 1 { "" } else { "s" },
                );
                for warning in &p.warnings {
                    match warning.at {
                        Some((line, column)) => {
                            eprintln!("warning: {}:{line}:{column}: {warning}", path.display())
                        }
                        None => eprintln!("warning: {}: {warning}", path.display()),
                    }
                }
            }
            Err(e) => {
                eprintln!("error: {e}");
                code = EXIT_INVALID;
            }
        }
    }
    code
}

fn presets() {
    for p in Preset::ALL {
        println!(
            "{}\n  source: {}\n  caveat: {}\n",
            p.name(),
            p.source(),
            p.caveat()
        );
    }
}

fn compare(baseline: &Path, now: &Path) -> u8 {
    let read = |path: &Path| {
        baseline::read(path).map_err(|e| {
            eprintln!("error: {e}");
            EXIT_INVALID
        })
    };
    let (base, current) = match (read(baseline), read(now)) {
        (Ok(b), Ok(n)) => (b, n),
        (Err(code), _) | (_, Err(code)) => return code,
    };
    let comparison = baseline::compare(
        &base,
        &baseline.display().to_string(),
        &current.policies,
        &current.plan,
        &base.tolerance,
    );
    print!("{}", report::baseline_table(&comparison));
    say_regressions(&comparison);
    if comparison.passed() {
        println!("PASS: no regression against {}", baseline.display());
        EXIT_PASS
    } else {
        println!("FAIL: regressions against {}", baseline.display());
        EXIT_GATE_FAILED
    }
}

/// The notes and the regressions of a comparison, on stderr.
fn say_regressions(comparison: &crate::report::Comparison) {
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
    let ChaosArgs { run, otlp, threads } = args;
    let PlanArgs {
        plan: path,
        policies,
        seed,
        out,
        quiet,
        baseline: baseline_file,
        save_baseline,
    } = run;
    let (path, out) = (path.as_path(), out.as_deref());
    // Before anything else: from here on Ctrl-C or SIGTERM ends the run with a report
    // marked aborted, however early it comes.
    let abort = CancellationToken::new();
    let listening = match Interrupts::listen(abort.clone()) {
        Ok(listening) => listening,
        Err(e) => {
            eprintln!("error: cannot listen for Ctrl-C: {e}");
            return EXIT_CANNOT_RUN;
        }
    };
    // The embedded fault-server and the client's sockets share this process's descriptors.
    if let Ok(limit) = fault_server::fd_limit::raise()
        && limit < fault_server::fd_limit::LOW
    {
        eprintln!(
            "warning: only {limit} file descriptors (the hard limit); a run with many connections may fail to open more; raise it with `ulimit -Hn`"
        );
    }
    let (plan, against) = match plan_and_baseline(path, seed, baseline_file.as_deref()) {
        Ok(both) => both,
        Err(code) => return code,
    };
    let workers = threads.map(usize::from).or_else(|| runtime::workers(&plan));
    let Some(runtime) = runtime::runtime(workers) else {
        return EXIT_CANNOT_RUN;
    };
    let telemetry = match Telemetry::start(otlp.as_deref(), plan.sampling_ratio, |m| {
        eprintln!("{m}");
    }) {
        Ok(telemetry) => telemetry.map(Arc::new),
        Err(e) => {
            eprintln!("error: {e}");
            eprintln!("  hint: see docs/telemetry.md for the settings telemetry reads");
            return EXIT_INVALID;
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
    let show_progress = !quiet && std::io::stderr().is_terminal();
    let options = RunOptions {
        policies,
        abort: abort.clone(),
        progress: show_progress.then(progress_bars),
        announce: !quiet,
        telemetry: telemetry.clone(),
    };
    let result = runtime.block_on(run::run(&plan, &options));
    drop(listening);
    // Bounded: a collector that is down or slow costs at most a few seconds here.
    let telemetry_view = telemetry.map(|t| t.shutdown());
    let mut report = match result {
        Ok(report) => report,
        Err(e @ run::RunError::UnknownPolicy(_)) => {
            eprintln!("error: {e}");
            return EXIT_INVALID;
        }
        Err(e) => {
            eprintln!("error: {e}");
            eprintln!("  hint: the run could not be carried out; nothing was measured");
            return EXIT_CANNOT_RUN;
        }
    };
    if let Some(view) = &telemetry_view
        && (!quiet || view.spans_dropped > 0)
    {
        eprintln!("{}", view.describe());
    }
    report.telemetry = telemetry_view;
    conclude(
        report,
        &plan,
        against.as_ref(),
        out,
        quiet,
        save_baseline.as_deref(),
    )
}

/// The plan (with `--seed` applied) and the baseline to compare with, both read before
/// the run, so a wrong path costs seconds, not the whole run; exit 2 when either is bad.
fn plan_and_baseline(
    path: &Path,
    seed: Option<u64>,
    baseline_file: Option<&Path>,
) -> Result<(Plan, Option<(baseline::Baseline, String)>), u8> {
    let fail = |e: &dyn std::fmt::Display| {
        eprintln!("error: {e}");
        EXIT_INVALID
    };
    let mut plan = plan::load(path).map_err(|e| fail(&e))?;
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
    mut report: report::Report,
    plan: &Plan,
    against: Option<&(baseline::Baseline, String)>,
    out: Option<&Path>,
    quiet: bool,
    save_baseline: Option<&Path>,
) -> u8 {
    if let Some((b, file)) = against {
        baseline::attach(&mut report, b, file, &plan.baseline);
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
        for p in &report.policies {
            for g in p.gates.iter().filter(|g| !g.pass) {
                println!("FAIL {} / {}: {}", p.name, g.name, g.detail);
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
    if report.aborted {
        EXIT_INTERRUPTED
    } else if misplaced || unsaved || written.is_err() || report.error.is_some() {
        EXIT_CANNOT_RUN
    } else if report.passed() {
        EXIT_PASS
    } else {
        EXIT_GATE_FAILED
    }
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

fn progress_bars() -> ProgressFactory {
    Arc::new(|policy: &NamedPolicy, plan: &Plan| {
        let total = (plan.duration + plan.drain).as_secs();
        let bar = ProgressBar::new(total);
        bar.set_style(
            ProgressStyle::with_template("{prefix:>16} [{bar:30}] {pos:>3}/{len}s {msg}")
                .expect("a constant template")
                .progress_chars("=> "),
        );
        bar.set_prefix(policy.name.clone());
        let bar = FinishOnDrop(bar);
        Arc::new(move |second: u64, r: &crate::stats::Recorder| {
            let bar = &bar.0;
            bar.set_position(second.min(total));
            bar.set_message(format!(
                "{} offered, {} attempts, {:.1}% ok, {} dropped",
                r.offered(),
                r.attempts,
                r.succeeded as f64 * 100.0 / r.offered().max(1) as f64,
                r.dropped
            ));
        })
    })
}

/// Leaves a policy's bar drawn in full when its run ends.
struct FinishOnDrop(ProgressBar);

impl Drop for FinishOnDrop {
    fn drop(&mut self) {
        self.0.finish();
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use super::forwards_to_itself;

    fn addr(s: &str) -> SocketAddr {
        s.parse().expect("an address")
    }

    #[test]
    fn a_tier_forwarding_to_its_own_address_is_refused_and_others_are_not() {
        let cases = [
            ("127.0.0.1:8081", "127.0.0.1:8081", true),
            ("0.0.0.0:8081", "127.0.0.1:8081", true),
            ("[::]:8081", "[::1]:8081", true),
            ("[::1]:8081", "[::1]:8081", true),
            ("127.0.0.1:8081", "127.0.0.1:8080", false),
            ("127.0.0.1:8081", "127.0.0.2:8081", false),
            ("127.0.0.1:0", "127.0.0.1:0", false),
        ];
        for (listen, to, loops) in cases {
            assert_eq!(
                forwards_to_itself(addr(listen), &[addr(to)]),
                loops,
                "{listen} → {to}"
            );
        }
        // `localhost`: one of the addresses it resolves to is enough.
        assert!(forwards_to_itself(
            addr("127.0.0.1:8081"),
            &[addr("[::1]:8081"), addr("127.0.0.1:8081")]
        ));
    }
}
