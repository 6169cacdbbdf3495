//! A real OTLP/HTTP receiver on 127.0.0.1:0, decoding what it receives with the
//! `opentelemetry-proto` crate (the collector's own protobuf types), not a mock of the
//! exporter: what it holds is what a collector would have been sent.

#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::metric::Data;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;

#[derive(Default)]
struct Received {
    traces: Vec<ExportTraceServiceRequest>,
    metrics: Vec<ExportMetricsServiceRequest>,
}

/// The receiver; its address is the collector's endpoint.
#[derive(Clone)]
pub struct Receiver {
    pub addr: SocketAddr,
    received: Arc<Mutex<Received>>,
}

/// A span as received, with the service that sent it.
#[derive(Debug, Clone)]
pub struct Got {
    pub service: String,
    pub span: Span,
}

impl Got {
    pub fn attr(&self, key: &str) -> Option<&any_value::Value> {
        attr(&self.span.attributes, key)
    }

    pub fn int(&self, key: &str) -> Option<i64> {
        match self.attr(key) {
            Some(any_value::Value::IntValue(i)) => Some(*i),
            _ => None,
        }
    }

    pub fn str(&self, key: &str) -> Option<&str> {
        match self.attr(key) {
            Some(any_value::Value::StringValue(s)) => Some(s),
            _ => None,
        }
    }

    pub fn kind(&self) -> i32 {
        self.span.kind
    }
}

pub fn attr<'a>(attributes: &'a [KeyValue], key: &str) -> Option<&'a any_value::Value> {
    attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .and_then(|v: &AnyValue| v.value.as_ref())
}

fn string(attributes: &[KeyValue], key: &str) -> String {
    match attr(attributes, key) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        _ => String::new(),
    }
}

impl Receiver {
    pub async fn start() -> Receiver {
        let received = Arc::new(Mutex::new(Received::default()));
        let app = Router::new()
            .route("/v1/traces", post(traces))
            .route("/v1/metrics", post(metrics))
            .with_state(Arc::clone(&received));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the receiver");
        let addr = listener.local_addr().expect("its address");
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Receiver { addr, received }
    }

    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The attributes of every resource that sent spans or metrics, as text.
    pub fn resources(&self) -> Vec<BTreeMap<String, String>> {
        let received = self.received.lock().expect("lock");
        let spans = received
            .traces
            .iter()
            .flat_map(|r| &r.resource_spans)
            .filter_map(|rs| rs.resource.as_ref());
        let metrics = received
            .metrics
            .iter()
            .flat_map(|r| &r.resource_metrics)
            .filter_map(|rm| rm.resource.as_ref());
        spans
            .chain(metrics)
            .map(|r| {
                r.attributes
                    .iter()
                    .map(|kv| (kv.key.clone(), string(&r.attributes, &kv.key)))
                    .collect()
            })
            .collect()
    }

    /// Every span received, each with its resource's `service.name`.
    pub fn spans(&self) -> Vec<Got> {
        let received = self.received.lock().expect("lock");
        let mut out = Vec::new();
        for request in &received.traces {
            for rs in &request.resource_spans {
                let service = rs
                    .resource
                    .as_ref()
                    .map(|r| string(&r.attributes, "service.name"))
                    .unwrap_or_default();
                for ss in &rs.scope_spans {
                    for span in &ss.spans {
                        out.push(Got {
                            service: service.clone(),
                            span: span.clone(),
                        });
                    }
                }
            }
        }
        out
    }

    /// The latest value of every cumulative sum, gauge and histogram count, by metric name
    /// and then by its attributes (`k=v` pairs, sorted, joined by commas).
    pub fn metrics(&self) -> BTreeMap<String, BTreeMap<String, f64>> {
        let received = self.received.lock().expect("lock");
        // name -> attrs -> (time, value)
        let mut latest: BTreeMap<String, BTreeMap<String, (u64, f64)>> = BTreeMap::new();
        for request in &received.metrics {
            for rm in &request.resource_metrics {
                for sm in &rm.scope_metrics {
                    for metric in &sm.metrics {
                        let entry = latest.entry(metric.name.clone()).or_default();
                        let mut put = |attributes: &[KeyValue], time: u64, value: f64| {
                            let mut keys: Vec<String> = attributes
                                .iter()
                                .map(|kv| format!("{}={}", kv.key, string(attributes, &kv.key)))
                                .collect();
                            keys.sort();
                            let slot = entry.entry(keys.join(",")).or_insert((0, 0.0));
                            if time >= slot.0 {
                                *slot = (time, value);
                            }
                        };
                        match &metric.data {
                            Some(Data::Sum(sum)) => {
                                for p in &sum.data_points {
                                    put(&p.attributes, p.time_unix_nano, number(p.value));
                                }
                            }
                            Some(Data::Gauge(gauge)) => {
                                for p in &gauge.data_points {
                                    put(&p.attributes, p.time_unix_nano, number(p.value));
                                }
                            }
                            Some(Data::Histogram(h)) => {
                                for p in &h.data_points {
                                    put(&p.attributes, p.time_unix_nano, p.count as f64);
                                }
                            }
                            _ => {}
                        }
                    }
                }
            }
        }
        latest
            .into_iter()
            .map(|(name, by)| (name, by.into_iter().map(|(k, (_, v))| (k, v)).collect()))
            .collect()
    }
}

fn number(value: Option<opentelemetry_proto::tonic::metrics::v1::number_data_point::Value>) -> f64 {
    use opentelemetry_proto::tonic::metrics::v1::number_data_point::Value;
    match value {
        Some(Value::AsInt(i)) => i as f64,
        Some(Value::AsDouble(d)) => d,
        None => 0.0,
    }
}

async fn traces(
    State(received): State<Arc<Mutex<Received>>>,
    body: Bytes,
) -> (StatusCode, Vec<u8>) {
    match ExportTraceServiceRequest::decode(body) {
        Ok(request) => {
            received.lock().expect("lock").traces.push(request);
            (
                StatusCode::OK,
                ExportTraceServiceResponse::default().encode_to_vec(),
            )
        }
        Err(_) => (StatusCode::BAD_REQUEST, Vec::new()),
    }
}

async fn metrics(
    State(received): State<Arc<Mutex<Received>>>,
    body: Bytes,
) -> (StatusCode, Vec<u8>) {
    match ExportMetricsServiceRequest::decode(body) {
        Ok(request) => {
            received.lock().expect("lock").metrics.push(request);
            (
                StatusCode::OK,
                ExportMetricsServiceResponse::default().encode_to_vec(),
            )
        }
        Err(_) => (StatusCode::BAD_REQUEST, Vec::new()),
    }
}
