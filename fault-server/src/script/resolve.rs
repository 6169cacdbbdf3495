//! From the script as written to the script as decided on: the cross-field rules that
//! serde cannot check (each failure names the phase and the field), and the resolved
//! phases that [`super::Script::select`] walks.

use std::sync::Arc;
use std::time::Duration;

use super::Script;
use super::errors::ScriptError;
use super::fault::{FaultAction, FaultKind, FaultResponse, GrpcStatus, Pushback};
use super::pattern::Pattern;
use super::spec::{
    CapacitySpec, PhaseSpec, Probability, PushbackSpec, RespondSpec, ScriptSpec, StatusCodeSpec,
    Weight,
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
    /// The peers it faults at; `None`: any, and a server with one peer too.
    pub(super) peers: Option<Vec<u32>>,
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
    let (from, until) = window(&label, spec)?;
    let matcher = matcher(&label, spec)?;
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
    let peers = match &spec.peer {
        None => None,
        Some(list) if list.0.is_empty() => {
            return Err(ScriptError::invalid(
                &label,
                "peer",
                "is an empty list: the phase would never fire (omit it to fault at every peer)",
            ));
        }
        Some(list) => Some(list.0.iter().map(|p| p.get()).collect()),
    };
    let (entries, total_weight) = entries(&label, spec)?;
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
        peers,
        sticky: spec.sticky.unwrap_or(false),
        entries,
        total_weight,
    })
}

/// The phase's window, `[from, until)`.
fn window(label: &str, spec: &PhaseSpec) -> Result<(Duration, Option<Duration>), ScriptError> {
    let from = spec.from.map(|d| d.get()).unwrap_or(Duration::ZERO);
    let until = spec.until.map(|d| d.get());
    if let Some(until) = until
        && until <= from
    {
        return Err(ScriptError::invalid(
            label,
            "until",
            format!(
                "({}) must be after `from` ({}): the window [from, until) would be empty",
                format_duration(until),
                format_duration(from)
            ),
        ));
    }
    Ok((from, until))
}

fn matcher(label: &str, spec: &PhaseSpec) -> Result<Matcher, ScriptError> {
    let Some(m) = &spec.matcher else {
        return Ok(Matcher::default());
    };
    if m.method.as_ref().is_some_and(|m| m.0.is_empty()) {
        return Err(ScriptError::invalid(
            label,
            "match.method",
            "is an empty list: omit it to match every method",
        ));
    }
    Ok(Matcher {
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
    })
}

/// The phase's `respond` entries, and their total weight (what a draw is taken from).
fn entries(label: &str, spec: &PhaseSpec) -> Result<(Vec<Entry>, f64), ScriptError> {
    if spec.respond.0.is_empty() {
        return Err(ScriptError::invalid(
            label,
            "respond",
            "is empty: give at least one outcome",
        ));
    }
    let entries = spec
        .respond
        .0
        .iter()
        .enumerate()
        .map(|(i, entry)| resolve_entry(EntryAt { label, i }, entry))
        .collect::<Result<Vec<_>, _>>()?;
    let total_weight: f64 = entries.iter().map(|e| e.weight).sum();
    if total_weight <= 0.0 {
        return Err(ScriptError::invalid(
            label,
            "respond[].weight",
            "weights sum to zero: at least one outcome needs a weight above 0",
        ));
    }
    Ok((entries, total_weight))
}

/// Where a `respond` entry is, for its errors: its phase and its index.
#[derive(Clone, Copy)]
struct EntryAt<'a> {
    label: &'a str,
    i: usize,
}

impl EntryAt<'_> {
    /// The entry's key `name` is invalid.
    fn invalid(self, name: &str, message: impl Into<String>) -> ScriptError {
        ScriptError::invalid(self.label, format!("respond[{}].{name}", self.i), message)
    }
}

fn resolve_entry(at: EntryAt<'_>, spec: &RespondSpec) -> Result<Entry, ScriptError> {
    let kind = entry_kind(at, spec)?;
    refuse_other_kinds_keys(at, kind, spec)?;
    let processed = spec.processed.unwrap_or(false);
    match kind {
        FaultKind::Delay | FaultKind::GoAway if processed => {
            return Err(at.invalid(
                "processed",
                format!(
                    "does not apply to a {}: the request is served (and executed) anyway",
                    kind.name()
                ),
            ));
        }
        FaultKind::Refuse if processed => {
            return Err(at.invalid(
                "processed",
                "does not apply to refuse: a refused stream is one the server did not \
                 process (use `fault: reset, processed: true` for work done, answer lost)",
            ));
        }
        _ => {}
    }
    let headers = response_headers(at, spec)?;
    let action = match kind {
        FaultKind::Status => FaultAction::Status(fault_response(at, spec, None, headers)?),
        FaultKind::Truncate => FaultAction::Truncate(fault_response(at, spec, Some(200), headers)?),
        FaultKind::Delay => {
            FaultAction::Delay(spec.delay.map(Distribution::from).ok_or_else(|| {
                at.invalid(
                    "delay",
                    "is required for a delay fault (e.g. `delay: 300ms`)",
                )
            })?)
        }
        FaultKind::Timeout => FaultAction::Timeout {
            hold: spec.hold.map(|d| d.get()),
        },
        FaultKind::Reset => FaultAction::Reset,
        FaultKind::Close => FaultAction::Close,
        FaultKind::Refuse => FaultAction::Refuse,
        FaultKind::GoAway => FaultAction::GoAway,
    };
    Ok(Entry {
        action,
        processed,
        weight: spec.weight.map(Weight::get).unwrap_or(1.0),
    })
}

/// The entry's kind: `fault:`, or a status fault when only `status:` is given.
fn entry_kind(at: EntryAt<'_>, spec: &RespondSpec) -> Result<FaultKind, ScriptError> {
    match (spec.fault, spec.status.is_some() || spec.grpc.is_some()) {
        (Some(kind), _) => Ok(kind),
        (None, true) => Ok(FaultKind::Status),
        (None, false) => {
            let kinds: Vec<&str> = FaultKind::ALL.iter().map(|k| k.name()).collect();
            Err(ScriptError::invalid(
                at.label,
                format!("respond[{}]", at.i),
                format!(
                    "needs `status: CODE`, `grpc: CODE` or `fault: KIND` ({})",
                    kinds.join(", ")
                ),
            ))
        }
    }
}

/// Refuses a key only another kind of fault reads: it would be ignored without a word.
fn refuse_other_kinds_keys(
    at: EntryAt<'_>,
    kind: FaultKind,
    spec: &RespondSpec,
) -> Result<(), ScriptError> {
    let status_like = matches!(kind, FaultKind::Status | FaultKind::Truncate);
    // (present where it does not apply, the key, the kinds it applies to), in the order
    // the errors are reported.
    let keys = [
        (
            spec.status.is_some() && !status_like,
            "status",
            "status and truncate",
        ),
        (
            spec.retry_after.is_some() && kind != FaultKind::Status,
            "retry_after",
            "status",
        ),
        (
            spec.grpc.is_some() && kind != FaultKind::Status,
            "grpc",
            "status",
        ),
        (
            spec.pushback.is_some() && spec.grpc.is_none(),
            "pushback",
            "grpc",
        ),
        (
            spec.body.is_some() && !status_like,
            "body",
            "status and truncate",
        ),
        (
            spec.headers.is_some() && !status_like,
            "headers",
            "status and truncate",
        ),
        (
            spec.delay.is_some() && kind != FaultKind::Delay,
            "delay",
            "delay",
        ),
        (
            spec.hold.is_some() && kind != FaultKind::Timeout,
            "hold",
            "timeout",
        ),
    ];
    match keys.into_iter().find(|(misplaced, _, _)| *misplaced) {
        Some((_, name, applies_to)) => Err(at.invalid(
            name,
            format!(
                "does not apply to a {} fault (only to {applies_to})",
                kind.name()
            ),
        )),
        None => Ok(()),
    }
}

/// The extra headers of a status or truncate fault's response, checked as a header value
/// must be.
fn response_headers(
    at: EntryAt<'_>,
    spec: &RespondSpec,
) -> Result<Vec<(String, String)>, ScriptError> {
    spec.headers
        .iter()
        .flatten()
        .map(|(name, value)| {
            if value
                .bytes()
                .all(|b| b == b'\t' || (b' '..=b'~').contains(&b))
            {
                Ok((name.as_str().to_string(), value.clone()))
            } else {
                Err(at.invalid(
                    &format!("headers.{}", name.as_str()),
                    "must be printable ASCII",
                ))
            }
        })
        .collect()
}

/// The response of a status or truncate fault; `default_status` when none is given.
fn fault_response(
    at: EntryAt<'_>,
    spec: &RespondSpec,
    default_status: Option<u16>,
    headers: Vec<(String, String)>,
) -> Result<Arc<FaultResponse>, ScriptError> {
    let grpc = spec.grpc.map(|code| GrpcStatus {
        code: code.get(),
        pushback: spec.pushback.map(|p| match p {
            PushbackSpec::After(d) => Pushback::After(d.get()),
            PushbackSpec::Stop => Pushback::Stop,
        }),
    });
    let status = spec
        .status
        .map(StatusCodeSpec::get)
        .or(grpc.map(|g| crate::wire::grpc::http_status(g.code)))
        .or(default_status)
        .ok_or_else(|| at.invalid("status", "is required for a status fault"))?;
    Ok(Arc::new(FaultResponse {
        status,
        retry_after: spec.retry_after.map(|d| d.get()),
        body: spec.body.clone(),
        headers,
        grpc,
    }))
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
