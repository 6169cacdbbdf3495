//! Plans: one YAML file describes the whole experiment.
//!
//! Two layers, as ripgrep does with its flags: [`spec`] only parses what was written
//! (serde DTOs, unknown keys rejected, each value range-checked where it is read), and
//! this module resolves it into the types the engine runs on, checking how the parts fit
//! together. Every error names the file, the line and column, what is wrong and, where it
//! can, what to write instead. This is the one place that knows the YAML crate.

mod locate;
pub mod spec;

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use chaos_policy::{
    Backoff, BreakerConfig, BudgetConfig, Jitter, Method, Policy, PolicyConfig, Preset, QuotaCosts,
    RetryAfter, RetryCondition, RetryOn,
};
use fault_server::script::{Script, ScriptError, ScriptSpec};

use locate::{Seg, locate};
use spec::{
    ArrivalsSpec, BackoffSpec, BreakerSpec, BudgetKindSpec, BudgetSpec, GateSpec, JitterSpec,
    LoadSpec, PlanSpec, PolicySpec, TargetSpec, Toggle,
};

/// A plan that can run.
#[derive(Debug, Clone)]
pub struct Plan {
    pub name: String,
    pub description: Option<String>,
    pub file: PathBuf,
    pub seed: u64,
    /// How long arrivals run.
    pub duration: Duration,
    /// How long in-flight requests may finish after arrivals stop.
    pub drain: Duration,
    pub target: Target,
    pub load: Load,
    /// The faults and capacity model, as the fault-server takes them.
    pub script: ScriptSpec,
    /// When the first fault phase starts and the last one ends, for `recovery_s`.
    pub fault_window: Option<(Duration, Duration)>,
    pub policies: Vec<NamedPolicy>,
    pub gates: Vec<Gate>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Target {
    /// A fault-server started in-process on 127.0.0.1:0.
    Embedded,
    /// A running fault-server, scripted over its control API.
    FaultServer { url: String, token: Option<String> },
    /// Any HTTP service: no faults, no ledger, client-side accounting only.
    BlackBox { url: String },
}

impl Target {
    pub fn has_ledger(&self) -> bool {
        !matches!(self, Target::BlackBox { .. })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrivals {
    Uniform,
    Poisson,
}

/// A piece of the rate profile: the rate goes linearly from `from` to `to` over `length`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Segment {
    pub from: f64,
    pub to: f64,
    pub length: Duration,
}

#[derive(Debug, Clone)]
pub struct Load {
    pub arrivals: Arrivals,
    pub profile: Vec<Segment>,
    pub max_in_flight: u32,
    pub requests: Vec<RequestKind>,
}

impl Load {
    /// Expected logical requests over the profile (the integral of the rate).
    pub fn expected_arrivals(&self) -> f64 {
        self.profile
            .iter()
            .map(|s| (s.from + s.to) / 2.0 * s.length.as_secs_f64())
            .sum()
    }
}

/// One entry of the request mix.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestKind {
    pub name: String,
    /// The method as sent (upper case).
    pub method: String,
    pub path: String,
    pub weight: f64,
    pub body: Option<String>,
    pub headers: BTreeMap<String, String>,
    pub idempotency_key: bool,
}

impl RequestKind {
    pub fn policy_request(&self) -> chaos_policy::Request {
        chaos_policy::Request {
            method: Method::parse(&self.method),
            idempotency_key: self.idempotency_key,
        }
    }
}

#[derive(Debug, Clone)]
pub struct NamedPolicy {
    pub name: String,
    pub preset: Option<Preset>,
    pub policy: Policy,
}

/// An invariant every policy (or the named ones) must hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    AmplificationWithinBudget,
    NoRetryOfPermanent,
    NoRetryOfNonIdempotent,
    NoDuplicateSideEffects,
    /// The client's and the fault-server's counts of attempts agree exactly: proof that no
    /// layer retried behind the policy's back.
    ClientServerAgree,
}

impl Check {
    pub const ALL: [Check; 5] = [
        Check::AmplificationWithinBudget,
        Check::NoRetryOfPermanent,
        Check::NoRetryOfNonIdempotent,
        Check::NoDuplicateSideEffects,
        Check::ClientServerAgree,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Check::AmplificationWithinBudget => "amplification_within_budget",
            Check::NoRetryOfPermanent => "no_retry_of_permanent",
            Check::NoRetryOfNonIdempotent => "no_retry_of_non_idempotent",
            Check::NoDuplicateSideEffects => "no_duplicate_side_effects",
            Check::ClientServerAgree => "client_server_agree",
        }
    }
}

/// A measured figure a gate can bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    SuccessRate,
    P50Ms,
    P90Ms,
    P99Ms,
    P999Ms,
    Amplification,
    ServerAmplification,
    PeakAmplification,
    RecoveryS,
    Dropped,
    Retries,
}

impl Metric {
    pub const ALL: [Metric; 11] = [
        Metric::SuccessRate,
        Metric::P50Ms,
        Metric::P90Ms,
        Metric::P99Ms,
        Metric::P999Ms,
        Metric::Amplification,
        Metric::ServerAmplification,
        Metric::PeakAmplification,
        Metric::RecoveryS,
        Metric::Dropped,
        Metric::Retries,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Metric::SuccessRate => "success_rate",
            Metric::P50Ms => "p50_ms",
            Metric::P90Ms => "p90_ms",
            Metric::P99Ms => "p99_ms",
            Metric::P999Ms => "p999_ms",
            Metric::Amplification => "amplification",
            Metric::ServerAmplification => "server_amplification",
            Metric::PeakAmplification => "peak_amplification",
            Metric::RecoveryS => "recovery_s",
            Metric::Dropped => "dropped",
            Metric::Retries => "retries",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum GateKind {
    Check(Check),
    Metric {
        metric: Metric,
        min: Option<f64>,
        max: Option<f64>,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct Gate {
    pub kind: GateKind,
    /// The policies it applies to; empty: every policy.
    pub policies: Vec<String>,
}

impl Gate {
    pub fn name(&self) -> String {
        match &self.kind {
            GateKind::Check(check) => check.name().to_owned(),
            GateKind::Metric { metric, min, max } => {
                let mut name = metric.name().to_owned();
                if let Some(min) = min {
                    name.push_str(&format!(" >= {min}"));
                }
                if let Some(max) = max {
                    name.push_str(&format!(" <= {max}"));
                }
                name
            }
        }
    }

    pub fn applies_to(&self, policy: &str) -> bool {
        self.policies.is_empty() || self.policies.iter().any(|p| p == policy)
    }
}

/// A plan that cannot run, and where.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanError {
    pub file: PathBuf,
    pub line: Option<usize>,
    pub column: Option<usize>,
    pub message: String,
    pub hint: Option<String>,
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
        if let Some(hint) = &self.hint {
            write!(f, "\n  hint: {hint}")?;
        }
        Ok(())
    }
}

impl std::error::Error for PlanError {}

/// An error found while resolving: what is wrong and the path to the part at fault.
struct Found {
    path: Vec<Seg>,
    message: String,
    hint: Option<String>,
}

fn found(path: Vec<Seg>, message: impl Into<String>) -> Found {
    Found {
        path,
        message: message.into(),
        hint: None,
    }
}

impl Found {
    fn hint(mut self, hint: impl Into<String>) -> Found {
        self.hint = Some(hint.into());
        self
    }
}

/// Reads and resolves a plan file.
pub fn load(path: &Path) -> Result<Plan, PlanError> {
    let text = std::fs::read_to_string(path).map_err(|e| PlanError {
        file: path.to_owned(),
        line: None,
        column: None,
        message: format!("cannot read the plan: {e}"),
        hint: Some("check the path; `ls plans/` lists the shipped plans".into()),
    })?;
    parse(path, &text)
}

/// Resolves a plan from its text; `path` names it in errors and reports.
pub fn parse(path: &Path, text: &str) -> Result<Plan, PlanError> {
    let spec: PlanSpec = serde_yaml::from_str(text).map_err(|e| yaml_error(path, &e))?;
    resolve(path, spec).map_err(|f| {
        let at = locate(text, &f.path);
        PlanError {
            file: path.to_owned(),
            line: at.map(|(l, _)| l),
            column: at.map(|(_, c)| c),
            message: f.message,
            hint: f.hint,
        }
    })
}

fn yaml_error(path: &Path, e: &serde_yaml::Error) -> PlanError {
    let location = e.location();
    let mut message = e.to_string();
    // serde_yaml appends " at line L column C"; the prefix says it already.
    if let Some(at) = message.find(" at line ") {
        message.truncate(at);
    }
    let hint = unknown_field_hint(&message).or_else(|| {
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
    }
}

/// For serde's "unknown field `x`, expected one of `a`, `b`": the closest expected name.
fn unknown_field_hint(message: &str) -> Option<String> {
    let rest = message.split("unknown field `").nth(1)?;
    let (field, expected) = rest.split_once('`')?;
    let names: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
    let best = names
        .iter()
        .map(|n| (edit_distance(field, n), *n))
        .min()
        .filter(|(d, n)| *d <= 2.max(n.len() / 3))?;
    Some(format!("did you mean `{}`?", best.1))
}

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

const DEFAULT_SEED: u64 = 1;
const DEFAULT_DRAIN: Duration = Duration::from_secs(10);
const DEFAULT_MAX_IN_FLIGHT: u32 = 10_000;
const DEFAULT_RETRY_AFTER_MAX: Duration = Duration::from_secs(30);

fn resolve(path: &Path, spec: PlanSpec) -> Result<Plan, Found> {
    use Seg::{Index, Key};
    let name = match spec.name {
        Some(name) => name,
        None => path
            .file_stem()
            .map_or_else(|| "plan".to_owned(), |s| s.to_string_lossy().into_owned()),
    };
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        return Err(found(
            vec![Key("name")],
            format!("plan name `{name}` cannot name a report directory"),
        )
        .hint("use letters, digits, `-`, `_` and `.` only"));
    }
    let (profile, stages_length) = profile(&spec.load)?;
    let duration = match (spec.duration.map(|d| d.get()), stages_length) {
        (Some(d), None) => d,
        (None, Some(s)) => s,
        (Some(d), Some(s)) if d == s => d,
        (Some(d), Some(s)) => {
            return Err(found(
                vec![Key("duration")],
                format!("`duration` is {d:?} but the stages add up to {s:?}"),
            )
            .hint("drop `duration` when `load.stages` are given; they set it"));
        }
        (None, None) => {
            return Err(found(
                vec![Key("load")],
                "the plan has no `duration` and no `load.stages`",
            )
            .hint("add `duration: 30s` at the top level"));
        }
    };
    if duration.is_zero() {
        return Err(found(
            vec![Key("duration")],
            "`duration` is zero: nothing would be sent",
        ));
    }
    let profile = match profile {
        Some(p) => p,
        None => {
            let rate = spec.load.rate.map(|r| r.0).ok_or_else(|| {
                found(vec![Key("load")], "`load` has no `rate`")
                    .hint("add `rate: 100` (logical requests per second)")
            })?;
            vec![Segment {
                from: rate,
                to: rate,
                length: duration,
            }]
        }
    };
    let expected: f64 = profile
        .iter()
        .map(|s| (s.from + s.to) / 2.0 * s.length.as_secs_f64())
        .sum();
    if expected < 1.0 {
        return Err(found(vec![Key("load")], format!("the load profile issues {expected:.2} requests on average: nothing would be measured"))
            .hint("raise `load.rate` (requests per second) or the `duration`"));
    }
    if spec.load.max_in_flight == Some(0) {
        return Err(found(
            vec![Key("load"), Key("max_in_flight")],
            "`max_in_flight` is 0: no request could ever be sent",
        )
        .hint("omit it (default 10000) or give the number of logical requests allowed at once"));
    }
    let requests = requests(&spec.load)?;
    let target = target(spec.target, spec.allow_remote)?;
    let seed = spec.seed.unwrap_or(DEFAULT_SEED);
    let script = ScriptSpec {
        seed: Some(seed),
        server: spec.server,
        faults: spec.faults,
    };
    let compiled = Script::from_spec(script.clone()).map_err(script_error)?;
    if !target.has_ledger() && !compiled.is_empty() {
        return Err(found(
            vec![Key("faults")],
            "a black-box target (`fault_server: false`) cannot inject `faults` or a `server` model",
        )
        .hint("remove `faults:` and `server:`, or point `target.url` at a fault-server"));
    }
    let fault_window = fault_window(&script, duration);
    if spec.policies.is_empty() {
        return Err(found(vec![Key("policies")], "the plan has no policies")
            .hint("add one, e.g. `- { name: default, preset: grpc }`"));
    }
    let mut policies: Vec<NamedPolicy> = Vec::new();
    for (i, p) in spec.policies.into_iter().enumerate() {
        if !is_token(&p.name) {
            return Err(found(vec![Key("policies"), Index(i), Key("name")], format!("policy name `{}` cannot be sent in a header", p.name))
                .hint("use letters, digits, `-`, `_` and `.`: the name goes into `x-chaos-policy` and every request id"));
        }
        if policies.iter().any(|q| q.name == p.name) {
            return Err(found(
                vec![Key("policies"), Index(i), Key("name")],
                format!("two policies are named `{}`", p.name),
            )
            .hint("each policy needs its own name: reports and gates refer to it"));
        }
        policies.push(policy(i, p)?);
    }
    let mut gates = Vec::new();
    for (i, g) in spec.gates.into_iter().enumerate() {
        let gate = gate(i, g)?;
        let needs_ledger = matches!(
            gate.kind,
            GateKind::Check(Check::NoDuplicateSideEffects | Check::ClientServerAgree)
        );
        if needs_ledger && !target.has_ledger() {
            return Err(found(
                vec![Key("gates"), Index(i)],
                format!(
                    "gate `{}` needs the fault-server's ledger, and the target is a black box",
                    gate.name()
                ),
            )
            .hint("remove the gate, or point `target.url` at a fault-server"));
        }
        if let Some(unknown) = gate
            .policies
            .iter()
            .find(|p| !policies.iter().any(|q| &q.name == *p))
        {
            let known: Vec<&str> = policies.iter().map(|p| p.name.as_str()).collect();
            return Err(found(
                vec![Key("gates"), Index(i), Key("policy")],
                format!("gate names policy `{unknown}`, which the plan does not define"),
            )
            .hint(format!("the policies are: {}", known.join(", "))));
        }
        gates.push(gate);
    }
    Ok(Plan {
        name,
        description: spec.description,
        file: path.to_owned(),
        seed,
        duration,
        drain: spec.drain.map_or(DEFAULT_DRAIN, |d| d.get()),
        target,
        load: Load {
            arrivals: match spec.load.arrivals {
                Some(ArrivalsSpec::Uniform) => Arrivals::Uniform,
                Some(ArrivalsSpec::Poisson) | None => Arrivals::Poisson,
            },
            profile,
            max_in_flight: spec
                .load
                .max_in_flight
                .unwrap_or(DEFAULT_MAX_IN_FLIGHT)
                .max(1),
            requests,
        },
        script,
        fault_window,
        policies,
        gates,
    })
}

fn script_error(e: ScriptError) -> Found {
    match &e {
        ScriptError::Invalid { phase, .. } => {
            let index = phase
                .strip_prefix("faults[")
                .and_then(|r| r.split(']').next())
                .and_then(|n| n.parse().ok());
            let path = match index {
                Some(i) => vec![Seg::Key("faults"), Seg::Index(i)],
                None => vec![Seg::Key("server")],
            };
            found(path, e.to_string())
        }
        ScriptError::Parse { .. } => found(vec![Seg::Key("faults")], e.to_string()),
    }
}

/// The earliest start and latest end of the windowed fault phases. A phase that starts
/// later but never ends lasts to the end of the arrivals; one with no window at all is
/// background noise, not an incident to recover from.
fn fault_window(script: &ScriptSpec, duration: Duration) -> Option<(Duration, Duration)> {
    let mut window: Option<(Duration, Duration)> = None;
    for phase in &script.faults {
        let from = phase.from.map_or(Duration::ZERO, |f| f.get());
        let until = match phase.until.map(|u| u.get()) {
            Some(until) => until,
            None if !from.is_zero() => duration,
            None => continue,
        };
        window = Some(match window {
            None => (from, until),
            Some((a, b)) => (a.min(from), b.max(until)),
        });
    }
    window
}

/// The rate profile from `load.stages`, and how long the stages last (`None`: no stages).
fn profile(load: &LoadSpec) -> Result<(Option<Vec<Segment>>, Option<Duration>), Found> {
    use Seg::{Index, Key};
    if load.stages.is_empty() {
        return Ok((None, None));
    }
    let mut rate = load.rate.map_or(0.0, |r| r.0);
    let mut segments = Vec::new();
    let mut total = Duration::ZERO;
    for (i, stage) in load.stages.iter().enumerate() {
        let at = || vec![Key("load"), Key("stages"), Index(i)];
        let segment = match (stage.to, stage.over, stage.hold) {
            (Some(to), Some(over), None) => Segment {
                from: rate,
                to: to.0,
                length: over.get(),
            },
            (None, None, Some(hold)) => Segment {
                from: rate,
                to: rate,
                length: hold.get(),
            },
            _ => {
                return Err(found(
                    at(),
                    "a stage is `{ to: RATE, over: DURATION }` or `{ hold: DURATION }`",
                )
                .hint("e.g. `stages: [ { to: 500, over: 10s }, { hold: 20s } ]`"));
            }
        };
        rate = segment.to;
        total += segment.length;
        segments.push(segment);
    }
    Ok((Some(segments), Some(total)))
}

fn requests(load: &LoadSpec) -> Result<Vec<RequestKind>, Found> {
    use Seg::{Index, Key};
    if load.requests.is_empty() {
        return Err(found(
            vec![Key("load"), Key("requests")],
            "`load.requests` is empty",
        )
        .hint("add `- { name: read, method: GET, path: \"/items/{n}\" }`"));
    }
    let mut kinds = Vec::new();
    for (i, r) in load.requests.iter().enumerate() {
        let at = |key| vec![Key("load"), Key("requests"), Index(i), Key(key)];
        let method = r
            .method
            .clone()
            .unwrap_or_else(|| "GET".into())
            .to_ascii_uppercase();
        if method.is_empty() || !method.bytes().all(|b| b.is_ascii_alphabetic()) {
            return Err(found(
                at("method"),
                format!("`{method}` is not an HTTP method"),
            ));
        }
        if !r.path.starts_with('/') {
            return Err(
                found(at("path"), format!("path `{}` must start with `/`", r.path))
                    .hint("paths are relative to the target, e.g. `/items/{n}`"),
            );
        }
        if is_control_path(&r.path) {
            return Err(found(
                at("path"),
                format!(
                    "`{}` is the fault-server's own endpoint: never faulted, never in the ledger",
                    r.path
                ),
            )
            .hint("load paths are the service's, e.g. `/items/{n}`"));
        }
        if r.name.trim().is_empty() || load.requests[..i].iter().any(|q| q.name == r.name) {
            return Err(found(
                at("name"),
                format!("request name `{}` is empty or used twice", r.name),
            ));
        }
        let weight = r.weight.unwrap_or(1.0);
        if !(weight.is_finite() && (0.0..=1e9).contains(&weight)) {
            return Err(found(
                at("weight"),
                format!("weight {weight} must be a number between 0 and 1e9"),
            ));
        }
        for (name, value) in &r.headers {
            if name.is_empty()
                || !name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            {
                return Err(found(
                    at("headers"),
                    format!("`{name}` is not a valid header name"),
                ));
            }
            if RESERVED_HEADERS
                .iter()
                .any(|h| h.eq_ignore_ascii_case(name))
            {
                return Err(found(at("headers"), format!("header `{name}` is set by the harness or the HTTP stack"))
                    .hint("for an idempotency key write `idempotency_key: true`; ids and attempt numbers are always sent"));
            }
            if !value
                .bytes()
                .all(|b| b == b'\t' || (b' '..=b'~').contains(&b))
            {
                return Err(found(
                    at("headers"),
                    format!("the value of header `{name}` must be printable ASCII"),
                ));
            }
        }
        kinds.push(RequestKind {
            name: r.name.clone(),
            method,
            path: r.path.clone(),
            weight,
            body: r.body.clone(),
            headers: r.headers.clone(),
            idempotency_key: r.idempotency_key,
        });
    }
    if kinds.iter().all(|k| k.weight == 0.0) {
        return Err(found(
            vec![Key("load"), Key("requests")],
            "every request has weight 0",
        ));
    }
    Ok(kinds)
}

fn target(spec: Option<TargetSpec>, allow_remote: bool) -> Result<Target, Found> {
    let at = || vec![Seg::Key("target")];
    let Some(TargetSpec::Url(spec)) = spec else {
        return Ok(Target::Embedded);
    };
    let url = reqwest::Url::parse(&spec.url).map_err(|e| {
        found(at(), format!("target url `{}` is not a URL: {e}", spec.url))
            .hint("e.g. `http://127.0.0.1:8080`")
    })?;
    if url.scheme() != "http" {
        return Err(found(
            at(),
            format!("target url `{}`: only http:// is supported", spec.url),
        ));
    }
    let loopback = url.host_str().is_some_and(is_loopback_host);
    if !loopback && !allow_remote {
        return Err(found(
            at(),
            format!(
                "target `{}` is not on loopback: load and faults go only to machines you own",
                spec.url
            ),
        )
        .hint(
            "use 127.0.0.1 or localhost; a plan that really means it says `allow_remote: true`",
        ));
    }
    let url = spec.url.trim_end_matches('/').to_owned();
    Ok(if spec.fault_server {
        Target::FaultServer {
            url,
            token: spec.token,
        }
    } else {
        Target::BlackBox { url }
    })
}

/// Letters, digits, `-`, `_`, `.`: safe in a header, a file name and a request id.
fn is_token(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// Headers the harness sets itself, or that only the HTTP stack may set.
const RESERVED_HEADERS: [&str; 10] = [
    "x-request-id",
    "x-chaos-attempt",
    "x-chaos-policy",
    "idempotency-key",
    "traceparent",
    "content-length",
    "transfer-encoding",
    "host",
    "connection",
    "upgrade",
];

/// Paths the fault-server answers itself: never faulted, never in the ledger.
fn is_control_path(path: &str) -> bool {
    let path = path.split('?').next().unwrap_or(path);
    matches!(path, "/healthz" | "/metrics" | "/__chaos") || path.starts_with("/__chaos/")
}

/// `localhost`, 127.0.0.0/8 or [::1].
pub fn is_loopback_host(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

fn policy(i: usize, spec: PolicySpec) -> Result<NamedPolicy, Found> {
    use Seg::{Index, Key};
    let at = |key: &'static str| vec![Key("policies"), Index(i), Key(key)];
    let preset = spec
        .preset
        .as_deref()
        .map(Preset::parse)
        .transpose()
        .map_err(|e| found(at("preset"), e.to_string()))?;
    let mut config = preset.map_or_else(
        || PolicyConfig {
            // A plan's policy without a preset starts from "no retries" plus what it says,
            // so nothing is retried that the plan did not ask for.
            max_attempts: 1,
            backoff: Backoff::none(),
            ..PolicyConfig::default()
        },
        Preset::config,
    );
    if let Some(n) = spec.max_attempts {
        config.max_attempts = n;
    }
    if let Some(t) = spec.attempt_timeout {
        config.attempt_timeout = Some(t.get());
    }
    if let Some(d) = spec.deadline {
        config.deadline = Some(d.get());
    }
    if let Some(b) = spec.backoff {
        config.backoff =
            backoff(b).map_err(|m| found(at("backoff"), format!("policy `{}`: {m}", spec.name)))?;
    }
    if let Some(list) = spec.retry_on {
        let mut conditions = Vec::new();
        for item in &list {
            let condition = RetryCondition::parse(item).ok_or_else(|| {
                found(at("retry_on"), format!("unknown retry_on condition `{item}`"))
                    .hint("use any, transient, 5xx, gateway-error, connect-failure, reset, timeout, or a status code")
            })?;
            conditions.push(condition);
        }
        config.retry_on = RetryOn::new(conditions);
    }
    if let Some(b) = spec.retry_non_idempotent {
        config.retry_non_idempotent = b;
    }
    let retry_after_max = spec
        .retry_after_max
        .map_or(DEFAULT_RETRY_AFTER_MAX, |d| d.get());
    match spec.honor_retry_after {
        Some(true) => {
            config.retry_after = RetryAfter::Honor {
                max: retry_after_max,
            }
        }
        Some(false) => config.retry_after = RetryAfter::Ignore,
        None if spec.retry_after_max.is_some() => {
            config.retry_after = RetryAfter::Honor {
                max: retry_after_max,
            };
        }
        None => {}
    }
    match spec.budget {
        Some(Toggle::Off) => config.budget = None,
        Some(Toggle::On(b)) => {
            config.budget = Some(
                budget(b)
                    .map_err(|m| found(at("budget"), format!("policy `{}`: {m}", spec.name)))?,
            );
        }
        None => {}
    }
    match spec.breaker {
        Some(Toggle::Off) => config.breaker = None,
        Some(Toggle::On(b)) => config.breaker = Some(breaker(b)),
        None => {}
    }
    let policy = Policy::new(config).map_err(|e| {
        let key = match e.to_string() {
            m if m.contains("budget") => "budget",
            m if m.contains("breaker") => "breaker",
            m if m.contains("backoff") || m.contains("multiplier") => "backoff",
            m if m.contains("max_attempts") => "max_attempts",
            m if m.contains("attempt_timeout") => "attempt_timeout",
            m if m.contains("deadline") => "deadline",
            m if m.contains("retry_after_max") => "retry_after_max",
            m if m.contains("retry_after_max") => "retry_after_max",
            _ => "name",
        };
        found(at(key), format!("policy `{}`: {e}", spec.name))
    })?;
    Ok(NamedPolicy {
        name: spec.name,
        preset,
        policy,
    })
}

fn backoff(spec: BackoffSpec) -> Result<Backoff, String> {
    let shapes = usize::from(spec.fixed.is_some())
        + usize::from(spec.exponential.is_some())
        + usize::from(spec.envoy.is_some())
        + usize::from(spec.none);
    if shapes != 1 {
        return Err(
            "a backoff has exactly one of `fixed`, `exponential`, `envoy` (or is `none`)".into(),
        );
    }
    let shape = if let Some(d) = spec.fixed {
        Backoff::fixed(d.get())
    } else if let Some(e) = spec.exponential {
        Backoff::exponential(e.base.get(), e.multiplier.unwrap_or(2.0), e.cap.get())
            .map_err(|e| e.to_string())?
    } else if let Some(e) = spec.envoy {
        let base = e.base.get();
        Backoff::envoy(base, e.cap.map_or(base * 10, |c| c.get())).map_err(|e| e.to_string())?
    } else {
        Backoff::none()
    };
    let jitter = match spec.jitter {
        None | Some(JitterSpec::None) => Jitter::None,
        Some(JitterSpec::Full) => Jitter::Full,
        Some(JitterSpec::Equal) => Jitter::Equal,
        Some(JitterSpec::Decorrelated) => Jitter::Decorrelated,
        Some(JitterSpec::Additive(f)) => Jitter::Additive(f),
    };
    shape.with_jitter(jitter).map_err(|e| e.to_string())
}

fn budget(spec: BudgetSpec) -> Result<BudgetConfig, String> {
    let kind = spec
        .kind
        .unwrap_or(if spec.min_per_sec.is_some() || spec.ttl.is_some() {
            BudgetKindSpec::TtlWindow
        } else if spec.token_ratio.is_some() {
            BudgetKindSpec::Grpc
        } else if spec.capacity.is_some() || spec.retry_cost.is_some() {
            BudgetKindSpec::AwsQuota
        } else if spec.percent.is_some() || spec.min_concurrency.is_some() {
            BudgetKindSpec::EnvoyConcurrency
        } else {
            BudgetKindSpec::TokenBucket
        });
    let need = |v: Option<f64>, key: &str, example: &str| {
        v.ok_or_else(|| {
            format!(
                "this {} budget needs `{key}` (e.g. `{key}: {example}`)",
                kind_name(kind)
            )
        })
    };
    let config = match kind {
        BudgetKindSpec::TokenBucket => {
            let max_tokens = spec.max_tokens.unwrap_or(10.0);
            BudgetConfig::TokenBucket {
                ratio: need(spec.ratio, "ratio", "0.2")?,
                max_tokens,
                initial_tokens: spec.initial_tokens.unwrap_or(max_tokens),
            }
        }
        BudgetKindSpec::TtlWindow => BudgetConfig::TtlWindow {
            ratio: need(spec.ratio, "ratio", "0.2")?,
            min_per_sec: spec.min_per_sec.unwrap_or(10.0),
            ttl: spec.ttl.map_or(Duration::from_secs(10), |t| t.get()),
        },
        BudgetKindSpec::Grpc => BudgetConfig::GrpcThrottle {
            max_tokens: need(spec.max_tokens, "max_tokens", "10")?,
            token_ratio: need(spec.token_ratio, "token_ratio", "0.1")?,
        },
        BudgetKindSpec::AwsQuota => {
            let retry = spec.retry_cost.unwrap_or(5.0);
            BudgetConfig::RetryQuota {
                capacity: spec.capacity.unwrap_or(500.0),
                costs: QuotaCosts {
                    retry,
                    timeout: spec.timeout_cost.unwrap_or(retry * 2.0),
                    throttling: spec.throttling_cost.unwrap_or(retry),
                },
                success_refill: spec.success_refill.unwrap_or(1.0),
            }
        }
        BudgetKindSpec::EnvoyConcurrency => BudgetConfig::Concurrency {
            percent: spec.percent.unwrap_or(20.0),
            min_concurrency: spec.min_concurrency.unwrap_or(3),
        },
    };
    config.build().map_err(|e| e.to_string())?;
    Ok(config)
}

fn kind_name(kind: BudgetKindSpec) -> &'static str {
    match kind {
        BudgetKindSpec::TokenBucket => "token_bucket",
        BudgetKindSpec::TtlWindow => "ttl_window",
        BudgetKindSpec::Grpc => "grpc",
        BudgetKindSpec::AwsQuota => "aws_quota",
        BudgetKindSpec::EnvoyConcurrency => "envoy_concurrency",
    }
}

fn breaker(spec: BreakerSpec) -> BreakerConfig {
    BreakerConfig {
        failure_ratio: spec.failure_ratio,
        min_requests: spec.min_requests.unwrap_or(20),
        window: spec.window.map_or(Duration::from_secs(10), |d| d.get()),
        open_for: spec.open_for.map_or(Duration::from_secs(5), |d| d.get()),
        half_open_probes: spec.half_open_probes.unwrap_or(1),
    }
}

fn gate(i: usize, spec: GateSpec) -> Result<Gate, Found> {
    use Seg::{Index, Key};
    let at = || vec![Key("gates"), Index(i)];
    match spec {
        GateSpec::Check { check, policies } => {
            let kind = Check::ALL
                .into_iter()
                .find(|c| c.name() == check)
                .ok_or_else(|| {
                    let names: Vec<&str> = Check::ALL.iter().map(|c| c.name()).collect();
                    let mut f = found(at(), format!("unknown gate `{check}`"));
                    f.hint = closest(&check, &names)
                        .map(|n| format!("did you mean `{n}`?"))
                        .or_else(|| {
                            Some(format!(
                                "gates: {}, or `{{ metric: NAME, min|max: X }}`",
                                names.join(", ")
                            ))
                        });
                    f
                })?;
            Ok(Gate {
                kind: GateKind::Check(kind),
                policies,
            })
        }
        GateSpec::Metric(m) => {
            let name = m.metric.unwrap_or_default();
            let metric = Metric::ALL
                .into_iter()
                .find(|x| x.name() == name)
                .ok_or_else(|| {
                    let names: Vec<&str> = Metric::ALL.iter().map(|x| x.name()).collect();
                    let mut f = found(at(), format!("unknown metric `{name}`"));
                    f.hint = closest(&name, &names)
                        .map(|n| format!("did you mean `{n}`?"))
                        .or_else(|| Some(format!("metrics: {}", names.join(", "))));
                    f
                })?;
            if m.min.is_none() && m.max.is_none() {
                return Err(found(
                    at(),
                    format!("metric gate `{name}` needs `min:` or `max:`"),
                ));
            }
            if m.min.into_iter().chain(m.max).any(|x| !x.is_finite()) {
                return Err(found(
                    at(),
                    format!("metric gate `{name}` has a limit that is not a number"),
                ));
            }
            if let (Some(min), Some(max)) = (m.min, m.max)
                && min > max
            {
                return Err(found(
                    at(),
                    format!("metric gate `{name}` can never pass: min {min} > max {max}"),
                ));
            }
            Ok(Gate {
                kind: GateKind::Metric {
                    metric,
                    min: m.min,
                    max: m.max,
                },
                policies: m.policy.map(spec::OneOrMany::into_vec).unwrap_or_default(),
            })
        }
    }
}

fn closest<'a>(word: &str, names: &[&'a str]) -> Option<&'a str> {
    names
        .iter()
        .map(|n| (edit_distance(word, n), *n))
        .min()
        .filter(|(d, n)| *d <= 2.max(n.len() / 3))
        .map(|(_, n)| n)
}
