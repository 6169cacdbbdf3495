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

mod busiest;
mod fresh;

use super::group::{Claim, GroupedBy};
pub use crate::wire::Seen;
use busiest::Busiest;
pub use busiest::BusiestSecond;
pub use fresh::{FreshKeys, Split};
use fresh::{NAMED_WINDOWS, Named};

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
    /// Its method, path and query, and body, hashed: what an identical request shares.
    pub fingerprint: u64,
    /// The attempt number the client stated, if it did.
    pub stated_attempt: Option<u32>,
    /// POST or PATCH: a retry can run its side effect twice.
    pub side_effect: bool,
    /// The `Idempotency-Key` it carried.
    pub key: Option<&'a str>,
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
    /// It repeated its call under another `Idempotency-Key` or request id (see
    /// [`FreshKeys`]): a key that changes protects nothing.
    pub fresh_key: bool,
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
    /// Identical requests the window did not group, and why.
    pub split: Split,
    /// Retries under a fresh key or request id.
    pub fresh_keys: FreshKeys,
    /// The second with the most attempts per call that sent one in it.
    pub busiest_second: BusiestSecond,
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

/// A logical request's last attempt. Small (48 bytes): the judge keeps up to `max_ids`
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
    /// The second (from the caller's epoch, plus one; 0 for none) of its latest attempt.
    second: u32,
}

const _: () = assert!(std::mem::size_of::<Entry>() <= 48);

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

/// Names `id` among a snapshot's few examples, once, while there is room.
fn note_example(examples: &mut Vec<String>, id: &str) {
    if examples.len() < EXAMPLES && !examples.iter().any(|e| e == id) {
        examples.push(id.to_owned());
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
    named: HashMap<u64, Named>,
    named_order: VecDeque<(Duration, u64, u64)>,
    generation: u64,
    grouped_by: BTreeMap<GroupedBy, u64>,
    guessed_attempts: u64,
    split: Split,
    fresh_keys: FreshKeys,
    busiest: Busiest,
    succeeded: u64,
    latency: Histogram<u64>,
    retries: BTreeMap<(Seen, bool, bool, bool), u64>,
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
            named: HashMap::new(),
            named_order: VecDeque::new(),
            generation: 0,
            grouped_by: BTreeMap::new(),
            guessed_attempts: 0,
            split: Split::default(),
            fresh_keys: FreshKeys::default(),
            busiest: Busiest::default(),
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
        // A named call matters only while a fresh key could still repeat it: within the
        // window of its answers. Its id is kept whole (up to the longest value the server
        // accepts), so it is kept for less time and fewer of them than the entries are.
        expire(
            &mut self.named_order,
            &mut self.named,
            now,
            self.ttl
                .min(self.judging.window.saturating_mul(NAMED_WINDOWS)),
            (self.max / 4).max(1),
            |n| n.generation,
        );
        let (id, by, entry) = match &arriving.claim {
            Claim::Named(by, _) => {
                let id = arriving.claim.id().unwrap_or_default();
                let entry = self.keys.hash_one(&id);
                if !self.entries.contains_key(&entry)
                    && let Some((call, repeat)) = self.repeated_call(*by, &arriving, entry, now)
                {
                    return self.repeat(call, repeat, &arriving, entry, now);
                }
                (id, *by, entry)
            }
            Claim::Unnamed(fingerprint) => {
                self.guessed_attempts += 1;
                let (number, entry) = self.guess(*fingerprint, arriving.stated_attempt, now);
                (
                    format!("guess-{fingerprint:016x}-{number}"),
                    GroupedBy::Guess,
                    entry,
                )
            }
        };
        let attempt = match self.entries.get(&entry).map(|e| e.generation) {
            Some(_) => self.retry(entry, &id, &arriving, now, false),
            None => {
                let generation = self.next_generation();
                if arriving.side_effect && by.names_a_call() {
                    let named = self.next_generation();
                    self.named.insert(
                        arriving.fingerprint,
                        Named {
                            generation: named,
                            entry,
                            entry_generation: generation,
                            id: id.clone(),
                            key: arriving.key.map(|k| self.keys.hash_one(k)),
                            alias: None,
                        },
                    );
                    self.named_order
                        .push_back((now, named, arriving.fingerprint));
                }
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
                        second: 0,
                        flags: if arriving.side_effect { SIDE_EFFECT } else { 0 }
                            | if arriving.key.is_some() { KEYED } else { 0 },
                    },
                );
                self.order.push_back((now, generation, entry));
                *self.grouped_by.entry(by).or_default() += 1;
                1
            }
        };
        self.busiest.attempt(&mut self.entries, entry, now);
        Grouped {
            id,
            attempt: arriving.stated_attempt.unwrap_or(attempt),
            by,
            entry,
        }
    }

    /// The logical request a fingerprint names now: the one it named last, if that one's
    /// last attempt was answered within the window (or is still unanswered) and neither
    /// succeeded nor is contradicted by the client's own attempt number, else a new one.
    fn guess(&mut self, fingerprint: u64, stated: Option<u32>, now: Duration) -> (u64, u64) {
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
                let first = stated.is_none_or(|n| n == 1);
                if entry.has(SUCCEEDED) && first {
                    self.split.after_success += 1;
                } else if stated == Some(1) {
                    self.split.stated_first += 1;
                } else {
                    return (guess.number, guess.entry);
                }
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
    fn retry(
        &mut self,
        key: u64,
        id: &str,
        arriving: &Arriving<'_>,
        now: Duration,
        fresh_key: bool,
    ) -> u32 {
        let Some(entry) = self.entries.get_mut(&key) else {
            return 1;
        };
        entry.attempts = entry.attempts.saturating_add(1);
        let attempt = u32::from(entry.attempts);
        let (side_effect, keyed) = (
            arriving.side_effect || entry.has(SIDE_EFFECT),
            arriving.key.is_some() && entry.has(KEYED),
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
                    note_example(&mut honoured.examples, id);
                }
            }
            seen
        } else {
            entry.unanswered = 1;
            Seen::Timeout
        };
        *self
            .retries
            .entry((previous, side_effect, keyed, fresh_key))
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
            split: self.split.clone(),
            fresh_keys: self.fresh_keys.clone(),
            busiest_second: self.busiest.peak(),
            succeeded: self.succeeded,
            latency_us: latency,
            retries: self
                .retries
                .iter()
                .map(
                    |(&(after, side_effect, keyed, fresh_key), &retries)| RetryAfter {
                        after: after.to_string(),
                        side_effect,
                        keyed,
                        fresh_key,
                        retries,
                    },
                )
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
            fingerprint: 0,
            stated_attempt: None,
            side_effect: false,
            key: None,
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
    fn post<'a>(by: GroupedBy, name: &'a str) -> Arriving<'a> {
        Arriving {
            claim: Claim::Named(by, name),
            fingerprint: 7,
            side_effect: true,
            key: (by == GroupedBy::IdempotencyKey).then_some(name),
            ..named("")
        }
    }

    fn unnamed(stated_attempt: Option<u32>) -> Arriving<'static> {
        Arriving {
            claim: Claim::Unnamed(7),
            fingerprint: 7,
            side_effect: true,
            stated_attempt,
            ..named("")
        }
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// The mistake payment APIs warn about: a key minted per attempt. Each new key after
    /// a failed answer is the failed call's retry, not a call of its own.
    #[test]
    fn a_post_repeated_under_a_fresh_key_after_a_failure_is_its_calls_retry() {
        let mut retries = Retries::new(Judging::default(), 100, Duration::from_secs(60));
        let first = retries.arrive(post(GroupedBy::IdempotencyKey, "k1"), ms(0));
        retries.answered(first.entry, ms(1), Seen::Close, None);
        let second = retries.arrive(post(GroupedBy::IdempotencyKey, "k2"), ms(100));
        assert_eq!(
            (second.id.as_str(), second.attempt, second.by),
            ("idempotency-key:k1", 2, GroupedBy::FreshKey)
        );
        retries.answered(second.entry, ms(101), Seen::Status(503), None);
        // Another fresh key: still the first call's.
        let third = retries.arrive(post(GroupedBy::IdempotencyKey, "k3"), ms(300));
        assert_eq!(
            (third.id.as_str(), third.attempt),
            ("idempotency-key:k1", 3)
        );
        retries.answered(third.entry, ms(301), Seen::Status(201), None);
        // The call succeeded: a fourth key is a new call.
        let fourth = retries.arrive(post(GroupedBy::IdempotencyKey, "k4"), ms(400));
        assert_eq!(
            (fourth.id.as_str(), fourth.by),
            ("idempotency-key:k4", GroupedBy::IdempotencyKey)
        );
        let judged = retries.snapshot();
        assert_eq!(judged.fresh_keys.retries, 2);
        assert_eq!(judged.fresh_keys.examples, ["idempotency-key:k1"]);
        assert_eq!(judged.grouped_by["idempotency_key"], 2);
        let fresh: Vec<_> = judged
            .retries
            .iter()
            .map(|r| (r.after.as_str(), r.keyed, r.fresh_key, r.retries))
            .collect();
        assert_eq!(
            fresh,
            [("status_503", true, true, 1), ("close", true, true, 1)]
        );
    }

    #[test]
    fn a_fresh_request_id_on_a_post_is_a_retry_but_not_on_a_get_or_an_sdk_invocation() {
        let mut retries = Retries::new(Judging::default(), 100, Duration::from_secs(60));
        let first = retries.arrive(post(GroupedBy::RequestId, "r1"), ms(0));
        retries.answered(first.entry, ms(1), Seen::Status(503), None);
        let again = retries.arrive(post(GroupedBy::RequestId, "r2"), ms(50));
        assert_eq!((again.id.as_str(), again.by), ("r1", GroupedBy::FreshKey));
        let judged = retries.snapshot();
        assert_eq!(
            (judged.retries[0].keyed, judged.retries[0].fresh_key),
            (false, true),
            "unkeyed: no_retry_of_non_idempotent's to judge"
        );

        let mut retries = Retries::new(Judging::default(), 100, Duration::from_secs(60));
        let get = |name| Arriving {
            side_effect: false,
            ..post(GroupedBy::RequestId, name)
        };
        let first = retries.arrive(get("g1"), ms(0));
        retries.answered(first.entry, ms(1), Seen::Status(503), None);
        assert_eq!(retries.arrive(get("g2"), ms(50)).by, GroupedBy::RequestId);
        let first = retries.arrive(post(GroupedBy::AwsInvocationId, "a1"), ms(100));
        retries.answered(first.entry, ms(101), Seen::Status(503), None);
        let next = retries.arrive(post(GroupedBy::AwsInvocationId, "a2"), ms(150));
        assert_eq!(
            next.by,
            GroupedBy::AwsInvocationId,
            "a new invocation is a new call"
        );
        assert_eq!(retries.snapshot().fresh_keys.retries, 0);
    }

    #[test]
    fn two_identical_calls_in_flight_or_apart_beyond_the_window_are_two_calls() {
        let mut retries = Retries::new(Judging::default(), 100, Duration::from_secs(60));
        let first = retries.arrive(post(GroupedBy::IdempotencyKey, "k1"), ms(0));
        let second = retries.arrive(post(GroupedBy::IdempotencyKey, "k2"), ms(1));
        assert_eq!(
            second.by,
            GroupedBy::IdempotencyKey,
            "the first is still awaited"
        );
        retries.answered(first.entry, ms(2), Seen::Status(503), None);
        retries.answered(second.entry, ms(2), Seen::Status(503), None);
        let late = retries.arrive(post(GroupedBy::IdempotencyKey, "k3"), ms(20_000));
        assert_eq!(late.by, GroupedBy::IdempotencyKey, "beyond the 10 s window");
        assert_eq!(retries.snapshot().fresh_keys.retries, 0);
    }

    /// Six identical orders placed one after another, each answered 200: six calls, where
    /// the window alone took them for one call retried five times.
    #[test]
    fn an_identical_request_after_a_success_or_stated_as_a_first_attempt_is_a_new_call() {
        let mut retries = Retries::new(Judging::default(), 100, Duration::from_secs(60));
        let mut ids = Vec::new();
        for n in 0..6 {
            let order = retries.arrive(unnamed(None), ms(n * 10));
            retries.answered(order.entry, ms(n * 10 + 1), Seen::Status(200), None);
            ids.push(order.id);
        }
        ids.dedup();
        assert_eq!(ids.len(), 6, "{ids:?}");
        let judged = retries.snapshot();
        assert_eq!(judged.grouped_by["guess"], 6);
        assert_eq!(judged.split.after_success, 5);
        assert!(judged.retries.is_empty());

        // A failure is retried by the guess, unless the client says it is a first attempt.
        let failed = retries.arrive(unnamed(None), ms(100));
        retries.answered(failed.entry, ms(101), Seen::Status(503), None);
        let retry = retries.arrive(unnamed(Some(2)), ms(200));
        assert_eq!(retry.id, failed.id);
        retries.answered(retry.entry, ms(201), Seen::Status(503), None);
        let first = retries.arrive(unnamed(Some(1)), ms(300));
        assert_ne!(first.id, failed.id);
        assert_eq!(retries.snapshot().split.stated_first, 1);
    }
    /// Every call makes two attempts 600 ms apart, one call every 400 ms: each second
    /// holds retries of calls begun the second before, and still two attempts per call.
    #[test]
    fn the_busiest_second_counts_attempts_per_call_that_sent_one_in_it() {
        let mut retries = Retries::new(Judging::default(), 100, Duration::from_secs(60));
        let mut attempts: Vec<(u64, String, Seen)> = (0..10u64)
            .flat_map(|n| {
                [
                    (n * 400, format!("c{n}"), Seen::Status(503)),
                    (n * 400 + 600, format!("c{n}"), Seen::Status(200)),
                ]
            })
            .collect();
        attempts.sort();
        for (at, id, seen) in &attempts {
            let grouped = retries.arrive(named(id), ms(*at));
            retries.answered(grouped.entry, ms(*at + 1), *seen, None);
        }
        let busiest = retries.snapshot().busiest_second;
        // The old figure, attempts over calls begun in the second, read 2.5 (5 over 2).
        assert!(busiest.ratio() <= 2.0, "{busiest:?}");
        assert!(busiest.calls > 0, "{busiest:?}");
    }
    /// The cases a review found the first version of the fresh-key rule wrong on.
    #[test]
    fn a_new_key_after_a_permanent_answer_is_a_new_call_and_a_fresh_id_over_one_key_is_not_fresh() {
        // A 400 is not retried by a correct client: its next identical call is a call.
        let mut retries = Retries::new(Judging::default(), 1000, Duration::from_secs(60));
        let first = retries.arrive(post(GroupedBy::IdempotencyKey, "k1"), ms(0));
        retries.answered(first.entry, ms(1), Seen::Status(400), None);
        let next = retries.arrive(post(GroupedBy::IdempotencyKey, "k2"), ms(50));
        assert_eq!(
            (next.id.as_str(), next.by),
            ("idempotency-key:k2", GroupedBy::IdempotencyKey)
        );

        // A request id minted per attempt (tracing middleware inside the retry loop) over
        // one Idempotency-Key: an ordinary keyed retry of the call.
        let mut retries = Retries::new(Judging::default(), 1000, Duration::from_secs(60));
        let traced = |id| Arriving {
            key: Some("pay-1"),
            ..post(GroupedBy::RequestId, id)
        };
        let first = retries.arrive(traced("trace-1"), ms(0));
        retries.answered(first.entry, ms(1), Seen::Status(503), None);
        let again = retries.arrive(traced("trace-2"), ms(100));
        assert_eq!((again.id.as_str(), again.attempt), ("trace-1", 2));
        let judged = retries.snapshot();
        assert_eq!(judged.fresh_keys.retries, 0);
        assert_eq!(
            (judged.retries[0].keyed, judged.retries[0].fresh_key),
            (true, false)
        );
    }

    #[test]
    fn a_fresh_key_resent_is_its_retry_not_another_fresh_key() {
        // The application retries under k2 after the SDK gave up on k1; the SDK then
        // retries k2 under k2.
        let mut retries = Retries::new(Judging::default(), 1000, Duration::from_secs(60));
        let first = retries.arrive(post(GroupedBy::IdempotencyKey, "k1"), ms(0));
        retries.answered(first.entry, ms(1), Seen::Status(503), None);
        let fresh = retries.arrive(post(GroupedBy::IdempotencyKey, "k2"), ms(100));
        retries.answered(fresh.entry, ms(101), Seen::Status(503), None);
        let resent = retries.arrive(post(GroupedBy::IdempotencyKey, "k2"), ms(200));
        assert_eq!((fresh.by, fresh.attempt), (GroupedBy::FreshKey, 2));
        assert_eq!(
            (resent.id.as_str(), resent.by, resent.attempt),
            ("idempotency-key:k1", GroupedBy::IdempotencyKey, 3)
        );
        assert_eq!(retries.snapshot().fresh_keys.retries, 1);

        // The rule holds with the smallest caps.
        let mut retries = Retries::new(Judging::default(), 3, Duration::from_secs(60));
        let first = retries.arrive(post(GroupedBy::IdempotencyKey, "k1"), ms(0));
        retries.answered(first.entry, ms(1), Seen::Status(503), None);
        let fresh = retries.arrive(post(GroupedBy::IdempotencyKey, "k2"), ms(100));
        assert_eq!(fresh.by, GroupedBy::FreshKey);
    }

    /// gRPC errors travel as HTTP 200 with `grpc-status` trailers: a retry the client
    /// numbers 2 after one stays a retry.
    #[test]
    fn a_stated_retry_after_a_2xx_stays_a_retry() {
        let mut retries = Retries::new(Judging::default(), 1000, Duration::from_secs(60));
        let call = retries.arrive(unnamed(Some(1)), ms(0));
        retries.answered(call.entry, ms(1), Seen::Status(200), None);
        let retry = retries.arrive(unnamed(Some(2)), ms(50));
        assert_eq!(retry.id, call.id);
        assert_eq!(retries.snapshot().split.after_success, 0);
    }

    /// Attempts are stamped on arrival and grouped once their body is read, so they reach
    /// the judge a little out of order: a late one joins the second under way instead of
    /// starting a fragment of the second before (which read 6 attempts of one call).
    #[test]
    fn attempts_grouped_out_of_order_do_not_inflate_the_busiest_second() {
        let mut retries = Retries::new(Judging::default(), 1000, Duration::from_secs(60));
        let ids = ["x1", "x2", "x3", "x4", "x5"];
        for id in ids {
            let g = retries.arrive(named(id), ms(900));
            retries.answered(g.entry, ms(901), Seen::Status(503), None);
        }
        let g = retries.arrive(named("z"), ms(1001));
        retries.answered(g.entry, ms(1002), Seen::Status(200), None);
        for id in ids {
            let g = retries.arrive(named(id), ms(999));
            retries.answered(g.entry, ms(1003), Seen::Status(200), None);
        }
        let busiest = retries.snapshot().busiest_second;
        assert!(busiest.ratio() <= 2.0, "{busiest:?}");
    }
}
