//! A client test's plan (`client:`): the program under test takes the place of `load:` and
//! `policies:`, so what a plan must otherwise say is made here from what it says instead.

use std::path::Path;
use std::time::Duration;

use super::error::{Found, found};
use super::locate::Seg;
use super::model::{
    Arrivals, Check, ClientTest, Gate, GateKind, Load, NamedPolicy, Segment, Target,
};
use super::policy;
use super::spec::{ClientSpec, PlanSpec, PolicySpec};

/// The name of a program under test when the plan gives none.
const DEFAULT_NAME: &str = "client";

/// What the plan must not say next to `client:`: the keys of a load test.
pub(super) fn refuse_load_keys(spec: &PlanSpec) -> Result<(), Found> {
    let clash = [
        ("load", spec.load.is_some()),
        ("policies", spec.policies.is_some()),
        ("tiers", !spec.tiers.is_empty()),
        ("target", spec.target.is_some()),
    ];
    match clash.iter().find(|(_, present)| *present) {
        Some((key, _)) => Err(found(
            vec![Seg::Key(key)],
            format!("a client test (`client:`) has no `{key}`: the program under test is the load and the policy, against a fault-server `harness client-test` starts on 127.0.0.1"),
        )
        .hint("remove it, or remove `client:` to run the plan with `harness chaos`")),
        None => Ok(()),
    }
}

/// The offered load of a client test: nothing the harness schedules.
pub(super) fn load(duration: Duration) -> Load {
    Load {
        arrivals: Arrivals::Uniform,
        profile: vec![Segment {
            from: 0.0,
            to: 0.0,
            length: duration,
        }],
        max_in_flight: 1,
        max_connections: None,
        protocol: Default::default(),
        requests: Vec::new(),
    }
}

/// The program's entry in `policies` (the expected policy, or a placeholder) and the
/// test's settings.
pub(super) fn resolve(
    spec: ClientSpec,
    dir: &Path,
) -> Result<(NamedPolicy, ClientTest, Vec<String>, Vec<String>), Found> {
    let name = spec.name.unwrap_or_else(|| DEFAULT_NAME.to_owned());
    let expected = spec.expect.is_some();
    if spec.expect.as_ref().is_some_and(|p| p.expect.is_some()) {
        return Err(found(
            vec![Seg::Key("client"), Seg::Key("expect"), Seg::Key("expect")],
            "a client test's expected policy has no `expect`",
        )
        .hint("the gates judge the program under test; `expect: fail` marks a plan's own policy as a counterexample"));
    }
    let policy = PolicySpec {
        name: name.clone(),
        ..spec.expect.unwrap_or_default()
    };
    let mut resolved =
        policy::resolve(vec![policy], &[], (&[], &[]), dir, false).map_err(|mut f| {
            // Its errors name `policies[0]`; the plan wrote `client.expect`.
            f.path
                .splice(0..2, [Seg::Key("client"), Seg::Key("expect")]);
            f
        })?;
    let named = resolved.policies.remove(0);
    let defaults = fault_server::Judging::default();
    let judging = fault_server::Judging {
        header: spec.group_by.map(|h| h.as_str().to_ascii_lowercase()),
        window: spec.window.map_or(defaults.window, |w| w.get()),
        tolerance: spec
            .retry_after_tolerance
            .map_or(defaults.tolerance, |t| t.get()),
    };
    let test = ClientTest {
        name,
        expected,
        judging,
    };
    Ok((named, test, resolved.warnings, resolved.sources))
}

/// A client test's gates with `no_retry_with_fresh_key` beside each
/// `no_duplicate_side_effects` the plan did not already pair with it: a key minted per
/// attempt is the commonest way a program duplicates a side effect, and a plan that
/// gates duplicates means that too.
pub(super) fn implied_gates(mut gates: Vec<Gate>, client: Option<&ClientTest>) -> Vec<Gate> {
    if client.is_none()
        || gates
            .iter()
            .any(|g| g.kind == GateKind::Check(Check::NoRetryWithFreshKey))
    {
        return gates;
    }
    if let Some(at) = gates
        .iter()
        .position(|g| g.kind == GateKind::Check(Check::NoDuplicateSideEffects))
    {
        let implied = Gate {
            kind: GateKind::Check(Check::NoRetryWithFreshKey),
            policies: gates[at].policies.clone(),
        };
        gates.insert(at + 1, implied);
    }
    gates
}

/// The gates that judge only a client test, in a plan without `client:`; and in one, the
/// gates it cannot judge.
pub(super) fn check_gates(
    gates: &[Gate],
    client: Option<&ClientTest>,
    target: &Target,
) -> Result<(), Found> {
    use Seg::{Index, Key};
    for (i, gate) in gates.iter().enumerate() {
        let GateKind::Check(check) = gate.kind else {
            continue;
        };
        let at = vec![Key("gates"), Index(i)];
        match (check, client) {
            (
                Check::RetryAfterHonoured | Check::BackoffWithinPreset | Check::NoRetryWithFreshKey,
                None,
            ) => {
                return Err(found(
                    at,
                    format!("gate `{}` judges a program under `harness client-test`, and this plan has no `client:` section", check.name()),
                )
                .hint("the harness's own policies honour Retry-After and back off as their plan says; remove the gate"));
            }
            (Check::BackoffWithinPreset, Some(c)) if !c.expected => {
                return Err(found(
                    at,
                    "gate `backoff_within_preset` needs the policy the program should follow",
                )
                .hint("add `expect: { preset: aws-standard }` (or any preset, with fields over it) under `client:`"));
            }
            (Check::ClientServerAgree, Some(_)) => {
                return Err(found(
                    at,
                    "gate `client_server_agree` compares the harness's own counts with the ledger's, and in a client test the ledger's are the only ones",
                )
                .hint("remove it: the report's attempts are the ledger's by construction"));
            }
            _ => {}
        }
    }
    debug_assert!(client.is_none() || *target == Target::Embedded);
    Ok(())
}
