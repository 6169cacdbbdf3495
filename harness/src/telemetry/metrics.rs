//! The run's metrics over OTLP.
//!
//! Counts are not added up a second time on the hot path: each policy's run publishes a
//! snapshot of its [`Recorder`] once a second and at its end, and observable instruments
//! read the latest snapshot at each export, so the exported totals are the report's. Only
//! `http.client.request.duration` is recorded per attempt (a histogram cannot be
//! observed).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chaos_policy::{BreakerState, GiveUp, Outcome, Violation};
use opentelemetry::KeyValue;
use opentelemetry::metrics::{
    AsyncInstrument, Histogram, Meter, ObservableCounter, ObservableGauge,
};
use opentelemetry_sdk::metrics::SdkMeterProvider;

use crate::hop::HopCounts;
use crate::stats::Recorder;

/// One policy's counts at a point of its run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Counts {
    pub offered: u64,
    pub dropped: u64,
    pub succeeded: u64,
    pub failed: u64,
    pub unfinished: u64,
    pub attempts: u64,
    pub retries: u64,
    pub retries_succeeded: u64,
    pub give_ups: BTreeMap<&'static str, u64>,
    pub outcomes: BTreeMap<String, u64>,
    pub retry_outcomes: BTreeMap<String, u64>,
    pub breaker_trips: u64,
    pub breaker: Option<BreakerState>,
    pub budget_level: Option<f64>,
    /// Retries that broke an invariant, by hop (`client`, or a tier's name) and violation.
    pub violations: Vec<(String, &'static str, u64)>,
}

impl Counts {
    pub fn of(
        recorder: &Recorder,
        breaker_trips: u64,
        breaker: Option<BreakerState>,
        budget_level: Option<f64>,
    ) -> Counts {
        let label = |o: &Outcome| o.to_string();
        Counts {
            offered: recorder.offered(),
            dropped: recorder.dropped,
            succeeded: recorder.succeeded,
            failed: recorder.failed,
            unfinished: recorder.unfinished,
            attempts: recorder.attempts,
            retries: recorder.retries,
            retries_succeeded: recorder.retries_succeeded(),
            give_ups: recorder
                .give_ups
                .iter()
                .map(|(g, n)| (GiveUp::name(*g), *n))
                .collect(),
            outcomes: recorder
                .outcomes
                .iter()
                .map(|(o, n)| (label(o), *n))
                .collect(),
            retry_outcomes: recorder
                .retry_outcomes
                .iter()
                .map(|(o, n)| (label(o), *n))
                .collect(),
            breaker_trips,
            breaker,
            budget_level,
            violations: vec![
                (
                    "client".to_owned(),
                    Violation::RetriedPermanent.name(),
                    recorder.retried_permanent.count,
                ),
                (
                    "client".to_owned(),
                    Violation::RetriedNonIdempotent.name(),
                    recorder.retried_non_idempotent.count,
                ),
            ],
        }
    }
}

type Snapshots = Arc<Mutex<BTreeMap<String, Counts>>>;

/// The instruments, and the snapshots they read.
pub struct Meters {
    provider: SdkMeterProvider,
    snapshots: Snapshots,
    duration: Histogram<f64>,
    // Kept so their callbacks stay registered for the provider's life.
    _counters: Vec<ObservableCounter<u64>>,
    _gauges: Vec<ObservableGauge<f64>>,
}

impl std::fmt::Debug for Meters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Meters").finish_non_exhaustive()
    }
}

/// Every metric name, with its unit and what it counts (the docs list the same).
pub const NAMES: [(&str, &str, &str); 14] = [
    (
        "chaos.requests",
        "{request}",
        "logical requests that ended, by verdict",
    ),
    (
        "chaos.requests.offered",
        "{request}",
        "arrivals the schedule offered",
    ),
    (
        "chaos.requests.dropped",
        "{request}",
        "arrivals dropped at max_in_flight",
    ),
    (
        "chaos.give_ups",
        "{request}",
        "logical requests that gave up, by reason",
    ),
    ("chaos.attempts", "{attempt}", "attempts sent, by outcome"),
    ("chaos.retries", "{attempt}", "retries sent, by outcome"),
    (
        "chaos.budget.exhausted",
        "{request}",
        "retries the budget refused: it ran dry",
    ),
    (
        "chaos.breaker.trips",
        "{transition}",
        "times the breaker opened",
    ),
    (
        "chaos.violations",
        "{attempt}",
        "retries that broke an invariant, by chaos.hop and chaos.violation",
    ),
    (
        "chaos.retry.ratio",
        "1",
        "retries over attempts: the retry rate",
    ),
    (
        "chaos.retry.success_ratio",
        "1",
        "retries that succeeded over retries: the success rate after a backoff",
    ),
    (
        "chaos.budget.level",
        "1",
        "the budget's level (tokens, or the share left)",
    ),
    ("chaos.breaker.state", "1", "0 closed, 1 half-open, 2 open"),
    (
        "http.client.request.duration",
        "s",
        "attempt durations (OpenTelemetry HTTP semantic conventions)",
    ),
];

fn unit(name: &str) -> &'static str {
    NAMES
        .iter()
        .find(|(n, _, _)| *n == name)
        .map_or("1", |(_, u, _)| u)
}

fn described(name: &str) -> &'static str {
    NAMES
        .iter()
        .find(|(n, _, _)| *n == name)
        .map_or("", |(_, _, d)| d)
}

fn policy(p: &str) -> KeyValue {
    KeyValue::new("chaos.policy", p.to_owned())
}

impl Meters {
    pub fn new(provider: SdkMeterProvider) -> Meters {
        let meter = opentelemetry::metrics::MeterProvider::meter(&provider, "chaos-harness");
        let snapshots: Snapshots = Arc::default();
        let counters = observable_counters(&meter, &snapshots);
        let gauges = observable_gauges(&meter, &snapshots);
        let duration = duration_histogram(&meter);
        Meters {
            provider,
            snapshots,
            duration,
            _counters: counters,
            _gauges: gauges,
        }
    }

    /// The latest counts of a policy.
    pub fn publish(&self, policy: &str, counts: Counts) {
        self.snapshots
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(policy.to_owned(), counts);
    }

    /// A relay tier's violations, once its counts are final (after the policy's run).
    pub fn publish_tier(&self, policy: &str, tier: &str, counts: &HopCounts) {
        let mut snapshots = self.snapshots.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = snapshots.get_mut(policy) {
            let v = &counts.violations;
            c.violations.retain(|(hop, _, _)| hop != tier);
            for (violation, n) in [
                (Violation::RetriedPermanent, v.retried_permanent.count),
                (
                    Violation::RetriedNonIdempotent,
                    v.retried_non_idempotent.count,
                ),
            ] {
                c.violations.push((tier.to_owned(), violation.name(), n));
            }
        }
    }

    /// One attempt's duration, with the attributes the semantic conventions give it.
    pub fn attempt(&self, took: Duration, attributes: &[KeyValue]) {
        self.duration.record(took.as_secs_f64(), attributes);
    }

    /// Exports what is left and stops (blocking, bounded by `timeout`).
    pub fn shutdown(&self, timeout: Duration) {
        let _ = self.provider.shutdown_with_timeout(timeout);
    }
}

/// The counters, each observing every policy's latest counts.
fn observable_counters(meter: &Meter, snapshots: &Snapshots) -> Vec<ObservableCounter<u64>> {
    type Each = fn(&str, &Counts, &dyn AsyncInstrument<u64>);
    let counter_fns: [(&'static str, Each); 9] = [
        ("chaos.requests", |p, c, o| {
            o.observe(
                c.succeeded,
                &[policy(p), KeyValue::new("chaos.verdict", "succeeded")],
            );
            // `failed` counts the unfinished too: each request under one verdict.
            o.observe(
                c.failed.saturating_sub(c.unfinished),
                &[policy(p), KeyValue::new("chaos.verdict", "gave_up")],
            );
            o.observe(
                c.unfinished,
                &[policy(p), KeyValue::new("chaos.verdict", "unfinished")],
            );
        }),
        ("chaos.requests.offered", |p, c, o| {
            o.observe(c.offered, &[policy(p)])
        }),
        ("chaos.requests.dropped", |p, c, o| {
            o.observe(c.dropped, &[policy(p)])
        }),
        ("chaos.give_ups", |p, c, o| {
            for (reason, n) in &c.give_ups {
                o.observe(*n, &[policy(p), KeyValue::new("chaos.give_up", *reason)]);
            }
        }),
        ("chaos.attempts", |p, c, o| {
            for (outcome, n) in &c.outcomes {
                o.observe(
                    *n,
                    &[policy(p), KeyValue::new("chaos.outcome", outcome.clone())],
                );
            }
        }),
        ("chaos.retries", |p, c, o| {
            for (outcome, n) in &c.retry_outcomes {
                o.observe(
                    *n,
                    &[policy(p), KeyValue::new("chaos.outcome", outcome.clone())],
                );
            }
        }),
        ("chaos.budget.exhausted", |p, c, o| {
            o.observe(
                c.give_ups.get("budget_exhausted").copied().unwrap_or(0),
                &[policy(p)],
            );
        }),
        ("chaos.breaker.trips", |p, c, o| {
            o.observe(c.breaker_trips, &[policy(p)])
        }),
        ("chaos.violations", |p, c, o| {
            for (hop, violation, n) in &c.violations {
                o.observe(
                    *n,
                    &[
                        policy(p),
                        KeyValue::new("chaos.hop", hop.clone()),
                        KeyValue::new("chaos.violation", *violation),
                    ],
                );
            }
        }),
    ];
    counter_fns
        .into_iter()
        .map(|(name, each)| observable_counter(meter, name, snapshots, each))
        .collect()
}

fn observable_counter(
    meter: &Meter,
    name: &'static str,
    snapshots: &Snapshots,
    each: fn(&str, &Counts, &dyn AsyncInstrument<u64>),
) -> ObservableCounter<u64> {
    let snapshots = Arc::clone(snapshots);
    meter
        .u64_observable_counter(name)
        .with_unit(unit(name))
        .with_description(described(name))
        .with_callback(move |o| {
            for (p, c) in snapshots.lock().unwrap_or_else(|e| e.into_inner()).iter() {
                each(p, c, o);
            }
        })
        .build()
}

/// The gauges, each observing every policy's latest counts; a policy without a value
/// (no retries yet, no budget) is not observed.
fn observable_gauges(meter: &Meter, snapshots: &Snapshots) -> Vec<ObservableGauge<f64>> {
    type Gauge = fn(&Counts) -> Option<f64>;
    let gauge_fns: [(&'static str, Gauge); 4] = [
        ("chaos.retry.ratio", |c| {
            (c.attempts > 0).then(|| c.retries as f64 / c.attempts as f64)
        }),
        ("chaos.retry.success_ratio", |c| {
            (c.retries > 0).then(|| c.retries_succeeded as f64 / c.retries as f64)
        }),
        ("chaos.budget.level", |c| c.budget_level),
        ("chaos.breaker.state", |c| {
            c.breaker.map(|s| match s {
                BreakerState::Closed => 0.0,
                BreakerState::HalfOpen => 1.0,
                BreakerState::Open => 2.0,
            })
        }),
    ];
    gauge_fns
        .into_iter()
        .map(|(name, value)| observable_gauge(meter, name, snapshots, value))
        .collect()
}

fn observable_gauge(
    meter: &Meter,
    name: &'static str,
    snapshots: &Snapshots,
    value: fn(&Counts) -> Option<f64>,
) -> ObservableGauge<f64> {
    let snapshots = Arc::clone(snapshots);
    meter
        .f64_observable_gauge(name)
        .with_unit(unit(name))
        .with_description(described(name))
        .with_callback(move |o| {
            for (p, c) in snapshots.lock().unwrap_or_else(|e| e.into_inner()).iter() {
                if let Some(v) = value(c) {
                    o.observe(v, &[policy(p)]);
                }
            }
        })
        .build()
}

fn duration_histogram(meter: &Meter) -> Histogram<f64> {
    let name = "http.client.request.duration";
    meter
        .f64_histogram(name)
        .with_unit(unit(name))
        .with_description(described(name))
        // The semantic conventions' advice for HTTP durations.
        .with_boundaries(vec![
            0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
        ])
        .build()
}
