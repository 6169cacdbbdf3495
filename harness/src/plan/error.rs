//! Plan errors: where a plan is wrong, what is wrong, and what to write instead.

use std::fmt;
use std::path::{Path, PathBuf};

use super::locate::Seg;

/// A plan that cannot run, and where.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanError {
    pub file: PathBuf,
    pub line: Option<usize>,
    pub column: Option<usize>,
    pub message: String,
    pub hint: Option<String>,
    /// The same error (message and hint) at other places, line and column: a plan of 64
    /// policies with one mistake copied into each reads as one error and its places, not
    /// as the cap's worth of the same lines.
    /// (A boxed slice: a plan error is returned by value everywhere, and stays small.)
    pub also_at: Box<[(usize, Option<usize>)]>,
}

/// A message without the part it names first (`policy `p7`: `, `tier `edge`: `): what
/// is wrong, whichever copy it is wrong in.
fn gist(message: &str) -> &str {
    let named = message.split_once(" `").and_then(|(word, rest)| {
        let one_word = !word.is_empty() && word.chars().all(|c| c.is_ascii_lowercase());
        let (_, after) = rest.split_once("`: ")?;
        one_word.then_some(after)
    });
    named.unwrap_or(message)
}

/// The most places [`PlanError::also_at`] lists; the rest are counted.
const MAX_SHOWN_PLACES: usize = 8;

impl PlanError {
    /// Notes `other`'s place as one more of this error's.
    pub fn also(&mut self, other: &PlanError) {
        let mut places = std::mem::take(&mut self.also_at).into_vec();
        places.push((other.line.unwrap_or(0), other.column));
        self.also_at = places.into_boxed_slice();
    }

    /// Whether `other` is this error, at its own place or one of its `also_at`.
    pub fn holds(&self, other: &PlanError) -> bool {
        self.says_as(other)
            && ((self.line, self.column) == (other.line, other.column)
                || self
                    .also_at
                    .contains(&(other.line.unwrap_or(0), other.column)))
    }

    /// Whether `other` says the same as this, somewhere else in the same file.
    pub fn repeats(&self, other: &PlanError) -> bool {
        self.says_as(other) && (self.line, self.column) != (other.line, other.column)
    }

    /// The same file, hint and message but for the part it names (`policy `p7`: `).
    fn says_as(&self, other: &PlanError) -> bool {
        self.file == other.file
            && self.hint == other.hint
            && gist(&self.message) == gist(&other.message)
    }
}

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
            if let Some(column) = self.column {
                write!(f, ":{column}")?;
            }
        }
        write!(f, ": {}", self.message)?;
        if !self.also_at.is_empty() {
            let shown: Vec<String> = self
                .also_at
                .iter()
                .take(MAX_SHOWN_PLACES)
                .map(|(line, column)| match column {
                    Some(column) => format!("{line}:{column}"),
                    None => line.to_string(),
                })
                .collect();
            let rest = self.also_at.len().saturating_sub(MAX_SHOWN_PLACES);
            write!(f, "\n  the same error also at {}", shown.join(", "))?;
            if rest > 0 {
                write!(f, " and {rest} more place(s)")?;
            }
        }
        if let Some(hint) = &self.hint {
            write!(f, "\n  hint: {hint}")?;
        }
        Ok(())
    }
}

impl std::error::Error for PlanError {}

/// Every error found in a plan, in the file's order: what `harness validate` reports.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{} error{} in the plan{}", errors.len(), if errors.len() == 1 { "" } else { "s" }, if *more { ", and more not looked for" } else { "" })]
pub struct PlanErrors {
    /// At least one.
    pub errors: Vec<PlanError>,
    /// The search stopped at its cap ([`super::MAX_ERRORS`]) with errors still to find.
    pub more: bool,
}

/// The line and column (counted in characters, from 1) just after `valid`, the UTF-8
/// text before a file's first byte that is not: where an editor shows that byte.
pub(super) fn position_of(valid: &[u8]) -> (usize, usize) {
    let line_start = valid
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |newline| newline + 1);
    let line = valid.iter().filter(|&&b| b == b'\n').count() + 1;
    // Valid UTF-8 up to here by construction.
    let column = std::str::from_utf8(&valid[line_start..]).map_or(1, |l| l.chars().count() + 1);
    (line, column)
}

/// An error found while resolving: what is wrong and the path to the part at fault.
pub(super) struct Found {
    pub(super) path: Vec<Seg>,
    pub(super) message: String,
    pub(super) hint: Option<String>,
}

pub(super) fn found(path: Vec<Seg>, message: impl Into<String>) -> Found {
    Found {
        path,
        message: message.into(),
        hint: None,
    }
}

impl Found {
    pub(super) fn hint(mut self, hint: impl Into<String>) -> Found {
        self.hint = Some(hint.into());
        self
    }
}

pub(super) fn yaml_error(path: &Path, e: &serde_yaml::Error) -> PlanError {
    let location = e.location();
    let mut message = e.to_string();
    // serde_yaml appends " at line L column C"; the prefix says it already.
    if let Some(at) = message.find(" at line ") {
        message.truncate(at);
    }
    // The parser's own words for a document whose aliases expand past its limit.
    if message == "repetition limit exceeded" {
        message = "the plan's YAML aliases expand to too many values (a \"billion laughs\" document): it is refused unread".to_owned();
    }
    let hint = unknown_field_hint(&message).or_else(|| {
        if message.contains("billion laughs") {
            return Some("write the values out: a plan needs no alias that refers to other aliases, each many times over".to_owned());
        }
        message
            .contains("missing field")
            .then(|| "`harness validate --help` and plans/README.md show every key".to_owned())
    });
    PlanError {
        file: path.to_owned(),
        line: location.as_ref().map(|l| l.line()),
        column: location.as_ref().map(|l| l.column()),
        message,
        hint,
        also_at: Box::default(),
    }
}

/// [`yaml_error`] for a plan's whole `text`, which can say where a second YAML document
/// starts (serde_yaml names no place for that).
pub(super) fn yaml_error_in(path: &Path, text: &str, e: &serde_yaml::Error) -> PlanError {
    let mut error = yaml_error(path, e);
    if error.line.is_none() && error.message.contains("more than one document") {
        // A `---` after content starts the second document (one before any is allowed).
        let mut content = false;
        for (i, line) in text.lines().enumerate() {
            let trimmed = line.trim_end();
            if content && (trimmed == "---" || trimmed.starts_with("--- ")) {
                error.line = Some(i + 1);
                error.column = Some(1);
                break;
            }
            content |= !(trimmed.is_empty() || trimmed.starts_with('#') || trimmed == "---");
        }
        error.message = "the plan holds more than one YAML document".to_owned();
        error.hint = Some(
            "a plan is one document: remove this `---` line, or put each plan in a file of its own"
                .to_owned(),
        );
    }
    error
}

/// For serde's "unknown field `x`, expected one of `a`, `b`": the key other tools call
/// `x`, or the closest expected name.
fn unknown_field_hint(message: &str) -> Option<String> {
    let rest = message.split("unknown field `").nth(1)?;
    let (field, expected) = rest.split_once('`')?;
    let names: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
    SYNONYMS
        .iter()
        .find(|(other, ours, _)| *other == field && names.contains(ours))
        .map(|(_, ours, why)| format!("did you mean `{ours}`? {why}"))
        .or_else(|| did_you_mean(field, &names))
}

/// Keys as other retry libraries and proxies spell them, the plan's key, and what differs.
const SYNONYMS: &[(&str, &str, &str)] = &[
    (
        "retries",
        "max_attempts",
        "it counts the first attempt too: `retries: 3` is `max_attempts: 4`",
    ),
    (
        "num_retries",
        "max_attempts",
        "it counts the first attempt too: `num_retries: 3` is `max_attempts: 4`",
    ),
    (
        "max_retries",
        "max_attempts",
        "it counts the first attempt too: `max_retries: 3` is `max_attempts: 4`",
    ),
    ("attempts", "max_attempts", "the first attempt included"),
    (
        "timeout",
        "attempt_timeout",
        "one attempt's; `deadline` bounds the whole request, retries included",
    ),
    ("per_try_timeout", "attempt_timeout", "Envoy's name for it"),
    (
        "retry_budget",
        "budget",
        "e.g. `budget: { ratio: 0.2, min_per_sec: 10, ttl: 10s }`",
    ),
    (
        "circuit_breaker",
        "breaker",
        "e.g. `breaker: { failure_ratio: 0.5, min_requests: 20, window: 10s, open_for: 5s }`",
    ),
    (
        "retry_codes",
        "retry_on",
        "e.g. `retry_on: [transient]` or `retry_on: [503, reset, timeout]`",
    ),
    (
        "retryable_status_codes",
        "retry_on",
        "e.g. `retry_on: [transient]` or `retry_on: [503, reset, timeout]`",
    ),
    (
        "jitter",
        "backoff",
        "jitter is part of it: `backoff: { exponential: { base: 100ms, multiplier: 2, cap: 5s }, jitter: full }`",
    ),
    ("rps", "rate", "logical requests per second"),
];

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut previous = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let current = row[j + 1];
            row[j + 1] = if ca == *cb {
                previous
            } else {
                1 + previous.min(row[j]).min(current)
            };
            previous = current;
        }
    }
    row[b.len()]
}

/// "did you mean `x`?", for the name in `names` closest to `word`, if it is close enough to
/// be a likely typo (and not a name of one or two letters for another: `c` for `a`).
/// The one suggestion of the plan's errors: keys, presets, metrics, gates, policy names.
pub(super) fn did_you_mean(word: &str, names: &[&str]) -> Option<String> {
    let length = |s: &str| s.chars().count();
    let (_, name) = names
        .iter()
        .map(|n| (edit_distance(word, n), *n))
        .min()
        .filter(|(d, n)| *d <= 2.max(n.len() / 3) && *d < length(n).max(length(word)))?;
    Some(format!("did you mean `{name}`?"))
}

#[cfg(test)]
mod tests {
    use super::did_you_mean;

    #[test]
    fn a_suggestion_is_a_likely_typo_of_the_closest_name() {
        let names = ["good", "naive", "a"];
        assert_eq!(
            did_you_mean("godo", &names).as_deref(),
            Some("did you mean `good`?")
        );
        assert_eq!(
            did_you_mean("naiv", &names).as_deref(),
            Some("did you mean `naive`?")
        );
        // One letter for another is not a typo of a one-letter name; far is far.
        assert_eq!(did_you_mean("c", &["a", "b"]), None);
        assert_eq!(did_you_mean("jittered-budget", &names), None);
    }
}
