//! From the script as written to the script as decided on: the cross-field rules that
//! serde cannot check (each failure names the phase and the field), and the resolved
//! phases that [`super::Script::select`] walks.

use std::sync::Arc;
use std::time::Duration;

use super::Script;
use super::errors::ScriptError;
use super::fault::{FaultAction, FaultKind, FaultResponse};
use super::pattern::Pattern;
use super::spec::{
    CapacitySpec, PhaseSpec, Probability, RespondSpec, ScriptSpec, StatusCodeSpec, Weight,
};
use crate::capacity::{CapacityLimits, DEFAULT_REJECT_STATUS};
use crate::dist::Distribution;
use crate::duration::format_duration;

/// A resolved `respond` entry, before its delay (if any) is drawn.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Entry {
    pub(super) action: FaultAction<Distribution>,
    pub(super) processed: bool,
    pub(super) weight: f64,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub(super) struct Matcher {
    /// Upper-case methods; empty matches any.
    pub(super) methods: Vec<String>,
    pub(super) path: Option<Pattern>,
    pub(super) headers: Vec<(String, Pattern)>,
}

#[derive(Debug, Clone, PartialEq)]
pub(super) struct Phase {
    pub(super) label: String,
    pub(super) from: Duration,
    pub(super) until: Option<Duration>,
    pub(super) matcher: Matcher,
    pub(super) probability: f64,
    pub(super) attempts: Option<Vec<u32>>,
    pub(super) sticky: bool,
    pub(super) entries: Vec<Entry>,
    pub(super) total_weight: f64,
}

impl Script {
    /// Validates the cross-field rules and resolves a parsed script.
    pub fn from_spec(spec: ScriptSpec) -> Result<Script, ScriptError> {
        let mut phases = Vec::with_capacity(spec.faults.len());
        let mut names: Vec<&str> = Vec::new();
        for (index, phase) in spec.faults.iter().enumerate() {
            if let Some(name) = phase.name.as_deref() {
                let label = phase_label(index, Some(name));
                if name.trim().is_empty() {
                    return Err(ScriptError::invalid(&label, "name", "must not be empty"));
                }
                if let Some(first) = names.iter().position(|n| *n == name) {
                    return Err(ScriptError::invalid(
                        &label,
                        "name",
                        format!("is already used by faults[{first}]; phase names must be unique"),
                    ));
                }
                names.push(name);
            }
            let resolved = resolve_phase(index, phase)?;
            // A relay tier's phase is checked here like any other, and run there.
            if phase.tier.is_none() {
                phases.push(resolved);
            }
        }
        let capacity = spec.server.as_ref().map(resolve_capacity).transpose()?;
        Ok(Script {
            phases,
            capacity,
            seed: spec.seed,
            spec,
        })
    }
}

fn phase_label(index: usize, name: Option<&str>) -> String {
    match name {
        Some(name) => format!("faults[{index}] {name:?}"),
        None => format!("faults[{index}]"),
    }
}

fn resolve_phase(index: usize, spec: &PhaseSpec) -> Result<Phase, ScriptError> {
    let label = phase_label(index, spec.name.as_deref());
    let from = spec.from.map(|d| d.get()).unwrap_or(Duration::ZERO);
    let until = spec.until.map(|d| d.get());
    if let Some(until) = until
        && until <= from
    {
        return Err(ScriptError::invalid(
            &label,
            "until",
            format!(
                "({}) must be after `from` ({}): the window [from, until) would be empty",
                format_duration(until),
                format_duration(from)
            ),
        ));
    }
    let matcher = match &spec.matcher {
        None => Matcher::default(),
        Some(m) => Matcher {
            methods: m
                .method
                .as_ref()
                .map(|methods| methods.0.iter().map(|m| m.as_str().to_string()).collect())
                .unwrap_or_default(),
            path: m.path.as_ref().map(|p| Pattern::path(p.as_str())),
            headers: m
                .header
                .iter()
                .flatten()
                .map(|(name, value)| (name.as_str().to_string(), Pattern::value(value)))
                .collect(),
        },
    };
    if spec
        .matcher
        .as_ref()
        .and_then(|m| m.method.as_ref())
        .is_some_and(|m| m.0.is_empty())
    {
        return Err(ScriptError::invalid(
            &label,
            "match.method",
            "is an empty list: omit it to match every method",
        ));
    }
    let attempts = match &spec.attempts {
        None => None,
        Some(list) if list.is_empty() => {
            return Err(ScriptError::invalid(
                &label,
                "attempts",
                "is an empty list: the phase would never fire (omit it to fault every attempt)",
            ));
        }
        Some(list) => Some(list.iter().map(|a| a.get()).collect()),
    };
    if spec.respond.0.is_empty() {
        return Err(ScriptError::invalid(
            &label,
            "respond",
            "is empty: give at least one outcome",
        ));
    }
    let entries = spec
        .respond
        .0
        .iter()
        .enumerate()
        .map(|(i, entry)| resolve_entry(&label, i, entry))
        .collect::<Result<Vec<_>, _>>()?;
    let total_weight: f64 = entries.iter().map(|e| e.weight).sum();
    if total_weight <= 0.0 {
        return Err(ScriptError::invalid(
            &label,
            "respond[].weight",
            "weights sum to zero: at least one outcome needs a weight above 0",
        ));
    }
    Ok(Phase {
        label: spec
            .name
            .clone()
            .unwrap_or_else(|| format!("faults[{index}]")),
        from,
        until,
        matcher,
        probability: spec.probability.unwrap_or(Probability::ONE).get(),
        attempts,
        sticky: spec.sticky.unwrap_or(false),
        entries,
        total_weight,
    })
}

fn resolve_entry(label: &str, i: usize, spec: &RespondSpec) -> Result<Entry, ScriptError> {
    let field = |name: &str| format!("respond[{i}].{name}");
    let kind = match (spec.fault, spec.status) {
        (Some(kind), _) => kind,
        (None, Some(_)) => FaultKind::Status,
        (None, None) => {
            let kinds: Vec<&str> = FaultKind::ALL.iter().map(|k| k.name()).collect();
            return Err(ScriptError::invalid(
                label,
                format!("respond[{i}]"),
                format!(
                    "needs `status: CODE` or `fault: KIND` ({})",
                    kinds.join(", ")
                ),
            ));
        }
    };
    let kind_name = kind.name();
    let refuse = |present: bool, name: &str, applies_to: &str| {
        if present {
            Err(ScriptError::invalid(
                label,
                field(name),
                format!("does not apply to a {kind_name} fault (only to {applies_to})"),
            ))
        } else {
            Ok(())
        }
    };
    let status_like = matches!(kind, FaultKind::Status | FaultKind::Truncate);
    refuse(
        spec.status.is_some() && !status_like,
        "status",
        "status and truncate",
    )?;
    refuse(
        spec.retry_after.is_some() && kind != FaultKind::Status,
        "retry_after",
        "status",
    )?;
    refuse(
        spec.body.is_some() && !status_like,
        "body",
        "status and truncate",
    )?;
    refuse(
        spec.headers.is_some() && !status_like,
        "headers",
        "status and truncate",
    )?;
    refuse(
        spec.delay.is_some() && kind != FaultKind::Delay,
        "delay",
        "delay",
    )?;
    refuse(
        spec.hold.is_some() && kind != FaultKind::Timeout,
        "hold",
        "timeout",
    )?;
    let processed = spec.processed.unwrap_or(false);
    if processed && kind == FaultKind::Delay {
        return Err(ScriptError::invalid(
            label,
            field("processed"),
            "does not apply to a delay: a delayed request is served (and executed) anyway",
        ));
    }
    let headers = spec
        .headers
        .iter()
        .flatten()
        .map(|(name, value)| {
            if value
                .bytes()
                .all(|b| b == b'\t' || (b' '..=b'~').contains(&b))
            {
                Ok((name.as_str().to_string(), value.clone()))
            } else {
                Err(ScriptError::invalid(
                    label,
                    field(&format!("headers.{}", name.as_str())),
                    "must be printable ASCII",
                ))
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    let response = |default_status: Option<u16>| -> Result<Arc<FaultResponse>, ScriptError> {
        let status = spec
            .status
            .map(StatusCodeSpec::get)
            .or(default_status)
            .ok_or_else(|| {
                ScriptError::invalid(label, field("status"), "is required for a status fault")
            })?;
        Ok(Arc::new(FaultResponse {
            status,
            retry_after: spec.retry_after.map(|d| d.get()),
            body: spec.body.clone(),
            headers: headers.clone(),
        }))
    };
    let action = match kind {
        FaultKind::Status => FaultAction::Status(response(None)?),
        FaultKind::Truncate => FaultAction::Truncate(response(Some(200))?),
        FaultKind::Delay => {
            FaultAction::Delay(spec.delay.map(Distribution::from).ok_or_else(|| {
                ScriptError::invalid(
                    label,
                    field("delay"),
                    "is required for a delay fault (e.g. `delay: 300ms`)",
                )
            })?)
        }
        FaultKind::Timeout => FaultAction::Timeout {
            hold: spec.hold.map(|d| d.get()),
        },
        FaultKind::Reset => FaultAction::Reset,
        FaultKind::Close => FaultAction::Close,
    };
    Ok(Entry {
        action,
        processed,
        weight: spec.weight.map(Weight::get).unwrap_or(1.0),
    })
}

fn resolve_capacity(spec: &CapacitySpec) -> Result<CapacityLimits, ScriptError> {
    if spec.capacity.is_none() && spec.queue.is_some_and(|q| q > 0) {
        return Err(ScriptError::invalid(
            "server",
            "queue",
            "needs `capacity`: with unlimited capacity nothing ever waits",
        ));
    }
    Ok(CapacityLimits {
        capacity: spec.capacity,
        queue: spec.queue.unwrap_or(0),
        service_time: spec
            .service_time
            .map(Distribution::from)
            .unwrap_or(Distribution::ZERO),
        reject_status: spec
            .reject_status
            .map(StatusCodeSpec::get)
            .unwrap_or(DEFAULT_REJECT_STATUS),
    })
}
