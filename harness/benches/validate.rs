//! What `harness validate` costs on the plans that made it slow or that it exists for:
//! the 100,000-level nesting bomb (`load: [[[…]]]`, 200 KB), refused by the depth scan
//! before any parse or recovery; a plan with six mistakes, every one found (a parse per
//! mistake); and a shipped plan that is valid. Figures in docs/benchmarks.md.

use std::hint::black_box;
use std::path::Path;

use criterion::{Criterion, criterion_group, criterion_main};

const DEPTH: usize = 100_000;

fn bomb() -> String {
    format!(
        "duration: 1s\nload: {}{}\npolicies: [ {{ name: a }} ]\n",
        "[".repeat(DEPTH),
        "]".repeat(DEPTH)
    )
}

const SIX_MISTAKES: &str = "\
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
";

fn validate(c: &mut Criterion) {
    let path = Path::new("bomb.yaml");
    let bomb = bomb();
    c.bench_function("validate: 100,000-level nesting bomb, refused", |b| {
        b.iter(|| {
            let found = harness::plan::parse_all(path, black_box(&bomb));
            assert!(found.is_err_and(|f| f.errors.len() == 1));
        });
    });
    c.bench_function("validate: a plan with six mistakes, all found", |b| {
        b.iter(|| {
            let found = harness::plan::parse_all(path, black_box(SIX_MISTAKES));
            assert!(found.is_err_and(|f| f.errors.len() == 6));
        });
    });
    let outage =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../plans/outage.yaml"))
            .expect("plans/outage.yaml");
    c.bench_function("validate: plans/outage.yaml, valid", |b| {
        b.iter(|| {
            let plan = harness::plan::parse_all(Path::new("plans/outage.yaml"), black_box(&outage));
            assert!(plan.is_ok());
        });
    });
}

criterion_group!(benches, validate);
criterion_main!(benches);
