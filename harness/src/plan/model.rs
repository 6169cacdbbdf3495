//! The resolved plan: the types the engine, the gates and the report read.
//!
//! Nothing here parses or validates; [`super::parse`] builds these from the DTOs in
//! [`super::spec`] once every check has passed.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use chaos_policy::{Action, Client, Method, Policy, Preset, Request, Session, Share, Start};
use fault_server::script::ScriptSpec;

/// The one-way latency of a hop when a plan does not say: about half of what an attempt
/// answered at once takes on loopback through the live engine's HTTP stack.
pub const DEFAULT_NETWORK_LATENCY: Duration = Duration::from_micros(100);

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
    /// Tiers between the load generator and the target, outermost first: their names.
    pub tiers: Vec<String>,
    /// Aligned with `tiers`: each proxy tier's config and model (`None`: a relay tier).
    pub tier_proxies: Vec<Option<Arc<super::proxy::ProxyTier>>>,
    pub gates: Vec<Gate>,
    /// How much worse than a baseline each figure may get.
    pub baseline: super::Tolerance,
    /// `telemetry.sampling_ratio`: the share of logical requests traced, when telemetry
    /// is on and `OTEL_TRACES_SAMPLER_ARG` does not say.
    pub sampling_ratio: Option<f64>,
    /// What will run but deserves a second look: what the harness cannot model (fields of
    /// imported configs), a call chain whose retries multiply past reason.
    pub warnings: Vec<Warning>,
    /// The one-way latency of each hop in a simulated run (`network.latency`).
    pub network_latency: fault_server::Distribution,
    /// FNV-1a of the plan's text and of the files it imports: with the seed, what a
    /// baseline's digest is made of.
    pub text_hash: u64,
    /// A client test (`client:`): the program under test is the load and the policy; its
    /// one entry in `policies` carries its name and the policy it is expected to follow.
    pub client: Option<ClientTest>,
}

/// What `harness client-test` needs beyond the plan's faults and gates.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientTest {
    /// The report's name for the program (its entry in `policies`).
    pub name: String,
    /// The plan says which policy the program should follow (`client.expect`); without
    /// it, its entry in `policies` is a placeholder nothing judges.
    pub expected: bool,
    /// How the fault-server groups and judges the program's attempts.
    pub judging: fault_server::Judging,
}

/// A plan's warning, and where the plan says what it is about when one place does.
#[derive(Debug, Clone, PartialEq)]
pub struct Warning {
    /// The line and column (1-based) in the plan's file.
    pub at: Option<(usize, usize)>,
    pub message: String,
}

impl From<String> for Warning {
    fn from(message: String) -> Warning {
        Warning { at: None, message }
    }
}

impl std::fmt::Display for Warning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl PartialEq<&str> for Warning {
    fn eq(&self, other: &&str) -> bool {
        self.message == *other
    }
}

impl Plan {
    /// The plan with another seed (`--seed N`): arrivals, jitter and the script's draws.
    pub fn reseed(&mut self, seed: u64) {
        self.seed = seed;
        self.script.seed = Some(seed);
    }

    /// Names this plan's text and seed: a baseline from another digest came from another
    /// experiment.
    pub fn digest(&self) -> String {
        format!(
            "{:016x}",
            fault_server::seed::stream::plan_digest(self.text_hash, self.seed)
        )
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Target {
    /// A fault-server started in-process on 127.0.0.1:0.
    Embedded,
    /// A running fault-server, scripted over its control API.
    FaultServer {
        url: String,
        token: Option<String>,
        /// What the plan says of a script the server already has; `None`: never replace
        /// one silently.
        script: Option<super::spec::ScriptConsent>,
    },
    /// Any HTTP service: no faults, no ledger, client-side accounting only.
    BlackBox { url: String },
    /// A fault-server started in-process on 127.0.0.1:0 in front of the user's service:
    /// what the script does not fault is forwarded to `upstream`.
    Proxy { upstream: fault_server::Upstream },
}

impl Target {
    pub fn has_ledger(&self) -> bool {
        !matches!(self, Target::BlackBox { .. })
    }

    /// The URL of a target that runs elsewhere.
    pub fn url(&self) -> Option<&str> {
        match self {
            Target::FaultServer { url, .. } | Target::BlackBox { url } => Some(url),
            Target::Embedded | Target::Proxy { .. } => None,
        }
    }

    /// Whether the fault-server runs in this process (and on its runtime).
    pub fn is_embedded(&self) -> bool {
        matches!(self, Target::Embedded | Target::Proxy { .. })
    }

    /// The service behind the embedded fault-server, if there is one.
    pub fn upstream(&self) -> Option<&fault_server::Upstream> {
        match self {
            Target::Proxy { upstream } => Some(upstream),
            _ => None,
        }
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

impl Segment {
    /// Expected logical requests over the segment (the area under its rate).
    pub fn expected_arrivals(&self) -> f64 {
        (self.from + self.to) / 2.0 * self.length.as_secs_f64()
    }
}

#[derive(Debug, Clone)]
pub struct Load {
    pub arrivals: Arrivals,
    pub profile: Vec<Segment>,
    pub max_in_flight: u32,
    /// The client's connections to the target, at most (default 1024; `None`: the plan
    /// said `per_attempt`, as many as attempts in flight). An attempt beyond them waits
    /// for one, first come first served, and its timeout covers the wait.
    /// With HTTP/2 (`target.protocol: http2` or `grpc`), the number of connections every
    /// attempt is multiplexed over (`None`: one, as a gRPC channel keeps).
    pub max_connections: Option<u32>,
    /// How attempts go on the wire (`target.protocol`).
    pub protocol: Protocol,
    pub requests: Vec<RequestKind>,
}

impl Load {
    /// The cap attempts wait under for a connection of their own: HTTP/1 only, since
    /// over HTTP/2 `max_connections` counts the connections attempts share.
    pub fn connection_cap(&self) -> Option<u32> {
        match self.protocol.is_http2() {
            true => None,
            false => self.max_connections,
        }
    }

    /// The HTTP/2 connections attempts are multiplexed over (`None` over HTTP/1).
    pub fn multiplexed_over(&self) -> Option<u32> {
        self.protocol
            .is_http2()
            .then(|| self.max_connections.unwrap_or(1))
    }

    /// Expected logical requests over the profile (the integral of the rate).
    pub fn expected_arrivals(&self) -> f64 {
        self.profile.iter().map(Segment::expected_arrivals).sum()
    }
}

/// One entry of the request mix.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestKind {
    pub name: String,
    /// A gRPC call's service and method (`protocol: grpc`): its path is
    /// `/service/method`, its method `POST`, its body one length-prefixed message.
    pub rpc: Option<Rpc>,
    /// The method as sent (upper case).
    pub method: String,
    /// The path as written: each `{n}` becomes one value of `n` per logical request.
    pub path: String,
    /// What `{n}` becomes.
    pub n: Numbers,
    pub weight: f64,
    pub body: Option<String>,
    pub headers: BTreeMap<String, String>,
    pub idempotency_key: bool,
}

pub use super::spec::Protocol;

/// A gRPC unary call's names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rpc {
    /// Package-qualified: `chaos.Payments`.
    pub service: String,
    pub method: String,
}

/// What `{n}` in a request's path becomes: a number from a range, or one of a list of
/// values a real service answers (ids that exist), drawn uniformly per logical request.
#[derive(Debug, Clone, PartialEq)]
pub enum Numbers {
    /// A whole number from `min` to `max`, both included.
    Range { min: u64, max: u64 },
    /// One of these, as written.
    List(Vec<String>),
}

/// Without `n:`, `{n}` is a number from 0 to 999,999.
impl Default for Numbers {
    fn default() -> Numbers {
        Numbers::Range {
            min: 0,
            max: 999_999,
        }
    }
}

impl Numbers {
    /// The value for `draw`, a uniform 64-bit number from the schedule's seeded RNG: the
    /// one rule the live engine, the relay and the simulator share.
    pub fn write(&self, out: &mut String, draw: u64) {
        use std::fmt::Write;
        match self {
            Numbers::Range { min, max } => {
                // The span of 0..=u64::MAX does not fit: every draw is in it.
                let n = match (max - min).checked_add(1) {
                    Some(span) => min + draw % span,
                    None => draw,
                };
                let _ = write!(out, "{n}");
            }
            Numbers::List(values) => {
                let i = usize::try_from(draw % values.len() as u64).unwrap_or(0);
                out.push_str(&values[i]);
            }
        }
    }

    /// The longest value, for the path-length check.
    pub fn longest(&self) -> String {
        match self {
            Numbers::Range { max, .. } => max.to_string(),
            Numbers::List(values) => values
                .iter()
                .max_by_key(|v| v.len())
                .cloned()
                .unwrap_or_default(),
        }
    }
}

/// `template` with every `{n}` replaced by the value for `draw` (the same one each time),
/// into `out`.
pub fn fill_path(template: &str, n: &Numbers, draw: u64, out: &mut String) {
    out.clear();
    let mut parts = template.split("{n}");
    out.push_str(parts.next().unwrap_or_default());
    let mut value = String::new();
    for part in parts {
        if value.is_empty() {
            n.write(&mut value, draw);
        }
        out.push_str(&value);
        out.push_str(part);
    }
}

impl RequestKind {
    /// The path of the logical request whose draw is `draw`.
    pub fn path_for(&self, draw: u64) -> String {
        let mut out = String::with_capacity(self.path.len() + 8);
        fill_path(&self.path, &self.n, draw, &mut out);
        out
    }

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
    /// The plan's `import:` as it wrote it (`{ envoy_route: production/route.yaml }`): where
    /// the policy started from, for `harness validate --explain`.
    pub import: Option<String>,
    pub policy: Policy,
    /// The policy of each relay tier in this variant, in the plan's `tiers` order.
    pub tiers: Vec<TierPolicy>,
    /// A counterexample (`expect: fail`): the gates it must fail.
    pub expect: Option<Expect>,
    /// `share_budget: true`: the client and every relay tier draw retries from the
    /// client's one budget; the most retries a request takes out of it for its chain.
    pub share_budget: Option<u32>,
    /// An imported policy's fields and where each came from (an Istio import's: a line
    /// of a manifest, a default, or the plan's key over it); empty otherwise.
    pub origins: Vec<(&'static str, String)>,
}

/// Starts a logical request at the load generator's client, the one rule the live engine
/// and the simulator share: a variant that shares its budget with its tiers takes up to
/// `share` retries out of the client's budget for the request's whole chain (carried down
/// as `x-chaos-retry-allowance`, what is not spent going back in at its end).
pub fn start_request(
    client: &mut Client,
    share: Option<u32>,
    request: Request,
    now: Duration,
) -> (Session, Action) {
    let share = match share {
        Some(max) => Share::Reserve(max),
        None => Share::None,
    };
    let start = Start {
        deadline: None,
        share,
    };
    client.start(request, now, start)
}

impl NamedPolicy {
    /// How many peers hop `hop` of the chain listens as (0: the first tier; the number of
    /// tiers: the leaf): the servers of the proxy tier above it, or one. Live, each is a
    /// listener of its own; simulated, a number an attempt arrives at.
    pub fn peers_of(&self, hop: usize) -> u32 {
        hop.checked_sub(1)
            .and_then(|above| self.tiers.get(above))
            .and_then(|t| t.proxy.as_ref())
            .map_or(1, |p| {
                u32::try_from(p.model.peers.len()).unwrap_or(u32::MAX)
            })
    }
}

/// A counterexample's expectation: the plan passes only if its gates catch it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expect {
    /// The gates it must each fail, as the plan names them; empty: at least one gate.
    pub fail: Vec<String>,
}

impl Expect {
    /// Whether `gate` (a gate's whole name, `peak_amplification <= 2`) is one that
    /// `name` (a check's, a metric's, or that whole name) picks.
    pub fn names(name: &str, gate: &str) -> bool {
        gate == name
            || gate
                .strip_prefix(name)
                .is_some_and(|rest| rest.starts_with(' '))
    }

    /// Whether the counterexample expects `gate` to fail.
    pub fn covers(&self, gate: &str) -> bool {
        self.fail.is_empty() || self.fail.iter().any(|n| Expect::names(n, gate))
    }
}

/// What one tier does with the requests of a policy variant.
#[derive(Debug, Clone)]
pub struct TierPolicy {
    pub tier: String,
    /// `same`, `none` or `own`: how the plan set it; `proxy` for a proxy tier, `mesh` for
    /// a mesh tier.
    pub kind: TierKind,
    /// The relay's policy; a proxy tier's is [`super::forward_once`] (its config, in
    /// `proxy`, decides its retries).
    pub policy: Policy,
    /// A proxy tier's config and model, the same in every variant.
    pub proxy: Option<Arc<super::proxy::ProxyTier>>,
    /// A mesh tier's config, whose policy `policy` is, the same in every variant.
    pub mesh: Option<Arc<super::mesh::MeshTier>>,
}

impl TierPolicy {
    /// The most attempts the tier makes for one request it receives.
    pub fn max_attempts(&self) -> u32 {
        match &self.proxy {
            Some(proxy) => proxy.model.tries,
            None => self.policy.config().max_attempts,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TierKind {
    /// The variant's own policy.
    Same,
    /// Forward once, never retry.
    None,
    /// A policy of its own.
    Own,
    /// A proxy tier: its config decides (`TierPolicy::proxy`).
    Proxy,
    /// A mesh tier: the relay runs the policy its mesh config sets (`TierPolicy::mesh`).
    Mesh,
}

impl TierKind {
    pub fn name(self) -> &'static str {
        match self {
            TierKind::Same => "same",
            TierKind::None => "none",
            TierKind::Own => "own",
            TierKind::Proxy => "proxy",
            TierKind::Mesh => "mesh",
        }
    }
}

/// An invariant every policy (or the named ones) must hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    AmplificationWithinBudget,
    NoRetryOfPermanent,
    NoRetryOfNonIdempotent,
    NoDuplicateSideEffects,
    /// The client's and the fault-server's counts of attempts agree exactly: proof that no
    /// layer retried behind the policy's back. Behind relay tiers, at every hop.
    ClientServerAgree,
    /// At most one hop of a call chain (the client or a relay tier) sent retries.
    RetriesAtOneTier,
    /// A client test: every retry after an answer with `Retry-After` waited that long.
    RetryAfterHonoured,
    /// A client test: the waits before each retry fall in the expected policy's range.
    BackoffWithinPreset,
    /// A client test: no side effect repeated under a fresh `Idempotency-Key` after a
    /// failed answer. On wherever `no_duplicate_side_effects` is, in a client test.
    NoRetryWithFreshKey,
}

impl Check {
    pub const ALL: [Check; 9] = [
        Check::AmplificationWithinBudget,
        Check::NoRetryOfPermanent,
        Check::NoRetryOfNonIdempotent,
        Check::NoDuplicateSideEffects,
        Check::ClientServerAgree,
        Check::RetriesAtOneTier,
        Check::RetryAfterHonoured,
        Check::BackoffWithinPreset,
        Check::NoRetryWithFreshKey,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Check::AmplificationWithinBudget => "amplification_within_budget",
            Check::NoRetryOfPermanent => "no_retry_of_permanent",
            Check::NoRetryOfNonIdempotent => "no_retry_of_non_idempotent",
            Check::NoDuplicateSideEffects => "no_duplicate_side_effects",
            Check::ClientServerAgree => "client_server_agree",
            Check::RetriesAtOneTier => "retries_at_one_tier",
            Check::RetryAfterHonoured => "retry_after_honoured",
            Check::BackoffWithinPreset => "backoff_within_preset",
            Check::NoRetryWithFreshKey => "no_retry_with_fresh_key",
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
    /// `dropped / offered`.
    DroppedRatio,
    Retries,
    /// The busiest 50 ms of the fault window over its mean 50 ms, in retries.
    Synchrony,
    /// The leaf's attempts per logical request of the client (behind relay tiers, what
    /// every tier's retries multiplied to).
    LeafAmplification,
}

impl Metric {
    /// The values the metric can take: a gate whose limit lies outside can never pass.
    pub fn range(self) -> (f64, f64) {
        match self {
            Metric::SuccessRate | Metric::DroppedRatio => (0.0, 1.0),
            // The busiest 50 ms over the mean 50 ms is at least the mean.
            Metric::Synchrony => (1.0, f64::INFINITY),
            Metric::P50Ms
            | Metric::P90Ms
            | Metric::P99Ms
            | Metric::P999Ms
            | Metric::Amplification
            | Metric::ServerAmplification
            | Metric::PeakAmplification
            | Metric::RecoveryS
            | Metric::Dropped
            | Metric::Retries
            | Metric::LeafAmplification => (0.0, f64::INFINITY),
        }
    }

    pub const ALL: [Metric; 14] = [
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
        Metric::DroppedRatio,
        Metric::Retries,
        Metric::Synchrony,
        Metric::LeafAmplification,
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
            Metric::DroppedRatio => "dropped_ratio",
            Metric::Retries => "retries",
            Metric::Synchrony => "synchrony",
            Metric::LeafAmplification => "leaf_amplification",
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

#[cfg(test)]
mod tests {
    use super::{Numbers, fill_path};

    #[test]
    fn n_maps_a_draw_into_its_range_or_list() {
        let mut out = String::new();
        // The default is the number the schedule drew before `n:` existed.
        for draw in [0, 999_999, 1_000_000, u64::MAX] {
            out.clear();
            Numbers::default().write(&mut out, draw);
            assert_eq!(out, (draw % 1_000_000).to_string());
        }
        let every = Numbers::Range {
            min: 0,
            max: u64::MAX,
        };
        out.clear();
        every.write(&mut out, u64::MAX);
        assert_eq!(out, u64::MAX.to_string());
        let list = Numbers::List(vec!["a".into(), "bb".into(), "c".into()]);
        fill_path("/x/{n}/y/{n}", &list, 4, &mut out);
        assert_eq!(
            out, "/x/bb/y/bb",
            "every `{{n}}` of a path is the same value"
        );
        fill_path("/plain", &list, 4, &mut out);
        assert_eq!(out, "/plain");
        assert_eq!(list.longest(), "bb");
        assert_eq!(Numbers::Range { min: 3, max: 12 }.longest(), "12");
    }
}
