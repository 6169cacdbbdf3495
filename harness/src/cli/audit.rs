//! `harness audit PLAN`: the stack's worst case from its configs, nothing sent.

use std::path::PathBuf;

use super::{EXIT_GATE_FAILED, EXIT_INVALID, EXIT_PASS};
use crate::audit;
use crate::plan;

/// `harness audit PLAN [--json]`.
#[derive(Debug, clap::Args)]
pub struct AuditArgs {
    /// The plan file.
    pub plan: PathBuf,
    /// The same figures as JSON (`chaos-audit/v1`).
    #[arg(long)]
    pub json: bool,
}

/// Per policy, method and failure class: each hop's tries and the attempts at the leaf in a
/// total outage, budgets, serial time against the caller's wait, the hops that resend
/// POSTs, each at its config line. Exit 1 when a gate cannot hold in the worst case.
pub(super) fn audit(args: &AuditArgs) -> u8 {
    let (path, json) = (args.plan.as_path(), args.json);
    let loaded = plan::read(path)
        .map_err(|e| vec![e.to_string()])
        .and_then(|text| {
            plan::parse_all(path, &text)
                .map(|p| (p, text))
                .map_err(|found| found.errors.iter().map(ToString::to_string).collect())
        });
    let (plan, text) = match loaded {
        Ok(loaded) => loaded,
        Err(errors) => {
            for e in errors {
                eprintln!("error: {e}");
            }
            return EXIT_INVALID;
        }
    };
    // What the models approximate bears on the figures: said as `validate` says it.
    for warning in &plan.warnings {
        match warning.at {
            Some((line, column)) => {
                eprintln!("warning: {}:{line}:{column}: {warning}", path.display());
            }
            None => eprintln!("warning: {}: {warning}", path.display()),
        }
    }
    let audit = audit::audit(&plan, &text);
    if json {
        match serde_json::to_string_pretty(&audit) {
            Ok(text) => println!("{text}"),
            Err(e) => {
                eprintln!("error: the audit as JSON: {e}");
                return EXIT_INVALID;
            }
        }
    } else {
        print!("{}", audit::text(&audit));
    }
    if audit.as_expected() {
        EXIT_PASS
    } else {
        for p in &audit.policies {
            for g in p.gates.iter().filter(|g| !g.as_expected()) {
                match g.expected_to_fail {
                    false => eprintln!(
                        "gate `{}` cannot hold for policy `{}` in the worst case: {}",
                        g.gate, p.policy, g.why
                    ),
                    true => eprintln!(
                        "gate `{}` holds for counterexample `{}` even in the worst case, so no run can fail it: {}",
                        g.gate, p.policy, g.why
                    ),
                }
            }
            if p.gates.iter().all(audit::GateCheck::as_expected) && !p.as_expected {
                eprintln!(
                    "counterexample `{}` fails none of the gates the audit judges, even in the worst case",
                    p.policy
                );
            }
        }
        EXIT_GATE_FAILED
    }
}
