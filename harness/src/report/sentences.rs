//! The sentences and table cells the renderers (markdown, html) say of the model's
//! parts.

use super::model::{
    ConnectionWait, ConnectionsOpened, LedgerView, OfferedPercentiles, TelemetryView,
};

impl OfferedPercentiles {
    /// p50, p90, p99, p99.9 in milliseconds, `∞` where unbounded: one table row's cells.
    pub fn cells(&self) -> [String; 4] {
        [self.p50, self.p90, self.p99, self.p999]
            .map(|x| x.map_or_else(|| "∞".to_owned(), |v| format!("{v:.1}")))
    }
}

impl ConnectionsOpened {
    pub fn sentence(&self) -> String {
        let s = if self.total == 1 { "" } else { "s" };
        let (total, peak) = (self.total, self.peak_per_second);
        format!("The client opened {total} connection{s} ({peak} in its busiest second).")
    }
}

impl ConnectionWait {
    /// One sentence on the cap and what waiting under it cost.
    pub fn sentence(&self) -> String {
        if let Some(waited) = self.streams_waited {
            return format!(
                "HTTP/2: every attempt multiplexed on {} connection{}; {} found every stream the server allows (SETTINGS_MAX_CONCURRENT_STREAMS) taken and waited in the client for one.",
                self.max_connections,
                if self.max_connections == 1 { "" } else { "s" },
                waited
            );
        }
        format!(
            "At most {} connection{}: attempts waited for one {:.1} ms at p99 ({:.1} ms at most); {} ran out of time waiting (never sent; counted as connect_timeout).",
            self.max_connections,
            if self.max_connections == 1 { "" } else { "s" },
            self.wait_ms.p99,
            self.wait_ms.max,
            self.timed_out
        )
    }
}

impl LedgerView {
    /// One sentence on what the server saw; `disagree` is how the renderer stresses a
    /// disagreement with the client.
    pub fn sentence(&self, disagree: &str) -> String {
        format!(
            "Server ledger: {} attempts of {} logical requests, {} side effects, {} duplicate, {} idempotent replays; {}.",
            self.attempts,
            self.logical,
            self.side_effects,
            self.duplicate_side_effects,
            self.idempotent_replays,
            if self.reconciled {
                "agrees with the client"
            } else {
                disagree
            }
        )
    }
}

impl TelemetryView {
    /// One sentence for the report.
    pub fn describe(&self) -> String {
        let lost = if self.spans_dropped == 0 {
            "none lost".to_owned()
        } else {
            format!(
                "{} lost (a collector down, slow, or a full queue: the traces are incomplete)",
                self.spans_dropped
            )
        };
        format!(
            "Telemetry: {} logical requests traced ({:.0}% sampled, {} more only because they broke an invariant); {} spans exported to {}, {lost}.",
            self.traces,
            self.sampling_ratio * 100.0,
            self.traces_forced,
            self.spans_exported,
            self.endpoint,
        )
    }
}
