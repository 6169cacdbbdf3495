//! `harness export PLAN --policy NAME --format FORMAT`: a plan's policy as the production
//! config that runs it, every setting the format cannot say named on stderr.
//!
//! The files go to stdout (Envoy's two as one YAML stream, the route first) or, with
//! `--out DIR`, into DIR by their names (`grpc.json`; `route.yaml` and `cluster.yaml`),
//! each written atomically. Exit 0 when written, 2 when the plan or the policy is not
//! there, 3 when the files could not be written.

use std::path::{Path, PathBuf};

use super::{EXIT_CANNOT_RUN, EXIT_INVALID, EXIT_PASS};
use crate::export::{self, Exported, Format, Scope};
use crate::report::Files;

#[derive(Debug, clap::Args)]
pub struct ExportArgs {
    /// The plan whose policy is written out.
    pub plan: PathBuf,
    /// The policy (a plan's policy after its preset, import and keys).
    #[arg(long, value_name = "NAME")]
    pub policy: String,
    /// Set a key of the policy first, as `harness tune` prints its choice (repeat for
    /// several): `--set budget.ratio=0.15 --set max_attempts=3`.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// What to write it as.
    #[arg(long, value_enum)]
    pub format: Format,
    /// gRPC: the service the methodConfig names (default: every service).
    #[arg(long, value_name = "SERVICE")]
    pub service: Option<String>,
    /// gRPC: the method of --service (default: every method of it).
    #[arg(long, value_name = "METHOD", requires = "service")]
    pub method: Option<String>,
    /// Write the files into this directory instead of printing them.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

pub(super) fn export(args: ExportArgs) -> u8 {
    let plan = match plan_with(&args.plan, &args.policy, &args.set) {
        Ok(plan) => plan,
        Err(e) => {
            eprintln!("error: {e}");
            return EXIT_INVALID;
        }
    };
    let Some(named) = plan.policies.iter().find(|p| p.name == args.policy) else {
        let names: Vec<&str> = plan.policies.iter().map(|p| p.name.as_str()).collect();
        eprintln!(
            "error: {}: no policy named `{}` (the plan has: {})",
            args.plan.display(),
            args.policy,
            names.join(", ")
        );
        return EXIT_INVALID;
    };
    let scope = Scope {
        service: args.service,
        method: args.method,
    };
    let exported = match export::export(named.policy.config(), args.format, &scope) {
        Ok(exported) => exported,
        Err(e) => {
            eprintln!("error: {e}");
            return EXIT_CANNOT_RUN;
        }
    };
    say(&exported, &named.name);
    match &args.out {
        None => {
            print!("{}", stream(&exported));
            EXIT_PASS
        }
        Some(dir) => match write(&exported, dir) {
            Ok(()) => EXIT_PASS,
            Err(e) => {
                eprintln!("error: {e}");
                EXIT_CANNOT_RUN
            }
        },
    }
}

/// The plan, with each `--set KEY=VALUE` applied to `policy`.
fn plan_with(path: &Path, policy: &str, set: &[String]) -> Result<crate::plan::Plan, String> {
    let text = crate::plan::read(path).map_err(|e| e.to_string())?;
    let mut parts: Vec<(Vec<&str>, &str)> = Vec::new();
    for s in set {
        let (key, value) = s
            .split_once('=')
            .ok_or_else(|| format!("--set `{s}` is not KEY=VALUE; e.g. --set budget.ratio=0.15"))?;
        let mut key: Vec<&str> = key.split('.').map(str::trim).collect();
        if key.len() > 1 && key[0] == policy {
            key.remove(0);
        }
        parts.push((key, value.trim()));
    }
    let settings: Vec<crate::plan::Setting<'_>> = parts
        .iter()
        .map(|(key, value)| crate::plan::Setting {
            policy: Some(policy),
            key,
            value,
        })
        .collect();
    crate::plan::parse_with(path, &text, &settings).map_err(|e| e.to_string())
}

/// What the files cannot say, on stderr: the file itself goes to stdout.
pub(super) fn say(exported: &Exported, policy: &str) {
    for warning in &exported.warnings {
        eprintln!("warning: {warning}");
    }
    if exported.warnings.is_empty() {
        eprintln!(
            "`{policy}` as {}: it says every setting of the policy",
            exported.format.name()
        );
    } else {
        eprintln!(
            "`{policy}` as {}: {} setting(s) above differ; the files run the policy they import back as",
            exported.format.name(),
            exported.warnings.len()
        );
    }
}

/// The files as one text: one JSON document, or YAML documents one after another.
fn stream(exported: &Exported) -> String {
    match exported.format {
        Format::GrpcServiceConfig => exported.files[0].text.clone(),
        Format::EnvoyRoute => exported
            .files
            .iter()
            .map(|f| format!("# {}\n{}", f.name, f.text))
            .collect::<Vec<_>>()
            .join("---\n"),
    }
}

/// Each file into `dir` by its name, atomically.
pub(super) fn write(exported: &Exported, dir: &Path) -> Result<(), crate::report::WriteError> {
    let mut files = Files::new("export");
    for file in &exported.files {
        files.add(file.name, file.text.clone());
    }
    let dir = files.write_into(dir)?;
    for file in &exported.files {
        eprintln!("wrote {}", dir.join(file.name).display());
    }
    Ok(())
}
