//! `harness audit PLAN`: the stack's worst case from its configs, nothing sent.

use std::path::Path;

use super::{EXIT_GATE_FAILED, EXIT_INVALID, EXIT_PASS};
use crate::audit;
use crate::plan;

pub(super) fn audit(path: &Path, json: bool) -> u8 {
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
    if audit.holds() {
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
            if p.gates
                .iter()
                .all(super::super::audit::GateCheck::as_expected)
                && !p.as_expected
            {
                eprintln!(
                    "counterexample `{}` fails none of the gates the audit judges, even in the worst case",
                    p.policy
                );
            }
        }
        EXIT_GATE_FAILED
    }
}
