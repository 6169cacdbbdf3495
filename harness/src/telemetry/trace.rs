//! One logical request's trace, kept while the request runs and turned into spans when it
//! ends: an INTERNAL span for the logical request, a CLIENT span per attempt beneath it,
//! and the policy's decisions as events.
//!
//! Spans are built at the end, not as the request goes, because whether a trace is
//! exported is known only then: a request the ratio did not sample is still exported if
//! it broke an invariant, and that can happen on its last attempt.

use std::borrow::Cow;
use std::time::SystemTime;

use chaos_policy::{Attempt, Outcome, Verdict, Violation, Wait};
use fault_server::otel::TraceParent;
use opentelemetry::trace::{
    Event, SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue, Value};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanLinks};

/// Where the attempts go, shared by every trace of a run.
#[derive(Debug, Clone)]
pub struct Target {
    pub base_url: String,
    pub host: String,
    pub port: i64,
}

impl Target {
    pub fn new(base_url: &str) -> Target {
        let parsed = reqwest::Url::parse(base_url).ok();
        Target {
            base_url: base_url.trim_end_matches('/').to_owned(),
            host: parsed
                .as_ref()
                .and_then(|u| u.host_str().map(str::to_owned))
                .unwrap_or_default(),
            port: parsed
                .and_then(|u| u.port_or_known_default())
                .map_or(80, i64::from),
        }
    }
}

/// What the trace is of.
#[derive(Debug, Clone, Copy)]
pub struct About<'a> {
    pub policy: &'a str,
    pub kind: &'a str,
    pub method: &'a str,
    /// The plan's path template: the route, never the raw path.
    pub route: &'a str,
    pub request_id: &'a str,
    /// A gRPC call's service and method: its attempts' spans follow the RPC conventions.
    pub rpc: Option<&'a crate::plan::Rpc>,
}

#[derive(Debug)]
struct AttemptSpan {
    span_id: u64,
    number: u32,
    start: SystemTime,
    end: Option<SystemTime>,
    outcome: Option<Outcome>,
    path: String,
    violations: Vec<Violation>,
}

/// One logical request's trace in progress.
#[derive(Debug)]
pub struct LogicalTrace {
    trace_id: u128,
    root_id: u64,
    sampled: bool,
    /// Why it is exported whatever the ratio, once it broke an invariant.
    forced: Option<&'static str>,
    start: SystemTime,
    attempts: Vec<AttemptSpan>,
    events: Vec<Event>,
    about: Attributes,
}

#[derive(Debug)]
struct Attributes {
    policy: String,
    kind: String,
    method: String,
    route: String,
    request_id: String,
    rpc: Option<crate::plan::Rpc>,
}

impl LogicalTrace {
    pub fn new(
        trace_id: u128,
        root_id: u64,
        sampled: bool,
        start: SystemTime,
        about: About<'_>,
    ) -> LogicalTrace {
        LogicalTrace {
            trace_id,
            root_id,
            sampled,
            forced: None,
            start,
            attempts: Vec::new(),
            events: Vec::new(),
            about: Attributes {
                policy: about.policy.to_owned(),
                kind: about.kind.to_owned(),
                method: about.method.to_owned(),
                route: about.route.to_owned(),
                request_id: about.request_id.to_owned(),
                rpc: about.rpc.cloned(),
            },
        }
    }

    pub fn trace_id(&self) -> u128 {
        self.trace_id
    }

    /// Whether the ratio sampled it.
    pub fn sampled(&self) -> bool {
        self.sampled
    }

    /// Whether it will be exported.
    pub fn exported(&self) -> bool {
        self.sampled || self.forced.is_some()
    }

    pub fn forced(&self) -> Option<&'static str> {
        self.forced
    }

    /// An attempt leaves: returns its `traceparent`. A retry that breaks an invariant
    /// forces the trace from here on, and says so to the server.
    pub fn send(
        &mut self,
        span_id: u64,
        attempt: Attempt,
        at: SystemTime,
        path: String,
        violations: impl Iterator<Item = Violation>,
    ) -> String {
        let violations: Vec<Violation> = violations.collect();
        if let Some(v) = violations.first() {
            self.forced.get_or_insert(v.name());
        }
        self.attempts.push(AttemptSpan {
            span_id,
            number: attempt.get(),
            start: at,
            end: None,
            outcome: None,
            path,
            violations,
        });
        TraceParent {
            trace_id: self.trace_id,
            parent_id: span_id,
            sampled: self.exported(),
        }
        .format()
    }

    /// The attempt in flight ended; `duplicate`: the server ran its side effect again.
    pub fn answer(&mut self, at: SystemTime, outcome: Outcome, duplicate: bool) {
        if duplicate {
            self.forced.get_or_insert("duplicate_side_effect");
        }
        if let Some(a) = self.attempts.last_mut() {
            a.end = Some(at);
            a.outcome = Some(outcome);
        }
    }

    /// The attempt in flight was stopped before it reached the wire: it was no attempt.
    pub fn cut(&mut self) {
        if self.attempts.last().is_some_and(|a| a.end.is_none()) {
            self.attempts.pop();
        }
    }

    /// The attempt in flight was stopped before its answer (the run ended).
    pub fn abandon(&mut self, at: SystemTime) {
        if let Some(a) = self.attempts.last_mut().filter(|a| a.end.is_none()) {
            a.end = Some(at);
        }
    }

    /// A decision of the policy, on the logical request's span.
    pub fn event(&mut self, name: &'static str, at: SystemTime, attributes: Vec<KeyValue>) {
        self.events.push(Event::new(name, at, attributes, 0));
    }

    /// The wait before a retry, with its draw and what `Retry-After` did.
    pub fn wait(&mut self, at: SystemTime, wait: Wait) {
        let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
        let mut attributes = vec![
            KeyValue::new("chaos.retry", i64::from(wait.retry)),
            KeyValue::new("chaos.backoff.low_ms", ms(wait.range.0)),
            KeyValue::new("chaos.backoff.high_ms", ms(wait.range.1)),
            KeyValue::new("chaos.backoff.drawn_ms", ms(wait.backoff)),
            KeyValue::new("chaos.wait_ms", ms(wait.delay)),
            KeyValue::new("chaos.retry_after", wait.retry_after.name()),
        ];
        if let Some(asked) = wait.asked {
            attributes.push(KeyValue::new("chaos.retry_after_ms", ms(asked)));
        }
        self.event("backoff", at, attributes);
    }

    /// The spans: the logical request's, then its attempts'. `verdict` is `None` for a
    /// request the run's end cut short.
    pub fn into_spans(
        self,
        verdict: Option<&Verdict>,
        end: SystemTime,
        target: &Target,
        scope: &InstrumentationScope,
    ) -> Vec<SpanData> {
        let flags = TraceFlags::SAMPLED;
        let trace_id = TraceId::from(self.trace_id);
        let context = |span_id: u64| {
            SpanContext::new(
                trace_id,
                SpanId::from(span_id),
                flags,
                false,
                TraceState::default(),
            )
        };
        let (root_attributes, status) = self.root_attributes(verdict);
        let about = &self.about;
        let mut spans = Vec::with_capacity(1 + self.attempts.len());
        spans.push(SpanData {
            span_context: context(self.root_id),
            parent_span_id: SpanId::INVALID,
            parent_span_is_remote: false,
            span_kind: SpanKind::Internal,
            name: Cow::Owned(format!("{} {}", about.policy, about.kind)),
            start_time: self.start,
            end_time: end.max(self.start),
            attributes: root_attributes,
            dropped_attributes_count: 0,
            events: events(self.events),
            links: SpanLinks::default(),
            status,
            instrumentation_scope: scope.clone(),
        });
        // The RPC conventions name a call's span `service/method`.
        let name: Cow<'static, str> = match &about.rpc {
            Some(rpc) => Cow::Owned(format!("{}/{}", rpc.service, rpc.method)),
            None => Cow::Owned(format!("{} {}", about.method, about.route)),
        };
        for a in self.attempts {
            let mut attributes = about.of_attempt(&a, target);
            let status = answered(a.number, a.outcome, &mut attributes);
            spans.push(client_span(
                context(a.span_id),
                self.root_id,
                name.clone(),
                (a.start, a.end.unwrap_or(end)),
                attributes,
                status,
                scope,
            ));
        }
        spans
    }

    /// The logical request's span's attributes, and its status: what it was, how many
    /// attempts it made, its verdict (`None`: the run's end cut it short), and why it was
    /// kept.
    fn root_attributes(&self, verdict: Option<&Verdict>) -> (Vec<KeyValue>, Status) {
        let about = &self.about;
        let mut attributes = vec![
            KeyValue::new("chaos.policy", about.policy.clone()),
            KeyValue::new("chaos.request.kind", about.kind.clone()),
            KeyValue::new("chaos.request_id", about.request_id.clone()),
            KeyValue::new("http.request.method", about.method.clone()),
            KeyValue::new("url.template", about.route.clone()),
            KeyValue::new("chaos.attempts", self.attempts.len() as i64),
        ];
        let status = match verdict {
            Some(Verdict::Succeeded { .. }) => {
                attributes.push(KeyValue::new("chaos.verdict", "succeeded"));
                Status::Unset
            }
            Some(Verdict::GaveUp { reason, .. }) => {
                attributes.push(KeyValue::new("chaos.verdict", "gave_up"));
                attributes.push(KeyValue::new("chaos.give_up", reason.name()));
                Status::error(format!("gave up: {}", reason.name()))
            }
            None => {
                attributes.push(KeyValue::new("chaos.verdict", "unfinished"));
                Status::error("unfinished: the run ended first")
            }
        };
        if let Some(why) = self.forced {
            attributes.push(KeyValue::new("chaos.violation", why));
        }
        attributes.push(KeyValue::new("chaos.sampled", self.sampled));
        (attributes, status)
    }
}

impl Attributes {
    /// An attempt's CLIENT span's attributes but for its answer: the call (RPC or HTTP,
    /// by its conventions), the server, the attempt's number, and the invariants it broke.
    fn of_attempt(&self, a: &AttemptSpan, target: &Target) -> Vec<KeyValue> {
        let mut attributes = match &self.rpc {
            Some(rpc) => vec![
                KeyValue::new("rpc.system", "grpc"),
                KeyValue::new("rpc.service", rpc.service.clone()),
                KeyValue::new("rpc.method", rpc.method.clone()),
            ],
            None => vec![
                KeyValue::new("http.request.method", self.method.clone()),
                KeyValue::new("url.full", format!("{}{}", target.base_url, a.path)),
                KeyValue::new("url.template", self.route.clone()),
            ],
        };
        attributes.extend([
            KeyValue::new("server.address", target.host.clone()),
            KeyValue::new("server.port", target.port),
            KeyValue::new("chaos.attempt", i64::from(a.number)),
            KeyValue::new("chaos.policy", self.policy.clone()),
            KeyValue::new("chaos.request_id", self.request_id.clone()),
        ]);
        for v in &a.violations {
            attributes.push(KeyValue::new("chaos.violation", v.name()));
        }
        attributes
    }
}

/// What an attempt's number and outcome say on its CLIENT span: `resend_count` on a
/// retry, the status code or `error.type`, and the span's status (for a client, every
/// 4xx and 5xx is an error).
pub(super) fn answered(
    number: u32,
    outcome: Option<Outcome>,
    attributes: &mut Vec<KeyValue>,
) -> Status {
    if number > 1 {
        attributes.push(KeyValue::new(
            "http.request.resend_count",
            i64::from(number - 1),
        ));
    }
    match outcome {
        Some(Outcome::Status(code)) => {
            attributes.push(KeyValue::new("http.response.status_code", i64::from(code)));
            if code >= 400 {
                attributes.push(KeyValue::new("error.type", code.to_string()));
                Status::error(code.to_string())
            } else {
                Status::Unset
            }
        }
        // The RPC conventions: the code as a number, and any code but OK an error of a
        // client's span.
        Some(Outcome::Grpc(code)) => {
            attributes.push(KeyValue::new("rpc.grpc.status_code", i64::from(code)));
            if code == chaos_policy::grpc::OK {
                Status::Unset
            } else {
                let name = chaos_policy::grpc::NAMES
                    .get(usize::from(code))
                    .copied()
                    .unwrap_or("UNKNOWN");
                attributes.push(KeyValue::new("error.type", name));
                Status::error(name)
            }
        }
        Some(other) => {
            attributes.push(KeyValue::new("error.type", other.kind()));
            Status::error(other.kind())
        }
        None => {
            attributes.push(KeyValue::new("error.type", "abandoned"));
            Status::error("abandoned: no answer before the run ended")
        }
    }
}

/// A CLIENT span of one attempt under `parent`, over `(start, end)`.
pub(super) fn client_span(
    context: SpanContext,
    parent: u64,
    name: Cow<'static, str>,
    (start, end): (SystemTime, SystemTime),
    attributes: Vec<KeyValue>,
    status: Status,
    scope: &InstrumentationScope,
) -> SpanData {
    SpanData {
        span_context: context,
        parent_span_id: SpanId::from(parent),
        parent_span_is_remote: false,
        span_kind: SpanKind::Client,
        name,
        start_time: start,
        end_time: end.max(start),
        attributes,
        dropped_attributes_count: 0,
        events: SpanEvents::default(),
        links: SpanLinks::default(),
        status,
        instrumentation_scope: scope.clone(),
    }
}

fn events(events: Vec<Event>) -> SpanEvents {
    let mut out = SpanEvents::default();
    out.events = events;
    out
}

/// An attribute, for callers that build event attributes.
pub fn attr(key: &'static str, value: impl Into<Value>) -> KeyValue {
    KeyValue::new(key, value)
}
