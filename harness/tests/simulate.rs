//! `harness simulate`: the real binary on the shipped plans, and the simulator's own
//! guarantees (determinism, the same report and gates as a live run, the sweep).

mod common;

use std::path::Path;

use common::{harness, repo, scratch, stderr};
use serde_json::Value;

fn simulate(dir: &Path, args: &[&str]) -> std::process::Output {
    harness()
        .current_dir(dir)
        .arg("simulate")
        .args(args)
        .output()
        .expect("run harness")
}

fn report(dir: &Path) -> Value {
    let text = std::fs::read_to_string(dir.join("report.json")).expect("report.json");
    serde_json::from_str(&text).expect("json")
}

/// The report without the two fields that say when it was made and which run it was.
fn figures(mut report: Value) -> String {
    let fields = report.as_object_mut().expect("an object");
    fields.remove("generated_at");
    let run_id = fields.remove("run_id");
    assert!(run_id.is_some_and(|id| id.as_str().is_some_and(|id| !id.is_empty())));
    report.to_string()
}

#[test]
fn the_same_plan_and_seed_give_byte_identical_figures() {
    let dir = scratch("simulate-determinism");
    let plan = repo().join("plans/outage.yaml");
    let plan = plan.to_str().expect("utf-8 path");
    for out in ["a", "b"] {
        let run = simulate(&dir, &["--quiet", plan, "--out", out]);
        assert_eq!(run.status.code(), Some(0), "{}", stderr(&run));
    }
    let (a, b) = (report(&dir.join("a")), report(&dir.join("b")));
    assert_eq!(a["mode"], "simulated");
    assert_eq!(
        a["verdict"], "pass",
        "the shipped demo passes simulated too"
    );
    assert_eq!(a["policies"].as_array().map(Vec::len), Some(5));
    assert_eq!(figures(a), figures(b));

    let other = simulate(&dir, &["--quiet", plan, "--out", "c", "--seed", "7"]);
    assert_eq!(other.status.code(), Some(0), "{}", stderr(&other));
    let c = report(&dir.join("c"));
    assert_eq!(c["plan"]["seed"], 7);
    assert_ne!(
        c["policies"][0]["attempts"],
        report(&dir.join("a"))["policies"][0]["attempts"],
        "another seed, other arrivals and draws"
    );
}

#[test]
fn a_simulated_run_counts_duplicate_side_effects_with_the_fault_servers_ledger() {
    let dir = scratch("simulate-duplicates");
    let plan = repo().join("plans/lost-responses.yaml");
    let run = simulate(
        &dir,
        &["--quiet", plan.to_str().expect("utf-8"), "--out", "r"],
    );
    assert_eq!(run.status.code(), Some(0), "{}", stderr(&run));
    let r = report(&dir.join("r"));
    let policy = |name: &str| {
        r["policies"]
            .as_array()
            .and_then(|all| all.iter().find(|p| p["name"] == name))
            .cloned()
            .expect("the policy")
    };
    let unsafe_one = policy("retries-posts");
    let safe = policy("safe");
    assert!(
        unsafe_one["violations"]["duplicate_side_effects"]
            .as_u64()
            .is_some_and(|n| n > 0),
        "retried POSTs without a key run twice: {unsafe_one}"
    );
    assert_eq!(safe["violations"]["duplicate_side_effects"], 0);
    // The client's count and the modelled server's ledger agree, as live.
    for p in [&unsafe_one, &safe] {
        assert_eq!(p["amplification"]["client"], p["amplification"]["server"]);
        assert_eq!(p["ledger"]["reconciled"], true, "{p}");
    }
}

#[test]
fn a_call_chain_multiplies_its_attempts_simulated_as_live() {
    let dir = scratch("simulate-chain");
    let plan = repo().join("plans/chain-storm.yaml");
    let run = simulate(
        &dir,
        &["--quiet", plan.to_str().expect("utf-8"), "--out", "r"],
    );
    assert_eq!(run.status.code(), Some(0), "{}", stderr(&run));
    let r = report(&dir.join("r"));
    let servers: Vec<u64> = r["policies"]
        .as_array()
        .expect("policies")
        .iter()
        .map(|p| {
            p["amplification"]["server"]
                .as_f64()
                .expect("server figure")
                .round() as u64
        })
        .collect();
    // Three tiers of three attempts each against a dead leaf: 3^3, and 4^3.
    assert_eq!(servers, [27, 64]);
}

#[test]
fn plans_the_simulator_cannot_model_and_bad_arguments_exit_2() {
    let dir = scratch("simulate-invalid");
    let black_box = common::write_plan(
        &dir,
        "box.yaml",
        "duration: 1s\ntarget: { url: \"http://127.0.0.1:9\", fault_server: false }\nload:\n  rate: 10\n  requests: [ { name: r, path: / } ]\npolicies: [ { name: p, max_attempts: 2 } ]\n",
    );
    let out = simulate(&dir, &[black_box.to_str().expect("utf-8")]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("black-box"), "{}", stderr(&out));

    let plan = repo().join("plans/outage.yaml");
    let plan = plan.to_str().expect("utf-8");
    let out = simulate(&dir, &[plan, "--policy", "nope"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("no policy of the plan is named"));

    let out = simulate(&dir, &[plan, "--sweep", "max_attempts=2,3"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("say which policy"),
        "{}",
        stderr(&out)
    );

    let out = simulate(&dir, &[plan, "--sweep", "naive.max_attempts=0"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("max_attempts` is 0"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_sweep_writes_one_comparison_and_a_report_per_value() {
    let dir = scratch("simulate-sweep");
    let plan = repo().join("plans/outage.yaml");
    let out = simulate(
        &dir,
        &[
            plan.to_str().expect("utf-8"),
            "--policy",
            "naive",
            "--sweep",
            "max_attempts=1,2,4",
            "--out",
            "sweep",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = std::fs::read_to_string(dir.join("sweep/sweep.json")).expect("sweep.json");
    let sweep: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(sweep["key"], "naive.max_attempts");
    let points = sweep["points"].as_array().expect("points");
    assert_eq!(points.len(), 3);
    let amplification: Vec<f64> = points
        .iter()
        .map(|p| p["amplification_server"].as_f64().expect("a figure"))
        .collect();
    assert!(
        (amplification[0] - 1.0).abs() < 1e-9,
        "one attempt: no retry: {amplification:?}"
    );
    assert!(
        amplification[0] < amplification[1] && amplification[1] < amplification[2],
        "more attempts, more load: {amplification:?}"
    );
    for i in ["1-1", "2-2", "3-4"] {
        let r = report(&dir.join("sweep").join(i));
        assert_eq!(r["mode"], "simulated");
    }
    let html = std::fs::read_to_string(dir.join("sweep/sweep.html")).expect("sweep.html");
    assert_eq!(html.matches("<svg").count(), 3);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("| 4 | naive |"), "{stdout}");
}

#[test]
fn a_sweep_without_out_lands_whole_in_its_own_directory_under_reports() {
    let dir = scratch("simulate-sweep-default");
    let plan = repo().join("plans/outage.yaml");
    let out = simulate(
        &dir,
        &[
            "--quiet",
            plan.to_str().expect("utf-8"),
            "--policy",
            "naive",
            "--sweep",
            "max_attempts=1,2",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let names: Vec<String> = std::fs::read_dir(dir.join("reports/outage"))
        .expect("reports/outage")
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    let [name] = names.as_slice() else {
        panic!("one directory and no hidden one: {names:?}")
    };
    assert!(name.starts_with("sweep-"), "{name}");
    let sweep = dir.join("reports/outage").join(name);
    for file in ["sweep.json", "sweep.md", "sweep.html"] {
        assert!(sweep.join(file).is_file(), "{file}");
    }
    assert_eq!(report(&sweep.join("2-2"))["mode"], "simulated");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&format!("{name}/sweep.html")),
        "the sweep's page is named: {stdout}"
    );
}

#[test]
fn a_sweep_that_cannot_go_where_asked_is_kept_in_a_temporary_directory_and_exits_3() {
    let dir = scratch("simulate-sweep-unwritable");
    let temp = dir.join("tmp");
    std::fs::create_dir_all(&temp).expect("a temporary directory of the test's own");
    // A directory cannot be made under a regular file.
    std::fs::write(dir.join("file"), "").expect("write");
    let plan = repo().join("plans/outage.yaml");
    let out = harness()
        .current_dir(&dir)
        .env("TMPDIR", &temp)
        .args(["simulate", "--quiet"])
        .arg(&plan)
        .args([
            "--policy",
            "naive",
            "--sweep",
            "max_attempts=1,2",
            "--out",
            "file/sweep",
        ])
        .output()
        .expect("run harness");
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let said = stderr(&out);
    assert!(
        said.contains("error: cannot write the sweep to file/sweep"),
        "{said}"
    );
    let instead = said
        .lines()
        .find_map(|l| l.trim().strip_prefix("the sweep was written to "))
        .and_then(|l| l.strip_suffix(" instead"))
        .unwrap_or_else(|| panic!("no fallback named: {said}"));
    let instead = Path::new(instead);
    assert!(instead.starts_with(&temp), "{}", instead.display());
    let text = std::fs::read_to_string(instead.join("sweep.json")).expect("sweep.json");
    let sweep: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(sweep["key"], "naive.max_attempts");
    assert_eq!(sweep["points"].as_array().map(Vec::len), Some(2));
    for file in [
        "sweep.md",
        "sweep.html",
        "1-1/report.json",
        "2-2/report.json",
    ] {
        assert!(instead.join(file).is_file(), "{file}");
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&instead.join("sweep.html").display().to_string()),
        "{stdout}"
    );
}

/// A plan of 15 relay tiers between the client and a leaf that fails every attempt, every
/// hop retrying up to 5 times at once behind a 60 s timeout: at worst 5^16 attempts at
/// the leaf per logical request, far more than any run's length lets happen.
fn deep_chain(name: &str, load: &str) -> String {
    let tiers: Vec<String> = (1..=15).map(|i| format!("t{i}")).collect();
    let same: Vec<String> = tiers.iter().map(|t| format!("{t}: same")).collect();
    format!(
        "name: {name}\nseed: 1\n{load}\ntiers: [{}]\nload:\n  rate: 10\n  requests: [ {{ name: read, path: \"/items/{{n}}\" }} ]\nfaults:\n  - {{ name: down, respond: {{ status: 503 }} }}\npolicies:\n  - name: five-everywhere\n    max_attempts: 5\n    backoff: none\n    attempt_timeout: 60s\n    tiers: {{ {} }}\n",
        tiers.join(", "),
        same.join(", ")
    )
}

/// The most events that waited at once, from the line `harness simulate` ends with.
fn peak_waiting(stderr: &str) -> usize {
    stderr
        .split("at most ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no `at most N waiting` in: {stderr}"))
}

#[test]
fn a_deep_chain_holds_events_for_its_requests_in_flight_not_for_every_attempt_sent() {
    let dir = scratch("simulate-deep-chain");
    let plan = common::write_plan(
        &dir,
        "deep.yaml",
        &deep_chain("deep", "duration: 500ms\ndrain: 100ms"),
    );
    let run = simulate(&dir, &[plan.to_str().expect("utf-8"), "--out", "r"]);
    assert_eq!(run.status.code(), Some(0), "{}", stderr(&run));
    let r = report(&dir.join("r"));
    let p = &r["policies"][0];
    let logical = p["logical"].as_u64().expect("logical");
    assert!(logical > 0 && p["offered"] == logical, "{p}");
    let tiers = p["tiers"].as_array().expect("tiers");
    assert_eq!(tiers.len(), 15);
    // What each hop sent, the next received (the leaf may not have read the last few
    // when the run stopped, as live).
    assert_eq!(tiers[0]["received"], logical);
    for pair in tiers.windows(2) {
        assert_eq!(pair[0]["sent"], pair[1]["received"], "{p}");
    }
    assert!(
        p["leaf_amplification"].as_f64().is_some_and(|a| a > 1000.0),
        "the leaf took thousands of attempts a request: {p}"
    );
    // Each hop of a request holds at most its attempt's timeout and the one event that
    // moves the request on; a timeout whose attempt was answered is not kept. Before,
    // every attempt sent left its timeout waiting for its full 60 s: 7,955 here, and the
    // issue's plan died at 3 GB.
    let hops = 16;
    let bound = 2 * hops * logical as usize;
    let peak = peak_waiting(&stderr(&run));
    assert!(peak <= bound, "{peak} events waited at once, over {bound}");
}

#[test]
fn a_hang_the_sender_stopped_waiting_for_is_not_held_for_the_hang_cap() {
    let dir = scratch("simulate-stale-hangs");
    // The leaf holds every attempt for its hang cap (60 s); `backend` gives each up after
    // 20 ms and tries again, thousands of times a request.
    let plan = common::write_plan(
        &dir,
        "hangs.yaml",
        "name: hangs\nseed: 1\nduration: 5s\ndrain: 100ms\ntiers: [backend]\nload:\n  rate: 10\n  requests: [ { name: read, path: /r } ]\nfaults:\n  - { name: hang, respond: { fault: timeout } }\npolicies:\n  - name: retries-below\n    max_attempts: 1\n    tiers: { backend: { max_attempts: 100000, backoff: none, attempt_timeout: 20ms } }\n",
    );
    let run = simulate(&dir, &[plan.to_str().expect("utf-8"), "--out", "r"]);
    assert_eq!(run.status.code(), Some(0), "{}", stderr(&run));
    let r = report(&dir.join("r"));
    let p = &r["policies"][0];
    let logical = p["logical"].as_u64().expect("logical");
    let backend = &p["tiers"][0];
    assert!(
        backend["sent"].as_u64().is_some_and(|s| s > 100 * logical),
        "backend retried into the hangs: {p}"
    );
    assert_eq!(
        p["ledger"]["by_outcome"]["timeout"], p["ledger"]["attempts"],
        "the leaf counted every hang it held: {p}"
    );
    // Before, each of backend's attempts left the hang's end waiting for 60 s: 6,455
    // events at once here (bound 172), growing with the run's length.
    let bound = 2 * 2 * logical as usize;
    let peak = peak_waiting(&stderr(&run));
    assert!(peak <= bound, "{peak} events waited at once, over {bound}");
}

#[test]
fn work_that_outgrows_the_requests_in_flight_stops_the_simulation_with_a_report_saying_why() {
    let dir = scratch("simulate-overflow");
    // Ten requests in flight at most, each giving up on an attempt after 1 ms and sending
    // another, to a server that takes a minute over each and never turns one away: the
    // attempts given up on pile up at the server, 10,000 more every second.
    let plan = common::write_plan(
        &dir,
        "slow.yaml",
        "name: slow\nseed: 1\nduration: 20s\nload:\n  rate: 10\n  max_in_flight: 10\n  requests: [ { name: r, path: /r } ]\nserver: { service_time: 60s }\npolicies:\n  - name: impatient\n    max_attempts: 1000000\n    backoff: none\n    attempt_timeout: 1ms\n  - name: never-runs\n",
    );
    let run = simulate(&dir, &[plan.to_str().expect("utf-8"), "--out", "r"]);
    assert_eq!(run.status.code(), Some(3), "{}", stderr(&run));
    let said = stderr(&run);
    assert!(
        said.contains("error: policy `impatient` stopped at ")
            && said.contains("over the limit of 65536"),
        "{said}"
    );
    let r = report(&dir.join("r"));
    assert_eq!(r["verdict"], "fail");
    assert_eq!(r["aborted"], false);
    assert!(
        r["error"]
            .as_str()
            .is_some_and(|e| e.contains("65537 events waited at once")),
        "{r}"
    );
    let policies = r["policies"].as_array().expect("policies");
    assert_eq!(policies.len(), 1, "the run ends with the policy cut short");
    let p = &policies[0];
    assert_eq!(p["partial"], true);
    // What ran is counted as a run stopped early is: the requests still running are
    // unfinished, and the server counted every attempt that reached it.
    assert_eq!(p["unfinished"], p["logical"], "{p}");
    assert_eq!(p["attempts"], p["ledger"]["attempts"], "{p}");
    assert!(p["attempts"].as_u64().is_some_and(|a| a > 65_000), "{p}");
    assert_eq!(peak_waiting(&said), 65_537);
    let md = std::fs::read_to_string(dir.join("r/report.md")).expect("report.md");
    assert!(md.contains("INCOMPLETE"), "{md}");
}

#[test]
fn validate_warns_of_a_chain_whose_retries_multiply_past_reason_at_its_tiers_key() {
    let dir = scratch("validate-deep-chain");
    let text = deep_chain("deep", "duration: 1s");
    let plan = common::write_plan(&dir, "deep.yaml", &text);
    let out = harness()
        .arg("validate")
        .arg(&plan)
        .output()
        .expect("run harness");
    assert_eq!(out.status.code(), Some(0), "a warning, not an error");
    let said = stderr(&out);
    let line = 1 + text
        .lines()
        .position(|l| l.trim_start().starts_with("tiers: {"))
        .expect("the policy's tiers");
    assert!(
        said.contains(&format!(
            "warning: {}:{line}:5: policy `five-everywhere`: its call chain can make the leaf receive 152587890625 attempts per logical request (every hop's max_attempts multiplied: 5 at the client and at each of its 15 tiers), over 1000",
            plan.display()
        )),
        "{said}"
    );
    // The shipped storm (4 × 4 × 4) is within reason.
    let storm = harness()
        .arg("validate")
        .arg(repo().join("plans/chain-storm.yaml"))
        .output()
        .expect("run harness");
    assert_eq!(storm.status.code(), Some(0));
    assert!(!stderr(&storm).contains("warning"), "{}", stderr(&storm));
}

/// A plan a simulation takes many minutes over: 86 million logical requests (release
/// builds simulate about a million a second), so only an interrupt ends it in a test.
#[cfg(unix)]
const ENDLESS: &str = "name: endless\nseed: 1\nduration: 24h\nload:\n  rate: 1000\n  requests: [ { name: r, path: /r } ]\nfaults:\n  - { name: flaky, probability: 0.2, respond: { status: 503 } }\npolicies:\n  - { name: a, max_attempts: 3, backoff: { fixed: 10ms } }\n  - { name: b }\n";

/// `harness simulate ARGS` in `dir`, its output piped.
#[cfg(unix)]
fn spawn_simulate(dir: &Path, args: &[&str]) -> std::process::Child {
    harness()
        .current_dir(dir)
        .arg("simulate")
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn harness")
}

/// Reads the child's stderr up to the first line that starts with `prefix`.
#[cfg(unix)]
fn wait_for_line(child: &mut std::process::Child, prefix: &str) -> String {
    use std::io::BufRead;
    let stderr = child.stderr.take().expect("stderr");
    let mut lines = std::io::BufReader::new(stderr).lines();
    let mut seen = Vec::new();
    loop {
        let line = lines
            .next()
            .unwrap_or_else(|| panic!("no line `{prefix}...` before the end: {seen:?}"))
            .expect("utf-8");
        if line.starts_with(prefix) {
            // The rest is drained so the child never blocks on a full pipe.
            std::thread::spawn(move || lines.for_each(drop));
            return line;
        }
        seen.push(line);
    }
}

/// `kill -SIGNAL` to the child.
#[cfg(unix)]
fn send(child: &std::process::Child, signal: &str) {
    let status = std::process::Command::new("kill")
        .args([&format!("-{signal}"), &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
}

#[cfg(unix)]
#[test]
fn an_interrupted_simulation_writes_its_report_marked_aborted_and_exits_130() {
    // Ctrl-C, a CI runner's SIGTERM, and the hang-up of a dropped ssh session alike.
    for signal in ["INT", "TERM", "HUP"] {
        let dir = scratch(&format!("simulate-interrupted-{signal}"));
        let plan = common::write_plan(&dir, "endless.yaml", ENDLESS);
        let mut child = spawn_simulate(&dir, &[plan.to_str().expect("utf-8"), "--out", "r"]);
        wait_for_line(&mut child, "simulating policy `a`");
        send(&child, signal);
        let out = child.wait_with_output().expect("wait");
        assert_eq!(out.status.code(), Some(130), "SIG{signal}");
        let r = report(&dir.join("r"));
        assert_eq!(r["aborted"], true, "SIG{signal}");
        assert_eq!(r["mode"], "simulated");
        let policies = r["policies"].as_array().expect("policies");
        assert_eq!(policies.len(), 1, "SIG{signal}: `b` never ran");
        let a = &policies[0];
        assert_eq!(a["partial"], true);
        // What ran is counted as a live run stopped by Ctrl-C counts it.
        let offered = a["offered"].as_u64().expect("offered");
        assert!(
            offered > 0 && offered < 86_400_000,
            "SIG{signal}: {offered}"
        );
        // Attempts still on the wire when it stopped may not have reached the server.
        let sent = a["attempts"].as_u64().expect("attempts");
        let reached = a["ledger"]["attempts"].as_u64().expect("ledger");
        let on_the_wire = a["ledger"]["client_abandoned"].as_u64().expect("abandoned");
        assert!(
            reached <= sent && sent - reached <= on_the_wire,
            "SIG{signal}: {a}"
        );
        assert!(String::from_utf8_lossy(&out.stdout).contains("ABORTED"));
    }
}

/// A sweep of the endless plan over `duration=2s,24h` into `sweep/` of a scratch
/// directory, once its first value is written and said: the second runs until stopped.
#[cfg(unix)]
fn sweep_into_its_second_value(name: &str) -> (std::path::PathBuf, std::process::Child) {
    let dir = scratch(name);
    let plan = common::write_plan(&dir, "endless.yaml", ENDLESS);
    let mut child = spawn_simulate(
        &dir,
        &[
            plan.to_str().expect("utf-8"),
            "--policy",
            "a",
            "--sweep",
            "duration=2s,24h",
            "--out",
            "sweep",
        ],
    );
    wait_for_line(&mut child, "duration = 2s: simulated");
    (dir, child)
}

#[cfg(unix)]
#[test]
fn an_interrupted_sweep_keeps_the_values_that_ran_marked_partial_and_exits_130() {
    let (dir, child) = sweep_into_its_second_value("simulate-sweep-interrupted");
    send(&child, "INT");
    let out = child.wait_with_output().expect("wait");
    assert_eq!(out.status.code(), Some(130));
    let text = std::fs::read_to_string(dir.join("sweep/sweep.json")).expect("sweep.json");
    let sweep: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(sweep["partial"], true);
    assert_eq!(sweep["ran"], 1);
    assert_eq!(sweep["values"], serde_json::json!(["2s", "24h"]));
    let points = sweep["points"].as_array().expect("points");
    assert_eq!(points.len(), 1);
    assert_eq!(points[0]["value"], "2s");
    assert_eq!(report(&dir.join("sweep/1-2s"))["aborted"], false);
    assert!(
        !dir.join("sweep/2-24h").exists(),
        "the interrupted value is left out"
    );
    let md = std::fs::read_to_string(dir.join("sweep/sweep.md")).expect("sweep.md");
    assert!(md.contains("Partial: 1 of its 2 values ran"), "{md}");
}

#[cfg(unix)]
#[test]
fn a_sweep_is_on_disk_value_by_value_even_when_killed() {
    let (dir, mut child) = sweep_into_its_second_value("simulate-sweep-killed");
    // No handler runs for SIGKILL: what is on disk is what was written as it went.
    send(&child, "KILL");
    let _ = child.wait();
    let text = std::fs::read_to_string(dir.join("sweep/sweep.json")).expect("sweep.json");
    let sweep: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(
        (sweep["ran"].clone(), sweep["partial"].clone()),
        (1.into(), true.into())
    );
    assert_eq!(report(&dir.join("sweep/1-2s"))["mode"], "simulated");
}
