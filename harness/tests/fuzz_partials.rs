//! `harness merge` on partial reports broken the ways disks, logs and hands break them:
//! a histogram whose header lies about its length, and a fuzzer of byte flips,
//! truncations, numbers replaced by 2^64 - 1 and duplicated keys. Each must merge or be
//! refused with an error that names the file; never a panic, never a hang. Bounded: a
//! fixed number of seeded cases, each a few milliseconds in process, a few through the
//! real binary.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use base64::Engine as _;
use chaos_policy::{GiveUp, Outcome, Verdict};
use harness::shard::Shard;
use harness::shard::merge::{self, Source};
use harness::shard::partial::{self, PARTIAL_SCHEMA, Partial, PartialPlan, PartialPolicy};
use harness::stats::Recorder;

const PLAN: &str = "name: even
seed: 11
duration: 1s
drain: 1s
target: { url: \"http://127.0.0.1:1\", fault_server: true }
load:
  rate: 300
  requests:
    - { name: read, method: GET, path: \"/items/{n}\" }
policies:
  - { name: plain, max_attempts: 3, attempt_timeout: 1s, backoff: { fixed: 10ms } }
gates:
  - no_duplicate_side_effects
";

fn recorder(n: u64) -> Recorder {
    let mut r = Recorder::new(Some((Duration::ZERO, Duration::from_secs(1))));
    for i in 0..n {
        let at = Duration::from_millis(i * 37);
        r.arrived(at, Duration::from_micros(i));
        r.sent(at, at, false, &format!("r-{i}"), std::iter::empty());
        if i % 4 == 0 {
            r.attempt_done(Outcome::Status(503), Duration::from_millis(2), false);
            r.sent(at, at, true, &format!("r-{i}"), std::iter::empty());
            r.attempt_done(Outcome::Status(503), Duration::from_millis(3), true);
            let verdict = Verdict::GaveUp {
                reason: GiveUp::MaxAttempts,
                attempts: 2,
                last: None,
            };
            r.finished(at, Duration::from_millis(9), &verdict);
        } else {
            r.attempt_done(Outcome::Status(200), Duration::from_millis(2), false);
            r.finished(
                at,
                Duration::from_millis(2),
                &Verdict::Succeeded { attempts: 1 },
            );
        }
    }
    r
}

fn partial(plan: &harness::plan::Plan, file: &Path, index: u32) -> Partial {
    Partial {
        schema: PARTIAL_SCHEMA.to_owned(),
        plan: PartialPlan {
            name: plan.name.clone(),
            file: file.display().to_string(),
            seed: 11,
            digest: plan.digest(),
            target: "http://127.0.0.1:1".into(),
        },
        shard: Shard { index, count: 2 },
        start_at: "2026-12-07T08:00:00.000Z".into(),
        finished_at: "2026-12-07T08:01:00.000Z".into(),
        keeper: index == 0,
        policies: vec![PartialPolicy {
            name: "plain".into(),
            recorder: recorder(60).saved(),
            budget_bound: None,
            breaker_trips: 0,
            elapsed_ms: 1000,
            aborted: false,
            gone: None,
            ledger: None,
            tiers: Vec::new(),
        }],
        aborted: false,
        error: None,
        warnings: Vec::new(),
        faults: None,
        faults_from: String::new(),
    }
}

struct Setup {
    dir: PathBuf,
    plan_file: PathBuf,
    plan: harness::plan::Plan,
}

fn setup(name: &str) -> Setup {
    let dir = common::scratch(name);
    let plan_file = common::write_plan(&dir, "even.yaml", PLAN);
    let plan = harness::plan::load(&plan_file).expect("a valid plan");
    Setup {
        dir,
        plan_file,
        plan,
    }
}

fn merge_binary(s: &Setup, files: &[&Path]) -> std::process::Output {
    common::harness()
        .current_dir(&s.dir)
        .args(["merge", "--quiet", "--out"])
        .arg(s.dir.join("out"))
        .arg("--plan")
        .arg(&s.plan_file)
        .args(files)
        .output()
        .expect("run harness merge")
}

#[test]
fn a_histogram_declaring_4_gib_is_refused_naming_file_and_field() {
    let s = setup("fuzz-partials-4gib");
    let mut p = partial(&s.plan, &s.plan_file, 0);
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut v2 = b64.decode(&p.policies[0].recorder.latency).expect("base64");
    v2[4..8].copy_from_slice(&u32::MAX.to_be_bytes());
    p.policies[0].recorder.latency = b64.encode(&v2);
    let file = s.dir.join("shard-0.json");
    std::fs::write(&file, p.to_json()).expect("write");
    assert!(std::fs::metadata(&file).expect("written").len() < 16 << 10);
    let out = merge_binary(&s, &[&file]);
    let err = common::stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("shard-0.json: policies[plain].recorder histogram `latency` is refused before it is decoded: its header declares a payload of 4294967295 bytes"),
        "{err}"
    );
}

#[test]
fn a_partial_larger_than_the_cap_is_refused_by_its_size() {
    let s = setup("fuzz-partials-large");
    let file = s.dir.join("huge.json");
    let f = std::fs::File::create(&file).expect("create");
    // Sparse: its size is past the cap, and no byte of it need be read.
    f.set_len(partial::MAX_PARTIAL_BYTES + 1).expect("size");
    let out = merge_binary(&s, &[&file]);
    let err = common::stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    // Its size, which only a look before reading knows.
    assert!(
        err.contains("huge.json is larger than 256 MiB (268435457 bytes)"),
        "{err}"
    );
}

/// A seeded SplitMix64: the same cases every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

const BYTES: &[u8] = b"{}[]:,\"0919-.eE \\nAz";

/// One mutation of a partial's JSON.
fn mutate(text: &str, rng: &mut Rng) -> Vec<u8> {
    let mut bytes = text.as_bytes().to_vec();
    match rng.below(4) {
        0 => {
            for _ in 0..=rng.below(3) {
                let i = rng.below(bytes.len());
                bytes[i] = BYTES[rng.below(BYTES.len())];
            }
        }
        1 => bytes.truncate(rng.below(bytes.len())),
        2 => {
            // A number replaced by 2^64 - 1.
            let starts: Vec<usize> = (0..bytes.len())
                .filter(|&i| {
                    bytes[i].is_ascii_digit() && (i == 0 || !bytes[i - 1].is_ascii_digit())
                })
                .collect();
            let at = starts[rng.below(starts.len())];
            let end = (at..bytes.len())
                .find(|&i| !bytes[i].is_ascii_digit())
                .unwrap_or(bytes.len());
            bytes.splice(at..end, b"18446744073709551615".iter().copied());
        }
        _ => {
            // A key repeated: `"key":` inserted again before a key.
            let keys: Vec<usize> = (1..bytes.len())
                .filter(|&i| bytes[i] == b'"' && matches!(bytes[i - 1], b'{' | b','))
                .collect();
            let at = keys[rng.below(keys.len())];
            let end = (at + 1..bytes.len())
                .find(|&i| bytes[i] == b'"')
                .unwrap_or(bytes.len());
            let mut dup = bytes[at..=end.min(bytes.len() - 1)].to_vec();
            dup.extend(b":18446744073709551615,");
            bytes.splice(at..at, dup);
        }
    }
    bytes
}

#[test]
fn mutated_partials_merge_or_are_refused_naming_the_file_never_a_panic() {
    let s = setup("fuzz-partials-mutated");
    let good = s.dir.join("shard-1.json");
    std::fs::write(&good, partial(&s.plan, &s.plan_file, 1).to_json()).expect("write");
    let original = partial(&s.plan, &s.plan_file, 0).to_json();
    let mut rng = Rng(0x5eed_0050);
    let (mut merged, mut refused) = (0, 0);
    for case in 0..400 {
        let bytes = mutate(&original, &mut rng);
        let file = s.dir.join("shard-0.json");
        std::fs::write(&file, &bytes).expect("write");
        let started = Instant::now();
        let outcome = std::panic::catch_unwind(|| {
            let p = partial::read(&file).map_err(|e| e.to_string())?;
            let g = partial::read(&good).expect("the untouched partial reads");
            let sources = vec![
                Source {
                    path: file.display().to_string(),
                    partial: p,
                },
                Source {
                    path: good.display().to_string(),
                    partial: g,
                },
            ];
            merge::merge(&s.plan, sources)
                .map(|report| serde_json::to_string(&report).expect("a report serialises"))
                .map_err(|e| e.to_string())
        });
        let took = started.elapsed();
        assert!(took < Duration::from_secs(2), "case {case}: {took:?}");
        match outcome {
            Err(_) => panic!(
                "case {case} panicked on:\n{}",
                String::from_utf8_lossy(&bytes)
            ),
            Ok(Ok(_)) => merged += 1,
            Ok(Err(e)) => {
                refused += 1;
                assert!(e.contains(".json"), "case {case}: {e}");
            }
        }
        // Every 40th case through the real binary: 0 to 3, never a crash.
        if case % 40 == 0 {
            let out = merge_binary(&s, &[&file, &good]);
            assert!(
                matches!(out.status.code(), Some(0..=3)),
                "case {case}: {:?}\n{}",
                out.status,
                common::stderr(&out)
            );
        }
    }
    assert!(
        refused > 100 && merged > 0,
        "{merged} merged, {refused} refused"
    );
}

/// Lists longer than a run writes are refused as they are read, naming the file: a 240 MB
/// partial of empty warnings took 7.2 GB and 42 s to merge (and merged) before.
#[test]
fn texts_longer_than_a_run_writes_are_refused_as_read() {
    let s = setup("fuzz-partials-texts");
    let p = partial(&s.plan, &s.plan_file, 0);
    let json: serde_json::Value = serde_json::from_str(&p.to_json()).expect("json");
    let long = "x".repeat(harness::shard::partial::MAX_TEXT + 1);
    let cases: [(&str, Edit); 4] = [
        ("warnings", &|j| j["warnings"] = vec![long.as_str()].into()),
        ("error", &|j| j["error"] = long.as_str().into()),
        ("faults_from", &|j| j["faults_from"] = long.as_str().into()),
        ("gone", &|j| j["policies"][0]["gone"] = long.as_str().into()),
    ];
    refused_as_read(&s, &json, &cases, "bytes, in a place of at most 16384");
}

/// What a keeper writes fits what merge reads, however long the server's own script's
/// account (a thousand phases, named in `faults_from`).
#[test]
fn a_partial_the_run_fits_is_one_merge_reads() {
    let s = setup("fuzz-partials-fit");
    let mut p = partial(&s.plan, &s.plan_file, 0);
    let phases: Vec<String> = (0..2000).map(|i| format!("phase-number-{i:04}")).collect();
    p.faults_from = format!("the fault-server's own script ({})", phases.join(", "));
    p.warnings = phases
        .iter()
        .map(|ph| format!("{ph} {}", "é".repeat(9000)))
        .collect();
    p.faults = Some(phases);
    p.error = Some("x".repeat(100_000));
    p.fit();
    let file = s.dir.join("shard-0.json");
    std::fs::write(&file, p.to_json()).expect("write");
    let out = merge_binary(&s, &[&file]);
    let err = common::stderr(&out);
    assert_ne!(out.status.code(), Some(2), "merge read it: {err}");
    assert!(
        p.faults_from
            .ends_with("[cut: longer than a partial holds]")
    );
    assert_eq!(p.warnings.len(), harness::shard::partial::MAX_LISTED);
    assert!(
        p.warnings
            .last()
            .is_some_and(|w| w == "and 977 more warnings")
    );
}

#[test]
fn lists_longer_than_a_run_writes_are_refused_as_read() {
    let s = setup("fuzz-partials-lists");
    let p = partial(&s.plan, &s.plan_file, 0);
    let json: serde_json::Value = serde_json::from_str(&p.to_json()).expect("json");
    let many: serde_json::Map<String, serde_json::Value> = (0..1025)
        .map(|i| (format!("{}", 100 + i), 1.into()))
        .collect();
    let cases: [(&str, Edit); 4] = [
        ("warnings", &|j| j["warnings"] = vec![""; 1025].into()),
        ("faults", &|j| j["faults"] = vec!["down"; 1025].into()),
        ("outcomes", &|j| {
            j["policies"][0]["recorder"]["outcomes"] = many.clone().into();
        }),
        ("examples", &|j| {
            j["policies"][0]["recorder"]["retried_permanent"]["examples"] = vec!["r-1"; 6].into();
        }),
    ];
    refused_as_read(&s, &json, &cases, "entries in a list of at most");
}

type Edit<'a> = &'a dyn Fn(&mut serde_json::Value);

/// Each edit of a good partial's JSON makes merge refuse it (exit 2), naming the file and
/// saying `why`.
fn refused_as_read(s: &Setup, json: &serde_json::Value, cases: &[(&str, Edit)], why: &str) {
    for (field, edit) in cases {
        let mut j = json.clone();
        edit(&mut j);
        let file = s.dir.join("shard-0.json");
        std::fs::write(&file, j.to_string()).expect("write");
        let out = merge_binary(s, &[&file]);
        let err = common::stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{field}: {err}");
        assert!(
            err.contains("shard-0.json") && err.contains(why),
            "{field}: {err}"
        );
    }
}
