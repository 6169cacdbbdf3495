//! Policies imported from production configuration instead of written out: a gRPC service
//! config (`grpc.rs`), an Envoy route and cluster (`envoy.rs`), or an Istio
//! VirtualService and DestinationRule (`istio.rs`).
//!
//! Why: the policy worth testing before a rollout is the one the service runs, and the
//! config that says so already exists. Each importer is a pure function from the file's
//! text to a [`PolicyConfig`] and the warnings that name what the harness cannot model;
//! [`load`] reads the files (relative to the plan, bounded like a plan) and hands their
//! text over; `plan/policy.rs` places its errors at the plan's `import:` key. A field an
//! importer does not model is named in a warning, never dropped silently.

pub(crate) mod envoy;
pub(crate) mod grpc;
pub(crate) mod haproxy;
mod haproxy_syntax;
pub(crate) mod istio;
mod kube;
pub(crate) mod nginx;
mod nginx_syntax;
pub(crate) mod rewrite;
mod route_config;

use std::path::{Path, PathBuf};
use std::time::Duration;

use chaos_policy::{PolicyConfig, RetryCondition};

use super::spec::ImportSpec;

/// A policy read from a production config, and what of it the harness cannot model.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Imported {
    pub(crate) config: PolicyConfig,
    pub(crate) warnings: Vec<String>,
}

/// Why a config cannot be imported, and what to do about it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Problem {
    pub(crate) message: String,
    pub(crate) hint: Option<String>,
}

pub(crate) fn problem(message: impl Into<String>) -> Problem {
    Problem {
        message: message.into(),
        hint: None,
    }
}

impl Problem {
    pub(crate) fn hint(mut self, hint: impl Into<String>) -> Problem {
        self.hint = Some(hint.into());
        self
    }
}

/// An error in a proxy's config file, at its line and column (1-based): what is wrong, and
/// what to do about it. The plan places it in the config file, not in the plan.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ConfigError {
    pub(crate) line: usize,
    pub(crate) column: usize,
    pub(crate) message: String,
    pub(crate) hint: Option<String>,
}

impl ConfigError {
    pub(crate) fn at(line: usize, column: usize, message: impl Into<String>) -> ConfigError {
        ConfigError {
            line,
            column,
            message: message.into(),
            hint: None,
        }
    }

    pub(crate) fn hint(mut self, hint: impl Into<String>) -> ConfigError {
        self.hint = Some(hint.into());
        self
    }
}

/// A proxy tier's model as its config makes it, and the block it was read from (an nginx
/// `location`'s prefix, an HAProxy `backend`'s name).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ImportedProxy {
    pub(crate) model: crate::plan::proxy::ProxyModel,
    pub(crate) block: String,
}

/// Where each field of an imported policy came from (a line of a config, or a default),
/// for `harness validate --explain`; empty where an importer does not say.
pub(crate) type Origins = Vec<(&'static str, String)>;

/// Reads the files an `import:` names, relative to `dir` (the plan's directory), and
/// imports them. Also returns the files' text, which the plan's digest covers, and where
/// each field came from.
pub(crate) fn load(
    dir: &Path,
    spec: &ImportSpec,
) -> Result<(Imported, Vec<String>, Origins), Problem> {
    let read = |file: &PathBuf| -> Result<String, Problem> {
        let text = read_file(
            dir,
            file,
            "`import:` names the config files production runs, e.g. `production/grpc.json`",
            "paths in `import:` are relative to the plan file",
        )?;
        fault_server::yaml_guard::check_depth(&text, fault_server::yaml_guard::MAX_DEPTH)
            .map_err(|deep| problem(format!("`{}`: {deep}", file.display())))?;
        Ok(text)
    };
    let at = |file: &PathBuf| {
        let shown = file.display().to_string();
        move |p: Problem| Problem {
            message: format!("{shown}: {}", p.message),
            hint: p.hint,
        }
    };
    match spec {
        ImportSpec {
            grpc_service_config: Some(file),
            service,
            method,
            envoy_route: None,
            route: None,
            envoy_cluster: None,
            istio_virtual_service: None,
            istio_destination_rule: None,
        } => {
            let service = service.as_deref().ok_or_else(|| {
                problem("a gRPC import needs the `service` whose method config applies")
                    .hint("`import: { grpc_service_config: FILE, service: shop.Cart, method: Checkout }`")
            })?;
            let text = read(file)?;
            let imported = grpc::import(&text, service, method.as_deref()).map_err(at(file))?;
            Ok((imported, vec![text], Vec::new()))
        }
        ImportSpec {
            grpc_service_config: None,
            service: None,
            method: None,
            envoy_route: Some(file),
            route,
            envoy_cluster,
            istio_virtual_service: None,
            istio_destination_rule: None,
        } => {
            let text = read(file)?;
            let cluster = envoy_cluster.as_ref().map(read).transpose()?;
            let imported =
                envoy::import(&text, route.as_deref(), cluster.as_deref()).map_err(at(file))?;
            let texts = [Some(text), cluster].into_iter().flatten().collect();
            Ok((imported, texts, Vec::new()))
        }
        ImportSpec {
            grpc_service_config: None,
            service: None,
            method: None,
            envoy_route: None,
            route,
            envoy_cluster: None,
            istio_virtual_service: Some(file),
            istio_destination_rule: rule_file,
        } => {
            let text = read(file)?;
            let rule = rule_file.as_ref().map(read).transpose()?;
            let got = istio::import(&text, rule.as_deref(), route.as_deref()).map_err(|e| {
                let shown = match e.file {
                    istio::File::VirtualService => file,
                    istio::File::DestinationRule => rule_file.as_ref().unwrap_or(file),
                };
                in_file(shown, e.error)
            })?;
            let imported = Imported {
                warnings: got.warnings_in(file, rule_file.as_deref()),
                config: got.imported.config,
            };
            let origins = got.origins.into_iter().map(|o| (o.field, o.from)).collect();
            let texts = [Some(text), rule].into_iter().flatten().collect();
            Ok((imported, texts, origins))
        }
        _ => Err(problem("an import names one source: `grpc_service_config` (with `service` and optionally `method`), `envoy_route` (with optionally `route` and `envoy_cluster`), or `istio_virtual_service` (with optionally `route` and `istio_destination_rule`)")
            .hint("`import: { envoy_route: production/route.yaml, envoy_cluster: production/cluster.yaml }`")),
    }
}

/// An error in a config `file`, said where the plan's `import:` key is: the file's line
/// and column go into the message.
fn in_file(file: &Path, e: ConfigError) -> Problem {
    Problem {
        message: format!("{}:{}:{}: {}", file.display(), e.line, e.column, e.message),
        hint: e.hint,
    }
}

/// The text of a config file a plan names, `file` relative to `dir` (the plan's
/// directory): a regular file, no larger than a plan may be, UTF-8. `what_hint` says what
/// the file should be, `path_hint` where it is looked for. Every file a plan imports (an
/// `import:`, a proxy tier's `config:`) is read by this one function.
pub(crate) fn read_file(
    dir: &Path,
    file: &Path,
    what_hint: &str,
    path_hint: &str,
) -> Result<String, Problem> {
    let path = dir.join(file);
    let shown = file.display();
    // A file a plan names, unlike the plan itself (`<(generate)` is a pipe worth
    // reading), must be a regular one: a FIFO's open waits for a writer that may
    // never come, and a device never ends.
    if std::fs::metadata(&path).is_ok_and(|m| !m.is_file()) {
        return Err(problem(format!(
            "`{shown}` ({}) is not a regular file (a pipe, a device or a directory)",
            path.display()
        ))
        .hint(what_hint));
    }
    let bytes = fault_server::yaml_guard::read_bounded(&path, super::MAX_PLAN_BYTES)
        .map_err(|e| {
            problem(format!("cannot read `{shown}` ({}): {e}", path.display())).hint(path_hint)
        })?
        .ok_or_else(|| problem(format!("`{shown}` is larger than a plan may be")))?;
    String::from_utf8(bytes).map_err(|_| problem(format!("`{shown}` is not UTF-8 text")))
}

/// Adds `new` to `conditions`, each once.
pub(crate) fn add_conditions(conditions: &mut Vec<RetryCondition>, new: &[RetryCondition]) {
    for c in new {
        if !conditions.contains(c) {
            conditions.push(*c);
        }
    }
}

/// `d`, read from `field`, if it is no longer than a plan's durations may be (a year): a
/// protobuf `Duration` may say 10,000 years, which in a retry policy is a typo.
pub(crate) fn at_most_a_year(d: Duration, field: &str) -> Result<Duration, Problem> {
    if d > fault_server::duration::MAX {
        return Err(problem(format!(
            "`{field}` is {} s: longer than a year",
            d.as_secs()
        ))
        .hint("a plan's durations are at most a year (8760h); check the config for a typo"));
    }
    Ok(d)
}

/// A protobuf JSON `Duration` as both gRPC and Envoy configs write it: seconds with up to
/// nine decimals and an `s` (`"0.1s"`, `"15s"`). `None` for anything else.
pub(crate) fn proto_duration(text: &str) -> Option<Duration> {
    let number = text.trim().strip_suffix('s')?;
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty()
        || !whole.bytes().all(|b| b.is_ascii_digit())
        || !fraction.bytes().all(|b| b.is_ascii_digit())
        || fraction.len() > 9
    {
        return None;
    }
    let secs: u64 = if whole.is_empty() {
        0
    } else {
        whole.parse().ok()?
    };
    let nanos: u32 = format!("{fraction:0<9}").parse().ok()?;
    Some(Duration::new(secs, nanos))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::proto_duration;

    #[test]
    fn proto_durations_are_seconds_with_an_s() {
        let ms = Duration::from_millis;
        let cases = [
            ("0.1s", Some(ms(100))),
            (".25s", Some(ms(250))),
            ("15s", Some(Duration::from_secs(15))),
            ("1.000000001s", Some(Duration::new(1, 1))),
            ("0s", Some(Duration::ZERO)),
            ("100ms", None),
            ("1", None),
            ("-1s", None),
            ("s", None),
            ("1.0000000001s", None),
        ];
        for (text, expected) in cases {
            assert_eq!(proto_duration(text), expected, "{text}");
        }
    }
}
