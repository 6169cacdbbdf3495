//! Sending spans and metrics to a collector, counted, and bounded in time and memory.
//!
//! Spans are built by the caller, timestamps and ids included, and handed to
//! [`SpanSink::submit`]: a batch processor on a thread of its own queues them (bounded:
//! a full queue drops) and exports them over OTLP/HTTP. The sink counts what it was given
//! and what the collector took, so a report can say how many spans never arrived.
//! An export that fails costs one warning per process, through [`Warn`].

use std::borrow::Cow;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider, Temporality};
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SpanData, SpanExporter, SpanProcessor,
};

use super::config::{EXPORT_TIMEOUT, OtelConfig};

/// The most spans waiting for export: at 10,000 attempts a second and an export a second,
/// several seconds of slack; each span is about a kilobyte.
pub const MAX_QUEUED_SPANS: usize = 65_536;

/// Why telemetry could not be set up.
#[derive(Debug, thiserror::Error)]
#[error("cannot set up the OTLP exporter for {endpoint}: {detail}")]
pub struct ExporterError {
    endpoint: String,
    detail: String,
}

/// Says one thing once per process: the first export that failed, not the thousandth.
#[derive(Clone)]
pub struct Warn {
    said: Arc<AtomicBool>,
    say: Arc<dyn Fn(&str) + Send + Sync>,
}

impl std::fmt::Debug for Warn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Warn")
            .field("said", &self.said.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl Warn {
    pub fn new(say: impl Fn(&str) + Send + Sync + 'static) -> Warn {
        Warn {
            said: Arc::new(AtomicBool::new(false)),
            say: Arc::new(say),
        }
    }

    /// Whether a warning was given.
    pub fn said(&self) -> bool {
        self.said.load(Ordering::Relaxed)
    }

    fn once(&self, message: &str) {
        if !self.said.swap(true, Ordering::Relaxed) {
            (self.say)(message);
        }
    }
}

/// The resource every signal of a process carries.
pub fn resource(config: &OtelConfig, service_name: &str) -> Resource {
    Resource::builder_empty()
        .with_service_name(service_name.to_owned())
        .with_attributes(
            config
                .resource
                .iter()
                .filter(|(k, _)| k != "service.name")
                .map(|(k, v)| KeyValue::new(k.clone(), v.clone())),
        )
        .with_attributes([
            KeyValue::new("telemetry.sdk.language", "rust"),
            KeyValue::new("telemetry.sdk.name", "opentelemetry"),
            KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
        ])
        .build()
}

/// What a sink was given and what reached the collector.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SpanCounts {
    pub exported: u64,
    /// Given but never accepted by the collector: a full queue, a failed export, or still
    /// queued when the final flush ran out of time.
    pub dropped: u64,
}

impl std::ops::Add for SpanCounts {
    type Output = SpanCounts;
    fn add(self, other: SpanCounts) -> SpanCounts {
        SpanCounts {
            exported: self.exported + other.exported,
            dropped: self.dropped + other.dropped,
        }
    }
}

/// Spans to a collector.
pub struct SpanSink {
    processor: BatchSpanProcessor,
    scope: InstrumentationScope,
    submitted: AtomicU64,
    exported: Arc<AtomicU64>,
    shut: Mutex<Option<SpanCounts>>,
}

impl std::fmt::Debug for SpanSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpanSink")
            .field("scope", &self.scope.name())
            .field("submitted", &self.submitted.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl SpanSink {
    /// A sink exporting to `config`'s traces endpoint as `service_name`; `scope` names the
    /// code that makes the spans.
    pub fn new(
        config: &OtelConfig,
        service_name: &str,
        scope: &'static str,
        warn: Warn,
    ) -> Result<SpanSink, ExporterError> {
        let endpoint = config.traces_endpoint.clone();
        let inner = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(endpoint.clone())
            .with_timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(|e| ExporterError {
                endpoint: endpoint.clone(),
                detail: e.to_string(),
            })?;
        let exported = Arc::new(AtomicU64::new(0));
        let counting = CountingSpans {
            inner,
            exported: Arc::clone(&exported),
            warn,
            endpoint,
        };
        let mut processor = BatchSpanProcessor::builder(counting)
            .with_batch_config(
                BatchConfigBuilder::default()
                    .with_max_queue_size(MAX_QUEUED_SPANS)
                    .with_max_export_batch_size(2048)
                    .with_scheduled_delay(Duration::from_secs(1))
                    .build(),
            )
            .build();
        processor.set_resource(&resource(config, service_name));
        Ok(SpanSink {
            processor,
            scope: InstrumentationScope::builder(scope)
                .with_version(env!("CARGO_PKG_VERSION"))
                .build(),
            submitted: AtomicU64::new(0),
            exported,
            shut: Mutex::new(None),
        })
    }

    /// The instrumentation scope spans of this sink carry.
    pub fn scope(&self) -> &InstrumentationScope {
        &self.scope
    }

    /// Queues a finished span for export (dropped, and counted, when the queue is full).
    pub fn submit(&self, span: SpanData) {
        self.submitted.fetch_add(1, Ordering::Relaxed);
        self.processor.on_end(span);
    }

    /// Flushes what is queued, waiting at most `timeout`, and stops; returns the counts.
    /// Blocks the calling thread: call it off an async runtime's workers. A second call
    /// returns the first's counts.
    pub fn shutdown(&self, timeout: Duration) -> SpanCounts {
        let mut shut = self.shut.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(counts) = *shut {
            return counts;
        }
        let _ = self.processor.shutdown_with_timeout(timeout);
        let exported = self.exported.load(Ordering::Relaxed);
        let counts = SpanCounts {
            exported,
            dropped: self
                .submitted
                .load(Ordering::Relaxed)
                .saturating_sub(exported),
        };
        *shut = Some(counts);
        counts
    }

    /// The counts so far (exports still in progress are not yet counted as exported).
    pub fn counts(&self) -> SpanCounts {
        let exported = self.exported.load(Ordering::Relaxed);
        SpanCounts {
            exported,
            dropped: self
                .submitted
                .load(Ordering::Relaxed)
                .saturating_sub(exported),
        }
    }
}

#[derive(Debug)]
struct CountingSpans<E> {
    inner: E,
    exported: Arc<AtomicU64>,
    warn: Warn,
    endpoint: String,
}

impl<E: SpanExporter> SpanExporter for CountingSpans<E> {
    fn export(&self, batch: Vec<SpanData>) -> impl Future<Output = OTelSdkResult> + Send {
        let n = batch.len() as u64;
        let export = self.inner.export(batch);
        async move {
            let result = export.await;
            match &result {
                Ok(()) => {
                    self.exported.fetch_add(n, Ordering::Relaxed);
                }
                Err(e) => self.warn.once(&format!(
                    "warning: cannot export telemetry to {}: {e}; the run goes on without it (is the collector up?)",
                    self.endpoint
                )),
            }
            result
        }
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// A meter provider exporting to `config`'s metrics endpoint every
/// [`OtelConfig::metric_interval`], cumulative (what Prometheus-style backends expect).
pub fn meter_provider(
    config: &OtelConfig,
    service_name: &str,
    warn: Warn,
) -> Result<SdkMeterProvider, ExporterError> {
    let endpoint = config.metrics_endpoint.clone();
    let inner = opentelemetry_otlp::MetricExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(endpoint.clone())
        .with_timeout(EXPORT_TIMEOUT)
        .with_temporality(Temporality::Cumulative)
        .build()
        .map_err(|e| ExporterError {
            endpoint: endpoint.clone(),
            detail: e.to_string(),
        })?;
    let reader = PeriodicReader::builder(WarningMetrics {
        inner,
        warn,
        endpoint,
    })
    .with_interval(config.metric_interval)
    .build();
    Ok(SdkMeterProvider::builder()
        .with_reader(reader)
        .with_resource(resource(config, service_name))
        .build())
}

struct WarningMetrics<E> {
    inner: E,
    warn: Warn,
    endpoint: String,
}

impl<E: PushMetricExporter> PushMetricExporter for WarningMetrics<E> {
    fn export(&self, metrics: &ResourceMetrics) -> impl Future<Output = OTelSdkResult> + Send {
        let export = self.inner.export(metrics);
        async move {
            let result = export.await;
            if let Err(e) = &result {
                self.warn.once(&format!(
                    "warning: cannot export telemetry to {}: {e}; the run goes on without it (is the collector up?)",
                    self.endpoint
                ));
            }
            result
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn temporality(&self) -> Temporality {
        self.inner.temporality()
    }
}

/// A span's name, owned or not.
pub type Name = Cow<'static, str>;
