//! A call chain's worst case: the most attempts its hops can make the leaf receive for one
//! logical request, and a warning when that is past reason.
//!
//! Why a warning and not an error: a plan may mean to show a retry storm (that is what
//! `chain-storm.yaml` is for), and the worst case needs a leaf that fails every attempt.
//! But each hop that retries on its own multiplies the hop below: 5 attempts at the
//! client and at each of 15 tiers is 5^16, about 1.5 × 10^11 attempts at the leaf per
//! request, which no live run carries and on which a simulation spends all its time (or
//! stops, when the work outgrows its requests in flight: `simulate/bound.rs`). Said at
//! `validate`, the plan's author learns it before running anything.

use chaos_policy::RetryCondition;

use super::locate::{Seg, locate};
use super::model::{NamedPolicy, Plan, Warning};

/// Attempts at the leaf per logical request above which a chain's worst case is past
/// reason: 15 times what `chain-storm.yaml` shows (64, the SRE book's 4 × 4 × 4), and
/// more than any retry setting of a real system makes through a few tiers (gRPC caps a
/// client at 5 attempts: 5 × 5 × 5 = 125 through two tiers).
pub const ABSURD_LEAF_AMPLIFICATION: u128 = 1_000;

/// The most attempts `policy` can make the leaf receive for one logical request: every
/// hop's `max_attempts` multiplied (the client's, then each tier's), as when the leaf
/// fails every attempt and nothing else stops a retry.
pub fn worst_leaf_amplification(policy: &NamedPolicy) -> u128 {
    std::iter::once(&policy.policy)
        .map(|p| p.config().max_attempts)
        .chain(
            policy
                .tiers
                .iter()
                .map(super::model::TierPolicy::max_attempts),
        )
        .map(u128::from)
        .fold(1, u128::saturating_mul)
}

/// A warning for each policy of the plan whose chain's worst case passes
/// [`ABSURD_LEAF_AMPLIFICATION`], at the policy's `tiers:` key in `text` (at the policy
/// when it has none: then only its own attempts count).
pub(super) fn warnings(plan: &Plan, text: &str) -> Vec<Warning> {
    use Seg::{Index, Key};
    plan.policies
        .iter()
        .enumerate()
        .filter(|(_, p)| !p.tiers.is_empty())
        .filter_map(|(i, p)| {
            let worst = worst_leaf_amplification(p);
            (worst > ABSURD_LEAF_AMPLIFICATION).then(|| Warning {
                // The deepest part found: the policy's entry when it has no `tiers:`.
                at: locate(text, &[Key("policies"), Index(i), Key("tiers")]),
                message: message(p, worst),
            })
        })
        .collect()
}

/// A warning for each policy whose `retry_on` names 508 Loop Detected, at that entry: no
/// policy retries it (a retry would go round the same loop), so the entry does nothing,
/// and a plan that counts on it should say so rather than pass silently.
pub(super) fn inert_conditions(plan: &Plan, text: &str) -> Vec<Warning> {
    use Seg::{Index, Key};
    let mut warnings = Vec::new();
    for (i, p) in plan.policies.iter().enumerate() {
        let conditions = p.policy.config().retry_on.conditions();
        for (j, c) in conditions.iter().enumerate() {
            if *c != RetryCondition::Status(fault_server::wire::LOOP_DETECTED) {
                continue;
            }
            let at = [Key("policies"), Index(i), Key("retry_on"), Index(j)];
            warnings.push(Warning {
                at: locate(text, &at).or_else(|| locate(text, &at[..3])),
                message: format!(
                    "policy `{}`: `retry_on: 508` never retries: 508 Loop Detected answers a request that came round a loop of hops, and a retry would go round it again, so no policy retries it (remove the entry)",
                    p.name
                ),
            });
        }
    }
    warnings
}

fn message(p: &NamedPolicy, worst: u128) -> String {
    let client = p.policy.config().max_attempts;
    let hops = if p.tiers.iter().all(|t| t.max_attempts() == client) {
        format!(
            "{client} at the client and at each of its {} tiers",
            p.tiers.len()
        )
    } else {
        std::iter::once(format!("client {client}"))
            .chain(
                p.tiers
                    .iter()
                    .map(|t| format!("{} {}", t.tier, t.max_attempts())),
            )
            .collect::<Vec<_>>()
            .join(" × ")
    };
    let worst = if worst == u128::MAX {
        format!("more than {}", u128::MAX)
    } else {
        worst.to_string()
    };
    format!(
        "policy `{}`: its call chain can make the leaf receive {worst} attempts per logical request (every hop's max_attempts multiplied: {hops}), over {ABSURD_LEAF_AMPLIFICATION}: against a failing leaf, more than any run can carry. Retry at the tier next to the failure only, and have the hops above it honour `x-chaos-no-retry` (`honor_no_retry: true`; plans/README.md, \"Call chains\")",
        p.name,
    )
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    fn plan(text: &str) -> crate::plan::Plan {
        crate::plan::parse(Path::new("t.yaml"), text).expect("a plan")
    }

    #[test]
    fn a_508_in_retry_on_is_warned_of_at_its_policy() {
        let text = "name: c\nduration: 1s\nload:\n  rate: 1\n  requests: [ { name: r, path: / } ]\npolicies:\n  - name: a\n    retry_on:\n      - 5xx\n      - 508\n  - name: b\n    retry_on: [5xx]\n";
        let warnings = plan(text).warnings;
        let inert: Vec<_> = warnings
            .iter()
            .filter(|w| w.message.contains("508"))
            .collect();
        assert_eq!(inert.len(), 1, "{warnings:?}");
        assert_eq!(inert[0].at, Some((10, 7)), "at the entry");
        assert!(inert[0].message.starts_with("policy `a`"));
    }

    fn chain(tiers: usize, attempts: u32, own_key: bool) -> String {
        let names: Vec<String> = (1..=tiers).map(|i| format!("t{i}")).collect();
        let same: Vec<String> = names.iter().map(|t| format!("{t}: same")).collect();
        let policy_tiers = if own_key {
            format!("\n    tiers: {{ {} }}", same.join(", "))
        } else {
            String::new()
        };
        format!(
            "name: c\nduration: 1s\ntiers: [{}]\nload:\n  rate: 1\n  requests: [ {{ name: r, path: / }} ]\npolicies:\n  - name: a\n    max_attempts: {attempts}{policy_tiers}\n",
            names.join(", ")
        )
    }

    #[test]
    fn the_worst_case_is_every_hops_attempts_multiplied() {
        let p = plan(&chain(15, 5, true));
        assert_eq!(
            super::worst_leaf_amplification(&p.policies[0]),
            5u128.pow(16)
        );
        assert_eq!(p.warnings.len(), 1);
        let w = &p.warnings[0];
        assert_eq!(w.at, Some((10, 5)), "the policy's `tiers:` key");
        assert!(
            w.message
                .contains("receive 152587890625 attempts per logical request")
                && w.message
                    .contains("5 at the client and at each of its 15 tiers), over 1000"),
            "{}",
            w.message
        );
    }

    #[test]
    fn a_chain_within_reason_or_of_tiers_that_forward_once_is_not_warned_about() {
        // 10 × 10 × 10 = 1,000: not over.
        assert!(plan(&chain(2, 10, true)).warnings.is_empty());
        // Tiers that forward once multiply by 1.
        assert!(plan(&chain(15, 5, false)).warnings.is_empty());
        // 4 × 4 × 4 = 64, as plans/chain-storm.yaml.
        assert!(plan(&chain(2, 4, true)).warnings.is_empty());
        assert!(!plan(&chain(2, 11, true)).warnings.is_empty());
    }

    #[test]
    fn hops_of_different_attempts_are_listed_one_by_one() {
        let text = chain(2, 20, true).replace("t2: same", "t2: { max_attempts: 3 }");
        let p = plan(&text);
        assert!(
            p.warnings[0]
                .message
                .contains("1200 attempts per logical request (every hop's max_attempts multiplied: client 20 × t1 20 × t2 3)"),
            "{}",
            p.warnings[0].message
        );
    }
}
