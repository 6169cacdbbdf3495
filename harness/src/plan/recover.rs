//! Every error of a plan in one pass, for `harness validate`: five mistakes, one run.
//!
//! The loader stops at its first error (serde does, and a plan's parts refer to each other).
//! To find the next, the list entry that holds the error (a policy, a request, a gate, a
//! fault phase) is set aside and the text read again: its first line becomes a placeholder
//! that keeps the entry's name (so a gate naming that policy is still right) and the rest
//! of its lines are blanked (so every later error keeps its line number). An error outside
//! a block-style list entry ends the search: setting aside a plan's key would invent errors.

use std::path::Path;

use super::locate::{Seg, entry_at};
use super::{Plan, PlanError, parse};

/// The most errors one `validate` reports for a plan.
pub(super) const MAX_ERRORS: usize = 20;

/// The lists whose entries can be set aside, and each one's placeholder for an entry named
/// `{name}` (`None`: the entry has no name to keep).
const LISTS: &[(&[Seg], &str, &str)] = &[
    (
        &[Seg::Key("policies")],
        "{ name: {name} }",
        "{ name: set-aside }",
    ),
    (
        &[Seg::Key("load"), Seg::Key("requests")],
        "{ name: {name}, path: / }",
        "{ name: set-aside, path: / }",
    ),
    (
        &[Seg::Key("gates")],
        "{ metric: success_rate, min: 0 }",
        "{ metric: success_rate, min: 0 }",
    ),
    (
        &[Seg::Key("faults")],
        "{ name: {name}, probability: 0, respond: { status: 503 } }",
        "{ probability: 0, respond: { status: 503 } }",
    ),
];

/// The plan, or every error found in it (at most [`MAX_ERRORS`]), by line.
pub(super) fn check(path: &Path, text: &str) -> Result<Plan, Vec<PlanError>> {
    let mut current = text.to_owned();
    let mut errors: Vec<PlanError> = Vec::new();
    while errors.len() < MAX_ERRORS {
        let error = match parse(path, &current) {
            Ok(plan) if errors.is_empty() => return Ok(plan),
            Ok(_) => break,
            Err(e) => e,
        };
        // An error in a file the plan imports (a proxy tier's config) has no entry of the
        // plan's to set aside.
        let next = error
            .line
            .filter(|_| error.file == path)
            .and_then(|line| set_aside(&current, line));
        errors.push(error);
        match next {
            Some(text) => current = text,
            None => break,
        }
    }
    // Found in the loader's order (what serde rejects, then what relates parts); read in
    // the file's.
    errors.sort_by_key(|e| e.line);
    Err(errors)
}

/// `text` with the list entry holding 1-based `line` set aside, if one does.
fn set_aside(text: &str, line: usize) -> Option<String> {
    let parsed: Option<serde_yaml::Value> = serde_yaml::from_str(text).ok();
    for (list, named, unnamed) in LISTS {
        let Some(entry) = entry_at(text, list, line) else {
            continue;
        };
        let name = parsed
            .as_ref()
            .and_then(|v| list_value(v, list))
            .and_then(|l| l.get(entry.index))
            .and_then(|e| e.get("name"))
            .and_then(serde_yaml::Value::as_str)
            // Quoted as JSON, which YAML reads as a double-quoted string.
            .map(|n| serde_json::to_string(n).unwrap_or_default());
        let placeholder = match name {
            Some(name) => named.replace("{name}", &name),
            None => (*unnamed).to_owned(),
        };
        let mut out = String::with_capacity(text.len());
        for (i, l) in text.lines().enumerate() {
            if i == entry.start {
                out.push_str(&" ".repeat(entry.indent));
                out.push_str("- ");
                out.push_str(&placeholder);
            } else if !(entry.start..entry.end).contains(&i) {
                out.push_str(l);
            }
            out.push('\n');
        }
        return Some(out);
    }
    None
}

fn list_value<'a>(root: &'a serde_yaml::Value, path: &[Seg]) -> Option<&'a Vec<serde_yaml::Value>> {
    let mut at = root;
    for seg in path {
        if let Seg::Key(key) = seg {
            at = at.get(*key)?;
        }
    }
    at.as_sequence()
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::check;

    #[test]
    fn every_broken_entry_is_found_in_one_pass_at_its_own_line() {
        let text = "\
duration: 1s
load:
  rate: 10
  requests:
    - name: r
      path: nope
    - name: s
      path: /ok
policies:
  - name: a
    max_attempts: 0
  - name: b
    retries: 3
  - name: c
gates:
  - { metric: success_rate, min: 0.9, policy: a }
  - nope
";
        let errors = check(Path::new("p.yaml"), text).expect_err("four mistakes");
        let lines: Vec<Option<usize>> = errors.iter().map(|e| e.line).collect();
        assert_eq!(
            lines,
            [Some(6), Some(11), Some(13), Some(17)],
            "{errors:#?}"
        );
        assert!(
            errors[1].message.contains("`max_attempts` is 0"),
            "{}",
            errors[1]
        );
        assert!(
            errors[2].message.contains("unknown field `retries`"),
            "{}",
            errors[2]
        );
    }

    #[test]
    fn a_plan_with_no_error_loads_and_one_outside_a_list_ends_the_search() {
        let good = "duration: 1s\nload: { rate: 10, requests: [ { name: r, path: / } ] }\npolicies: [ { name: a } ]\n";
        assert!(check(Path::new("p.yaml"), good).is_ok());
        let bad = "duration: 5x\nload: { rate: 10, requests: [ { name: r, path: / } ] }\npolicies: [ { name: a, max_attempts: 0 } ]\n";
        let errors = check(Path::new("p.yaml"), bad).expect_err("broken");
        assert_eq!(errors.len(), 1, "{errors:#?}");
    }
}
