//! Where telemetry goes, read from a command-line flag and the OpenTelemetry environment
//! variables, as every OpenTelemetry SDK reads them.
//!
//! Telemetry is off unless an endpoint is given: `--otlp ENDPOINT`, or
//! `OTEL_EXPORTER_OTLP_ENDPOINT` (or a signal's own `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` /
//! `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`). `OTEL_SDK_DISABLED=true` turns it off whatever
//! else is set.

use std::time::Duration;

/// How long one export may take before it counts as failed: a collector that hangs costs
/// at most this per batch, and the final flush at most [`FLUSH_TIMEOUT`].
pub const EXPORT_TIMEOUT: Duration = Duration::from_secs(3);

/// The longest the final flush of spans and metrics waits at the end of a run.
pub const FLUSH_TIMEOUT: Duration = Duration::from_secs(5);

/// The default metric export interval: a few seconds, so a run of a minute shows up as a
/// curve rather than one point (the SDKs' default of 60 s suits services, not test runs).
pub const DEFAULT_METRIC_INTERVAL: Duration = Duration::from_secs(5);

/// What the environment holds, as a map from name to value: tests pass their own.
pub type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

/// The process environment, for [`OtelConfig::resolve`].
pub fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// Telemetry settings, resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct OtelConfig {
    /// Where spans go (a full URL, `/v1/traces` included).
    pub traces_endpoint: String,
    /// Where metrics go (a full URL, `/v1/metrics` included).
    pub metrics_endpoint: String,
    /// `service.name` of the process's resource.
    pub service_name: String,
    /// `OTEL_RESOURCE_ATTRIBUTES`, parsed.
    pub resource: Vec<(String, String)>,
    /// The share of traces kept (of logical requests on the client, of unsampled root
    /// requests on the server), when the environment sets it; `None`: not said.
    pub sampling_ratio: Option<f64>,
    /// How often metrics are exported.
    pub metric_interval: Duration,
    /// What was set but cannot be honoured, one sentence each.
    pub warnings: Vec<String>,
}

/// A setting that cannot be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum OtelConfigError {
    #[error(
        "{name}={value:?} is not an OTLP/HTTP endpoint: give an http:// URL such as http://127.0.0.1:4318"
    )]
    Endpoint { name: String, value: String },
    #[error("{name}={value:?} is not a number between 0 and 1")]
    Ratio { name: String, value: String },
}

impl OtelConfig {
    /// Reads the settings: `flag` is `--otlp` (it wins over the environment);
    /// `default_service` names the process when `OTEL_SERVICE_NAME` does not. `None`:
    /// telemetry is off.
    pub fn resolve(
        flag: Option<&str>,
        default_service: &str,
        env: Env<'_>,
    ) -> Result<Option<OtelConfig>, OtelConfigError> {
        if env("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
            return Ok(None);
        }
        let base = match flag {
            Some(flag) => Some(("--otlp".to_owned(), flag.to_owned())),
            None => env("OTEL_EXPORTER_OTLP_ENDPOINT")
                .map(|v| ("OTEL_EXPORTER_OTLP_ENDPOINT".to_owned(), v)),
        };
        let signal = |var: &str, path: &str| -> Result<Option<String>, OtelConfigError> {
            // A signal's own endpoint is used as it is; the base gets the signal's path.
            if flag.is_none()
                && let Some(value) = env(var)
            {
                return check(var, &value).map(Some);
            }
            match &base {
                Some((name, value)) => {
                    let url = check(name, value)?;
                    Ok(Some(format!("{}/{path}", url.trim_end_matches('/'))))
                }
                None => Ok(None),
            }
        };
        let traces = signal("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "v1/traces")?;
        let metrics = signal("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "v1/metrics")?;
        let (traces_endpoint, metrics_endpoint) = match (traces, metrics) {
            (None, None) => return Ok(None),
            // One signal's endpoint alone: the other goes to the same collector.
            (Some(t), None) => {
                let m = sibling(&t, "v1/traces", "v1/metrics");
                (t, m)
            }
            (None, Some(m)) => {
                let t = sibling(&m, "v1/metrics", "v1/traces");
                (t, m)
            }
            (Some(t), Some(m)) => (t, m),
        };

        let mut warnings = Vec::new();
        if let Some(protocol) = env("OTEL_EXPORTER_OTLP_PROTOCOL") {
            let protocol = protocol.trim().to_ascii_lowercase();
            if protocol != "http/protobuf" {
                warnings.push(format!(
                    "OTEL_EXPORTER_OTLP_PROTOCOL={protocol} is not supported: sending OTLP over http/protobuf (a collector's port 4318)"
                ));
            }
        }
        let service_name = env("OTEL_SERVICE_NAME").unwrap_or_else(|| default_service.to_owned());
        let resource = env("OTEL_RESOURCE_ATTRIBUTES")
            .map(|v| parse_resource(&v, &mut warnings))
            .unwrap_or_default();
        let sampling_ratio = sampler(env, &mut warnings)?;
        let metric_interval = match env("OTEL_METRIC_EXPORT_INTERVAL") {
            None => DEFAULT_METRIC_INTERVAL,
            Some(ms) => match ms.trim().parse::<u64>() {
                Ok(ms) if ms > 0 => Duration::from_millis(ms),
                _ => {
                    warnings.push(format!(
                        "OTEL_METRIC_EXPORT_INTERVAL={ms:?} is not a number of milliseconds: exporting metrics every {} s",
                        DEFAULT_METRIC_INTERVAL.as_secs()
                    ));
                    DEFAULT_METRIC_INTERVAL
                }
            },
        };
        Ok(Some(OtelConfig {
            traces_endpoint,
            metrics_endpoint,
            service_name,
            resource,
            sampling_ratio,
            metric_interval,
            warnings,
        }))
    }
}

fn check(name: &str, value: &str) -> Result<String, OtelConfigError> {
    let value = value.trim();
    let rest = value.strip_prefix("http://");
    match rest {
        Some(rest) if !rest.is_empty() && !rest.starts_with('/') => Ok(value.to_owned()),
        _ => Err(OtelConfigError::Endpoint {
            name: name.to_owned(),
            value: value.to_owned(),
        }),
    }
}

fn sibling(url: &str, from: &str, to: &str) -> String {
    match url.strip_suffix(from) {
        Some(base) => format!("{base}{to}"),
        None => url.to_owned(),
    }
}

/// `OTEL_TRACES_SAMPLER` and `OTEL_TRACES_SAMPLER_ARG`: the ratio samplers take the
/// argument, `always_on` is 1 and `always_off` 0 (violators are still exported).
fn sampler(env: Env<'_>, warnings: &mut Vec<String>) -> Result<Option<f64>, OtelConfigError> {
    let arg = match env("OTEL_TRACES_SAMPLER_ARG") {
        None => None,
        Some(value) => match value.trim().parse::<f64>() {
            Ok(r) if (0.0..=1.0).contains(&r) => Some(r),
            _ => {
                return Err(OtelConfigError::Ratio {
                    name: "OTEL_TRACES_SAMPLER_ARG".to_owned(),
                    value,
                });
            }
        },
    };
    let Some(kind) = env("OTEL_TRACES_SAMPLER") else {
        return Ok(arg);
    };
    Ok(match kind.trim() {
        "always_on" | "parentbased_always_on" => Some(1.0),
        "always_off" | "parentbased_always_off" => Some(0.0),
        "traceidratio" | "parentbased_traceidratio" => Some(arg.unwrap_or(1.0)),
        other => {
            warnings.push(format!(
                "OTEL_TRACES_SAMPLER={other} is not supported (use traceidratio, always_on or always_off): sampling by OTEL_TRACES_SAMPLER_ARG or the plan"
            ));
            arg
        }
    })
}

/// `key1=value1,key2=value2`, values percent-decoded as the specification says.
fn parse_resource(text: &str, warnings: &mut Vec<String>) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for pair in text.split(',').filter(|p| !p.trim().is_empty()) {
        match pair.split_once('=') {
            Some((k, v)) if !k.trim().is_empty() => {
                out.push((k.trim().to_owned(), percent_decode(v.trim())));
            }
            _ => warnings.push(format!(
                "OTEL_RESOURCE_ATTRIBUTES: `{pair}` is not key=value: left out"
            )),
        }
    }
    out
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(hex) = s.get(i + 1..i + 3)
            && let Ok(b) = u8::from_str_radix(hex, 16)
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        }
    }

    fn resolve(flag: Option<&str>, pairs: &[(&str, &str)]) -> Option<OtelConfig> {
        OtelConfig::resolve(flag, "svc", &env_of(pairs)).expect("valid settings")
    }

    #[test]
    fn off_unless_an_endpoint_is_given() {
        assert_eq!(resolve(None, &[("OTEL_SERVICE_NAME", "x")]), None);
        assert_eq!(
            resolve(Some("http://c:4318"), &[("OTEL_SDK_DISABLED", "true")]),
            None
        );
    }

    #[test]
    fn the_flag_wins_and_each_signal_gets_its_path() {
        let c = resolve(
            Some("http://127.0.0.1:4318/"),
            &[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://elsewhere:4318")],
        )
        .expect("on");
        assert_eq!(c.traces_endpoint, "http://127.0.0.1:4318/v1/traces");
        assert_eq!(c.metrics_endpoint, "http://127.0.0.1:4318/v1/metrics");
        assert_eq!(c.service_name, "svc");
        assert_eq!(c.sampling_ratio, None);
        assert_eq!(c.metric_interval, DEFAULT_METRIC_INTERVAL);
    }

    #[test]
    fn signal_endpoints_are_used_as_given() {
        let c = resolve(
            None,
            &[(
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "http://t:4318/custom/v1/traces",
            )],
        )
        .expect("on");
        assert_eq!(c.traces_endpoint, "http://t:4318/custom/v1/traces");
        assert_eq!(c.metrics_endpoint, "http://t:4318/custom/v1/metrics");
    }

    #[test]
    fn the_standard_variables_are_honoured() {
        let c = resolve(
            None,
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
                ("OTEL_SERVICE_NAME", "checkout-chaos"),
                (
                    "OTEL_RESOURCE_ATTRIBUTES",
                    "deployment.environment=ci,team=pay%20ments,bad",
                ),
                ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
                ("OTEL_TRACES_SAMPLER_ARG", "0.25"),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
                ("OTEL_METRIC_EXPORT_INTERVAL", "1000"),
            ],
        )
        .expect("on");
        assert_eq!(c.service_name, "checkout-chaos");
        assert_eq!(
            c.resource,
            vec![
                ("deployment.environment".to_owned(), "ci".to_owned()),
                ("team".to_owned(), "pay ments".to_owned())
            ]
        );
        assert_eq!(c.sampling_ratio, Some(0.25));
        assert_eq!(c.metric_interval, Duration::from_secs(1));
        assert_eq!(c.warnings.len(), 2, "{:?}", c.warnings);
        assert!(c.warnings[0].contains("grpc"));
        assert!(c.warnings[1].contains("`bad`"));
    }

    #[test]
    fn bad_settings_say_what_to_give() {
        let bad = |pairs: &[(&str, &str)]| {
            OtelConfig::resolve(None, "svc", &env_of(pairs))
                .expect_err("invalid")
                .to_string()
        };
        assert!(bad(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "127.0.0.1:4318")]).contains("http://"));
        assert!(
            bad(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
                ("OTEL_TRACES_SAMPLER_ARG", "1.5")
            ])
            .contains("between 0 and 1")
        );
        assert_eq!(
            resolve(
                None,
                &[
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
                    ("OTEL_TRACES_SAMPLER", "always_off")
                ]
            )
            .and_then(|c| c.sampling_ratio),
            Some(0.0)
        );
    }
}
