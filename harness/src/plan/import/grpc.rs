//! A gRPC service config (JSON) → the retry policy one method runs.
//!
//! The method's config is chosen as the service config spec says (grpc `service_config.proto`,
//! `MethodConfig.name`): an entry naming the service and the method wins over one naming
//! only the service (every method of it), which wins over one naming neither (the default
//! for every method); a name given twice makes gRPC reject the config, and so does this.
//! Its `retryPolicy` is read by gRFC A6 (attempts capped at the client's maximum of 5, the
//! backoff jittered ±20% as amended by grpc/proposal#452), the top-level `retryThrottling`
//! is A6's throttle, the method's `timeout` the deadline across attempts.

use std::time::Duration;

use chaos_policy::{
    Backoff, BudgetConfig, Jitter, PolicyConfig, RetryAfter, RetryCondition as C, RetryOn,
};
use serde_json::{Map, Value};

use super::{Imported, Problem, add_conditions, at_most_a_year, problem, proto_duration};

/// A6, "Limits on Retries and Hedges": `maxAttempts` above 5 is treated as 5.
const CLIENT_MAX_ATTEMPTS: u64 = 5;
/// grpc-go refuses `maxTokens` outside (0, 1000].
const MAX_TOKENS_LIMIT: f64 = 1000.0;
/// How many names a "no `methodConfig` matches" hint lists.
const HINT_NAMES: usize = 8;
/// A6's pushback has no ceiling; capped as the `grpc` preset caps it.
const PUSHBACK_MAX: Duration = Duration::from_secs(60);
/// A6 as amended: the capped backoff times `random(0.8, 1.2)`.
const JITTER_SPREAD: f64 = 0.2;

/// Each gRPC status code: the code itself, as a gRPC target answers it, then the HTTP
/// outcomes that stand for it against an HTTP target. A status's stand-in is the HTTP code
/// `google/rpc/code.proto` maps it to ("HTTP Mapping: 503 Service Unavailable", ...);
/// UNAVAILABLE also covers what a gRPC client reads as UNAVAILABLE from an intermediary that
/// sends no `grpc-status` (grpc `doc/http-grpc-status-mapping.md`: 429, 502, 503, 504),
/// transport failures and a refused stream, as the `grpc` preset does; DEADLINE_EXCEEDED
/// also covers an attempt that timed out.
pub(crate) const CODES: [(&str, u8, &[C]); 17] = [
    ("OK", 0, &[]),
    ("CANCELLED", 1, &[C::Grpc(1), C::Status(499)]),
    ("UNKNOWN", 2, &[C::Grpc(2), C::Status(500)]),
    ("INVALID_ARGUMENT", 3, &[C::Grpc(3), C::Status(400)]),
    (
        "DEADLINE_EXCEEDED",
        4,
        &[C::Grpc(4), C::Timeout, C::Status(504)],
    ),
    ("NOT_FOUND", 5, &[C::Grpc(5), C::Status(404)]),
    ("ALREADY_EXISTS", 6, &[C::Grpc(6), C::Status(409)]),
    ("PERMISSION_DENIED", 7, &[C::Grpc(7), C::Status(403)]),
    ("RESOURCE_EXHAUSTED", 8, &[C::Grpc(8), C::Status(429)]),
    ("FAILED_PRECONDITION", 9, &[C::Grpc(9), C::Status(400)]),
    ("ABORTED", 10, &[C::Grpc(10), C::Status(409)]),
    ("OUT_OF_RANGE", 11, &[C::Grpc(11), C::Status(400)]),
    ("UNIMPLEMENTED", 12, &[C::Grpc(12), C::Status(501)]),
    ("INTERNAL", 13, &[C::Grpc(13), C::Status(500)]),
    (
        "UNAVAILABLE",
        14,
        &[
            C::Grpc(14),
            C::GatewayError,
            C::Status(429),
            C::ConnectFailure,
            C::Reset,
            C::RefusedStream,
        ],
    ),
    ("DATA_LOSS", 15, &[C::Grpc(15), C::Status(500)]),
    ("UNAUTHENTICATED", 16, &[C::Grpc(16), C::Status(401)]),
];

/// The outcomes a retryable status code retries: by name in any case, with `-` or `_`
/// (`UNAVAILABLE`, `resource-exhausted`, as Envoy's `retry_on` spells them), or by number.
/// `None` for OK and for what is not a code.
pub(crate) fn code_conditions(code: &Value) -> Option<&'static [C]> {
    let entry = match code {
        Value::String(name) => {
            let name = name.trim().to_ascii_uppercase().replace('-', "_");
            CODES.iter().find(|(n, _, _)| *n == name)
        }
        Value::Number(n) => n
            .as_u64()
            .and_then(|n| CODES.iter().find(|(_, c, _)| u64::from(*c) == n)),
        _ => None,
    }?;
    (!entry.2.is_empty()).then_some(entry.2)
}

/// The policy `service`/`method` runs under the service config `text`.
pub(crate) fn import(text: &str, service: &str, method: Option<&str>) -> Result<Imported, Problem> {
    let root: Value = serde_json::from_str(text).map_err(|e| {
        problem(format!("the gRPC service config is not JSON: {e}"))
            .hint("a service config is a JSON object like `{ \"methodConfig\": [ ... ] }`")
    })?;
    let root = root
        .as_object()
        .ok_or_else(|| problem("the gRPC service config is not a JSON object"))?;
    let mut warnings = Vec::new();
    for key in root.keys() {
        if !matches!(key.as_str(), "methodConfig" | "retryThrottling") {
            warnings.push(format!(
                "service config `{key}` is not modelled (the harness has one connection pool and no load balancing)"
            ));
        }
    }
    let config = method_config(root, service, method)?;
    let target = match method {
        Some(m) => format!("{service}/{m}"),
        None => service.to_owned(),
    };
    let mut policy = PolicyConfig {
        max_attempts: 1,
        backoff: Backoff::none(),
        retry_on: RetryOn::new([]),
        ..PolicyConfig::default()
    };
    for (key, value) in config {
        match key.as_str() {
            "name" => {}
            "timeout" => policy.deadline = Some(duration(value, "timeout")?),
            "retryPolicy" => {
                retry_policy(value, &mut policy, &mut warnings)?;
            }
            "hedgingPolicy" => warnings.push(format!(
                "methodConfig for `{target}`: `hedgingPolicy` is not modelled: the policy does not hedge"
            )),
            other => warnings.push(format!(
                "methodConfig for `{target}`: `{other}` is not modelled"
            )),
        }
    }
    if let Some(throttling) = root.get("retryThrottling") {
        policy.budget = Some(retry_throttling(throttling, &mut warnings)?);
    }
    Ok(Imported {
        config: policy,
        warnings,
    })
}

/// The most specific `methodConfig` entry whose `name` matches.
fn method_config<'a>(
    root: &'a Map<String, Value>,
    service: &str,
    method: Option<&str>,
) -> Result<&'a Map<String, Value>, Problem> {
    let configs = match root.get("methodConfig") {
        None => &[][..],
        Some(Value::Array(list)) => list.as_slice(),
        Some(_) => return Err(problem("`methodConfig` is not a list")),
    };
    // In the config's order, for the hint; and as a set, since a config may name tens of
    // thousands of methods and each is checked against every other.
    let mut seen: Vec<(String, String)> = Vec::new();
    let mut unique: std::collections::HashSet<(String, String)> = std::collections::HashSet::new();
    // (rank, config): 3 names the method, 2 the whole service, 1 every service.
    let mut best: Option<(u8, &Map<String, Value>)> = None;
    for config in configs {
        let config = config
            .as_object()
            .ok_or_else(|| problem("a `methodConfig` entry is not an object"))?;
        let names = match config.get("name") {
            Some(Value::Array(names)) => names.as_slice(),
            None => &[][..],
            Some(_) => return Err(problem("a `methodConfig` entry's `name` is not a list")),
        };
        for name in names {
            let field = |key: &str| name.get(key).and_then(Value::as_str).unwrap_or_default();
            let (s, m) = (field("service"), field("method"));
            if s.is_empty() && !m.is_empty() {
                return Err(problem(format!(
                    "`methodConfig` name {{ method: \"{m}\" }} has no service"
                ))
                .hint("gRPC rejects a name with a method and no service; add `service`"));
            }
            if !unique.insert((s.to_owned(), m.to_owned())) {
                return Err(problem(format!(
                    "`methodConfig` names `{}` twice",
                    display_name(s, m)
                ))
                .hint("gRPC rejects a service config that names a method twice"));
            }
            seen.push((s.to_owned(), m.to_owned()));
            let rank = match (s, m) {
                ("", "") => 1,
                (s, "") if s == service => 2,
                (s, m) if s == service && Some(m) == method => 3,
                _ => 0,
            };
            if rank > best.map_or(0, |(r, _)| r) {
                best = Some((rank, config));
            }
        }
    }
    best.map(|(_, c)| c).ok_or_else(|| {
        let wanted = display_name(service, method.unwrap_or_default());
        // A config may name thousands of methods: the hint shows a few.
        let known: Vec<String> = seen
            .iter()
            .take(HINT_NAMES)
            .map(|(s, m)| display_name(s, m))
            .collect();
        let more = match seen.len().saturating_sub(HINT_NAMES) {
            0 => String::new(),
            n => format!(" and {n} more"),
        };
        problem(format!("no `methodConfig` matches `{wanted}`")).hint(if known.is_empty() {
            "the service config has no `methodConfig`".to_owned()
        } else {
            format!("the config names {}{more}", known.join(", "))
        })
    })
}

fn display_name(service: &str, method: &str) -> String {
    match (service, method) {
        ("", _) => "the default (every service)".to_owned(),
        (s, "") => format!("{s}/*"),
        (s, m) => format!("{s}/{m}"),
    }
}

fn duration(value: &Value, field: &str) -> Result<Duration, Problem> {
    let d = value.as_str().and_then(proto_duration).ok_or_else(|| {
        problem(format!("`{field}` is {value}: not a duration")).hint(format!(
            "gRPC writes durations as seconds with an `s`: `\"{field}\": \"0.1s\"`"
        ))
    })?;
    at_most_a_year(d, field)
}

fn positive_duration(policy: &Map<String, Value>, field: &str) -> Result<Duration, Problem> {
    let value = policy.get(field).ok_or_else(|| required(field))?;
    let d = duration(value, field)?;
    if d.is_zero() {
        return Err(problem(format!("`retryPolicy.{field}` is zero"))
            .hint("A6 requires a backoff greater than zero"));
    }
    Ok(d)
}

fn required(field: &str) -> Problem {
    problem(format!("`retryPolicy` has no `{field}`"))
        .hint("A6: maxAttempts, initialBackoff, maxBackoff, backoffMultiplier and retryableStatusCodes are required")
}

fn retry_policy(
    value: &Value,
    policy: &mut PolicyConfig,
    warnings: &mut Vec<String>,
) -> Result<(), Problem> {
    let rp = value
        .as_object()
        .ok_or_else(|| problem("`retryPolicy` is not an object"))?;
    let attempts = rp
        .get("maxAttempts")
        .ok_or_else(|| required("maxAttempts"))?;
    let attempts = attempts.as_u64().filter(|n| *n >= 2).ok_or_else(|| {
        problem(format!("`retryPolicy.maxAttempts` is {attempts}"))
            .hint("A6: maxAttempts is required and must be two or greater")
    })?;
    if attempts > CLIENT_MAX_ATTEMPTS {
        warnings.push(format!(
            "`retryPolicy.maxAttempts` {attempts} is read as {CLIENT_MAX_ATTEMPTS}, as gRPC clients cap it (A6)"
        ));
    }
    policy.max_attempts = u32::try_from(attempts.min(CLIENT_MAX_ATTEMPTS))
        .expect("at most CLIENT_MAX_ATTEMPTS, which fits");
    let initial = positive_duration(rp, "initialBackoff")?;
    let max = positive_duration(rp, "maxBackoff")?;
    let multiplier = rp
        .get("backoffMultiplier")
        .ok_or_else(|| required("backoffMultiplier"))?;
    let multiplier = multiplier.as_f64().filter(|m| *m >= 1.0).ok_or_else(|| {
        problem(format!("`retryPolicy.backoffMultiplier` is {multiplier}")).hint(
            "the harness models a backoff that grows or stays: give a multiplier of 1 or more",
        )
    })?;
    if max < initial {
        return Err(problem(format!(
            "`retryPolicy.maxBackoff` ({max:?}) is below `initialBackoff` ({initial:?})"
        ))
        .hint("raise maxBackoff to initialBackoff or more"));
    }
    policy.backoff = Backoff::exponential(initial, multiplier, max)
        .and_then(|b| b.with_jitter(Jitter::Proportional(JITTER_SPREAD)))
        .map_err(|e| problem(format!("`retryPolicy`: {e}")))?;
    let codes = match rp.get("retryableStatusCodes") {
        Some(Value::Array(codes)) if !codes.is_empty() => codes,
        _ => {
            return Err(
                problem("`retryPolicy.retryableStatusCodes` is missing or empty")
                    .hint("A6: it is required and non-empty, e.g. `[\"UNAVAILABLE\"]`"),
            );
        }
    };
    let mut conditions: Vec<C> = Vec::new();
    for code in codes {
        let found = code_conditions(code).ok_or_else(|| {
            problem(format!(
                "`retryableStatusCodes` has {code}: not a retryable status code"
            ))
            .hint("name a gRPC status code other than OK, e.g. \"UNAVAILABLE\" or 14")
        })?;
        add_conditions(&mut conditions, found);
    }
    policy.retry_on = RetryOn::new(conditions);
    // A6: grpc-retry-pushback-ms replaces the backoff; Retry-After stands for it here.
    policy.retry_after = RetryAfter::Honor { max: PUSHBACK_MAX };
    for (key, value) in rp {
        match key.as_str() {
            "maxAttempts"
            | "initialBackoff"
            | "maxBackoff"
            | "backoffMultiplier"
            | "retryableStatusCodes" => {}
            "perAttemptRecvTimeout" => {
                policy.attempt_timeout = Some(duration(value, "perAttemptRecvTimeout")?);
            }
            other => warnings.push(format!("`retryPolicy.{other}` is not modelled")),
        }
    }
    Ok(())
}

fn retry_throttling(value: &Value, warnings: &mut Vec<String>) -> Result<BudgetConfig, Problem> {
    let t = value
        .as_object()
        .ok_or_else(|| problem("`retryThrottling` is not an object"))?;
    let number = |key: &str| t.get(key).and_then(Value::as_f64);
    let max_tokens = number("maxTokens")
        .filter(|m| *m > 0.0 && *m <= MAX_TOKENS_LIMIT)
        .ok_or_else(|| {
            problem("`retryThrottling.maxTokens` is missing or out of range")
                .hint("gRPC takes maxTokens in (0, 1000]")
        })?;
    let token_ratio = number("tokenRatio").filter(|r| *r > 0.0).ok_or_else(|| {
        problem("`retryThrottling.tokenRatio` is missing or not above zero")
            .hint("A6: tokenRatio is a number above zero, e.g. 0.1")
    })?;
    for key in t.keys() {
        if !matches!(key.as_str(), "maxTokens" | "tokenRatio") {
            warnings.push(format!("`retryThrottling.{key}` is not modelled"));
        }
    }
    let budget = BudgetConfig::GrpcThrottle {
        max_tokens,
        token_ratio,
    };
    budget
        .build()
        .map_err(|e| problem(format!("`retryThrottling`: {e}")))?;
    Ok(budget)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // Tests: a panic is the failure report.

    use std::time::Duration;

    use chaos_policy::{
        Action, BudgetConfig, Client, Jitter, Method, Outcome, Policy, Reply, Request,
        RetryCondition as C, RetryOn, Start, Verdict,
    };
    use rand_chacha::ChaCha8Rng;
    use rand_core::SeedableRng;

    use super::import;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// A service config like the A6 example, with a method-specific entry, a service-wide
    /// one and a default.
    const CONFIG: &str = r#"{
      "loadBalancingConfig": [ { "round_robin": {} } ],
      "methodConfig": [
        { "name": [ { "service": "shop.Cart", "method": "Checkout" } ],
          "timeout": "2s",
          "waitForReady": true,
          "retryPolicy": { "maxAttempts": 7, "initialBackoff": "0.1s", "maxBackoff": "1s",
                           "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE", "RESOURCE_EXHAUSTED"] } },
        { "name": [ { "service": "shop.Cart" } ],
          "retryPolicy": { "maxAttempts": 3, "initialBackoff": "0.05s", "maxBackoff": "0.2s",
                           "backoffMultiplier": 1.5, "retryableStatusCodes": [14, "deadline-exceeded"],
                           "perAttemptRecvTimeout": "0.5s" } },
        { "name": [ {} ], "timeout": "10s" }
      ],
      "retryThrottling": { "maxTokens": 10, "tokenRatio": 0.1 }
    }"#;

    fn ok(service: &str, method: Option<&str>) -> super::Imported {
        import(CONFIG, service, method).unwrap_or_else(|p| panic!("{}", p.message))
    }

    #[test]
    fn the_most_specific_method_config_wins() {
        // (service, method) -> (max_attempts, deadline, attempt_timeout)
        let cases = [
            (("shop.Cart", Some("Checkout")), (5, Some(ms(2000)), None)),
            (("shop.Cart", Some("Add")), (3, None, Some(ms(500)))),
            (("shop.Cart", None), (3, None, Some(ms(500)))),
            (("shop.Search", Some("Find")), (1, Some(ms(10_000)), None)),
        ];
        for ((service, method), expected) in cases {
            let c = ok(service, method).config;
            assert_eq!(
                (c.max_attempts, c.deadline, c.attempt_timeout),
                expected,
                "{service} {method:?}"
            );
        }
    }

    #[test]
    fn a_retry_policy_reads_as_a6_says() {
        let imported = ok("shop.Cart", Some("Checkout"));
        let c = imported.config;
        assert_eq!(c.backoff.jitter(), Jitter::Proportional(0.2));
        assert_eq!(c.backoff.range(1, None), (ms(80), ms(120)));
        assert_eq!(c.backoff.range(9, None), (ms(800), ms(1200)));
        assert_eq!(
            c.retry_on,
            RetryOn::new([
                C::Grpc(14),
                C::GatewayError,
                C::Status(429),
                C::ConnectFailure,
                C::Reset,
                C::RefusedStream,
                C::Grpc(8),
            ])
        );
        assert_eq!(
            c.budget,
            Some(BudgetConfig::GrpcThrottle {
                max_tokens: 10.0,
                token_ratio: 0.1
            })
        );
        assert_eq!(
            imported.warnings,
            [
                "service config `loadBalancingConfig` is not modelled (the harness has one connection pool and no load balancing)",
                "`retryPolicy.maxAttempts` 7 is read as 5, as gRPC clients cap it (A6)",
                "methodConfig for `shop.Cart/Checkout`: `waitForReady` is not modelled",
            ]
        );
        let service_wide = ok("shop.Cart", None).config;
        assert_eq!(
            service_wide.retry_on,
            RetryOn::new([
                C::Grpc(14),
                C::GatewayError,
                C::Status(429),
                C::ConnectFailure,
                C::Reset,
                C::RefusedStream,
                C::Grpc(4),
                C::Timeout,
                C::Status(504)
            ])
        );
        assert_eq!(
            service_wide.backoff.ceiling(3),
            ms(112) + Duration::from_micros(500)
        );
    }

    #[test]
    fn status_codes_map_to_http_outcomes() {
        use serde_json::json;
        let cases = [
            (
                json!("UNAVAILABLE"),
                Some(
                    &[
                        C::Grpc(14),
                        C::GatewayError,
                        C::Status(429),
                        C::ConnectFailure,
                        C::Reset,
                        C::RefusedStream,
                    ][..],
                ),
            ),
            (
                json!(14),
                Some(
                    &[
                        C::Grpc(14),
                        C::GatewayError,
                        C::Status(429),
                        C::ConnectFailure,
                        C::Reset,
                        C::RefusedStream,
                    ][..],
                ),
            ),
            (
                json!("resource-exhausted"),
                Some(&[C::Grpc(8), C::Status(429)][..]),
            ),
            (
                json!("DEADLINE_EXCEEDED"),
                Some(&[C::Grpc(4), C::Timeout, C::Status(504)][..]),
            ),
            (json!("internal"), Some(&[C::Grpc(13), C::Status(500)][..])),
            (json!("ABORTED"), Some(&[C::Grpc(10), C::Status(409)][..])),
            (json!("CANCELLED"), Some(&[C::Grpc(1), C::Status(499)][..])),
            (
                json!("UNIMPLEMENTED"),
                Some(&[C::Grpc(12), C::Status(501)][..]),
            ),
            (json!("OK"), None),
            (json!(0), None),
            (json!(17), None),
            (json!("UNAVAILABLEX"), None),
        ];
        for (code, expected) in cases {
            assert_eq!(super::code_conditions(&code), expected, "{code}");
        }
    }

    #[test]
    fn a_config_of_many_methods_is_named_in_a_few_words() {
        let names: Vec<String> = (0..45_000)
            .map(|i| format!(r#"{{ "service": "svc{i}" }}"#))
            .collect();
        let text = format!(
            r#"{{ "methodConfig": [ {{ "name": [ {} ] }} ] }}"#,
            names.join(", ")
        );
        let problem = import(&text, "s", Some("m")).expect_err("nothing matches");
        let hint = problem.hint.expect("a hint");
        assert!(hint.ends_with("svc7/* and 44992 more"), "{hint}");
        assert!(hint.len() < 200, "{} bytes", hint.len());
    }

    #[test]
    fn invalid_configs_say_what_to_fix() {
        let with_policy = |rp: &str| {
            format!(
                r#"{{ "methodConfig": [ {{ "name": [ {{ "service": "s" }} ], "retryPolicy": {rp} }} ] }}"#
            )
        };
        let good = r#""initialBackoff": "0.1s", "maxBackoff": "1s", "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]"#;
        let cases = [
            ("{".to_owned(), "the gRPC service config is not JSON"),
            ("[]".to_owned(), "the gRPC service config is not a JSON object"),
            (
                r#"{ "methodConfig": [ { "name": [ { "service": "other" } ] } ] }"#.to_owned(),
                "no `methodConfig` matches `s/m`",
            ),
            (
                r#"{ "methodConfig": [ { "name": [ { "service": "s" }, { "service": "s" } ] } ] }"#
                    .to_owned(),
                "`methodConfig` names `s/*` twice",
            ),
            (with_policy(&format!(r#"{{ "maxAttempts": 1, {good} }}"#)), "`retryPolicy.maxAttempts` is 1"),
            (with_policy(r#"{ "maxAttempts": 3 }"#), "`retryPolicy` has no `initialBackoff`"),
            (
                with_policy(&format!(r#"{{ "maxAttempts": 3, {} }}"#, good.replace("\"1s\"", "\"10ms\""))),
                "`maxBackoff` is \"10ms\": not a duration",
            ),
            (
                with_policy(&format!(r#"{{ "maxAttempts": 3, {} }}"#, good.replace("\"1s\"", "\"315576000000s\""))),
                "`maxBackoff` is 315576000000 s: longer than a year",
            ),
            (
                with_policy(&format!(r#"{{ "maxAttempts": 3, {} }}"#, good.replace("[\"UNAVAILABLE\"]", "[\"OK\"]"))),
                "`retryableStatusCodes` has \"OK\"",
            ),
            (
                r#"{ "methodConfig": [ { "name": [ {} ] } ], "retryThrottling": { "maxTokens": 2000, "tokenRatio": 0.1 } }"#.to_owned(),
                "`retryThrottling.maxTokens` is missing or out of range",
            ),
        ];
        for (text, message) in cases {
            let problem = import(&text, "s", Some("m")).expect_err(&text);
            assert!(problem.message.starts_with(message), "{}", problem.message);
            assert!(
                problem.hint.is_some() || message.contains("JSON object"),
                "{message}"
            );
        }
    }

    /// The acceptance test of issue 10 in the pure core: A6's arithmetic, a full bucket of
    /// 10 that throttles at 5, gives 4 retries in a total outage, one request at a time.
    #[test]
    fn imported_throttling_gives_four_retries_in_a_total_outage() {
        let text = r#"{
          "methodConfig": [ { "name": [ { "service": "s" } ],
            "retryPolicy": { "maxAttempts": 5, "initialBackoff": "0.1s", "maxBackoff": "1s",
                             "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"] } } ],
          "retryThrottling": { "maxTokens": 10, "tokenRatio": 0.1 }
        }"#;
        let config = import(text, "s", Some("m")).unwrap().config;
        let mut client = Client::new(Policy::new(config).unwrap());
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut now = Duration::ZERO;
        let mut retries = 0;
        for _ in 0..20 {
            let (mut session, mut action) =
                client.start(Request::new(Method::Get), now, Start::default());
            let verdict = loop {
                action = match action {
                    Action::Send { .. } => {
                        now += ms(5);
                        let reply = Reply::bare(Outcome::Status(503));
                        client.on_reply(&mut session, now, reply, &mut rng)
                    }
                    Action::Wait { until } => {
                        now = until;
                        client.on_timer(&mut session, now)
                    }
                    Action::Done(verdict) => break verdict,
                };
            };
            assert!(matches!(verdict, Verdict::GaveUp { .. }), "{verdict:?}");
            retries += verdict.attempts() - 1;
        }
        assert_eq!(retries, 4, "retries in all");
    }
}
