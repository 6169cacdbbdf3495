//! A [`Recorder`] as JSON and back, exactly: what a sharded run's partial report carries so
//! that `harness merge` can fold the shards' recorders as if one recorder had seen every
//! event ([`Recorder::absorb`]).
//!
//! The histograms go in hdrhistogram's V2 format (the one every HdrHistogram port reads),
//! base64 in the JSON; outcomes and give-up reasons by a name that parses back.

use std::collections::BTreeMap;
use std::time::Duration;

use base64::Engine as _;
use chaos_policy::{BreakerState, GiveUp, Outcome};
use hdrhistogram::Histogram;
use hdrhistogram::serialization::{Deserializer, Serializer as _, V2Serializer};
use serde::{Deserialize, Serialize};

use super::{Connects, Recorder, Sampled, Second, Waves};

/// Why a saved recorder cannot be read back.
#[derive(Debug, thiserror::Error)]
pub enum SavedError {
    #[error("histogram `{name}` is not base64 of hdrhistogram's V2 format: {detail}")]
    Histogram { name: &'static str, detail: String },
    #[error("histogram `{name}` is refused before it is decoded: {source}")]
    Bounded {
        name: &'static str,
        source: super::v2::V2Error,
    },
    #[error("`{0}` is not an outcome this harness knows")]
    Outcome(String),
    #[error("`{0}` is not a give-up reason this harness knows")]
    GiveUp(String),
    #[error("`{0}` is not a breaker state (closed, open, half_open)")]
    Breaker(String),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SavedRecorder {
    pub latency: String,
    pub attempt_latency: String,
    pub lag: String,
    pub connection_wait: String,
    pub connection_wait_timeouts: u64,
    pub streams_waited: u64,
    pub connects: Option<SavedConnects>,
    pub series: Vec<SavedSecond>,
    pub logical: u64,
    pub dropped: u64,
    pub succeeded: u64,
    pub failed: u64,
    pub unfinished: u64,
    pub cut: u64,
    pub abandoned: u64,
    pub attempts: u64,
    pub reached: (u64, u64),
    pub retries: u64,
    /// An outcome is a status (100 to 999) or one of a few kinds: a thousand at most,
    /// bounded as read (`crate::bounded`).
    #[serde(deserialize_with = "crate::bounded::map::<_, _, _, MAX_OUTCOMES>")]
    pub outcomes: BTreeMap<String, u64>,
    #[serde(deserialize_with = "crate::bounded::map::<_, _, _, MAX_OUTCOMES>")]
    pub give_ups: BTreeMap<String, u64>,
    #[serde(deserialize_with = "crate::bounded::map::<_, _, _, MAX_OUTCOMES>")]
    pub retry_outcomes: BTreeMap<String, u64>,
    pub retried_permanent: Sampled,
    pub retried_non_idempotent: Sampled,
    pub last_send_us: u64,
    pub waves: Option<SavedWaves>,
}

/// The most outcomes (or give-up reasons) a saved recorder lists.
const MAX_OUTCOMES: usize = 1024;

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SavedConnects {
    pub opened: u64,
    pub peak_per_second: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SavedSecond {
    pub offered: u64,
    pub scheduled_attempts: u64,
    pub unfinished: u64,
    pub dropped: u64,
    pub attempts: u64,
    pub retries: u64,
    pub succeeded: u64,
    pub failed: u64,
    pub budget_tokens: Option<f64>,
    pub breaker: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SavedWaves {
    pub from_us: u64,
    pub until_us: u64,
    pub buckets: Vec<u64>,
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// A histogram in the V2 format, base64.
pub fn encode_histogram(h: &Histogram<u64>) -> String {
    let mut bytes = Vec::new();
    // Into a Vec: only a histogram too large for the format fails, and ours are bounded.
    let _ = V2Serializer::new().serialize(h, &mut bytes);
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// [`encode_histogram`] read back.
pub fn decode_histogram(name: &'static str, text: &str) -> Result<Histogram<u64>, SavedError> {
    let fail = |detail: String| SavedError::Histogram { name, detail };
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(|e| fail(e.to_string()))?;
    // Its header checked against what the field holds first: the deserializer allocates
    // what the header declares.
    let v2 = super::v2::bounded(&bytes).map_err(|source| SavedError::Bounded { name, source })?;
    let decoded: Histogram<u64> = Deserializer::new()
        .deserialize(&mut v2.as_ref())
        .map_err(|e| fail(format!("{e:?}")))?;
    // The recorder's own bounds, so the merge can add it: a histogram from another
    // tool with other bounds is copied in, value by value.
    let mut h = super::histogram();
    h.add(&decoded).map_err(|e| fail(format!("{e:?}")))?;
    Ok(h)
}

/// An outcome's name in a saved recorder: its `Debug` form, which tells the reset phases
/// apart (its report name does not).
fn outcome_name(o: Outcome) -> String {
    format!("{o:?}")
}

fn outcome_of(name: &str) -> Result<Outcome, SavedError> {
    let number = |prefix: &str| {
        name.strip_prefix(prefix)
            .and_then(|rest| rest.strip_suffix(')'))
            .and_then(|n| n.parse::<u16>().ok())
    };
    if let Some(code) = number("Status(") {
        return Ok(Outcome::Status(code));
    }
    if let Some(code) = number("Grpc(").and_then(|c| u8::try_from(c).ok()) {
        return Ok(Outcome::Grpc(code));
    }
    Outcome::TRANSPORT
        .into_iter()
        .find(|o| outcome_name(*o) == name)
        .ok_or_else(|| SavedError::Outcome(name.to_owned()))
}

fn breaker_name(b: BreakerState) -> &'static str {
    match b {
        BreakerState::Closed => "closed",
        BreakerState::Open => "open",
        BreakerState::HalfOpen => "half_open",
    }
}

fn breaker_of(name: &str) -> Result<BreakerState, SavedError> {
    [
        BreakerState::Closed,
        BreakerState::Open,
        BreakerState::HalfOpen,
    ]
    .into_iter()
    .find(|b| breaker_name(*b) == name)
    .ok_or_else(|| SavedError::Breaker(name.to_owned()))
}

fn outcomes_saved(map: &BTreeMap<Outcome, u64>) -> BTreeMap<String, u64> {
    map.iter().map(|(o, n)| (outcome_name(*o), *n)).collect()
}

fn outcomes_read(map: &BTreeMap<String, u64>) -> Result<BTreeMap<Outcome, u64>, SavedError> {
    map.iter()
        .map(|(name, n)| Ok((outcome_of(name)?, *n)))
        .collect()
}

impl Recorder {
    /// This recorder as a partial report keeps it.
    pub fn saved(&self) -> SavedRecorder {
        SavedRecorder {
            latency: encode_histogram(&self.latency),
            attempt_latency: encode_histogram(&self.attempt_latency),
            lag: encode_histogram(&self.lag),
            connection_wait: encode_histogram(&self.connection_wait),
            connection_wait_timeouts: self.connection_wait_timeouts,
            streams_waited: self.streams_waited,
            connects: self.connects.map(|c| SavedConnects {
                opened: c.opened,
                peak_per_second: c.peak_per_second,
            }),
            series: self
                .series
                .iter()
                .map(|s| SavedSecond {
                    offered: s.offered,
                    scheduled_attempts: s.scheduled_attempts,
                    unfinished: s.unfinished,
                    dropped: s.dropped,
                    attempts: s.attempts,
                    retries: s.retries,
                    succeeded: s.succeeded,
                    failed: s.failed,
                    budget_tokens: s.budget_tokens,
                    breaker: s.breaker.map(|b| breaker_name(b).to_owned()),
                })
                .collect(),
            logical: self.logical,
            dropped: self.dropped,
            succeeded: self.succeeded,
            failed: self.failed,
            unfinished: self.unfinished,
            cut: self.cut,
            abandoned: self.abandoned,
            attempts: self.attempts,
            reached: self.reached,
            retries: self.retries,
            outcomes: outcomes_saved(&self.outcomes),
            give_ups: self
                .give_ups
                .iter()
                .map(|(g, n)| (g.name().to_owned(), *n))
                .collect(),
            retry_outcomes: outcomes_saved(&self.retry_outcomes),
            retried_permanent: self.retried_permanent.clone(),
            retried_non_idempotent: self.retried_non_idempotent.clone(),
            last_send_us: micros(self.last_send),
            waves: self.waves.as_ref().map(|w| SavedWaves {
                from_us: micros(w.from),
                until_us: micros(w.until),
                buckets: w.buckets.clone(),
            }),
        }
    }

    /// A saved recorder read back: equal to the one that was saved.
    pub fn from_saved(saved: &SavedRecorder) -> Result<Recorder, SavedError> {
        let series = saved
            .series
            .iter()
            .map(|s| {
                Ok(Second {
                    offered: s.offered,
                    scheduled_attempts: s.scheduled_attempts,
                    unfinished: s.unfinished,
                    dropped: s.dropped,
                    attempts: s.attempts,
                    retries: s.retries,
                    succeeded: s.succeeded,
                    failed: s.failed,
                    budget_tokens: s.budget_tokens,
                    breaker: s.breaker.as_deref().map(breaker_of).transpose()?,
                })
            })
            .collect::<Result<_, SavedError>>()?;
        let mut give_ups: BTreeMap<GiveUp, u64> = GiveUp::ALL.iter().map(|g| (*g, 0)).collect();
        for (name, n) in &saved.give_ups {
            let reason = GiveUp::ALL
                .into_iter()
                .find(|g| g.name() == name)
                .ok_or_else(|| SavedError::GiveUp(name.clone()))?;
            give_ups.insert(reason, *n);
        }
        Ok(Recorder {
            latency: decode_histogram("latency", &saved.latency)?,
            attempt_latency: decode_histogram("attempt_latency", &saved.attempt_latency)?,
            lag: decode_histogram("lag", &saved.lag)?,
            connection_wait: decode_histogram("connection_wait", &saved.connection_wait)?,
            connection_wait_timeouts: saved.connection_wait_timeouts,
            streams_waited: saved.streams_waited,
            connects: saved.connects.map(|c| Connects {
                opened: c.opened,
                peak_per_second: c.peak_per_second,
            }),
            series,
            logical: saved.logical,
            dropped: saved.dropped,
            succeeded: saved.succeeded,
            failed: saved.failed,
            unfinished: saved.unfinished,
            cut: saved.cut,
            abandoned: saved.abandoned,
            attempts: saved.attempts,
            reached: saved.reached,
            retries: saved.retries,
            outcomes: outcomes_read(&saved.outcomes)?,
            give_ups,
            retry_outcomes: outcomes_read(&saved.retry_outcomes)?,
            retried_permanent: saved.retried_permanent.clone(),
            retried_non_idempotent: saved.retried_non_idempotent.clone(),
            last_send: Duration::from_micros(saved.last_send_us),
            waves: saved.waves.as_ref().map(|w| Waves {
                from: Duration::from_micros(w.from_us),
                until: Duration::from_micros(w.until_us),
                buckets: w.buckets.clone(),
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use chaos_policy::{BreakerState, GiveUp, Outcome, ResetPhase, Verdict, Violation};

    use super::super::Recorder;
    use super::{outcome_name, outcome_of};

    #[test]
    fn a_recorder_saved_and_read_back_is_the_same_recorder() {
        let mut r = Recorder::new(Some((Duration::from_secs(1), Duration::from_secs(3))));
        for i in 0..500u64 {
            let at = Duration::from_millis(i * 7);
            r.arrived(at, Duration::from_micros(i % 90));
            r.sent(
                at,
                at,
                i % 3 == 0,
                &format!("p-{i}"),
                (i % 50 == 0)
                    .then_some(Violation::RetriedNonIdempotent)
                    .into_iter(),
            );
            let outcome = match i % 4 {
                0 => Outcome::Status(503),
                1 => Outcome::Reset(ResetPhase::AfterWrite),
                2 => Outcome::Grpc(14),
                _ => Outcome::Status(200),
            };
            r.attempt_done(outcome, Duration::from_micros(100 + i * 13), i % 3 == 0);
            r.waited(Duration::from_micros(i), false);
            r.finished(
                at,
                Duration::from_millis(i),
                &if i % 5 == 0 {
                    Verdict::GaveUp {
                        reason: GiveUp::BudgetExhausted,
                        attempts: 2,
                        last: None,
                    }
                } else {
                    Verdict::Succeeded { attempts: 1 }
                },
            );
        }
        r.sample_state(
            Duration::from_secs(2),
            Some(7.5),
            Some(BreakerState::HalfOpen),
        );
        r.dropped(Duration::from_secs(3));
        r.unfinished(Duration::from_secs(3), Duration::from_secs(2));
        r.connects = Some(super::Connects {
            opened: 9,
            peak_per_second: 4,
        });
        let json = serde_json::to_string(&r.saved()).expect("serialises");
        let back = Recorder::from_saved(&serde_json::from_str(&json).expect("parses"))
            .expect("reads back");
        // Equal as histograms (counts, totals, min and max as the histogram reports
        // them); the V2 format keeps no raw maximum, so `Debug` may differ there.
        assert_eq!(back.latency, r.latency);
        assert_eq!(back.attempt_latency, r.attempt_latency);
        assert_eq!(back.lag, r.lag);
        assert_eq!(back.connection_wait, r.connection_wait);
        assert_eq!(back.latency.max(), r.latency.max());
        assert_eq!(back.attempt_latency.len(), 500);
        let mut back = back;
        back.latency = r.latency.clone();
        back.attempt_latency = r.attempt_latency.clone();
        back.lag = r.lag.clone();
        back.connection_wait = r.connection_wait.clone();
        assert_eq!(format!("{back:?}"), format!("{r:?}"));
    }

    #[test]
    fn every_outcome_name_parses_back() {
        for o in Outcome::TRANSPORT.into_iter().chain([
            Outcome::Status(200),
            Outcome::Status(999),
            Outcome::Grpc(16),
        ]) {
            assert_eq!(outcome_of(&outcome_name(o)).ok(), Some(o));
        }
        assert!(outcome_of("Status(x)").is_err());
        assert!(outcome_of("Reset").is_err());
    }
}
