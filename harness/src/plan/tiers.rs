//! A plan's relay tiers (`tiers:`): their names, and what they can be asked to do. A tier
//! is a relay of the harness's own between the client and the target: it speaks
//! HTTP/1.1, and the faults it injects are those a relay can answer with.

use fault_server::script::ScriptSpec;

use super::error::{Found, found};
use super::locate::Seg;
use super::model::Load;

/// The plan's relay tiers, checked against its load (the protocol they relay) and its
/// script (the faults scripted at a tier).
pub(super) fn resolve(
    names: Vec<String>,
    load: &Load,
    script: &ScriptSpec,
) -> Result<Vec<String>, Found> {
    let tiers = self::names(names)?;
    if !tiers.is_empty() && load.protocol.is_http2() {
        return Err(found(
            vec![Seg::Key("tiers")],
            format!(
                "relay tiers speak HTTP/1.1, and the target's protocol is {}",
                load.protocol.name()
            ),
        )
        .hint("remove `tiers:`, or `protocol:` under `target:`"));
    }
    tier_faults(script, &tiers)?;
    Ok(tiers)
}

/// The fault phases a relay tier injects (`tier:`) name a tier of the plan and answer
/// with a status or a delay: the other kinds act on a TCP connection, which only the
/// fault-server's own accept loop controls.
fn tier_faults(script: &ScriptSpec, tiers: &[String]) -> Result<(), Found> {
    use Seg::{Index, Key};
    use fault_server::FaultKind;
    for (i, phase) in script.faults.iter().enumerate() {
        let Some(tier) = &phase.tier else {
            continue;
        };
        if !tiers.contains(tier) {
            return Err(found(
                vec![Key("faults"), Index(i), Key("tier")],
                format!("fault phase `tier: {tier}` names no tier of the plan"),
            )
            .hint(if tiers.is_empty() {
                "list the relay tiers at the top level: `tiers: [api, backend]`".to_owned()
            } else {
                format!("the plan's tiers: {}", tiers.join(", "))
            }));
        }
        for entry in &phase.respond.0 {
            let kind = entry.fault.unwrap_or(FaultKind::Status);
            if !matches!(kind, FaultKind::Status | FaultKind::Delay)
                || entry.processed == Some(true)
            {
                return Err(found(
                    vec![Key("faults"), Index(i), Key("respond")],
                    format!("relay tier `{tier}` cannot inject `{}`{}", kind.name(), if entry.processed == Some(true) { " with `processed: true`" } else { "" }),
                )
                .hint("a relay tier answers with a status or waits (`delay`); resets, closes, truncations and hangs act on a connection: script them at the fault-server (no `tier:`)"));
            }
        }
    }
    Ok(())
}

/// The most relay tiers a plan may have: the wire contract's [`wire::MAX_TIERS`], past
/// which a tier takes a request for one going round a loop and answers 508.
///
/// [`wire::MAX_TIERS`]: fault_server::wire::MAX_TIERS
pub const MAX_TIERS: usize = fault_server::wire::MAX_TIERS;

/// The plan's relay tiers: names that can go into a report and a header, each once, at
/// most [`MAX_TIERS`].
fn names(names: Vec<String>) -> Result<Vec<String>, Found> {
    use Seg::{Index, Key};
    if names.len() > MAX_TIERS {
        return Err(found(
            vec![Key("tiers"), Index(MAX_TIERS)],
            format!(
                "the plan has {} relay tiers, more than {MAX_TIERS}",
                names.len()
            ),
        )
        .hint(format!(
            "a call chain has at most {MAX_TIERS} tiers: a request that has passed more is taken for one going round a loop (508)"
        )));
    }
    for (i, name) in names.iter().enumerate() {
        let ok = !name.is_empty()
            && name.len() <= 32
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_'));
        if !ok {
            return Err(found(
                vec![Key("tiers"), Index(i)],
                format!("tier name `{name}` is not a short name"),
            )
            .hint("use letters, digits, `-` and `_` (at most 32): `tiers: [api, backend]`"));
        }
        if names[..i].contains(name) {
            return Err(found(
                vec![Key("tiers"), Index(i)],
                format!("two tiers are named `{name}`"),
            )
            .hint("each relay tier needs its own name"));
        }
        if name == "client" || name == "leaf" {
            return Err(found(vec![Key("tiers"), Index(i)], format!("`{name}` names a hop of every chain already"))
                .hint("the load generator is `client` and the target is `leaf` in the report: name the relay tiers something else"));
        }
    }
    Ok(names)
}
