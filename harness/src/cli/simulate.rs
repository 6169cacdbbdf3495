//! `harness simulate`: a plan in virtual time, concluded as `chaos` concludes a live run;
//! `--sweep` goes to `sweep.rs`.

use super::{EXIT_INVALID, PlanArgs, conclude, plan_and_baseline};

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
        seed,
        out,
        quiet,
        baseline: baseline_file,
        save_baseline,
    } = run;
    if let Some(sweep) = sweep {
        return super::sweep::sweep(&path, &policies, seed, out.as_deref(), &sweep, quiet);
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
