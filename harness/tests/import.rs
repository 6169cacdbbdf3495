//! Policies imported from production configs (`import:`): where their errors point, what
//! plan keys override, the warnings they carry, and A6's arithmetic end to end.

mod common;

use std::path::Path;

use chaos_policy::{BudgetConfig, Jitter};
use common::{BASE, scratch, write_plan};
use harness::plan::load;

/// A gRPC service config with A6's example throttle and 5 attempts, and a short backoff so
/// that one request's retries end before the next request starts.
const GRPC: &str = r#"{
  "methodConfig": [ { "name": [ { "service": "shop.Cart" } ], "timeout": "2s",
    "retryPolicy": { "maxAttempts": 5, "initialBackoff": "0.01s", "maxBackoff": "0.05s",
                     "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"] } } ],
  "retryThrottling": { "maxTokens": 10, "tokenRatio": 0.1 },
  "healthCheckConfig": { "serviceName": "shop" }
}"#;

/// A plan in `dir` (as `plan.yaml`) whose one policy is `policy`, with the gRPC config
/// beside it as `production/grpc.json`.
fn plan_with(dir: &Path, policy: &str) -> std::path::PathBuf {
    write_config(dir);
    write_plan(dir, "plan.yaml", &format!("{BASE}policies:\n{policy}"))
}

/// The gRPC config as `production/grpc.json` in `dir`.
fn write_config(dir: &Path) {
    std::fs::create_dir_all(dir.join("production")).expect("mkdir");
    std::fs::write(dir.join("production/grpc.json"), GRPC).expect("write config");
}

#[test]
fn an_import_reads_files_beside_the_plan_and_plan_keys_override_it() {
    let dir = scratch("import-override");
    let path = plan_with(
        &dir,
        "  - name: a\n    import: { grpc_service_config: production/grpc.json, service: shop.Cart, method: Checkout }\n    max_attempts: 3\n  - name: b\n    import: { grpc_service_config: production/grpc.json, service: shop.Cart }\n",
    );
    let plan = load(&path).unwrap_or_else(|e| panic!("{e}"));
    let a = plan.policies[0].policy.config();
    let b = plan.policies[1].policy.config();
    assert_eq!(
        (a.max_attempts, b.max_attempts),
        (3, 5),
        "max_attempts overrides"
    );
    assert_eq!(b.backoff.jitter(), Jitter::Proportional(0.2));
    assert_eq!(b.deadline, Some(std::time::Duration::from_secs(2)));
    assert!(matches!(b.budget, Some(BudgetConfig::GrpcThrottle { .. })));
    assert_eq!(
        plan.warnings,
        [
            "policy `a` (import): service config `healthCheckConfig` is not modelled (the harness has one connection pool and no load balancing)",
            "policy `b` (import): service config `healthCheckConfig` is not modelled (the harness has one connection pool and no load balancing)",
        ]
    );
    // The imported file is part of the experiment's digest.
    let before = plan.digest();
    std::fs::write(
        dir.join("production/grpc.json"),
        GRPC.replace("\"2s\"", "\"3s\""),
    )
    .expect("rewrite");
    assert_ne!(load(&path).expect("still valid").digest(), before);
}

/// Issue 27: a block beside `import:` overrides the fields it names and keeps the rest;
/// one of another kind must be whole, and the error says what it replaces, where.
#[test]
fn a_block_beside_an_import_overrides_only_the_fields_it_names() {
    let dir = scratch("import-merge");
    let path = plan_with(
        &dir,
        "  - name: a\n    import: { grpc_service_config: production/grpc.json, service: shop.Cart }\n    budget: { max_tokens: 50 }\n    backoff: { exponential: { cap: 1s } }\n",
    );
    let plan = load(&path).unwrap_or_else(|e| panic!("{e}"));
    let a = plan.policies[0].policy.config();
    assert_eq!(
        a.budget,
        Some(BudgetConfig::GrpcThrottle {
            max_tokens: 50.0,
            token_ratio: 0.1
        })
    );
    assert_eq!(
        a.backoff.shape(),
        chaos_policy::BackoffShape::Exponential {
            base: std::time::Duration::from_millis(10),
            multiplier: 2.0,
            cap: std::time::Duration::from_secs(1)
        }
    );
    assert_eq!(a.backoff.jitter(), Jitter::Proportional(0.2));
    let path = plan_with(
        &dir,
        "  - name: a\n    import: { grpc_service_config: production/grpc.json, service: shop.Cart }\n    budget: { kind: token_bucket, max_tokens: 50 }\n",
    );
    let out = common::harness()
        .arg("validate")
        .arg(&path)
        .output()
        .expect("run harness");
    assert_eq!(out.status.code(), Some(2), "{}", common::stderr(&out));
    let stderr = common::stderr(&out);
    assert!(
        stderr.contains("plan.yaml:8:5: policy `a`: this token_bucket budget needs `ratio` (e.g. `ratio: 0.2`): it replaces the policy's grpc budget, so it is written whole"),
        "{stderr}"
    );
    assert!(
        stderr.contains("hint: the policy's budget is { kind: grpc, max_tokens: 10, token_ratio: 0.1 }; to change some of its fields give only grpc keys (max_tokens, token_ratio)"),
        "{stderr}"
    );
}

/// Issue 27: `validate --explain` writes every field of every policy as it resolved
/// (what an import hid: the deadline, the multiplier, the retry codes), as a `policies:`
/// block that a plan takes back as the same policies.
#[test]
fn validate_explain_writes_every_field_and_reads_back_as_the_same_policies() {
    let explain = |dir: &Path, plan: &Path| {
        let out = common::harness()
            .current_dir(dir)
            .args(["validate", "--explain"])
            .arg(plan)
            .output()
            .expect("run harness");
        assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let (ok, policies) = stdout.split_once('\n').expect("a first line");
        assert!(ok.starts_with("ok: "), "{stdout}");
        policies.to_owned()
    };
    let policies = explain(&common::repo(), Path::new("plans/rollout.yaml"));
    let prod_grpc = policies
        .split("  - name: ")
        .nth(1)
        .expect("prod-grpc first");
    for line in [
        "prod-grpc\n",
        "    # import: { grpc_service_config: production/grpc-service-config.json, service: shop.catalog.v1.CatalogService, method: GetItem }, then the plan's keys\n",
        "    max_attempts: 5\n",
        "    attempt_timeout: 1s\n",
        "    deadline: 2s\n",
        "    retry_on: [unavailable, gateway-error, 429, connect-failure, reset, refused-stream]\n",
        "    backoff: { exponential: { base: 100ms, multiplier: 2, cap: 1s }, jitter: { proportional: 0.2 } }\n",
        "    honor_retry_after: true\n    retry_after_max: 1m\n",
        "    budget: { kind: grpc, max_tokens: 10, token_ratio: 0.1 }\n",
        "    breaker: none   # never stops attempts\n",
    ] {
        assert!(prod_grpc.contains(line), "{line} in\n{prod_grpc}");
    }
    // Pasted into a plan without the imports, the same policies.
    let dir = scratch("import-explain");
    let path = write_plan(&dir, "pasted.yaml", &format!("{BASE}{policies}"));
    let without_origin = |text: &str| -> String {
        text.lines()
            .filter(|l| !l.trim_start().starts_with("# "))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(
        without_origin(&explain(&dir, &path)),
        without_origin(&policies)
    );
}

/// Issue 27: a whole Envoy `RouteConfiguration` is read: its one retrying route without
/// more ado, one of several by `route:`, and without it an error that names the routes.
#[test]
fn an_envoy_route_configuration_is_read_by_route_name() {
    let dir = scratch("import-route-config");
    std::fs::create_dir_all(dir.join("production")).expect("mkdir");
    std::fs::write(
        dir.join("production/routes.yaml"),
        "name: local_route\nvirtual_hosts:\n  - name: shop\n    domains: ['*']\n    retry_policy: { retry_on: 5xx, num_retries: 2 }\n    routes:\n      - { name: items, match: { prefix: /items }, route: { cluster: items, timeout: 2s, retry_policy: { retry_on: gateway-error, num_retries: 3 } } }\n      - { name: orders, match: { prefix: /orders }, route: { cluster: orders } }\n",
    )
    .expect("write");
    let validate = |import: &str| {
        let path = write_plan(
            &dir,
            "plan.yaml",
            &format!("{BASE}policies:\n  - name: a\n    import: {import}\n"),
        );
        common::harness()
            .args(["validate", "--explain"])
            .arg(&path)
            .output()
            .expect("run harness")
    };
    let out = validate("{ envoy_route: production/routes.yaml }");
    assert_eq!(out.status.code(), Some(2), "{}", common::stderr(&out));
    let stderr = common::stderr(&out);
    assert!(
        stderr.contains("plan.yaml:7:5: policy `a`: production/routes.yaml: the Envoy route configuration has 2 routes with a retry policy: say which with `route:`"),
        "{stderr}"
    );
    assert!(
        stderr.contains(
            "hint: `import: { envoy_route: FILE, route: NAME }`; its routes: items, orders"
        ),
        "{stderr}"
    );
    let out = validate("{ envoy_route: production/routes.yaml, route: items }");
    assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("    # import: { envoy_route: production/routes.yaml, route: items }, then the plan's keys\n    max_attempts: 4\n    attempt_timeout: none   # an attempt waits as long as the deadline allows\n    deadline: 2s\n    retry_on: [gateway-error]\n"),
        "{stdout}"
    );
    // `orders` has no policy of its own: its virtual host's applies.
    let out = validate("{ envoy_route: production/routes.yaml, route: shop/orders }");
    assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("    max_attempts: 3\n    attempt_timeout: none   # an attempt waits as long as the deadline allows\n    deadline: 15s\n"),
        "{stdout}"
    );
}

/// Issue 27: `--sweep budget.token_ratio=...` on a policy imported from a gRPC config
/// (which writes no `budget:` of its own) sweeps the imported throttle's ratio.
#[test]
fn a_sweep_sets_one_field_of_an_imported_budget() {
    let dir = scratch("import-sweep");
    let out = common::harness()
        .current_dir(&dir)
        .arg("simulate")
        .arg(common::repo().join("plans/rollout.yaml"))
        .args([
            "--quiet",
            "--policy",
            "prod-grpc",
            "--sweep",
            "budget.token_ratio=0.05,0.5",
            "--out",
            "sweep",
        ])
        .output()
        .expect("run harness");
    assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
    for (value, ratio) in [("1-0.05", 0.05), ("2-0.5", 0.5)] {
        let text = std::fs::read_to_string(dir.join("sweep").join(value).join("report.json"))
            .expect("report.json");
        let report: serde_json::Value = serde_json::from_str(&text).expect("json");
        let policy = &report["policies"][0];
        assert!(
            policy["summary"]
                .as_str()
                .is_some_and(|s| s.contains(&format!("gRPC throttle 10 tokens, {ratio}/success"))),
            "{value}: {}",
            policy["summary"]
        );
        // report.json carries the policy as it resolved: the throttle's other field is the
        // import's, and so is everything else.
        let resolved = &policy["resolved"];
        assert_eq!(
            resolved["budget"],
            serde_json::json!({ "kind": "grpc", "max_tokens": 10.0, "token_ratio": ratio })
        );
        assert_eq!(resolved["deadline"], "2s");
        assert_eq!(
            resolved["retry_on"],
            serde_json::json!([
                "unavailable",
                "gateway-error",
                429,
                "connect-failure",
                "reset",
                "refused-stream"
            ])
        );
    }
}

#[test]
fn import_errors_point_at_the_import_key_with_a_hint() {
    let dir = scratch("import-errors");
    let cases = [
        (
            "  - name: a\n    import: { grpc_service_config: production/missing.json, service: s }\n",
            "policy `a`: cannot read `production/missing.json`",
            "relative to the plan file",
        ),
        (
            "  - name: a\n    import: { grpc_service_config: production/grpc.json, service: shop.Orders, method: Get }\n",
            "policy `a`: production/grpc.json: no `methodConfig` matches `shop.Orders/Get`",
            "the config names shop.Cart/*",
        ),
        (
            "  - name: a\n    import: { grpc_service_config: production/grpc.json }\n",
            "policy `a`: a gRPC import needs the `service`",
            "service: shop.Cart",
        ),
        (
            "  - name: a\n    preset: grpc\n    import: { grpc_service_config: production/grpc.json, service: shop.Cart }\n",
            "policy `a` has both `import` and `preset`",
            "drop `preset:`",
        ),
        (
            "  - name: a\n    import: { grpc_service_config: production/grpc.json, envoy_route: r.yaml, service: s }\n",
            "policy `a`: an import names one source",
            "envoy_route",
        ),
    ];
    for (policy, message, hint) in cases {
        let path = plan_with(&dir, policy);
        let error = load(&path).expect_err(policy);
        let line = if policy.contains("preset") { 8 } else { 7 };
        assert_eq!((error.line, error.column), (Some(line), Some(5)), "{error}");
        assert!(error.message.starts_with(message), "{error}");
        assert!(
            error.hint.as_deref().unwrap_or_default().contains(hint),
            "{error}"
        );
    }
    // Bad JSON: the message carries the JSON's own line and column.
    let path = write_plan(
        &dir,
        "plan.yaml",
        &format!(
            "{BASE}policies:\n  - name: a\n    import: {{ grpc_service_config: production/bad.json, service: s }}\n"
        ),
    );
    std::fs::write(
        dir.join("production/bad.json"),
        "{\n  \"methodConfig\": [,]\n}",
    )
    .expect("write");
    let error = load(&path).expect_err("bad JSON");
    assert_eq!((error.line, error.column), (Some(7), Some(5)));
    assert!(
        error.message.contains("not JSON") && error.message.contains("line 2 column"),
        "{error}"
    );
}

#[test]
fn validate_names_what_an_import_cannot_model() {
    let out = common::harness()
        .current_dir(common::repo())
        .args(["validate", "plans/rollout.yaml"])
        .output()
        .expect("run harness");
    assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
    let stderr = common::stderr(&out);
    assert!(
        stderr.contains("warning: plans/rollout.yaml: policy `prod-envoy` (import): `retry_policy.retry_host_predicate` is not modelled"),
        "{stderr}"
    );
    assert!(
        stderr.contains(
            "policy `prod-grpc` (import): service config `loadBalancingConfig` is not modelled"
        ),
        "{stderr}"
    );
}

#[test]
fn a_huge_or_absurd_config_gets_a_short_located_error() {
    let dir = scratch("import-huge");
    std::fs::create_dir_all(dir.join("production")).expect("mkdir");
    // 45,000 method names (945 KB), none of them the one asked for.
    let names: Vec<String> = (0..45_000)
        .map(|i| format!(r#"{{"service":"s{i:05}"}}"#))
        .collect();
    std::fs::write(
        dir.join("production/many.json"),
        format!(
            r#"{{ "methodConfig": [ {{ "name": [ {} ] }} ] }}"#,
            names.join(", ")
        ),
    )
    .expect("write");
    std::fs::write(
        dir.join("production/route.yaml"),
        "retry_policy: { num_retries: 4294967296 }\n",
    )
    .expect("write");
    for (import, said) in [
        (
            "{ grpc_service_config: production/many.json, service: shop.Cart }",
            "the config names s00000/*, s00001/*",
        ),
        (
            "{ envoy_route: production/route.yaml }",
            "`retry_policy.num_retries` is 4294967296: more than Envoy's limit",
        ),
    ] {
        let path = write_plan(
            &dir,
            "plan.yaml",
            &format!("{BASE}policies:\n  - name: a\n    import: {import}\n"),
        );
        let out = common::harness()
            .arg("validate")
            .arg(&path)
            .output()
            .expect("run harness");
        assert_eq!(out.status.code(), Some(2), "{}", common::stderr(&out));
        let stderr = common::stderr(&out);
        assert!(stderr.contains(said), "{stderr}");
        assert!(stderr.contains("plan.yaml:7:5"), "located: {stderr}");
        assert!(stderr.len() < 2_000, "{} bytes of stderr", stderr.len());
    }
}

/// The acceptance test of issue 10, end to end: an imported service config with
/// retryThrottling 10 / 0.1 and maxAttempts 5, every attempt answered 503, one request at a
/// time: the first request retries 4 times (10 → 5 tokens), and no request after it may.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn imported_grpc_throttling_sends_four_retries_in_a_total_outage() {
    let dir = scratch("import-e2e");
    write_config(&dir);
    let path = write_plan(
        &dir,
        "plan.yaml",
        "duration: 3s\ndrain: 1s\nload:\n  rate: 2\n  arrivals: uniform\n  requests: [ { name: r, path: /items/1 } ]\nfaults:\n  - { name: down, respond: { status: 503 } }\npolicies:\n  - name: imported\n    import: { grpc_service_config: production/grpc.json, service: shop.Cart, method: Get }\ngates:\n  - amplification_within_budget\n  - client_server_agree\n",
    );
    let plan = load(&path).unwrap_or_else(|e| panic!("{e}"));
    let report = harness::run::run(&plan, &harness::run::RunOptions::default())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let p = &report.policies[0];
    assert_eq!(p.logical, 6);
    assert_eq!(
        p.retries, 4,
        "A6: ceil(10/2) - 1 retries from a full bucket"
    );
    assert_eq!(p.succeeded, 0);
    assert!(p.gates.iter().all(|g| g.pass), "{:?}", p.gates);
    assert!(
        report
            .warnings
            .iter()
            .any(|w| w.contains("healthCheckConfig")),
        "{:?}",
        report.warnings
    );
}
