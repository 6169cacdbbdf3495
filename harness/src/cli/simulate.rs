//! `harness simulate`: a plan in virtual time, concluded as `chaos` concludes a live run;
//! `--sweep` goes to `sweep.rs`. Ctrl-C, SIGTERM and SIGHUP stop it as they stop `chaos`
//! ([`Interrupts`]): the report of what ran is written, marked aborted, exit 130.

use tokio_util::sync::CancellationToken;

use super::runtime::Interrupts;
use super::{EXIT_INVALID, PlanArgs, ReportArgs, conclude, plan_and_baseline};

#[derive(Debug, clap::Args)]
pub struct SimulateArgs {
    #[command(flatten)]
    pub run: PlanArgs,
    /// Run the plan once per value of a policy's key and write one comparison
    /// (sweep.md, sweep.json, sweep.html): `--sweep jittered-budget.budget.ratio=0.05,0.1,0.2`
    /// (POLICY.KEY; the policy may be left out when the plan or `--policy` leaves one).
    #[arg(long, value_name = "KEY=V1,V2,...")]
    pub sweep: Option<String>,
}

pub(super) fn simulate(args: SimulateArgs) -> u8 {
    let SimulateArgs { run, sweep } = args;
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
    // Before the plan is read, as `chaos` does: an interrupt however early ends the run
    // (or the sweep) with what ran written, marked aborted.
    let abort = CancellationToken::new();
    let _listening = match Interrupts::listen_or_exit(abort.clone()) {
        Ok(listening) => listening,
        Err(code) => return code,
    };
    if let Err(e) = crate::plan::load_simulable(&path) {
        eprintln!("error: {e}");
        return EXIT_INVALID;
    }
    if let Some(sweep) = sweep {
        return super::sweep::sweep(
            &path,
            &policies,
            seed,
            out.as_deref(),
            &sweep,
            quiet,
            &abort,
        );
    }
    let (plan, against) = match plan_and_baseline(&path, seed, baseline_file.as_deref(), false) {
        Ok(both) => both,
        Err(code) => return code,
    };
    let starting = |name: &str| {
        if !quiet {
            eprintln!("simulating policy `{name}`");
        }
    };
    let (mut draft, effort) =
        match crate::simulate::simulate_draft(&plan, &policies, &abort, starting) {
            Ok(done) => done,
            Err(e) => {
                eprintln!("error: {e}");
                return EXIT_INVALID;
            }
        };
    if !quiet {
        eprintln!("{}", effort.describe());
    }
    draft.context.run_id = crate::report::run_id(std::time::SystemTime::now());
    conclude(
        draft.build(&plan),
        &plan,
        against.as_ref(),
        out.as_deref(),
        quiet,
        save_baseline.as_deref(),
    )
}
