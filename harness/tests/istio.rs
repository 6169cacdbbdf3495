//! Istio tiers (`tiers: [ { name, istio: { virtual_service, destination_rule, route } } ]`)
//! and Istio imports (`import: { istio_virtual_service }`): the sidecar's retry policy
//! read from the team's manifests, run by the harness's relay live and simulated, the
//! gates naming the tier, `harness validate --explain` naming each field's origin, and a
//! manifest's errors placed at its own line.

mod common;

use std::path::{Path, PathBuf};

use common::{harness, policy, repo, scratch, stderr, write_plan};
use harness::plan::{TierKind, load};

/// `plans/stacks/istio-*.yaml` copied into `dir/stacks/`, as a plan beside it names them.
fn with_stacks(dir: &Path) {
    std::fs::create_dir_all(dir.join("stacks")).expect("mkdir");
    for file in ["istio-virtualservice.yaml", "istio-destination-rule.yaml"] {
        std::fs::copy(
            repo().join("plans/stacks").join(file),
            dir.join("stacks").join(file),
        )
        .expect("copy");
    }
}

const SIDECAR: &str = "tiers:\n  - name: sidecar\n    istio: { virtual_service: stacks/istio-virtualservice.yaml, destination_rule: stacks/istio-destination-rule.yaml }\n";

/// Unkeyed POSTs, half of them answered 503 by the leaf, through the sidecar; the client
/// itself never retries.
const POSTS: &str = "seed: 7\nduration: 1s\ndrain: 5s\nload:\n  rate: 40\n  arrivals: uniform\n  requests: [ { name: pay, method: POST, path: /payments, body: '{\"amount\":5}' } ]\nfaults:\n  - { name: brownout, probability: 0.5, respond: { status: 503 } }\npolicies:\n  - { name: careful, max_attempts: 1 }\ngates: [ no_retry_of_non_idempotent, client_server_agree ]\n";

fn plan_in(name: &str, text: &str) -> (PathBuf, PathBuf) {
    let dir = scratch(&format!("istio-{name}"));
    with_stacks(&dir);
    let path = write_plan(&dir, "plan.yaml", text);
    (dir, path)
}

/// The sidecar retried POSTs (Istio's default has no method rule), the client did not,
/// and the gate names the tier.
fn check_sidecar_retries_posts(report: &harness::report::Report) {
    let p = policy(report, "careful");
    assert_eq!(p.retries, 0, "the client never retries");
    let sidecar = &p.tiers[0];
    assert_eq!(sidecar.name, "sidecar");
    assert!(sidecar.retries > 0, "{sidecar:?}");
    assert!(sidecar.violations.retried_non_idempotent > 0, "{sidecar:?}");
    let gate = p
        .gates
        .iter()
        .find(|g| g.name == "no_retry_of_non_idempotent")
        .expect("the gate");
    assert!(!gate.pass, "{gate:?}");
    assert!(gate.detail.starts_with("sidecar sent "), "{gate:?}");
    let agree = p
        .gates
        .iter()
        .find(|g| g.name == "client_server_agree")
        .expect("the gate");
    assert!(agree.pass, "{agree:?}");
    assert_eq!(report.verdict, "fail");
}

#[test]
fn a_post_through_istios_default_is_retried_by_the_sidecar_simulated() {
    let (_, path) = plan_in("simulated", &format!("{SIDECAR}{POSTS}"));
    let plan = load(&path).unwrap_or_else(|e| panic!("{e}"));
    let tier = &plan.policies[0].tiers[0];
    assert_eq!(tier.kind, TierKind::Mesh);
    let c = tier.policy.config();
    assert_eq!((c.max_attempts, c.retry_non_idempotent), (3, true));
    check_sidecar_retries_posts(&common::simulated(&plan));
}

#[test]
fn a_post_through_istios_default_is_retried_by_the_sidecar_live() {
    let (_, path) = plan_in("live", &format!("{SIDECAR}{POSTS}"));
    let plan = load(&path).unwrap_or_else(|e| panic!("{e}"));
    check_sidecar_retries_posts(&common::live(&plan));
}

#[test]
fn no_policy_sets_what_the_mesh_config_decides() {
    let text = format!("{SIDECAR}{POSTS}").replace(
        "{ name: careful, max_attempts: 1 }",
        "{ name: careful, max_attempts: 1, tiers: { sidecar: same } }",
    );
    let (_, path) = plan_in("set", &text);
    let e = load(&path)
        .expect_err("the mesh config sets it")
        .to_string();
    assert!(
        e.contains("`sidecar` is an istio tier: its mesh config sets its retries"),
        "{e}"
    );
    assert!(e.contains("plan.yaml:14:48:"), "{e}");
}

#[test]
fn a_policy_imports_the_same_sidecar_policy() {
    let text = POSTS.replace(
        "{ name: careful, max_attempts: 1 }",
        "{ name: careful, import: { istio_virtual_service: stacks/istio-virtualservice.yaml, istio_destination_rule: stacks/istio-destination-rule.yaml } }",
    );
    let (_, path) = plan_in("import", &text);
    let plan = load(&path).unwrap_or_else(|e| panic!("{e}"));
    let c = plan.policies[0].policy.config();
    assert_eq!((c.max_attempts, c.retry_non_idempotent), (3, true));
    // `--explain` names each field's origin, and a plan key over the import as the key.
    let (_, over) = plan_in(
        "import-explain",
        &text.replace(
            "istio-destination-rule.yaml } }",
            "istio-destination-rule.yaml }, deadline: 5s }",
        ),
    );
    let explained = common::explained(&over);
    for line in [
        "    max_attempts: 3   # Istio's default: http route `default` (line 13) has no `retries:`: num_retries 2, 3 tries in all\n",
        "    deadline: 5s   # the plan's `deadline`, over the import\n",
        "; Istio's retries have no method rule: a POST is retried like a GET\n",
        "no amplification bound; Istio's default: the DestinationRule (line 4) sets no `maxRetries`",
    ] {
        assert!(explained.contains(line), "{line}\nin\n{explained}");
    }
    assert!(
        plan.warnings.iter().any(|w| w.message.contains(
            "stacks/istio-destination-rule.yaml: line 14: `outlierDetection` is not modelled"
        )),
        "{:?}",
        plan.warnings
    );
    // Mixed with another source, the import is refused.
    let mixed = text.replace(
        "import: { istio_virtual_service",
        "import: { envoy_route: r.yaml, istio_virtual_service",
    );
    let (_, path) = plan_in("import-mixed", &mixed);
    let e = load(&path).expect_err("two sources").to_string();
    assert!(e.contains("an import names one source"), "{e}");
}

#[test]
fn validate_explain_names_each_field_and_where_it_came_from() {
    let (_, path) = plan_in("explain", &format!("{SIDECAR}{POSTS}"));
    let out = harness()
        .args(["validate", "--explain"])
        .arg(&path)
        .output()
        .expect("run harness");
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    for line in [
        "tiers:   # as resolved: each proxy and mesh tier as its config makes it behave\n  - name: sidecar\n",
        "    istio: { virtual_service: stacks/istio-virtualservice.yaml, destination_rule: stacks/istio-destination-rule.yaml, route: default }",
        "    max_attempts: 3   # Istio's default: http route `default` (line 13) has no `retries:`: num_retries 2, 3 tries in all\n",
        "    attempt_timeout: none   # Istio's default:",
        "    deadline: none   # Istio's default: http route `default` sets no `timeout`",
        "    retry_on: [connect-failure, refused-stream,",
        "    backoff: { envoy: { base: 25ms, cap: 250ms }, jitter: full }   # Envoy's default",
        "    honor_retry_after: false   # ",
        "    retry_non_idempotent: true   # Istio's retries have no method rule",
        "    budget: { kind: envoy_concurrency, percent: 0, min_concurrency: 4294967295 }   # Istio's default: the DestinationRule (line 4) sets no `maxRetries`",
        "    breaker: none   # ",
        "    honor_no_retry: false   # ",
    ] {
        assert!(text.contains(line), "{line}\nin\n{text}");
    }
    // The policies' block still reads back as a plan's: no mesh tier in a policy's tiers.
    assert!(!text.contains("sidecar: "), "{text}");
    let warnings = stderr(&out);
    assert!(
        warnings.contains("istio tier `sidecar`: stacks/istio-virtualservice.yaml: line 13: http route `default` has no `retries:`"),
        "{warnings}"
    );
}

#[test]
fn an_error_in_a_manifest_is_shown_at_its_file_line_and_column() {
    let (dir, path) = plan_in("bad", &format!("{SIDECAR}{POSTS}"));
    let vs = dir.join("stacks/istio-virtualservice.yaml");
    let text = std::fs::read_to_string(&vs).expect("read").replace(
        "    - name: default\n",
        "    - name: default\n      retries: { attempts: 2, perTryTimeout: soon }\n",
    );
    std::fs::write(&vs, text).expect("write");
    let out = harness()
        .arg("validate")
        .arg(&path)
        .output()
        .expect("run harness");
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out).replace(&dir.display().to_string(), "$DIR");
    assert!(
        err.contains("error: $DIR/stacks/istio-virtualservice.yaml:14:31: `retries.perTryTimeout` is not a duration\n  hint: Istio's durations have a unit"),
        "{err}"
    );
}
