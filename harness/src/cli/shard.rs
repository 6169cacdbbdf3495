//! `harness chaos PLAN --shard I/N`: the checks before a shard runs and its partial
//! report written; `harness merge PARTIAL…`: one report from a sharded run's partials,
//! judged once.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::{EXIT_CANNOT_RUN, EXIT_INTERRUPTED, EXIT_INVALID, EXIT_PASS};
use crate::plan::{Plan, Target};
use crate::shard::merge::{self, Source};
use crate::shard::partial::{self, LOG_MARKER, Partial};
use crate::shard::{Shard, Sharding, format_time, parse_time};

#[derive(Debug, clap::Args)]
pub struct MergeArgs {
    /// The shards' partial reports: the JSON files `--shard` wrote, or logs that hold one
    /// (`--partial -` prints it on a line after `chaos-partial/v1`; `kubectl logs`).
    #[arg(required = true, value_name = "PARTIAL")]
    pub partials: Vec<PathBuf>,
    /// The plan the shards ran (default: the path their partial reports name).
    #[arg(long, value_name = "FILE")]
    pub plan: Option<PathBuf>,
    /// Write the report into this directory instead of reports/<plan>/<timestamp>/.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// No summary table (the report is still written).
    #[arg(long, short)]
    pub quiet: bool,
    /// Compare each policy with this baseline: a regression fails the merged run (exit 1).
    #[arg(long, value_name = "FILE")]
    pub baseline: Option<PathBuf>,
    /// Save the merged run's figures as a baseline to FILE.
    #[arg(long, value_name = "FILE")]
    pub save_baseline: Option<PathBuf>,
}

/// Says on stderr which shard of `plan` this process runs, when it starts, and how long
/// each policy's slot is.
pub(super) fn announce(sharding: &Sharding, plan: &Plan) {
    eprintln!(
        "shard {} of `{}`: starting at {} ({} s a policy)",
        sharding.shard,
        plan.name,
        format_time(sharding.start),
        Sharding::slot(plan).as_secs()
    );
}

/// What `--target`, `--shard` and `--start-at` make of a plan: the target driven, and
/// this process's place in a sharded run. Exit 2 with a hint when they do not fit.
pub(super) fn prepare(
    plan: &mut Plan,
    target: Option<&str>,
    shard: Option<Shard>,
    start_at: Option<&str>,
    judged_here: bool,
) -> Result<Option<Sharding>, u8> {
    let fail = |message: String, hint: &str| {
        eprintln!("error: {message}");
        eprintln!("  hint: {hint}");
        Err(EXIT_INVALID)
    };
    if let Some(url) = target {
        let parsed = reqwest::Url::parse(url)
            .ok()
            .filter(|u| u.scheme() == "http");
        let Some(parsed) = parsed else {
            return fail(
                format!("--target `{url}` is not an http:// URL"),
                "e.g. --target http://127.0.0.1:8080, a fault-server started with `fault-server --listen 127.0.0.1:8080`",
            );
        };
        if !parsed.host_str().is_some_and(crate::plan::is_loopback_host) {
            return fail(
                format!(
                    "--target `{url}` is not on loopback: load and faults go only to machines you own"
                ),
                "a plan that means a remote fault-server says so itself: `target: { url: ... }` and `allow_remote: true`",
            );
        }
        let script = match &plan.target {
            Target::Embedded => None,
            Target::FaultServer { script, .. } => *script,
            Target::Proxy { .. } | Target::BlackBox { .. } => {
                return fail(
                    format!(
                        "--target drives a running fault-server in place of the plan's, and {}'s target is not one",
                        plan.file.display()
                    ),
                    "use --target with a plan whose target is `embedded` or a fault-server",
                );
            }
        };
        plan.target = Target::FaultServer {
            url: url.trim_end_matches('/').to_owned(),
            token: None,
            script,
        };
    }
    if let Target::FaultServer { token, .. } = &mut plan.target
        && token.is_none()
    {
        *token = std::env::var(fault_server::wire::TOKEN_VARIABLE)
            .ok()
            .filter(|t| !t.trim().is_empty());
    }
    let Some(shard) = shard else {
        if start_at.is_some() {
            return fail(
                "--start-at is the common start of a sharded run".to_owned(),
                "give --shard I/N too",
            );
        }
        return Ok(None);
    };
    if plan.target.is_embedded() {
        return fail(
            format!(
                "shard {shard} of {}: a sharded run's shards drive one fault-server, and this plan's is embedded (each shard would start its own, with its own ledger and capacity)",
                plan.file.display()
            ),
            "start one with `fault-server --listen 127.0.0.1:8080` and give `--target http://127.0.0.1:8080`, or aim the plan's `target:` at it",
        );
    }
    if judged_here {
        return fail(
            "a shard is not judged alone: the gates and the baseline are judged once, on the merged report".to_owned(),
            "give --baseline and --save-baseline to `harness merge`",
        );
    }
    let start = match start_at {
        Some(text) => match parse_time(text) {
            Ok(t) => t,
            Err(e) => {
                return fail(
                    format!("--start-at: {e}"),
                    "every shard of a run gets the same --start-at",
                );
            }
        },
        None if shard.count == 1 => SystemTime::now(),
        None => {
            return fail(
                format!("shard {shard}: the shards of a run need a common start"),
                "give every shard the same --start-at, a little ahead: e.g. --start-at $(date -u -d '+30 sec' +%Y-%m-%dT%H:%M:%SZ)",
            );
        }
    };
    Ok(Some(Sharding { shard, start }))
}

/// Writes a shard's partial report (atomically, or on stdout after [`LOG_MARKER`]) and
/// says what it holds: exit 0 once written, 3 when the shard could not run all of it, 130
/// when interrupted. A shard judges nothing.
pub(super) fn conclude(
    partial: &Partial,
    plan: &Plan,
    to: Option<&Path>,
    out: Option<&Path>,
    quiet: bool,
) -> u8 {
    let json = partial.to_json();
    let shard = partial.shard;
    let written = match to {
        Some(p) if p == Path::new("-") => {
            #[allow(clippy::print_stdout)]
            {
                println!("{LOG_MARKER}{json}");
            }
            Ok("stdout".to_owned())
        }
        _ => {
            let file = to.map_or_else(
                || {
                    out.map_or_else(
                        || Path::new("reports").join(&plan.name).join("shards"),
                        Path::to_path_buf,
                    )
                    .join(format!("partial-{}-of-{}.json", shard.index, shard.count))
                },
                Path::to_path_buf,
            );
            write_atomically(&file, &json).map(|()| file.display().to_string())
        }
    };
    let logical: u64 = partial.policies.iter().map(|p| p.recorder.logical).sum();
    let attempts: u64 = partial.policies.iter().map(|p| p.recorder.attempts).sum();
    if let Some(e) = &partial.error {
        eprintln!("error: shard {shard}: {e}");
    }
    match &written {
        Ok(place) if !quiet || partial.error.is_some() => eprintln!(
            "shard {shard} of `{}`: {} polic{}, {logical} logical requests, {attempts} attempts{}; partial report in {place}: merge every shard's with `harness merge`",
            plan.name,
            partial.policies.len(),
            if partial.policies.len() == 1 {
                "y"
            } else {
                "ies"
            },
            if partial.keeper {
                ", the ledger read"
            } else {
                ""
            },
        ),
        Ok(_) => {}
        Err(e) => eprintln!("error: shard {shard}: the partial report could not be written: {e}"),
    }
    if partial.aborted {
        EXIT_INTERRUPTED
    } else if written.is_err() || partial.error.is_some() {
        EXIT_CANNOT_RUN
    } else {
        EXIT_PASS
    }
}

fn write_atomically(file: &Path, text: &str) -> Result<(), String> {
    if let Some(dir) = file.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let tmp = file.with_extension("json.tmp");
    std::fs::write(&tmp, text)
        .and_then(|()| std::fs::rename(&tmp, file))
        .map_err(|e| format!("{}: {e}", file.display()))
}

/// `harness merge`: exit 0 when every gate of the merged report passes, 1 when one fails
/// (or the baseline regressed), 2 when the partials are not of one run of the plan, 3
/// when a shard is missing or failed (`INCOMPLETE`), 130 when a shard was interrupted.
pub(super) fn merge(args: MergeArgs) -> u8 {
    let MergeArgs {
        partials,
        plan: plan_file,
        out,
        quiet,
        baseline,
        save_baseline,
    } = args;
    let mut sources = Vec::new();
    for path in &partials {
        match partial::read(path) {
            Ok(partial) => sources.push(Source {
                path: path.display().to_string(),
                partial,
            }),
            Err(e) => {
                eprintln!("error: {e}");
                eprintln!(
                    "  hint: give the files the shards wrote (`--partial`), or their logs (`kubectl logs POD > FILE`)"
                );
                return EXIT_INVALID;
            }
        }
    }
    let Some(first) = sources.first() else {
        return EXIT_INVALID;
    };
    let plan_file = plan_file.unwrap_or_else(|| PathBuf::from(&first.partial.plan.file));
    let seed = first.partial.plan.seed;
    let (plan, against) =
        match super::plan_and_baseline(&plan_file, Some(seed), baseline.as_deref(), false) {
            Ok(both) => both,
            Err(code) => return code,
        };
    let report = match merge::merge(&plan, sources) {
        Ok(report) => report,
        Err(e) => {
            eprintln!("error: {e}");
            eprintln!(
                "  hint: merge the partial reports of one run (one --start-at, one N), with the plan they ran (--plan)"
            );
            return EXIT_INVALID;
        }
    };
    super::conclude(
        report,
        &plan,
        against.as_ref(),
        out.as_deref(),
        quiet,
        save_baseline.as_deref(),
    )
}
