//! Proxy tiers (`tiers: [ { name, nginx | haproxy: { config } } ]`): a plan reads the
//! user's nginx or HAProxy config into a tier's model, refuses to set what the config
//! decides, places a config's errors in the config, and `harness validate --explain`
//! shows the tier as resolved.

mod common;

use std::path::{Path, PathBuf};

use common::{BASE, harness, repo, scratch, stderr, write_plan};
use harness::plan::{TierKind, load};

/// `plans/stacks/` copied into `dir/stacks/`, as a plan beside it names it.
fn with_stacks(dir: &Path) {
    std::fs::create_dir_all(dir.join("stacks")).expect("mkdir");
    for file in ["nginx.conf", "haproxy.cfg"] {
        std::fs::copy(
            repo().join("plans/stacks").join(file),
            dir.join("stacks").join(file),
        )
        .expect("copy");
    }
}

/// A plan in a fresh `dir` with the stacks beside it: `tiers` and `policies` as given.
fn plan(name: &str, tiers: &str, rest: &str) -> (PathBuf, PathBuf) {
    let dir = scratch(&format!("proxy-tiers-{name}"));
    with_stacks(&dir);
    let path = write_plan(&dir, "plan.yaml", &format!("{BASE}tiers:\n{tiers}{rest}"));
    (dir, path)
}

const NGINX: &str = "  - { name: edge, nginx: { config: stacks/nginx.conf, location: /api } }\n";
const HAPROXY: &str = "  - { name: lb, haproxy: { config: stacks/haproxy.cfg } }\n";
const POLICY: &str = "policies: [ { name: p, max_attempts: 2, tiers: { api: same } } ]\n";

#[test]
fn a_plan_names_proxy_tiers_beside_relay_tiers() {
    let (_, path) = plan("mixed", &format!("{NGINX}  - api\n{HAPROXY}"), POLICY);
    let p = load(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(p.tiers, ["edge", "api", "lb"]);
    let kinds: Vec<Option<&str>> = p
        .tier_proxies
        .iter()
        .map(|t| t.as_ref().map(|t| t.model.kind.name()))
        .collect();
    assert_eq!(kinds, [Some("nginx"), None, Some("haproxy")]);
    let edge = p.tier_proxies[0].as_ref().expect("edge");
    assert_eq!(
        (
            edge.block.as_str(),
            edge.file.as_path(),
            edge.binary.as_ref()
        ),
        ("/api", Path::new("stacks/nginx.conf"), None)
    );
    assert_eq!(edge.model.tries, 3);
    let set: Vec<(TierKind, u32)> = p.policies[0]
        .tiers
        .iter()
        .map(|t| (t.kind, t.max_attempts()))
        .collect();
    assert_eq!(
        set,
        [
            (TierKind::Proxy, 3),
            (TierKind::Same, 2),
            (TierKind::Proxy, 3)
        ]
    );
    assert!(p.policies[0].tiers[0].proxy.is_some());
    // HAProxy's health checks are not modelled: a warning names the file and line.
    assert!(
        p.warnings.iter().any(|w| w.message.starts_with(
            "haproxy tier `lb`: stacks/haproxy.cfg:50: `server app1 127.0.0.1:8081 check`:"
        )),
        "{:?}",
        p.warnings
    );
}

#[test]
fn the_config_is_part_of_the_digest() {
    let (dir, path) = plan("digest", NGINX, POLICY.replace("api: same", "").as_str());
    let before = load(&path).expect("plan").digest();
    let conf = dir.join("stacks/nginx.conf");
    let text = std::fs::read_to_string(&conf)
        .expect("read")
        .replace("proxy_next_upstream_tries 3", "proxy_next_upstream_tries 2");
    std::fs::write(&conf, text).expect("write");
    assert_ne!(load(&path).expect("plan").digest(), before);
}

#[test]
fn what_the_config_decides_no_plan_key_sets() {
    let (_, path) = plan(
        "policy",
        NGINX,
        "policies: [ { name: p, tiers: { edge: same } } ]\n",
    );
    let e = load(&path).expect_err("a policy sets a proxy tier");
    assert_eq!(
        e.message,
        "`edge` is an nginx tier: its config decides its retries"
    );
    assert_eq!(e.line, Some(7));
    let (_, path) = plan(
        "fault",
        NGINX,
        &format!(
            "{}faults: [ {{ tier: edge, respond: {{ status: 503 }} }} ]\n",
            POLICY.replace("api: same", "")
        ),
    );
    let e = load(&path).expect_err("a fault at a proxy tier");
    assert!(e.message.starts_with("`edge` is an nginx tier"), "{e}");
    let (_, path) = plan(
        "h2",
        NGINX,
        &format!(
            "target: {{ protocol: http2 }}\n{}",
            POLICY.replace("api: same", "")
        ),
    );
    assert!(load(&path).expect_err("h2").message.contains("HTTP/1.1"));
    let (_, path) = plan(
        "unknown-key",
        "  - { name: edge, nginx: { config: stacks/nginx.conf, upstream: app } }\n",
        POLICY,
    );
    assert!(
        load(&path)
            .expect_err("unknown key")
            .message
            .contains("unknown field `upstream`")
    );
    let (_, path) = plan(
        "missing",
        "  - { name: edge, haproxy: { config: stacks/nope.cfg } }\n",
        POLICY,
    );
    let e = load(&path).expect_err("missing");
    assert_eq!(
        (e.file.file_name(), e.line),
        (Some("plan.yaml".as_ref()), Some(6)),
        "{e}"
    );
}

#[test]
fn validate_explain_shows_each_proxy_tier_as_resolved() {
    let (_, path) = plan(
        "explain",
        &format!("{NGINX}{HAPROXY}"),
        "policies: [ { name: p } ]\n",
    );
    let text = common::explained(&path);
    for line in [
        "tiers:   # as resolved: each proxy and mesh tier as its config makes it behave\n  - name: edge\n",
        "    nginx: { config: stacks/nginx.conf, location: /api }   # runs nginx on PATH, or /usr/sbin/nginx\n",
        "      - { name: \"127.0.0.1:8081\", weight: 1, max_fails: 3, fail_timeout: 30s, backup: false }   # line 36\n",
        "      - { name: \"127.0.0.1:8083\", weight: 1, max_fails: 1, fail_timeout: 10s, backup: true }   # line 39\n",
        "    retry_on: [connect-failure, lost, timeout, 502, 503]   # `proxy_next_upstream error timeout http_502 http_503` (line 56)\n",
        "    methods: idempotent   # never resends a POST, LOCK or PATCH once sent; `proxy_next_upstream error timeout http_502 http_503` (line 56)\n",
        "    tries: 3   # the first attempt included; `upstream app` (line 35)\n",
        "    try_timeout: 5s   # `proxy_read_timeout 5s` (line 47)\n",
        "    overall: 10s   #",
        "    next_peer: another   #",
        "    turnaround: 0s   #",
        "  - name: lb\n    haproxy: { config: stacks/haproxy.cfg, backend: app }",
        "    retry_on: [connect-failure, lost, timeout, 503]   # `retry-on conn-failure empty-response response-timeout 503` (line 42)\n",
        "    methods: any   #",
        "    tries: 3   # the first attempt included; `retries 2` (line 40)\n",
        "    next_peer: redispatch   # `option redispatch` (line 38)\n",
        "    turnaround: 1s   #",
    ] {
        assert!(text.contains(line), "{line}\nin\n{text}");
    }
    // The policies' block still reads back as a plan's: no proxy tier in a policy's tiers.
    assert!(!text.contains("edge: "), "{text}");
}

#[test]
fn an_error_in_a_config_is_shown_at_its_file_line_and_column() {
    let (dir, path) = plan(
        "bad-config",
        NGINX,
        POLICY.replace("api: same", "").as_str(),
    );
    let conf = dir.join("stacks/nginx.conf");
    let text = std::fs::read_to_string(&conf)
        .expect("read")
        .replace("proxy_pass http://app;", "proxy_pass http://apq;");
    std::fs::write(&conf, text).expect("write");
    let out = harness()
        .arg("validate")
        .arg(&path)
        .output()
        .expect("run harness");
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out).replace(&dir.display().to_string(), "$DIR");
    assert!(
        err.contains("error: $DIR/stacks/nginx.conf:50:24: `proxy_pass` names `apq`, which no `upstream` block defines\n  hint: did you mean `app`?"),
        "{err}"
    );
}

/// A live run of a proxy tier whose binary is not there stops before any load, says which
/// tier and what to install, and exits 3 (could not run); no proxy is needed to check it.
#[test]
fn a_live_run_without_the_proxy_binary_says_what_to_install() {
    let tiers = "  - { name: edge, nginx: { config: stacks/nginx.conf, location: /api, binary: /nonexistent/nginx } }\n";
    let (_, path) = plan("no-binary", tiers, "policies: [ { name: p } ]\n");
    let out = harness()
        .args(["chaos", "--quiet"])
        .arg(&path)
        .output()
        .expect("run harness");
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        err.contains("`binary: /nonexistent/nginx` is not a file: install nginx (`apt-get install nginx-light`)"),
        "{err}"
    );
}
