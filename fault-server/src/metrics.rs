//! `GET /metrics`: Prometheus text exposition (format 0.0.4), or OpenMetrics 1.0 to a
//! scraper that asks for it (`Accept: application/openmetrics-text`), written by hand.
//!
//! Why by hand: a dozen counters and gauges do not justify a metrics crate and its
//! registry; both formats are simple and stable, and differ here in two places only (a
//! counter's family is named without `_total` in OpenMetrics, whose text ends `# EOF`).
//! interop/metrics.sh parses a live server's output with the Prometheus project's own
//! parsers (prometheus_client's, the OpenMetrics one strict) to prove both valid.
//! Unlike the ledger, these counters are never reset (Prometheus counters must only go
//! up; `rate()` copes with restarts, not with resets), so a dashboard keeps working
//! across `POST /__chaos/reset`.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use crate::ledger::{Disposition, Ledger};
use crate::script::FaultKind;

/// Process-lifetime counters and gauges.
#[derive(Debug, Default)]
pub(crate) struct Metrics {
    pub(crate) control_requests: AtomicU64,
    pub(crate) in_flight: AtomicI64,
    /// Connections accepted, before anything was read from them: a client that connects
    /// and sends no HTTP is counted here and nowhere else.
    pub(crate) connections_accepted: AtomicU64,
    pub(crate) side_effects: AtomicU64,
    pub(crate) duplicate_side_effects: AtomicU64,
    pub(crate) idempotent_replays: AtomicU64,
    pub(crate) script_loads: AtomicU64,
    pub(crate) scripts_parsing: AtomicU64,
}

/// Counts a script parse in progress (`fault_server_scripts_parsing`) until dropped.
#[derive(Debug)]
pub(crate) struct Parsing<'a>(&'a AtomicU64);

impl Drop for Parsing<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Gauges read from the live capacity model at scrape time.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct CapacityGauges {
    pub(crate) serving: u64,
    pub(crate) queued: u64,
    pub(crate) capacity: Option<u64>,
    pub(crate) queue_limit: Option<u64>,
}

impl Metrics {
    /// A script parse begins; it ends when the guard drops.
    pub(crate) fn parsing(&self) -> Parsing<'_> {
        self.scripts_parsing.fetch_add(1, Ordering::Relaxed);
        Parsing(&self.scripts_parsing)
    }

    /// The exposition text; outcome and fault counts come from the ledger's lifetime
    /// counters (never reset).
    pub(crate) fn render(
        &self,
        ledger: &Ledger,
        capacity: CapacityGauges,
        phases: usize,
        format: Format,
    ) -> String {
        let mut out = Exposition {
            text: String::with_capacity(2048),
            format,
        };
        let (outcomes, faults) = ledger.lifetime_counts();
        requests_by_outcome(&mut out, outcomes);
        faults_by_kind(&mut out, faults);
        self.totals(&mut out, ledger);
        self.gauges_now(&mut out, capacity, phases);
        if format == Format::OpenMetrics {
            out.text.push_str("# EOF\n");
        }
        out.text
    }

    /// The series of one value each: the ledger's figures since its last reset and the
    /// process's counters.
    fn totals(&self, out: &mut Exposition, ledger: &Ledger) {
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let (attempts, logical) = ledger.totals();
        let simple: [(&str, &str, &str, u64); 9] = [
            (
                "fault_server_ledger_attempts",
                "gauge",
                "Attempts the ledger counted since its last reset (requests with an x-request-id).",
                attempts,
            ),
            (
                "fault_server_ledger_logical_requests",
                "gauge",
                "Logical requests (distinct x-request-id) the ledger counted since its last reset.",
                logical,
            ),
            (
                "fault_server_ledger_retries",
                "gauge",
                "Attempts beyond the first of their logical request, since the last reset: with the attempts, the server-side retry rate.",
                attempts.saturating_sub(logical),
            ),
            (
                "fault_server_requests_received_total",
                "counter",
                "Requests received outside the control API.",
                ledger.lifetime_requests(),
            ),
            (
                "fault_server_control_requests_total",
                "counter",
                "Requests to the control API, /healthz and /metrics.",
                load(&self.control_requests),
            ),
            (
                "fault_server_side_effects_total",
                "counter",
                "Side effects executed (non-idempotent requests served or processed).",
                load(&self.side_effects),
            ),
            (
                "fault_server_duplicate_side_effects_total",
                "counter",
                "Side effects executed again for a request id that had executed before.",
                load(&self.duplicate_side_effects),
            ),
            (
                "fault_server_idempotent_replays_total",
                "counter",
                "Requests answered from a stored Idempotency-Key response.",
                load(&self.idempotent_replays),
            ),
            (
                "fault_server_script_loads_total",
                "counter",
                "Scripts installed (at start and by PUT /__chaos/script).",
                load(&self.script_loads),
            ),
        ];
        for (name, kind, help, value) in simple {
            out.header(name, kind, help);
            let _ = writeln!(out.text, "{name} {value}");
        }
    }

    /// What is happening now; a gauge without a value (no capacity model) is left out.
    fn gauges_now(&self, out: &mut Exposition, capacity: CapacityGauges, phases: usize) {
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let gauges: [(&str, &str, Option<u64>); 7] = [
            (
                "fault_server_in_flight",
                "Requests being handled now (queued, served, delayed or held).",
                Some(u64::try_from(self.in_flight.load(Ordering::Relaxed)).unwrap_or(0)),
            ),
            (
                "fault_server_scripts_parsing",
                "Scripts being parsed now (PUT /__chaos/script, on a blocking thread).",
                Some(load(&self.scripts_parsing)),
            ),
            (
                "fault_server_serving",
                "Requests holding a capacity slot now.",
                Some(capacity.serving),
            ),
            (
                "fault_server_queue_depth",
                "Requests waiting for a capacity slot now.",
                Some(capacity.queued),
            ),
            (
                "fault_server_capacity",
                "Configured capacity (absent: unlimited).",
                capacity.capacity,
            ),
            (
                "fault_server_queue_limit",
                "Configured queue length (absent: no capacity model).",
                capacity.queue_limit,
            ),
            (
                "fault_server_script_phases",
                "Fault phases in the current script.",
                Some(phases as u64),
            ),
        ];
        for (name, help, value) in gauges {
            if let Some(value) = value {
                out.header(name, "gauge", help);
                let _ = writeln!(out.text, "{name} {value}");
            }
        }
    }
}

fn requests_by_outcome(out: &mut Exposition, outcomes: Vec<(Disposition, u64)>) {
    out.header(
        "fault_server_requests_total",
        "counter",
        "Requests handled outside the control API, by outcome (code: the status sent, when one was: an injected one for outcome status, the upstream's for outcome upstream).",
    );
    for (outcome, n) in outcomes {
        let (label, code) = match outcome {
            Disposition::Status(code) | Disposition::Upstream(code) => {
                (outcome.fixed_label(), Some(code))
            }
            other => (other.fixed_label(), None),
        };
        match code {
            Some(code) => {
                let _ = writeln!(
                    out.text,
                    "fault_server_requests_total{{outcome=\"{label}\",code=\"{code}\"}} {n}"
                );
            }
            None => {
                let _ = writeln!(
                    out.text,
                    "fault_server_requests_total{{outcome=\"{label}\"}} {n}"
                );
            }
        }
    }
}

fn faults_by_kind(out: &mut Exposition, faults: Vec<(FaultKind, u64)>) {
    out.header(
        "fault_server_faults_total",
        "counter",
        "Faults injected, by kind.",
    );
    for (kind, n) in faults {
        let _ = writeln!(
            out.text,
            "fault_server_faults_total{{kind=\"{}\"}} {n}",
            kind.name()
        );
    }
}

/// Which text a scraper gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    /// Prometheus text exposition 0.0.4.
    Prometheus,
    /// OpenMetrics 1.0.
    OpenMetrics,
}

impl Format {
    /// What a request's `Accept` asks for: OpenMetrics when it names it (as Prometheus
    /// itself does, first in its list), else the classic text.
    pub(crate) fn from_accept(accept: Option<&str>) -> Format {
        match accept.is_some_and(|a| a.contains("application/openmetrics-text")) {
            true => Format::OpenMetrics,
            false => Format::Prometheus,
        }
    }

    pub(crate) fn content_type(self) -> &'static str {
        match self {
            Format::Prometheus => "text/plain; version=0.0.4; charset=utf-8",
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }
}

struct Exposition {
    text: String,
    format: Format,
}

impl Exposition {
    fn header(&mut self, name: &str, kind: &str, help: &str) {
        // An OpenMetrics counter's family is its samples' name without `_total`.
        let family = match (self.format, kind) {
            (Format::OpenMetrics, "counter") => name.strip_suffix("_total").unwrap_or(name),
            _ => name,
        };
        let _ = writeln!(self.text, "# HELP {family} {help}");
        let _ = writeln!(self.text, "# TYPE {family} {kind}");
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn renders_valid_exposition_lines() {
        let metrics = Metrics::default();
        let ledger = Ledger::default();
        ledger.record_outcome(Disposition::Served);
        ledger.record_outcome(Disposition::Status(503));
        ledger.record_outcome(Disposition::Reset);
        ledger.record_fault(crate::script::FaultKind::Reset, "p");
        // A ledger reset does not reset the lifetime counters; the ledger's gauges start
        // again from zero.
        ledger.reset();
        let who = crate::ledger::RequestIdentity {
            request_id: Some("a-1"),
            policy: Some("a"),
            attempt: None,
        };
        ledger.record_request(who, Duration::ZERO);
        ledger.record_request(who, Duration::ZERO);
        let text = metrics.render(
            &ledger,
            CapacityGauges {
                serving: 2,
                queued: 1,
                capacity: Some(4),
                queue_limit: Some(8),
            },
            3,
            Format::Prometheus,
        );
        assert!(text.contains("fault_server_requests_total{outcome=\"served\"} 1\n"));
        assert!(text.contains("fault_server_requests_total{outcome=\"status\",code=\"503\"} 1\n"));
        assert!(text.contains("fault_server_faults_total{kind=\"reset\"} 1\n"));
        assert!(text.contains("fault_server_faults_total{kind=\"delay\"} 0\n"));
        assert!(text.contains("fault_server_queue_depth 1\n"));
        assert!(text.contains("fault_server_capacity 4\n"));
        assert!(text.contains("fault_server_script_phases 3\n"));
        assert!(text.contains("fault_server_ledger_attempts 2\n"));
        assert!(text.contains("fault_server_ledger_logical_requests 1\n"));
        assert!(text.contains("fault_server_ledger_retries 1\n"));
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let (series, value) = line.rsplit_once(' ').expect("name value");
            assert!(value.parse::<u64>().is_ok(), "{line}");
            assert!(series.starts_with("fault_server_"), "{line}");
        }
        assert!(text.contains("# TYPE fault_server_faults_total counter\n"));
        assert!(!text.contains("# EOF"));
    }

    #[test]
    fn openmetrics_names_counter_families_without_total_and_ends_with_eof() {
        let text = Metrics::default().render(
            &Ledger::default(),
            CapacityGauges::default(),
            0,
            Format::OpenMetrics,
        );
        assert!(
            text.contains("# TYPE fault_server_faults counter\n"),
            "{text}"
        );
        assert!(
            text.contains("# HELP fault_server_faults Faults injected"),
            "{text}"
        );
        assert!(
            text.contains("fault_server_faults_total{kind=\"reset\"} 0\n"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE fault_server_in_flight gauge\n"),
            "{text}"
        );
        assert!(text.ends_with("\n# EOF\n"), "{text}");
        assert_eq!(
            Format::from_accept(Some(
                "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"
            )),
            Format::OpenMetrics
        );
        assert_eq!(Format::from_accept(Some("*/*")), Format::Prometheus);
        assert_eq!(Format::from_accept(None), Format::Prometheus);
    }
}
