//! A baseline, or a report read as one, from a file: input from another machine or edited
//! by hand, so it is decoded straight into what a comparison uses, each part bounded by
//! what a run can have written, and the rest of a report skipped unread.
//!
//! Before, the file went through a `serde_json::Value` tree (to read its schema) and a
//! report through the whole `Report`: `compare` on a 62 MB file under the 64 MiB cap
//! peaked at 2.6 GB. Now the schema is read alone (everything else skipped, nothing
//! kept), a report only as the figures a baseline keeps, the policies at most
//! [`MAX_POLICIES`] and a resolved policy at most
//! [`MAX_VALUES`](crate::plan::resolved::MAX_VALUES): the peak is about the file itself.

use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::{Baseline, Figures, MAX_BASELINE_BYTES, PlanIdentity, ReadError, SCHEMA, Tolerance};
use crate::plan::resolved::Value;
use crate::report::PolicyReport;

/// The most policies a baseline or a report read as one holds: a plan's, so one with
/// more was not written by a run.
pub use crate::plan::MAX_POLICIES;

/// A baseline, or a report read as one (with the default tolerance).
pub fn read(path: &std::path::Path) -> Result<Baseline, ReadError> {
    let file = path.display().to_string();
    let bytes = fault_server::yaml_guard::read_bounded(path, MAX_BASELINE_BYTES)
        .map_err(|source| ReadError::Io {
            file: file.clone(),
            source,
        })?
        .ok_or_else(|| ReadError::TooLarge { file: file.clone() })?;
    let text = String::from_utf8(bytes).map_err(|e| ReadError::Format {
        file: file.clone(),
        detail: format!("not UTF-8 text (byte {})", e.utf8_error().valid_up_to()),
    })?;
    let format = |detail: String| ReadError::Format {
        file: file.clone(),
        detail,
    };
    // Read from the text, not from a tree: a resolved policy keeps its keys' order, and
    // an error says its line and column.
    let peek: Peek = serde_json::from_str(&text).map_err(|e| format(e.to_string()))?;
    let baseline = match peek.schema.as_deref() {
        Some(SCHEMA) => serde_json::from_str(&text).map_err(|e| format(e.to_string()))?,
        Some(crate::report::SCHEMA) => {
            let report: ReportFigures =
                serde_json::from_str(&text).map_err(|e| format(e.to_string()))?;
            report.baseline()
        }
        other => return Err(format(format!("its schema is {other:?}"))),
    };
    drop(text);
    // A report.json is checked as strictly as a baseline: either may be edited by hand.
    baseline.validate().map_err(|reason| ReadError::Invalid {
        file: file.clone(),
        reason,
    })?;
    Ok(baseline)
}

/// A file's schema, everything else skipped unread.
#[derive(Deserialize)]
struct Peek {
    #[serde(default)]
    schema: SchemaName,
}

/// The schema when it is text, else none (whatever it is, skipped).
#[derive(Default)]
struct SchemaName(Option<String>);

impl std::ops::Deref for SchemaName {
    type Target = Option<String>;
    fn deref(&self) -> &Option<String> {
        &self.0
    }
}

impl<'de> Deserialize<'de> for SchemaName {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Name;
        impl<'de> Visitor<'de> for Name {
            type Value = SchemaName;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a schema name")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<SchemaName, E> {
                Ok(SchemaName(Some(v.to_owned())))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<SchemaName, E> {
                Ok(SchemaName(None))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<SchemaName, E> {
                Ok(SchemaName(None))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<SchemaName, E> {
                Ok(SchemaName(None))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<SchemaName, E> {
                Ok(SchemaName(None))
            }
            fn visit_unit<E: de::Error>(self) -> Result<SchemaName, E> {
                Ok(SchemaName(None))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<SchemaName, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(SchemaName(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<SchemaName, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(SchemaName(None))
            }
        }
        deserializer.deserialize_any(Name)
    }
}

/// A list of policies, refused past [`MAX_POLICIES`] before more are read.
pub(super) fn at_most_policies<'de, D, T>(deserializer: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    crate::bounded::vec::<D, T, MAX_POLICIES>(deserializer)
}

/// What a baseline keeps of a report (`chaos-report/v1`); the rest is skipped unread.
#[derive(Deserialize)]
struct ReportFigures {
    generated_at: String,
    plan: ReportPlan,
    #[serde(deserialize_with = "at_most_policies")]
    policies: Vec<Reported>,
}

#[derive(Deserialize)]
struct ReportPlan {
    name: String,
    file: String,
    seed: u64,
    #[serde(default)]
    digest: Option<String>,
}

impl ReportFigures {
    fn baseline(self) -> Baseline {
        Baseline {
            schema: SCHEMA.to_owned(),
            generated_at: self.generated_at,
            plan: PlanIdentity {
                name: self.plan.name,
                file: self.plan.file,
                seed: self.plan.seed,
                digest: self.plan.digest.unwrap_or_default(),
            },
            tolerance: Tolerance::default(),
            policies: self.policies.into_iter().map(Reported::figures).collect(),
        }
    }
}

/// One policy of a report as a baseline reads it, by the report's names.
#[derive(Deserialize)]
pub(super) struct Reported {
    name: String,
    #[serde(default)]
    resolved: Option<Value>,
    offered: u64,
    logical: u64,
    succeeded: u64,
    dropped: u64,
    attempts: u64,
    retries: u64,
    success_rate: f64,
    amplification: ReportedAmplification,
    violations: ReportedViolations,
    latency_ms: ReportedLatency,
    #[serde(default)]
    recovery_s: Option<f64>,
}

#[derive(Deserialize)]
struct ReportedAmplification {
    client: f64,
    #[serde(default)]
    server: Option<f64>,
    peak_1s: f64,
}

#[derive(Deserialize)]
struct ReportedViolations {
    retried_permanent: u64,
    retried_non_idempotent: u64,
    #[serde(default)]
    duplicate_side_effects: Option<u64>,
}

#[derive(Deserialize)]
struct ReportedLatency {
    p50: f64,
    p90: f64,
    p99: f64,
    p999: f64,
}

impl Reported {
    pub(super) fn of(p: &PolicyReport) -> Reported {
        Reported {
            name: p.name.clone(),
            resolved: p.resolved.clone(),
            offered: p.offered,
            logical: p.logical,
            succeeded: p.succeeded,
            dropped: p.dropped,
            attempts: p.attempts,
            retries: p.retries,
            success_rate: p.success_rate,
            amplification: ReportedAmplification {
                client: p.amplification.client,
                server: p.amplification.server,
                peak_1s: p.amplification.peak_1s,
            },
            violations: ReportedViolations {
                retried_permanent: p.violations.retried_permanent,
                retried_non_idempotent: p.violations.retried_non_idempotent,
                duplicate_side_effects: p.violations.duplicate_side_effects,
            },
            latency_ms: ReportedLatency {
                p50: p.latency_ms.p50,
                p90: p.latency_ms.p90,
                p99: p.latency_ms.p99,
                p999: p.latency_ms.p999,
            },
            recovery_s: p.recovery_s,
        }
    }

    /// The figures a baseline keeps: the report's, the dropped ratio and the violations
    /// summed (saturating: a report edited by hand may say anything).
    pub(super) fn figures(self) -> Figures {
        let v = &self.violations;
        Figures {
            offered: self.offered,
            logical: self.logical,
            succeeded: self.succeeded,
            attempts: self.attempts,
            retries: self.retries,
            dropped: self.dropped,
            amplification: self.amplification.client,
            server_amplification: self.amplification.server,
            peak_amplification: self.amplification.peak_1s,
            success_rate: self.success_rate,
            p50_ms: self.latency_ms.p50,
            p90_ms: self.latency_ms.p90,
            p99_ms: self.latency_ms.p99,
            p999_ms: self.latency_ms.p999,
            recovery_s: self.recovery_s,
            dropped_ratio: self.dropped as f64 / self.offered.max(1) as f64,
            violations: v
                .retried_permanent
                .saturating_add(v.retried_non_idempotent)
                .saturating_add(v.duplicate_side_effects.unwrap_or(0)),
            name: self.name,
            resolved: self.resolved,
        }
    }
}
