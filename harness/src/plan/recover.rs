//! Every error of a plan in one pass, for `harness validate`: five mistakes, one run.
//!
//! The loader stops at its first error (serde does, and a plan's parts refer to each other).
//! To find the next, the part at fault is set aside and the text read again, every line
//! and column kept where it was:
//!
//! - a key (`arival:` misspelt, `max_attempts: 0`, `preset: aws-standrd`), with its value,
//!   is blanked out, in a block or a one-line flow map; so each mistake in one policy, in
//!   `load:` or at the top is found. A key a plan cannot go without (`duration`) gets a
//!   placeholder value instead, and a misspelt block key with one likely meaning (`rat:`
//!   for `rate:`) is read as that key, so the part that needs it still parses.
//! - a list entry (a policy, a request, a gate, a fault phase) whose fault is not one key
//!   (a gate naming an unknown metric, a policy without `name`) becomes a placeholder that
//!   keeps the entry's name, so a gate naming that policy is still right.
//!
//! An error the recovery could have caused is never reported: one at a place it edited,
//! at what holds a key it removed (the request that now has no `path`), a field it
//! removed now missing, the same error twice. The key is then put back and its list
//! entry set aside instead, if it is in one; otherwise the search ends, as it does at an
//! error it has no way past. The search stops at [`MAX_ERRORS`], saying so. Nesting past
//! the guard's depth is refused before anything is parsed, and nothing is looked for past
//! it: a nesting bomb costs one linear scan.

use std::path::Path;

use super::locate::{KeySpan, Seg, block_value_end, entry_at, key_span, locate};
use super::{Failure, Plan, PlanError, PlanErrors, check_depth, parse_traced};

/// The most errors one `validate` reports for a plan.
pub const MAX_ERRORS: usize = 20;

/// The most parses one search makes, repeats of an error included: each costs a parse of
/// the whole plan.
const MAX_ROUNDS: usize = 200;

/// Keys never blanked out on their own: a plan, a list entry or another part needs them
/// (`name`: gates and tiers refer to it), or they hold a list whose entries are set
/// aside one by one. An error at one sets aside the list entry holding it, if any.
const KEPT: &[&str] = &[
    "name", "load", "policies", "requests", "gates", "faults", "tiers", "client", "config",
    "respond", "fail", "url", "upstream", "server",
];

/// Keys set aside as a placeholder value rather than removed: the plan needs them.
const PLACEHOLDERS: &[(&str, &str)] = &[("duration", "1s")];

/// What the recovery edited, to tell an error it caused from one of the user's.
#[derive(Debug, Default)]
struct Edits {
    /// 1-based line and the 1-based columns `[from, to)` edited on it.
    spans: Vec<(usize, usize, usize)>,
    /// Keys removed.
    keys: Vec<String>,
    /// The places that hold a removed key (its map's key, its list entry's `-`): 1-based
    /// line and the last column of the place on it. An error there now is one of a part
    /// that needed the key (a request without its `path`).
    holders: Vec<(usize, usize)>,
}

impl Edits {
    fn caused(&self, e: &PlanError) -> bool {
        let at_edit = e.line.zip(e.column).is_some_and(|(line, column)| {
            self.spans
                .iter()
                .any(|&(l, from, to)| l == line && (from..to).contains(&column))
        });
        let at_holder = e.line.zip(e.column).is_some_and(|(line, column)| {
            self.holders
                .iter()
                .any(|&(l, last)| l == line && column <= last)
        });
        at_edit
            || at_holder
            || self
                .keys
                .iter()
                .any(|k| e.message.contains(&format!("missing field `{k}`")))
    }

    fn line(&mut self, line: usize) {
        self.spans.push((line + 1, 1, usize::MAX));
    }
}

/// The plan, or every error found in it (at most [`MAX_ERRORS`]), by line.
pub(super) fn check(path: &Path, text: &str) -> Result<Plan, PlanErrors> {
    // Hostile nesting: one linear scan refuses it, before any parse, once.
    check_depth(path, text).map_err(|e| PlanErrors {
        errors: vec![e],
        more: false,
    })?;
    let mut current = text.to_owned();
    let mut errors: Vec<PlanError> = Vec::new();
    let mut edits = Edits::default();
    let mut more = false;
    let mut rounds = 0;
    // The text before the last key was blanked out, and the line of its error: where the
    // key turns out to be needed, its list entry is set aside instead.
    let mut last_key: Option<(String, usize)> = None;
    loop {
        let failure = match parse_traced(path, &current) {
            Ok(plan) if errors.is_empty() => return Ok(plan),
            Ok(_) => break,
            Err(f) => f,
        };
        if edits.caused(&failure.error) || errors.iter().any(|e| e.holds(&failure.error)) {
            let instead = last_key
                .take()
                .and_then(|(before, line)| set_entry_aside(&before, line, &mut edits));
            match instead {
                Some(text) => {
                    current = text;
                    continue;
                }
                None => break,
            }
        }
        // The same mistake copied elsewhere: a place of the error already found, not
        // one more error towards the cap (but the search itself stays bounded).
        let repeated = errors.iter().position(|e| e.repeats(&failure.error));
        if repeated.is_none() && errors.len() == MAX_ERRORS || rounds == MAX_ROUNDS {
            more = true;
            break;
        }
        rounds += 1;
        // An error in a file the plan imports (a proxy tier's config) has nothing of the
        // plan's to set aside.
        let next = if failure.error.file == path {
            set_aside(&current, &failure, &mut edits)
        } else {
            None
        };
        last_key = match (&next, failure.error.line) {
            (Some(Aside::Key(_)), Some(line)) => Some((current.clone(), line)),
            _ => None,
        };
        match repeated {
            Some(first) => errors[first].also(&failure.error),
            None => errors.push(failure.error),
        }
        match next {
            Some(Aside::Key(text) | Aside::Entry(text)) if text != current => current = text,
            _ => break,
        }
    }
    // Found in the loader's order (what serde rejects, then what relates parts); read in
    // the file's.
    errors.sort_by_key(|e| (e.line, e.column));
    Err(PlanErrors { errors, more })
}

/// A plan's text with a part set aside.
enum Aside {
    Key(String),
    Entry(String),
}

/// `text` with the part at fault in `failure` set aside: its key, or its list entry.
fn set_aside(text: &str, failure: &Failure, edits: &mut Edits) -> Option<Aside> {
    let error = &failure.error;
    let line = error.line?;
    let span = match &failure.at {
        // Found while resolving: the key its path ends in, where the plan writes it.
        Some(path) => match path.last() {
            Some(Seg::Key(key)) => locate(text, path)
                .and_then(|(l, c)| key_span(text, l, c))
                .filter(|s| s.key == *key),
            _ => None,
        },
        // serde's "missing field" is said of the map, not of a key in it.
        None if error.message.starts_with("missing field") => None,
        None => key_span(text, line, error.column.unwrap_or(1)),
    };
    let suggested = span.as_ref().and_then(|s| suggestion(error, &s.key));
    match (span, suggested) {
        // A misspelt block key (`rat:` for `rate:`, which `load:` needs) read as what it
        // was meant to be, so its part still parses and the search goes on past it. Not in
        // a flow map: the keys after it on its line would move.
        (Some(span), Some(meant)) if span.end.is_none() => {
            Some(Aside::Key(rename_key(text, &span, &meant, edits)))
        }
        (Some(span), _) if !KEPT.contains(&span.key.as_str()) => {
            Some(Aside::Key(set_key_aside(text, &span, edits)))
        }
        _ => set_entry_aside(text, line, edits).map(Aside::Entry),
    }
}

/// The key an `unknown field` error's did-you-mean names for `key`, if it has one.
fn suggestion(error: &PlanError, key: &str) -> Option<String> {
    if !error.message.contains(&format!("unknown field `{key}`")) {
        return None;
    }
    let hint = error.hint.as_deref()?;
    let meant = hint.strip_prefix("did you mean `")?.strip_suffix("`?")?;
    (!meant.is_empty() && meant != key).then(|| meant.to_owned())
}

/// `text` with the key at `span` written as `meant`. Its line's columns after the key
/// move, so the whole line counts as edited: an error on it is not reported.
fn rename_key(text: &str, span: &KeySpan, meant: &str, edits: &mut Edits) -> String {
    let mut out = String::with_capacity(text.len() + meant.len());
    for (i, l) in text.lines().enumerate() {
        if i == span.line {
            let chars: Vec<char> = l.chars().collect();
            let from = span.start.min(chars.len());
            let to = (from + span.key.chars().count()).min(chars.len());
            out.extend(&chars[..from]);
            out.push_str(meant);
            out.extend(&chars[to..]);
            edits.line(i);
        } else {
            out.push_str(l);
        }
        out.push('\n');
    }
    out
}

/// `text` with the key at `span` and its value blanked out, or its value a placeholder.
fn set_key_aside(text: &str, span: &KeySpan, edits: &mut Edits) -> String {
    let placeholder = PLACEHOLDERS
        .iter()
        .find(|(key, _)| *key == span.key)
        .map(|(_, value)| *value);
    let last = match span.end {
        Some(_) => span.line + 1,
        None => block_value_end(text, span),
    };
    let mut out = String::with_capacity(text.len());
    for (i, l) in text.lines().enumerate() {
        if i == span.line {
            let chars: Vec<char> = l.chars().collect();
            let end = span.end.unwrap_or(chars.len()).min(chars.len());
            let (from, to, with) = match placeholder {
                // The value replaced, padded to keep the columns after it.
                Some(value) => {
                    let from = span.value.min(end);
                    let written: String = chars[from..end].iter().collect();
                    let width = written.trim_end().chars().count().max(value.len());
                    // `key:` at the end of its line takes the placeholder after a space.
                    let space = if written.trim().is_empty() { " " } else { "" };
                    (from, end, format!("{space}{value:width$}"))
                }
                None => (
                    span.start.min(end),
                    end,
                    " ".repeat(end - span.start.min(end)),
                ),
            };
            out.extend(&chars[..from]);
            out.push_str(&with);
            out.extend(&chars[to..]);
            edits
                .spans
                .push((i + 1, span.start + 1, to.max(from + with.len()) + 1));
        } else if (span.line..last).contains(&i) {
            edits.line(i);
        } else {
            out.push_str(l);
        }
        out.push('\n');
    }
    if placeholder.is_none() {
        edits.keys.push(span.key.clone());
        edits.holders.extend(holders(text, span));
    }
    out
}

/// The places that directly hold the key at `span` (where an error that the key's absence
/// causes is located): on its line, what comes before its map (the `{`, the key or the
/// `-` before it); for a block key, also the less indented line it is under, up to its
/// first key (a list entry's `-` and that key, or a map's key).
fn holders(text: &str, span: &KeySpan) -> Vec<(usize, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = vec![(span.line + 1, span.holder)];
    let Some(line) = lines.get(span.line).filter(|_| span.end.is_none()) else {
        return out;
    };
    let within = line.len() - line.trim_start().len();
    let above = (0..span.line).rev().find(|&i| {
        let trimmed = lines[i].trim_start();
        !trimmed.is_empty() && !trimmed.starts_with('#') && lines[i].len() - trimmed.len() < within
    });
    if let Some(i) = above {
        let mut content = lines[i].trim_start();
        while let Some(rest) = content.strip_prefix("- ") {
            content = rest.trim_start();
        }
        out.push((i + 1, lines[i].len() - content.len() + 1));
    }
    out
}

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

/// `text` with the list entry holding 1-based `line` set aside, if one does.
fn set_entry_aside(text: &str, line: usize, edits: &mut Edits) -> Option<String> {
    for (list, named, unnamed) in LISTS {
        let Some(entry) = entry_at(text, list, line) else {
            continue;
        };
        // Parsed only now, for the entry's name: the text passed the depth guard.
        let parsed: Option<serde_yaml::Value> = serde_yaml::from_str(text).ok();
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
                edits.line(i);
            } else if (entry.start..entry.end).contains(&i) {
                edits.line(i);
            } else {
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

    use super::{MAX_ERRORS, check};

    /// Each error as `line:column message`.
    fn found(text: &str) -> Vec<String> {
        let errors = check(Path::new("p.yaml"), text).expect_err("a broken plan");
        assert!(!errors.more, "{errors:#?}");
        errors
            .errors
            .iter()
            .map(|e| {
                format!(
                    "{}:{} {}",
                    e.line.unwrap_or(0),
                    e.column.unwrap_or(0),
                    e.message
                )
            })
            .collect()
    }

    fn assert_found(text: &str, expected: &[(&str, &str)]) {
        let found = found(text);
        assert_eq!(found.len(), expected.len(), "{found:#?}");
        for (got, (at, says)) in found.iter().zip(expected) {
            assert!(
                got.starts_with(&format!("{at} ")) && got.contains(says),
                "expected {at} {says}, got {got}; all: {found:#?}"
            );
        }
    }

    /// Blanked out, `rat:` left `load:` without its `rate` and ended the search there.
    #[test]
    fn a_misspelt_key_a_part_needs_is_read_as_meant_and_the_search_goes_on() {
        let text = "\
duration: 10s
load:
  rat: 10
  requests: [ { name: r, path: / } ]
policies:
  - name: a
    max_attempts: 0
gates:
  - { metric: sucess_rate, min: 0.9 }
";
        assert_found(
            text,
            &[
                ("3:3", "unknown field `rat`"),
                ("7:5", "`max_attempts` is 0"),
                ("9:3", "unknown metric"),
            ],
        );
    }

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
        assert_found(
            text,
            &[
                ("6:7", "path"),
                ("11:5", "`max_attempts` is 0"),
                ("13:5", "unknown field `retries`"),
                ("17:3", "unknown gate `nope`"),
            ],
        );
    }

    #[test]
    fn every_mistake_in_one_policy_at_the_top_and_in_load_is_found() {
        let text = "\
duration: 10
load:
  rate: 10
  arival: poisson
  requests: [ { name: r, path: / } ]
policies:
  - name: a
    max_attempts: 0
    backof: { fixed: 1s }
    preset: aws-standrd
  - { name: b, max_attempts: 0, jitter: full, preset: envoi }
";
        assert_found(
            text,
            &[
                ("1:11", "duration"),
                ("4:3", "unknown field `arival`"),
                // Policy b's `max_attempts: 0` (11:16) is a place of this one.
                ("8:5", "`max_attempts` is 0"),
                ("9:5", "unknown field `backof`"),
                ("10:5", "unknown preset"),
                ("11:33", "unknown field `jitter`"),
                ("11:47", "unknown preset `envoi`"),
            ],
        );
        let errors = check(Path::new("p.yaml"), text).expect_err("broken");
        assert_eq!(*errors.errors[2].also_at, [(11, Some(16))]);
    }

    #[test]
    fn a_value_on_the_lines_below_its_key_is_set_aside_with_it() {
        let text = "duration:\n  10\nload:\n  rate: 10\n  requests: [ { name: r, path: / } ]\n  nope:\n    - 1\n    - 2\npolicies:\n  - name: a\n    max_attempts: 0\n";
        assert_found(
            text,
            &[
                ("2:3", "no unit"),
                ("6:3", "unknown field `nope`"),
                ("11:5", "`max_attempts` is 0"),
            ],
        );
    }

    #[test]
    fn a_key_set_aside_deep_in_an_entry_leaves_the_entrys_own_errors_found() {
        let text = "\
duration: 30s
load: { rate: 10, requests: [ { name: r, path: / } ] }
faults:
  - name: outage
    from: 10s
    until: 5s
    respond: { status: 503, retry_afer: 1s }
policies:
  - name: b
    retry_on: [transient, nope]
";
        assert_found(
            text,
            &[
                ("4:3", "`until` (5s) must be after `from` (10s)"),
                ("7:29", "unknown field `retry_afer`"),
                ("10:5", "unknown retry_on condition `nope`"),
            ],
        );
    }

    #[test]
    fn a_key_a_part_needs_is_not_blamed_for_its_absence() {
        // Without its `path`, a request would be refused for having none: the request is
        // set aside instead, and the next error still found.
        let text = "duration: 1s\nload:\n  rate: 10\n  requests:\n    - name: r\n      path: nope\npolicies:\n  - name: a\n    max_attempts: 0\n";
        assert_found(text, &[("6:7", "path"), ("9:5", "`max_attempts` is 0")]);
    }

    #[test]
    fn a_plan_with_no_error_loads_and_the_cap_is_said() {
        let good = "duration: 1s\nload: { rate: 10, requests: [ { name: r, path: / } ] }\npolicies: [ { name: a } ]\n";
        assert!(check(Path::new("p.yaml"), good).is_ok());
        let many: String = (0..MAX_ERRORS + 5)
            .map(|i| format!("  - name: p{i}\n    retry_on: [nope{i}]\n"))
            .collect();
        let text = format!(
            "duration: 1s\nload: {{ rate: 10, requests: [ {{ name: r, path: / }} ] }}\npolicies:\n{many}"
        );
        let errors = check(Path::new("p.yaml"), &text).expect_err("broken");
        assert_eq!(errors.errors.len(), MAX_ERRORS);
        assert!(errors.more);
    }

    #[test]
    fn one_mistake_copied_into_every_policy_is_one_error_with_its_places() {
        let many: String = (0..40)
            .map(|i| format!("  - name: p{i}\n    max_attempts: 0\n"))
            .collect();
        let text = format!(
            "duration: 1s\nload: {{ rate: 10, requests: [ {{ name: r, path: / }} ] }}\npolicies:\n{many}  - name: last\n    retry_on: [nope]\n"
        );
        let errors = check(Path::new("p.yaml"), &text).expect_err("broken");
        assert!(!errors.more, "all 41 were found: {errors:?}");
        assert_eq!(errors.errors.len(), 2, "{errors:?}");
        let first = &errors.errors[0];
        assert_eq!((first.line, first.column), (Some(5), Some(5)));
        assert_eq!(first.also_at.len(), 39);
        assert_eq!(first.also_at[0], (7, Some(5)));
        let shown = first.to_string();
        assert!(shown.contains("the same error also at 7:5, 9:5"), "{shown}");
        assert!(shown.contains("and 31 more place(s)"), "{shown}");
        assert!(errors.errors[1].message.contains("nope"));
    }

    #[test]
    fn a_nesting_bomb_is_one_error_and_nothing_else_is_parsed() {
        let text = format!(
            "duration: 5x\nload: {}{}\npolicies: [ {{ name: a, max_attempts: 0 }} ]\n",
            "[".repeat(100_000),
            "]".repeat(100_000)
        );
        let errors = check(Path::new("p.yaml"), &text).expect_err("too deep");
        assert_eq!(errors.errors.len(), 1, "{errors:#?}");
        assert!(
            errors.errors[0]
                .message
                .contains("nested 65 levels deep (at most 64)"),
            "{errors:#?}"
        );
        assert_eq!(
            (errors.errors[0].line, errors.errors[0].column),
            (Some(2), Some(71))
        );
    }
}
