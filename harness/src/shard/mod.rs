//! A plan run by N processes at once (on one machine, or as a Kubernetes Indexed Job's
//! pods), each one client instance, against one fault-server; then merged exactly.
//!
//! Shard I of N sends the arrivals of the plan's schedule whose index is I mod N: the
//! same seed, the same schedule, the same request ids and per-request jitter streams as
//! the unsharded run, dealt out by striping (k6's execution segments do the same), so the
//! shards together send every arrival exactly once. Each shard has its own budget,
//! breaker, connections and `max_in_flight`, as N instances of a client in production do.
//!
//! The shards agree on a common start (`--start-at`) and lay the plan's policies on one
//! timeline from it ([`Sharding::policy_start`]): each policy a slot of the plan's
//! duration, its drain, and margins for clock skew and the ledger. Shard 0 is the
//! ledger's keeper: it installs the plan's script, resets the fault-server ahead of each
//! slot with the run clock set to start at the slot's instant, and reads the ledger once
//! every shard's drain is over. The others only send. Each writes a partial report
//! ([`partial`]); `harness merge` folds them into one report ([`merge`]).

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::plan::Plan;
use crate::schedule::Arrival;

pub mod consistent;
pub mod merge;
pub mod partial;

/// The most shards a run may have.
pub const MAX_SHARDS: u32 = 1024;

/// How far apart the shards' clocks may be: a shard this late for a policy's start
/// refuses to run it, and the keeper waits this long past the slot's drain before it
/// reads the ledger. NTP keeps a cluster's nodes within milliseconds.
pub const SKEW: Duration = Duration::from_secs(1);

/// How far ahead of a slot the keeper resets the fault-server (its run clock set to start
/// at the slot's instant): a request of a shard whose clock runs a little fast lands in
/// the new ledger, not the old.
pub const LEAD: Duration = Duration::from_secs(1);

/// One shard of a run: `index` of `count`, 0-based.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Shard {
    pub index: u32,
    pub count: u32,
}

impl Shard {
    /// Whether this shard sends `arrival`.
    pub fn takes(&self, arrival: &Arrival) -> bool {
        arrival.index % u64::from(self.count) == u64::from(self.index)
    }

    /// The shard that resets the fault-server and reads its ledger.
    pub fn is_keeper(&self) -> bool {
        self.index == 0
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl FromStr for Shard {
    type Err = String;

    fn from_str(s: &str) -> Result<Shard, String> {
        let bad = || {
            format!(
                "`{s}` is not a shard: give I/N, with N from 1 to {MAX_SHARDS} and I from 0 to N-1 (e.g. 0/4; in a Kubernetes Indexed Job, $(JOB_COMPLETION_INDEX)/N)"
            )
        };
        let (i, n) = s.split_once('/').ok_or_else(bad)?;
        let index: u32 = i.trim().parse().map_err(|_| bad())?;
        let count: u32 = n.trim().parse().map_err(|_| bad())?;
        if count == 0 || count > MAX_SHARDS || index >= count {
            return Err(bad());
        }
        Ok(Shard { index, count })
    }
}

/// A shard and the run's common start: where each policy's slot lies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sharding {
    pub shard: Shard,
    pub start: SystemTime,
}

impl Sharding {
    /// One policy's slot: its arrivals and drain, the skew allowed, the keeper's wait for
    /// the fault-server to finish (at most a drain), its reads, and the lead of the next
    /// reset.
    pub fn slot(plan: &Plan) -> Duration {
        plan.duration + plan.drain + SKEW + plan.drain + Duration::from_secs(1) + LEAD
    }

    /// When the `k`-th policy run (0-based) starts its schedule, on every shard.
    pub fn policy_start(&self, plan: &Plan, k: usize) -> SystemTime {
        self.start + Sharding::slot(plan) * u32::try_from(k).unwrap_or(u32::MAX)
    }

    /// When the keeper reads the `k`-th policy's ledger: every shard's drain is over.
    pub fn ledger_at(&self, plan: &Plan, k: usize) -> SystemTime {
        self.policy_start(plan, k) + plan.duration + plan.drain + SKEW
    }
}

/// Reads `--start-at`: RFC 3339 in UTC (`2026-12-07T08:00:00Z`, fractions of a second
/// allowed) or Unix seconds (`1765094400`, `1765094400.25`).
pub fn parse_time(text: &str) -> Result<SystemTime, String> {
    let bad = || {
        format!(
            "`{text}` is not a time: give RFC 3339 in UTC (e.g. 2026-12-07T08:00:00Z; `date -u -d '+1 min' +%Y-%m-%dT%H:%M:%SZ`) or Unix seconds (`date -d '+1 min' +%s`)"
        )
    };
    let text = text.trim();
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        let seconds: f64 = text.parse().map_err(|_| bad())?;
        return Ok(UNIX_EPOCH + Duration::from_secs_f64(seconds));
    }
    let body = text
        .strip_suffix('Z')
        .or_else(|| text.strip_suffix("+00:00"))
        .ok_or_else(bad)?;
    let (date, time) = body.split_once(['T', ' ']).ok_or_else(bad)?;
    let number = |s: &str| s.parse::<u32>().map_err(|_| bad());
    let parts: Vec<&str> = date.split('-').collect();
    let [y, mo, d] = parts.as_slice() else {
        return Err(bad());
    };
    let (whole, fraction) = time.split_once('.').unwrap_or((time, ""));
    let parts: Vec<&str> = whole.split(':').collect();
    let [h, mi, s] = parts.as_slice() else {
        return Err(bad());
    };
    let (y, mo, d, h, mi, s) = (
        number(y)?,
        number(mo)?,
        number(d)?,
        number(h)?,
        number(mi)?,
        number(s)?,
    );
    if !(1970..=9999).contains(&y) || !(1..=12).contains(&mo) || !(1..=31).contains(&d) {
        return Err(bad());
    }
    if h > 23 || mi > 59 || s > 60 {
        return Err(bad());
    }
    let nanos = match fraction {
        "" => 0,
        f if f.len() <= 9 && f.bytes().all(|b| b.is_ascii_digit()) => {
            number(f)? * 10u32.pow(9 - f.len() as u32)
        }
        _ => return Err(bad()),
    };
    let days = days_from_civil(i64::from(y), i64::from(mo), i64::from(d));
    let secs = days * 86_400 + i64::from(h * 3600 + mi * 60 + s);
    let secs = u64::try_from(secs).map_err(|_| bad())?;
    Ok(UNIX_EPOCH + Duration::new(secs, nanos))
}

/// Howard Hinnant's days from civil: the days since 1970-01-01 of a proleptic Gregorian
/// date.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// A time as RFC 3339 in UTC, to the millisecond.
pub fn format_time(t: SystemTime) -> String {
    let (_, seconds) = crate::report::timestamp(t);
    let millis = t
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_millis());
    format!("{}.{millis:03}Z", seconds.trim_end_matches('Z'))
}

/// The tokio instant of a wall-clock time (now, if it has passed).
#[cfg(feature = "live")]
pub fn instant_of(t: SystemTime) -> tokio::time::Instant {
    let now = tokio::time::Instant::now();
    match t.duration_since(SystemTime::now()) {
        Ok(ahead) => now + ahead,
        Err(_) => now,
    }
}

/// How late now is for `t`, if it is.
pub fn late_for(t: SystemTime) -> Option<Duration> {
    SystemTime::now().duration_since(t).ok()
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::{Shard, format_time, parse_time};
    use crate::schedule::Arrival;

    #[test]
    fn shards_parse_and_deal_out_every_arrival_once() {
        assert_eq!("1/4".parse::<Shard>(), Ok(Shard { index: 1, count: 4 }));
        for bad in ["4/4", "0/0", "1", "a/4", "-1/4", "0/2000", ""] {
            assert!(bad.parse::<Shard>().is_err(), "{bad}");
        }
        let shards: Vec<Shard> = (0..3).map(|index| Shard { index, count: 3 }).collect();
        for index in 0..100 {
            let a = Arrival {
                index,
                at: Duration::ZERO,
                kind: 0,
                n: 0,
            };
            assert_eq!(shards.iter().filter(|s| s.takes(&a)).count(), 1);
        }
    }

    #[test]
    fn start_times_parse_as_rfc3339_or_unix_seconds() {
        let t = parse_time("2026-12-07T08:00:00Z").expect("valid");
        assert_eq!(t, UNIX_EPOCH + Duration::from_secs(1_796_630_400));
        assert_eq!(parse_time("1796630400"), Ok(t));
        assert_eq!(
            parse_time("2026-12-07T08:00:00.250Z"),
            Ok(t + Duration::from_millis(250))
        );
        assert_eq!(parse_time("2026-12-07 08:00:00+00:00"), Ok(t));
        assert_eq!(
            format_time(t + Duration::from_millis(250)),
            "2026-12-07T08:00:00.250Z"
        );
        assert_eq!(
            parse_time("2000-02-29T00:00:00Z").map(format_time),
            Ok("2000-02-29T00:00:00.000Z".to_owned())
        );
        for bad in [
            "2026-12-07T08:00:00",
            "tomorrow",
            "2026-13-01T00:00:00Z",
            "2026-12-07T25:00:00Z",
            "",
        ] {
            assert!(parse_time(bad).is_err(), "{bad}");
        }
    }
}
