//! The real binary: exit codes, plan errors as users see them (insta snapshots), the
//! shipped plans, and Ctrl-C.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use common::{BASE, chaos_quietly, harness, repo, scratch, stderr, validate_error, write_plan};

#[test]
fn every_shipped_plan_validates() {
    let mut plans: Vec<PathBuf> = std::fs::read_dir(repo().join("plans"))
        .expect("plans/")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    plans.sort();
    assert!(plans.len() >= 2);
    let out = harness()
        .arg("validate")
        .args(&plans)
        .output()
        .expect("run harness");
    assert!(out.status.success(), "{}", stderr(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        stdout.lines().filter(|l| l.starts_with("ok: ")).count(),
        plans.len()
    );
}

#[test]
fn plan_schema_prints_a_valid_plan_that_the_plans_readme_shows() {
    let out = harness().arg("plan-schema").output().expect("run harness");
    assert!(out.status.success());
    let reference = String::from_utf8_lossy(&out.stdout).into_owned();
    let dir = scratch("plan-schema");
    let path = write_plan(&dir, "reference.yaml", &reference);
    let validated = harness()
        .arg("validate")
        .arg(&path)
        .output()
        .expect("run harness");
    assert!(validated.status.success(), "{}", stderr(&validated));
    // plans/README.md shows the same YAML, so the guide cannot drift from the loader.
    let readme = std::fs::read_to_string(repo().join("plans/README.md")).expect("plans/README.md");
    let block = readme
        .split("```yaml\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("a yaml block in plans/README.md");
    assert!(
        reference.ends_with(block),
        "plans/README.md and docs/plan-reference.yaml differ"
    );
}

/// Issue 50: a fault that sets a header framing the response (`content-length`,
/// `transfer-encoding`, ...) desynchronised kept-alive connections; a plan with one is
/// invalid, at the header's own line and column.
#[test]
fn a_fault_setting_a_framing_header_is_a_plan_error_at_its_place() {
    for (name, column) in [
        ("content-length", 40),
        ("Transfer-Encoding", 40),
        ("te", 40),
    ] {
        let said = validate_error(
            "framing",
            &format!(
                "{BASE}policies: [ {{ name: a }} ]\nfaults:\n  - name: drill\n    respond: {{ status: 200, headers: {{ {name}: '0' }} }}\n"
            ),
        );
        assert!(
            said.contains(&format!("$DIR/framing.yaml:8:{column}: faults[0].respond")),
            "{said}"
        );
        assert!(
            said.contains(&format!("`{}`", name.to_ascii_lowercase())),
            "{said}"
        );
        assert!(said.contains("frames the response"), "{said}");
    }
}

/// Issue 27: each preset's values, not only its sources: the `sre` preset says it has no
/// attempt timeout and no deadline.
#[test]
fn presets_show_every_field_of_their_policies() {
    let out = harness().arg("presets").output().expect("run harness");
    assert!(out.status.success(), "{}", stderr(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        stdout.matches("\n  policy:\n    max_attempts: ").count(),
        10,
        "{stdout}"
    );
    let sre = stdout.split("\nsre\n").nth(1).expect("the sre preset");
    assert!(
        sre.contains("    attempt_timeout: none   # no limit: an attempt waits until it is answered; a server that never answers holds it to the end of the drain\n    deadline: none   # no limit on the whole request"),
        "{sre}"
    );
    assert!(
        sre.contains("    budget: { kind: ttl_window, ratio: 0.1, min_per_sec: 0, ttl: 2m }\n"),
        "{sre}"
    );
}

#[test]
fn plan_errors_name_the_place_and_suggest_a_fix() {
    insta::assert_snapshot!(
        "misspelt_key",
        validate_error(
            "misspelt",
            &format!("{BASE}policies:\n  - name: a\n    max_atempts: 3\n")
        )
    );
    insta::assert_snapshot!(
        "probability_out_of_range",
        validate_error(
            "probability",
            &format!(
                "{BASE}policies: [ {{ name: a }} ]\nfaults:\n  - name: flaky\n    probability: 1.5\n    respond: {{ status: 503 }}\n"
            )
        )
    );
    insta::assert_snapshot!(
        "until_before_from",
        validate_error(
            "window",
            &format!(
                "{BASE}policies: [ {{ name: a }} ]\nfaults:\n  - name: late\n    from: 5s\n    until: 2s\n    respond: {{ status: 503 }}\n"
            )
        )
    );
    insta::assert_snapshot!(
        "gate_names_unknown_policy",
        validate_error(
            "gate",
            &format!(
                "{BASE}policies: [ {{ name: good }} ]\ngates:\n  - {{ metric: success_rate, min: 0.9, policy: godo }}\n"
            )
        )
    );
    insta::assert_snapshot!(
        "unknown_preset",
        validate_error(
            "preset",
            &format!("{BASE}policies:\n  - {{ name: a, preset: hystrix }}\n")
        )
    );
    insta::assert_snapshot!(
        "negative_budget_ratio",
        validate_error(
            "budget",
            &format!(
                "{BASE}policies:\n  - name: a\n    max_attempts: 3\n    budget:\n      ratio: -0.5\n"
            )
        )
    );
    insta::assert_snapshot!(
        "remote_target_refused",
        validate_error(
            "remote",
            &format!(
                "{BASE}target: {{ url: \"http://10.1.2.3:8080\" }}\npolicies: [ {{ name: a }} ]\n"
            )
        )
    );
    insta::assert_snapshot!(
        "remote_upstream_refused",
        validate_error(
            "upstream",
            &format!(
                "{BASE}target: {{ upstream: \"http://10.1.2.3:9000\" }}\npolicies: [ {{ name: a }} ]\n"
            )
        )
    );
    insta::assert_snapshot!(
        "upstream_and_url",
        validate_error(
            "both",
            &format!(
                "{BASE}target: {{ url: \"http://127.0.0.1:8080\", upstream: \"http://127.0.0.1:9000\" }}\npolicies: [ {{ name: a }} ]\n"
            )
        )
    );
    insta::assert_snapshot!(
        "reserved_header",
        validate_error(
            "header",
            "duration: 1s\nload:\n  rate: 10\n  requests: [ { name: r, path: /, headers: { Idempotency-Key: abc } } ]\npolicies: [ { name: a } ]\n"
        )
    );
    insta::assert_snapshot!(
        "control_path",
        validate_error(
            "control",
            "duration: 1s\nload:\n  rate: 10\n  requests: [ { name: r, path: /healthz } ]\npolicies: [ { name: a } ]\n"
        )
    );
    insta::assert_snapshot!(
        "no_connections",
        validate_error(
            "connections",
            "duration: 1s\nload:\n  rate: 10\n  max_connections: 0\n  requests: [ { name: r, path: / } ]\npolicies: [ { name: a } ]\n"
        )
    );
    insta::assert_snapshot!(
        "connections_not_a_number",
        validate_error(
            "connections-word",
            "duration: 1s\nload:\n  rate: 10\n  max_connections: lots\n  requests: [ { name: r, path: / } ]\npolicies: [ { name: a } ]\n"
        )
    );
    insta::assert_snapshot!(
        "per_attempt_over_http2",
        validate_error(
            "connections-h2",
            "duration: 1s\ntarget: { url: \"http://127.0.0.1:8080\", protocol: http2 }\nload:\n  rate: 10\n  max_connections: per_attempt\n  requests: [ { name: r, path: / } ]\npolicies: [ { name: a } ]\n"
        )
    );
    insta::assert_snapshot!(
        "no_arrivals",
        validate_error(
            "empty",
            "duration: 10s\nload:\n  stages: [ { hold: 10s } ]\n  requests: [ { name: r, path: / } ]\npolicies: [ { name: a } ]\n"
        )
    );
    insta::assert_snapshot!(
        "policy_name_not_a_token",
        validate_error(
            "policy-name",
            &format!("{BASE}policies: [ {{ name: \"naïve one\" }} ]\n")
        )
    );
    insta::assert_snapshot!(
        "misspelt_gate",
        validate_error(
            "gate-name",
            &format!("{BASE}policies: [ {{ name: a }} ]\ngates: [ no_retry_of_permanant ]\n")
        )
    );
    insta::assert_snapshot!(
        "bad_duration",
        validate_error(
            "duration",
            "duration: 10\nload:\n  rate: 10\n  requests: [ { name: r, path: / } ]\npolicies: [ { name: a } ]\n"
        )
    );
}

/// One `validate` reports every mistake of a plan, each at its line and column with what
/// to write instead: a misspelt key in `load`, a duration without a unit, two in one
/// policy, an unknown preset and an unknown metric.
#[test]
fn validate_reports_every_mistake_of_a_plan_in_one_run() {
    let said = validate_error(
        "every",
        "\
name: every
duration: 10
load:
  rate: 10
  arival: poisson
  requests:
    - name: read
      path: /items/{n}
policies:
  - name: naive
    max_attempts: 0
    backof: { fixed: 1s }
  - name: aws
    preset: aws-standrd
gates:
  - no_retry_of_permanent
  - { metric: sucess_rate, min: 0.5 }
",
    );
    let errors: Vec<&str> = said
        .lines()
        .filter_map(|l| l.strip_prefix("error: $DIR/every.yaml:"))
        .collect();
    let expected = [
        ("2:11", "has no unit", None),
        (
            "5:3",
            "unknown field `arival`",
            Some("did you mean `arrivals`?"),
        ),
        ("11:5", "`max_attempts` is 0", None),
        (
            "12:5",
            "unknown field `backof`",
            Some("did you mean `backoff`?"),
        ),
        (
            "14:5",
            "unknown preset `aws-standrd`",
            Some("did you mean `aws-standard`?"),
        ),
        (
            "17:3",
            "unknown metric `sucess_rate`",
            Some("did you mean `success_rate`?"),
        ),
    ];
    assert_eq!(errors.len(), expected.len(), "{said}");
    for (error, (at, what, _)) in errors.iter().zip(expected) {
        assert!(
            error.starts_with(&format!("{at}: ")) && error.contains(what),
            "expected {at}: {what}\n{said}"
        );
    }
    for (_, what, hint) in expected {
        if let Some(hint) = hint {
            let at = said.find(what).expect("the error");
            let next = said[at..].lines().nth(1).unwrap_or_default();
            assert_eq!(next, format!("  hint: {hint}"), "{said}");
        }
    }
    assert!(said.contains("every.yaml: 6 errors"), "{said}");
}

/// Past its cap, `validate` says it stopped, and still exits 2.
#[test]
fn validate_says_when_it_stopped_at_its_cap() {
    let policies: String = (0..harness::plan::MAX_ERRORS + 3)
        .map(|i| format!("  - name: p{i}\n    retry_on: [nope{i}]\n"))
        .collect();
    let said = validate_error("capped", &format!("{BASE}policies:\n{policies}"));
    let errors = said.lines().filter(|l| l.starts_with("error: ")).count();
    assert_eq!(errors, harness::plan::MAX_ERRORS, "{said}");
    assert!(
        said.contains("capped.yaml: stopped after 20 errors (the most one run reports); fix these and validate again for the rest"),
        "{said}"
    );
}

/// One mistake copied into every policy of the largest plan is one error with its
/// places, not the cap's worth of the same lines.
#[test]
fn one_mistake_in_every_policy_is_said_once_with_its_places() {
    let policies: String = (0..64)
        .map(|i| format!("  - name: p{i}\n    max_attempts: 0\n"))
        .collect();
    let said = validate_error("copied", &format!("{BASE}policies:\n{policies}"));
    let errors: Vec<&str> = said.lines().filter(|l| l.starts_with("error: ")).collect();
    assert_eq!(
        errors,
        [
            "error: $DIR/copied.yaml:7:5: policy `p0`: `max_attempts` is 0: a request needs at least one attempt (1 means never retry)"
        ],
        "{said}"
    );
    assert!(
        said.contains("  the same error also at 9:5, 11:5, 13:5, 15:5, 17:5, 19:5, 21:5, 23:5 and 55 more place(s)"),
        "{said}"
    );
    assert!(!said.contains("stopped after"), "{said}");
}

/// A request path out of normal form is refused at its place: the fault-server reads
/// `//x` as `/x`, and the simulator, which takes the path as written, would not.
#[test]
fn a_request_path_out_of_normal_form_is_refused_with_its_normal_form() {
    let said = validate_error(
        "unnormal",
        "duration: 1s\nload:\n  rate: 10\n  requests: [ { name: r, path: \"/api//%69tems/./{n}?q=1\" } ]\n",
    );
    assert!(
        said.contains("unnormal.yaml:4:")
            && said.contains(
                "is not in normal form: the fault-server reads it as `/api/items/{n}?q=1`"
            ),
        "{said}"
    );
}

/// A byte that is not UTF-8 is placed at its line and column, as an editor shows it.
#[test]
fn a_plan_that_is_not_utf8_is_refused_at_the_line_and_column_of_its_first_bad_byte() {
    let dir = scratch("not-utf8");
    let path = dir.join("latin1.yaml");
    let mut bytes = BASE.replace("name: r", "name: caf").into_bytes();
    let at = bytes
        .windows(3)
        .position(|w| w == b"caf")
        .expect("the name")
        + 3;
    bytes.insert(at, 0xe9);
    std::fs::write(&path, bytes).expect("write");
    let out = harness().arg("validate").arg(&path).output().expect("run");
    assert_eq!(out.status.code(), Some(2));
    let said = stderr(&out);
    assert!(
        said.contains("latin1.yaml:4:26: the plan is not UTF-8 text (byte 55)"),
        "{said}"
    );
}

#[test]
fn a_missing_plan_file_is_exit_2() {
    let out = harness()
        .args(["validate", "no/such/plan.yaml"])
        .output()
        .expect("run harness");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("cannot read the plan"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn failing_gates_exit_1_and_still_write_the_report() {
    let dir = scratch("gate-fails");
    let plan = write_plan(
        &dir,
        "fails.yaml",
        &format!(
            "name: fails\n{BASE}faults: [ {{ name: down, respond: {{ status: 503 }} }} ]\npolicies: [ {{ name: a }} ]\ngates: [ {{ metric: success_rate, min: 0.5 }} ]\n"
        ),
    );
    let out = chaos_quietly(&dir, &plan);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let report = dir.join("reports/fails/latest/report.json");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).expect("report.json"))
            .expect("json");
    assert_eq!(json["schema"], "chaos-report/v1");
    assert_eq!(json["verdict"], "fail");
    assert_eq!(json["policies"][0]["gates"][0]["pass"], false);
    for file in ["report.md", "report.html", "junit.xml"] {
        assert!(
            dir.join("reports/fails/latest").join(file).is_file(),
            "{file}"
        );
    }
}

#[test]
fn an_unreachable_target_is_exit_3() {
    // A port that was just free: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    let dir = scratch("unreachable");
    let plan = write_plan(
        &dir,
        "gone.yaml",
        &format!(
            "{BASE}target: {{ url: \"http://127.0.0.1:{port}\" }}\npolicies: [ {{ name: a }} ]\n"
        ),
    );
    let out = chaos_quietly(&dir, &plan);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(stderr(&out).contains("unreachable"), "{}", stderr(&out));
}

/// A relay told to forward to its own address would send every request round a loop:
/// refused before it listens, `localhost` and `127.0.0.1` alike.
#[test]
fn a_relay_forwarding_to_its_own_address_is_exit_2() {
    // Nothing listens: the command ends before it binds.
    for to in ["http://127.0.0.1:18081", "http://localhost:18081/"] {
        let out = harness()
            .args(["relay", "--listen", "127.0.0.1:18081", "--to", to])
            .output()
            .expect("run harness");
        assert_eq!(out.status.code(), Some(2), "{to}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(err.contains("own --listen address"), "{err}");
        assert!(err.contains("hint: point --to at the next hop"), "{err}");
    }
}

#[test]
fn an_unknown_policy_flag_is_exit_2() {
    let out = harness()
        .args(["chaos", "--policy", "nope"])
        .arg(repo().join("plans/smoke.yaml"))
        .output()
        .expect("run harness");
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("the plan has: budgeted, grpc"),
        "{}",
        stderr(&out)
    );
}

/// A plan of 60 s of arrivals: long enough that only an interruption ends it in a test.
fn long_plan(name: &str, policies: &str) -> String {
    format!(
        "name: {name}\nduration: 60s\nload:\n  rate: 50\n  requests: [ {{ name: r, path: / }} ]\npolicies: [ {policies} ]\n"
    )
}

/// `harness chaos [--quiet] PLAN`, run in `dir`, its output piped.
#[cfg(unix)]
fn spawn_chaos(dir: &Path, plan: &Path, quiet: bool) -> Child {
    let mut command = harness();
    command.current_dir(dir).arg("chaos");
    if quiet {
        command.arg("--quiet");
    }
    command
        .arg(plan)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn harness")
}

/// Ctrl-C, as a terminal sends it.
#[cfg(unix)]
fn interrupt(child: &Child) {
    send(child, "INT");
}

/// `kill -SIGNAL` to the child.
#[cfg(unix)]
fn send(child: &Child, signal: &str) {
    let status = Command::new("kill")
        .args([&format!("-{signal}"), &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
}

/// Waits for an interrupted run: exit 130, and `reports/NAME/latest/report.json` marked
/// aborted, which it returns.
#[cfg(unix)]
fn aborted(child: Child, dir: &Path, name: &str) -> (serde_json::Value, String) {
    let out = child.wait_with_output().expect("wait");
    assert_eq!(out.status.code(), Some(130), "{}", stderr(&out));
    let json: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join(format!("reports/{name}/latest/report.json")))
            .expect("report.json"),
    )
    .expect("json");
    assert_eq!(json["aborted"], true);
    (json, String::from_utf8_lossy(&out.stdout).into_owned())
}

#[cfg(unix)]
#[test]
fn ctrl_c_writes_an_aborted_report_and_exits_130() {
    let dir = scratch("interrupted");
    let plan = write_plan(
        &dir,
        "long.yaml",
        &long_plan("long", "{ name: a }, { name: b }"),
    );
    let mut child = spawn_chaos(&dir, &plan, false);
    // Wait until the run has started.
    let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
    let first = lines.next().expect("a line").expect("utf-8");
    assert!(first.starts_with("running policy `a`"), "{first}");
    interrupt(&child);
    let (json, stdout) = aborted(child, &dir, "long");
    assert_eq!(
        json["policies"].as_array().map(Vec::len),
        Some(1),
        "the second policy never ran"
    );
    assert!(stdout.contains("ABORTED"));
}

#[cfg(unix)]
#[test]
fn a_hang_up_writes_an_aborted_report_and_exits_130() {
    let dir = scratch("hung-up");
    let plan = write_plan(&dir, "hup.yaml", &long_plan("hup", "{ name: a }"));
    let mut child = spawn_chaos(&dir, &plan, false);
    // The terminal goes away (a dropped ssh session) once the run has started.
    let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
    let first = lines.next().expect("a line").expect("utf-8");
    assert!(first.starts_with("running policy `a`"), "{first}");
    send(&child, "HUP");
    let (json, stdout) = aborted(child, &dir, "hup");
    assert_eq!(json["policies"][0]["partial"], true);
    assert!(stdout.contains("ABORTED"));
}

/// Whether process `pid` has a handler for SIGINT (`SigCgt` in /proc/PID/status).
#[cfg(target_os = "linux")]
fn catches_sigint(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("SigCgt:"))
                .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        })
        .is_some_and(|mask| mask & (1 << (2 - 1)) != 0)
}

#[cfg(target_os = "linux")]
#[test]
fn ctrl_c_before_the_plan_is_even_read_still_writes_an_aborted_report() {
    use std::io::Write;
    let dir = scratch("interrupted-early");
    // The plan is a FIFO: the harness blocks reading it until the test writes, so the
    // signal provably arrives before anything of the run has started.
    let plan = dir.join("early.yaml");
    let made = Command::new("mkfifo").arg(&plan).status().expect("mkfifo");
    assert!(made.success());
    let mut child = spawn_chaos(&dir, &plan, true);
    let waited = std::time::Instant::now();
    while !catches_sigint(child.id()) {
        if waited.elapsed() > std::time::Duration::from_secs(20) {
            let _ = child.kill();
            panic!("the harness never installed a SIGINT handler before reading its plan");
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    interrupt(&child);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&plan)
        .and_then(|mut fifo| fifo.write_all(long_plan("early", "{ name: a }").as_bytes()))
        .expect("write the plan");
    aborted(child, &dir, "early");
}

#[cfg(unix)]
#[test]
fn ctrl_c_a_moment_after_start_writes_an_aborted_report() {
    let dir = scratch("interrupted-soon");
    let plan = write_plan(&dir, "soon.yaml", &long_plan("soon", "{ name: a }"));
    let child = spawn_chaos(&dir, &plan, true);
    std::thread::sleep(std::time::Duration::from_millis(300));
    interrupt(&child);
    aborted(child, &dir, "soon");
}

#[test]
fn every_header_of_the_wire_contract_is_refused_at_its_line_and_column() {
    use fault_server::wire;
    let names =
        wire::RESERVED
            .iter()
            .chain(&[wire::GAVE_UP, wire::FAULT, wire::DUPLICATE, "X-Chaos-Mine"]);
    for name in names {
        let text = format!(
            "duration: 1s\nload:\n  rate: 10\n  requests:\n    - name: r\n      path: /\n      headers:\n        x-tenant: a\n        {name}: b\npolicies: [ {{ name: a }} ]\n"
        );
        let error = validate_error("contract", &text);
        assert!(
            error.contains(&format!(
                "contract.yaml:9:9: header `{name}` is set by the harness or the HTTP stack"
            )),
            "{name}: {error}"
        );
    }
}

#[test]
fn a_counterexample_that_is_caught_passes_and_one_that_is_not_fails_the_plan() {
    // Every attempt is a 503. `storm` retries 3 times, so its amplification gate fails, as
    // it is expected to; `silent` never retries: its detector cannot fire, and a
    // counterexample whose detector is silent is the failure the nightly gate looks for.
    let dir = scratch("counterexample");
    let storm = "{ name: storm, max_attempts: 4, backoff: { fixed: 10ms }, expect: { fail: [amplification] } }";
    let silent = "{ name: silent, max_attempts: 1, expect: { fail: [amplification] } }";
    let write = |name: &str, policies: &str| {
        write_plan(
            &dir,
            &format!("{name}.yaml"),
            &format!(
                "name: {name}\n{BASE}faults: [ {{ name: down, respond: {{ status: 503 }} }} ]\npolicies: [ {policies} ]\ngates: [ {{ metric: amplification, max: 2 }} ]\n"
            ),
        )
    };
    let out = chaos_quietly(&dir, &write("caught", storm));
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), stderr(&out));
    assert_eq!(out.status.code(), Some(0), "{said}");
    let latest = dir.join("reports/caught/latest");
    let json: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(latest.join("report.json")).expect("report.json"),
    )
    .expect("json");
    assert_eq!(json["verdict"], "pass");
    assert_eq!(json["policies"][0]["gates"][0]["pass"], false);
    assert_eq!(json["policies"][0]["expect"]["met"], true);
    let md = std::fs::read_to_string(latest.join("report.md")).expect("report.md");
    assert!(md.contains("FAIL (expected)"), "{md}");

    // Not quiet: the terminal's lines are what a user reads.
    let out = harness()
        .current_dir(&dir)
        .arg("chaos")
        .arg(write("silent", &format!("{storm}, {silent}")))
        .output()
        .expect("run harness");
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), stderr(&out));
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains("expected `amplification` to fail: the detector did not fire"),
        "{said}"
    );
    let junit =
        std::fs::read_to_string(dir.join("reports/silent/latest/junit.xml")).expect("junit.xml");
    assert!(junit.contains("expected to fail"), "{junit}");
    assert_eq!(junit.matches("<failure").count(), 1, "{junit}");
}

#[test]
fn a_counterexample_that_also_fails_a_gate_it_does_not_name_fails_the_plan() {
    // Every attempt is a 503: `storm` fails `amplification`, as it says, and also
    // `success_rate`, which it does not name: that failure is nobody's expectation.
    let dir = scratch("counterexample-unnamed");
    let plan = write_plan(
        &dir,
        "unnamed.yaml",
        &format!(
            "name: unnamed\n{BASE}faults: [ {{ name: down, respond: {{ status: 503 }} }} ]\npolicies: [ {{ name: storm, max_attempts: 4, backoff: {{ fixed: 10ms }}, expect: {{ fail: [amplification] }} }} ]\ngates: [ {{ metric: amplification, max: 2 }}, {{ metric: success_rate, min: 0.99 }} ]\n"
        ),
    );
    let out = harness()
        .current_dir(&dir)
        .arg("chaos")
        .arg(&plan)
        .output()
        .expect("run harness");
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), stderr(&out));
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains("FAIL (expected) storm / amplification"),
        "{said}"
    );
    assert!(said.contains("FAIL storm / success_rate"), "{said}");
    assert!(said.contains("(1 unexpected)"), "{said}");
    let latest = dir.join("reports/unnamed/latest");
    let json: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(latest.join("report.json")).expect("report.json"),
    )
    .expect("json");
    assert_eq!(json["verdict"], "fail");
    assert_eq!(json["policies"][0]["expect"]["met"], true);
    let junit = std::fs::read_to_string(latest.join("junit.xml")).expect("junit.xml");
    assert_eq!(junit.matches("<failure").count(), 1, "{junit}");
    assert!(junit.contains("failures=\"1\""), "{junit}");
}
