//! The real binary against hostile or careless input: plan names that would be paths, a
//! `latest` that is not ours, a report that cannot go where asked, an oversized plan, a
//! load the client cannot carry.

mod common;

use common::{BASE, chaos_quietly, harness, scratch, stderr, validate_error, write_plan};

#[test]
fn plan_names_are_one_safe_path_component() {
    for (case, name) in [
        ("dotdot", "\"..\"".to_owned()),
        ("hidden", ".hidden".to_owned()),
        ("slash", "\"a/b\"".to_owned()),
        ("long", "n".repeat(300)),
    ] {
        let said = validate_error(
            case,
            &format!("name: {name}\n{BASE}policies: [ {{ name: a }} ]\n"),
        );
        assert!(
            said.contains("cannot name a report directory"),
            "{case}: {said}"
        );
        assert!(said.contains("at most 64 characters"), "{case}: {said}");
    }
}

#[test]
fn a_billion_laughs_plan_is_refused_without_expanding_it() {
    // Ten aliases of ten aliases, nine deep: 10^10 values once expanded, in a key that
    // takes any YAML (`n.values`). The parser stops at its repetition limit, and the
    // plan is refused (no timing here: the test would otherwise not end).
    let mut values = vec!["&a0 [l, l, l, l, l, l, l, l, l, l]".to_owned()];
    for i in 1..10 {
        values.push(format!(
            "&a{i} [{}]",
            vec![format!("*a{}", i - 1); 10].join(", ")
        ));
    }
    let plan = format!(
        "duration: 1s\nload:\n  rate: 10\n  requests:\n    - name: r\n      path: /items/{{n}}\n      n:\n        values:\n{}policies: [ {{ name: a }} ]\n",
        values
            .iter()
            .map(|v| format!("          - {v}\n"))
            .collect::<String>()
    );
    let said = validate_error("laughs", &plan);
    assert!(said.contains("billion laughs"), "{said}");
    assert!(said.contains("hint: write the values out"), "{said}");
}

#[test]
fn an_oversized_plan_is_refused_before_it_is_parsed() {
    let padding = format!("# {}\n", "x".repeat(1000)).repeat(1100);
    let said = validate_error(
        "huge",
        &format!("{padding}{BASE}policies: [ {{ name: a }} ]\n"),
    );
    assert!(said.contains("larger than 1024 KiB"), "{said}");
    // Deep nesting costs the parser the square of its depth: refused by a linear scan.
    let deep = format!(
        "description: {}{}\n",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    let said = validate_error(
        "deep",
        &format!("{BASE}policies: [ {{ name: a }} ]\n{deep}"),
    );
    assert!(
        said.contains("nested 65 levels deep (at most 64)"),
        "{said}"
    );
    assert!(said.contains("deep.yaml:6:78"), "{said}");
    // The same bomb as `load:` beside other mistakes: refused alone, nothing else looked
    // for (docs/benchmarks.md times it: `cargo bench -p harness --bench validate`).
    let said = validate_error(
        "bomb",
        &format!(
            "duration: 10\nload: {}{}\npolicies: [ {{ name: a, max_attempts: 0 }} ]\n",
            "[".repeat(100_000),
            "]".repeat(100_000)
        ),
    );
    assert_eq!(
        said.lines().filter(|l| l.starts_with("error: ")).count(),
        1,
        "{said}"
    );
    assert!(
        said.contains("bomb.yaml:2:71: nested 65 levels deep (at most 64)"),
        "{said}"
    );
}

#[test]
fn a_latest_that_is_not_our_link_is_left_alone() {
    let dir = scratch("foreign-latest");
    let plan = write_plan(
        &dir,
        "keep.yaml",
        &format!("name: keep\n{BASE}policies: [ {{ name: a }} ]\n"),
    );
    std::fs::create_dir_all(dir.join("reports/keep")).expect("mkdir");
    std::fs::write(dir.join("reports/keep/latest"), "my own notes").expect("write");
    let out = chaos_quietly(&dir, &plan);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        std::fs::read_to_string(dir.join("reports/keep/latest")).expect("still a file"),
        "my own notes"
    );
    assert!(
        stderr(&out).contains("was left as it was"),
        "{}",
        stderr(&out)
    );
    let reports = std::fs::read_dir(dir.join("reports/keep"))
        .expect("list")
        .filter_map(Result::ok)
        .filter(|e| e.path().join("report.json").is_file())
        .count();
    assert_eq!(reports, 1, "the report itself was written");
}

#[test]
fn a_report_that_cannot_go_where_asked_goes_to_a_fresh_private_temporary_directory() {
    let dir = scratch("unwritable-out");
    let temp = dir.join("tmp");
    std::fs::create_dir_all(&temp).expect("a temporary directory of the test's own");
    let plan = write_plan(
        &dir,
        "lost.yaml",
        &format!("name: lost\n{BASE}policies: [ {{ name: a }} ]\n"),
    );
    // A directory cannot be made under a regular file.
    std::fs::write(dir.join("file"), "").expect("write");
    // Somebody sharing /tmp plants links where a predictable fallback would go (the plan's
    // name and this minute's timestamps), pointing into a directory of their choosing.
    let victim = dir.join("victim");
    std::fs::create_dir_all(&victim).expect("mkdir");
    let now = std::time::SystemTime::now();
    for s in 0..120 {
        let (stamp, _) = harness::report::timestamp(now + std::time::Duration::from_secs(s));
        let _ =
            std::os::unix::fs::symlink(&victim, temp.join(format!("chaos-report-lost-{stamp}")));
    }
    let fallback = |run: &str| {
        let out = harness()
            .current_dir(&dir)
            .env("TMPDIR", &temp)
            .args(["chaos", "--quiet", "--out", "file/report"])
            .arg(&plan)
            .output()
            .expect("run harness");
        assert_eq!(out.status.code(), Some(3), "{run}: {}", stderr(&out));
        let said = stderr(&out);
        let instead = said
            .lines()
            .find_map(|l| l.trim().strip_prefix("the report was written to "))
            .and_then(|l| l.strip_suffix(" instead"))
            .unwrap_or_else(|| panic!("{run}: no fallback named: {said}"))
            .to_owned();
        std::path::PathBuf::from(instead)
    };
    let (first, second) = (fallback("first"), fallback("second"));
    assert_ne!(first, second, "each run has a directory of its own");
    for instead in [&first, &second] {
        assert!(instead.starts_with(&temp), "{}", instead.display());
        let meta = std::fs::symlink_metadata(instead).expect("the fallback exists");
        assert!(meta.is_dir(), "a real directory, not a planted link");
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(meta.permissions().mode() & 0o077, 0, "private to the user");
        assert!(instead.join("report.json").is_file());
    }
    let planted: Vec<_> = std::fs::read_dir(&victim).expect("list").collect();
    assert!(
        planted.is_empty(),
        "nothing written through a link: {planted:?}"
    );
}

#[test]
fn an_undelivered_load_is_a_warning_and_a_failed_dropped_ratio_gate() {
    let dir = scratch("undelivered");
    let plan = write_plan(
        &dir,
        "tiny.yaml",
        "name: tiny\nduration: 1s\ndrain: 1s\nload:\n  rate: 200\n  max_in_flight: 1\n  requests: [ { name: r, path: / } ]\nfaults: [ { name: slow, respond: { fault: delay, delay: 50ms } } ]\npolicies: [ { name: a } ]\n",
    );
    // Without a gate the run passes, but says what it could not do.
    let out = chaos_quietly(&dir, &plan);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("warning: policy `a` dropped"),
        "{}",
        stderr(&out)
    );
    let json: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("reports/tiny/latest/report.json")).expect("json"),
    )
    .expect("json");
    assert!(
        json["warnings"][0]
            .as_str()
            .is_some_and(|w| w.contains("max_in_flight 1"))
    );
    // With the gate every shipped plan carries, it fails.
    let gated = write_plan(
        &dir,
        "gated.yaml",
        "name: gated\nduration: 1s\ndrain: 1s\nload:\n  rate: 200\n  max_in_flight: 1\n  requests: [ { name: r, path: / } ]\nfaults: [ { name: slow, respond: { fault: delay, delay: 50ms } } ]\npolicies: [ { name: a } ]\ngates: [ { metric: dropped_ratio, max: 0.01 } ]\n",
    );
    let out = chaos_quietly(&dir, &gated);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
}

/// Runs the binary with `args`, and says what it printed and how it ended, or panics if it
/// is still running after 20 s (what these tests guard against is a wait without end).
fn bounded(args: &[&std::ffi::OsStr]) -> (Option<i32>, String) {
    let mut child = harness()
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the harness starts");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while child.try_wait().expect("wait").is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("{args:?} still running after 20 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("its output");
    (out.status.code(), stderr(&out))
}

#[test]
fn a_device_or_an_oversized_file_is_no_baseline() {
    let dir = scratch("baseline-limits");
    let zero = std::ffi::OsStr::new("/dev/zero");
    let (code, said) = bounded(&["compare".as_ref(), zero, zero]);
    assert_eq!(code, Some(2), "{said}");
    assert!(said.contains("/dev/zero is larger than 64 MiB"), "{said}");
    // A sparse file one byte over the limit: read no further than the limit.
    let huge = dir.join("huge.json");
    std::fs::File::create(&huge)
        .and_then(|f| f.set_len(harness::baseline::MAX_BASELINE_BYTES + 1))
        .expect("a sparse file");
    let (code, said) = bounded(&["compare".as_ref(), huge.as_os_str(), huge.as_os_str()]);
    assert_eq!(code, Some(2), "{said}");
    assert!(said.contains("larger than 64 MiB"), "{said}");
}

#[test]
fn a_fifo_named_as_an_import_is_refused_without_waiting_for_a_writer() {
    let dir = scratch("import-fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(dir.join("route.yaml"))
        .status()
        .expect("mkfifo runs");
    assert!(made.success());
    let plan = write_plan(
        &dir,
        "fifo",
        &format!("{BASE}policies:\n  - name: a\n    import: {{ envoy_route: route.yaml }}\n"),
    );
    let (code, said) = bounded(&["validate".as_ref(), plan.as_os_str()]);
    assert_eq!(code, Some(2), "{said}");
    assert!(said.contains("not a regular file"), "{said}");
}

#[test]
fn a_path_that_cannot_go_on_a_request_line_is_a_plan_error() {
    for (case, path, why) in [
        ("space", "\"/a b/{n}\"", "holds a space"),
        ("crlf", "\"/a\\r\\nb\"", "holds a line break"),
        (
            "long",
            &format!("\"/{}\"", "x".repeat(70_000)),
            "at most 8192 are sent",
        ),
        (
            "long-n",
            &format!("\"/{}/{{n}}\"", "x".repeat(8_190)),
            "with `{n}` written out",
        ),
    ] {
        let said = validate_error(
            case,
            &format!(
                "duration: 1s\nload:\n  rate: 10\n  requests: [ {{ name: r, path: {path} }} ]\npolicies: [ {{ name: a }} ]\n"
            ),
        );
        assert!(said.contains(why), "{case}: {said}");
        assert!(
            said.contains(&format!("{case}.yaml:4:")),
            "{case}: located: {said}"
        );
        assert!(
            said.len() < 1_000,
            "{case}: the path is quoted short: {said}"
        );
    }
    // What real services accept passes.
    let ok = write_plan(
        &scratch("target-ok"),
        "ok",
        "duration: 1s\nload:\n  rate: 10\n  requests: [ { name: r, path: \"/items/{n}?q=a%20b&x=~1\" } ]\npolicies: [ { name: a } ]\n",
    );
    let out = harness().arg("validate").arg(&ok).output().expect("runs");
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn a_second_yaml_document_is_named_at_its_line() {
    let said = validate_error(
        "two-docs",
        &format!("# one plan\n---\n{BASE}policies: [ {{ name: a }} ]\n---\nname: b\n"),
    );
    assert!(
        said.contains("two-docs.yaml:8:1: the plan holds more than one YAML document"),
        "{said}"
    );
    assert!(said.contains("remove this `---` line"), "{said}");
}

#[test]
fn a_gate_outside_its_metrics_range_can_never_pass() {
    for (case, gate, why) in [
        (
            "rate",
            "{ metric: success_rate, min: 2 }",
            "is between 0 and 1",
        ),
        ("p99", "{ metric: p99_ms, max: -5 }", "is at least 0"),
        ("waves", "{ metric: synchrony, max: 0.5 }", "is at least 1"),
    ] {
        let said = validate_error(
            case,
            &format!("{BASE}policies: [ {{ name: a }} ]\ngates:\n  - {gate}\n"),
        );
        assert!(
            said.contains("can never pass") && said.contains(why),
            "{case}: {said}"
        );
        assert!(said.contains(&format!("{case}.yaml:7:")), "{case}: {said}");
    }
}

#[test]
fn a_plan_runs_at_most_64_policies() {
    let policies: String = (0..65).map(|i| format!("  - {{ name: p{i} }}\n")).collect();
    let said = validate_error("many", &format!("{BASE}policies:\n{policies}"));
    assert!(
        said.contains("many.yaml:70:") && said.contains("65 policies; at most 64"),
        "{said}"
    );
    let policies: String = (0..64).map(|i| format!("  - {{ name: p{i} }}\n")).collect();
    let plan = write_plan(
        &scratch("sixty-four"),
        "ok",
        &format!("{BASE}policies:\n{policies}"),
    );
    let out = harness().arg("validate").arg(&plan).output().expect("runs");
    assert!(out.status.success(), "{}", stderr(&out));
}

/// The peak resident memory (the kernel's VmHWM, in MB) that `harness COMMAND` says on
/// stderr once it ran a plan of `n` policies (`dir` keeps the plans and the reports).
fn peak_memory(dir: &std::path::Path, command: &str, n: usize) -> f64 {
    let policies: String = (0..n)
        .map(|i| format!("  - {{ name: p{i}, max_attempts: 3 }}\n"))
        .collect();
    let plan = write_plan(
        dir,
        &format!("many-{n}.yaml"),
        &format!("name: many-{n}\n{BASE}policies:\n{policies}"),
    );
    let out = harness()
        .current_dir(dir)
        .arg(command)
        .arg(plan)
        .output()
        .expect("run harness");
    assert_eq!(out.status.code(), Some(0), "{n}: {}", stderr(&out));
    let said = stderr(&out);
    said.split("peak memory ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|mb| mb.parse().ok())
        .unwrap_or_else(|| panic!("no peak memory said: {said}"))
}

#[test]
fn a_policy_that_has_run_holds_no_histograms_while_the_next_ones_run() {
    let dir = scratch("many-policies");
    let (one, many) = (
        peak_memory(&dir, "simulate", 1),
        peak_memory(&dir, "simulate", 64),
    );
    // Each policy's recorder holds four histograms of ~190 KB each: kept to the end, 64
    // policies took 52 MB more than one did (74.7 MB against 22.8 MB, debug build).
    assert!(
        many - one < 16.0,
        "64 policies peaked at {many} MB, one at {one} MB"
    );
}

#[test]
fn a_live_policy_that_has_run_holds_no_recorder_while_the_next_ones_run() {
    // A low rate: the recorders are the same size (~790 KB) whatever they count.
    let dir = scratch("many-live-policies");
    let (one, many) = (
        peak_memory(&dir, "chaos", 1),
        peak_memory(&dir, "chaos", 24),
    );
    // Each policy's recorder holds four histograms of ~190 KB each: kept to the end of the
    // run, 24 policies peaked at 73.3 MB against 51.3 MB for one (debug build).
    assert!(
        many <= one * 1.1,
        "24 policies peaked at {many} MB, one at {one} MB"
    );
}

#[test]
fn names_and_descriptions_from_a_plan_are_shown_in_report_md_not_rendered() {
    let dir = scratch("markdown-escape");
    let plan = write_plan(
        &dir,
        "evil.yaml",
        &format!(
            "name: evil\ndescription: \"<script>alert(1)</script> a | b\"\n{BASE}faults:\n  - {{ name: \"<img src=x onerror=alert(2)>|x\", probability: 0.5, respond: {{ status: 503 }} }}\npolicies: [ {{ name: a }} ]\ngates: [ no_retry_of_permanent ]\n"
        ),
    );
    let out = harness()
        .current_dir(&dir)
        .args(["simulate", "--quiet", "--out", "out"])
        .arg(&plan)
        .output()
        .expect("run harness");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let md = std::fs::read_to_string(dir.join("out/report.md")).expect("report.md");
    assert!(!md.contains("<script") && !md.contains("<img"), "{md}");
    assert!(
        md.contains("&lt;script&gt;alert(1)&lt;/script&gt; a \\| b"),
        "{md}"
    );
    assert!(
        md.contains("&lt;img src=x onerror=alert(2)&gt;\\|x"),
        "{md}"
    );
}

#[test]
fn an_n_that_cannot_be_drawn_or_sent_is_refused_at_its_key() {
    for (case, request, said) in [
        (
            "no-placeholder",
            "{ name: r, path: /items, n: { min: 1, max: 5 } }",
            "`n` is given but path `/items` has no `{n}`",
        ),
        (
            "upside-down",
            "{ name: r, path: \"/items/{n}\", n: { min: 9, max: 5 } }",
            "`n` runs from 9 to 5: `min` is above `max`",
        ),
        (
            "both",
            "{ name: r, path: \"/items/{n}\", n: { min: 1, values: [a] } }",
            "`n` is a range or a list, not both nor neither",
        ),
        (
            "space",
            "{ name: r, path: \"/items/{n}\", n: { values: [ok, \"a b\"] } }",
            "`n.values[1]` (\"a b\"): the path with it holds a space",
        ),
    ] {
        let text = format!(
            "duration: 1s\nload:\n  rate: 10\n  requests:\n    - {request}\npolicies: [ {{ name: a }} ]\n"
        );
        let err = validate_error(case, &text);
        assert!(err.contains(said), "{case}: {err}");
        assert!(
            err.contains(&format!("{case}.yaml:5:")),
            "{case}: located: {err}"
        );
    }
}

#[test]
fn a_key_other_tools_spell_differently_gets_ours_and_an_unjudgeable_gate_a_warning() {
    let said = validate_error(
        "retries",
        &format!("{BASE}policies: [ {{ name: a, retries: 3 }} ]\n"),
    );
    assert!(
        said.contains("did you mean `max_attempts`? it counts the first attempt too: `retries: 3` is `max_attempts: 4`"),
        "{said}"
    );
    let dir = scratch("unjudgeable");
    let plan = write_plan(
        &dir,
        "plan.yaml",
        &format!("{BASE}policies: [ {{ name: a }} ]\ngates: [ {{ metric: synchrony, max: 2 }} ]\n"),
    );
    let out = harness()
        .arg("validate")
        .arg(&plan)
        .output()
        .expect("run harness");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("gate `synchrony <= 2` cannot be judged"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn validate_reports_every_broken_entry_in_one_run() {
    let dir = scratch("every-error");
    let plan = write_plan(
        &dir,
        "five.yaml",
        "duration: 1s\nload:\n  rate: 10\n  requests:\n    - name: r\n      path: nope\npolicies:\n  - name: a\n    max_attempts: 0\n  - name: b\n    retries: 3\n  - name: c\n    backoff: { fixed: -1s }\ngates:\n  - { metric: success_rate, min: 2 }\n  - nope\n",
    );
    let out = harness()
        .arg("validate")
        .arg(&plan)
        .output()
        .expect("run harness");
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let said = stderr(&out);
    let located: Vec<&str> = said
        .lines()
        .filter_map(|l| l.strip_prefix("error: "))
        .filter_map(|l| l.split(": ").next())
        .collect();
    let lines: Vec<String> = located
        .iter()
        .map(|at| at.rsplit(':').nth(1).unwrap_or("?").to_owned())
        .collect();
    assert_eq!(lines, ["6", "9", "11", "13", "15", "16"], "{said}");
    assert!(said.contains("five.yaml: 6 errors"), "{said}");
}
