//! A fuzzer of what users hand the harness: the shipped plans (tier lists included), the
//! production configs they import, and the baselines `compare` reads, mutated the ways
//! hands and tools break YAML and JSON. Each must load or be refused with a located error;
//! never a panic, never a hang. Bounded: a fixed number of cases per run, each a few
//! milliseconds.

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::strategy::ValueTree;

fn shipped() -> Vec<(PathBuf, String)> {
    let mut plans: Vec<(PathBuf, String)> = std::fs::read_dir(common::repo().join("plans"))
        .expect("plans/")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .map(|p| {
            let text = std::fs::read_to_string(&p).expect("read a plan");
            (p, text)
        })
        .collect();
    plans.sort();
    plans.push((
        common::repo().join("docs/plan-reference.yaml"),
        std::fs::read_to_string(common::repo().join("docs/plan-reference.yaml"))
            .expect("the reference plan"),
    ));
    plans
}

/// One edit of a plan's text.
#[derive(Debug, Clone)]
enum Mutation {
    /// Replace the character at (a fraction of) the text with one that means something
    /// to YAML or to the loader.
    Replace(f64, char),
    /// Delete a run of characters.
    Delete(f64, usize),
    /// Repeat a line.
    Duplicate(f64),
    /// Insert a snippet: a number out of range, a deep nesting, an odd key.
    Insert(f64, &'static str),
}

const SPECIAL: &[char] = &[
    '[', ']', '{', '}', ':', ',', '-', '#', '\'', '"', '\n', ' ', '0', '9', '.', '*', '&', '!',
    '|', '>', '%', '@', '`', '\t', 'é',
];

const SNIPPETS: &[&str] = &[
    "-1",
    "1e309",
    "18446744073709551616",
    "0",
    "NaN",
    ".inf",
    "0s",
    "999999h",
    "~",
    "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]",
    "{a: {b: {c: {d: {e: {f: {g: {}}}}}}}}",
    "\nextra: 1\n",
    "&anchor ",
    "*anchor",
    "!!binary ",
    "<<: *x\n",
    "\n  - { name: x }\n",
    "http://10.0.0.1:80",
    "/__chaos/ledger",
    "..",
    // Tier lists: a repeat, one past the most, a tier with no policy, odd tier policies.
    "\ntiers: [api, api]\n",
    "\ntiers: [t1, t2, t3, t4, t5, t6, t7, t8, t9, t10, t11, t12, t13, t14, t15, t16, t17]\n",
    "\n    tiers: { api: same, nope: none }\n",
    "\n    tiers: { api: { max_attempts: 4294967295, backoff: none } }\n",
    "tiers: []",
    // Proxy tiers: the shipped nginx config, one missing, one named by a policy.
    "\ntiers: [ { name: edge, nginx: { config: stacks/nginx.conf } }, api ]\n",
    "\ntiers: [ { name: lb, haproxy: { config: stacks/nope.cfg, backend: x } } ]\n",
    "\n    tiers: { edge: same }\n",
    // Imports: a missing file, a directory, a FIFO-like path, both sources at once.
    "\n    import: { grpc_service_config: production/nope.json, service: s }\n",
    "\n    import: { grpc_service_config: production, service: s }\n",
    "\n    import: { envoy_route: /dev/zero }\n",
    "\n    import: { envoy_route: production/envoy-route.yaml, grpc_service_config: production/grpc-service-config.json }\n",
    // Numbers JSON and protobuf durations allow and configs then misuse.
    "4294967296",
    "315576000000s",
    "1e-400",
    "\"\"",
];

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (0.0..1.0f64, prop::sample::select(SPECIAL)).prop_map(|(at, c)| Mutation::Replace(at, c)),
        (0.0..1.0f64, 1usize..40).prop_map(|(at, n)| Mutation::Delete(at, n)),
        (0.0..1.0f64).prop_map(Mutation::Duplicate),
        (0.0..1.0f64, prop::sample::select(SNIPPETS)).prop_map(|(at, s)| Mutation::Insert(at, s)),
    ]
}

fn apply(text: &str, m: &Mutation) -> String {
    let chars: Vec<char> = text.chars().collect();
    let at = |f: f64| ((f * chars.len() as f64) as usize).min(chars.len().saturating_sub(1));
    match m {
        Mutation::Replace(f, c) => {
            let mut out = chars.clone();
            out[at(*f)] = *c;
            out.into_iter().collect()
        }
        Mutation::Delete(f, n) => {
            let i = at(*f);
            let end = (i + n).min(chars.len());
            chars[..i].iter().chain(&chars[end..]).collect()
        }
        Mutation::Duplicate(f) => {
            let lines: Vec<&str> = text.lines().collect();
            let i = ((f * lines.len() as f64) as usize).min(lines.len().saturating_sub(1));
            let mut out = lines.clone();
            out.insert(i, lines[i]);
            out.join("\n")
        }
        Mutation::Insert(f, s) => {
            let i = at(*f);
            chars[..i]
                .iter()
                .copied()
                .chain(s.chars())
                .chain(chars[i..].iter().copied())
                .collect()
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1500, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn mutated_plans_load_or_are_refused_with_a_located_error(
        which in 0usize..64,
        edits in prop::collection::vec(mutation(), 1..4),
    ) {
        let plans = shipped();
        let (path, text) = &plans[which % plans.len()];
        let mut mutated = text.clone();
        for m in &edits {
            mutated = apply(&mutated, m);
        }
        let started = Instant::now();
        match harness::plan::parse(path, &mutated) {
            Ok(plan) => prop_assert!(!plan.policies.is_empty()),
            Err(e) => {
                let said = e.to_string();
                prop_assert!(said.contains(&path.display().to_string()), "{said}");
            }
        }
        prop_assert!(started.elapsed() < Duration::from_secs(5), "a parse took {:?}", started.elapsed());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, failure_persistence: None, ..ProptestConfig::default() })]

    /// What `validate` runs: the recovery that looks past each error never panics nor
    /// hangs, loads what `parse` loads, and reports at most its cap, each error located.
    #[test]
    fn every_error_of_a_mutated_plan_is_found_located_and_bounded(
        which in 0usize..64,
        edits in prop::collection::vec(mutation(), 1..6),
    ) {
        let plans = shipped();
        let (path, text) = &plans[which % plans.len()];
        let mutated = edits.iter().fold(text.clone(), |t, m| apply(&t, m));
        let started = Instant::now();
        let all = harness::plan::parse_all(path, &mutated);
        let first = harness::plan::parse(path, &mutated);
        match (all, first) {
            (Ok(_), Ok(_)) => {}
            (Err(found), Err(first)) => {
                prop_assert!(!found.errors.is_empty());
                prop_assert!(found.errors.len() <= harness::plan::MAX_ERRORS);
                prop_assert!(found.errors.iter().any(|e| e.holds(&first)), "{first} not in {found:#?}");
                for e in &found.errors {
                    prop_assert!(e.to_string().contains(&path.display().to_string()), "{e}");
                }
            }
            (all, first) => prop_assert!(false, "parse_all {:?} but parse {:?}", all.is_ok(), first.is_ok()),
        }
        prop_assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
    }
}

/// The text of a repository file.
fn repo_text(path: &str) -> String {
    std::fs::read_to_string(common::repo().join(path)).expect("a repository file")
}

/// The configs `plans/rollout.yaml` imports, each beside a copy of the plan.
const IMPORTED: &[&str] = &[
    "production/grpc-service-config.json",
    "production/envoy-route.yaml",
    "production/envoy-cluster.yaml",
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, failure_persistence: None, ..ProptestConfig::default() })]

    /// `rollout.yaml` with one of the production configs it imports mutated: the plan loads
    /// or is refused at the `import:` key that names the file.
    #[test]
    fn mutated_imports_load_or_are_refused_at_the_import(
        which in 0usize..3,
        edits in prop::collection::vec(mutation(), 1..4),
    ) {
        let dir = common::scratch(&format!("fuzz-import-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("production")).expect("mkdir");
        for (i, file) in IMPORTED.iter().enumerate() {
            let text = repo_text(&format!("plans/{file}"));
            let text = if i == which {
                edits.iter().fold(text, |t, m| apply(&t, m))
            } else {
                text
            };
            std::fs::write(dir.join(file), text).expect("write a config");
        }
        let path = common::write_plan(&dir, "rollout.yaml", &repo_text("plans/rollout.yaml"));
        let started = Instant::now();
        match harness::plan::load(&path) {
            Ok(plan) => prop_assert!(!plan.policies.is_empty()),
            Err(e) => {
                let said = e.to_string();
                prop_assert!(said.contains("rollout.yaml:"), "not located: {said}");
            }
        }
        prop_assert!(started.elapsed() < Duration::from_secs(5), "a load took {:?}", started.elapsed());
    }

    /// A baseline mutated: read or refused with its file named; two that read compare.
    #[test]
    fn mutated_baselines_are_read_or_refused_and_compare(
        which in 0usize..64,
        edits in prop::collection::vec(mutation(), 1..4),
    ) {
        let baselines = baselines();
        let (name, text) = &baselines[which % baselines.len()];
        let mutated = edits.iter().fold(text.clone(), |t, m| apply(&t, m));
        let dir = common::scratch(&format!("fuzz-baseline-{}", std::process::id()));
        let path = dir.join(name);
        std::fs::write(&path, &mutated).expect("write a baseline");
        let started = Instant::now();
        match harness::baseline::read(&path) {
            Ok(now) => {
                let base = harness::baseline::read(&common::repo().join("reports/baselines").join(name))
                    .expect("a shipped baseline reads");
                let comparison = harness::baseline::compare(&base, name, &now.policies, &now.plan, &base.tolerance);
                prop_assert!(comparison.rows.len() >= base.policies.len().min(now.policies.len()));
            }
            Err(e) => {
                let said = e.to_string();
                prop_assert!(said.contains(name.as_str()), "the file is not named: {said}");
            }
        }
        prop_assert!(started.elapsed() < Duration::from_secs(5), "a read took {:?}", started.elapsed());
    }
}

/// The shipped baselines, by file name.
fn baselines() -> Vec<(String, String)> {
    let mut files: Vec<(String, String)> =
        std::fs::read_dir(common::repo().join("reports/baselines"))
            .expect("reports/baselines/")
            .filter_map(Result::ok)
            .map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                (
                    name,
                    std::fs::read_to_string(e.path()).expect("read a baseline"),
                )
            })
            .collect();
    files.sort();
    files
}

/// The real binary on a few mutated plans: exit 0 or 2, nothing else.
#[test]
fn validate_exits_0_or_2_on_mutated_plans() {
    let dir = common::scratch("fuzz-validate");
    let plans = shipped();
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    for i in 0..24 {
        let (_, text) = &plans[i % plans.len()];
        let edits = prop::collection::vec(mutation(), 1..4)
            .new_tree(&mut runner)
            .expect("a value")
            .current();
        let mutated = edits.iter().fold(text.clone(), |t: String, m| apply(&t, m));
        let path = common::write_plan(&dir, &format!("m{i}.yaml"), &mutated);
        let out = common::harness()
            .arg("validate")
            .arg(&path)
            .output()
            .expect("run harness");
        assert!(
            matches!(out.status.code(), Some(0 | 2)),
            "{}: {:?}\n{}",
            path.display(),
            out.status,
            common::stderr(&out)
        );
        assert!(!common::stderr(&out).contains("panicked"));
    }
}

/// The real binary's `compare` on a few mutated baselines: exit 0, 1 or 2, nothing else.
#[test]
fn compare_exits_0_1_or_2_on_mutated_baselines() {
    let dir = common::scratch("fuzz-compare");
    let baselines = baselines();
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    for i in 0..16 {
        let (name, text) = &baselines[i % baselines.len()];
        let edits = prop::collection::vec(mutation(), 1..4)
            .new_tree(&mut runner)
            .expect("a value")
            .current();
        let mutated = edits.iter().fold(text.clone(), |t: String, m| apply(&t, m));
        let path = dir.join(format!("m{i}-{name}"));
        std::fs::write(&path, mutated).expect("write");
        let out = common::harness()
            .arg("compare")
            .arg(common::repo().join("reports/baselines").join(name))
            .arg(&path)
            .output()
            .expect("run harness");
        assert!(
            matches!(out.status.code(), Some(0..=2)),
            "{}: {:?}\n{}",
            path.display(),
            out.status,
            common::stderr(&out)
        );
        assert!(!common::stderr(&out).contains("panicked"));
    }
}
