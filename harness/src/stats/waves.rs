//! Retries per 50 ms across the fault window, and how synchronised they were.

use std::time::Duration;

/// The width of a [`Waves`] bucket.
pub const WAVE_BUCKET: Duration = Duration::from_millis(50);

/// At most this many buckets (one hour of fault window): a longer window is counted over
/// its first hour.
pub const MAX_WAVE_BUCKETS: usize = 72_000;

/// Retries per 50 ms across the fault window, by send time: fine enough to show them
/// arriving in waves. Retries alone, because first attempts follow the offered load, the
/// same for every policy; the retries are the policy's own shape. Its memory is the
/// window's length over [`WAVE_BUCKET`], fixed when it is made; a retry sent outside the
/// window is not counted here.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Waves {
    /// The window's start.
    pub from: Duration,
    /// The window's end (exclusive).
    pub until: Duration,
    /// Retries sent in `[from + i·50 ms, from + (i+1)·50 ms)`; the last bucket may be
    /// cut short by the window's end.
    pub buckets: Vec<u64>,
}

impl Waves {
    /// Buckets for the window `[from, until)`.
    pub fn new(from: Duration, until: Duration) -> Waves {
        let span = until.saturating_sub(from).as_nanos();
        let n = span.div_ceil(WAVE_BUCKET.as_nanos());
        Waves {
            from,
            until,
            buckets: vec![
                0;
                usize::try_from(n)
                    .unwrap_or(usize::MAX)
                    .min(MAX_WAVE_BUCKETS)
            ],
        }
    }

    /// A retry sent at `at`.
    pub fn record(&mut self, at: Duration) {
        let Some(since) = at.checked_sub(self.from).filter(|_| at < self.until) else {
            return;
        };
        let i = since.as_nanos() / WAVE_BUCKET.as_nanos();
        if let Some(b) = usize::try_from(i)
            .ok()
            .and_then(|i| self.buckets.get_mut(i))
        {
            *b += 1;
        }
    }
}

/// How synchronised the retries across a window were: the busiest bucket over the mean
/// bucket, from the first bucket with a retry to the last (a short outage's retries all
/// fall early in its window: that is not a wave). 1 is a perfectly even spread; retries
/// that arrive in waves make it several times that. `None` without retries, and for
/// fewer retries than buckets in that stretch: below one retry per 50 ms on average, the
/// busiest bucket is chance (three retries in one bucket of sixty reads as 60), not a wave.
pub fn synchrony(buckets: &[u64]) -> Option<f64> {
    let first = buckets.iter().position(|n| *n > 0)?;
    let last = buckets.iter().rposition(|n| *n > 0)?;
    let active = &buckets[first..=last];
    let total: u64 = active.iter().sum();
    let peak = active.iter().copied().max()?;
    (total >= active.len() as u64).then(|| peak as f64 * active.len() as f64 / total as f64)
}

#[cfg(test)]
mod tests {
    use super::synchrony;

    #[test]
    fn synchrony_is_the_peak_bucket_over_the_mean() {
        let table: &[(&str, &[u64], Option<f64>)] = &[
            ("even", &[10, 10, 10, 10], Some(1.0)),
            (
                "one wave in a trickle",
                &[1, 40, 1, 2],
                Some(40.0 * 4.0 / 44.0),
            ),
            ("waves every other bucket", &[20, 0, 20, 0], Some(1.5)),
            ("a ramp", &[1, 2, 3, 4], Some(1.6)),
            (
                "quiet stretches at either end",
                &[0, 0, 10, 10, 0],
                Some(1.0),
            ),
            (
                "a lone wave: nothing to stand out from",
                &[0, 40, 0, 0],
                Some(1.0),
            ),
            ("fewer retries than buckets", &[1, 0, 0, 1], None),
            ("no retries", &[0, 0, 0], None),
            ("no window", &[], None),
        ];
        for (name, buckets, expected) in table {
            let got = synchrony(buckets);
            assert!(
                match (got, expected) {
                    (Some(a), Some(b)) => (a - b).abs() < 1e-12,
                    (a, b) => a == *b,
                },
                "{name}: {got:?} != {expected:?}"
            );
        }
    }
}
