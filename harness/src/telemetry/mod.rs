//! Traces and metrics of a run, to an OpenTelemetry collector over OTLP/HTTP.
//!
//! Off unless `--otlp ENDPOINT` or `OTEL_EXPORTER_OTLP_ENDPOINT` says otherwise (see
//! [`fault_server::otel::config`]). When on: every logical request the sampling keeps
//! becomes a trace ([`trace`]): an INTERNAL span, a CLIENT span per attempt, the policy's
//! decisions as events, and the fault-server's SERVER spans in the same trace (each
//! attempt carries `traceparent`). Sampling is decided per logical request from the seed
//! and the arrival's index, so the same requests are sampled for every policy of a run
//! and in every run of a plan; a request that broke an invariant is exported whatever
//! the ratio. Metrics ([`metrics`]) are exported every few seconds and at the end.
//!
//! A collector that is down or slow costs one warning: exports run on threads of their
//! own, with bounded queues and timeouts, and the final flush waits at most
//! [`FLUSH_TIMEOUT`].

pub mod metrics;
pub mod tier;
pub mod trace;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use fault_server::otel::config::{FLUSH_TIMEOUT, process_env};
use fault_server::otel::context::keep;
use fault_server::otel::export::{ExporterError, meter_provider};
use fault_server::otel::{Ids, OtelConfig, OtelConfigError, ServerTracing, SpanSink, Warn};

use crate::report::TelemetryView;

pub use metrics::{Counts, Meters};
pub use trace::{About, LogicalTrace, Target};

/// The service name of the harness's spans and metrics unless `OTEL_SERVICE_NAME` says.
pub const SERVICE_NAME: &str = "chaos-harness";

/// The service name of the embedded fault-server's spans.
pub const SERVER_SERVICE_NAME: &str = "fault-server";

/// The service name of the relay tiers' spans (each span says its tier: `chaos.tier`).
pub const TIER_SERVICE_NAME: &str = "chaos-relay";

/// The resource attributes that name a run, on every span and metric it exports (the
/// embedded fault-server's and the relay tiers' included).
pub const RUN_ID: &str = "chaos.run.id";
pub const PLAN: &str = "chaos.plan";
pub const SEED: &str = "chaos.seed";

/// Which run the telemetry is of.
#[derive(Debug, Clone, Copy)]
pub struct RunIdentity<'a> {
    /// [`crate::report::run_id`].
    pub id: &'a str,
    pub plan: &'a str,
    pub seed: u64,
}

/// Why telemetry could not be set up (exit code 2: the settings are wrong).
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error(transparent)]
    Config(#[from] OtelConfigError),
    #[error(transparent)]
    Exporter(#[from] ExporterError),
}

/// A run's telemetry.
pub struct Telemetry {
    config: OtelConfig,
    ratio: f64,
    client: SpanSink,
    server: Arc<ServerTracing>,
    tiers: Arc<tier::TierTracing>,
    meters: Meters,
    ids: Ids,
    warn: Warn,
    traces: AtomicU64,
    forced: AtomicU64,
}

impl std::fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Telemetry")
            .field("endpoint", &self.config.traces_endpoint)
            .field("ratio", &self.ratio)
            .finish_non_exhaustive()
    }
}

impl Telemetry {
    /// Telemetry as `--otlp` (`flag`), the environment and the plan's sampling ratio say;
    /// `None` when it is off. Setting warnings and the first failed export are said
    /// through `say`.
    pub fn start(
        flag: Option<&str>,
        plan_ratio: Option<f64>,
        run: &RunIdentity<'_>,
        say: impl Fn(&str) + Send + Sync + 'static,
    ) -> Result<Option<Telemetry>, TelemetryError> {
        Telemetry::start_with(flag, plan_ratio, run, &process_env, say)
    }

    /// [`Telemetry::start`] with the environment given.
    pub fn start_with(
        flag: Option<&str>,
        plan_ratio: Option<f64>,
        run: &RunIdentity<'_>,
        env: &dyn Fn(&str) -> Option<String>,
        say: impl Fn(&str) + Send + Sync + 'static,
    ) -> Result<Option<Telemetry>, TelemetryError> {
        let Some(mut config) = OtelConfig::resolve(flag, SERVICE_NAME, env)? else {
            return Ok(None);
        };
        // Every signal of the run names it: request ids repeat from run to run, and runs
        // sharing one collector are told apart by these, not by time.
        config.resource.extend([
            (RUN_ID.to_owned(), run.id.to_owned()),
            (PLAN.to_owned(), run.plan.to_owned()),
            (SEED.to_owned(), run.seed.to_string()),
        ]);
        for warning in &config.warnings {
            say(&format!("warning: {warning}"));
        }
        // The operator's variable wins over the plan's key, as OTEL_* variables do.
        let ratio = config.sampling_ratio.or(plan_ratio).unwrap_or(1.0);
        let warn = Warn::new(say);
        let client = SpanSink::new(&config, &config.service_name, "chaos-harness", warn.clone())?;
        let server = SpanSink::new(&config, SERVER_SERVICE_NAME, "fault-server", warn.clone())?;
        let tiers = SpanSink::new(&config, TIER_SERVICE_NAME, "chaos-relay", warn.clone())?;
        let meters = Meters::new(meter_provider(&config, &config.service_name, warn.clone())?);
        Ok(Some(Telemetry {
            ratio,
            client,
            // The embedded server follows the client's decisions (`traceparent`); it
            // starts no trace of its own.
            server: Arc::new(ServerTracing::new(server, 0.0)),
            tiers: Arc::new(tier::TierTracing::new(tiers)),
            meters,
            ids: Ids::new(),
            warn,
            traces: AtomicU64::new(0),
            forced: AtomicU64::new(0),
            config,
        }))
    }

    pub fn endpoint(&self) -> &str {
        &self.config.traces_endpoint
    }

    pub fn metrics_endpoint(&self) -> &str {
        &self.config.metrics_endpoint
    }

    pub fn ratio(&self) -> f64 {
        self.ratio
    }

    /// The tracing of the relay tiers.
    pub fn tier_tracing(&self) -> Arc<tier::TierTracing> {
        Arc::clone(&self.tiers)
    }

    /// The tracing of the embedded fault-server.
    pub fn server_tracing(&self) -> Arc<ServerTracing> {
        Arc::clone(&self.server)
    }

    pub fn meters(&self) -> &Meters {
        &self.meters
    }

    /// Starts the trace of the logical request with this arrival index.
    pub fn begin(
        &self,
        seed: u64,
        index: u64,
        start: SystemTime,
        about: About<'_>,
    ) -> LogicalTrace {
        let x = fault_server::seed::stream::trace_sampling(seed, index);
        LogicalTrace::new(
            self.ids.trace_id(),
            self.ids.span_id(),
            keep(x, self.ratio),
            start,
            about,
        )
    }

    /// A new span id (for an attempt).
    pub fn span_id(&self) -> u64 {
        self.ids.span_id()
    }

    /// Ends a logical request's trace: exported if sampled or forced.
    pub fn finish(
        &self,
        trace: LogicalTrace,
        verdict: Option<&chaos_policy::Verdict>,
        end: SystemTime,
        target: &Target,
    ) {
        if !trace.exported() {
            return;
        }
        self.traces.fetch_add(1, Ordering::Relaxed);
        if trace.forced().is_some() && !trace.sampled() {
            self.forced.fetch_add(1, Ordering::Relaxed);
        }
        for span in trace.into_spans(verdict, end, target, self.client.scope()) {
            self.client.submit(span);
        }
    }

    /// Whether an export failed (a warning was given).
    pub fn warned(&self) -> bool {
        self.warn.said()
    }

    /// Flushes spans and metrics and stops, within [`FLUSH_TIMEOUT`] or so: blocks, so
    /// call it on a blocking thread.
    pub fn shutdown(&self) -> TelemetryView {
        let counts = std::thread::scope(|s| {
            let metrics = s.spawn(|| self.meters.shutdown(FLUSH_TIMEOUT));
            let server = s.spawn(|| self.server.shutdown(FLUSH_TIMEOUT));
            let tiers = s.spawn(|| self.tiers.shutdown(FLUSH_TIMEOUT));
            let client = self.client.shutdown(FLUSH_TIMEOUT);
            let server = server.join().unwrap_or_default();
            let tiers = tiers.join().unwrap_or_default();
            let _ = metrics.join();
            client + server + tiers
        });
        TelemetryView {
            endpoint: self.config.traces_endpoint.clone(),
            sampling_ratio: self.ratio,
            traces: self.traces.load(Ordering::Relaxed),
            traces_forced: self.forced.load(Ordering::Relaxed),
            spans_exported: counts.exported,
            spans_dropped: counts.dropped,
        }
    }
}

/// How long [`Telemetry::shutdown`] may take at most (both flushes run side by side).
pub const SHUTDOWN_BOUND: Duration = FLUSH_TIMEOUT;
