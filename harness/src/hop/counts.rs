//! What one hop received, sent and gave up: a tier's ledger, kept by the hop core and
//! read by the report.

use chaos_policy::Violation;
use serde::{Deserialize, Serialize};

use crate::stats::Sampled;

/// The most seconds a tier keeps a per-second count of (a day); a longer run is counted in
/// its totals only, so a tier's memory stays bounded.
const MAX_SECONDS: usize = 86_400;

/// What one hop received, sent and gave up.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HopCounts {
    /// Requests received (attempts of the hop above).
    pub received: u64,
    /// Of which first attempts: the logical requests of the hop above.
    pub logical: u64,
    /// Attempts sent to the next hop, and of those, retries.
    pub sent: u64,
    pub retries: u64,
    pub succeeded: u64,
    pub gave_up: u64,
    /// Answers from the next hop that carried `x-chaos-no-retry`.
    pub no_retry_received: u64,
    /// Requests this tier answered with a fault of its own, without forwarding.
    #[serde(default)]
    pub faulted: u64,
    /// Attempts sent that failed to connect: the next hop never received them.
    #[serde(default)]
    pub unsent: u64,
    /// The retries this tier sent that broke an invariant, as the client's are judged.
    #[serde(default)]
    pub violations: HopViolations,
    /// Attempts sent in each second since the tier started.
    pub sent_per_second: Vec<u64>,
    /// Requests received at each peer, peer 1 first, at a tier that listens as several
    /// (at most [`fault_server::wire::MAX_PEERS`]); empty with one.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "crate::bounded::vec::<_, _, { fault_server::wire::MAX_PEERS }>"
    )]
    pub received_by_peer: Vec<u64>,
    /// Requests received that resent a stated attempt already seen (the same id, attempt
    /// and chain): a proxy's retries to another peer or the same one.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub repeats: u64,
    /// Of which resends of a request that is not idempotent (a POST or PATCH without an
    /// idempotency key): the hop above's non-idempotent retries.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub repeats_non_idempotent: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A hop's retries that broke an invariant ([`Violation::of_retry`]), with a few request
/// ids of each: the client's own are counted the same way ([`crate::stats::Recorder`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HopViolations {
    pub retried_permanent: Sampled,
    pub retried_non_idempotent: Sampled,
}

impl HopViolations {
    pub(crate) fn add(&mut self, violation: Violation, id: &str) {
        match violation {
            Violation::RetriedPermanent => self.retried_permanent.add(id),
            Violation::RetriedNonIdempotent => self.retried_non_idempotent.add(id),
        }
    }

    pub fn total(&self) -> u64 {
        self.retried_permanent.count + self.retried_non_idempotent.count
    }
}

impl HopCounts {
    /// Adds what another instance of the same tier counted (a sharded run's shards each
    /// start their own): totals summed, the series second by second from each tier's start.
    pub fn absorb(&mut self, mut other: HopCounts) {
        for (mine, theirs) in [
            (&mut self.received, other.received),
            (&mut self.logical, other.logical),
            (&mut self.sent, other.sent),
            (&mut self.retries, other.retries),
            (&mut self.succeeded, other.succeeded),
            (&mut self.gave_up, other.gave_up),
            (&mut self.no_retry_received, other.no_retry_received),
            (&mut self.faulted, other.faulted),
            (&mut self.unsent, other.unsent),
            (&mut self.repeats, other.repeats),
            (
                &mut self.repeats_non_idempotent,
                other.repeats_non_idempotent,
            ),
        ] {
            *mine += theirs;
        }
        self.violations
            .retried_permanent
            .absorb(&mut other.violations.retried_permanent);
        self.violations
            .retried_non_idempotent
            .absorb(&mut other.violations.retried_non_idempotent);
        if self.received_by_peer.len() < other.received_by_peer.len() {
            self.received_by_peer
                .resize(other.received_by_peer.len(), 0);
        }
        for (mine, theirs) in self.received_by_peer.iter_mut().zip(other.received_by_peer) {
            *mine += theirs;
        }
        if self.sent_per_second.len() < other.sent_per_second.len() {
            self.sent_per_second.resize(other.sent_per_second.len(), 0);
        }
        for (mine, theirs) in self.sent_per_second.iter_mut().zip(other.sent_per_second) {
            *mine += theirs;
        }
    }

    /// A request received at `peer` (numbered from 1; beyond the most a tier listens as,
    /// uncounted).
    pub(super) fn received_at(&mut self, peer: u32) {
        let Some(index) = usize::try_from(peer).ok().and_then(|p| p.checked_sub(1)) else {
            return;
        };
        if index >= fault_server::wire::MAX_PEERS {
            return;
        }
        if self.received_by_peer.len() <= index {
            self.received_by_peer.resize(index + 1, 0);
        }
        self.received_by_peer[index] += 1;
    }

    /// An attempt sent at `at` (the tier's clock).
    pub(super) fn sent_at(&mut self, at: std::time::Duration, retry: bool) {
        self.sent += 1;
        if retry {
            self.retries += 1;
        }
        let second = usize::try_from(at.as_secs()).unwrap_or(usize::MAX);
        if second < MAX_SECONDS {
            let series = &mut self.sent_per_second;
            if series.len() <= second {
                series.resize(second + 1, 0);
            }
            series[second] += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn violations_count_every_time_and_keep_a_few_distinct_ids() {
        let mut v = HopViolations::default();
        for i in 0..20 {
            v.add(Violation::RetriedPermanent, &format!("p-{}", i % 3));
        }
        v.add(Violation::RetriedNonIdempotent, "q");
        assert_eq!(v.retried_permanent.count, 20);
        assert_eq!(v.retried_permanent.examples, ["p-0", "p-1", "p-2"]);
        assert_eq!(v.retried_non_idempotent.count, 1);
        assert_eq!(v.total(), 21);
    }

    #[test]
    fn the_per_second_series_stops_at_a_day() {
        let mut c = HopCounts::default();
        c.sent_at(std::time::Duration::from_secs(2), false);
        c.sent_at(std::time::Duration::from_secs(2), true);
        c.sent_at(std::time::Duration::from_secs(MAX_SECONDS as u64), true);
        assert_eq!(c.sent_per_second, [0, 0, 2]);
        assert_eq!((c.sent, c.retries), (3, 2));
    }
}
