//! One full session decision path, what every logical request costs the core: start, a 503,
//! the backoff, the retry, a 200. Four decisions per iteration (start, outcome, timer,
//! outcome), through a client with a ttl budget and a breaker, as a budgeted plan would run
//! them.

use std::hint::black_box;
use std::time::Duration;

use chaos_policy::{
    Action, Backoff, BreakerConfig, BudgetConfig, Client, Jitter, Method, Outcome, Policy,
    PolicyConfig, Reply, Request, Start,
};
use criterion::{Criterion, criterion_group, criterion_main};
use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;

fn budgeted() -> Policy {
    Policy::new(PolicyConfig {
        max_attempts: 4,
        attempt_timeout: Some(Duration::from_secs(1)),
        backoff: Backoff::exponential(Duration::from_millis(100), 2.0, Duration::from_secs(5))
            .and_then(|b| b.with_jitter(Jitter::Decorrelated))
            .expect("valid backoff"),
        budget: Some(BudgetConfig::TtlWindow {
            ratio: 0.2,
            min_per_sec: 10.0,
            ttl: Duration::from_secs(10),
        }),
        breaker: Some(BreakerConfig {
            failure_ratio: 0.99,
            min_requests: 20,
            window: Duration::from_secs(10),
            open_for: Duration::from_secs(5),
            half_open_probes: 3,
        }),
        ..PolicyConfig::default()
    })
    .expect("valid policy")
}

fn session_path(c: &mut Criterion) {
    let mut client = Client::new(budgeted());
    let mut rng = ChaCha8Rng::seed_from_u64(42);
    let mut now = Duration::ZERO;
    let request = Request::new(Method::Get);
    c.bench_function(
        "session: fail, back off, retry, succeed (4 decisions)",
        |b| {
            b.iter(|| {
                now += Duration::from_micros(1);
                let (mut session, action) = client.start(black_box(request), now, Start::default());
                debug_assert!(matches!(action, Action::Send { .. }));
                let failed = Reply::bare(Outcome::Status(503));
                let action = client.on_reply(&mut session, now, failed, &mut rng);
                let Action::Wait { until } = action else {
                    return action;
                };
                let _ = black_box(client.on_timer(&mut session, until));
                client.on_reply(
                    &mut session,
                    until,
                    Reply::bare(Outcome::Status(200)),
                    &mut rng,
                )
            })
        },
    );
}

criterion_group!(benches, session_path);
criterion_main!(benches);
