//! An Istio VirtualService's HTTP route and a DestinationRule → the retry policy of the
//! sidecar that routes it, with Istio's defaults wherever a block is absent.
//!
//! Istio writes Envoy's config from these objects, and what it writes is not what either
//! says on its face (istio/istio `pilot/pkg/networking/core/route/retry/retry.go`,
//! `ConvertPolicy`; docs/stacks.md, section Istio):
//! - no `retries:` is Envoy's `retry_policy { retry_on: connect-failure,refused-stream,
//!   unavailable,cancelled,retriable-status-codes, retriable_status_codes: [503],
//!   num_retries: 2, retry_host_predicate: previous_hosts }`, for every method;
//! - `retries.attempts` is `num_retries` (retries, not attempts), and 0 or unset turns
//!   retries off; `retryOn` replaces the default's words and codes, a bare status code in
//!   it becoming `retriable-status-codes`; `backoff` is the base interval (the cap 10 × it);
//! - the route's `timeout` bounds all tries and is off unless set;
//! - the DestinationRule's `connectionPool.http.maxRetries` is the cluster's circuit
//!   breaker `max_retries` (concurrent retries), 2^32 − 1 unless set (istio/istio#42065),
//!   and its `retryBudget` (istio/api#3512) the breaker's `retry_budget`.
//!
//! The Envoy words are read by `envoy::retry_on`, so both imports mean the same by them.

use std::time::Duration;

use chaos_policy::{Backoff, Jitter, PolicyConfig, RetryAfter, RetryCondition as C, RetryOn};
use serde_yaml::Value;

mod rule;
#[cfg(test)]
mod tests;

use super::kube::{self, Document};
use super::{ConfigError, Imported, add_conditions, envoy};
use crate::plan::locate::Seg;

/// The default policy's `num_retries`.
const DEFAULT_RETRIES: u32 = 2;
/// The default policy's `retry_on`, in Istio's order.
const DEFAULT_RETRY_ON: [&str; 5] = [
    "connect-failure",
    "refused-stream",
    "unavailable",
    "cancelled",
    "retriable-status-codes",
];
/// Envoy's default `retry_back_off.base_interval`; the cap is ten times it.
const DEFAULT_BASE: Duration = Duration::from_millis(25);

/// Which of the two files an error is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum File {
    VirtualService,
    DestinationRule,
}

/// An error in one of the files, at its line and column.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct IstioError {
    pub(crate) file: File,
    pub(crate) error: ConfigError,
}

/// Where one resolved field of the policy came from: a line of a file, or a default.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Origin {
    pub(crate) field: &'static str,
    pub(crate) from: String,
}

/// The imported policy, where each of its fields came from, and the route it is of.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct IstioImport {
    /// The policy, and what of the VirtualService's file it approximates.
    pub(crate) imported: Imported,
    /// What of the DestinationRule it approximates, and the file that held the rule.
    pub(crate) rule_warnings: Vec<String>,
    pub(crate) rule_file: File,
    pub(crate) origins: Vec<Origin>,
    /// The route read: its name, or `VIRTUALSERVICE/http[I]`.
    pub(crate) route: String,
}

impl IstioImport {
    /// Every warning, each after the file it is about (`vs` the VirtualService's, `rule`
    /// the DestinationRule's when the plan names one).
    pub(crate) fn warnings_in(
        &self,
        vs: &std::path::Path,
        rule: Option<&std::path::Path>,
    ) -> Vec<String> {
        let rule = match self.rule_file {
            File::DestinationRule => rule.unwrap_or(vs),
            File::VirtualService => vs,
        };
        let vs_warnings = self.imported.warnings.iter().map(|w| (vs, w));
        vs_warnings
            .chain(self.rule_warnings.iter().map(|w| (rule, w)))
            .map(|(file, w)| format!("{}: {w}", file.display()))
            .collect()
    }
}

/// What the import found so far, and where.
pub(super) struct Out {
    pub(super) config: PolicyConfig,
    pub(super) warnings: Vec<String>,
    /// What of the DestinationRule the model approximates.
    pub(super) rule_warnings: Vec<String>,
    pub(super) origins: Vec<Origin>,
}

impl Out {
    pub(super) fn origin(&mut self, field: &'static str, from: impl Into<String>) {
        self.origins.retain(|o| o.field != field);
        self.origins.push(Origin {
            field,
            from: from.into(),
        });
    }
}

/// One forwarding HTTP route of a VirtualService.
pub(super) struct Route<'a> {
    doc: &'a Document,
    /// Its index in `spec.http`.
    index: usize,
    pub(super) value: &'a Value,
    label: String,
    /// `VIRTUALSERVICE/NAME` or `VIRTUALSERVICE/http[I]`.
    qualified: Vec<String>,
}

impl Route<'_> {
    fn path(&self, keys: &[&str]) -> Vec<Seg> {
        let mut path = vec![Seg::Key("spec"), Seg::Key("http"), Seg::Index(self.index)];
        path.extend(keys.iter().map(|k| Seg::Name((*k).to_owned())));
        path
    }

    fn line(&self, keys: &[&str]) -> usize {
        self.doc.at(&self.path(keys)).0
    }

    fn error(&self, keys: &[&str], message: impl Into<String>) -> IstioError {
        vs(self.doc.error(&self.path(keys), message))
    }
}

impl IstioError {
    fn hint(mut self, hint: impl Into<String>) -> IstioError {
        self.error = self.error.hint(hint);
        self
    }
}

fn vs(error: ConfigError) -> IstioError {
    IstioError {
        file: File::VirtualService,
        error,
    }
}

fn dr(error: ConfigError) -> IstioError {
    IstioError {
        file: File::DestinationRule,
        error,
    }
}

/// The policy of the sidecar that routes `virtual_service`'s route `selected` (or its one
/// route), limited by `destination_rule` (or a DestinationRule in the VirtualService's own
/// file; Istio's defaults without either).
pub(crate) fn import(
    virtual_service: &str,
    destination_rule: Option<&str>,
    selected: Option<&str>,
) -> Result<IstioImport, IstioError> {
    let docs = kube::documents(virtual_service).map_err(vs)?;
    let route = choose(&docs, selected)?;
    let mut out = Out {
        config: PolicyConfig::default(),
        warnings: Vec::new(),
        rule_warnings: Vec::new(),
        origins: Vec::new(),
    };
    route_keys(&route, &mut out);
    retries(&route, &mut out)?;
    route_timeout(&route, &mut out)?;
    let rule_docs = match destination_rule {
        Some(text) => Some(kube::documents(text).map_err(dr)?),
        None => None,
    };
    let (rules, file) = match &rule_docs {
        Some(docs) => (docs.as_slice(), File::DestinationRule),
        None => (docs.as_slice(), File::VirtualService),
    };
    let rule = rule::destination(rules, &route, file, destination_rule.is_some(), &mut out)?;
    rule::circuit_breaker(rule, file, &mut out)?;
    Ok(IstioImport {
        imported: Imported {
            config: out.config,
            warnings: out.warnings,
        },
        origins: out.origins,
        rule_warnings: out.rule_warnings,
        rule_file: file,
        route: route.label,
    })
}

/// Every forwarding route of every VirtualService of the file.
fn routes(docs: &[Document]) -> Result<Vec<Route<'_>>, IstioError> {
    let mut out = Vec::new();
    for doc in docs.iter().filter(|d| d.kind() == Some("VirtualService")) {
        let vs_name = doc.name().unwrap_or("virtualservice").to_owned();
        let http = match doc.value.get("spec").and_then(|s| s.get("http")) {
            None => continue,
            Some(Value::Sequence(list)) => list,
            Some(_) => {
                return Err(vs(doc.error(
                    &[Seg::Key("spec"), Seg::Key("http")],
                    "`spec.http` is not a list",
                )));
            }
        };
        for (index, value) in http.iter().enumerate() {
            // A redirect or a direct response forwards nothing, so nothing is retried.
            if value.get("route").is_none() {
                continue;
            }
            let place = format!("{vs_name}/http[{index}]");
            let name = value.get("name").and_then(Value::as_str);
            let mut qualified = vec![place.clone()];
            qualified.extend(name.map(|n| format!("{vs_name}/{n}")));
            out.push(Route {
                doc,
                index,
                value,
                label: name.map_or(place, str::to_owned),
                qualified,
            });
        }
    }
    Ok(out)
}

/// The route `selected` names (its name, `VS/NAME` or `VS/http[I]`), or the first when
/// every route retries alike.
fn choose<'a>(docs: &'a [Document], selected: Option<&str>) -> Result<Route<'a>, IstioError> {
    let all = routes(docs)?;
    let names = || {
        let labels: Vec<&str> = all.iter().map(|r| r.label.as_str()).take(8).collect();
        labels.join(", ")
    };
    if all.is_empty() {
        let at = docs
            .iter()
            .find(|d| d.kind() == Some("VirtualService"))
            .map_or((1, 1), |d| d.at(&[Seg::Key("spec"), Seg::Key("http")]));
        let found = if docs.iter().any(|d| d.kind() == Some("VirtualService")) {
            "the VirtualService has no `http` route that forwards (`route:`)".to_owned()
        } else {
            format!(
                "the file holds no `kind: VirtualService` ({})",
                kube::kinds(docs)
            )
        };
        return Err(vs(ConfigError::at(at.0, at.1, found).hint(
            "give the VirtualService whose `http` routes the sidecar applies (`kubectl get virtualservice NAME -o yaml`)",
        )));
    }
    let Some(selected) = selected else {
        let first = &all[0];
        let same = |r: &Route<'_>| {
            r.value.get("retries") == first.value.get("retries")
                && r.value.get("timeout") == first.value.get("timeout")
        };
        if let Some(other) = all.iter().find(|r| !same(r)) {
            return Err(other
                .error(
                    &["retries"],
                    format!(
                        "http route `{}` retries unlike `{}`, the first: say which route with `route:`",
                        other.label, first.label
                    ),
                )
                .hint(format!(
                    "`istio: {{ virtual_service: FILE, route: NAME }}`; its routes: {}",
                    names()
                )));
        }
        return Ok(all.into_iter().next().expect("not empty"));
    };
    let mut matching: Vec<Route<'_>> = Vec::new();
    let mut rest = Vec::new();
    for r in all {
        if r.label == selected || r.qualified.iter().any(|q| q == selected) {
            matching.push(r);
        } else {
            rest.push(r.label);
        }
    }
    match matching.len() {
        1 => Ok(matching.pop().expect("one")),
        0 => {
            let doc = docs
                .iter()
                .find(|d| d.kind() == Some("VirtualService"))
                .expect("a route came from one");
            Err(vs(doc
                .error(
                    &[Seg::Key("spec"), Seg::Key("http")],
                    format!("no http route `{selected}` in the VirtualService"),
                )
                .hint(format!(
                    "its routes: {} (a route without a name by its place: VIRTUALSERVICE/http[INDEX])",
                    rest.join(", ")
                ))))
        }
        n => {
            let places: Vec<String> = matching.iter().map(|r| r.qualified[0].clone()).collect();
            Err(matching[1]
                .error(&["name"], format!("{n} http routes are named `{selected}`"))
                .hint(format!("name one by its place: {}", places.join(", "))))
        }
    }
}

/// What of the route itself the model leaves out.
fn route_keys(route: &Route<'_>, out: &mut Out) {
    let Some(map) = route.value.as_mapping() else {
        return;
    };
    for key in map.keys().filter_map(Value::as_str) {
        let why = match key {
            "fault" => "Istio's own fault injection is not modelled: script the faults in the plan",
            "mirror" | "mirrors" | "mirrorPercentage" => {
                "mirrored requests are not modelled: the mirror's load is not counted"
            }
            "route"
                if route
                    .value
                    .get("route")
                    .and_then(Value::as_sequence)
                    .is_some_and(|d| d.len() > 1) =>
            {
                "a split over several destinations is modelled as one next hop"
            }
            _ => continue,
        };
        let line = route.line(&[key]);
        out.warnings.push(format!("line {line}: `{key}`: {why}"));
    }
}

/// The route's `retries:` (or Istio's default for its absence) into `out`.
fn retries(route: &Route<'_>, out: &mut Out) -> Result<(), IstioError> {
    let c = &mut out.config;
    c.retry_non_idempotent = true;
    c.honor_no_retry = false;
    c.retry_after = RetryAfter::Ignore;
    c.breaker = None;
    c.attempt_timeout = None;
    let backoff = Backoff::envoy(DEFAULT_BASE, DEFAULT_BASE * 10)
        .and_then(|b| b.with_jitter(Jitter::Full))
        .expect("Envoy's default backoff is valid");
    c.backoff = backoff;
    out.origin(
        "retry_non_idempotent",
        "Istio's retries have no method rule: a POST is retried like a GET",
    );
    out.origin("honor_no_retry", "Envoy reads no x-chaos-no-retry");
    out.origin(
        "honor_retry_after",
        "a VirtualService cannot set Envoy's rate_limited_retry_back_off: Retry-After is not read",
    );
    out.origin(
        "breaker",
        "Envoy's circuit breaker limits retries in flight only (see budget)",
    );
    out.origin(
        "backoff",
        "Envoy's default: 25ms base, 250ms cap, full jitter",
    );
    let Some(retries) = route.value.get("retries") else {
        default_retries(route, out);
        return Ok(());
    };
    let line = route.line(&["retries"]);
    let Some(map) = retries.as_mapping() else {
        return Err(route
            .error(&["retries"], "`retries` is not a map")
            .hint("`retries: { attempts: 3, perTryTimeout: 2s, retryOn: 5xx }`"));
    };
    let attempts = match map.get("attempts") {
        None => 0,
        Some(v) => v
            .as_i64()
            .filter(|n| i32::try_from(*n).is_ok())
            .ok_or_else(|| {
                route
                    .error(&["retries", "attempts"], "`retries.attempts` is not a whole number")
                    .error
                    .hint("Istio reads it as a 32-bit number of retries: `attempts: 2` is up to 3 tries")
            })
            .map_err(vs)?,
    };
    if attempts <= 0 {
        let why = if map.contains_key("attempts") {
            format!(
                "line {}: `retries.attempts: {attempts}` turns retries off",
                route.line(&["retries", "attempts"])
            )
        } else {
            out.warnings.push(format!("line {line}: `retries` without `attempts` turns retries off: Istio reads an unset `attempts` as 0, not as its default of 2"));
            format!("line {line}: `retries` without `attempts` turns retries off")
        };
        out.config.max_attempts = 1;
        out.config.retry_on = RetryOn::new([]);
        out.origin("max_attempts", why.clone());
        out.origin("retry_on", why.clone());
        out.origin("attempt_timeout", why);
        return Ok(());
    }
    let attempts = u32::try_from(attempts).expect("positive and at most i32::MAX");
    out.config.max_attempts = attempts + 1;
    out.origin(
        "max_attempts",
        format!(
            "line {}: `retries.attempts: {attempts}` counts retries: {} tries in all",
            route.line(&["retries", "attempts"]),
            attempts + 1
        ),
    );
    retry_on(route, map.get("retryOn"), out)?;
    if let Some(t) = map.get("perTryTimeout") {
        let t = duration(route, &["retries", "perTryTimeout"], t)?;
        out.config.attempt_timeout = (!t.is_zero()).then_some(t);
        out.origin(
            "attempt_timeout",
            format!(
                "line {}: `retries.perTryTimeout`",
                route.line(&["retries", "perTryTimeout"])
            ),
        );
    } else {
        out.origin("attempt_timeout", format!("line {line}: `retries` sets no `perTryTimeout`: each try may take the route's timeout"));
    }
    if let Some(b) = map.get("backoff") {
        let base = duration(route, &["retries", "backoff"], b)?;
        out.config.backoff = Backoff::envoy(base, base * 10)
            .and_then(|b| b.with_jitter(Jitter::Full))
            .map_err(|e| route.error(&["retries", "backoff"], format!("`retries.backoff`: {e}")))?;
        out.origin(
            "backoff",
            format!("line {}: `retries.backoff` is the base interval; the cap is ten times it, full jitter", route.line(&["retries", "backoff"])),
        );
    }
    retries_unmodelled(route, map, out);
    Ok(())
}

/// Istio's default for a route without `retries:`.
fn default_retries(route: &Route<'_>, out: &mut Out) {
    let at = format!(
        "Istio's default: http route `{}` (line {}) has no `retries:`",
        route.label,
        route.line(&[])
    );
    out.config.max_attempts = DEFAULT_RETRIES + 1;
    out.origin(
        "max_attempts",
        format!("{at}: num_retries 2, 3 tries in all"),
    );
    out.config.retry_on = RetryOn::new(words(&DEFAULT_RETRY_ON, &[503], &mut Vec::new()));
    out.origin(
        "retry_on",
        format!("{at}: connect-failure, refused-stream, unavailable, cancelled and 503"),
    );
    out.origin("attempt_timeout", format!("{at}: no per-try timeout"));
    grpc_words(&DEFAULT_RETRY_ON, route.line(&[]), out);
    out.warnings.push(format!(
        "line {}: http route `{}` has no `retries:`: Istio's default retries 503, connect failures and refused streams twice, for every method; tries go to hosts not tried yet (previous_hosts), which the model's one next hop cannot do",
        route.line(&[]),
        route.label
    ));
}

/// A warning for the gRPC words among `words`, at `line`: Envoy retries them on a
/// `grpc-status`, and the Envoy import reads them through gRPC's table of HTTP answers.
fn grpc_words(words: &[&str], line: usize, out: &mut Out) {
    let grpc: Vec<&str> = words
        .iter()
        .copied()
        .filter(|w| {
            matches!(
                *w,
                "cancelled"
                    | "deadline-exceeded"
                    | "internal"
                    | "resource-exhausted"
                    | "unavailable"
            )
        })
        .collect();
    if !grpc.is_empty() {
        out.warnings.push(format!(
            "line {line}: `{}` are gRPC conditions, read as the Envoy import reads them (gRPC's table of HTTP answers: 429, 502, 503, 504 and resets count as `unavailable`); Envoy retries them only on a `grpc-status`, so over plain HTTP the model retries more than the sidecar would",
            grpc.join("`, `")
        ));
    }
}

/// The conditions of Envoy's `retry_on` words with `codes` as `retriable_status_codes`;
/// a word the model cannot wait for is named in `unmodelled`.
fn words(words: &[&str], codes: &[u16], unmodelled: &mut Vec<String>) -> Vec<C> {
    let mut conditions = Vec::new();
    for word in words {
        match envoy::retry_on(word, codes) {
            Some(found) => add_conditions(&mut conditions, &found),
            None => unmodelled.push((*word).to_owned()),
        }
    }
    conditions
}

/// `retries.retryOn`: Envoy's words and bare status codes, which replace the default's.
fn retry_on(route: &Route<'_>, spec: Option<&Value>, out: &mut Out) -> Result<(), IstioError> {
    let Some(spec) = spec else {
        out.config.retry_on = RetryOn::new(words(&DEFAULT_RETRY_ON, &[503], &mut Vec::new()));
        grpc_words(&DEFAULT_RETRY_ON, route.line(&["retries"]), out);
        out.origin("retry_on", format!("Istio's default, as `retries` (line {}) sets no `retryOn`: connect-failure, refused-stream, unavailable, cancelled and 503", route.line(&["retries"])));
        return Ok(());
    };
    let line = route.line(&["retries", "retryOn"]);
    let text = spec
        .as_str()
        .ok_or_else(|| {
            route
                .error(&["retries", "retryOn"], "`retries.retryOn` is not a string")
                .error
                .hint("`retryOn: gateway-error,connect-failure,503`")
        })
        .map_err(vs)?;
    let (mut names, mut codes): (Vec<&str>, Vec<u16>) = (Vec::new(), Vec::new());
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.parse::<u16>() {
            Ok(code) if (100..=599).contains(&code) => codes.push(code),
            _ => names.push(part),
        }
    }
    if !codes.is_empty() && !names.contains(&"retriable-status-codes") {
        names.push("retriable-status-codes");
    }
    let mut unmodelled = Vec::new();
    out.config.retry_on = RetryOn::new(words(&names, &codes, &mut unmodelled));
    grpc_words(&names, line, out);
    for word in unmodelled {
        out.warnings.push(format!("line {line}: `retryOn: {word}` is not modelled (not an Envoy condition the harness produces): nothing is retried for it"));
    }
    if names.contains(&"retriable-status-codes") && codes.is_empty() {
        out.warnings.push(format!("line {line}: `retriable-status-codes` with no status code in `retryOn` retries no status: Istio replaces the default's 503 with the codes `retryOn` names"));
    }
    out.origin("retry_on", format!("line {line}: `retries.retryOn: {text}` (a bare status code becomes retriable-status-codes)"));
    Ok(())
}

/// What of `retries:` the model leaves out.
fn retries_unmodelled(route: &Route<'_>, map: &serde_yaml::Mapping, out: &mut Out) {
    let previous = map
        .get("retryIgnorePreviousHosts")
        .and_then(Value::as_bool)
        .unwrap_or(true);
    for key in map.keys().filter_map(Value::as_str) {
        let why = match key {
            "attempts" | "perTryTimeout" | "retryOn" | "backoff" => continue,
            "retryRemoteLocalities" => {
                "retries to other localities are not modelled: the harness's tiers are in one"
            }
            "retryIgnorePreviousHosts" if previous => {
                "retries go to hosts not tried yet (previous_hosts): the model's one next hop takes every try"
            }
            "retryIgnorePreviousHosts" => {
                "retries may go to the host just tried: as the model's one next hop does"
            }
            _ => "not modelled",
        };
        let line = route.line(&["retries", key]);
        out.warnings
            .push(format!("line {line}: `retries.{key}`: {why}"));
    }
    if !map.contains_key("retryIgnorePreviousHosts") {
        out.warnings.push(format!(
            "line {}: retries go to hosts not tried yet (Istio's previous_hosts): the model's one next hop takes every try",
            route.line(&["retries"])
        ));
    }
}

/// The route's `timeout`: all tries together, off unless set.
fn route_timeout(route: &Route<'_>, out: &mut Out) -> Result<(), IstioError> {
    match route.value.get("timeout") {
        None => {
            out.config.deadline = None;
            out.origin(
                "deadline",
                format!(
                    "Istio's default: http route `{}` sets no `timeout`, so the route has none",
                    route.label
                ),
            );
        }
        Some(t) => {
            let t = duration(route, &["timeout"], t)?;
            out.config.deadline = (!t.is_zero()).then_some(t);
            out.origin(
                "deadline",
                format!(
                    "line {}: the route's `timeout` bounds all tries",
                    route.line(&["timeout"])
                ),
            );
        }
    }
    Ok(())
}

/// A duration as Istio's CRDs take it (`2s`, `250ms`, `1.5s`, `1m`, `1h`).
fn duration(route: &Route<'_>, keys: &[&str], v: &Value) -> Result<Duration, IstioError> {
    let field = keys.join(".");
    let text = v.as_str().unwrap_or_default();
    let d = fault_server::duration::parse_duration(text)
        .map_err(|_| {
            route
                .error(keys, format!("`{field}` is not a duration"))
                .error
                .hint("Istio's durations have a unit: `2s`, `250ms`, `1m`")
        })
        .map_err(vs)?;
    super::at_most_a_year(d, &field).map_err(|p| route.error(keys, p.message))
}
