//! The `target` section: the embedded fault-server (alone, or in front of the user's
//! service), a running one, or a black box; and the rule that load goes only to machines
//! you own.

use std::net::IpAddr;

use fault_server::{Upstream, UpstreamError};

use super::error::{Found, found};
use super::locate::Seg;
use super::model::Target;
use super::spec::{Protocol, TargetSpec};

pub(super) fn resolve(spec: Option<TargetSpec>, allow_remote: bool) -> Result<Target, Found> {
    let at = || vec![Seg::Key("target")];
    let spec = match spec {
        None | Some(TargetSpec::Embedded(_)) => return Ok(Target::Embedded),
        Some(TargetSpec::Upstream(_, Some(Protocol::Grpc))) => {
            return Err(found(
                at(),
                "the embedded fault-server forwards to `upstream:` over HTTP/1.1, and a gRPC call needs HTTP/2 end to end",
            )
            .hint("point `target: { url, fault_server: false, protocol: grpc }` at your gRPC service, or use `protocol: http2`"));
        }
        Some(TargetSpec::Upstream(url, _)) => return upstream(&url, allow_remote),
        Some(TargetSpec::Url(spec)) => spec,
    };
    let url = url::Url::parse(&spec.url).map_err(|e| {
        found(at(), format!("target url `{}` is not a URL: {e}", spec.url))
            .hint("e.g. `http://127.0.0.1:8080`")
    })?;
    if url.scheme() != "http" {
        return Err(found(
            at(),
            format!("target url `{}`: only http:// is supported", spec.url),
        ));
    }
    let loopback = url.host_str().is_some_and(is_loopback_host);
    if !loopback && !allow_remote {
        return Err(found(
            at(),
            format!(
                "target `{}` is not on loopback: load and faults go only to machines you own",
                spec.url
            ),
        )
        .hint(
            "use 127.0.0.1 or localhost; a plan that really means it says `allow_remote: true`",
        ));
    }
    let url = spec.url.trim_end_matches('/').to_owned();
    if !spec.fault_server && spec.script.is_some() {
        return Err(found(
            at(),
            "`script:` is said of a fault-server's script, and this target is a black box (`fault_server: false`)",
        )
        .hint("remove `script:`"));
    }
    Ok(if spec.fault_server {
        Target::FaultServer {
            url,
            token: spec.token,
            script: spec.script,
        }
    } else {
        Target::BlackBox { url }
    })
}

/// `target: { upstream: URL }`: the embedded fault-server in front of the user's service,
/// on loopback unless the plan says `allow_remote: true`.
fn upstream(url: &str, allow_remote: bool) -> Result<Target, Found> {
    let at = || vec![Seg::Key("target")];
    let upstream = Upstream::parse(url, allow_remote).map_err(|error| match error {
        UpstreamError::Remote { .. } => found(
            at(),
            format!(
                "target upstream `{url}` is not on loopback: load and faults go only to machines you own"
            ),
        )
        .hint("use 127.0.0.1 or localhost; a plan that really means it says `allow_remote: true`"),
        other => found(at(), format!("target upstream: {other}")),
    })?;
    Ok(Target::Proxy { upstream })
}

/// `localhost`, 127.0.0.0/8 or [::1].
pub fn is_loopback_host(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}
