//! What each retry did after what: the ledger's judgement of a client it did not write.
//!
//! Why: counting attempts proves amplification, but a client under test is judged on more:
//! did it wait as long as `Retry-After` asked, how long did it back off before each
//! attempt, did it retry after an answer that forbids it, did it resend a POST without a
//! key. Each of these is a fact about two consecutive attempts of one logical request, so
//! the ledger keeps, per logical request, only its last attempt (when it arrived, when and
//! how it was answered, what it asked), and folds every retry into counters and fixed-size
//! histograms at once.
//!
//! Memory stays bounded as the ledger's does: an entry lives for the ledger's `id_ttl`
//! from its first attempt, at most `max_ids` are kept (oldest first), and the window's
//! fingerprints (requests no header names) likewise; the histograms are fixed in size.
//!
//! Pure: time comes in as `now`, the caller's offset from its own epoch.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::hash::{BuildHasher, RandomState};
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use super::expire;
use super::group::{Claim, GroupedBy};
pub use crate::wire::Seen;

/// Gaps are kept per attempt number up to this one; later attempts share its histogram.
pub const MAX_GAP_ATTEMPT: u32 = 10;

/// How many ids of early retries a snapshot names.
const EXAMPLES: usize = 5;

/// How the ledger judges a client: how it groups attempts, how long it waits for a retry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Judging {
    /// A header that names the logical request (lower case), tried before the ones
    /// clients send on their own.
    pub header: Option<String>,
    /// How long after an attempt was answered an identical request (method, path and
    /// query, body) counts as its retry, for requests no header names.
    pub window: Duration,
    /// How much earlier than `Retry-After` asked a retry may come and still honour it: the
    /// server measures from the moment it answered, the client from the moment it read
    /// the answer, and clients round.
    pub tolerance: Duration,
}

impl Default for Judging {
    fn default() -> Self {
        Judging {
            header: None,
            // Longer than the longest backoff of the common presets' first retries (AWS
            // SDKs cap at 20 s, gRPC's example at 1 s) and short enough that a client
            // polling the same URL every few seconds is not taken for one long retry.
            window: Duration::from_secs(10),
            tolerance: Duration::from_millis(50),
        }
    }
}

/// One attempt, as it arrives: what the judge needs of it.
#[derive(Debug, Clone)]
pub struct Arriving<'a> {
    pub claim: Claim<'a>,
    /// The attempt number the client stated, if it did.
    pub stated_attempt: Option<u32>,
    /// POST or PATCH: a retry can run its side effect twice.
    pub side_effect: bool,
    /// It carried an `Idempotency-Key`.
    pub keyed: bool,
}

/// What the judge made of an arriving attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grouped {
    /// The logical request's id (a header's value, or `guess-…` for a guessed one).
    pub id: String,
    /// The attempt number: the client's, else the attempts of this id seen so far.
    pub attempt: u32,
    /// How the id was found.
    pub by: GroupedBy,
    /// What [`Retries::answered`] takes back.
    pub entry: u64,
}

/// Retries that followed an answer, by what the answer was and what was retried: the
/// harness decides which of these break an invariant (`chaos-policy`'s one definition).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RetryAfter {
    /// How the previous attempt was answered ([`Seen`]'s label: `status_503`, `refuse`).
    pub after: String,
    /// The request runs a side effect (POST, PATCH).
    pub side_effect: bool,
    /// It carried an `Idempotency-Key`.
    pub keyed: bool,
    pub retries: u64,
}

/// Retries after an answer that carried `Retry-After`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RetryAfterHonoured {
    /// Retries whose previous answer asked for a wait.
    pub asked: u64,
    /// Of which waited at least that long (less the tolerance).
    pub honoured: u64,
    /// Of which came earlier.
    pub early: u64,
    /// The most any came early by, in microseconds.
    pub worst_early_us: u64,
    /// The tolerance, in microseconds.
    pub tolerance_us: u64,
    /// A few logical ids that retried early.
    pub examples: Vec<String>,
}

/// The wait before one attempt number, measured from the previous attempt's answer to
/// this attempt's arrival: the client's backoff, plus what its network and scheduling add.
/// A retry after an answer with `Retry-After` is not counted here (its wait was the
/// server's to ask; [`RetryAfterHonoured`] judges it).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Gaps {
    /// The attempt these gaps came before (2: the first retry); the last one pools every
    /// attempt from [`MAX_GAP_ATTEMPT`] on.
    pub attempt: u32,
    pub count: u64,
    pub min_us: u64,
    pub p10_us: u64,
    pub p50_us: u64,
    pub p90_us: u64,
    pub p99_us: u64,
    pub max_us: u64,
}

/// The judgement of a client's retries (`judged` in a ledger snapshot), when the server
/// judges.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Judged {
    /// Logical requests by how they were told apart (`request_id`, `guess`, ...).
    pub grouped_by: BTreeMap<String, u64>,
    /// Attempts grouped by a guess (method, path and body within the window).
    pub guessed_attempts: u64,
    /// The guess's window, in milliseconds.
    pub window_ms: u64,
    /// Logical requests that got a 2xx answer.
    pub succeeded: u64,
    /// From a logical request's first attempt to its first 2xx answer, percentiles in
    /// microseconds (`p50`, `p90`, `p99`, `p99.9`, `max`).
    pub latency_us: BTreeMap<String, u64>,
    /// Retries by what they followed.
    pub retries: Vec<RetryAfter>,
    /// Attempts that arrived while an earlier attempt of the same request was still
    /// unanswered (the client gave up waiting, or hedged): no gap is measured for them.
    pub overlapping: u64,
    pub retry_after: RetryAfterHonoured,
    /// Gaps before each attempt number.
    pub gaps: Vec<Gaps>,
    /// Logical requests remembered now, and forgotten to bound memory.
    pub tracked: u64,
    pub evicted: u64,
}

/// A logical request's last attempt. Small (40 bytes): the judge keeps up to `max_ids`
/// of them, times in microseconds since the caller's epoch.
#[derive(Debug, Clone)]
struct Entry {
    generation: u64,
    first_us: u64,
    /// When the last answer was given (valid once `answers` is set).
    answered_us: u64,
    /// The wait the last answer asked for, in milliseconds; [`NOT_ASKED`] for none.
    asked_ms: u32,
    /// What the last answer was.
    seen: Seen,
    attempts: u16,
    /// Attempts sent and not yet answered.
    unanswered: u8,
    flags: u8,
}

/// `asked_ms` of an answer that asked for no wait.
const NOT_ASKED: u32 = u32::MAX;
const ANSWERED: u8 = 1;
const SUCCEEDED: u8 = 2;
const SIDE_EFFECT: u8 = 4;
const KEYED: u8 = 8;

impl Entry {
    fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }

    /// The last answer: when, what, and the wait it asked for.
    fn answer(&self) -> Option<(Duration, Seen, Option<Duration>)> {
        self.has(ANSWERED).then(|| {
            (
                Duration::from_micros(self.answered_us),
                self.seen,
                (self.asked_ms != NOT_ASKED)
                    .then(|| Duration::from_millis(u64::from(self.asked_ms))),
            )
        })
    }
}

/// The logical request a fingerprint stands for now.
#[derive(Debug, Clone, Copy)]
struct Guess {
    generation: u64,
    /// Which logical request of this fingerprint (the id's suffix).
    number: u64,
    entry: u64,
}

/// The judge's tables and counters (behind the ledger's lock of its own).
#[derive(Debug)]
pub(super) struct Retries {
    judging: Judging,
    max: usize,
    ttl: Duration,
    keys: RandomState,
    entries: HashMap<u64, Entry>,
    order: VecDeque<(Duration, u64, u64)>,
    guesses: HashMap<u64, Guess>,
    guess_order: VecDeque<(Duration, u64, u64)>,
    generation: u64,
    grouped_by: BTreeMap<GroupedBy, u64>,
    guessed_attempts: u64,
    succeeded: u64,
    latency: Histogram<u64>,
    retries: BTreeMap<(Seen, bool, bool), u64>,
    overlapping: u64,
    retry_after: RetryAfterHonoured,
    gaps: Vec<Histogram<u64>>,
    evicted: u64,
}

fn histogram() -> Histogram<u64> {
    // 1 µs to an hour, three significant digits: about 40 KB each.
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("constant bounds are valid")
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

impl Retries {
    pub(super) fn new(judging: Judging, max: usize, ttl: Duration) -> Retries {
        Retries {
            retry_after: RetryAfterHonoured {
                tolerance_us: micros(judging.tolerance),
                ..RetryAfterHonoured::default()
            },
            judging,
            max,
            ttl,
            keys: RandomState::new(),
            entries: HashMap::new(),
            order: VecDeque::new(),
            guesses: HashMap::new(),
            guess_order: VecDeque::new(),
            generation: 0,
            grouped_by: BTreeMap::new(),
            guessed_attempts: 0,
            succeeded: 0,
            latency: histogram(),
            retries: BTreeMap::new(),
            overlapping: 0,
            gaps: (2..=MAX_GAP_ATTEMPT).map(|_| histogram()).collect(),
            evicted: 0,
        }
    }

    /// Forgets everything, keeping the configuration.
    pub(super) fn reset(&mut self) {
        *self = Retries::new(self.judging.clone(), self.max, self.ttl);
    }

    fn next_generation(&mut self) -> u64 {
        self.generation += 1;
        self.generation
    }

    /// Groups an arriving attempt into its logical request and judges it against the
    /// request's last attempt.
    pub(super) fn arrive(&mut self, arriving: Arriving<'_>, now: Duration) -> Grouped {
        self.evicted += expire(
            &mut self.order,
            &mut self.entries,
            now,
            self.ttl,
            self.max,
            |e| e.generation,
        );
        expire(
            &mut self.guess_order,
            &mut self.guesses,
            now,
            self.ttl,
            self.max,
            |g| g.generation,
        );
        let (id, by, entry) = match &arriving.claim {
            Claim::Named(by, _) => {
                let id = arriving.claim.id().unwrap_or_default();
                let entry = self.keys.hash_one(&id);
                (id, *by, entry)
            }
            Claim::Unnamed(fingerprint) => {
                self.guessed_attempts += 1;
                let (number, entry) = self.guess(*fingerprint, now);
                (
                    format!("guess-{fingerprint:016x}-{number}"),
                    GroupedBy::Guess,
                    entry,
                )
            }
        };
        let attempt = match self.entries.get(&entry).map(|e| e.generation) {
            Some(_) => self.retry(entry, &id, &arriving, now),
            None => {
                let generation = self.next_generation();
                self.entries.insert(
                    entry,
                    Entry {
                        generation,
                        first_us: micros(now),
                        answered_us: 0,
                        asked_ms: NOT_ASKED,
                        seen: Seen::Timeout,
                        attempts: 1,
                        unanswered: 1,
                        flags: if arriving.side_effect { SIDE_EFFECT } else { 0 }
                            | if arriving.keyed { KEYED } else { 0 },
                    },
                );
                self.order.push_back((now, generation, entry));
                *self.grouped_by.entry(by).or_default() += 1;
                1
            }
        };
        Grouped {
            id,
            attempt: arriving.stated_attempt.unwrap_or(attempt),
            by,
            entry,
        }
    }

    /// The logical request a fingerprint names now: the one it named last, if that one's
    /// last attempt was answered within the window (or is still unanswered), else a new one.
    fn guess(&mut self, fingerprint: u64, now: Duration) -> (u64, u64) {
        let window = self.judging.window;
        let current = self.guesses.get(&fingerprint).copied();
        if let Some(guess) = current
            && let Some(entry) = self.entries.get(&guess.entry)
        {
            let within = entry.unanswered > 0
                || entry
                    .answer()
                    .is_some_and(|(at, _, _)| now.saturating_sub(at) <= window);
            if within {
                return (guess.number, guess.entry);
            }
        }
        let number = current.map_or(1, |g| g.number + 1);
        let entry = self.keys.hash_one((fingerprint, number));
        let generation = self.next_generation();
        self.guesses.insert(
            fingerprint,
            Guess {
                generation,
                number,
                entry,
            },
        );
        self.guess_order.push_back((now, generation, fingerprint));
        (number, entry)
    }

    /// A later attempt of a known request: the gap since the last answer, whether it
    /// honoured `Retry-After`, and what it retried after. Returns its number as counted.
    fn retry(&mut self, key: u64, id: &str, arriving: &Arriving<'_>, now: Duration) -> u32 {
        let Some(entry) = self.entries.get_mut(&key) else {
            return 1;
        };
        entry.attempts = entry.attempts.saturating_add(1);
        let attempt = u32::from(entry.attempts);
        let (side_effect, keyed) = (
            arriving.side_effect || entry.has(SIDE_EFFECT),
            arriving.keyed && entry.has(KEYED),
        );
        let previous = if entry.unanswered > 0 {
            // The client stopped waiting for an answer it had not had: a timeout, as it
            // saw it, with no gap to measure.
            self.overlapping += 1;
            entry.unanswered = entry.unanswered.saturating_add(1);
            Seen::Timeout
        } else if let Some((at, seen, asked)) = entry.answer() {
            entry.unanswered = 1;
            let gap = now.saturating_sub(at);
            if asked.is_none() {
                // A wait the server asked for is judged as such, not as the client's
                // own backoff.
                let number = arriving.stated_attempt.unwrap_or(attempt);
                let slot = number.clamp(2, MAX_GAP_ATTEMPT) as usize - 2;
                let _ = self.gaps[slot].record(micros(gap).max(1));
            }
            if let Some(asked) = asked {
                let honoured = &mut self.retry_after;
                honoured.asked += 1;
                if gap + self.judging.tolerance >= asked {
                    honoured.honoured += 1;
                } else {
                    honoured.early += 1;
                    honoured.worst_early_us = honoured.worst_early_us.max(micros(asked - gap));
                    if honoured.examples.len() < EXAMPLES
                        && !honoured.examples.iter().any(|e| e == id)
                    {
                        honoured.examples.push(id.to_string());
                    }
                }
            }
            seen
        } else {
            entry.unanswered = 1;
            Seen::Timeout
        };
        *self
            .retries
            .entry((previous, side_effect, keyed))
            .or_default() += 1;
        attempt
    }

    /// An attempt of `entry` was answered (or its client gave up on it) at `now`.
    pub(super) fn answered(
        &mut self,
        entry: u64,
        now: Duration,
        seen: Seen,
        asked: Option<Duration>,
    ) {
        let Some(e) = self.entries.get_mut(&entry) else {
            // Forgotten since (TTL, cap, reset): nothing to judge it against.
            return;
        };
        e.unanswered = e.unanswered.saturating_sub(1);
        e.answered_us = micros(now);
        e.seen = seen;
        e.asked_ms = asked.map_or(NOT_ASKED, |a| {
            u32::try_from(a.as_millis()).unwrap_or(NOT_ASKED - 1)
        });
        e.flags |= ANSWERED;
        if seen.succeeded() && !e.has(SUCCEEDED) {
            e.flags |= SUCCEEDED;
            self.succeeded += 1;
            let _ = self
                .latency
                .record(micros(now).saturating_sub(e.first_us).max(1));
        }
    }

    pub(super) fn snapshot(&self) -> Judged {
        let at = |h: &Histogram<u64>, q: f64| {
            if h.is_empty() {
                0
            } else {
                h.value_at_quantile(q)
            }
        };
        let mut latency = BTreeMap::new();
        if !self.latency.is_empty() {
            for (name, q) in [("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p99.9", 0.999)] {
                latency.insert(name.to_string(), at(&self.latency, q));
            }
            latency.insert("max".to_string(), self.latency.max());
        }
        Judged {
            grouped_by: self
                .grouped_by
                .iter()
                .map(|(by, n)| (by.name().to_string(), *n))
                .collect(),
            guessed_attempts: self.guessed_attempts,
            window_ms: u64::try_from(self.judging.window.as_millis()).unwrap_or(u64::MAX),
            succeeded: self.succeeded,
            latency_us: latency,
            retries: self
                .retries
                .iter()
                .map(|(&(after, side_effect, keyed), &retries)| RetryAfter {
                    after: after.to_string(),
                    side_effect,
                    keyed,
                    retries,
                })
                .collect(),
            overlapping: self.overlapping,
            retry_after: self.retry_after.clone(),
            gaps: self
                .gaps
                .iter()
                .zip(2..)
                .filter(|(h, _)| !h.is_empty())
                .map(|(h, attempt)| Gaps {
                    attempt,
                    count: h.len(),
                    min_us: h.min(),
                    p10_us: at(h, 0.1),
                    p50_us: at(h, 0.5),
                    p90_us: at(h, 0.9),
                    p99_us: at(h, 0.99),
                    max_us: h.max(),
                })
                .collect(),
            tracked: self.entries.len() as u64,
            evicted: self.evicted,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(id: &str) -> Arriving<'_> {
        Arriving {
            claim: Claim::Named(GroupedBy::RequestId, id),
            stated_attempt: None,
            side_effect: false,
            keyed: false,
        }
    }

    #[test]
    fn memory_stays_bounded_by_the_cap_and_the_ttl() {
        let mut retries = Retries::new(Judging::default(), 100, Duration::from_secs(60));
        for i in 0..10_000 {
            let id = format!("r{i}");
            let now = Duration::from_millis(i);
            let grouped = retries.arrive(named(&id), now);
            retries.answered(grouped.entry, now, Seen::Status(200), None);
            let guess = retries.arrive(
                Arriving {
                    claim: Claim::Unnamed(i),
                    ..named("")
                },
                now,
            );
            retries.answered(guess.entry, now, Seen::Status(200), None);
        }
        assert!(retries.entries.len() <= 101, "{}", retries.entries.len());
        assert!(retries.guesses.len() <= 101, "{}", retries.guesses.len());
        let later = retries.arrive(named("late"), Duration::from_secs(3600));
        assert_eq!(later.attempt, 1);
        assert_eq!(retries.entries.len(), 1, "the TTL forgot the rest");
        assert_eq!(retries.snapshot().succeeded, 20_000);
    }

    #[test]
    fn latency_quantiles_come_from_the_histogram_up_to_p99_9() {
        let mut retries = Retries::new(Judging::default(), 2000, Duration::from_secs(60));
        // 1,000 requests answered 1 ms, 2 ms, ... 1,000 ms after they arrived.
        for i in 1..=1000u64 {
            let id = format!("r{i}");
            let grouped = retries.arrive(named(&id), Duration::ZERO);
            let answered = Duration::from_millis(i);
            retries.answered(grouped.entry, answered, Seen::Status(200), None);
        }
        let latency = retries.snapshot().latency_us;
        let near = |name: &str, ms: u64| {
            let us = latency[name];
            // The histogram keeps three significant digits.
            assert!(us.abs_diff(ms * 1000) <= ms, "{name}: {us} µs, not {ms} ms");
        };
        near("p50", 500);
        near("p90", 900);
        near("p99", 990);
        near("p99.9", 999);
        near("max", 1000);
    }

    #[test]
    fn attempts_are_counted_when_the_client_does_not_number_them() {
        let mut retries = Retries::new(Judging::default(), 100, Duration::from_secs(60));
        let first = retries.arrive(named("a"), Duration::ZERO);
        retries.answered(
            first.entry,
            Duration::from_millis(5),
            Seen::Status(503),
            None,
        );
        let second = retries.arrive(named("a"), Duration::from_millis(105));
        assert_eq!((first.attempt, second.attempt), (1, 2));
        // The client gave up on the second before its answer: the third overlaps it.
        let third = retries.arrive(named("a"), Duration::from_millis(2000));
        assert_eq!(third.attempt, 3);
        let judged = retries.snapshot();
        assert_eq!(judged.overlapping, 1);
        assert_eq!(judged.gaps.len(), 1);
        assert_eq!(judged.gaps[0].attempt, 2);
        assert!((99_000..=101_000).contains(&judged.gaps[0].p50_us));
        let after: Vec<_> = judged
            .retries
            .iter()
            .map(|r| (r.after.as_str(), r.retries))
            .collect();
        assert_eq!(after, [("status_503", 1), ("timeout", 1)]);
    }
}
