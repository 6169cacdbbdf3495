//! A shard's partial report, `chaos-partial/v1`: what an exact merge needs and nothing
//! judged. Each policy's recorder whole ([`SavedRecorder`]: counters, the histograms in
//! V2, the per-second series from the common start, the waves, the violation examples),
//! its tiers' counts, and, from the keeper alone, the fault-server's ledger.
//!
//! Written as a JSON file, or as one line on stdout after [`LOG_MARKER`] (`--partial -`),
//! so a pod's log carries it where no volume is shared: [`read`] takes either.

use std::path::Path;

use fault_server::ledger::LedgerSnapshot;
use serde::{Deserialize, Serialize};

use super::Shard;
use crate::hop::HopCounts;
use crate::stats::SavedRecorder;

pub const PARTIAL_SCHEMA: &str = "chaos-partial/v1";

/// What starts the line of a partial report in a log.
pub const LOG_MARKER: &str = "chaos-partial/v1 ";

/// The most warnings, or fault phases, a partial lists: a run says a few.
pub const MAX_LISTED: usize = 1024;

/// The longest warning or error a partial holds: a run writes a sentence.
pub const MAX_TEXT: usize = 16 << 10;

/// A log or a partial larger than this is refused (a partial is a few hundred KiB).
pub const MAX_PARTIAL_BYTES: u64 = 256 << 20;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Partial {
    pub schema: String,
    pub plan: PartialPlan,
    pub shard: Shard,
    /// The common start, RFC 3339 UTC.
    pub start_at: String,
    /// When this shard finished, RFC 3339 UTC.
    pub finished_at: String,
    /// This shard reset the fault-server and read its ledger.
    pub keeper: bool,
    #[serde(deserialize_with = "crate::bounded::vec::<_, _, { crate::plan::MAX_POLICIES }>")]
    pub policies: Vec<PartialPolicy>,
    /// Interrupted by the user.
    pub aborted: bool,
    /// Why this shard could not run (all of it, or from a policy on).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::bounded::option_text::<_, MAX_TEXT>"
    )]
    pub error: Option<String>,
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "crate::bounded::texts::<_, MAX_LISTED, MAX_TEXT>"
    )]
    pub warnings: Vec<String>,
    /// The keeper's account of the faults in force (`target.script`).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::bounded::option_vec::<_, _, MAX_LISTED>"
    )]
    pub faults: Option<Vec<String>>,
    #[serde(
        default,
        skip_serializing_if = "String::is_empty",
        deserialize_with = "crate::bounded::text::<_, MAX_TEXT>"
    )]
    pub faults_from: String,
}

/// Which plan, so a merge refuses the partials of another.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartialPlan {
    pub name: String,
    pub file: String,
    pub seed: u64,
    /// [`crate::plan::Plan::digest`]: the plan's text and seed.
    pub digest: String,
    /// The target as this shard drove it.
    pub target: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PartialPolicy {
    pub name: String,
    pub recorder: SavedRecorder,
    pub budget_bound: Option<f64>,
    pub breaker_trips: u64,
    pub elapsed_ms: u64,
    pub aborted: bool,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::bounded::option_text::<_, MAX_TEXT>"
    )]
    pub gone: Option<String>,
    /// The keeper's reading of the fault-server's ledger for this policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ledger: Option<LedgerSnapshot>,
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "crate::bounded::vec::<_, _, { fault_server::wire::MAX_TIERS }>"
    )]
    pub tiers: Vec<HopCounts>,
}

/// Why a partial report cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum PartialError {
    #[error("cannot read {path}: {detail}")]
    Io { path: String, detail: String },
    #[error(
        "{path} is larger than {} MiB{}: not a partial report",
        MAX_PARTIAL_BYTES >> 20,
        size.map(|n| format!(" ({n} bytes)")).unwrap_or_default()
    )]
    TooLarge {
        path: String,
        /// Its size, when the file system knows it (a regular file, refused unread).
        size: Option<u64>,
    },
    #[error(
        "{path} holds no partial report: neither JSON nor a log with a line that starts `{}`",
        LOG_MARKER.trim_end()
    )]
    Missing { path: String },
    #[error("{path}: not a partial report ({PARTIAL_SCHEMA}): {detail}")]
    Invalid { path: String, detail: String },
    #[error("{path}: {source}")]
    Inconsistent {
        path: String,
        source: super::consistent::Inconsistent,
    },
}

impl Partial {
    /// Within what [`read`] takes: a sentence past [`MAX_TEXT`] cut at a character
    /// boundary and said so, a list past [`MAX_LISTED`] cut and the rest counted. A run
    /// writes a few short ones, but a server's own script of a thousand phases, named in
    /// `faults_from`, would otherwise make the keeper's partial one merge refuses.
    pub fn fit(&mut self) {
        let cut = |text: &mut String| fit_text(text);
        self.error.as_mut().map(cut);
        cut(&mut self.faults_from);
        if self.warnings.len() > MAX_LISTED {
            let more = self.warnings.len() - (MAX_LISTED - 1);
            self.warnings.truncate(MAX_LISTED - 1);
            self.warnings.push(format!("and {more} more warnings"));
        }
        self.warnings.iter_mut().for_each(cut);
        if let Some(faults) = self.faults.as_mut() {
            faults.truncate(MAX_LISTED);
            faults.iter_mut().for_each(cut);
        }
        for p in &mut self.policies {
            p.gone.as_mut().map(cut);
        }
    }

    /// As one line of JSON.
    pub fn to_json(&self) -> String {
        // Plain data: serialising cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// `text` within [`MAX_TEXT`] bytes, cut at a character boundary with a note.
fn fit_text(text: &mut String) {
    const NOTE: &str = " [cut: longer than a partial holds]";
    if text.len() <= MAX_TEXT {
        return;
    }
    let mut end = MAX_TEXT - NOTE.len();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push_str(NOTE);
}

/// Reads a partial report from a file: its JSON, or the last line of a log that carries
/// one after [`LOG_MARKER`] (anything before the marker on that line, a timestamp or a
/// pod name that `kubectl logs --prefix` added, is ignored); then checks it holds together
/// ([`super::consistent::partial`]).
///
/// A file larger than [`MAX_PARTIAL_BYTES`] is refused by its size before a byte is read;
/// one read whole goes into a buffer of its size, parsed in place: the peak is about the
/// file's size plus the partial it holds.
pub fn read(path: &Path) -> Result<Partial, PartialError> {
    let shown = path.display().to_string();
    let bytes = read_capped(path)
        .map_err(|e| PartialError::Io {
            path: shown.clone(),
            detail: e.to_string(),
        })?
        .map_err(|size| PartialError::TooLarge {
            path: shown.clone(),
            size,
        })?;
    let parsed = parse(&String::from_utf8_lossy(&bytes));
    drop(bytes);
    let partial = parsed.map_err(|e| match e {
        None => PartialError::Missing {
            path: shown.clone(),
        },
        Some(detail) => PartialError::Invalid {
            path: shown.clone(),
            detail,
        },
    })?;
    super::consistent::partial(&partial).map_err(|source| PartialError::Inconsistent {
        path: shown,
        source,
    })?;
    Ok(partial)
}

/// A file of at most [`MAX_PARTIAL_BYTES`]; `Err` when it is larger, with its size when
/// the file system knows it. A regular file is refused by its size, unread, and read into
/// a buffer of that size (no doubling as it grows); anything else (a FIFO, `/dev/stdin`)
/// is read to one byte past the limit.
fn read_capped(path: &Path) -> std::io::Result<Result<Vec<u8>, Option<u64>>> {
    use std::io::Read as _;
    let file = std::fs::File::open(path)?;
    let meta = file.metadata()?;
    let mut bytes = Vec::new();
    if meta.is_file() {
        if meta.len() > MAX_PARTIAL_BYTES {
            return Ok(Err(Some(meta.len())));
        }
        // At most the cap, so it fits a usize on every target the harness builds for.
        bytes.reserve_exact(usize::try_from(meta.len()).unwrap_or(0).saturating_add(1));
    }
    file.take(MAX_PARTIAL_BYTES.saturating_add(1))
        .read_to_end(&mut bytes)?;
    Ok(if bytes.len() as u64 <= MAX_PARTIAL_BYTES {
        Ok(bytes)
    } else {
        Err(None)
    })
}

/// A partial report from text: `Err(None)` when there is none in it.
fn parse(text: &str) -> Result<Partial, Option<String>> {
    let json = if text.trim_start().starts_with('{') {
        text
    } else {
        text.lines()
            .rev()
            .find_map(|line| line.split_once(LOG_MARKER).map(|(_, rest)| rest))
            .ok_or(None)?
    };
    let partial: Partial = serde_json::from_str(json).map_err(|e| Some(e.to_string()))?;
    if partial.schema != PARTIAL_SCHEMA {
        return Err(Some(format!(
            "its schema is `{}`, this harness reads `{PARTIAL_SCHEMA}`",
            partial.schema
        )));
    }
    Ok(partial)
}

#[cfg(test)]
mod tests {
    use super::{LOG_MARKER, PARTIAL_SCHEMA, Partial, PartialPlan, parse};
    use crate::shard::Shard;

    fn partial() -> Partial {
        Partial {
            schema: PARTIAL_SCHEMA.to_owned(),
            plan: PartialPlan {
                name: "p".into(),
                file: "p.yaml".into(),
                seed: 1,
                digest: "d".into(),
                target: "http://127.0.0.1:1".into(),
            },
            shard: Shard { index: 1, count: 2 },
            start_at: "2026-12-07T08:00:00.000Z".into(),
            finished_at: "2026-12-07T08:01:00.000Z".into(),
            keeper: false,
            policies: Vec::new(),
            aborted: false,
            error: None,
            warnings: Vec::new(),
            faults: None,
            faults_from: String::new(),
        }
    }

    #[test]
    fn a_partial_reads_from_its_json_or_from_a_log_line() {
        let p = partial();
        assert_eq!(parse(&p.to_json()), Ok(p.clone()));
        let log = format!(
            "running policy `a` against http://x\nwarning: something\n2026-12-07T08:01:00Z {LOG_MARKER}{}\nshard 1/2: done\n",
            p.to_json()
        );
        assert_eq!(parse(&log), Ok(p));
        assert_eq!(parse("just a log\n"), Err(None));
        assert!(matches!(parse("{\"schema\": 1}"), Err(Some(_))));
        let mut other = partial();
        other.schema = "chaos-partial/v9".into();
        assert!(parse(&other.to_json()).is_err_and(|e| e.is_some_and(|e| e.contains("v9"))));
    }
}
