//! An Envoy route's `retry_policy` (YAML or JSON) and a cluster's circuit breakers → a policy.
//!
//! The route file holds a whole route configuration (`virtual_hosts:`, see
//! `route_config.rs` for how its route is chosen), a route (`{ match, route: {
//! retry_policy, timeout } }`), a route action (`{ cluster, timeout, retry_policy }`) or a
//! bare `retry_policy`. The cluster file,
//! optional, holds a cluster (or its `circuit_breakers` alone); without it Envoy's default
//! thresholds apply: at most 3 retries in flight (`max_retries`). Numbers and defaults are
//! those of Envoy's `route_components.proto`, `circuit_breaker.proto` and the router
//! filter docs (docs/research/presets.md, section 2).

use std::time::Duration;

use chaos_policy::{
    Backoff, BudgetConfig, Jitter, PolicyConfig, RetryAfter, RetryCondition as C, RetryOn,
};
use serde_yaml::{Mapping, Value};

use super::{
    Imported, Problem, add_conditions, at_most_a_year, problem, proto_duration, route_config,
};

/// `num_retries`: "optional and defaults to 1".
const DEFAULT_NUM_RETRIES: u64 = 1;
/// `retry_back_off.base_interval`: "the default base interval is 25 milliseconds".
const DEFAULT_BASE: Duration = Duration::from_millis(25);
/// The route timeout when unset: 15 s; it includes all retries.
const DEFAULT_ROUTE_TIMEOUT: Duration = Duration::from_secs(15);
/// `rate_limited_retry_back_off.max_interval`: defaults to 300 s.
const DEFAULT_RATE_LIMITED_MAX: Duration = Duration::from_secs(300);
/// `circuit_breakers.thresholds.max_retries`: "If not specified, the default is 3."
const DEFAULT_MAX_RETRIES: u64 = 3;
/// `retry_budget.budget_percent` defaults to 20%, `min_retry_concurrency` to 3.
const DEFAULT_BUDGET_PERCENT: f64 = 20.0;
const DEFAULT_MIN_RETRY_CONCURRENCY: u64 = 3;

/// The outcomes an Envoy `retry_on` condition retries. `None`: the harness cannot produce
/// what it waits for (a warning names it).
pub(crate) fn retry_on(condition: &str, codes: &[u16]) -> Option<Vec<C>> {
    Some(match condition {
        // "any 5xx response code, or does not respond at all (disconnect/reset/read
        // timeout). (Includes connect-failure and refused-stream)".
        "5xx" => vec![C::ServerError, C::Reset, C::Timeout, C::ConnectFailure],
        // "will only retry requests that result in a 502, 503, or 504".
        "gateway-error" => vec![C::GatewayError],
        // "does not respond at all (disconnect/reset/read timeout.)".
        "reset" => vec![C::Reset, C::Timeout],
        "connect-failure" => vec![C::ConnectFailure],
        // "if the upstream server resets the stream with a REFUSED_STREAM error code".
        "refused-stream" => vec![C::RefusedStream],
        // "Currently, the only response code in this category is 409."
        "retriable-4xx" => vec![C::Status(409)],
        "retriable-status-codes" => codes.iter().map(|c| C::Status(*c)).collect(),
        // The gRPC conditions read the response's grpc-status: the same table as gRPC's.
        "cancelled" | "deadline-exceeded" | "internal" | "resource-exhausted" | "unavailable" => {
            super::grpc::code_conditions(&serde_json::Value::String(condition.to_owned()))?.to_vec()
        }
        _ => return None,
    })
}

/// The policy an Envoy route (and, if given, its cluster) runs; `selected` names the
/// route of a route configuration that holds several.
pub(crate) fn import(
    route: &str,
    selected: Option<&str>,
    cluster: Option<&str>,
) -> Result<Imported, Problem> {
    let root = parse(route, "route")?;
    let mut warnings = Vec::new();
    let (policy, timeout) = find_retry_policy(&root, selected, &mut warnings)?;
    let mut config = PolicyConfig {
        deadline: match timeout {
            None => Some(DEFAULT_ROUTE_TIMEOUT),
            // "0s" disables the route timeout.
            Some(t) if t.is_zero() => None,
            Some(t) => Some(t),
        },
        ..PolicyConfig::default()
    };
    read_retry_policy(policy, &mut config, &mut warnings)?;
    config.budget = Some(match cluster {
        Some(text) => circuit_breakers(&parse(text, "cluster")?, &mut warnings)?,
        None => BudgetConfig::Concurrency {
            percent: 0.0,
            min_concurrency: DEFAULT_MAX_RETRIES as u32,
        },
    });
    Ok(Imported { config, warnings })
}

fn parse(text: &str, what: &str) -> Result<Value, Problem> {
    let value: Value = serde_yaml::from_str(text).map_err(|e| {
        problem(format!("the Envoy {what} is not YAML or JSON: {e}"))
            .hint("give the route (or its retry_policy) as Envoy's YAML or JSON config writes it")
    })?;
    if value.as_mapping().is_none() {
        return Err(problem(format!("the Envoy {what} is not a map")));
    }
    Ok(value)
}

fn get<'a>(map: &'a Value, key: &str) -> Option<&'a Value> {
    map.as_mapping()?.get(key)
}

fn keys(map: &Mapping) -> impl Iterator<Item = &str> {
    map.keys().filter_map(Value::as_str)
}

/// What of a route, its action or its virtual host the harness does not model.
fn unmodelled(parts: &[&Value], warnings: &mut Vec<String>) {
    for key in [
        "hedge_policy",
        "retry_policy_typed_config",
        "max_stream_duration",
    ] {
        if parts.iter().any(|p| get(p, key).is_some()) {
            warnings.push(format!("route `{key}` is not modelled"));
        }
    }
}

/// The `retry_policy` of a route configuration's route (`selected`, or its one route that
/// retries), a route, a route action or the file itself, and the route timeout.
fn find_retry_policy<'a>(
    root: &'a Value,
    selected: Option<&str>,
    warnings: &mut Vec<String>,
) -> Result<(&'a Mapping, Option<Duration>), Problem> {
    if let Some(chosen) = route_config::choose(root, selected)? {
        unmodelled(&[chosen.action, chosen.route, chosen.host], warnings);
        let timeout = get(chosen.action, "timeout")
            .map(|t| duration(t, "timeout"))
            .transpose()?;
        return Ok((chosen.policy, timeout));
    }
    if let Some(selected) = selected {
        let name = get(root, "name").and_then(Value::as_str);
        if name != Some(selected) {
            return Err(problem(format!(
                "`route: {selected}` picks a route of a route configuration, and this file is one route{}",
                name.map(|n| format!(" (`{n}`)")).unwrap_or_default()
            ))
            .hint("drop `route:`, or point `envoy_route` at the whole route configuration (`virtual_hosts:`)"));
        }
    }
    let action = get(root, "route")
        .filter(|r| r.is_mapping())
        .unwrap_or(root);
    if let Some(policy) = get(action, "retry_policy") {
        let policy = policy
            .as_mapping()
            .ok_or_else(|| problem("`retry_policy` is not a map"))?;
        unmodelled(&[action, root], warnings);
        let timeout = get(action, "timeout")
            .map(|t| duration(t, "timeout"))
            .transpose()?;
        return Ok((policy, timeout));
    }
    let map = root.as_mapping().expect("parse checked it is a map");
    if keys(map).any(|k| {
        matches!(
            k,
            "retry_on" | "num_retries" | "per_try_timeout" | "retry_back_off"
        )
    }) {
        return Ok((map, None));
    }
    Err(problem("no `retry_policy` in the Envoy route").hint(
        "give a route configuration (`virtual_hosts:`), a route (`route: { retry_policy: ... }`), a route action or the retry_policy itself; without one Envoy does not retry",
    ))
}

fn duration(value: &Value, field: &str) -> Result<Duration, Problem> {
    let d = value.as_str().and_then(proto_duration).ok_or_else(|| {
        problem(format!("`{field}` is not a duration")).hint(format!(
            "Envoy writes durations as seconds with an `s`: `{field}: 0.25s`"
        ))
    })?;
    at_most_a_year(d, field)
}

fn read_retry_policy(
    policy: &Mapping,
    config: &mut PolicyConfig,
    warnings: &mut Vec<String>,
) -> Result<(), Problem> {
    let field = |key: &str| policy.get(key);
    let num_retries = match field("num_retries") {
        None => DEFAULT_NUM_RETRIES,
        Some(n) => n.as_u64().ok_or_else(|| {
            problem("`retry_policy.num_retries` is not a whole number")
                .hint("e.g. `num_retries: 3`: attempts in all are num_retries + 1")
        })?,
    };
    // Envoy's num_retries is a UInt32Value: a larger one is refused by Envoy itself.
    let num_retries = u32::try_from(num_retries).map_err(|_| {
        problem(format!(
            "`retry_policy.num_retries` is {num_retries}: more than Envoy's limit, 4294967295"
        ))
        .hint("Envoy reads num_retries as a 32-bit number and rejects this route")
    })?;
    config.max_attempts = num_retries.checked_add(1).unwrap_or_else(|| {
        warnings.push(format!(
            "`retry_policy.num_retries` {num_retries} is read as {} attempts in all, one fewer than Envoy would make",
            u32::MAX
        ));
        u32::MAX
    });
    if let Some(t) = field("per_try_timeout") {
        let t = duration(t, "retry_policy.per_try_timeout")?;
        config.attempt_timeout = (!t.is_zero()).then_some(t);
    }
    let codes: Vec<u16> = match field("retriable_status_codes") {
        None => Vec::new(),
        Some(Value::Sequence(list)) => list
            .iter()
            .map(|c| {
                c.as_u64()
                    .and_then(|c| u16::try_from(c).ok())
                    .filter(|c| (100..=599).contains(c))
                    .ok_or_else(|| {
                        problem(format!(
                            "`retriable_status_codes` has {}: not an HTTP status",
                            serde_yaml::to_string(c).unwrap_or_default().trim()
                        ))
                    })
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(problem("`retriable_status_codes` is not a list")),
    };
    let names: Vec<String> = match field("retry_on") {
        None => Vec::new(),
        Some(v) => v
            .as_str()
            .ok_or_else(|| problem("`retry_on` is not a string"))?
            .split(',')
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
            .collect(),
    };
    if names.is_empty() {
        warnings.push("`retry_policy` has no `retry_on`: Envoy retries nothing".to_owned());
    }
    let mut conditions = Vec::new();
    for name in &names {
        match retry_on(name, &codes) {
            Some(found) => add_conditions(&mut conditions, &found),
            None => warnings.push(format!(
                "`retry_on: {name}` is not modelled (the harness sends no Envoy headers): nothing is retried for it"
            )),
        }
    }
    if !codes.is_empty() && !names.iter().any(|n| n == "retriable-status-codes") {
        warnings.push(
            "`retriable_status_codes` is ignored, as Envoy ignores it without `retry_on: retriable-status-codes`".to_owned(),
        );
    }
    config.retry_on = RetryOn::new(conditions);
    config.backoff = back_off(field("retry_back_off"))?;
    config.retry_after = RetryAfter::Ignore;
    if let Some(limited) = field("rate_limited_retry_back_off") {
        config.retry_after = rate_limited(limited, warnings)?;
    }
    for key in keys(policy) {
        if !matches!(
            key,
            "retry_on"
                | "num_retries"
                | "per_try_timeout"
                | "retry_back_off"
                | "rate_limited_retry_back_off"
                | "retriable_status_codes"
        ) {
            warnings.push(format!("`retry_policy.{key}` is not modelled"));
        }
    }
    Ok(())
}

/// Envoy's fully jittered `(2^k − 1)·base`, capped at `max_interval` (default 10 × base).
fn back_off(spec: Option<&Value>) -> Result<Backoff, Problem> {
    let (base, max) = match spec {
        None => (DEFAULT_BASE, None),
        Some(b) => {
            let base = get(b, "base_interval").ok_or_else(|| {
                problem("`retry_back_off` has no `base_interval`")
                    .hint("Envoy requires it: `retry_back_off: { base_interval: 0.025s }`")
            })?;
            let base = duration(base, "retry_back_off.base_interval")?;
            let max = get(b, "max_interval")
                .map(|m| duration(m, "retry_back_off.max_interval"))
                .transpose()?;
            (base, max)
        }
    };
    let max = max.unwrap_or(base * 10);
    Backoff::envoy(base, max)
        .and_then(|b| b.with_jitter(Jitter::Full))
        .map_err(|e| {
            problem(format!("`retry_back_off`: {e}"))
                .hint("base_interval must be above zero and max_interval at least base_interval")
        })
}

/// `rate_limited_retry_back_off`: the reset headers a server sends. A `Retry-After` in
/// seconds is what the harness's server sends; it is honoured up to `max_interval`.
fn rate_limited(spec: &Value, warnings: &mut Vec<String>) -> Result<RetryAfter, Problem> {
    let max = get(spec, "max_interval")
        .map(|m| duration(m, "rate_limited_retry_back_off.max_interval"))
        .transpose()?
        .unwrap_or(DEFAULT_RATE_LIMITED_MAX);
    let headers = get(spec, "reset_headers")
        .and_then(Value::as_sequence)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let mut retry_after = false;
    for header in headers {
        let name = get(header, "name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let format = get(header, "format")
            .and_then(Value::as_str)
            .unwrap_or("SECONDS");
        if name.eq_ignore_ascii_case("retry-after") && format == "SECONDS" {
            retry_after = true;
        } else {
            warnings.push(format!(
                "`rate_limited_retry_back_off` reset header `{name}` ({format}) is not modelled: only Retry-After in seconds is"
            ));
        }
    }
    if !retry_after || max.is_zero() {
        return Ok(RetryAfter::Ignore);
    }
    warnings.push(format!(
        "`rate_limited_retry_back_off`: a Retry-After above max_interval ({max:?}) is capped here; Envoy discards it and backs off as usual"
    ));
    Ok(RetryAfter::Honor { max })
}

/// The DEFAULT priority's thresholds: a `retry_budget` (concurrent retries as a share of
/// active requests) or else `max_retries` (concurrent retries, default 3).
fn circuit_breakers(cluster: &Value, warnings: &mut Vec<String>) -> Result<BudgetConfig, Problem> {
    let breakers = get(cluster, "circuit_breakers").unwrap_or(cluster);
    let thresholds = match get(breakers, "thresholds") {
        None => &[][..],
        Some(Value::Sequence(list)) => list.as_slice(),
        Some(_) => return Err(problem("`circuit_breakers.thresholds` is not a list")),
    };
    let mut chosen = None;
    for t in thresholds {
        let priority = get(t, "priority")
            .and_then(Value::as_str)
            .unwrap_or("DEFAULT");
        if priority == "DEFAULT" {
            chosen = Some(t);
        } else {
            warnings.push(format!(
                "circuit_breakers thresholds for priority {priority} are not modelled: every request is DEFAULT"
            ));
        }
    }
    let Some(t) = chosen else {
        return Ok(BudgetConfig::Concurrency {
            percent: 0.0,
            min_concurrency: DEFAULT_MAX_RETRIES as u32,
        });
    };
    for key in t.as_mapping().map(keys).into_iter().flatten() {
        if key == "max_connections" {
            // A plan-wide key, not a policy's: the import can only point at it.
            warnings.push(
                "circuit_breakers `max_connections` is not imported: a policy holds no connections; set the plan's `load.max_connections` to cap them (attempts beyond it wait, as with Envoy's pending requests)".to_owned(),
            );
        } else if matches!(
            key,
            "max_pending_requests" | "max_requests" | "max_connection_pools"
        ) {
            warnings.push(format!(
                "circuit_breakers `{key}` is not modelled: only retries are limited"
            ));
        } else if !matches!(
            key,
            "priority" | "max_retries" | "retry_budget" | "track_remaining"
        ) {
            warnings.push(format!("circuit_breakers `{key}` is not modelled"));
        }
    }
    let whole = |v: Option<&Value>, default: u64, field: &str| -> Result<u32, Problem> {
        let n = match v {
            None => default,
            Some(v) => number(v)
                .filter(|n| n.fract() == 0.0 && *n >= 0.0)
                .map(|n| n as u64)
                .ok_or_else(|| problem(format!("`{field}` is not a whole number")))?,
        };
        // Envoy's circuit-breaker thresholds are UInt32Values.
        u32::try_from(n).map_err(|_| {
            problem(format!(
                "`{field}` is {n}: more than Envoy's limit, 4294967295"
            ))
            .hint("Envoy reads the thresholds as 32-bit numbers and rejects this cluster")
        })
    };
    let budget = match get(t, "retry_budget") {
        Some(b) => {
            if get(t, "max_retries").is_some() {
                warnings.push(
                    "circuit_breakers `max_retries` is ignored: Envoy applies the retry_budget instead".to_owned(),
                );
            }
            let percent = match get(b, "budget_percent") {
                None => DEFAULT_BUDGET_PERCENT,
                Some(p) => number(p).ok_or_else(|| {
                    problem("`retry_budget.budget_percent` is not a number")
                        .hint("`budget_percent: { value: 20 }`")
                })?,
            };
            BudgetConfig::Concurrency {
                percent,
                min_concurrency: whole(
                    get(b, "min_retry_concurrency"),
                    DEFAULT_MIN_RETRY_CONCURRENCY,
                    "retry_budget.min_retry_concurrency",
                )?,
            }
        }
        None => BudgetConfig::Concurrency {
            percent: 0.0,
            min_concurrency: whole(
                get(t, "max_retries"),
                DEFAULT_MAX_RETRIES,
                "circuit_breakers.max_retries",
            )?,
        },
    };
    budget
        .build()
        .map_err(|e| problem(format!("the cluster's retry budget: {e}")))?;
    Ok(budget)
}

/// A number, or a protobuf wrapper `{ value: N }` as Envoy writes `budget_percent`.
fn number(v: &Value) -> Option<f64> {
    v.as_f64()
        .or_else(|| get(v, "value").and_then(Value::as_f64))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // Tests: a panic is the failure report.

    use std::time::Duration;

    use chaos_policy::{BudgetConfig, Jitter, RetryAfter, RetryCondition as C, RetryOn};

    use super::import;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    const ROUTE: &str = "
match: { prefix: /api }
route:
  cluster: api
  timeout: 3s
  retry_policy:
    retry_on: 5xx,retriable-4xx,refused-stream,retriable-status-codes
    retriable_status_codes: [429]
    num_retries: 3
    per_try_timeout: 0.5s
    retry_back_off: { base_interval: 0.05s, max_interval: 1s }
    rate_limited_retry_back_off:
      reset_headers: [ { name: Retry-After, format: SECONDS } ]
      max_interval: 10s
    retry_host_predicate: [ { name: envoy.retry_host_predicates.previous_hosts } ]
";

    const CLUSTER: &str = "
name: api
circuit_breakers:
  thresholds:
    - priority: DEFAULT
      max_connections: 1000
      retry_budget: { budget_percent: { value: 25.0 }, min_retry_concurrency: 5 }
    - { priority: HIGH, max_retries: 10 }
";

    #[test]
    fn a_route_and_cluster_read_as_envoy_documents_them() {
        let imported =
            import(ROUTE, None, Some(CLUSTER)).unwrap_or_else(|p| panic!("{}", p.message));
        let c = imported.config;
        assert_eq!(c.max_attempts, 4);
        assert_eq!(c.attempt_timeout, Some(ms(500)));
        assert_eq!(c.deadline, Some(ms(3000)));
        assert_eq!(c.backoff.jitter(), Jitter::Full);
        let ceilings: Vec<u128> = (1..=6).map(|k| c.backoff.ceiling(k).as_millis()).collect();
        assert_eq!(ceilings, [50, 150, 350, 750, 1000, 1000]);
        assert_eq!(
            c.retry_on,
            RetryOn::new([
                C::ServerError,
                C::Reset,
                C::Timeout,
                C::ConnectFailure,
                C::Status(409),
                C::RefusedStream,
                C::Status(429)
            ])
        );
        assert_eq!(c.retry_after, RetryAfter::Honor { max: ms(10_000) });
        assert_eq!(
            c.budget,
            Some(BudgetConfig::Concurrency {
                percent: 25.0,
                min_concurrency: 5
            })
        );
        assert_eq!(
            imported.warnings,
            [
                "`rate_limited_retry_back_off`: a Retry-After above max_interval (10s) is capped here; Envoy discards it and backs off as usual",
                "`retry_policy.retry_host_predicate` is not modelled",
                "circuit_breakers thresholds for priority HIGH are not modelled: every request is DEFAULT",
                "circuit_breakers `max_connections` is not imported: a policy holds no connections; set the plan's `load.max_connections` to cap them (attempts beyond it wait, as with Envoy's pending requests)",
            ]
        );
    }

    #[test]
    fn defaults_are_envoys() {
        // A bare retry_policy, no cluster: 1 retry, 25 ms base to 250 ms, the route's 15 s
        // timeout, and the default circuit breaker's 3 retries in flight.
        let c = import("retry_on: gateway-error,unavailable\n", None, None)
            .unwrap()
            .config;
        assert_eq!(c.max_attempts, 2);
        assert_eq!(c.deadline, Some(Duration::from_secs(15)));
        assert_eq!(c.backoff.base_and_cap(), (ms(25), ms(250)));
        assert_eq!(
            c.retry_on,
            RetryOn::new([
                C::GatewayError,
                C::Grpc(14),
                C::Status(429),
                C::ConnectFailure,
                C::Reset,
                C::RefusedStream
            ])
        );
        assert_eq!(
            c.budget,
            Some(BudgetConfig::Concurrency {
                percent: 0.0,
                min_concurrency: 3
            })
        );
        // A route action with the timeout off, and a cluster with max_retries only.
        let imported = import(
            "{ \"cluster\": \"a\", \"timeout\": \"0s\", \"retry_policy\": { \"retry_on\": \"reset\", \"retriable_status_codes\": [503] } }",
            None,
            Some("circuit_breakers: { thresholds: [ { max_retries: 7 } ] }"),
        )
        .unwrap();
        assert_eq!(imported.config.deadline, None);
        assert_eq!(
            imported.config.retry_on,
            RetryOn::new([C::Reset, C::Timeout])
        );
        assert_eq!(
            imported.config.budget,
            Some(BudgetConfig::Concurrency {
                percent: 0.0,
                min_concurrency: 7
            })
        );
        assert_eq!(
            imported.warnings,
            [
                "`retriable_status_codes` is ignored, as Envoy ignores it without `retry_on: retriable-status-codes`"
            ]
        );
    }

    #[test]
    fn the_most_retries_envoy_takes_is_one_attempt_short_and_says_so() {
        let imported = import("num_retries: 4294967295\n", None, None).expect("Envoy takes it");
        assert_eq!(imported.config.max_attempts, u32::MAX);
        assert!(
            imported.warnings[0].contains("one fewer than Envoy would make"),
            "{:?}",
            imported.warnings
        );
    }

    #[test]
    fn invalid_routes_say_what_to_fix() {
        let cases = [
            ("route: [", None, "the Envoy route is not YAML or JSON"),
            ("- a\n", None, "the Envoy route is not a map"),
            (
                "match: { prefix: / }\nroute: { cluster: a }\n",
                None,
                "no `retry_policy`",
            ),
            (
                "num_retries: -1\n",
                None,
                "`retry_policy.num_retries` is not a whole number",
            ),
            (
                "per_try_timeout: 500ms\n",
                None,
                "`retry_policy.per_try_timeout` is not a duration",
            ),
            (
                "num_retries: 4294967296\n",
                None,
                "`retry_policy.num_retries` is 4294967296: more than Envoy's limit",
            ),
            (
                "per_try_timeout: 31536001s\n",
                None,
                "`retry_policy.per_try_timeout` is 31536001 s: longer than a year",
            ),
            (
                "retry_on: 5xx\n",
                Some("circuit_breakers: { thresholds: [ { max_retries: 1e12 } ] }"),
                "`circuit_breakers.max_retries` is 1000000000000: more than Envoy's limit",
            ),
            (
                "retry_back_off: { max_interval: 1s }\n",
                None,
                "`retry_back_off` has no `base_interval`",
            ),
            (
                "retry_back_off: { base_interval: 1s, max_interval: 0.5s }\n",
                None,
                "`retry_back_off`: backoff `cap`",
            ),
            (
                "retry_on: 5xx\n",
                Some(
                    "circuit_breakers: { thresholds: [ { retry_budget: { budget_percent: 150 } } ] }",
                ),
                "the cluster's retry budget",
            ),
        ];
        for (route, cluster, message) in cases {
            let problem = import(route, None, cluster).expect_err(route);
            assert!(
                problem.message.starts_with(message),
                "{route}: {}",
                problem.message
            );
        }
    }
}
