//! The DestinationRule of the route's destination: the limit on the retries its sidecar
//! has in flight (`connectionPool.http.maxRetries`, or `trafficPolicy.retryBudget`), and
//! what of the rule the model leaves out.

use chaos_policy::BudgetConfig;
use serde_yaml::Value;

use super::super::ConfigError;
use super::super::kube::{self, Document};
use super::{File, IstioError, Out, Route};
use crate::plan::locate::Seg;

/// `connectionPool.http.maxRetries` when unset: Istio writes 2^32 − 1, "effectively
/// unlimited" (istio/istio#42065), not Envoy's own 3.
const DEFAULT_MAX_RETRIES: u32 = u32::MAX;
/// `retryBudget` defaults, as documented (`percent` 20, `minRetryConcurrency` 3).
const DEFAULT_BUDGET_PERCENT: f64 = 20.0;
const DEFAULT_MIN_RETRY_CONCURRENCY: u32 = 3;

/// The DestinationRule whose host the route's destination is (or the one there is).
pub(super) fn destination<'a>(
    docs: &'a [Document],
    route: &Route<'_>,
    file: File,
    given: bool,
    out: &mut Out,
) -> Result<Option<&'a Document>, IstioError> {
    let rules: Vec<&Document> = docs
        .iter()
        .filter(|d| d.kind() == Some("DestinationRule"))
        .collect();
    if rules.is_empty() {
        if given {
            return Err(IstioError {
                file,
                error: ConfigError::at(1, 1, format!("the file holds no `kind: DestinationRule` ({})", kube::kinds(docs)))
                    .hint("give the DestinationRule of the route's destination host, or leave `destination_rule:` out for Istio's defaults"),
            });
        }
        return Ok(None);
    }
    let host = route
        .value
        .get("route")
        .and_then(Value::as_sequence)
        .and_then(|d| d.first())
        .and_then(|d| d.get("destination"))
        .and_then(|d| d.get("host"))
        .and_then(Value::as_str);
    let of_host = |d: &&&Document| {
        let rule_host = d
            .value
            .get("spec")
            .and_then(|s| s.get("host"))
            .and_then(Value::as_str);
        host.is_some_and(|h| rule_host.is_some_and(|r| r == h || r.starts_with(&format!("{h}."))))
    };
    let chosen = rules.iter().find(of_host).or(rules.first()).copied();
    if rules.len() > 1
        && let Some(rule) = chosen
    {
        let line = rule.at(&[Seg::Key("kind")]).0;
        out.rule_warnings.push(format!(
            "{} DestinationRules: the one at line {line}{} is read",
            rules.len(),
            host.map_or(String::new(), |h| format!(
                " (host `{h}`, the route's destination)"
            ))
        ));
    }
    Ok(chosen)
}

/// The DestinationRule's limit on retries: its `retryBudget`, else `maxRetries`, else
/// Istio's default of 2^32 − 1 retries in flight.
pub(super) fn circuit_breaker(
    rule: Option<&Document>,
    file: File,
    out: &mut Out,
) -> Result<(), IstioError> {
    let at = |doc: &Document, path: &[Seg], message: String| IstioError {
        file,
        error: doc.error(path, message),
    };
    let default = BudgetConfig::Concurrency {
        percent: 0.0,
        min_concurrency: DEFAULT_MAX_RETRIES,
    };
    let Some(doc) = rule else {
        out.config.budget = Some(default);
        out.origin("budget", "Istio's default circuit breaker: max_retries 4294967295 retries in flight (istio/istio#42065), no limit in effect");
        return Ok(());
    };
    use Seg::Key;
    let policy = doc.value.get("spec").and_then(|s| s.get("trafficPolicy"));
    let http = policy
        .and_then(|p| p.get("connectionPool"))
        .and_then(|c| c.get("http"));
    let whole = |v: &Value, path: &[Seg], field: &str| -> Result<u32, IstioError> {
        v.as_i64()
            .filter(|n| (0..=i64::from(i32::MAX)).contains(n))
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| {
                at(
                    doc,
                    path,
                    format!("`{field}` is not a whole number from 0 to 2147483647"),
                )
            })
    };
    let max_path = [
        Key("spec"),
        Key("trafficPolicy"),
        Key("connectionPool"),
        Key("http"),
        Key("maxRetries"),
    ];
    let budget_path = [Key("spec"), Key("trafficPolicy"), Key("retryBudget")];
    let budget = if let Some(b) = policy.and_then(|p| p.get("retryBudget")) {
        let line = doc.at(&budget_path).0;
        if http.and_then(|h| h.get("maxRetries")).is_some() {
            out.rule_warnings.push(format!(
                "line {}: `maxRetries` is ignored: Envoy applies the retryBudget instead",
                doc.at(&max_path).0
            ));
        }
        let percent = match b.get("percent") {
            None => {
                out.rule_warnings.push(format!("line {line}: `retryBudget.percent` unset is read as the documented 20%; Istio releases before istio/istio#59505 wrote 0.2%"));
                DEFAULT_BUDGET_PERCENT
            }
            Some(p) => p
                .as_f64()
                .or_else(|| p.get("value").and_then(Value::as_f64))
                .ok_or_else(|| {
                    at(
                        doc,
                        &budget_path,
                        "`retryBudget.percent` is not a number".to_owned(),
                    )
                })?,
        };
        let min = match b.get("minRetryConcurrency") {
            None => DEFAULT_MIN_RETRY_CONCURRENCY,
            Some(v) => whole(v, &budget_path, "retryBudget.minRetryConcurrency")?,
        };
        out.origin("budget", format!("line {line}: `trafficPolicy.retryBudget`: retries in flight at most {percent}% of the requests in flight, or {min}"));
        BudgetConfig::Concurrency {
            percent,
            min_concurrency: min,
        }
    } else if let Some(m) = http.and_then(|h| h.get("maxRetries")) {
        let n = whole(m, &max_path, "connectionPool.http.maxRetries")?;
        out.origin("budget", format!("line {}: `connectionPool.http.maxRetries: {n}` retries in flight at once, across the cluster", doc.at(&max_path).0));
        BudgetConfig::Concurrency {
            percent: 0.0,
            min_concurrency: n,
        }
    } else {
        out.origin("budget", format!("Istio's default: the DestinationRule (line {}) sets no `maxRetries` nor `retryBudget`: 4294967295 retries in flight, no limit in effect", doc.at(&[Key("kind")]).0));
        default
    };
    budget.build().map_err(|e| {
        at(
            doc,
            &budget_path,
            format!("the DestinationRule's retry budget: {e}"),
        )
    })?;
    out.config.budget = Some(budget);
    rule_unmodelled(doc, out);
    Ok(())
}

/// What of the DestinationRule the model leaves out.
fn rule_unmodelled(doc: &Document, out: &mut Out) {
    use Seg::Key;
    let spec = doc.value.get("spec");
    let policy = spec.and_then(|s| s.get("trafficPolicy"));
    let mut warn = |path: &[Seg], what: &str| {
        let line = doc.at(path).0;
        out.rule_warnings.push(format!("line {line}: {what}"));
    };
    if policy.and_then(|p| p.get("outlierDetection")).is_some() {
        warn(
            &[Key("spec"), Key("trafficPolicy"), Key("outlierDetection")],
            "`outlierDetection` is not modelled: no host is ejected",
        );
    }
    if let Some(Value::Mapping(http)) = policy
        .and_then(|p| p.get("connectionPool"))
        .and_then(|c| c.get("http"))
    {
        for key in http
            .keys()
            .filter_map(Value::as_str)
            .filter(|k| *k != "maxRetries")
        {
            warn(
                &[
                    Key("spec"),
                    Key("trafficPolicy"),
                    Key("connectionPool"),
                    Key("http"),
                ],
                &format!("`connectionPool.http.{key}` is not modelled: only retries are limited"),
            );
        }
    }
    if policy
        .and_then(|p| p.get("connectionPool"))
        .and_then(|c| c.get("tcp"))
        .is_some()
    {
        warn(
            &[
                Key("spec"),
                Key("trafficPolicy"),
                Key("connectionPool"),
                Key("tcp"),
            ],
            "`connectionPool.tcp` is not modelled: set the plan's `load.max_connections` to cap connections",
        );
    }
    for (key, path) in [
        ("subsets", [Key("spec"), Key("subsets")]),
        ("portLevelSettings", [Key("spec"), Key("trafficPolicy")]),
    ] {
        let present = match key {
            "subsets" => spec.and_then(|s| s.get("subsets")).is_some(),
            _ => policy.and_then(|p| p.get("portLevelSettings")).is_some(),
        };
        if present {
            warn(
                &path,
                &format!("`{key}` traffic policies are not read: the top-level `trafficPolicy` is"),
            );
        }
    }
}
