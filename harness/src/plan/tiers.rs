//! A plan's tiers (`tiers:`): their names, and what they can be asked to do. A relay tier
//! is the harness's own relay between the client and the target: it speaks HTTP/1.1, and
//! the faults it injects are those a relay can answer with. A proxy tier is the user's
//! nginx or HAProxy, run from their config: what it does is that config's
//! ([`import`] reads it), so no policy sets it and no fault phase is scripted at it. A
//! mesh tier is a relay tier whose policy a mesh's config sets (`mesh.rs`), in every
//! policy alike.

use std::path::Path;
use std::sync::Arc;

use fault_server::script::ScriptSpec;

use super::error::{Found, found};
use super::import::{self, ConfigError};
use super::locate::{Seg, locate};
use super::mesh::MeshTier;
use super::model::{Load, Warning};
use super::proxy::{ProxyKind, ProxyTier};
use super::spec::{MeshTierSpec, TierEntrySpec};
use super::{PlanError, located};

/// The plan's proxy tiers, aligned with `tiers:` (`None`: a relay tier), what their models
/// approximate, and their configs' text (which the plan's digest covers).
pub(super) struct Proxies {
    pub(super) tiers: Vec<Option<Arc<ProxyTier>>>,
    /// Aligned with `tiers:` too: each mesh tier's config and policy.
    pub(super) meshes: Vec<Option<Arc<MeshTier>>>,
    pub(super) warnings: Vec<Warning>,
    pub(super) sources: Vec<String>,
}

/// Reads and imports each proxy tier's config, relative to the plan at `path` (whose
/// `text` places what is wrong with an entry). An error inside a config is placed in the
/// config, at its line and column.
pub(super) fn import(
    path: &Path,
    text: &str,
    entries: &[TierEntrySpec],
) -> Result<Proxies, PlanError> {
    use Seg::{Index, Key};
    let dir = path.parent().unwrap_or(Path::new(""));
    let mut out = Proxies {
        tiers: Vec::new(),
        meshes: Vec::new(),
        warnings: Vec::new(),
        sources: Vec::new(),
    };
    for (i, entry) in entries.iter().enumerate() {
        let spec = match entry {
            TierEntrySpec::Proxy(spec) => spec,
            TierEntrySpec::Relay(_) => {
                out.tiers.push(None);
                out.meshes.push(None);
                continue;
            }
            TierEntrySpec::Mesh(spec) => {
                let (mesh, warnings, sources) = mesh(path, text, i, spec)?;
                out.tiers.push(None);
                out.meshes.push(Some(Arc::new(mesh)));
                out.warnings.extend(warnings);
                out.sources.extend(sources);
                continue;
            }
        };
        out.meshes.push(None);
        let (kind, config, block, binary) = match (&spec.nginx, &spec.haproxy) {
            (Some(n), _) => (ProxyKind::Nginx, &n.config, &n.location, &n.binary),
            (None, Some(h)) => (ProxyKind::Haproxy, &h.config, &h.backend, &h.binary),
            // The spec's deserialiser refuses a tier without a proxy.
            (None, None) => continue,
        };
        let at = vec![Key("tiers"), Index(i)];
        let config_text = import::read_file(
            dir,
            config,
            "a proxy tier names the proxy's config file, e.g. `stacks/nginx.conf`",
            "a proxy tier's `config:` is relative to the plan file",
        )
        .map_err(|p| {
            let mut f = found(at.clone(), p.message);
            f.hint = p.hint;
            located(path, text, f)
        })?;
        let imported = match kind {
            ProxyKind::Nginx => import::nginx::import(&config_text, block.as_deref()),
            ProxyKind::Haproxy => import::haproxy::import(&config_text, block.as_deref()),
        }
        .map_err(|e| config_error(&dir.join(config), e))?;
        let servers = imported.model.peers.len();
        if servers > fault_server::wire::MAX_PEERS {
            let f = found(
                at.clone(),
                format!(
                    "{} tier `{}` has {servers} servers, more than the {} peers a hop listens as",
                    kind.name(),
                    spec.name,
                    fault_server::wire::MAX_PEERS
                ),
            )
            .hint(
                "test with at most 16 servers: the model and the run spread over them as over more",
            );
            return Err(located(path, text, f));
        }
        let shown = config.display();
        out.warnings
            .extend(imported.model.approximations.iter().map(|a| Warning {
                at: locate(text, &at),
                message: format!(
                    "{} tier `{}`: {shown}:{}: `{}`: {}",
                    kind.name(),
                    spec.name,
                    a.line,
                    a.directive,
                    a.why
                ),
            }));
        out.tiers.push(Some(Arc::new(ProxyTier {
            model: imported.model,
            file: config.clone(),
            text: config_text.clone(),
            block: imported.block,
            binary: binary.clone(),
        })));
        out.sources.push(config_text);
    }
    Ok(out)
}

/// A mesh tier's config read and imported: its policy, what the import approximates (as
/// warnings at the tier's entry) and the files' text.
fn mesh(
    path: &Path,
    text: &str,
    i: usize,
    spec: &MeshTierSpec,
) -> Result<(MeshTier, Vec<Warning>, Vec<String>), PlanError> {
    use Seg::{Index, Key};
    let dir = path.parent().unwrap_or(Path::new(""));
    let at = vec![Key("tiers"), Index(i)];
    let istio = &spec.istio;
    let read = |file: &Path| {
        import::read_file(
            dir,
            file,
            "an Istio tier names the VirtualService (and DestinationRule) the mesh applies, e.g. `stacks/virtualservice.yaml`",
            "an Istio tier's files are relative to the plan file",
        )
        .and_then(|t| {
            fault_server::yaml_guard::check_depth(&t, fault_server::yaml_guard::MAX_DEPTH)
                .map(|()| t)
                .map_err(|deep| import::problem(format!("`{}`: {deep}", file.display())))
        })
        .map_err(|p| {
            let mut f = found(at.clone(), p.message);
            f.hint = p.hint;
            located(path, text, f)
        })
    };
    let vs_text = read(&istio.virtual_service)?;
    let rule_text = istio.destination_rule.as_deref().map(read).transpose()?;
    let imported = import::istio::import(&vs_text, rule_text.as_deref(), istio.route.as_deref())
        .map_err(|e| {
            let file = match e.file {
                import::istio::File::DestinationRule => istio
                    .destination_rule
                    .as_ref()
                    .unwrap_or(&istio.virtual_service),
                import::istio::File::VirtualService => &istio.virtual_service,
            };
            config_error(&dir.join(file), e.error)
        })?;
    let warnings: Vec<Warning> = imported
        .warnings_in(&istio.virtual_service, istio.destination_rule.as_deref())
        .into_iter()
        .map(|w| Warning {
            at: locate(text, &at),
            message: format!("istio tier `{}`: {w}", spec.name),
        })
        .collect();
    let policy = chaos_policy::Policy::new(imported.imported.config).map_err(|e| {
        located(
            path,
            text,
            found(at.clone(), format!("Istio tier `{}`: {e}", spec.name)),
        )
    })?;
    let mesh = MeshTier {
        virtual_service: istio.virtual_service.clone(),
        destination_rule: istio.destination_rule.clone(),
        route: imported.route,
        policy,
        origins: imported.origins,
    };
    Ok((
        mesh,
        warnings,
        [Some(vs_text), rule_text].into_iter().flatten().collect(),
    ))
}

/// An importer's error, placed in the config file.
fn config_error(file: &Path, e: ConfigError) -> PlanError {
    PlanError {
        file: file.to_owned(),
        line: Some(e.line),
        column: Some(e.column),
        message: e.message,
        hint: e.hint,
        also_at: Box::default(),
    }
}

/// The plan's tiers' names, checked against its load (the protocol they carry) and its
/// script (the faults scripted at a tier); `proxies` says which are proxy tiers.
pub(super) fn resolve(
    entries: &[TierEntrySpec],
    load: &Load,
    script: &ScriptSpec,
    proxies: &[Option<Arc<ProxyTier>>],
) -> Result<Vec<String>, Found> {
    let tiers = self::names(entries.iter().map(|e| e.name().to_owned()).collect())?;
    if !tiers.is_empty() && load.protocol.is_http2() {
        return Err(found(
            vec![Seg::Key("tiers")],
            format!(
                "relay and proxy tiers speak HTTP/1.1, and the target's protocol is {}",
                load.protocol.name()
            ),
        )
        .hint("remove `tiers:`, or `protocol:` under `target:`"));
    }
    tier_faults(script, &tiers, proxies)?;
    Ok(tiers)
}

/// The fault phases a relay tier injects (`tier:`) name a tier of the plan and answer
/// with a status or a delay: the other kinds act on a TCP connection, which only the
/// fault-server's own accept loop controls.
fn tier_faults(
    script: &ScriptSpec,
    tiers: &[String],
    proxies: &[Option<Arc<ProxyTier>>],
) -> Result<(), Found> {
    use Seg::{Index, Key};
    use fault_server::FaultKind;
    for (i, phase) in script.faults.iter().enumerate() {
        let Some(tier) = &phase.tier else {
            continue;
        };
        let proxy = tiers
            .iter()
            .position(|t| t == tier)
            .and_then(|at| proxies.get(at).cloned().flatten());
        if let Some(proxy) = proxy {
            return Err(found(
                vec![Key("faults"), Index(i), Key("tier")],
                format!(
                    "`{tier}` is an {} tier: it runs the proxy itself, which injects no faults",
                    proxy.model.kind.name()
                ),
            )
            .hint("script the fault at the fault-server (no `tier:`) or at a relay tier; the proxy then meets it as it would in production"));
        }
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
