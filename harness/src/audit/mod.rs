//! `harness audit PLAN`: a stack's worst case from its configs, with no request sent and
//! no server started.
//!
//! Why: the figures a run measures (attempts at the leaf per logical request, the time a
//! chain can take, which hop resends a POST) follow, in a total outage, from the configs
//! alone; said before anything is deployed, they are a review, not an incident. Each
//! figure comes from the cores a run drives ([`walk`]): one request per method of the
//! plan and per failure class its retry conditions tell apart, walked hop by hop. What the
//! walk leaves out (budgets, breakers, nginx's passive ejection: they bind only after
//! many requests) is stated next to it ([`findings`]).
//!
//! A tier kind adds one arm to [`hop_of`] (how the walk drives it) and one to
//! [`findings::hop_info`] (where its settings are written, and its budget).

mod findings;
mod gates;
mod render;
pub mod walk;

use serde::Serialize;

use crate::plan::{NamedPolicy, Plan};
pub use render::text;
use walk::{Class, Draws, Hop};

/// The audit of a plan: one entry per policy.
#[derive(Debug, Clone, Serialize)]
pub struct Audit {
    pub schema: &'static str,
    pub plan: String,
    pub policies: Vec<PolicyAudit>,
}

impl Audit {
    /// Whether the plan's gates judge every policy as a run would have to: a gate holds in
    /// the worst case, or fails where a counterexample expects it to.
    pub fn as_expected(&self) -> bool {
        self.policies.iter().all(|p| p.as_expected)
    }
}

/// One policy's chain in a total outage.
#[derive(Debug, Clone, Serialize)]
pub struct PolicyAudit {
    pub policy: String,
    /// The hops, the client first.
    pub hops: Vec<HopInfo>,
    /// One per method of the plan's requests and failure class.
    pub cases: Vec<Case>,
    /// The case with the most attempts at the leaf.
    pub worst: Case,
    /// With every budget binding: the leaf's attempts at most (each hop's tries limited by
    /// its budget's bound); `None` when no hop has a budget that implies one.
    pub budgeted_leaf: Option<f64>,
    pub findings: Vec<Finding>,
    pub gates: Vec<GateCheck>,
    /// Its gates are as the plan expects: each holds, or (a counterexample) fails as it
    /// expects; `false` makes `audit` exit 1.
    pub as_expected: bool,
}

/// A hop of the chain and where its retry settings are written.
#[derive(Debug, Clone, Serialize)]
pub struct HopInfo {
    /// `client`, or the tier's name.
    pub name: String,
    /// `policy`, `same`, `none`, `own`, `nginx`, `haproxy`.
    pub kind: String,
    /// The config line of its retry settings (`plans/stack.yaml:53`, `stacks/lb.cfg:17`).
    pub at: String,
    /// The settings that decide its tries and time, as written (a default says so).
    pub settings: String,
    /// Its retry budget, breaker or ejection, as a sentence; `None`: nothing but its tries.
    pub budget: Option<String>,
    /// Once its budget binds: attempts per request it receives, at most.
    pub budget_bound: Option<f64>,
    /// The longest it takes for one request when every try times out, backoff at its
    /// maxima, in ms; and how long its caller waits for it (`None`: as long as it takes).
    pub serial_ms: f64,
    pub caller_waits_ms: Option<f64>,
}

/// One request of one method against a leaf failing every attempt one way.
#[derive(Debug, Clone, Serialize)]
pub struct Case {
    pub method: String,
    /// `503`, `close`, `reset`, `timeout`.
    pub failure: String,
    /// Attempts at the leaf for one logical request, at most: every backoff at its least
    /// (the most a deadline lets through), and a hop that can outlast its caller's per-try
    /// timeout taken as timing out while it makes all its tries.
    pub leaf: u64,
    /// Each hop's tries for the first request it received (the client first).
    pub tries: Vec<u32>,
    /// What each hop answered upward (`None`: the client).
    pub answers: Vec<Option<u16>>,
    /// Nothing but the retry rules decided: no timeout ended a hop's work, no deadline
    /// stopped a policy, no backoff draw changed the count, no proxy counted a failed
    /// peer. Then a run of the outage gives this figure exactly (budgets off).
    pub exact: bool,
}

/// Something a reviewer should know, at the line that causes it.
#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    pub at: Option<String>,
    pub message: String,
}

/// A gate of the plan judged on the worst case.
#[derive(Debug, Clone, Serialize)]
pub struct GateCheck {
    pub gate: String,
    /// It holds in the worst case (so in any run of the plan's configs).
    pub holds: bool,
    /// The policy is a counterexample that expects this gate to fail.
    pub expected_to_fail: bool,
    pub why: String,
}

impl GateCheck {
    /// Whether the gate comes out as the plan expects.
    pub fn as_expected(&self) -> bool {
        self.holds != self.expected_to_fail
    }
}

/// The failure classes the audit walks: what retry conditions tell apart.
pub fn classes(plan: &Plan) -> Vec<Class> {
    let mut statuses: Vec<u16> = vec![503];
    for fault in &plan.script.faults {
        statuses.extend(fault_statuses(fault));
    }
    statuses.sort_unstable();
    statuses.dedup();
    statuses
        .into_iter()
        .map(Class::Status)
        .chain([Class::Close, Class::Reset, Class::Timeout])
        .collect()
}

/// The statuses a fault phase answers with, read from its spec as YAML (the spec's own
/// shape is the fault-server's).
fn fault_statuses(fault: &impl Serialize) -> Vec<u16> {
    let mut found = Vec::new();
    if let Ok(value) = serde_yaml::to_value(fault) {
        collect_statuses(&value, &mut found);
    }
    found.retain(|s| (400..600).contains(s));
    found
}

fn collect_statuses(value: &serde_yaml::Value, found: &mut Vec<u16>) {
    match value {
        serde_yaml::Value::Mapping(map) => {
            for (k, v) in map {
                if k.as_str() == Some("status")
                    && let Some(s) = v.as_u64().and_then(|s| u16::try_from(s).ok())
                {
                    found.push(s);
                }
                collect_statuses(v, found);
            }
        }
        serde_yaml::Value::Sequence(items) => {
            for v in items {
                collect_statuses(v, found);
            }
        }
        _ => {}
    }
}

/// How the walk drives each hop of `policy`'s chain, the client first. A new tier kind
/// adds its arm here.
fn hops_of(policy: &NamedPolicy) -> Vec<Hop> {
    // A shared budget is what bounds the chain: its first request's, full, is walked.
    let client = match policy.share_budget {
        Some(_) => Hop::Policy(Box::new(policy.policy.clone())),
        None => Hop::unbudgeted(&policy.policy),
    };
    std::iter::once(client)
        .chain(policy.tiers.iter().map(hop_of))
        .collect()
}

fn hop_of(tier: &crate::plan::TierPolicy) -> Hop {
    match &tier.proxy {
        Some(proxy) => Hop::Proxy(std::sync::Arc::new(proxy.model.clone())),
        None => Hop::unbudgeted(&tier.policy),
    }
}

/// Audits every policy of `plan`, whose text is `text` (for the lines of its policies).
pub fn audit(plan: &Plan, text: &str) -> Audit {
    let classes = classes(plan);
    Audit {
        schema: "chaos-audit/v1",
        plan: plan.name.clone(),
        policies: plan
            .policies
            .iter()
            .enumerate()
            .map(|(i, p)| audit_policy(plan, text, i, p, &classes))
            .collect(),
    }
}

/// The plan's requests, one per method and idempotency key.
fn methods(plan: &Plan) -> Vec<(String, chaos_policy::Request)> {
    let mut out: Vec<(String, chaos_policy::Request)> = Vec::new();
    for kind in &plan.load.requests {
        let name = if kind.idempotency_key {
            format!("{} (keyed)", kind.method)
        } else {
            kind.method.clone()
        };
        if !out.iter().any(|(n, _)| *n == name) {
            out.push((name, kind.policy_request()));
        }
    }
    out
}

fn audit_policy(
    plan: &Plan,
    text: &str,
    index: usize,
    policy: &NamedPolicy,
    classes: &[Class],
) -> PolicyAudit {
    let hops = hops_of(policy);
    let mut cases = Vec::new();
    let mut traces = Vec::new();
    for (method, request) in methods(plan) {
        let verb = method.split(' ').next().unwrap_or("GET").to_owned();
        for class in classes {
            let chain = walk::Chain {
                hops: &hops,
                method: &verb,
                request,
                seed: plan.seed,
                share: policy.share_budget,
                grpc: plan.load.protocol == crate::plan::Protocol::Grpc,
            };
            let most = walk::walk(&chain, *class, Draws::Least);
            let longest = walk::walk(&chain, *class, Draws::Most);
            // A shared budget drains over a run: only its first requests get it all.
            let exact = chain.share.is_none()
                && !most.timed
                && most.leaf == longest.leaf
                && !most.hops.iter().any(|h| h.failed_peers);
            cases.push(Case {
                method: method.clone(),
                failure: class.name(),
                leaf: u64::try_from(most.leaf).unwrap_or(u64::MAX),
                tries: most.hops.iter().map(|h| h.tries).collect(),
                answers: most.hops.iter().map(|h| h.answered).collect(),
                exact,
            });
            traces.push(findings::Trace {
                method: method.clone(),
                request,
                class: *class,
                most,
                longest,
            });
        }
    }
    // The first of the worst, in the plan's order of methods and classes.
    let worst = cases
        .iter()
        .rev()
        .max_by_key(|c| c.leaf)
        .cloned()
        .unwrap_or_else(|| Case {
            method: String::new(),
            failure: String::new(),
            leaf: 1,
            tries: vec![],
            answers: vec![],
            exact: true,
        });
    let infos = findings::hop_infos(plan, text, index, policy, &traces);
    let budgeted_leaf = findings::budgeted_leaf(&infos, &worst, policy.share_budget.is_some());
    let found = findings::findings(policy, &infos, &traces, &worst);
    let gates = gates::checks(plan, policy, &infos, &traces, &worst, budgeted_leaf);
    PolicyAudit {
        policy: policy.name.clone(),
        hops: infos,
        cases,
        worst,
        budgeted_leaf,
        findings: found,
        as_expected: gates::as_expected(policy, &gates),
        gates,
    }
}
