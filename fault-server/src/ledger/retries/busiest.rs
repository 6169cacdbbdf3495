//! The busiest second of a client test: attempts per call that sent one in it.

use std::collections::HashMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::Entry;

/// A second's attempts, and the calls (logical requests) they belonged to: attempts per
/// call, where attempts over the calls that started in the second would count a call
/// that began in the second before as all retries (every call made two attempts, and a
/// second read 2.33).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct BusiestSecond {
    pub attempts: u64,
    pub calls: u64,
}

impl BusiestSecond {
    /// Attempts per call; 0 for a second without any.
    pub fn ratio(&self) -> f64 {
        if self.calls == 0 {
            0.0
        } else {
            self.attempts as f64 / self.calls as f64
        }
    }
}

/// The second under way and the busiest so far (O(1): a call remembers the second of its
/// latest attempt).
#[derive(Debug, Default)]
pub(super) struct Busiest {
    second: u32,
    now: BusiestSecond,
    peak: BusiestSecond,
}

impl Busiest {
    pub(super) fn attempt(&mut self, entries: &mut HashMap<u64, Entry>, entry: u64, now: Duration) {
        // Attempts reach the judge a little out of order (stamped on arrival, grouped
        // once their body is read): a late one joins the second under way.
        let second = (u32::try_from(now.as_secs()).unwrap_or(u32::MAX - 1) + 1).max(self.second);
        if second != self.second {
            self.peak = self.peak();
            self.now = BusiestSecond::default();
            self.second = second;
        }
        self.now.attempts += 1;
        if let Some(e) = entries.get_mut(&entry)
            && e.second != second
        {
            e.second = second;
            self.now.calls += 1;
        }
    }

    pub(super) fn peak(&self) -> BusiestSecond {
        // Compared as fractions, exactly: a/b > c/d.
        let (a, b, c, d) = (
            u128::from(self.now.attempts),
            u128::from(self.now.calls),
            u128::from(self.peak.attempts),
            u128::from(self.peak.calls),
        );
        if b > 0 && (d == 0 || a * d > c * b) {
            self.now
        } else {
            self.peak
        }
    }
}
