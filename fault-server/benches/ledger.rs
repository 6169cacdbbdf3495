//! The ledger's hot path at steady state, what every request with a new `x-request-id`
//! costs the fault-server (and the simulator, which runs the same ledger): one id
//! remembered and, the ledger being full, the oldest evicted. Both are random places in a
//! table of `max_ids` entries that no cache holds, so this measures memory latency as
//! much as code.
//!
//! `cargo bench -p fault-server --bench ledger` (`just bench-ledger`).

use std::hint::black_box;
use std::time::Duration;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use fault_server::LedgerLimits;
use fault_server::ledger::{Ledger, RequestIdentity};

/// Ids as the harness makes them: a 16-hex-digit run prefix, a dash, a counter.
fn id(n: u64) -> String {
    format!("5eed5eed5eed5eed-{n}")
}

/// A ledger holding its `max_ids`.
fn full() -> Ledger {
    let ledger = Ledger::new(LedgerLimits::default());
    for n in 0..ledger.limits().max_ids as u64 {
        let who = RequestIdentity {
            request_id: Some(&id(n)),
            policy: Some("p"),
            attempt: None,
        };
        ledger.record_request(who, Duration::ZERO);
    }
    ledger
}

fn new_ids(c: &mut Criterion) {
    const BATCH: u64 = 100_000;
    let mut group = c.benchmark_group("ledger");
    group.throughput(Throughput::Elements(BATCH));
    group.sample_size(20);
    let ledger = full();
    let mut next = ledger.limits().max_ids as u64;
    group.bench_function("new id, full ledger (x100k)", |b| {
        b.iter_batched(
            || {
                let ids: Vec<String> = (next..next + BATCH).map(id).collect();
                next += BATCH;
                ids
            },
            |ids| {
                for (i, request_id) in ids.iter().enumerate() {
                    let who = RequestIdentity {
                        request_id: Some(request_id),
                        policy: Some("p"),
                        attempt: None,
                    };
                    ledger.record_request(black_box(who), Duration::from_micros(i as u64));
                }
            },
            BatchSize::PerIteration,
        );
    });
    group.finish();
}

criterion_group!(benches, new_ids);
criterion_main!(benches);
