//! The fault script, as pure logic: a request's facts and the time go in, a decision
//! comes out.
//!
//! Why pure (str0m's `netem` is the model): the live server and the harness's
//! virtual-time simulator both call [`Script::select`], so a simulation makes exactly the
//! decisions a live run makes for the same seed. Nothing here touches tokio, axum, a
//! socket or a clock: `now` is an argument (time since the run started) and randomness
//! comes from the caller's RNG.
//!
//! Selection, for each request: walk the phases in order; a phase applies when `now` is
//! in its half-open window `[from, until)`, the request matches its `match`, its attempt
//! number is listed in `attempts` (when given), and a draw falls under its
//! `probability`; the first phase that applies picks one `respond` entry by weight.
//! No phase applies: [`Decision::Serve`].
//!
//! The random draws are defined here and nowhere else: one uniform per phase reached
//! whose probability is strictly between 0 and 1, one to pick among several weighted
//! entries, and those of a delay distribution. The live server seeds one
//! [`rand_chacha::ChaCha8Rng`] per request from [`crate::seed::request_seed`] (seed, `x-request-id`,
//! attempt), so a request's decision does not depend on which other requests happened to
//! arrive before it.

mod pattern;
pub mod spec;

use std::sync::Arc;
use std::time::Duration;

use rand_chacha::ChaCha8Rng;
use rand_core::{Rng, SeedableRng};
use thiserror::Error;

use crate::capacity::{CapacityLimits, DEFAULT_REJECT_STATUS};
use crate::dist::{Distribution, unit};
use crate::duration::format_duration;
use crate::seed;
use pattern::Pattern;
pub use spec::{
    AttemptNumber, CapacitySpec, FaultKindSpec, HeaderNameSpec, MatchSpec, MethodSpec, OneOrMany,
    PathSpec, PhaseSpec, Probability, RespondSpec, ScriptSpec, StatusCodeSpec, Weight,
};

/// Why a script was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ScriptError {
    /// The text is not valid YAML for a script (a syntax error, an unknown key, a value
    /// out of range). The message carries the YAML path and `at line L column C`.
    #[error("{message}")]
    Parse {
        /// serde_yaml's message, with its location.
        message: String,
        /// 1-based line, when known.
        line: Option<usize>,
        /// 1-based column, when known.
        column: Option<usize>,
    },
    /// The fields are each valid but do not fit together.
    #[error("{phase}: `{field}` {message}")]
    Invalid {
        /// The phase, as `faults[INDEX] "NAME"`, or `server`.
        phase: String,
        /// The field, e.g. `until` or `respond[1].retry_after`.
        field: String,
        /// What is wrong.
        message: String,
    },
}

impl ScriptError {
    fn invalid(phase: &str, field: impl Into<String>, message: impl Into<String>) -> ScriptError {
        ScriptError::Invalid {
            phase: phase.to_string(),
            field: field.into(),
            message: message.into(),
        }
    }
}

/// Looks up a request header by its lower-case name.
pub trait HeaderLookup {
    /// The header's value, if present (and valid UTF-8).
    fn header(&self, name: &str) -> Option<&str>;
}

/// A request without headers.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoHeaders;

impl HeaderLookup for NoHeaders {
    fn header(&self, _name: &str) -> Option<&str> {
        None
    }
}

impl HeaderLookup for &[(&str, &str)] {
    fn header(&self, name: &str) -> Option<&str> {
        self.iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| *value)
    }
}

impl<const N: usize> HeaderLookup for [(&str, &str); N] {
    fn header(&self, name: &str) -> Option<&str> {
        self.iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| *value)
    }
}

impl HeaderLookup for Vec<(String, String)> {
    fn header(&self, name: &str) -> Option<&str> {
        self.iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }
}

/// What the script sees of a request.
#[derive(Clone, Copy)]
pub struct RequestFacts<'a> {
    /// The method, e.g. `POST`.
    pub method: &'a str,
    /// The path, without the query string.
    pub path: &'a str,
    /// The attempt number from `x-chaos-attempt`, if the request carried one.
    pub attempt: Option<u32>,
    /// The request's headers.
    pub headers: &'a dyn HeaderLookup,
    /// A seed that is the same for every attempt of this logical request (the live server
    /// uses [`crate::seed::request_seed`]`(seed, x-request-id, 0)`); `sticky` phases draw from it. Without
    /// one, they draw from the per-attempt RNG like any other phase.
    pub sticky_seed: Option<u64>,
}

impl std::fmt::Debug for RequestFacts<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestFacts")
            .field("method", &self.method)
            .field("path", &self.path)
            .field("attempt", &self.attempt)
            .finish_non_exhaustive()
    }
}

/// The outcome of [`Script::select`].
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// No phase applies: serve the request normally.
    Serve,
    /// Phase number `phase` (an index into the script's phases) fires with `fault`.
    Fault {
        /// Index of the phase that fired (see [`Script::phase_name`]).
        phase: usize,
        /// What to do, with every random draw already made.
        fault: Fault,
    },
}

/// One fault to execute.
#[derive(Debug, Clone, PartialEq)]
pub struct Fault {
    /// The kind and its parameters.
    pub kind: FaultKind,
    /// Execute the request's side effect before the fault.
    pub processed: bool,
}

/// A status (or truncated) response a fault sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FaultResponse {
    /// The status code.
    pub status: u16,
    /// `Retry-After`, sent in whole seconds rounded up.
    pub retry_after: Option<Duration>,
    /// The body; `None` lets the server write a small default body.
    pub body: Option<String>,
    /// Extra headers (lower-case names).
    pub headers: Vec<(String, String)>,
}

impl FaultResponse {
    /// The `Retry-After` value in whole seconds, rounded up (RFC 9110 delay-seconds).
    pub fn retry_after_secs(&self) -> Option<u64> {
        self.retry_after.map(|d| {
            let whole = d.as_secs();
            if d.subsec_nanos() > 0 {
                whole + 1
            } else {
                whole
            }
        })
    }
}

/// The fault kinds, resolved.
#[derive(Debug, Clone, PartialEq)]
pub enum FaultKind {
    /// Answer with this response.
    Status(Arc<FaultResponse>),
    /// Wait this long, then serve normally.
    Delay(Duration),
    /// Hold the request without answering for `hold` (or the server's hang cap, whichever
    /// is shorter), then close the connection.
    Timeout {
        /// How long to hold; `None` is the server's cap.
        hold: Option<Duration>,
    },
    /// TCP RST instead of a response.
    Reset,
    /// FIN without a response.
    Close,
    /// Status line, headers (with the full `Content-Length`) and part of the body, then RST.
    Truncate(Arc<FaultResponse>),
}

impl FaultKind {
    /// The kind's tag.
    pub fn tag(&self) -> FaultTag {
        match self {
            FaultKind::Status(_) => FaultTag::Status,
            FaultKind::Delay(_) => FaultTag::Delay,
            FaultKind::Timeout { .. } => FaultTag::Timeout,
            FaultKind::Reset => FaultTag::Reset,
            FaultKind::Close => FaultTag::Close,
            FaultKind::Truncate(_) => FaultTag::Truncate,
        }
    }
}

/// The fault kinds without their parameters: for counters and labels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FaultTag {
    /// `status`
    Status,
    /// `delay`
    Delay,
    /// `timeout`
    Timeout,
    /// `reset`
    Reset,
    /// `close`
    Close,
    /// `truncate`
    Truncate,
}

impl FaultTag {
    /// Every tag, in a fixed order (`as usize` indexes it).
    pub const ALL: [FaultTag; 6] = [
        FaultTag::Status,
        FaultTag::Delay,
        FaultTag::Timeout,
        FaultTag::Reset,
        FaultTag::Close,
        FaultTag::Truncate,
    ];

    /// The name used in plans, metrics and the ledger.
    pub fn name(self) -> &'static str {
        match self {
            FaultTag::Status => "status",
            FaultTag::Delay => "delay",
            FaultTag::Timeout => "timeout",
            FaultTag::Reset => "reset",
            FaultTag::Close => "close",
            FaultTag::Truncate => "truncate",
        }
    }
}

/// A resolved `respond` entry, before its random parameters are drawn.
#[derive(Debug, Clone, PartialEq)]
enum Template {
    Status(Arc<FaultResponse>),
    Delay(Distribution),
    Timeout { hold: Option<Duration> },
    Reset,
    Close,
    Truncate(Arc<FaultResponse>),
}

#[derive(Debug, Clone, PartialEq)]
struct Outcome {
    template: Template,
    processed: bool,
    weight: f64,
}

#[derive(Debug, Clone, PartialEq, Default)]
struct Matcher {
    /// Upper-case methods; empty matches any.
    methods: Vec<String>,
    path: Option<Pattern>,
    headers: Vec<(String, Pattern)>,
}

impl Matcher {
    fn matches(&self, request: &RequestFacts<'_>) -> bool {
        if !self.methods.is_empty()
            && !self
                .methods
                .iter()
                .any(|m| m.eq_ignore_ascii_case(request.method))
        {
            return false;
        }
        if let Some(path) = &self.path
            && !path.matches(request.path)
        {
            return false;
        }
        self.headers.iter().all(|(name, pattern)| {
            request
                .headers
                .header(name)
                .is_some_and(|value| pattern.matches(value))
        })
    }
}

#[derive(Debug, Clone, PartialEq)]
struct Phase {
    label: String,
    from: Duration,
    until: Option<Duration>,
    matcher: Matcher,
    probability: f64,
    attempts: Option<Vec<u32>>,
    sticky: bool,
    outcomes: Vec<Outcome>,
    total_weight: f64,
}

/// A validated, resolved script: the fault phases and the capacity model.
#[derive(Debug, Clone, PartialEq)]
pub struct Script {
    phases: Vec<Phase>,
    capacity: Option<CapacityLimits>,
    seed: Option<u64>,
    spec: ScriptSpec,
}

impl Default for Script {
    fn default() -> Self {
        Script::empty()
    }
}

impl Script {
    /// No faults, unlimited capacity.
    pub fn empty() -> Script {
        Script {
            phases: Vec::new(),
            capacity: None,
            seed: None,
            spec: ScriptSpec::default(),
        }
    }

    /// Parses a standalone script or a whole plan (YAML; JSON is YAML too). Reads the
    /// top-level `faults:`, `server:` and `seed:`; other top-level keys are ignored, so a
    /// harness plan works as a script. An empty document is the empty script.
    pub fn from_yaml_str(text: &str) -> Result<Script, ScriptError> {
        if text.trim().is_empty() {
            return Ok(Script::empty());
        }
        let spec: ScriptSpec = serde_yaml::from_str(text).map_err(|error| {
            let location = error.location();
            ScriptError::Parse {
                message: error.to_string(),
                line: location.as_ref().map(|l| l.line()),
                column: location.as_ref().map(|l| l.column()),
            }
        })?;
        Script::from_spec(spec)
    }

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
            phases.push(resolve_phase(index, phase)?);
        }
        let capacity = spec.server.as_ref().map(resolve_capacity).transpose()?;
        Ok(Script {
            phases,
            capacity,
            seed: spec.seed,
            spec,
        })
    }

    /// The capacity model, when the script has a `server:` block.
    pub fn capacity(&self) -> Option<&CapacityLimits> {
        self.capacity.as_ref()
    }

    /// The script's own `seed:`, if it has one.
    pub fn seed(&self) -> Option<u64> {
        self.seed
    }

    /// The script as parsed (for echoing it back, e.g. `GET /__chaos/script`).
    pub fn spec(&self) -> &ScriptSpec {
        &self.spec
    }

    /// Number of fault phases.
    pub fn phase_count(&self) -> usize {
        self.phases.len()
    }

    /// The name of phase `index`: its `name`, or `faults[INDEX]`.
    pub fn phase_name(&self, index: usize) -> Option<&str> {
        self.phases.get(index).map(|p| p.label.as_str())
    }

    /// True when the script has no phase and no capacity model.
    pub fn is_empty(&self) -> bool {
        self.phases.is_empty() && self.capacity.is_none()
    }

    /// The end of the last windowed phase (the largest `until`), for measuring recovery;
    /// `None` when no phase has an `until`.
    pub fn last_fault_end(&self) -> Option<Duration> {
        self.phases.iter().filter_map(|p| p.until).max()
    }

    /// Decides what happens to `request` arriving at `now` (time since the run started).
    pub fn select<R: Rng + ?Sized>(
        &self,
        request: &RequestFacts<'_>,
        now: Duration,
        rng: &mut R,
    ) -> Decision {
        for (index, phase) in self.phases.iter().enumerate() {
            if now < phase.from || phase.until.is_some_and(|until| now >= until) {
                continue;
            }
            if !phase.matcher.matches(request) {
                continue;
            }
            if let Some(attempts) = &phase.attempts
                && !request.attempt.is_some_and(|n| attempts.contains(&n))
            {
                continue;
            }
            // A sticky phase draws from a stream of its own for the logical request, so
            // every attempt of the request gets the same answer from it.
            let mut sticky_rng =
                phase
                    .sticky
                    .then_some(request.sticky_seed)
                    .flatten()
                    .map(|sticky| {
                        ChaCha8Rng::seed_from_u64(seed::splitmix64(sticky ^ (index as u64 + 1)))
                    });
            let drawn = match sticky_rng.as_mut() {
                Some(sticky) => phase.draw(sticky),
                None => phase.draw(rng),
            };
            if let Some(fault) = drawn {
                return Decision::Fault {
                    phase: index,
                    fault,
                };
            }
        }
        Decision::Serve
    }
}

impl Phase {
    /// The phase's own draws for a request it matched: does it fire, and with which fault.
    fn draw<R: Rng + ?Sized>(&self, rng: &mut R) -> Option<Fault> {
        let fires = if self.probability >= 1.0 {
            true
        } else if self.probability <= 0.0 {
            false
        } else {
            unit(rng) < self.probability
        };
        if !fires {
            return None;
        }
        let outcome = pick(&self.outcomes, self.total_weight, rng);
        let kind = match &outcome.template {
            Template::Status(response) => FaultKind::Status(Arc::clone(response)),
            Template::Delay(distribution) => FaultKind::Delay(distribution.sample(rng)),
            Template::Timeout { hold } => FaultKind::Timeout { hold: *hold },
            Template::Reset => FaultKind::Reset,
            Template::Close => FaultKind::Close,
            Template::Truncate(response) => FaultKind::Truncate(Arc::clone(response)),
        };
        Some(Fault {
            kind,
            processed: outcome.processed,
        })
    }
}

/// Picks one outcome by weight. One outcome (or one with positive weight) draws nothing.
fn pick<'a, R: Rng + ?Sized>(outcomes: &'a [Outcome], total: f64, rng: &mut R) -> &'a Outcome {
    let mut positive = outcomes.iter().filter(|o| o.weight > 0.0);
    let first = positive
        .next()
        .expect("from_spec refuses a phase whose weights sum to zero");
    if positive.next().is_none() {
        return first;
    }
    let mut target = unit(rng) * total;
    let mut chosen = first;
    for outcome in outcomes.iter().filter(|o| o.weight > 0.0) {
        chosen = outcome;
        if target < outcome.weight {
            break;
        }
        target -= outcome.weight;
    }
    chosen
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
    let outcomes = spec
        .respond
        .0
        .iter()
        .enumerate()
        .map(|(i, entry)| resolve_outcome(&label, i, entry))
        .collect::<Result<Vec<_>, _>>()?;
    let total_weight: f64 = outcomes.iter().map(|o| o.weight).sum();
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
        outcomes,
        total_weight,
    })
}

fn resolve_outcome(label: &str, i: usize, spec: &RespondSpec) -> Result<Outcome, ScriptError> {
    let field = |name: &str| format!("respond[{i}].{name}");
    let kind = match (spec.fault, spec.status) {
        (Some(kind), _) => kind,
        (None, Some(_)) => FaultKindSpec::Status,
        (None, None) => {
            return Err(ScriptError::invalid(
                label,
                format!("respond[{i}]"),
                "needs `status: CODE` or `fault: KIND` (status, delay, timeout, reset, close, truncate)",
            ));
        }
    };
    let kind_name = match kind {
        FaultKindSpec::Status => "status",
        FaultKindSpec::Delay => "delay",
        FaultKindSpec::Timeout => "timeout",
        FaultKindSpec::Reset => "reset",
        FaultKindSpec::Close => "close",
        FaultKindSpec::Truncate => "truncate",
    };
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
    let status_like = matches!(kind, FaultKindSpec::Status | FaultKindSpec::Truncate);
    refuse(
        spec.status.is_some() && !status_like,
        "status",
        "status and truncate",
    )?;
    refuse(
        spec.retry_after.is_some() && kind != FaultKindSpec::Status,
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
        spec.delay.is_some() && kind != FaultKindSpec::Delay,
        "delay",
        "delay",
    )?;
    refuse(
        spec.hold.is_some() && kind != FaultKindSpec::Timeout,
        "hold",
        "timeout",
    )?;
    let processed = spec.processed.unwrap_or(false);
    if processed && kind == FaultKindSpec::Delay {
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
    let template = match kind {
        FaultKindSpec::Status => Template::Status(response(None)?),
        FaultKindSpec::Truncate => Template::Truncate(response(Some(200))?),
        FaultKindSpec::Delay => {
            Template::Delay(spec.delay.map(Distribution::from).ok_or_else(|| {
                ScriptError::invalid(
                    label,
                    field("delay"),
                    "is required for a delay fault (e.g. `delay: 300ms`)",
                )
            })?)
        }
        FaultKindSpec::Timeout => Template::Timeout {
            hold: spec.hold.map(|d| d.get()),
        },
        FaultKindSpec::Reset => Template::Reset,
        FaultKindSpec::Close => Template::Close,
    };
    Ok(Outcome {
        template,
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

#[cfg(test)]
mod tests;
