//! `harness compare` on baselines and reports broken the ways disks and hands break them:
//! a seeded fuzzer of truncations, byte flips, values replaced by huge, negative,
//! NaN-like or wrongly typed ones, deep nesting and lists nobody wrote. Each must read
//! and compare or be refused with an error that names the file; never a panic, never a
//! hang. Bounded: a few hundred seeded cases in process, a few through the real binary.

mod common;

use std::path::Path;

use harness::baseline::{self, Baseline};

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

const BYTES: &[u8] = b"{}[]:,\"0919-.eE \\nAzN";

/// What a value is replaced by: huge, negative, NaN-like (not JSON), of the wrong type.
const VALUES: &[&str] = &[
    "18446744073709551615",
    "18446744073709551616",
    "1e309",
    "-1e309",
    "-1",
    "-0.5",
    "NaN",
    "Infinity",
    "-0",
    "1e-400",
    "\"x\"",
    "\"\"",
    "null",
    "true",
    "{}",
    "[]",
    "[1, \"a\", {}]",
    "{\"a\": {\"b\": [null]}}",
];

/// Where each value of the JSON starts (after a `:`), and where it ends at the latest
/// (the next `,`, `}` or `]`): a replaced value may cut into a nested one, which is a
/// mutation too.
fn values(bytes: &[u8]) -> Vec<(usize, usize)> {
    (0..bytes.len())
        .filter(|&i| bytes[i] == b':')
        .map(|i| {
            let end = (i + 1..bytes.len())
                .find(|&j| matches!(bytes[j], b',' | b'}' | b']'))
                .unwrap_or(bytes.len());
            (i + 1, end)
        })
        .collect()
}

/// One mutation of a baseline's or a report's JSON.
fn mutate(text: &str, rng: &mut Rng) -> Vec<u8> {
    let mut bytes = text.as_bytes().to_vec();
    let spots = values(&bytes);
    let (at, end) = spots[rng.below(spots.len())];
    match rng.below(7) {
        0 => {
            for _ in 0..=rng.below(3) {
                let i = rng.below(bytes.len());
                bytes[i] = BYTES[rng.below(BYTES.len())];
            }
        }
        1 => bytes.truncate(rng.below(bytes.len())),
        2 | 3 => {
            let value = VALUES[rng.below(VALUES.len())];
            bytes.splice(at..end, format!(" {value}").into_bytes());
        }
        4 => {
            // Nesting deeper than any reader here allows (serde_json's 128, a resolved
            // policy's 16) or just within it.
            let depth = [15, 17, 127, 129, 5000][rng.below(5)];
            let nested = format!(" {}0{}", "[".repeat(depth), "]".repeat(depth));
            bytes.splice(at..end, nested.into_bytes());
        }
        5 => {
            // A list nobody wrote: 5,000 values where one was.
            let list = format!(" [{}0]", "0,".repeat(4999));
            bytes.splice(at..end, list.into_bytes());
        }
        _ => {
            // A key repeated with another value.
            let value = VALUES[rng.below(VALUES.len())];
            let key_end = at - 1;
            let key_start = (0..key_end.saturating_sub(1))
                .rev()
                .find(|&i| bytes[i] == b'"' && i + 1 < key_end && bytes[i + 1] != b':')
                .map_or(0, |i| (0..i).rev().find(|&j| bytes[j] == b'"').unwrap_or(i));
            let mut dup = bytes[key_start..key_end].to_vec();
            dup.extend(format!(": {value},").into_bytes());
            bytes.splice(key_start..key_start, dup);
        }
    }
    bytes
}

/// A report of a real (simulated) run, and the committed smoke baseline.
fn originals() -> Vec<(&'static str, String)> {
    let plan = common::plan(
        "name: fuzz
seed: 5
duration: 2s
drain: 1s
target: { url: \"http://127.0.0.1:1\", fault_server: true }
load:
  rate: 100
  requests:
    - { name: read, method: GET, path: \"/items/{n}\" }
faults:
  - { name: down, until: 1s, probability: 0.3, respond: { status: 503 } }
policies:
  - { name: plain, max_attempts: 3, attempt_timeout: 1s, backoff: { fixed: 10ms } }
  - { name: sre, preset: sre }
",
    );
    let report = serde_json::to_string_pretty(&common::simulated(&plan)).expect("a report");
    let smoke = std::fs::read_to_string(common::repo().join("reports/baselines/smoke.json"))
        .expect("the committed smoke baseline");
    vec![("report", report), ("baseline", smoke)]
}

/// Reads `file` and compares it against `against`, as `harness compare` does.
fn compare(against: &Baseline, file: &Path) -> Result<String, String> {
    let now = baseline::read(file).map_err(|e| e.to_string())?;
    let comparison = baseline::compare(
        against,
        "against.json",
        &now.policies,
        &now.plan,
        &against.tolerance,
    );
    Ok(harness::report::baseline_table(&comparison))
}

#[test]
fn mutated_baselines_and_reports_compare_or_are_refused_naming_the_file_never_a_panic() {
    let dir = common::scratch("fuzz-baselines");
    let mut rng = Rng(0x5eed_0b45);
    let (mut read, mut refused) = (0, 0);
    for (kind, original) in originals() {
        let against_file = dir.join(format!("{kind}-original.json"));
        std::fs::write(&against_file, &original).expect("write");
        let against = baseline::read(&against_file).expect("the original reads");
        for case in 0..200 {
            let bytes = mutate(&original, &mut rng);
            let file = dir.join(format!("{kind}-mutated.json"));
            std::fs::write(&file, &bytes).expect("write");
            let outcome = std::panic::catch_unwind(|| compare(&against, &file));
            match outcome {
                Err(_) => panic!(
                    "{kind} case {case} panicked on:\n{}",
                    String::from_utf8_lossy(&bytes)
                ),
                Ok(Ok(_)) => read += 1,
                Ok(Err(e)) => {
                    refused += 1;
                    assert!(e.contains("mutated.json"), "{kind} case {case}: {e}");
                }
            }
            // Every 40th case through the real binary, both ways: 0 to 2, never a crash.
            if case % 40 == 0 {
                for (base, now) in [(&against_file, &file), (&file, &against_file)] {
                    let out = common::harness()
                        .arg("compare")
                        .args([base, now])
                        .output()
                        .expect("run harness compare");
                    assert!(
                        matches!(out.status.code(), Some(0..=2)),
                        "{kind} case {case}: {:?}\n{}",
                        out.status,
                        common::stderr(&out)
                    );
                }
            }
        }
    }
    assert!(read > 20 && refused > 100, "{read} read, {refused} refused");
}

/// Bounds the old reader did not have: more policies than a plan runs, and a resolved
/// policy of more values or deeper nesting than any policy resolves to, are refused
/// naming the file (the old reader took 2.6 GB for a 62 MB list).
#[test]
fn a_baseline_of_more_than_a_plan_could_write_is_refused() {
    let dir = common::scratch("fuzz-baselines-bounds");
    let smoke = std::fs::read_to_string(common::repo().join("reports/baselines/smoke.json"))
        .expect("the committed smoke baseline");
    let mut json: serde_json::Value = serde_json::from_str(&smoke).expect("json");
    let one = json["policies"][0].clone();
    let cases: Vec<(&str, serde_json::Value, &str)> = vec![
        (
            "many.json",
            serde_json::Value::Array(
                (0..65)
                    .map(|i| {
                        let mut p = one.clone();
                        p["name"] = format!("p{i}").into();
                        p
                    })
                    .collect(),
            ),
            "more than 64 entries in a list of at most 64",
        ),
        (
            "long.json",
            serde_json::json!([{ "resolved": vec![0; 5000] }]),
            "a resolved policy holds more than 4096 values",
        ),
        (
            "deep.json",
            serde_json::json!([{ "resolved": serde_json::from_str::<serde_json::Value>(
                &format!("{}0{}", "[".repeat(20), "]".repeat(20))
            ).expect("json") }]),
            "a resolved policy nests more than 16 levels deep",
        ),
    ];
    for (name, policies, said) in cases {
        let mut policies = policies;
        if let Some(first) = policies.get_mut(0).filter(|p| p.get("name").is_none()) {
            let mut p = one.clone();
            p["resolved"] = first["resolved"].take();
            *first = p;
        }
        json["policies"] = policies;
        let file = dir.join(name);
        std::fs::write(&file, json.to_string()).expect("write");
        let out = common::harness()
            .arg("compare")
            .arg(common::repo().join("reports/baselines/smoke.json"))
            .arg(&file)
            .output()
            .expect("run harness compare");
        let err = common::stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{name}: {err}");
        assert!(err.contains(name) && err.contains(said), "{name}: {err}");
    }
}
