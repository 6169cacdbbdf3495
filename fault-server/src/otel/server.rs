//! The fault-server's side of a trace: one SERVER span per request, in the trace of the
//! attempt that sent it, saying what the server decided.
//!
//! A request whose `traceparent` is sampled is exported. One that is not is held, in a
//! bounded buffer keyed by its trace, for a while: when a later request of the same trace
//! arrives sampled (a client exports a logical request it found to break an invariant,
//! and says so from that attempt on), or when the server itself sees the trace break one
//! (a side effect run twice), the held spans are exported with it, so a forced trace shows
//! every attempt's server side, not only the last one's.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{KeyValue, Value};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanLinks};

use super::context::{Ids, TraceParent, keep};
use super::export::{SpanCounts, SpanSink};

/// Unsampled spans held for a trace that may yet be forced: enough for every attempt of
/// the last few seconds at a few thousand requests a second.
pub const MAX_HELD_SPANS: usize = 16_384;

/// Records the server's spans.
#[derive(Debug)]
pub struct ServerTracing {
    sink: SpanSink,
    ids: Ids,
    /// The share of requests without a `traceparent` that start a trace of their own.
    root_ratio: f64,
    held: Mutex<Held>,
}

impl ServerTracing {
    pub fn new(sink: SpanSink, root_ratio: f64) -> ServerTracing {
        ServerTracing {
            sink,
            ids: Ids::new(),
            root_ratio,
            held: Mutex::new(Held::default()),
        }
    }

    /// Starts the span of a request, from its `traceparent` header if it has a valid one.
    pub fn begin(&self, traceparent: Option<&str>, method: &str, path: &str) -> ServerSpan {
        let parent = traceparent.and_then(TraceParent::parse);
        let span_id = self.ids.span_id();
        let (trace_id, sampled) = match parent {
            Some(p) => (p.trace_id, p.sampled),
            None => {
                let trace_id = self.ids.trace_id();
                (trace_id, keep(trace_id as u64, self.root_ratio))
            }
        };
        ServerSpan {
            trace_id,
            span_id,
            parent_id: parent.map(|p| p.parent_id),
            sampled,
            forced: false,
            start: SystemTime::now(),
            name: method.to_owned(),
            attributes: vec![
                KeyValue::new("http.request.method", method.to_owned()),
                KeyValue::new("url.path", path.to_owned()),
                KeyValue::new("url.scheme", "http"),
            ],
            error: None,
        }
    }

    /// Ends a span now: exports it (and what was held of its trace) if it is sampled or
    /// forced, else holds it.
    pub fn end(&self, span: ServerSpan) {
        let trace_id = span.trace_id;
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        // A span of a trace exported already (one that ends after the attempt that forced
        // its trace arrived: a reset request's span ends when its connection goes) goes too.
        let export = span.sampled || span.forced || held.was_forced(trace_id);
        let forcing = span.forced || (span.sampled && held.has(trace_id));
        let data = span.into_data(self.sink.scope().clone(), SystemTime::now());
        if export {
            let earlier = held.take(trace_id);
            if forcing || !earlier.is_empty() {
                held.forced(trace_id);
            }
            drop(held);
            for span in earlier {
                self.sink.submit(span);
            }
            self.sink.submit(data);
        } else {
            held.hold(trace_id, data);
        }
    }

    /// Flushes and stops (blocking, at most `timeout`).
    pub fn shutdown(&self, timeout: Duration) -> SpanCounts {
        self.sink.shutdown(timeout)
    }

    pub fn counts(&self) -> SpanCounts {
        self.sink.counts()
    }

    /// Spans held now, waiting to be forced or forgotten.
    pub fn held(&self) -> usize {
        self.held.lock().unwrap_or_else(|e| e.into_inner()).len
    }
}

/// One request's span while it is served.
#[derive(Debug)]
pub struct ServerSpan {
    trace_id: u128,
    span_id: u64,
    parent_id: Option<u64>,
    sampled: bool,
    forced: bool,
    start: SystemTime,
    name: String,
    attributes: Vec<KeyValue>,
    /// `error.type`, for an answer that is a failure.
    error: Option<String>,
}

impl ServerSpan {
    pub fn set(&mut self, key: &'static str, value: impl Into<Value>) {
        self.attributes.push(KeyValue::new(key, value));
    }

    /// The request broke an invariant here: export its whole trace.
    pub fn force(&mut self) {
        self.forced = true;
    }

    /// The answer's status (and `error.type` for a 4xx or 5xx).
    pub fn status(&mut self, status: u16) {
        self.set("http.response.status_code", i64::from(status));
        if status >= 400 {
            self.error = Some(status.to_string());
        }
    }

    /// The request failed without a status: `reset`, `timeout`, `closed`, ...
    pub fn error(&mut self, kind: &str) {
        self.error = Some(kind.to_owned());
    }

    pub fn trace_id(&self) -> u128 {
        self.trace_id
    }

    pub fn sampled(&self) -> bool {
        self.sampled
    }

    fn into_data(
        mut self,
        scope: opentelemetry::InstrumentationScope,
        end: SystemTime,
    ) -> SpanData {
        let status = match &self.error {
            // The semantic conventions: a 4xx is not a server error.
            Some(kind) if !kind.starts_with('4') => Status::error(kind.clone()),
            _ => Status::Unset,
        };
        if let Some(kind) = self.error.take() {
            self.attributes.push(KeyValue::new("error.type", kind));
        }
        let flags = if self.sampled || self.forced {
            TraceFlags::SAMPLED
        } else {
            TraceFlags::default()
        };
        SpanData {
            span_context: SpanContext::new(
                TraceId::from(self.trace_id),
                SpanId::from(self.span_id),
                flags,
                false,
                TraceState::default(),
            ),
            parent_span_id: SpanId::from(self.parent_id.unwrap_or(0)),
            parent_span_is_remote: self.parent_id.is_some(),
            span_kind: SpanKind::Server,
            name: self.name.into(),
            start_time: self.start,
            end_time: end.max(self.start),
            attributes: self.attributes,
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status,
            instrumentation_scope: scope,
        }
    }
}

/// Traces remembered as forced, so their late spans are exported too.
pub const MAX_FORCED_TRACES: usize = 4096;

/// Unsampled spans by trace, oldest trace forgotten first, and the traces forced lately.
#[derive(Debug, Default)]
struct Held {
    by_trace: HashMap<u128, Vec<SpanData>>,
    order: VecDeque<u128>,
    len: usize,
    forced: HashSet<u128>,
    forced_order: VecDeque<u128>,
}

impl Held {
    fn has(&self, trace_id: u128) -> bool {
        self.by_trace.contains_key(&trace_id)
    }

    fn was_forced(&self, trace_id: u128) -> bool {
        self.forced.contains(&trace_id)
    }

    fn forced(&mut self, trace_id: u128) {
        if self.forced.insert(trace_id) {
            self.forced_order.push_back(trace_id);
            if self.forced_order.len() > MAX_FORCED_TRACES
                && let Some(oldest) = self.forced_order.pop_front()
            {
                self.forced.remove(&oldest);
            }
        }
    }

    fn hold(&mut self, trace_id: u128, span: SpanData) {
        let spans = self.by_trace.entry(trace_id).or_default();
        if spans.is_empty() {
            self.order.push_back(trace_id);
        }
        spans.push(span);
        self.len += 1;
        while self.len > MAX_HELD_SPANS {
            let Some(oldest) = self.order.pop_front() else {
                break;
            };
            self.len -= self.by_trace.remove(&oldest).map_or(0, |s| s.len());
        }
    }

    fn take(&mut self, trace_id: u128) -> Vec<SpanData> {
        match self.by_trace.remove(&trace_id) {
            Some(spans) => {
                self.len -= spans.len();
                self.order.retain(|t| *t != trace_id);
                spans
            }
            None => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(trace: u128) -> SpanData {
        let span = ServerSpan {
            trace_id: trace,
            span_id: 1,
            parent_id: None,
            sampled: false,
            forced: false,
            start: SystemTime::UNIX_EPOCH,
            name: "GET".into(),
            attributes: Vec::new(),
            error: None,
        };
        span.into_data(
            opentelemetry::InstrumentationScope::builder("t").build(),
            SystemTime::UNIX_EPOCH,
        )
    }

    #[test]
    fn held_spans_are_bounded_and_the_oldest_trace_goes_first() {
        let mut held = Held::default();
        for t in 1..=(MAX_HELD_SPANS as u128 + 10) {
            held.hold(t, span(t));
        }
        assert_eq!(held.len, MAX_HELD_SPANS);
        assert!(held.take(1).is_empty(), "the oldest trace was forgotten");
        assert_eq!(held.take(MAX_HELD_SPANS as u128 + 10).len(), 1);
        assert_eq!(held.len, MAX_HELD_SPANS - 1);
    }

    #[test]
    fn a_forced_trace_takes_all_its_held_spans() {
        let mut held = Held::default();
        held.hold(7, span(7));
        held.hold(8, span(8));
        held.hold(7, span(7));
        assert_eq!(held.take(7).len(), 2);
        assert_eq!(held.len, 1);
        assert_eq!(held.order, VecDeque::from([8]));
    }

    #[test]
    fn forced_traces_are_remembered_within_a_bound() {
        let mut held = Held::default();
        for t in 0..(MAX_FORCED_TRACES as u128 + 5) {
            held.forced(t);
        }
        assert!(!held.was_forced(0), "the oldest is forgotten");
        assert!(held.was_forced(MAX_FORCED_TRACES as u128 + 4));
        assert_eq!(held.forced.len(), MAX_FORCED_TRACES);
    }

    #[test]
    fn a_status_of_500_is_an_error_and_400_is_not() {
        let mut s = ServerSpan {
            trace_id: 1,
            span_id: 1,
            parent_id: Some(2),
            sampled: true,
            forced: false,
            start: SystemTime::UNIX_EPOCH,
            name: "POST".into(),
            attributes: Vec::new(),
            error: None,
        };
        s.status(503);
        let scope = opentelemetry::InstrumentationScope::builder("t").build();
        let data = s.into_data(scope.clone(), SystemTime::UNIX_EPOCH);
        assert!(matches!(data.status, Status::Error { .. }));
        assert!(data.parent_span_is_remote);
        assert!(
            data.attributes
                .iter()
                .any(|kv| kv.key.as_str() == "error.type" && kv.value.as_str() == "503")
        );
        let mut s = ServerSpan {
            trace_id: 1,
            span_id: 1,
            parent_id: None,
            sampled: true,
            forced: false,
            start: SystemTime::UNIX_EPOCH,
            name: "POST".into(),
            attributes: Vec::new(),
            error: None,
        };
        s.status(400);
        assert_eq!(
            s.into_data(scope, SystemTime::UNIX_EPOCH).status,
            Status::Unset
        );
    }
}
