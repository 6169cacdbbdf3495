//! A plan fuzzer: the shipped plans, mutated the ways hands and tools break YAML, must load
//! or be refused with a located error; never a panic, never a hang. Bounded: a fixed number
//! of cases per run, each a few milliseconds.

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
