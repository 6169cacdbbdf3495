//! The report: one model, built once from a run, rendered four ways (json, md, html,
//! junit). Field names are the contract with users' scripts and CI (design.md, "Reports").

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub const SCHEMA: &str = "chaos-report/v1";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub schema: String,
    /// `live` (real sockets, real time) or `simulated` (`harness simulate`: the same plan
    /// and policy core in virtual time, against a modelled fault-server).
    #[serde(default = "live")]
    pub mode: String,
    /// `pass` when every gate of every policy passed.
    pub verdict: String,
    /// The run was interrupted; the figures cover what ran.
    pub aborted: bool,
    /// When the report was made, UTC, RFC 3339.
    pub generated_at: String,
    /// This run among every run of every plan ([`super::run_id`]): also the
    /// `chaos.run.id` resource attribute of its spans and metrics.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub run_id: String,
    /// Why the run could not be completed (exit 3); the figures cover what ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What a reader should know before trusting the figures (an undelivered load, ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    pub plan: PlanInfo,
    pub policies: Vec<PolicyReport>,
    /// This run against a saved baseline (`--baseline FILE`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<super::drift::Comparison>,
    /// The policies best first, and the one to roll out (plans/README.md, "What the
    /// report counts").
    #[serde(default)]
    pub ranking: super::rank::Ranking,
    /// Where the run's traces and metrics went, and how many spans arrived (`--otlp`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub telemetry: Option<TelemetryView>,
    /// A sharded run's report, merged from its shards' partial reports (`harness merge`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shards: Option<ShardsInfo>,
}

fn live() -> String {
    "live".to_owned()
}

/// What the report says of telemetry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TelemetryView {
    /// Where spans went.
    pub endpoint: String,
    /// The share of logical requests sampled.
    pub sampling_ratio: f64,
    /// Logical requests handed to the exporter as traces, and of those, how many only
    /// because they broke an invariant (the ratio did not sample them).
    pub traces: u64,
    pub traces_forced: u64,
    /// Spans accepted by the collector, and spans lost (a full queue, a failed export,
    /// or still queued when the final flush ran out of time): the harness's, its relay
    /// tiers' and the embedded fault-server's together.
    pub spans_exported: u64,
    pub spans_dropped: u64,
}

/// Which shards a merged report covers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardsInfo {
    /// Shards in the run (`--shard I/N`: N).
    pub count: u32,
    /// The common start (`--start-at`), RFC 3339 UTC.
    pub start_at: String,
    /// The shards whose partial reports were merged, by index.
    pub reported: Vec<u32>,
    /// The shards that never reported: the report is then `INCOMPLETE`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing: Vec<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanInfo {
    pub name: String,
    pub file: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub seed: u64,
    pub duration_s: f64,
    /// `embedded`, or the target URL.
    pub target: String,
    /// Whether a fault-server ledger backs the server-side figures.
    pub ledger: bool,
    /// The fault phases in force, by name.
    pub faults: Vec<String>,
    /// Where they came from: the plan, the plan in place of a running fault-server's own
    /// script, or that script kept (`target.script`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub faults_from: String,
    /// First start and last end of the windowed fault phases, in seconds.
    pub fault_window_s: Option<[f64; 2]>,
    /// Of the plan's text and seed; equal digests, same experiment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
}

impl PlanInfo {
    /// The run's fault-server stood in front of a service (`target: { upstream }`).
    pub fn in_front_of_a_service(&self) -> bool {
        self.target.starts_with(super::context::IN_FRONT_OF)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicyReport {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preset: Option<String>,
    /// One line: attempts, backoff, budget, breaker.
    pub summary: String,
    /// Every field of the policy as it resolved (its preset, its import and the plan's
    /// keys), in the plan's key names and spelling, absent limits as `none`: a policy a
    /// plan takes back (`harness validate --explain` writes the same).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved: Option<crate::plan::resolved::Value>,
    /// The policy did not run its whole plan (interrupted, or the target went away).
    #[serde(default)]
    pub partial: bool,
    /// Arrivals the schedule offered: `logical + dropped`.
    pub offered: u64,
    /// Logical requests sent (arrivals not dropped).
    pub logical: u64,
    pub succeeded: u64,
    /// Sent logical requests that gave up or were still running when the drain ended.
    pub failed: u64,
    /// Arrivals not sent because `max_in_flight` requests were already running: failed
    /// requests from the user's point of view, outside `logical` and `failed`.
    pub dropped: u64,
    /// Logical requests still running when the drain ended (counted in `failed`).
    pub unfinished: u64,
    /// Attempts that left the process.
    pub attempts: u64,
    pub retries: u64,
    /// Retries that succeeded: over `retries`, the success rate after a backoff.
    #[serde(default)]
    pub retries_succeeded: u64,
    /// Attempts stopped before they left the process (drain's end, interruption): not in
    /// `attempts`.
    pub cut: u64,
    /// `succeeded / offered`: a dropped arrival counts as a failure.
    pub success_rate: f64,
    pub amplification: Amplification,
    pub give_ups: BTreeMap<String, u64>,
    pub violations: Violations,
    pub violation_examples: BTreeMap<String, Vec<String>>,
    /// Latency of the sent logical requests, from their scheduled time.
    pub latency_ms: Percentiles,
    /// Latency of the offered load: dropped arrivals rank after every sent request, so a
    /// percentile that falls among them is null (unbounded). Latency gates judge these.
    pub offered_latency_ms: OfferedPercentiles,
    pub attempt_latency_ms: Percentiles,
    /// How late arrivals were dispatched after their scheduled time.
    pub arrival_lag_ms: Percentiles,
    /// Waits for one of the client's connections; only when the plan caps them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connection_wait: Option<ConnectionWait>,
    /// The connections the client opened; live runs only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connections_opened: Option<ConnectionsOpened>,
    /// Seconds from the end of the last fault phase until the success rate holds at its
    /// pre-fault level; null when there is no fault window or it never recovered.
    pub recovery_s: Option<f64>,
    pub outcomes: BTreeMap<String, u64>,
    pub breaker_trips: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ledger: Option<LedgerView>,
    pub series: Vec<SeriesPoint>,
    pub gates: Vec<GateResult>,
    /// The busiest 50 ms of the fault window over its mean 50 ms, in retries sent: 1 is an
    /// even spread, retries in waves make it more. Null without a fault window or with
    /// fewer retries in it than 50 ms buckets.
    #[serde(default)]
    pub synchrony: Option<f64>,
    /// The leaf's (the target's) attempts per logical request of the client, from its
    /// ledger: behind relay tiers, what every tier's retries multiplied to. Null without
    /// a ledger.
    #[serde(default)]
    pub leaf_amplification: Option<f64>,
    /// `share_budget: true`: the client and its relay tiers drew every retry from the
    /// client's one budget, so its bound holds at the leaf too.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub shared_budget: bool,
    /// Each relay tier, outermost first; empty without `tiers:`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tiers: Vec<TierReport>,
    /// Retries sent in each 50 ms of the fault window, from its start; empty without one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub waves_50ms: Vec<u64>,
    /// A client test's program and the ledger's judgement of its retries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<super::client::ClientView>,
    /// A counterexample (`expect: fail`): what its gates were expected to catch, and
    /// whether they did. Its own gates' failures do not fail the run; this does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect: Option<Expectation>,
}

/// A counterexample's expectation, judged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Expectation {
    /// The gates it must each fail, as the plan named them; empty: any gate.
    pub fail: Vec<String>,
    /// Every named gate failed (for a bare `fail`, at least one did): the detectors fired.
    pub met: bool,
    /// What was caught, or which detector did not fire.
    pub detail: String,
}

pub use super::proxy::{PeerReport, ProxyReport, RetriedBy};

/// One relay tier of a policy's chain.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TierReport {
    pub name: String,
    /// Its policy in this variant, in a line.
    pub policy: String,
    /// Requests received (the hop above's attempts), of which first attempts (`logical`).
    pub received: u64,
    pub logical: u64,
    /// Attempts sent to the next hop, of which retries.
    pub sent: u64,
    pub retries: u64,
    pub succeeded: u64,
    pub gave_up: u64,
    /// Answers from the next hop marked `x-chaos-no-retry`.
    pub no_retry_received: u64,
    /// Requests it answered with a fault of its own (`tier:` phases), not forwarded.
    #[serde(default)]
    pub faulted: u64,
    /// Attempts sent per logical request of the client.
    pub amplification: f64,
    /// The next hop received exactly what this one sent.
    pub agrees: bool,
    /// Attempts sent in each second of the run.
    #[serde(default)]
    pub sent_per_second: Vec<u64>,
    /// Its retries that broke an invariant, judged as the client's are: the gates
    /// `no_retry_of_permanent` and `no_retry_of_non_idempotent` count every hop.
    #[serde(default)]
    pub violations: RetryViolations,
    /// A few request ids of each, by violation name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub violation_examples: BTreeMap<String, Vec<String>>,
    /// A proxy tier (nginx, HAProxy): its peers and what caused its retries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy: Option<ProxyReport>,
}

/// Retries one hop sent that broke an invariant.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryViolations {
    pub retried_permanent: u64,
    pub retried_non_idempotent: u64,
}

impl RetryViolations {
    /// `0`, or e.g. `3 perm, 1 non-idem` (as the summary table writes them).
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if self.retried_permanent > 0 {
            parts.push(format!("{} perm", self.retried_permanent));
        }
        if self.retried_non_idempotent > 0 {
            parts.push(format!("{} non-idem", self.retried_non_idempotent));
        }
        if parts.is_empty() {
            "0".to_owned()
        } else {
            parts.join(", ")
        }
    }
}

/// One hop of a call chain in the report's table: the client, each relay tier, the leaf.
#[derive(Debug, Clone, PartialEq)]
pub struct HopRow {
    pub hop: String,
    pub policy: String,
    pub received: Option<u64>,
    pub logical: Option<u64>,
    pub sent: Option<u64>,
    pub retries: Option<u64>,
    pub gave_up: Option<u64>,
    /// Attempts sent (the leaf: received) per logical request of the client.
    pub amplification: Option<f64>,
    /// The next hop received what this one sent.
    pub agrees: Option<bool>,
    /// Its retries that broke an invariant (the leaf sends none).
    pub violations: Option<RetryViolations>,
}

impl PolicyReport {
    /// The retries that broke an invariant at every hop: the client's and each tier's.
    pub fn retry_violations(&self) -> RetryViolations {
        self.tiers
            .iter()
            .fold(self.violations.retries(), |sum, t| RetryViolations {
                retried_permanent: sum.retried_permanent + t.violations.retried_permanent,
                retried_non_idempotent: sum.retried_non_idempotent
                    + t.violations.retried_non_idempotent,
            })
    }

    /// The rows of the latency table every renderer shows: the wait for a connection
    /// only when the plan caps them.
    pub fn latency_rows(&self) -> Vec<(&'static str, &Percentiles)> {
        if self.client.is_some() {
            // The program's own clock is not read: only the server's view.
            return vec![("logical (first attempt to first 2xx)", &self.latency_ms)];
        }
        let mut rows = vec![
            ("logical (from schedule)", &self.latency_ms),
            ("single attempt", &self.attempt_latency_ms),
            ("arrival lag", &self.arrival_lag_ms),
        ];
        // Over HTTP/2 nothing waits for a connection: attempts share them.
        if let Some(c) = self
            .connection_wait
            .as_ref()
            .filter(|c| c.streams_waited.is_none())
        {
            rows.push(("waiting for a connection", &c.wait_ms));
        }
        rows
    }

    /// Attempts the client sent that the next hop may not have received: those that
    /// failed to connect, and those abandoned on the wire at the end.
    fn cut_or_unsent(&self) -> u64 {
        self.ledger
            .as_ref()
            .map_or(0, |l| l.client_unsent + l.client_abandoned)
    }

    /// The chain hop by hop, client first and leaf last; empty without relay tiers.
    pub fn hops(&self) -> Vec<HopRow> {
        let Some(first) = self.tiers.first() else {
            return Vec::new();
        };
        let mut rows = vec![HopRow {
            hop: "client".to_owned(),
            policy: self.summary.clone(),
            received: None,
            logical: Some(self.logical),
            sent: Some(self.attempts),
            retries: Some(self.retries),
            gave_up: Some(self.failed),
            amplification: Some(self.amplification.client),
            // The client's own range: attempts that failed to connect or were abandoned at
            // the end may not have reached the first tier.
            agrees: Some(
                first.received <= self.attempts
                    && first.received + self.cut_or_unsent() >= self.attempts,
            ),
            violations: Some(self.violations.retries()),
        }];
        rows.extend(self.tiers.iter().map(|t| HopRow {
            hop: t.name.clone(),
            policy: t.policy.clone(),
            received: Some(t.received),
            logical: Some(t.logical),
            sent: Some(t.sent),
            retries: Some(t.retries),
            gave_up: Some(t.gave_up),
            amplification: Some(t.amplification),
            agrees: Some(t.agrees),
            violations: Some(t.violations),
        }));
        rows.push(HopRow {
            hop: "leaf".to_owned(),
            policy: "the target".to_owned(),
            received: self.ledger.as_ref().map(|l| l.attempts),
            logical: self.ledger.as_ref().map(|l| l.logical),
            sent: None,
            retries: None,
            gave_up: None,
            amplification: self.leaf_amplification,
            agrees: None,
            violations: None,
        });
        rows
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Amplification {
    /// Attempts / logical requests, as the client counted.
    pub client: f64,
    /// Attempts / logical requests, as the fault-server's ledger counted both (a request
    /// the breaker refused outright never reaches it); null for a black box.
    pub server: Option<f64>,
    /// The highest attempts / offered over any one-second window.
    pub peak_1s: f64,
    /// What the policy's budget permits for this run; null without a ratio budget.
    pub budget_bound: Option<f64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Violations {
    pub retried_permanent: u64,
    pub retried_non_idempotent: u64,
    /// From the ledger; null for a black box.
    pub duplicate_side_effects: Option<u64>,
    /// A client test: side effects the program repeated under a fresh `Idempotency-Key`
    /// after a failed answer (the ledger's `fresh_keys`). Absent for the harness's own
    /// policies, which resend the key they first sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retried_with_fresh_key: Option<u64>,
}

impl Violations {
    /// The client's retries that broke an invariant, as a tier's are counted.
    pub fn retries(&self) -> RetryViolations {
        RetryViolations {
            retried_permanent: self.retried_permanent,
            retried_non_idempotent: self.retried_non_idempotent,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

/// The client's waits for a connection under `load.max_connections`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConnectionWait {
    /// The plan's cap.
    pub max_connections: u32,
    /// How long attempts waited for a connection (every attempt but those stopped while
    /// waiting; most wait for none).
    pub wait_ms: Percentiles,
    /// Attempts whose timeout ran out while they waited: in `attempts`, as
    /// `connect_timeout`s.
    pub timed_out: u64,
    /// Over HTTP/2, where `max_connections` is how many connections every attempt is
    /// multiplexed on (default 1): attempts handed to a connection with as many streams
    /// open as the server's `SETTINGS_MAX_CONCURRENT_STREAMS`, which waited in the client
    /// for one to end. Live runs only (the simulator has no connections).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub streams_waited: Option<u64>,
}

/// The TCP connections a live client opened to the target (relay tiers' own not counted).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnectionsOpened {
    pub total: u64,
    /// The most opened in one second of the run.
    pub peak_per_second: u64,
}

/// Percentiles that may be unbounded.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OfferedPercentiles {
    pub p50: Option<f64>,
    pub p90: Option<f64>,
    pub p99: Option<f64>,
    pub p999: Option<f64>,
}

/// What the fault-server's ledger says, and whether it agrees with the client.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LedgerView {
    pub attempts: u64,
    pub logical: u64,
    pub side_effects: u64,
    pub duplicate_side_effects: u64,
    pub idempotent_replays: u64,
    /// Attempts the client sent that failed to connect: the server cannot have seen them.
    pub client_unsent: u64,
    /// Attempts on the wire, unanswered, when the run stopped: the server may not have
    /// read them yet.
    pub client_abandoned: u64,
    /// Logical requests with an attempt the client saw reach the server.
    pub client_reached: u64,
    /// The server saw every attempt the client sent, except those that failed to connect
    /// (and, at most, those abandoned at the end), and no other; and as many logical
    /// requests as reached it.
    pub reconciled: bool,
    pub by_outcome: BTreeMap<String, u64>,
    /// Attempts per peer (numbered from 1) and method, when the server listened as more
    /// than one peer; empty (and left out) otherwise.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub by_peer: BTreeMap<u32, BTreeMap<String, u64>>,
    /// Attempts that resent a stated attempt the server had seen (a proxy's retries to
    /// another peer or the same one), by method; empty (and left out) without any.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub repeats_by_method: BTreeMap<String, Repeats>,
}

/// Resends of one method, as the server's ledger counted them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Repeats {
    pub repeats: u64,
    /// Of which the previous arrival of the same attempt was answered with a 4xx that
    /// forbids a retry (not 408 or 429: `Outcome::forbids_retry`).
    pub after_4xx: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeriesPoint {
    pub t: u64,
    pub offered: u64,
    pub dropped: u64,
    pub attempts: u64,
    pub succeeded: u64,
    pub failed: u64,
    pub retries: u64,
    pub budget_tokens: Option<f64>,
    pub breaker_open: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GateResult {
    pub name: String,
    pub pass: bool,
    pub measured: Option<f64>,
    pub limit: Option<f64>,
    pub detail: String,
}

impl PolicyReport {
    /// The give-up reasons that occurred, as `reason count, …` (or `none`).
    pub fn give_ups_text(&self) -> String {
        let parts: Vec<String> = self
            .give_ups
            .iter()
            .filter(|(_, v)| **v > 0)
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        if parts.is_empty() {
            "none".to_owned()
        } else {
            parts.join(", ")
        }
    }

    /// What the attempts produced, as `outcome count, …`.
    pub fn outcomes_text(&self) -> String {
        let parts: Vec<String> = self
            .outcomes
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        parts.join(", ")
    }
}
