//! `harness client-test PLAN -- COMMAND ARGS…`: a program of the user's own against the
//! plan's faults, judged from the fault-server's ledger (see [`crate::client`]).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::SystemTime;

use tokio_util::sync::CancellationToken;

use super::runtime::{self, Interrupts};
use super::{EXIT_CANNOT_RUN, ReportArgs, conclude, plan_and_baseline};
use crate::client::{self, Ended, Tested};
use crate::report;

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Example: harness client-test plans/clients/urllib3.yaml -- python3 interop/clients/urllib3_retry.py {url}\n\nThe program reads the fault-server's URL from `{url}` in its arguments or from CHAOS_TARGET_URL; it is stopped at the plan's duration + drain. Its output goes beside the report (program.stdout, program.stderr)."
)]
pub struct ClientTestArgs {
    /// The plan: its `faults:`, `client:` and `gates:` (see plans/README.md).
    pub plan: PathBuf,
    #[command(flatten)]
    pub report: ReportArgs,
    /// The program and its arguments, after `--`; `{url}` becomes the fault-server's URL.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

pub(super) fn client_test(args: ClientTestArgs) -> u8 {
    let abort = CancellationToken::new();
    let listening = match Interrupts::listen_or_exit(abort.clone()) {
        Ok(listening) => listening,
        Err(code) => return code,
    };
    let (plan, against) = match plan_and_baseline(
        &args.plan,
        args.report.seed,
        args.report.baseline.as_deref(),
        true,
    ) {
        Ok(both) => both,
        Err(code) => return code,
    };
    let Some(runtime) = runtime::runtime(None) else {
        return EXIT_CANNOT_RUN;
    };
    let interrupted = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&interrupted);
    let tested = runtime.block_on(async {
        let watch = abort.clone();
        let watcher = tokio::spawn(async move {
            watch.cancelled().await;
            flag.store(true, Ordering::Relaxed);
        });
        let tested = client::run(&plan, &args.command, interrupted).await;
        watcher.abort();
        tested
    });
    drop(listening);
    let tested = match tested {
        Ok(tested) => tested,
        Err(e) => {
            eprintln!("error: {e}");
            eprintln!(
                "  hint: the program is run as given after `--` (a path or a name on PATH); nothing was measured"
            );
            return EXIT_CANNOT_RUN;
        }
    };
    let policy = client::policy_report(&plan, &tested);
    let (_, generated_at) = report::timestamp(SystemTime::now());
    let mut warnings: Vec<String> = tested.program.ended.warning().into_iter().collect();
    warnings.extend(silence(&tested));
    let context = report::RunContext {
        run_id: report::run_id(SystemTime::now()),
        warnings,
        ..report::RunContext::new(
            report::Mode::Client,
            report::Ending {
                aborted: tested.program.ended == Ended::Interrupted,
                error: None,
                generated_at,
            },
        )
    };
    let report = report::build(&plan, vec![policy], context);
    conclude(
        report,
        &plan,
        against.as_ref(),
        args.report.out.as_deref(),
        args.report.quiet,
        args.report.save_baseline.as_deref(),
    )
}

/// The warning for a program the ledger counted no request of: whether it never
/// connected (the URL not read) or connected and sent no HTTP the server could read.
fn silence(tested: &Tested) -> Option<String> {
    let l = &tested.ledger;
    if l.logical > 0 {
        return None;
    }
    Some(match tested.connections {
        _ if l.requests > 0 => format!(
            "the program sent {} request{}, but the fault-server could count none as a call (refused for a malformed header or request: see `by_outcome` in report.json)",
            l.requests,
            if l.requests == 1 { "" } else { "s" }
        ),
        0 => format!(
            "the program sent nothing to the fault-server: does it read the URL from `{{url}}` or {}?",
            client::program::URL_VARIABLE
        ),
        n => format!(
            "the program connected to the fault-server {n} time{} but sent no valid HTTP request: does it speak HTTP/1.1 or HTTP/2 without TLS (h2c)?",
            if n == 1 { "" } else { "s" }
        ),
    })
}
