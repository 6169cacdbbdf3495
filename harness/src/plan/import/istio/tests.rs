#![allow(clippy::unwrap_used)] // Tests: a panic is the failure report.

use std::time::Duration;

use chaos_policy::{BudgetConfig, Jitter, RetryCondition as C, RetryOn};

use super::{File, IstioImport, import};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn ok(vs: &str, dr: Option<&str>, route: Option<&str>) -> IstioImport {
    import(vs, dr, route).unwrap_or_else(|e| panic!("{e:?}"))
}

fn origin<'a>(i: &'a IstioImport, field: &str) -> &'a str {
    &i.origins
        .iter()
        .find(|o| o.field == field)
        .unwrap_or_else(|| panic!("no origin for {field}: {:?}", i.origins))
        .from
}

/// A Deployment, its Service and a VirtualService without `retries:`: what most meshes run.
const DEFAULT_VS: &str = "\
apiVersion: apps/v1
kind: Deployment
metadata: { name: reviews }
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: reviews
spec:
  hosts: [reviews]
  http:
    - name: default
      route:
        - destination: { host: reviews }
";

/// What every imported policy says of the fields Istio gives no key to.
const FIELDS: [&str; 10] = [
    "max_attempts",
    "attempt_timeout",
    "deadline",
    "retry_on",
    "backoff",
    "honor_retry_after",
    "retry_non_idempotent",
    "budget",
    "breaker",
    "honor_no_retry",
];

#[test]
fn no_retries_block_is_istios_default_for_every_method() {
    let i = ok(DEFAULT_VS, None, None);
    let c = &i.imported.config;
    assert_eq!(c.max_attempts, 3, "num_retries 2");
    assert!(c.retry_non_idempotent, "Istio has no method rule");
    assert_eq!(c.deadline, None, "the route timeout is off by default");
    assert_eq!(c.attempt_timeout, None);
    assert_eq!(c.backoff.base_and_cap(), (ms(25), ms(250)));
    assert_eq!(c.backoff.jitter(), Jitter::Full);
    let conditions = c.retry_on.conditions();
    for expected in [
        C::ConnectFailure,
        C::RefusedStream,
        C::Status(503),
        C::Grpc(14),
        C::Grpc(1),
    ] {
        assert!(
            conditions.contains(&expected),
            "{expected:?} in {conditions:?}"
        );
    }
    assert!(!conditions.contains(&C::Status(500)), "{conditions:?}");
    assert_eq!(
        c.budget,
        Some(BudgetConfig::Concurrency {
            percent: 0.0,
            min_concurrency: u32::MAX
        })
    );
    assert_eq!(i.route, "default");
    for field in FIELDS {
        origin(&i, field);
    }
    assert!(
        origin(&i, "max_attempts").starts_with("Istio's default: http route `default` (line 12)")
    );
    assert!(
        i.imported
            .warnings
            .iter()
            .any(|w| w.starts_with("line 12:") && w.contains("previous_hosts")),
        "{:?}",
        i.imported.warnings
    );
}

const VS: &str = "\
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata:
  name: ratings
spec:
  hosts: [ratings]
  http:
    - name: writes
      match: [ { method: { exact: POST } } ]
      timeout: 10s
      retries:
        attempts: 4
        perTryTimeout: 2s
        retryOn: gateway-error,connect-failure,429,503,bogus
        backoff: 50ms
        retryRemoteLocalities: true
      route:
        - destination: { host: ratings.prod.svc.cluster.local }
    - name: reads
      route:
        - destination: { host: ratings.prod.svc.cluster.local }
";

#[test]
fn attempts_count_retries_and_retry_on_takes_words_and_bare_codes() {
    let i = ok(VS, None, Some("writes"));
    let c = &i.imported.config;
    assert_eq!(c.max_attempts, 5, "attempts: 4 is four retries");
    assert_eq!(c.attempt_timeout, Some(ms(2000)));
    assert_eq!(c.deadline, Some(ms(10_000)));
    assert_eq!(c.backoff.base_and_cap(), (ms(50), ms(500)));
    assert_eq!(
        c.retry_on,
        RetryOn::new([
            C::GatewayError,
            C::ConnectFailure,
            C::Status(429),
            C::Status(503)
        ])
    );
    assert_eq!(
        origin(&i, "max_attempts"),
        "line 12: `retries.attempts: 4` counts retries: 5 tries in all"
    );
    assert!(origin(&i, "attempt_timeout").starts_with("line 13:"));
    assert!(origin(&i, "deadline").starts_with("line 10:"));
    assert!(origin(&i, "retry_on").starts_with("line 14:"));
    assert!(origin(&i, "backoff").starts_with("line 15:"));
    let warnings = &i.imported.warnings;
    for expected in [
        "line 14: `retryOn: bogus` is not modelled",
        "line 16: `retries.retryRemoteLocalities`",
        "line 11: retries go to hosts not tried yet",
    ] {
        assert!(
            warnings.iter().any(|w| w.starts_with(expected)),
            "{expected}: {warnings:?}"
        );
    }
    // The other route has no `retries:`: Istio's default, by name or by place.
    assert_eq!(ok(VS, None, Some("reads")).imported.config.max_attempts, 3);
    assert_eq!(
        ok(VS, None, Some("ratings/http[1]"))
            .imported
            .config
            .max_attempts,
        3
    );
}

#[test]
fn zero_or_unset_attempts_turn_retries_off() {
    for retries in ["{ attempts: 0 }", "{ perTryTimeout: 1s }"] {
        let vs = format!(
            "kind: VirtualService\nmetadata: {{ name: a }}\nspec:\n  http:\n    - retries: {retries}\n      route: [ {{ destination: {{ host: a }} }} ]\n"
        );
        let i = ok(&vs, None, None);
        assert_eq!(i.imported.config.max_attempts, 1, "{retries}");
        assert!(
            origin(&i, "max_attempts").contains("turns retries off"),
            "{retries}"
        );
    }
}

#[test]
fn a_destination_rule_limits_retries_in_flight() {
    let max = "kind: DestinationRule\nmetadata: { name: r }\nspec:\n  host: reviews\n  trafficPolicy:\n    connectionPool:\n      http: { maxRetries: 10, http2MaxRequests: 100 }\n    outlierDetection: { consecutive5xxErrors: 3 }\n";
    let i = ok(DEFAULT_VS, Some(max), None);
    assert_eq!(
        i.imported.config.budget,
        Some(BudgetConfig::Concurrency {
            percent: 0.0,
            min_concurrency: 10
        })
    );
    assert!(origin(&i, "budget").starts_with("line 7: `connectionPool.http.maxRetries: 10`"));
    let warnings = &i.rule_warnings;
    assert!(
        warnings
            .iter()
            .any(|w| w.starts_with("line 8: `outlierDetection` is not modelled")),
        "{warnings:?}"
    );
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("`connectionPool.http.http2MaxRequests` is not modelled")),
        "{warnings:?}"
    );
    // A retry budget (istio/api#3512) replaces maxRetries, as Envoy's does.
    let budget = "kind: DestinationRule\nmetadata: { name: r }\nspec:\n  host: reviews\n  trafficPolicy:\n    connectionPool: { http: { maxRetries: 10 } }\n    retryBudget: { percent: 25, minRetryConcurrency: 5 }\n";
    let i = ok(DEFAULT_VS, Some(budget), None);
    assert_eq!(
        i.imported.config.budget,
        Some(BudgetConfig::Concurrency {
            percent: 25.0,
            min_concurrency: 5
        })
    );
    assert!(origin(&i, "budget").starts_with("line 7:"));
    // Both kinds in one file: the rule comes from the VirtualService's own file.
    let both = format!("{DEFAULT_VS}---\n{budget}");
    let i = ok(&both, None, None);
    assert_eq!(
        i.imported.config.budget,
        Some(BudgetConfig::Concurrency {
            percent: 25.0,
            min_concurrency: 5
        })
    );
    assert!(
        origin(&i, "budget").starts_with("line 22:"),
        "{}",
        origin(&i, "budget")
    );
}

#[test]
fn errors_are_at_the_configs_own_line() {
    let bad_attempts = VS.replace("attempts: 4", "attempts: many");
    let bad_timeout = VS.replace("perTryTimeout: 2s", "perTryTimeout: 2");
    let bad_rule = "kind: DestinationRule\nspec:\n  trafficPolicy:\n    connectionPool:\n      http:\n        maxRetries: -1\n";
    type Case<'a> = (
        &'a str,
        Option<&'a str>,
        Option<&'a str>,
        File,
        usize,
        &'a str,
    );
    let cases: [Case<'_>; 7] = [
        (
            &bad_attempts,
            None,
            Some("writes"),
            File::VirtualService,
            12,
            "`retries.attempts` is not a whole number",
        ),
        (
            &bad_timeout,
            None,
            Some("writes"),
            File::VirtualService,
            13,
            "`retries.perTryTimeout` is not a duration",
        ),
        (
            VS,
            None,
            None,
            File::VirtualService,
            19,
            "http route `reads` retries unlike `writes`, the first: say which route with `route:`",
        ),
        (
            VS,
            None,
            Some("nope"),
            File::VirtualService,
            7,
            "no http route `nope` in the VirtualService",
        ),
        (
            "kind: Service\n---\nkind: Deployment\n",
            None,
            None,
            File::VirtualService,
            1,
            "the file holds no `kind: VirtualService` (its kinds: Service, Deployment)",
        ),
        (
            DEFAULT_VS,
            Some(bad_rule),
            None,
            File::DestinationRule,
            6,
            "`connectionPool.http.maxRetries` is not a whole number from 0 to 2147483647",
        ),
        (
            DEFAULT_VS,
            Some("kind: Service\n"),
            None,
            File::DestinationRule,
            1,
            "the file holds no `kind: DestinationRule` (its kinds: Service)",
        ),
    ];
    for (vs, dr, route, file, line, message) in cases {
        let e = import(vs, dr, route).expect_err(message);
        assert_eq!(
            (e.file, e.error.line, e.error.message.as_str()),
            (file, line, message)
        );
    }
    let hint = import(VS, None, None).unwrap_err().error.hint.unwrap();
    assert!(hint.contains("its routes: writes, reads"), "{hint}");
}
