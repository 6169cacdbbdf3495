//! `harness validate` (with `--explain`, every policy as it resolved) and `harness presets`.

use std::path::PathBuf;

use super::{EXIT_INVALID, EXIT_PASS};
use crate::plan::{self, Plan, resolved};
use crate::policy::Preset;

pub(super) fn validate(paths: &[PathBuf], explain: bool) -> u8 {
    let mut code = EXIT_PASS;
    for path in paths {
        match plan::load_all(path) {
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
                if explain {
                    print!("{}", resolved::proxy_tiers(&p));
                    print!("{}", explained(&p));
                }
                for warning in &p.warnings {
                    match warning.at {
                        Some((line, column)) => {
                            eprintln!("warning: {}:{line}:{column}: {warning}", path.display());
                        }
                        None => eprintln!("warning: {}: {warning}", path.display()),
                    }
                }
            }
            Err(found) => {
                for e in &found.errors {
                    eprintln!("error: {e}");
                }
                if found.more {
                    eprintln!(
                        "{}: stopped after {} errors (the most one run reports); fix these and validate again for the rest",
                        path.display(),
                        found.errors.len()
                    );
                } else if found.errors.len() > 1 {
                    eprintln!("{}: {} errors", path.display(), found.errors.len());
                }
                code = EXIT_INVALID;
            }
        }
    }
    code
}

/// The plan's policies as they resolved, a `policies:` block a plan takes back: each
/// policy's origin as a comment, then every field.
fn explained(plan: &Plan) -> String {
    let mut out =
        "policies:   # as resolved: every field after presets, imports and the plan's keys\n"
            .to_owned();
    for p in &plan.policies {
        out.push_str(&format!("  - name: {}\n", p.name));
        match (&p.import, p.preset) {
            (Some(import), _) => {
                out.push_str(&format!("    # import: {import}, then the plan's keys\n"));
            }
            (None, Some(preset)) => out.push_str(&format!(
                "    # preset: {}, then the plan's keys\n",
                preset.name()
            )),
            (None, None) => {}
        }
        out.push_str(&with_origins(&resolved::yaml(&resolved::named(p), 4), p));
    }
    out
}

/// `yaml`, each top-level field of `p` that has an origin (an Istio import's) followed by
/// it in the line's comment.
fn with_origins(yaml: &str, p: &plan::NamedPolicy) -> String {
    if p.origins.is_empty() {
        return yaml.to_owned();
    }
    let mut out = String::new();
    for line in yaml.lines() {
        let from = line
            .strip_prefix("    ")
            .filter(|l| !l.starts_with(' '))
            .and_then(|l| l.split_once(':'))
            .and_then(|(key, _)| {
                let key = if key.starts_with("retry_after") {
                    "honor_retry_after"
                } else {
                    key
                };
                p.origins.iter().find(|(field, _)| *field == key)
            });
        match from {
            Some((_, from)) if line.contains("   # ") => out.push_str(&format!("{line}; {from}\n")),
            Some((_, from)) => out.push_str(&format!("{line}   # {from}\n")),
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

pub(super) fn presets() {
    for p in Preset::ALL {
        println!(
            "{}\n  source: {}\n  caveat: {}\n  policy:\n{}",
            p.name(),
            p.source(),
            p.caveat(),
            resolved::yaml(&resolved::policy(&p.config()), 4)
        );
    }
}
