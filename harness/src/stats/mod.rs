//! What a run measures, in memory that does not grow with the number of requests.
//!
//! Histograms (hdrhistogram, mergeable) for latencies, one row of counters per second for
//! the time series, totals by outcome and give-up reason, and a bounded sample of request
//! ids for each violation. Nothing per request is kept once the request completes, so a
//! long run costs what a short one does plus one row a second.

use std::collections::BTreeMap;
use std::time::Duration;

use chaos_policy::{BreakerState, GiveUp, Outcome, Verdict, Violation};
use hdrhistogram::Histogram;

mod memory;
mod run;
mod saved;
pub mod v2;
mod waves;

pub use memory::peak_resident_kib;
pub use run::PolicyRun;
pub use saved::{SavedError, SavedRecorder, SavedSecond, decode_histogram, encode_histogram};
pub use waves::{MAX_WAVE_BUCKETS, WAVE_BUCKET, Waves, synchrony};

/// How many example ids each violation keeps for the report.
pub const SAMPLE_IDS: usize = 5;

/// One second of the run. Arrivals, drops and final results count in the second the
/// logical request was scheduled; attempts and retries in the second they were sent.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Second {
    /// Arrivals, sent or dropped.
    pub offered: u64,
    /// Attempts of the logical requests scheduled in this second, whenever sent: their
    /// ratio to `offered - dropped` is the amplification of this second's traffic.
    pub scheduled_attempts: u64,
    /// Logical requests scheduled in this second still running when the drain ended.
    pub unfinished: u64,
    pub dropped: u64,
    pub attempts: u64,
    pub retries: u64,
    pub succeeded: u64,
    /// Logical requests that gave up, or were still running when the drain ended.
    pub failed: u64,
    pub budget_tokens: Option<f64>,
    pub breaker: Option<BreakerState>,
}

impl Second {
    /// The arrivals of this second whose fate is known, and how many of them succeeded:
    /// a dropped arrival failed; a request cut off by the drain's end has no verdict and
    /// says nothing. The one definition of success behind `recovery_s`.
    pub fn settled(&self) -> (u64, u64) {
        let gave_up = self.failed - self.unfinished;
        (self.succeeded, self.succeeded + gave_up + self.dropped)
    }
}

/// Ids of the requests that broke an invariant, bounded.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Sampled {
    pub count: u64,
    #[serde(deserialize_with = "crate::bounded::vec::<_, _, SAMPLE_IDS>")]
    pub examples: Vec<String>,
}

impl Sampled {
    /// Adds what `other` counted and empties it; its examples fill the free places.
    pub fn absorb(&mut self, other: &mut Sampled) {
        self.count += std::mem::take(&mut other.count);
        for id in other.examples.drain(..) {
            if self.examples.len() < SAMPLE_IDS && !self.examples.contains(&id) {
                self.examples.push(id);
            }
        }
    }

    pub fn add(&mut self, id: &str) {
        self.count += 1;
        if self.examples.len() < SAMPLE_IDS && !self.examples.iter().any(|e| e == id) {
            self.examples.push(id.to_owned());
        }
    }
}

/// Whether any attempt of a logical request reached the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Reached {
    /// None did: the breaker refused it, every connect failed, or it was cut first.
    No,
    /// Only an attempt abandoned on the wire at the run's end, which the server may not
    /// have read.
    Maybe,
    /// An attempt was answered, or failed after it connected.
    Yes,
}

impl Reached {
    /// What one attempt's outcome says of its logical request reaching the server, joined
    /// with what its earlier attempts said. A failed connect or a stream above a GOAWAY's
    /// last-stream-id never reached it; a refused stream may have reached the server's
    /// handler (a scripted `refuse`, which the ledger counts) or not (an HTTP/2 layer
    /// over its stream limit): the ledger may count it either way. So may a reset that
    /// does not say it came after the request was written: on HTTP/2 a reset ends every
    /// stream of the connection, and a stream whose headers were still in the server's
    /// buffers never reached its handler.
    pub fn after(self, outcome: chaos_policy::Outcome) -> Reached {
        use chaos_policy::{Outcome, ResetPhase, Unprocessed};
        let this = match outcome {
            Outcome::Unprocessed(Unprocessed::RefusedStream)
            | Outcome::Reset(ResetPhase::Unknown | ResetPhase::BeforeWrite) => Reached::Maybe,
            o if o.proves_unsent() => Reached::No,
            _ => Reached::Yes,
        };
        self.max(this)
    }
}

/// Counters of a policy's run. `logical` counts the arrivals that were sent; with
/// `dropped`, they make up the offered load.
#[derive(Debug, Clone)]
pub struct Recorder {
    /// Logical requests, from scheduled time to final outcome, in microseconds.
    pub latency: Histogram<u64>,
    /// Single attempts, from send to outcome, in microseconds.
    pub attempt_latency: Histogram<u64>,
    /// How late each arrival was dispatched after its scheduled time, in microseconds.
    pub lag: Histogram<u64>,
    /// How long attempts waited for one of the client's connections, in microseconds:
    /// recorded only under `load.max_connections`.
    pub connection_wait: Histogram<u64>,
    /// Attempts whose timeout ran out while they waited for a connection (in `attempts`,
    /// as `connect_timeout`s).
    pub connection_wait_timeouts: u64,
    /// Over HTTP/2: attempts handed to a connection with every stream the server allows
    /// taken, which waited in the client for one (live runs only).
    pub streams_waited: u64,
    /// The connections the client opened (live runs only: the simulator has none).
    pub connects: Option<Connects>,
    pub series: Vec<Second>,
    pub logical: u64,
    pub dropped: u64,
    pub succeeded: u64,
    pub failed: u64,
    /// Logical requests still running when the drain ended.
    pub unfinished: u64,
    /// Attempts stopped (drain's end, interruption) before they left the process: not
    /// attempts, and not in `attempts`.
    pub cut: u64,
    /// Attempts on the wire, unanswered, when the run stopped: counted in `attempts`, and
    /// the server may not have read them yet.
    pub abandoned: u64,
    /// Attempts that left the process.
    pub attempts: u64,
    /// Logical requests that reached the server, surely and perhaps: the ledger's count of
    /// logical requests lies between `reached.0` and `reached.0 + reached.1`.
    pub reached: (u64, u64),
    pub retries: u64,
    pub outcomes: BTreeMap<Outcome, u64>,
    pub give_ups: BTreeMap<GiveUp, u64>,
    /// The outcomes of retries alone (attempts after a backoff).
    pub retry_outcomes: BTreeMap<Outcome, u64>,
    pub retried_permanent: Sampled,
    pub retried_non_idempotent: Sampled,
    /// When the last attempt was sent.
    pub last_send: Duration,
    /// Attempts per 50 ms across the fault window; `None` without a window.
    pub waves: Option<Waves>,
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("constant bounds are valid")
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros())
        .unwrap_or(u64::MAX)
        .clamp(1, 3_600_000_000)
}

/// The connections a live client opened: how many, and the most in any one second of the
/// run (a load generator that connects thousands of times a second measures itself).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Connects {
    pub opened: u64,
    pub peak_per_second: u64,
}

impl Default for Recorder {
    fn default() -> Recorder {
        Recorder::with_histograms([histogram(), histogram(), histogram(), histogram()])
    }
}

impl Recorder {
    /// An empty recorder around these (empty) histograms: latency, attempt latency, lag
    /// and connection wait.
    fn with_histograms(histograms: [Histogram<u64>; 4]) -> Recorder {
        let [latency, attempt_latency, lag, connection_wait] = histograms;
        Recorder {
            latency,
            attempt_latency,
            lag,
            connection_wait,
            connection_wait_timeouts: 0,
            streams_waited: 0,
            connects: None,
            series: Vec::new(),
            logical: 0,
            dropped: 0,
            succeeded: 0,
            failed: 0,
            unfinished: 0,
            cut: 0,
            abandoned: 0,
            attempts: 0,
            reached: (0, 0),
            retries: 0,
            outcomes: BTreeMap::new(),
            give_ups: GiveUp::ALL.iter().map(|g| (*g, 0)).collect(),
            retry_outcomes: BTreeMap::new(),
            retried_permanent: Sampled::default(),
            retried_non_idempotent: Sampled::default(),
            last_send: Duration::ZERO,
            waves: None,
        }
    }

    /// A recorder that also counts attempts per 50 ms across `fault_window`.
    pub fn new(fault_window: Option<(Duration, Duration)>) -> Recorder {
        Recorder {
            waves: fault_window.map(|(from, until)| Waves::new(from, until)),
            ..Recorder::default()
        }
    }

    /// This recorder emptied, as [`Recorder::new`] makes one, its histograms (~190 KB
    /// each) kept rather than made again.
    pub fn renewed(self, fault_window: Option<(Duration, Duration)>) -> Recorder {
        let mut histograms = [
            self.latency,
            self.attempt_latency,
            self.lag,
            self.connection_wait,
        ];
        for h in &mut histograms {
            h.reset();
        }
        Recorder {
            waves: fault_window.map(|(from, until)| Waves::new(from, until)),
            ..Recorder::with_histograms(histograms)
        }
    }

    /// Arrivals, sent or dropped.
    pub fn offered(&self) -> u64 {
        self.logical + self.dropped
    }

    pub fn second(&mut self, at: Duration) -> &mut Second {
        let i = usize::try_from(at.as_secs())
            .unwrap_or(usize::MAX)
            .min(1 << 20);
        if self.series.len() <= i {
            self.series.resize(i + 1, Second::default());
        }
        &mut self.series[i]
    }

    pub fn arrived(&mut self, scheduled: Duration, lag: Duration) {
        self.logical += 1;
        self.second(scheduled).offered += 1;
        let _ = self.lag.record(micros(lag));
    }

    pub fn dropped(&mut self, scheduled: Duration) {
        self.dropped += 1;
        let s = self.second(scheduled);
        s.offered += 1;
        s.dropped += 1;
    }

    /// An attempt that left the process at `now`, recorded once it is answered or
    /// abandoned: an attempt stopped before it left is [`Recorder::cut`] instead.
    pub fn sent(
        &mut self,
        now: Duration,
        scheduled: Duration,
        retry: bool,
        id: &str,
        violations: impl Iterator<Item = Violation>,
    ) {
        self.attempts += 1;
        self.last_send = self.last_send.max(now);
        if retry && let Some(waves) = &mut self.waves {
            waves.record(now);
        }
        self.second(scheduled).scheduled_attempts += 1;
        let s = self.second(now);
        s.attempts += 1;
        if retry {
            s.retries += 1;
            self.retries += 1;
        }
        for v in violations {
            match v {
                Violation::RetriedPermanent => self.retried_permanent.add(id),
                Violation::RetriedNonIdempotent => self.retried_non_idempotent.add(id),
            }
        }
    }

    pub fn attempt_done(&mut self, outcome: Outcome, took: Duration, retry: bool) {
        let _ = self.attempt_latency.record(micros(took));
        *self.outcomes.entry(outcome).or_insert(0) += 1;
        if retry {
            *self.retry_outcomes.entry(outcome).or_insert(0) += 1;
        }
    }

    /// Retries that succeeded: with the retries answered, the success rate after a
    /// backoff.
    pub fn retries_succeeded(&self) -> u64 {
        self.retry_outcomes
            .iter()
            .filter(|(o, _)| o.is_success())
            .map(|(_, n)| n)
            .sum()
    }

    /// How far a logical request got, once it is over.
    pub fn reached(&mut self, reached: Reached) {
        match reached {
            Reached::No => {}
            Reached::Maybe => self.reached.1 += 1,
            Reached::Yes => self.reached.0 += 1,
        }
    }

    /// An attempt that waited `wait` for one of the client's connections (under a cap),
    /// and got one or ran out of time.
    pub fn waited(&mut self, wait: Duration, timed_out: bool) {
        // Most attempts under a cap do not wait: the histogram's floor holds them.
        let _ = self.connection_wait.record(micros(wait));
        self.connection_wait_timeouts += u64::from(timed_out);
    }

    /// An attempt stopped before it left the process.
    pub fn cut(&mut self) {
        self.cut += 1;
    }

    pub fn finished(&mut self, scheduled: Duration, latency: Duration, verdict: &Verdict) {
        let _ = self.latency.record(micros(latency));
        match verdict {
            Verdict::Succeeded { .. } => {
                self.succeeded += 1;
                self.second(scheduled).succeeded += 1;
            }
            Verdict::GaveUp { reason, .. } => {
                self.failed += 1;
                *self.give_ups.entry(*reason).or_insert(0) += 1;
                self.second(scheduled).failed += 1;
            }
        }
    }

    /// A logical request stopped before its verdict, after running `ran`: that time is a
    /// lower bound of its latency, recorded so a hung tail cannot vanish from the
    /// percentiles.
    pub fn unfinished(&mut self, scheduled: Duration, ran: Duration) {
        self.unfinished += 1;
        self.failed += 1;
        let _ = self.latency.record(micros(ran));
        let s = self.second(scheduled);
        s.failed += 1;
        s.unfinished += 1;
    }

    /// Adds everything `other` counted to this recorder and empties `other` (keeping its
    /// allocations), so a recorder per worker thread can be folded into the run's one. The
    /// result is exactly what one recorder fed every event would hold (histograms merge
    /// exactly), but for which ids a [`Sampled`] keeps as examples.
    pub fn absorb(&mut self, other: &mut Recorder) {
        for (mine, theirs) in [
            (&mut self.latency, &mut other.latency),
            (&mut self.attempt_latency, &mut other.attempt_latency),
            (&mut self.lag, &mut other.lag),
            (&mut self.connection_wait, &mut other.connection_wait),
        ] {
            // An empty one is skipped: adding and resetting walk every bucket, and most
            // of a run's recorders are idle in most seconds.
            if !theirs.is_empty() {
                // Same bounds on both sides: adding cannot fail.
                let _ = mine.add(&*theirs);
                theirs.reset();
            }
        }
        if let Some(connects) = other.connects.take() {
            self.connects = Some(connects);
        }
        if self.series.len() < other.series.len() {
            self.series.resize(other.series.len(), Second::default());
        }
        for (mine, theirs) in self.series.iter_mut().zip(other.series.drain(..)) {
            mine.offered += theirs.offered;
            mine.scheduled_attempts += theirs.scheduled_attempts;
            mine.unfinished += theirs.unfinished;
            mine.dropped += theirs.dropped;
            mine.attempts += theirs.attempts;
            mine.retries += theirs.retries;
            mine.succeeded += theirs.succeeded;
            mine.failed += theirs.failed;
        }
        for (mine, theirs) in [
            (&mut self.logical, &mut other.logical),
            (&mut self.dropped, &mut other.dropped),
            (&mut self.succeeded, &mut other.succeeded),
            (&mut self.failed, &mut other.failed),
            (&mut self.unfinished, &mut other.unfinished),
            (&mut self.cut, &mut other.cut),
            (&mut self.abandoned, &mut other.abandoned),
            (&mut self.attempts, &mut other.attempts),
            (&mut self.reached.0, &mut other.reached.0),
            (&mut self.reached.1, &mut other.reached.1),
            (&mut self.retries, &mut other.retries),
            (
                &mut self.connection_wait_timeouts,
                &mut other.connection_wait_timeouts,
            ),
            (&mut self.streams_waited, &mut other.streams_waited),
        ] {
            *mine += std::mem::take(theirs);
        }
        for (mine, theirs) in [
            (&mut self.outcomes, &mut other.outcomes),
            (&mut self.retry_outcomes, &mut other.retry_outcomes),
        ] {
            for (outcome, n) in std::mem::take(theirs) {
                *mine.entry(outcome).or_insert(0) += n;
            }
        }
        for (reason, n) in &mut other.give_ups {
            *self.give_ups.entry(*reason).or_insert(0) += std::mem::take(n);
        }
        for (mine, theirs) in [
            (&mut self.retried_permanent, &mut other.retried_permanent),
            (
                &mut self.retried_non_idempotent,
                &mut other.retried_non_idempotent,
            ),
        ] {
            mine.absorb(theirs);
        }
        self.last_send = self.last_send.max(std::mem::take(&mut other.last_send));
        if let (Some(mine), Some(theirs)) = (&mut self.waves, &mut other.waves) {
            for (m, t) in mine.buckets.iter_mut().zip(&mut theirs.buckets) {
                *m += std::mem::take(t);
            }
        }
    }

    pub fn sample_state(
        &mut self,
        at: Duration,
        budget: Option<f64>,
        breaker: Option<BreakerState>,
    ) {
        let s = self.second(at);
        s.budget_tokens = budget;
        s.breaker = breaker;
    }
}

/// The `q` quantile of a histogram of microseconds, in milliseconds.
pub fn quantile_ms(h: &Histogram<u64>, q: f64) -> f64 {
    if h.is_empty() {
        0.0
    } else {
        h.value_at_quantile(q) as f64 / 1000.0
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use chaos_policy::{GiveUp, Outcome, Verdict, Violation};

    use super::{MAX_WAVE_BUCKETS, Reached, Recorder, SAMPLE_IDS};

    #[test]
    fn counts_land_in_their_seconds_and_samples_stay_bounded() {
        let mut r = Recorder::default();
        r.arrived(Duration::from_millis(1500), Duration::ZERO);
        r.dropped(Duration::from_millis(2500));
        for i in 0..20 {
            r.sent(
                Duration::from_millis(2100),
                Duration::from_millis(1500),
                true,
                &format!("id{i}"),
                [Violation::RetriedPermanent].into_iter(),
            );
        }
        r.attempt_done(Outcome::Status(503), Duration::from_millis(3), false);
        r.attempt_done(Outcome::AttemptTimeout, Duration::from_millis(3), true);
        r.attempt_done(Outcome::Status(200), Duration::from_millis(3), true);
        assert_eq!(r.retries_succeeded(), 1);
        assert_eq!(r.retry_outcomes.values().sum::<u64>(), 2);
        r.finished(
            Duration::from_millis(1500),
            Duration::from_millis(700),
            &Verdict::GaveUp {
                reason: GiveUp::MaxAttempts,
                attempts: 3,
                last: None,
            },
        );
        assert_eq!(r.series.len(), 3);
        assert_eq!((r.series[1].offered, r.series[1].failed), (1, 1));
        assert_eq!(
            (
                r.series[2].offered,
                r.series[2].dropped,
                r.series[2].retries
            ),
            (1, 1, 20)
        );
        assert_eq!(r.retried_permanent.count, 20);
        assert_eq!(r.retried_permanent.examples.len(), SAMPLE_IDS);
        assert_eq!(r.outcomes[&Outcome::Status(503)], 1);
        assert_eq!(r.outcomes[&Outcome::AttemptTimeout], 1);
        assert_eq!(r.give_ups[&GiveUp::MaxAttempts], 1);
        assert_eq!(
            r.series[1].scheduled_attempts, 20,
            "attempts count in their request's second too"
        );
        r.unfinished(Duration::from_millis(2500), Duration::from_secs(9));
        assert_eq!((r.series[2].failed, r.series[2].unfinished), (1, 1));
        assert!(
            r.latency.max() >= 9_000_000,
            "a cut-off request still counts its latency"
        );
    }

    /// Feeds one recorder a fixed mix of events, as a worker would.
    fn feed(r: &mut Recorder, salt: u64) {
        for i in 0..50u64 {
            let at = ms((i * 97 + salt * 31) % 4000);
            r.arrived(at, ms(i % 3));
            r.sent(
                at,
                at,
                i % 4 == 1,
                &format!("id{salt}-{i}"),
                (i % 7 == 0)
                    .then_some(Violation::RetriedPermanent)
                    .into_iter(),
            );
            r.waited(ms(i % 4), i % 13 == 0);
            r.attempt_done(
                Outcome::Status(if i % 5 == 0 { 503 } else { 200 }),
                ms(i),
                i % 4 == 1,
            );
            if i % 9 == 0 {
                r.dropped(at);
            }
            if i % 11 == 0 {
                r.unfinished(at, ms(i * 10));
            } else {
                let verdict = if i % 5 == 0 {
                    Verdict::GaveUp {
                        reason: GiveUp::BudgetExhausted,
                        attempts: 1,
                        last: None,
                    }
                } else {
                    Verdict::Succeeded { attempts: 1 }
                };
                r.finished(at, ms(i + salt), &verdict);
            }
            r.reached(if i % 3 == 0 {
                Reached::Maybe
            } else {
                Reached::Yes
            });
        }
        r.cut();
        r.abandoned += salt;
    }

    #[test]
    fn absorbing_recorders_counts_what_one_recorder_would() {
        let window = Some((ms(1000), ms(3000)));
        let mut one = Recorder::new(window);
        let mut merged = Recorder::new(window);
        for salt in 0..3 {
            feed(&mut one, salt);
            let mut shard = Recorder::new(window);
            feed(&mut shard, salt);
            merged.absorb(&mut shard);
            let mut empty = Recorder::new(window);
            empty.abandoned = shard.abandoned;
            assert_eq!(
                format!("{shard:?}"),
                format!("{empty:?}"),
                "an absorbed recorder is left empty"
            );
        }
        assert_eq!(merged.latency, one.latency);
        assert_eq!(merged.attempt_latency, one.attempt_latency);
        assert_eq!(merged.lag, one.lag);
        assert_eq!(merged.connection_wait, one.connection_wait);
        assert_eq!(merged.series, one.series);
        assert_eq!(merged.outcomes, one.outcomes);
        assert_eq!(merged.retry_outcomes, one.retry_outcomes);
        assert_eq!(merged.give_ups, one.give_ups);
        assert_eq!(merged.retried_permanent, one.retried_permanent);
        assert_eq!(merged.waves, one.waves);
        assert_eq!(merged.last_send, one.last_send);
        assert_eq!(
            (
                merged.logical,
                merged.dropped,
                merged.succeeded,
                merged.failed,
                merged.unfinished,
                merged.cut,
                merged.abandoned,
                merged.attempts,
                merged.reached,
                merged.retries,
                merged.connection_wait_timeouts,
            ),
            (
                one.logical,
                one.dropped,
                one.succeeded,
                one.failed,
                one.unfinished,
                one.cut,
                one.abandoned,
                one.attempts,
                one.reached,
                one.retries,
                one.connection_wait_timeouts,
            )
        );
    }

    #[test]
    fn a_renewed_recorder_is_a_new_one() {
        for (used_in, renewed_for) in [
            (Some((ms(1000), ms(3000))), Some((ms(1000), ms(3000)))),
            (None, Some((ms(0), ms(500)))),
            (Some((ms(1000), ms(3000))), None),
        ] {
            let mut used = Recorder::new(used_in);
            feed(&mut used, 1);
            used.connection_wait_timeouts = 3;
            used.streams_waited = 2;
            used.connects = Some(super::Connects {
                opened: 4,
                peak_per_second: 2,
            });
            assert_eq!(
                format!("{:?}", used.renewed(renewed_for)),
                format!("{:?}", Recorder::new(renewed_for)),
                "used in {used_in:?}, renewed for {renewed_for:?}"
            );
        }
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn send_at(r: &mut Recorder, at: Duration) {
        r.sent(at, at, true, "id", std::iter::empty());
    }

    #[test]
    fn retries_land_in_their_50ms_bucket_of_the_fault_window_only() {
        // A window of 3.02 s: 61 buckets, the last one 20 ms long.
        let mut r = Recorder::new(Some((ms(3000), ms(6020))));
        for at in [2999, 3000, 3049, 3050, 4525, 6019, 6020, 9000] {
            send_at(&mut r, ms(at));
        }
        // First attempts follow the offered load: not the policy's waves.
        r.sent(ms(3000), ms(3000), false, "id", std::iter::empty());
        let waves = r.waves.as_ref().expect("a window");
        assert_eq!(waves.buckets.len(), 61);
        let hits: Vec<(usize, u64)> = waves
            .buckets
            .iter()
            .copied()
            .enumerate()
            .filter(|(_, n)| *n > 0)
            .collect();
        assert_eq!(hits, [(0, 2), (1, 1), (30, 1), (60, 1)]);
        assert_eq!(r.attempts, 9, "every attempt still counts in the totals");
        assert_eq!(Recorder::new(None).waves, None, "no window, no buckets");
    }

    #[test]
    fn wave_buckets_are_bounded_by_the_window_however_many_attempts() {
        let mut r = Recorder::new(Some((ms(0), ms(1000))));
        for i in 0..100_000 {
            send_at(&mut r, ms(i % 5000));
        }
        let waves = r.waves.as_ref().expect("a window");
        assert_eq!(waves.buckets.len(), 20);
        assert_eq!(waves.buckets.iter().sum::<u64>(), 20_000);
        let day = Recorder::new(Some((ms(0), Duration::from_secs(86_400))));
        assert_eq!(day.waves.map(|w| w.buckets.len()), Some(MAX_WAVE_BUCKETS));
    }
}
