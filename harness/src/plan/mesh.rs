//! A mesh tier: the harness's own relay, retrying as a service mesh's config makes the
//! sidecar retry (an Istio VirtualService and DestinationRule), the same in every policy.
//!
//! Why a relay and not the mesh itself: a sidecar is Envoy configured by the mesh's
//! control plane, which a test cannot start on a laptop; its retry policy is what the
//! config resolves to, and the relay runs exactly that policy, live and simulated. The
//! policy's every field keeps where it came from (a line of a file, or a default) for
//! `harness validate --explain`.

use std::fmt::Write as _;
use std::path::PathBuf;

use chaos_policy::Policy;

use super::import::istio::Origin;
use super::resolved;

/// A mesh tier's config and the policy it resolves to.
#[derive(Debug, Clone, PartialEq)]
pub struct MeshTier {
    /// The VirtualService file, as the plan names it.
    pub virtual_service: PathBuf,
    pub destination_rule: Option<PathBuf>,
    /// The `http` route read: its name, or `VIRTUALSERVICE/http[I]`.
    pub route: String,
    pub policy: Policy,
    /// Where each field of `policy` came from.
    pub(crate) origins: Vec<Origin>,
}

impl MeshTier {
    /// The mesh's name, as reports and errors say it.
    pub fn kind(&self) -> &'static str {
        "istio"
    }

    /// The tier as `harness validate --explain` writes it, at four spaces: its config,
    /// then every field of its policy with where it came from after a `#`.
    pub fn explain(&self) -> String {
        let mut out = String::new();
        let mut config = format!("{{ virtual_service: {}", self.virtual_service.display());
        if let Some(rule) = &self.destination_rule {
            let _ = write!(config, ", destination_rule: {}", rule.display());
        }
        let _ = write!(config, ", route: {} }}", self.route);
        let _ = writeln!(
            out,
            "    {}: {config}   # the harness's relay, retrying as the sidecar would",
            self.kind()
        );
        let resolved::Value::Map(fields) = resolved::policy(self.policy.config()) else {
            return out;
        };
        for (key, value) in fields {
            let from = self
                .origins
                .iter()
                .find(|o| {
                    o.field == key
                        || (key.starts_with("retry_after") && o.field == "honor_retry_after")
                })
                .map_or("", |o| o.from.as_str());
            let _ = writeln!(out, "    {key}: {}   # {from}", value.flow());
        }
        out
    }
}
