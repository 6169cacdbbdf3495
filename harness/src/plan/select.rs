//! What a run takes of a checked plan: the policies asked for, and each relay tier's own
//! fault phases as a script of its own. The live run and the simulator both take them
//! here.

use fault_server::script::Script;

use super::model::{NamedPolicy, Plan};

/// A policy asked for by name that the plan does not have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no policy of the plan is named {0}")]
pub struct UnknownPolicy(pub String);

/// The policies a run asked for by name, in the order asked, or all of them.
pub fn select<'a>(plan: &'a Plan, names: &[String]) -> Result<Vec<&'a NamedPolicy>, UnknownPolicy> {
    if names.is_empty() {
        return Ok(plan.policies.iter().collect());
    }
    names
        .iter()
        .map(|n| {
            plan.policies.iter().find(|p| &p.name == n).ok_or_else(|| {
                UnknownPolicy(format!(
                    "`{n}` (the plan has: {})",
                    plan.policies
                        .iter()
                        .map(|p| p.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            })
        })
        .collect()
}

/// The fault phases a relay tier injects itself (`tier: NAME`), as a script of their own.
pub fn tier_script(plan: &Plan, tier: &str) -> Option<Script> {
    let faults: Vec<_> = plan
        .script
        .faults
        .iter()
        .filter(|p| p.tier.as_deref() == Some(tier))
        .cloned()
        .map(|mut p| {
            p.tier = None;
            p
        })
        .collect();
    if faults.is_empty() {
        return None;
    }
    // The plan was checked as a whole: its tier phases resolve.
    Script::from_spec(fault_server::ScriptSpec {
        seed: Some(plan.seed),
        server: None,
        faults,
    })
    .ok()
}
