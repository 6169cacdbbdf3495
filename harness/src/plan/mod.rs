//! Plans: one YAML file describes the whole experiment.
//!
//! Two layers, as ripgrep does with its flags: [`spec`] only parses what was written
//! (serde DTOs, unknown keys rejected, each value range-checked where it is read), and
//! this module resolves it into the types the engine runs on (`model`), checking how the
//! parts fit together: one submodule per section (`load`, `target`, `tiers`, `policy`,
//! `gate`). Every error names the file, the line and column, what is wrong and, where it
//! can, what to write instead ([`PlanError`]). This is the one place that knows the YAML
//! crate.

mod chain;
mod client;
mod error;
mod gate;
pub(crate) mod import;
mod load;
pub(crate) mod locate;
mod merge;
pub mod mesh;
mod model;
mod policy;
pub mod proxy;
mod recover;
pub mod resolved;
pub mod schema;
mod select;
pub mod spec;
mod target;
mod tiers;
mod tolerance;

use std::path::Path;
use std::time::Duration;

use fault_server::script::{Script, ScriptError, ScriptSpec};

pub use chain::{ABSURD_LEAF_AMPLIFICATION, worst_leaf_amplification};
use error::{Found, found, yaml_error, yaml_error_in};
pub use error::{PlanError, PlanErrors};
pub use load::DEFAULT_MAX_CONNECTIONS;
use locate::{Seg, locate};
pub use model::{
    Arrivals, Check, DEFAULT_NETWORK_LATENCY, Expect, Gate, GateKind, Load, Metric, NamedPolicy,
    Numbers, Plan, Protocol, RequestKind, Rpc, Segment, Target, TierKind, TierPolicy, Warning,
    fill_path, start_request,
};
pub use policy::{MAX_POLICIES, forward_once};
pub use recover::MAX_ERRORS;
pub use select::{UnknownPolicy, select, tier_script};
use spec::{PlanSpec, TargetSpec};
pub use target::is_loopback_host;
pub use tiers::MAX_TIERS;
pub use tolerance::{Relative, Tolerance, bounds};

/// The largest plan file read: far above any real plan, far below what would cost the
/// parser real memory.
pub const MAX_PLAN_BYTES: u64 = 1024 * 1024;

/// Reads and resolves a plan file.
pub fn load(path: &Path) -> Result<Plan, PlanError> {
    parse(path, &read(path)?)
}

/// [`load`], reporting every error it can find in one pass (at most
/// [`MAX_ERRORS`]) rather than the first: what `harness validate` shows.
pub fn load_all(path: &Path) -> Result<Plan, PlanErrors> {
    let text = read(path).map_err(|e| PlanErrors {
        errors: vec![e],
        more: false,
    })?;
    parse_all(path, &text)
}

/// [`parse`], reporting every error it can find (see [`load_all`]).
pub fn parse_all(path: &Path, text: &str) -> Result<Plan, PlanErrors> {
    recover::check(path, text)
}

/// [`load`], and refuses what `harness simulate` cannot model: on an HTTP/2 target a
/// fault that ends its connection (`reset`, `close`, `truncate`, `timeout`'s close) fails
/// every stream on it at once, and the simulator has no connections. Located at the
/// fault's `respond`.
pub fn load_simulable(path: &Path) -> Result<Plan, PlanError> {
    let text = read(path)?;
    let plan = parse(path, &text)?;
    if !plan.load.protocol.is_http2() {
        return Ok(plan);
    }
    use fault_server::script::FaultKind;
    for (i, phase) in plan.script.faults.iter().enumerate() {
        let ends_connection = phase.respond.0.iter().enumerate().find_map(|(j, entry)| {
            entry
                .fault
                .filter(|kind| {
                    matches!(
                        kind,
                        FaultKind::Reset
                            | FaultKind::Close
                            | FaultKind::Truncate
                            | FaultKind::Timeout
                    )
                })
                .map(|kind| (j, kind))
        });
        if let Some((j, kind)) = ends_connection {
            use Seg::{Index, Key};
            let mut at = vec![Key("faults"), Index(i), Key("respond"), Index(j)];
            if locate(&text, &at).is_none() {
                // `respond:` is one entry, not a list.
                at.pop();
            }
            return Err(located(
                path,
                &text,
                found(
                    at,
                    format!(
                        "`fault: {}` on an HTTP/2 target (`protocol: {}`) ends its connection and every stream on it: live only, the simulator has no connections",
                        kind.name(),
                        plan.load.protocol.name()
                    ),
                )
                .hint("run the plan live (`harness chaos`); the simulator models `refuse`, `goaway` (served), statuses, gRPC codes and delays"),
            ));
        }
    }
    Ok(plan)
}

/// A plan file's text, bounded in size and checked to be UTF-8.
pub fn read(path: &Path) -> Result<String, PlanError> {
    read_yaml(
        path,
        "plan",
        "check the path; `ls plans/` lists the shipped plans",
        "a plan describes one experiment in a few kilobytes; generated load belongs in `load:`, not in the file",
    )
}

/// A YAML file's text, bounded in size and checked to be UTF-8: `what` names it
/// (`plan`, `policy`) in errors.
fn read_yaml(
    path: &Path,
    what: &str,
    unreadable_hint: &str,
    too_large_hint: &str,
) -> Result<String, PlanError> {
    let whole = |message: String, hint: &str| whole_file(path, message, hint);
    let bytes = fault_server::yaml_guard::read_bounded(path, MAX_PLAN_BYTES)
        .map_err(|e| whole(format!("cannot read the {what}: {e}"), unreadable_hint))?
        .ok_or_else(|| {
            whole(
                format!("the {what} is larger than {} KiB", MAX_PLAN_BYTES / 1024),
                too_large_hint,
            )
        })?;
    String::from_utf8(bytes).map_err(|e| {
        let valid = e.utf8_error().valid_up_to();
        let (line, column) = error::position_of(&e.as_bytes()[..valid]);
        PlanError {
            line: Some(line),
            column: Some(column),
            ..whole(
                format!("the {what} is not UTF-8 text (byte {valid})"),
                &format!("save the {what} as UTF-8"),
            )
        }
    })
}

/// A problem of the whole file (no line to point at), with a hint.
fn whole_file(path: &Path, message: String, hint: &str) -> PlanError {
    PlanError {
        file: path.to_owned(),
        line: None,
        column: None,
        message,
        hint: Some(hint.into()),
        also_at: Box::default(),
    }
}

/// A problem found after parsing, at the line and column of the part it names.
fn located(path: &Path, text: &str, f: Found) -> PlanError {
    let at = locate(text, &f.path);
    PlanError {
        file: path.to_owned(),
        line: at.map(|(l, _)| l),
        column: at.map(|(_, c)| c),
        message: f.message,
        hint: f.hint,
        also_at: Box::default(),
    }
}

/// Refuses YAML nested deeper than the guard allows, before the parser sees it.
fn check_depth(path: &Path, text: &str) -> Result<(), PlanError> {
    fault_server::yaml_guard::check_depth(text, fault_server::yaml_guard::MAX_DEPTH).map_err(
        |deep| PlanError {
            file: path.to_owned(),
            line: Some(deep.line),
            column: Some(deep.column),
            message: format!("nested {} levels deep (at most {})", deep.depth, deep.max),
            hint: Some("a plan nests a few levels; this looks generated or corrupted".into()),

            also_at: Box::default(),
        },
    )
}

/// Resolves a plan from its text; `path` names it in errors and reports.
pub fn parse(path: &Path, text: &str) -> Result<Plan, PlanError> {
    parse_traced(path, text).map_err(|f| f.error)
}

/// [`parse`]'s error, with what recovery needs to look past it.
struct Failure {
    error: PlanError,
    /// The path to the part at fault, for an error found after parsing.
    at: Option<Vec<Seg>>,
}

impl From<PlanError> for Box<Failure> {
    fn from(error: PlanError) -> Box<Failure> {
        Box::new(Failure { error, at: None })
    }
}

/// [`parse`], keeping the path of an error found while resolving.
fn parse_traced(path: &Path, text: &str) -> Result<Plan, Box<Failure>> {
    check_depth(path, text)?;
    let spec: PlanSpec = serde_yaml::from_str(text).map_err(|e| yaml_error_in(path, text, &e))?;
    let proxies = tiers::import(path, text, &spec.tiers)?;
    let (mut plan, sources) = resolve(path, spec, proxies).map_err(|f| {
        let at = f.path.clone();
        Box::new(Failure {
            error: located(path, text, f),
            at: Some(at),
        })
    })?;
    let chains = chain::warnings(&plan, text);
    plan.warnings.extend(chains);
    let inert = chain::inert_conditions(&plan, text);
    plan.warnings.extend(inert);
    // The imported files are part of the experiment: a changed config, a changed digest.
    plan.text_hash = fault_server::seed::fnv1a(
        std::iter::once(text)
            .chain(sources.iter().map(String::as_str))
            .map(str::as_bytes),
    );
    Ok(plan)
}

/// One key of a plan set to another value, as `harness simulate --sweep` runs it.
#[derive(Debug, Clone, Copy)]
pub struct Setting<'a> {
    /// The policy whose key it is (`None`: a key of the plan itself, like `load.rate`).
    pub policy: Option<&'a str>,
    /// The key's path, e.g. `["budget", "ratio"]`.
    pub key: &'a [&'a str],
    /// The value, as YAML (`0.1`, `200ms`, `{ fixed: 100ms }`).
    pub value: &'a str,
}

/// [`parse`] with `settings` applied first, in order: the plan as if its file said so. A
/// missing mapping on the way is made (`budget.ratio` in a policy without a budget); the
/// result is checked as any plan is, and an error names the settings.
pub fn parse_with(path: &Path, text: &str, settings: &[Setting<'_>]) -> Result<Plan, PlanError> {
    use serde_yaml::Value;
    check_depth(path, text)?;
    let mut root: Value = serde_yaml::from_str(text).map_err(|e| yaml_error_in(path, text, &e))?;
    for setting in settings {
        apply(path, &mut root, setting)?;
    }
    let shown: Vec<String> = settings.iter().map(Setting::shown).collect();
    let shown = shown.join(" ");
    let changed = serde_yaml::to_string(&root)
        .map_err(|e| whole_file(path, format!("`{shown}`: {e}"), "report this as a bug"))?;
    // Lines and columns would point into the changed text, not the file.
    let mut plan = parse(path, &changed).map_err(|mut e| {
        e.message = format!("with `{shown}`: {}", e.message);
        // An error in a file the plan imports keeps its place there.
        if e.file == path {
            e.line = None;
            e.column = None;
        }
        e
    })?;
    for warning in &mut plan.warnings {
        warning.at = None;
    }
    Ok(plan)
}

impl Setting<'_> {
    /// As the command line wrote it: `policy.key.path=value`.
    fn shown(&self) -> String {
        format!(
            "{}{}={}",
            self.policy.map(|p| format!("{p}.")).unwrap_or_default(),
            self.key.join("."),
            self.value
        )
    }
}

/// One setting applied to the plan's YAML.
fn apply(
    path: &Path,
    root: &mut serde_yaml::Value,
    setting: &Setting<'_>,
) -> Result<(), PlanError> {
    use serde_yaml::{Mapping, Value};
    let whole = |message: String, hint: &str| whole_file(path, message, hint);
    let shown = setting.shown();
    let value: Value = serde_yaml::from_str(setting.value).map_err(|e| {
        whole(
            format!("`{shown}`: the value is not YAML: {e}"),
            "a number, a duration (`200ms`) or a flow mapping (`{ fixed: 100ms }`)",
        )
    })?;
    let mut at = root;
    if let Some(policy) = setting.policy {
        let found = at
            .get_mut("policies")
            .and_then(Value::as_sequence_mut)
            .and_then(|all| {
                all.iter_mut()
                    .find(|p| p.get("name").and_then(Value::as_str) == Some(policy))
            });
        at = found.ok_or_else(|| {
            whole(
                format!("`{shown}`: the plan has no policy named `{policy}`"),
                "name a policy of the plan, then the key: `jittered-budget.budget.ratio`",
            )
        })?;
    }
    let Some((last, path_to)) = setting.key.split_last() else {
        return Err(whole(
            format!("`{shown}`: no key"),
            "e.g. `naive.max_attempts=2,3,4`",
        ));
    };
    for part in path_to {
        let map = at.as_mapping_mut().ok_or_else(|| {
            whole(
                format!("`{shown}`: `{part}` is inside a value that is not a mapping"),
                "set the whole value instead, e.g. `backoff={ fixed: 100ms }`",
            )
        })?;
        at = map
            .entry(Value::from(*part))
            .or_insert_with(|| Value::Mapping(Mapping::new()));
    }
    at.as_mapping_mut()
        .ok_or_else(|| {
            whole(
                format!("`{shown}`: `{last}` is inside a value that is not a mapping"),
                "set the whole value instead, e.g. `backoff={ fixed: 100ms }`",
            )
        })?
        .insert(Value::from(*last), value);
    Ok(())
}

/// Reads a policy file (a plan's policy on its own: `preset`, `import`, the keys; no name
/// needed), for a relay tier run as its own process.
pub fn load_policy(path: &Path) -> Result<chaos_policy::Policy, PlanError> {
    let text = read_yaml(
        path,
        "policy",
        "check the path",
        "a policy is a few lines of YAML",
    )?;
    check_depth(path, &text)?;
    let spec: spec::PolicySpec = serde_yaml::from_str(&text).map_err(|e| yaml_error(path, &e))?;
    let dir = path.parent().unwrap_or(Path::new(""));
    policy::single(spec, dir).map_err(|f| located(path, &text, f))
}

const DEFAULT_SEED: u64 = 1;
const DEFAULT_DRAIN: Duration = Duration::from_secs(10);

/// The plan, and the text of the files its tiers and policies imported; `proxies` are
/// its proxy tiers, imported already.
fn resolve(
    path: &Path,
    spec: PlanSpec,
    proxies: tiers::Proxies,
) -> Result<(Plan, Vec<String>), Found> {
    if spec.client.is_some() {
        client::refuse_load_keys(&spec)?;
    }
    let (duration, load) = duration_and_load(&spec)?;
    let name = plan_name(path, spec.name)?;
    let target = target::resolve(spec.target, spec.allow_remote)?;
    let seed = spec.seed.unwrap_or(DEFAULT_SEED);
    let script = ScriptSpec {
        seed: Some(seed),
        server: spec.server,
        faults: spec.faults,
    };
    check_script(&script, &target)?;
    let fault_window = fault_window(&script, duration);
    let tiers = tiers::resolve(&spec.tiers, &load, &script, &proxies.tiers)?;
    let dir = path.parent().unwrap_or(Path::new(""));
    let (policies, warnings, sources, client) = match (spec.client, spec.policies) {
        (Some(c), _) => {
            let (named, test, warnings, sources) = client::resolve(c, dir)?;
            (vec![named], warnings, sources, Some(test))
        }
        (None, Some(specs)) => {
            let grpc_calls = load.protocol == Protocol::Grpc;
            let r = policy::resolve(
                specs,
                &tiers,
                (&proxies.tiers, &proxies.meshes),
                dir,
                grpc_calls,
            )?;
            (r.policies, r.warnings, r.sources, None)
        }
        (None, None) => {
            return Err(found(vec![], "the plan has no `policies:`").hint(
                "add `policies: [ { name: mine, max_attempts: 3, backoff: { exponential: { base: 50ms, cap: 2s } }, jitter: full } ]`",
            ));
        }
    };
    let gates = gate::resolve(spec.gates, &policies, &target)?;
    client::check_gates(&gates, client.as_ref(), &target)?;
    let gates = client::implied_gates(gates, client.as_ref());
    let mut warnings = warnings;
    warnings.extend(gate::unjudgeable(&gates, fault_window.is_some()));
    let mut sources = sources;
    sources.splice(0..0, proxies.sources);
    let baseline = spec.baseline.map(|b| b.tolerance).unwrap_or_default();
    check_tolerance(&baseline)?;
    let sampling_ratio = spec.telemetry.and_then(|t| t.sampling_ratio);
    check_sampling_ratio(sampling_ratio)?;
    let plan = Plan {
        name,
        description: spec.description,
        file: path.to_owned(),
        seed,
        duration,
        drain: spec.drain.map_or(DEFAULT_DRAIN, |d| d.get()),
        target,
        load,
        script,
        fault_window,
        policies,
        tiers,
        tier_proxies: proxies.tiers,
        gates,
        baseline,
        sampling_ratio,
        warnings: proxies
            .warnings
            .into_iter()
            .chain(warnings.into_iter().map(Warning::from))
            .collect(),
        network_latency: spec.network.and_then(|n| n.latency).map_or(
            fault_server::Distribution::Fixed(model::DEFAULT_NETWORK_LATENCY),
            Into::into,
        ),
        text_hash: 0,
        client,
    };
    Ok((plan, sources))
}

/// The plan's faults and server model compile, and its target carries them out: one
/// told to keep its own script, or a black box, would leave them unused.
fn check_script(script: &ScriptSpec, target: &Target) -> Result<(), Found> {
    use Seg::Key;
    let compiled = Script::from_spec(script.clone()).map_err(script_error)?;
    if let Target::FaultServer {
        script: Some(spec::ScriptConsent::Keep),
        ..
    } = target
        && !compiled.is_empty()
    {
        return Err(found(
            vec![Key("faults")],
            "`script: keep` runs against the fault-server's own script, and this plan has `faults` or a `server` model of its own, which would be ignored",
        )
        .hint("remove `faults:` and `server:`, or say `script: replace` under `target:` to run the plan's"));
    }
    if !target.has_ledger() && !compiled.is_empty() {
        return Err(found(
            vec![Key("faults")],
            "a black-box target (`fault_server: false`) cannot inject `faults` or a `server` model",
        )
        .hint("remove `faults:` and `server:`, or point `target.url` at a fault-server"));
    }
    Ok(())
}

/// A baseline's tolerance: each figure's a number in its range.
fn check_tolerance(tolerance: &Tolerance) -> Result<(), Found> {
    use Seg::Key;
    if let Some((field, _, max)) = tolerance.out_of_range() {
        return Err(found(
            vec![Key("baseline"), Key("tolerance")],
            format!("`baseline.tolerance.{field}` must be a number from 0 to {max}"),
        )
        .hint("a tolerance says how much worse a figure may get: 0.05, not -0.05"));
    }
    Ok(())
}

/// The share of logical requests traced, a ratio.
fn check_sampling_ratio(ratio: Option<f64>) -> Result<(), Found> {
    use Seg::Key;
    if let Some(ratio) = ratio
        && !(0.0..=1.0).contains(&ratio)
    {
        return Err(found(
            vec![Key("telemetry"), Key("sampling_ratio")],
            format!("`telemetry.sampling_ratio` is {ratio}: it must be between 0 and 1"),
        )
        .hint("0.1 exports one logical request in ten (and every one that breaks an invariant)"));
    }
    Ok(())
}

/// How long the plan runs, and its load: the schedule's (`load:`, `duration:` or the
/// stages), or a client test's, whose program is the load.
fn duration_and_load(spec: &PlanSpec) -> Result<(Duration, model::Load), Found> {
    use Seg::Key;
    let Some(load_spec) = &spec.load else {
        return match (&spec.client, spec.duration) {
            (Some(_), Some(d)) if !d.get().is_zero() => Ok((d.get(), client::load(d.get()))),
            (Some(_), _) => Err(found(
                vec![Key("duration")],
                "a client test needs a `duration`: the program is stopped after it (and `drain`)",
            )
            .hint("add `duration: 30s` at the top level")),
            (None, _) => Err(found(vec![], "the plan has no `load:`").hint(
                "add `load: { rate: 100, requests: [ { name: read, path: / } ] }`; or `client:` to judge a program of your own with `harness client-test`",
            )),
        };
    };
    let (profile, stages_length) = load::profile(load_spec)?;
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
    let protocol = spec
        .target
        .as_ref()
        .and_then(TargetSpec::protocol)
        .unwrap_or_default();
    let load = load::resolve(load_spec, profile, duration, protocol)?;
    Ok((duration, load))
}

/// The longest plan name: a report directory's name, with room for its timestamp.
pub const MAX_NAME_LEN: usize = 64;

/// The plan's name, or the file's stem: it names the report directory.
fn plan_name(path: &Path, name: Option<String>) -> Result<String, Found> {
    let name = match name {
        Some(name) => name,
        None => path
            .file_stem()
            .map_or_else(|| "plan".to_owned(), |s| s.to_string_lossy().into_owned()),
    };
    // The name becomes one path component under reports/: nothing that climbs out of it,
    // hides, or is too long for a file system.
    if name.is_empty()
        || name.len() > MAX_NAME_LEN
        || name.starts_with('.')
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        return Err(found(
            vec![Seg::Key("name")],
            format!("plan name `{name}` cannot name a report directory"),
        )
        .hint(format!(
            "use letters, digits, `-`, `_` and `.` only, not first a `.`, at most {MAX_NAME_LEN} characters"
        )));
    }
    Ok(name)
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
