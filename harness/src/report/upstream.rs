//! A fault proxy's two kinds of answer kept apart: what the service behind it (the
//! upstream, `target: { upstream }` or `fault-server --upstream`) answered, and what the
//! fault-server answered itself without forwarding (its injected faults, its refusals).
//!
//! The ledger already counts them apart (`ledger.by_outcome` in report.json:
//! `upstream_<code>`, `upstream_timeout`, `upstream_failed`, `upstream_unreachable` for
//! the service; every other label for the fault-server); this reads that split, so a
//! client's `503` can be told from the service's own.

use super::model::LedgerView;
use super::table::{Cell, Table};

/// The answers of one run's attempts, by who gave them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UpstreamSplit {
    /// The service's own answers, by status, lowest first.
    pub by_status: Vec<(u16, u64)>,
    /// Forwarded, and no answer began within the upstream timeout (answered 504).
    pub timed_out: u64,
    /// Forwarded, and the connection failed before a response head (answered 502).
    pub failed: u64,
    /// Dropped before they ended (`abandoned`: the client's connection went away, or the
    /// server stopped): answered by no one, and they may have reached the service.
    pub abandoned: u64,
    /// Answered by the fault-server itself, never forwarded, by ledger label (with
    /// `upstream_unreachable`: the service could not be connected to, answered 502).
    pub own: Vec<(String, u64)>,
}

impl UpstreamSplit {
    /// Requests the service answered.
    pub fn answered(&self) -> u64 {
        self.by_status.iter().map(|(_, n)| n).sum()
    }

    /// Requests sent to the service: those it answered, and those that got no answer
    /// in time or lost their connection (which may have reached it).
    pub fn forwarded(&self) -> u64 {
        self.answered() + self.timed_out + self.failed
    }

    /// Attempts the fault-server answered itself.
    pub fn own_total(&self) -> u64 {
        self.own.iter().map(|(_, n)| n).sum()
    }

    /// One paragraph, the figures a reader looks for first.
    pub fn sentence(&self) -> String {
        let statuses: Vec<String> = self
            .by_status
            .iter()
            .map(|(code, n)| format!("{code} × {n}"))
            .collect();
        let mut out = format!(
            "The service behind the fault-server (upstream): {} requests reached it, {} answered by it{}",
            self.forwarded(),
            self.answered(),
            if statuses.is_empty() {
                String::new()
            } else {
                format!(" ({})", statuses.join(", "))
            }
        );
        if self.timed_out > 0 {
            out.push_str(&format!(
                ", {} not answered within the upstream timeout (504)",
                self.timed_out
            ));
        }
        if self.failed > 0 {
            out.push_str(&format!(
                ", {} whose connection failed before an answer (502)",
                self.failed
            ));
        }
        if self.abandoned > 0 {
            out.push_str(&format!(
                ", and {} abandoned before an answer (the client's connection went away; they may have reached it)",
                self.abandoned
            ));
        }
        out.push_str(&format!(
            ". The fault-server answered {} attempts itself, never forwarded",
            self.own_total()
        ));
        let own: Vec<String> = self
            .own
            .iter()
            .map(|(label, n)| format!("{label} × {n}"))
            .collect();
        if !own.is_empty() {
            out.push_str(&format!(" ({})", own.join(", ")));
        }
        out.push_str(
            ": its injected faults and refusals (a fault with `processed: true` counts here, though the service did its work first).",
        );
        out
    }

    /// Who answered the attempts, a row per answer.
    pub(super) fn table(&self) -> Table {
        let mut table = Table::new(["answered by", "answer", "attempts"]);
        let service = "the service (upstream)";
        for (code, n) in &self.by_status {
            table.row([service.to_owned(), code.to_string(), n.to_string()]);
        }
        for (what, n) in [
            (
                "no answer within the upstream timeout (504)",
                self.timed_out,
            ),
            ("connection failed before an answer (502)", self.failed),
        ] {
            if n > 0 {
                table.row([service.to_owned(), what.to_owned(), n.to_string()]);
            }
        }
        if self.abandoned > 0 {
            table.row([
                "no one (abandoned: may have reached the service)".to_owned(),
                "the client's connection went away".to_owned(),
                self.abandoned.to_string(),
            ]);
        }
        let own = "the fault-server (not forwarded)";
        for (label, n) in &self.own {
            // Labels come from the server's ledger, which may be another's: quoted.
            table.row([
                Cell::new(own),
                Cell::quoted(label.clone()),
                Cell::new(n.to_string()),
            ]);
        }
        table
    }
}

impl LedgerView {
    /// The service's answers apart from the fault-server's own; `None` when nothing was
    /// forwarded to a service and the run was not in front of one (`proxied`).
    pub fn upstream(&self, proxied: bool) -> Option<UpstreamSplit> {
        let mut split = UpstreamSplit::default();
        let mut seen = false;
        for (label, &n) in &self.by_outcome {
            let Some(rest) = label.strip_prefix("upstream_") else {
                if label == "abandoned" {
                    split.abandoned += n;
                } else if n > 0 {
                    split.own.push((label.clone(), n));
                }
                continue;
            };
            seen = true;
            match rest {
                "timeout" => split.timed_out += n,
                "failed" => split.failed += n,
                code => match code.parse::<u16>() {
                    Ok(code) => split.by_status.push((code, n)),
                    // `upstream_unreachable` (never forwarded), or a label of a newer
                    // server: the fault-server's answer, not lost.
                    Err(_) if n > 0 => split.own.push((label.clone(), n)),
                    Err(_) => {}
                },
            }
        }
        if !seen && !proxied {
            return None;
        }
        split.by_status.retain(|(_, n)| *n > 0);
        split.by_status.sort_unstable();
        Some(split)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::super::model::LedgerView;

    fn ledger(by_outcome: &[(&str, u64)]) -> LedgerView {
        LedgerView {
            attempts: 0,
            logical: 0,
            side_effects: 0,
            duplicate_side_effects: 0,
            idempotent_replays: 0,
            client_unsent: 0,
            client_abandoned: 0,
            client_reached: 0,
            reconciled: true,
            by_outcome: by_outcome
                .iter()
                .map(|(k, v)| ((*k).to_owned(), *v))
                .collect(),
            by_peer: BTreeMap::new(),
            repeats_by_method: BTreeMap::new(),
        }
    }

    #[test]
    fn the_services_answers_are_kept_apart_from_injected_ones() {
        let l = ledger(&[
            ("upstream_200", 440),
            ("upstream_404", 30),
            ("upstream_501", 10),
            ("upstream_503", 5),
            ("upstream_timeout", 2),
            ("upstream_unreachable", 1),
            ("status_503", 600),
            ("reset", 20),
            ("abandoned", 3),
        ]);
        let split = l.upstream(false).expect("labels of an upstream");
        assert_eq!(
            split.by_status,
            [(200, 440), (404, 30), (501, 10), (503, 5)]
        );
        assert_eq!(split.answered(), 485);
        assert_eq!(split.forwarded(), 487, "a timed-out request was sent");
        assert_eq!(split.own_total(), 621);
        let sentence = split.sentence();
        assert!(
            sentence.contains("487 requests reached it, 485 answered by it (200 × 440, 404 × 30, 501 × 10, 503 × 5)"),
            "{sentence}"
        );
        assert!(
            sentence.contains("answered 621 attempts itself, never forwarded (reset × 20, status_503 × 600, upstream_unreachable × 1)"),
            "{sentence}"
        );
        assert!(
            sentence.contains("and 3 abandoned before an answer"),
            "{sentence}"
        );
        let md = split.table().markdown();
        assert!(md.contains("| the service (upstream) | 503 | 5 |"), "{md}");
        assert!(
            md.contains("| the fault-server (not forwarded) | status_503 | 600 |"),
            "{md}"
        );
    }

    #[test]
    fn without_an_upstream_there_is_no_split_unless_the_run_was_in_front_of_one() {
        let l = ledger(&[("served", 10), ("status_503", 3)]);
        assert_eq!(l.upstream(false), None);
        let all_faulted = l.upstream(true).expect("in front of a service");
        assert_eq!(all_faulted.forwarded(), 0);
        assert_eq!(all_faulted.own_total(), 13);
    }
}
