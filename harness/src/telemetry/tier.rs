//! A relay tier's side of a trace: a SERVER span for each request the tier received, in
//! the trace of the attempt that sent it, and a CLIENT span beneath it for each attempt
//! the tier forwarded, whose id the next hop receives as its parent in `traceparent`.
//!
//! A tier follows its caller's decision (the `traceparent`'s sampled flag): a request the
//! client exports, the tier exports too. Unsampled spans are not held, as the
//! fault-server's are: a trace forced at the client for a violation shows the tiers'
//! spans from the violating attempt on. A tier's own violation (a retry after a permanent
//! outcome, or of a non-idempotent request) exports the tier's spans whatever its caller
//! decided, each violating attempt marked `chaos.violation`.

use std::borrow::Cow;
use std::time::SystemTime;

use chaos_policy::{Outcome, Violation};
use fault_server::otel::{Ids, SpanSink, TraceParent};
use opentelemetry::KeyValue;
use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanLinks};

use super::trace::{answered, client_span};

/// Where the tiers' spans go.
#[derive(Debug)]
pub struct TierTracing {
    sink: SpanSink,
    ids: Ids,
}

impl TierTracing {
    pub fn new(sink: SpanSink) -> TierTracing {
        TierTracing {
            sink,
            ids: Ids::new(),
        }
    }

    pub(super) fn shutdown(&self, timeout: std::time::Duration) -> fault_server::otel::SpanCounts {
        self.sink.shutdown(timeout)
    }
}

#[derive(Debug)]
struct Forwarded {
    span_id: u64,
    number: u32,
    start: SystemTime,
    end: Option<SystemTime>,
    outcome: Option<Outcome>,
    violations: Vec<Violation>,
}

/// One request at a tier, while the tier works on it.
#[derive(Debug)]
pub struct TierSpan {
    trace_id: u128,
    span_id: u64,
    parent_id: u64,
    sampled: bool,
    tier: String,
    method: String,
    path: String,
    start: SystemTime,
    forwarded: Vec<Forwarded>,
}

impl TierSpan {
    /// The span of a request that carried a valid `traceparent` (`None` otherwise).
    pub fn begin(
        tracing: &TierTracing,
        traceparent: Option<&str>,
        tier: &str,
        method: &str,
        path: &str,
    ) -> Option<TierSpan> {
        let parent = traceparent.and_then(TraceParent::parse)?;
        Some(TierSpan {
            trace_id: parent.trace_id,
            span_id: tracing.ids.span_id(),
            parent_id: parent.parent_id,
            sampled: parent.sampled,
            tier: tier.to_owned(),
            method: method.to_owned(),
            path: path.to_owned(),
            start: SystemTime::now(),
            forwarded: Vec::new(),
        })
    }

    /// An attempt goes to the next hop, breaking `violations`: the `traceparent` it
    /// carries.
    pub fn forward(
        &mut self,
        tracing: &TierTracing,
        number: u32,
        violations: impl Iterator<Item = Violation>,
    ) -> String {
        let span_id = tracing.ids.span_id();
        let violations: Vec<Violation> = violations.collect();
        // What a tier did wrong is exported, as the client's violations are.
        self.sampled |= !violations.is_empty();
        self.forwarded.push(Forwarded {
            span_id,
            number,
            start: SystemTime::now(),
            end: None,
            outcome: None,
            violations,
        });
        TraceParent {
            trace_id: self.trace_id,
            parent_id: span_id,
            sampled: self.sampled,
        }
        .format()
    }

    /// The attempt in flight ended.
    pub fn answered(&mut self, outcome: Outcome) {
        if let Some(f) = self.forwarded.last_mut() {
            f.end = Some(SystemTime::now());
            f.outcome = Some(outcome);
        }
    }

    /// The tier answered `status`; `gave_up` says why it stopped, if it did.
    pub fn end(self, tracing: &TierTracing, status: u16, gave_up: Option<&'static str>) {
        if !self.sampled {
            return;
        }
        let end = SystemTime::now();
        let scope = tracing.sink.scope().clone();
        let context = |span_id: u64| {
            SpanContext::new(
                TraceId::from(self.trace_id),
                SpanId::from(span_id),
                TraceFlags::SAMPLED,
                false,
                TraceState::default(),
            )
        };
        let mut attributes = vec![
            KeyValue::new("chaos.tier", self.tier.clone()),
            KeyValue::new("http.request.method", self.method.clone()),
            KeyValue::new("url.path", self.path.clone()),
            KeyValue::new("http.response.status_code", i64::from(status)),
            KeyValue::new("chaos.attempts", self.forwarded.len() as i64),
        ];
        if let Some(reason) = gave_up {
            attributes.push(KeyValue::new("chaos.give_up", reason));
        }
        let server_status = if status >= 500 {
            attributes.push(KeyValue::new("error.type", status.to_string()));
            Status::error(status.to_string())
        } else {
            Status::Unset
        };
        let mut spans = vec![SpanData {
            span_context: context(self.span_id),
            parent_span_id: SpanId::from(self.parent_id),
            parent_span_is_remote: true,
            span_kind: SpanKind::Server,
            name: Cow::Owned(format!("{} {}", self.tier, self.method)),
            start_time: self.start,
            end_time: end.max(self.start),
            attributes,
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status: server_status,
            instrumentation_scope: scope.clone(),
        }];
        for f in self.forwarded {
            let mut attributes = vec![
                KeyValue::new("chaos.tier", self.tier.clone()),
                KeyValue::new("http.request.method", self.method.clone()),
                KeyValue::new("url.path", self.path.clone()),
                KeyValue::new("chaos.attempt", i64::from(f.number)),
            ];
            for v in &f.violations {
                attributes.push(KeyValue::new("chaos.violation", v.name()));
            }
            let status = answered(f.number, f.outcome, &mut attributes);
            spans.push(client_span(
                context(f.span_id),
                self.span_id,
                Cow::Owned(format!("{} {}", self.method, self.path)),
                (f.start, f.end.unwrap_or(end)),
                attributes,
                status,
                &scope,
            ));
        }
        for span in spans {
            tracing.sink.submit(span);
        }
    }
}
