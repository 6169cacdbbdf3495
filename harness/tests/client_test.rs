//! `harness client-test`: the real binary runs a program nobody here linked into it (this
//! test's own executable, re-run as a small HTTP client with std sockets) and judges its
//! retries from the fault-server's ledger.

// The program under test speaks on stdout, as a real client would.
#![allow(clippy::print_stdout)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

mod common;

const HARNESS: &str = env!("CARGO_BIN_EXE_harness");

/// One request on a fresh connection: the status and `Retry-After`, or `None` when the
/// connection failed.
fn call(
    base: &str,
    method: &str,
    path: &str,
    body: &str,
    headers: &str,
) -> Option<(u16, Option<u64>)> {
    let address = base.trim_start_matches("http://");
    let mut stream = TcpStream::connect(address).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n{headers}Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    let status = answer.split(' ').nth(1)?.parse().ok()?;
    let retry_after = answer
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("retry-after:")
                .map(str::to_owned)
        })
        .and_then(|v| v.trim().parse().ok());
    Some((status, retry_after))
}

/// The program under test, when this executable is run by `harness client-test`: N
/// calls one after another, each retried as `CT_*` says, a line printed per call.
/// `CT_KEY`: `same` sends one `Idempotency-Key` per call, `fresh` a new one per attempt
/// (the classic mistake); `CT_SAME=1` makes every call the same request (one path and
/// body: six identical orders). `CT_PIDFILE`: where to write its pid first;
/// `CT_PAUSE_MS`: a pause between calls.
#[test]
#[ignore = "run by the harness as the program under test"]
fn program_under_test() {
    let Ok(base) = std::env::var("CHAOS_TARGET_URL") else {
        return;
    };
    let var = |name: &str, default: &str| std::env::var(name).unwrap_or_else(|_| default.into());
    let calls: u32 = var("CT_CALLS", "5").parse().expect("CT_CALLS");
    let method = var("CT_METHOD", "GET");
    let retry_on: Vec<u16> = var("CT_RETRY_ON", "503")
        .split(',')
        .filter_map(|s| s.parse().ok())
        .collect();
    let backoff = Duration::from_millis(var("CT_BACKOFF_MS", "100").parse().expect("ms"));
    let key = var("CT_KEY", "none");
    let same = var("CT_SAME", "0") == "1";
    let pause = Duration::from_millis(var("CT_PAUSE_MS", "0").parse().expect("ms"));
    if let Ok(file) = std::env::var("CT_PIDFILE") {
        write_pid(Path::new(&file), std::process::id());
    }
    for n in 0..calls {
        let (path, body) = if same {
            ("/orders".to_owned(), "{\"sku\":\"x\"}".to_owned())
        } else {
            (format!("/orders/{n}"), format!("{{\"order\":{n}}}"))
        };
        let mut outcome = None;
        for attempt in 1..=3 {
            let headers = match key.as_str() {
                "same" => format!("Idempotency-Key: call-{n}\r\n"),
                "fresh" => format!("Idempotency-Key: call-{n}-attempt-{attempt}\r\n"),
                _ => String::new(),
            };
            outcome = call(&base, &method, &path, &body, &headers);
            match outcome {
                Some((status, wait)) if retry_on.contains(&status) && attempt < 3 => {
                    let wait = wait.map_or(backoff, Duration::from_secs);
                    std::thread::sleep(wait);
                }
                Some(_) => break,
                None => std::thread::sleep(backoff),
            }
        }
        println!("call {n}: {outcome:?}");
        std::thread::sleep(pause);
    }
}

/// A program that connects `CT_CALLS` times and each time sends bytes that are not
/// HTTP, reading whatever comes back until the server closes.
#[test]
#[ignore = "run by the harness as the program under test"]
fn garbage_under_test() {
    let Ok(base) = std::env::var("CHAOS_TARGET_URL") else {
        return;
    };
    let calls: u32 = std::env::var("CT_CALLS")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(1);
    for _ in 0..calls {
        let Ok(mut stream) = TcpStream::connect(base.trim_start_matches("http://")) else {
            continue;
        };
        let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
        let _ = stream.write_all(b"\x00\x01\x02 this is not HTTP \xff\xfe\r\n\r\n");
        let _ = stream.read_to_end(&mut Vec::new());
    }
}

/// Written whole or not at all: a reader never sees half a pid.
fn write_pid(file: &Path, pid: u32) {
    let partial = file.with_extension("partial");
    std::fs::write(&partial, pid.to_string()).expect("pid written");
    std::fs::rename(&partial, file).expect("pid file in place");
}

struct Run {
    code: i32,
    report: serde_json::Value,
    stdout_lines: usize,
    stderr: String,
}

/// This test executable's arguments that run one of its ignored tests as a program.
fn me_as(program: &str) -> Vec<String> {
    let me = std::env::current_exe().expect("this test's executable");
    vec![
        me.to_string_lossy().into_owned(),
        program.to_owned(),
        "--exact".to_owned(),
        "--ignored".to_owned(),
        "--nocapture".to_owned(),
        "--quiet".to_owned(),
    ]
}

fn client_test(plan: &str, env: &[(&str, &str)], dir: &Path) -> Run {
    client_test_of(plan, env, dir, &me_as("program_under_test"))
}

fn harness_for(plan: &str, env: &[(&str, &str)], dir: &Path, program: &[String]) -> Command {
    let plan_file = dir.join("plan.yaml");
    std::fs::write(&plan_file, plan).expect("plan written");
    let mut command = Command::new(HARNESS);
    command
        .arg("client-test")
        .arg(&plan_file)
        .arg("--out")
        .arg(dir.join("report"))
        .arg("--quiet")
        .arg("--")
        .args(program);
    for (k, v) in env {
        command.env(k, v);
    }
    command
}

fn client_test_of(plan: &str, env: &[(&str, &str)], dir: &Path, program: &[String]) -> Run {
    let output = harness_for(plan, env, dir, program)
        .output()
        .expect("harness runs");
    read_run(output.status.code(), &output.stderr, dir)
}

fn read_run(code: Option<i32>, stderr: &[u8], dir: &Path) -> Run {
    let out = dir.join("report");
    let report = std::fs::read_to_string(out.join("report.json"))
        .map(|text| serde_json::from_str(&text).expect("report.json is JSON"))
        .unwrap_or(serde_json::Value::Null);
    let program = std::fs::read_to_string(out.join("program.stdout")).unwrap_or_default();
    Run {
        code: code.unwrap_or(-1),
        report,
        stdout_lines: program.lines().filter(|l| l.starts_with("call ")).count(),
        stderr: String::from_utf8_lossy(stderr).into_owned(),
    }
}

fn gate<'a>(report: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    report["policies"][0]["gates"]
        .as_array()
        .and_then(|gates| gates.iter().find(|g| g["name"] == name))
        .unwrap_or_else(|| panic!("gate {name} in {report}"))
}

#[test]
fn a_well_behaved_client_passes_and_its_counts_are_the_ledgers() {
    let dir = common::scratch("client-test-well-behaved");
    let plan = r#"
name: well-behaved
duration: 20s
drain: 1s
faults:
  - { name: first-fails, attempts: [1], respond: [ { status: 503 } ] }
  - { name: second-asks, attempts: [2], respond: [ { status: 503, retry_after: 1s } ] }
client:
  name: small-client
  expect: { max_attempts: 3, backoff: { fixed: 100ms } }
gates:
  - no_retry_of_permanent
  - no_retry_of_non_idempotent
  - no_duplicate_side_effects
  - retry_after_honoured
  - backoff_within_preset
  - { metric: success_rate, min: 1 }
"#;
    let run = client_test(plan, &[("CT_CALLS", "3")], &dir);
    assert_eq!(run.code, 0, "{}\n{}", run.stderr, run.report);
    let r = &run.report;
    assert_eq!(r["mode"], "client");
    let p = &r["policies"][0];
    assert_eq!(p["name"], "small-client");
    assert_eq!(p["logical"], 3, "the calls the program made");
    assert_eq!(run.stdout_lines, 3);
    assert_eq!(p["attempts"], 9, "three attempts a call");
    assert_eq!(p["attempts"], p["ledger"]["attempts"]);
    let c = &p["client"];
    assert_eq!(c["grouped_by"]["guess"], 3);
    assert_eq!(c["retry_after"]["asked"], 3);
    assert_eq!(c["retry_after"]["honoured"], 3);
    let backoff = &c["backoff"][0];
    assert_eq!(
        (backoff["attempt"].as_u64(), backoff["count"].as_u64()),
        (Some(2), Some(3))
    );
    assert_eq!(backoff["within"], true);
    assert_eq!(c["exit"], "exit 0");
    assert!(dir.join("report/program.stderr").exists());
}

#[test]
fn a_client_that_retries_a_post_after_400_without_a_key_fails_both_gates() {
    let dir = common::scratch("client-test-retries-posts");
    let plan = r#"
name: retries-posts
duration: 20s
drain: 1s
faults:
  - { name: rejected, attempts: [1], respond: [ { status: 400 } ] }
client: { name: bad-client }
gates:
  - no_retry_of_permanent
  - no_retry_of_non_idempotent
  - no_duplicate_side_effects
"#;
    let env = [
        ("CT_CALLS", "2"),
        ("CT_METHOD", "POST"),
        ("CT_RETRY_ON", "400,503"),
        ("CT_BACKOFF_MS", "20"),
    ];
    let run = client_test(plan, &env, &dir);
    assert_eq!(run.code, 1, "{}", run.stderr);
    let r = &run.report;
    assert_eq!(gate(r, "no_retry_of_permanent")["pass"], false);
    assert_eq!(gate(r, "no_retry_of_permanent")["measured"], 2.0);
    assert_eq!(gate(r, "no_retry_of_non_idempotent")["pass"], false);
    assert_eq!(
        gate(r, "no_duplicate_side_effects")["pass"],
        true,
        "the 400 ran nothing"
    );
    assert_eq!(r["policies"][0]["logical"], 2);
}

/// Lost responses to POSTs: the program's retry succeeds, but under which key decides
/// whether the charge ran twice.
const LOST_POSTS: &str = r#"
name: lost-posts
duration: 20s
drain: 1s
faults:
  - { name: lost, attempts: [1], respond: { fault: close, processed: true } }
client: { name: keyed-client }
gates:
  - no_retry_of_non_idempotent
  - no_duplicate_side_effects
"#;

fn keyed_env(key: &'static str) -> [(&'static str, &'static str); 5] {
    [
        ("CT_CALLS", "4"),
        ("CT_METHOD", "POST"),
        ("CT_KEY", key),
        ("CT_SAME", "1"),
        ("CT_BACKOFF_MS", "20"),
    ]
}

/// The mistake issue 49 found passing: a new `Idempotency-Key` per attempt made every
/// retry look like a new call ("Retries: none", every gate green, 4 calls and 8 charges).
#[test]
fn a_client_that_mints_a_key_per_attempt_fails_naming_the_fresh_keys_and_the_charges() {
    let dir = common::scratch("client-test-fresh-keys");
    let run = client_test(LOST_POSTS, &keyed_env("fresh"), &dir);
    assert_eq!(run.code, 1, "{}\n{}", run.stderr, run.report);
    let r = &run.report;
    let p = &r["policies"][0];
    assert_eq!(p["logical"], 4, "four calls, each retried once");
    assert_eq!(p["attempts"], 8);
    let fresh = gate(r, "no_retry_with_fresh_key");
    assert_eq!(fresh["pass"], false, "{fresh}");
    assert_eq!(fresh["measured"], 4.0);
    assert!(
        fresh["detail"]
            .as_str()
            .is_some_and(|d| d.contains("idempotency-key:call-0-attempt-1")),
        "{fresh}"
    );
    let duplicates = gate(r, "no_duplicate_side_effects");
    assert_eq!(duplicates["pass"], false);
    assert_eq!(duplicates["measured"], 4.0, "every lost charge ran again");
    assert_eq!(p["ledger"]["side_effects"], 8);
    assert_eq!(p["client"]["fresh_keys"]["retries"], 4);
    assert_eq!(
        gate(r, "no_retry_of_non_idempotent")["pass"],
        true,
        "keyed: the fresh-key gate names it, once"
    );
    let markdown = std::fs::read_to_string(dir.join("report/report.md")).expect("report.md");
    assert!(
        markdown.contains("under a fresh Idempotency-Key"),
        "{markdown}"
    );
}

/// The same program resending one key per call: the lost charges are replayed, not run
/// again, and the identical orders after each success are calls of their own.
#[test]
fn a_client_that_resends_its_key_passes_and_identical_orders_are_separate_calls() {
    let dir = common::scratch("client-test-same-key");
    let run = client_test(LOST_POSTS, &keyed_env("same"), &dir);
    assert_eq!(run.code, 0, "{}\n{}", run.stderr, run.report);
    let r = &run.report;
    assert_eq!(r["policies"][0]["logical"], 4);
    assert_eq!(r["policies"][0]["ledger"]["side_effects"], 4);
    assert_eq!(gate(r, "no_retry_with_fresh_key")["measured"], 0.0);

    // Six identical orders, one after another, no key, nothing failing: six calls, where
    // the window's guess alone made them one call retried five times.
    let dir = common::scratch("client-test-identical-orders");
    let plan = r#"
name: identical-orders
duration: 20s
drain: 1s
client: { name: orders }
gates: [ no_retry_of_non_idempotent, no_duplicate_side_effects ]
"#;
    let env = [("CT_CALLS", "6"), ("CT_METHOD", "POST"), ("CT_SAME", "1")];
    let run = client_test(plan, &env, &dir);
    assert_eq!(run.code, 0, "{}\n{}", run.stderr, run.report);
    let p = &run.report["policies"][0];
    assert_eq!(p["logical"], 6);
    assert_eq!(p["retries"], 0);
    assert_eq!(p["violations"]["duplicate_side_effects"], 0);
    assert_eq!(p["client"]["split"]["after_success"], 5);
    assert_eq!(p["amplification"]["peak_1s"], 1.0);
}

#[test]
fn a_program_that_cannot_start_or_a_plan_without_a_client_is_refused() {
    let dir = common::scratch("client-test-refused");
    let plan = dir.join("plan.yaml");
    std::fs::write(&plan, "duration: 2s\nfaults: []\nclient: {}\n").expect("written");
    let missing = Command::new(HARNESS)
        .arg("client-test")
        .arg(&plan)
        .args(["--out"])
        .arg(dir.join("out"))
        .args(["--", "/no/such/program"])
        .output()
        .expect("harness runs");
    assert_eq!(missing.status.code(), Some(3));
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert!(
        stderr.contains("cannot start `/no/such/program`"),
        "{stderr}"
    );

    let load_plan = dir.join("load.yaml");
    std::fs::write(
        &load_plan,
        "duration: 1s\nload: { rate: 1, requests: [ { name: r, path: / } ] }\npolicies: [ { name: a } ]\n",
    )
    .expect("written");
    let not_client = Command::new(HARNESS)
        .arg("client-test")
        .arg(&load_plan)
        .args(["--", "true"])
        .output()
        .expect("harness runs");
    assert_eq!(not_client.status.code(), Some(2));

    std::fs::write(
        &plan,
        "duration: 2s\nclient: {}\npolicies: [ { name: a } ]\ngates: [ retry_after_honoured ]\n",
    )
    .expect("written");
    let both = Command::new(HARNESS)
        .args(["validate"])
        .arg(&plan)
        .output()
        .expect("harness runs");
    assert_eq!(both.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&both.stderr);
    assert!(
        stderr.contains("has no `policies`") && stderr.contains(":3:"),
        "{stderr}"
    );
}

/// A plan of 3 s and 1 s of drain, no faults: the program is stopped 4 s in.
const SHORT: &str = r#"
name: short
duration: 3s
drain: 1s
client: { name: short }
"#;

/// Far past any end of [`SHORT`]'s run, grace and kill time included: a run still going
/// then is waiting for something the plan does not bound.
const GENEROUS: Duration = Duration::from_secs(30);

/// The harness run to its end, or killed at [`GENEROUS`] (then `None`).
fn bounded(command: Command) -> Option<std::process::Output> {
    waited(started(command))
}

fn started(mut command: Command) -> std::process::Child {
    use std::process::Stdio;
    command
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("harness runs")
}

/// The harness's end, or `None` when it was killed at [`GENEROUS`].
fn waited(mut harness: std::process::Child) -> Option<std::process::Output> {
    let start = std::time::Instant::now();
    while start.elapsed() < GENEROUS {
        if let Ok(Some(_)) = harness.try_wait() {
            return Some(harness.wait_with_output().expect("harness's output"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = harness.kill();
    let _ = harness.wait();
    None
}

/// The pid the program's descendant wrote, once it is there.
fn pid_in(file: &Path) -> u32 {
    std::fs::read_to_string(file)
        .unwrap_or_else(|e| panic!("{}: {e}", file.display()))
        .trim()
        .parse()
        .expect("a pid")
}

/// Whether `pid` is still a process whose command line holds `marker` (not a pid the
/// kernel has handed to someone else since). A zombie has no command line: gone.
fn still_running(pid: u32, marker: &str) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .is_ok_and(|c| String::from_utf8_lossy(&c).contains(marker))
}

/// Kills what a failed test left behind, so that it does not outlive the test.
fn clean_up(pid: u32) {
    let _ = Command::new("kill")
        .args(["-9", &pid.to_string()])
        .stderr(std::process::Stdio::null())
        .status();
}

/// Issue 50: a program that leaves a `setsid` child holding its stdout made the run wait
/// for that child (45 s; a daemon: forever), which a process-group kill never reached.
#[cfg(target_os = "linux")]
#[test]
fn a_setsid_grandchild_holding_the_output_is_killed_and_the_run_ends_at_the_plan() {
    let dir = common::scratch("client-test-setsid-sleep");
    let pidfile = dir.join("grandchild.pid");
    // The grandchild writes its pid, then becomes `sleep`; the program exits once the
    // pid is there, leaving it behind with the program's stdout and stderr.
    let script = format!(
        r#"setsid sh -c 'echo $$ > "{p}.partial"; mv "{p}.partial" "{p}"; exec sleep 120.5' &
        while [ ! -s "{p}" ]; do sleep 0.01; done
        echo started"#,
        p = pidfile.display()
    );
    let program = ["sh".to_owned(), "-c".to_owned(), script];
    let ended = bounded(harness_for(SHORT, &[], &dir, &program));
    let pid = pid_in(&pidfile);
    let alive = still_running(pid, "120.5");
    clean_up(pid);
    let output = ended.expect("the run ends within the plan, grace and kill time");
    assert!(!alive, "the setsid sleep outlived the run");
    let run = read_run(output.status.code(), &output.stderr, &dir);
    assert_eq!(run.report["policies"][0]["client"]["exit"], "exit 0");
    let stdout = std::fs::read_to_string(dir.join("report/program.stdout")).expect("kept");
    assert_eq!(
        stdout, "started\n",
        "what was written before the end is kept"
    );
}

/// Issue 50: a `setsid` child with its output elsewhere left nothing for the run to wait
/// for, and kept sending after it, to a fault-server long gone.
#[cfg(target_os = "linux")]
#[test]
fn a_setsid_child_that_keeps_sending_is_killed_at_the_plans_end() {
    let dir = common::scratch("client-test-setsid-sender");
    let pidfile = dir.join("sender.pid");
    let sender = me_as("program_under_test")
        .iter()
        .map(|a| format!("'{a}'"))
        .collect::<Vec<_>>()
        .join(" ");
    // The program waits (in `sleep`, its group's) until it is stopped; the sender
    // calls until it is killed.
    let script = format!(
        r#"setsid {sender} > /dev/null 2>&1 &
        while [ ! -s "{p}" ]; do sleep 0.01; done
        exec sleep 120"#,
        p = pidfile.display()
    );
    let pidfile_var = pidfile.to_string_lossy().into_owned();
    let env = [
        ("CT_CALLS", "1000000"),
        ("CT_PAUSE_MS", "20"),
        ("CT_PIDFILE", pidfile_var.as_str()),
    ];
    let program = ["sh".to_owned(), "-c".to_owned(), script];
    let ended = bounded(harness_for(SHORT, &env, &dir, &program));
    let pid = pid_in(&pidfile);
    let alive = still_running(pid, "program_under_test");
    clean_up(pid);
    let output = ended.expect("the run ends within the plan, grace and kill time");
    assert!(!alive, "the setsid sender outlived the run, still sending");
    let run = read_run(output.status.code(), &output.stderr, &dir);
    let p = &run.report["policies"][0];
    assert!(
        p["attempts"].as_u64().is_some_and(|a| a > 0),
        "it sent during the run: {}",
        run.report
    );
    assert!(
        p["client"]["exit"]
            .as_str()
            .is_some_and(|e| e.starts_with("still running at the plan's end")),
        "{}",
        p["client"]
    );
}

/// Ctrl-C stops the tree as the plan's end does, setsid children included, however long
/// the plan.
#[cfg(target_os = "linux")]
#[test]
fn ctrl_c_kills_a_setsid_grandchild_and_the_run_ends() {
    let dir = common::scratch("client-test-setsid-ctrl-c");
    let pidfile = dir.join("grandchild.pid");
    let script = format!(
        r#"setsid sh -c 'echo $$ > "{p}.partial"; mv "{p}.partial" "{p}"; exec sleep 120.25' &
        exec sleep 120"#,
        p = pidfile.display()
    );
    let program = ["sh".to_owned(), "-c".to_owned(), script];
    let long = "name: long\nduration: 600s\ndrain: 1s\nclient: { name: long }\n";
    let harness = started(harness_for(long, &[], &dir, &program));
    let start = std::time::Instant::now();
    while !pidfile.exists() && start.elapsed() < GENEROUS {
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = Command::new("kill")
        .args(["-INT", &harness.id().to_string()])
        .status();
    let ended = waited(harness);
    let pid = pid_in(&pidfile);
    let alive = still_running(pid, "120.25");
    clean_up(pid);
    let output = ended.expect("the run ends on Ctrl-C");
    assert!(!alive, "the setsid sleep outlived the interrupted run");
    assert_eq!(output.status.code(), Some(130));
}

fn warnings(run: &Run) -> Vec<String> {
    run.report["warnings"]
        .as_array()
        .map(|w| {
            w.iter()
                .filter_map(|w| w.as_str())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// Issue 50: the warning read "the program ended with still running at the plan's end
/// (duration + drain): stopped".
#[test]
fn a_program_stopped_at_the_plans_end_is_warned_of_in_a_sentence() {
    let dir = common::scratch("client-test-stopped-warning");
    let program = ["sleep".to_owned(), "120".to_owned()];
    let run = client_test_of(SHORT, &[], &dir, &program);
    let warnings = warnings(&run);
    assert!(
        warnings.iter().any(|w| w
            == "the program was still running at the plan's end (duration + drain) and was stopped: see program.stderr beside the report"),
        "{warnings:?}"
    );
    assert!(
        warnings
            .iter()
            .any(|w| w.starts_with("the program sent nothing to the fault-server")),
        "it never connected: {warnings:?}"
    );
}

/// Issue 50: a program that connected 300 times with bytes that are not HTTP was told
/// it "sent nothing", which sends its author looking at the URL instead of the protocol.
#[test]
fn a_program_that_connects_without_http_is_told_so_not_that_it_sent_nothing() {
    let dir = common::scratch("client-test-garbage");
    let run = client_test_of(
        SHORT,
        &[("CT_CALLS", "300")],
        &dir,
        &me_as("garbage_under_test"),
    );
    let warnings = warnings(&run);
    assert!(
        warnings.iter().any(|w| w.starts_with(
            "the program connected to the fault-server 300 times but sent no valid HTTP request"
        )),
        "{warnings:?}\n{}",
        run.stderr
    );
    assert!(
        !warnings.iter().any(|w| w.contains("sent nothing")),
        "{warnings:?}"
    );
    assert_eq!(run.report["policies"][0]["client"]["exit"], "exit 0");
}
