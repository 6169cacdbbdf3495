//! A plan's policy written out as the production config that runs it: a gRPC service
//! config (`grpc.rs`) or an Envoy route and cluster (`envoy.rs`). The way back in from
//! `plan/import/`.
//!
//! Why both directions: a policy tuned or tested here is only worth something once it is
//! deployed, and the config a service deploys cannot say everything a plan can (gRPC has
//! no ratio budget and no breaker; Envoy's backoff is always fully jittered). So an export
//! is checked by importing it back with the very importer a plan's `import:` uses: what
//! comes back is what the file runs ([`Exported::policy`]), and every field where it
//! differs from the plan's policy is a warning ([`differences`]). Nothing is lost
//! silently, and "the file runs this" is a fact, not a claim.

mod differences;
mod envoy;
mod grpc;

use chaos_policy::PolicyConfig;

pub use differences::differences;

/// The production configs a policy can be written as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "live", derive(clap::ValueEnum))]
pub enum Format {
    /// A gRPC service config (JSON): `methodConfig` with its `retryPolicy` (gRFC A6) and
    /// the top-level `retryThrottling`.
    GrpcServiceConfig,
    /// An Envoy route action (YAML) with its `retry_policy` and `timeout`; the retry
    /// budget, which Envoy keeps in the cluster's circuit breakers, as a second file.
    EnvoyRoute,
}

impl Format {
    /// As the command line spells it.
    pub fn name(self) -> &'static str {
        match self {
            Format::GrpcServiceConfig => "grpc-service-config",
            Format::EnvoyRoute => "envoy-route",
        }
    }
}

/// Where a gRPC config applies: `service` (and `method`); neither is every method.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scope {
    pub service: Option<String>,
    pub method: Option<String>,
}

/// One file an export writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct File {
    /// What it is, and the name it goes by when written beside others (`grpc.json`,
    /// `route.yaml`, `cluster.yaml`).
    pub name: &'static str,
    pub text: String,
}

/// A policy written out, and what the written files run.
#[derive(Debug, Clone, PartialEq)]
pub struct Exported {
    pub format: Format,
    /// The config itself first; for Envoy, the cluster's circuit breakers second.
    pub files: Vec<File>,
    /// The policy the files run, read back by the plan importer.
    pub policy: PolicyConfig,
    /// Every setting of the plan's policy the files cannot say, and what they say instead.
    pub warnings: Vec<String>,
}

/// Why an export could not be made: the importer refused what the exporter wrote, which
/// is this program's bug, not the user's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the {format} written for this policy does not import back ({message}); please report this as a bug"
)]
pub struct ExportError {
    pub format: &'static str,
    pub message: String,
}

/// `config` as `format`, imported back and compared.
pub fn export(
    config: &PolicyConfig,
    format: Format,
    scope: &Scope,
) -> Result<Exported, ExportError> {
    let failed = |p: crate::plan::import::Problem| ExportError {
        format: format.name(),
        message: p.message,
    };
    let (files, imported) = match format {
        Format::GrpcServiceConfig => {
            let text = grpc::render(config, scope);
            let service = scope.service.as_deref().unwrap_or("any.Service");
            let imported =
                crate::plan::import::grpc::import(&text, service, scope.method.as_deref())
                    .map_err(failed)?;
            (
                vec![File {
                    name: "grpc.json",
                    text,
                }],
                imported,
            )
        }
        Format::EnvoyRoute => {
            let (route, cluster) = envoy::render(config);
            let imported =
                crate::plan::import::envoy::import(&route, None, Some(&cluster)).map_err(failed)?;
            (
                vec![
                    File {
                        name: "route.yaml",
                        text: route,
                    },
                    File {
                        name: "cluster.yaml",
                        text: cluster,
                    },
                ],
                imported,
            )
        }
    };
    let mut warnings = differences(config, &imported.config, format);
    // What the importer itself says of the file: nothing, for a file written here, unless
    // the exporter wrote something it should not have.
    warnings.extend(imported.warnings);
    Ok(Exported {
        format,
        files,
        policy: imported.config,
        warnings,
    })
}

/// A protobuf JSON `Duration`, exactly: whole seconds, then up to nine decimals, then `s`
/// (`0.1s`, `15s`, `1.000000001s`), as both gRPC and Envoy read it.
pub(crate) fn proto_duration(d: std::time::Duration) -> String {
    match d.subsec_nanos() {
        0 => format!("{}s", d.as_secs()),
        nanos => {
            let fraction = format!("{nanos:09}");
            format!("{}.{}s", d.as_secs(), fraction.trim_end_matches('0'))
        }
    }
}

#[cfg(test)]
mod tests;
