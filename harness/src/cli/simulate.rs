//! `harness simulate`: a plan in virtual time, concluded as `chaos` concludes a live run.

use std::path::PathBuf;

use super::{EXIT_INVALID, conclude, plan_and_baseline};

#[derive(Debug, clap::Args)]
pub struct SimulateArgs {
    /// The plan file (see plans/README.md).
    pub plan: PathBuf,
    /// Simulate only this policy (repeat for several).
    #[arg(long = "policy", value_name = "NAME")]
    pub policies: Vec<String>,
    /// Override the plan's seed.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Write the report into this directory instead of reports/<plan>/<timestamp>/.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// No summary table (the report is still written).
    #[arg(long, short)]
    pub quiet: bool,
    /// Compare each policy with this baseline too (as `chaos --baseline`).
    #[arg(long, value_name = "FILE")]
    pub baseline: Option<PathBuf>,
    /// Save this run's figures as a baseline to FILE.
    #[arg(long, value_name = "FILE")]
    pub save_baseline: Option<PathBuf>,
    /// Run the plan once per value of a policy's key and write one comparison
    /// (sweep.md, sweep.json, sweep.html): `--sweep jittered-budget.budget.ratio=0.05,0.1,0.2`
    /// (POLICY.KEY; the policy may be left out when the plan or `--policy` leaves one).
    #[arg(long, value_name = "KEY=V1,V2,...")]
    pub sweep: Option<String>,
}

pub(super) fn simulate(args: SimulateArgs) -> u8 {
    let SimulateArgs {
        plan: path,
        policies,
        seed,
        out,
        quiet,
        baseline: baseline_file,
        save_baseline,
        sweep,
    } = args;
    if let Some(sweep) = sweep {
        return crate::simulate::sweep::main(&path, &policies, seed, out.as_deref(), &sweep, quiet);
    }
    let (plan, against) = match plan_and_baseline(&path, seed, baseline_file.as_deref()) {
        Ok(both) => both,
        Err(code) => return code,
    };
    let (report, effort) = match crate::simulate::simulate(&plan, &policies) {
        Ok(done) => done,
        Err(e) => {
            eprintln!("error: {e}");
            return EXIT_INVALID;
        }
    };
    if !quiet {
        eprintln!("{}", effort.describe());
    }
    conclude(
        report,
        &plan,
        against.as_ref(),
        out.as_deref(),
        quiet,
        save_baseline.as_deref(),
    )
}
