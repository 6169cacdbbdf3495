//! What a partial report must say of itself, and what the partials of one run must agree
//! on, before `harness merge` adds them: a partial is input from another machine (a pod's
//! log, a file copied by hand), so it is checked as any input is.
//!
//! One partial ([`partial`]): its shard is a shard (`index < count <= MAX_SHARDS`), its
//! start a time, each policy at most once, a ledger only in the keeper's, and each policy's
//! counts hold together as the [`Recorder`](crate::stats::Recorder) that wrote them
//! always holds them:
//!
//! - `failed` = the give-ups counted by reason + `unfinished` (a request fails by giving
//!   up, or by being still unfinished when the drain ends);
//! - `retries` <= `attempts`, `abandoned` <= `attempts`, the outcomes counted <=
//!   `attempts` (an attempt gets at most one outcome), each outcome's retries <= its
//!   count, and the waves' retries <= `retries`;
//! - the per-second series adds up to the totals (`offered` to `logical` + `dropped`;
//!   `attempts`, `scheduled_attempts` to `attempts`; `retries`, `succeeded`, `failed`,
//!   `unfinished`, `dropped` to theirs), and no second has more unfinished than failed;
//! - the series is no longer than a recorder keeps (2^20 + 1 seconds), the waves no
//!   more buckets than [`MAX_WAVE_BUCKETS`];
//! - every histogram decodes within its bounds ([`crate::stats::v2`]).
//!
//! Several partials ([`sums_fit`]): every count the merge adds fits a u64 (the sum of two
//! partials' `logical` of 2^64 - 1 is refused, not wrapped).
//!
//! Every sum is checked arithmetic: a count that overflows is refused by name.

use std::collections::BTreeSet;

use super::partial::{Partial, PartialPolicy};
use super::{MAX_SHARDS, parse_time};
use crate::plan::Plan;
use crate::stats::{MAX_WAVE_BUCKETS, Recorder, SavedRecorder, SavedSecond};

/// The longest series a recorder keeps: it counts a later second in its last.
pub const MAX_SERIES: usize = (1 << 20) + 1;

/// A field of a partial that contradicts the rest of it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field} {detail}")]
pub struct Inconsistent {
    /// Where, as a path into the partial's JSON: `policies[naive].failed`.
    pub field: String,
    pub detail: String,
}

fn wrong(field: impl Into<String>, detail: impl Into<String>) -> Inconsistent {
    Inconsistent {
        field: field.into(),
        detail: detail.into(),
    }
}

/// A checked sum of counts, named for its error.
fn total<'a>(field: &str, counts: impl IntoIterator<Item = &'a u64>) -> Result<u64, Inconsistent> {
    counts.into_iter().try_fold(0u64, |sum, n| {
        sum.checked_add(*n)
            .ok_or_else(|| wrong(field, "adds up to more than 2^64 - 1"))
    })
}

/// Checks one partial on its own.
pub fn partial(p: &Partial) -> Result<(), Inconsistent> {
    if p.shard.count == 0 || p.shard.count > MAX_SHARDS || p.shard.index >= p.shard.count {
        return Err(wrong(
            "shard",
            format!(
                "is {}/{}: a shard is I/N with N from 1 to {MAX_SHARDS} and I below N",
                p.shard.index, p.shard.count
            ),
        ));
    }
    if parse_time(&p.start_at).is_err() {
        return Err(wrong(
            "start_at",
            format!("is `{}`, not an RFC 3339 time", p.start_at),
        ));
    }
    let mut names = BTreeSet::new();
    for policy in &p.policies {
        let at = format!("policies[{}]", policy.name);
        if !names.insert(policy.name.as_str()) {
            return Err(wrong(at, "appears twice in this partial"));
        }
        if policy.ledger.is_some() && !p.keeper {
            return Err(wrong(
                format!("{at}.ledger"),
                "is present in a partial that is not the keeper's (only the keeper reads the ledger)",
            ));
        }
        recorder(&at, &policy.recorder)?;
        Recorder::from_saved(&policy.recorder)
            .map_err(|e| wrong(format!("{at}.recorder"), e.to_string()))?;
    }
    Ok(())
}

/// The invariants of one saved recorder, `at` its place in the partial.
fn recorder(at: &str, r: &SavedRecorder) -> Result<(), Inconsistent> {
    let field = |name: &str| format!("{at}.{name}");
    let gave_up = total(&field("give_ups"), r.give_ups.values())?;
    let failing = gave_up.checked_add(r.unfinished).ok_or_else(|| {
        wrong(
            field("give_ups"),
            "and unfinished add up to more than 2^64 - 1",
        )
    })?;
    if r.failed != failing {
        return Err(wrong(
            field("failed"),
            format!(
                "is {} but give_ups ({gave_up}) and unfinished ({}) count {failing} failed requests",
                r.failed, r.unfinished
            ),
        ));
    }
    for (name, n) in [("retries", r.retries), ("abandoned", r.abandoned)] {
        if n > r.attempts {
            return Err(wrong(
                field(name),
                format!("is {n}, more than the {} attempts", r.attempts),
            ));
        }
    }
    let answered = total(&field("outcomes"), r.outcomes.values())?;
    if answered > r.attempts {
        return Err(wrong(
            field("outcomes"),
            format!(
                "count {answered} answered attempts, more than the {} attempts",
                r.attempts
            ),
        ));
    }
    for (outcome, n) in &r.retry_outcomes {
        let of_all = r.outcomes.get(outcome).copied().unwrap_or(0);
        if *n > of_all {
            return Err(wrong(
                format!("{at}.retry_outcomes[{outcome}]"),
                format!("is {n}, more than outcomes[{outcome}] ({of_all})"),
            ));
        }
    }
    if let Some(w) = &r.waves {
        if w.buckets.len() > MAX_WAVE_BUCKETS {
            return Err(wrong(
                field("waves.buckets"),
                format!(
                    "has {} buckets, more than {MAX_WAVE_BUCKETS}",
                    w.buckets.len()
                ),
            ));
        }
        let waves = total(&field("waves.buckets"), &w.buckets)?;
        if waves > r.retries {
            return Err(wrong(
                field("waves.buckets"),
                format!("count {waves} retries, more than the {} retries", r.retries),
            ));
        }
    }
    series(at, r)
}

/// The per-second series against the totals.
fn series(at: &str, r: &SavedRecorder) -> Result<(), Inconsistent> {
    if r.series.len() > MAX_SERIES {
        return Err(wrong(
            format!("{at}.series"),
            format!(
                "has {} seconds, more than a recorder keeps ({MAX_SERIES})",
                r.series.len()
            ),
        ));
    }
    for (i, s) in r.series.iter().enumerate() {
        if s.unfinished > s.failed {
            return Err(wrong(
                format!("{at}.series[{i}].unfinished"),
                format!(
                    "is {}, more than that second's failed ({})",
                    s.unfinished, s.failed
                ),
            ));
        }
    }
    let offered = r.logical.checked_add(r.dropped).ok_or_else(|| {
        wrong(
            format!("{at}.logical"),
            "and dropped add up to more than 2^64 - 1",
        )
    })?;
    type Of = fn(&SavedSecond) -> &u64;
    let columns: [(&str, Of, u64, &str); 8] = [
        ("offered", |s| &s.offered, offered, "logical + dropped"),
        ("attempts", |s| &s.attempts, r.attempts, "attempts"),
        (
            "scheduled_attempts",
            |s| &s.scheduled_attempts,
            r.attempts,
            "attempts",
        ),
        ("retries", |s| &s.retries, r.retries, "retries"),
        ("succeeded", |s| &s.succeeded, r.succeeded, "succeeded"),
        ("failed", |s| &s.failed, r.failed, "failed"),
        ("unfinished", |s| &s.unfinished, r.unfinished, "unfinished"),
        ("dropped", |s| &s.dropped, r.dropped, "dropped"),
    ];
    for (name, of, expected, what) in columns {
        let field = format!("{at}.series[].{name}");
        let sum = total(&field, r.series.iter().map(of))?;
        if sum != expected {
            return Err(wrong(
                field,
                format!("adds up to {sum}, and the policy's {what} is {expected}"),
            ));
        }
    }
    Ok(())
}

/// What a partial must agree on with the plan it is merged with, so a partial of a run
/// that did not happen is refused, however well its counts hold together: the plan's
/// name and seed (the digest covers both, and a hand-edited partial may keep one and
/// change another), a target, and for a partial that counted anything a finish after its
/// start, and each counting policy some time run, no longer than its slot
/// ([`super::Sharding::slot`]), and no more arrivals than the plan's schedule deals its
/// shard (`arrivals`, the schedule's length: shard I of N sends those whose index is
/// I mod N). A shard the run never had is one the schedule deals nothing to. And no
/// policy's series is longer than the plan's slots (a 170 MB partial of a 1 s plan with a
/// million seconds of zeros merged, into a report of a million rows).
pub fn of_the_run(plan: &Plan, arrivals: u64, p: &Partial) -> Result<(), Inconsistent> {
    if p.plan.name != plan.name {
        return Err(wrong(
            "plan.name",
            format!("is `{}`, and the plan is `{}`", p.plan.name, plan.name),
        ));
    }
    if p.plan.seed != plan.seed {
        return Err(wrong(
            "plan.seed",
            format!(
                "is {}, and the plan runs with seed {}",
                p.plan.seed, plan.seed
            ),
        ));
    }
    if p.plan.target.trim().is_empty() {
        return Err(wrong(
            "plan.target",
            "is empty: a shard names what it drove",
        ));
    }
    // Every policy's slot from the common start: a series counts from there at the latest.
    let slots = super::Sharding::slot(plan)
        .as_secs()
        .saturating_add(1)
        .saturating_mul(plan.policies.len() as u64)
        .saturating_add(1);
    for q in &p.policies {
        if q.recorder.series.len() as u64 > slots {
            return Err(wrong(
                format!("policies[{}].series", q.name),
                format!(
                    "has {} seconds, more than the {slots} the plan's policies' slots span from the common start",
                    q.recorder.series.len()
                ),
            ));
        }
    }
    let counting: Vec<&PartialPolicy> = p
        .policies
        .iter()
        .filter(|q| q.recorder.logical > 0 || q.recorder.dropped > 0 || q.recorder.attempts > 0)
        .collect();
    if counting.is_empty() {
        return Ok(());
    }
    let (Ok(start), finished) = (parse_time(&p.start_at), parse_time(&p.finished_at)) else {
        return Err(wrong("start_at", "is not a time"));
    };
    if !finished.is_ok_and(|f| f > start) {
        return Err(wrong(
            "finished_at",
            format!(
                "is `{}`: a shard that counted requests finished after its start ({})",
                p.finished_at, p.start_at
            ),
        ));
    }
    let slot = u64::try_from(super::Sharding::slot(plan).as_millis()).unwrap_or(u64::MAX);
    let dealt = if arrivals > u64::from(p.shard.index) {
        (arrivals - u64::from(p.shard.index) - 1) / u64::from(p.shard.count.max(1)) + 1
    } else {
        0
    };
    for q in counting {
        let at = format!("policies[{}]", q.name);
        if q.elapsed_ms == 0 || q.elapsed_ms > slot {
            return Err(wrong(
                format!("{at}.elapsed_ms"),
                format!(
                    "is {}: a policy that counted requests ran for more than 0 ms and at most its slot ({slot} ms)",
                    q.elapsed_ms
                ),
            ));
        }
        let offered = q.recorder.logical.saturating_add(q.recorder.dropped);
        if offered > dealt {
            return Err(wrong(
                format!("{at}.logical"),
                format!(
                    "and dropped count {offered} arrivals, and the plan's schedule deals shard {} only {dealt} of its {arrivals}",
                    p.shard
                ),
            ));
        }
    }
    Ok(())
}

/// The counts the merge adds over the shards, each summed with checked arithmetic: where
/// one overflows, the field and the partials that ran the policy.
pub fn sums_fit(name: &str, ran: &[(&str, &PartialPolicy)]) -> Result<(), Inconsistent> {
    let overflow = |field: &str| {
        let paths: Vec<&str> = ran.iter().map(|(path, _)| *path).collect();
        wrong(
            format!("policies[{name}].{field}"),
            format!(
                "adds up to more than 2^64 - 1 over the partials ({})",
                paths.join(", ")
            ),
        )
    };
    let sum = |field: &str, of: &dyn Fn(&PartialPolicy) -> u64| {
        ran.iter()
            .try_fold(0u64, |s, (_, p)| s.checked_add(of(p)))
            .ok_or_else(|| overflow(field))
    };
    // The recorder's totals bound everything else it adds (checked in `partial`).
    let logical = sum("recorder.logical", &|p| p.recorder.logical)?;
    let dropped = sum("recorder.dropped", &|p| p.recorder.dropped)?;
    logical
        .checked_add(dropped)
        .ok_or_else(|| overflow("recorder.logical + recorder.dropped"))?;
    type Of = fn(&PartialPolicy) -> u64;
    let fields: [(&str, Of); 15] = [
        ("recorder.succeeded", |p| p.recorder.succeeded),
        ("recorder.failed", |p| p.recorder.failed),
        ("recorder.cut", |p| p.recorder.cut),
        ("recorder.attempts", |p| p.recorder.attempts),
        ("recorder.reached", |p| p.recorder.reached.0),
        ("recorder.reached", |p| p.recorder.reached.1),
        ("recorder.connection_wait_timeouts", |p| {
            p.recorder.connection_wait_timeouts
        }),
        ("recorder.streams_waited", |p| p.recorder.streams_waited),
        ("recorder.retried_permanent.count", |p| {
            p.recorder.retried_permanent.count
        }),
        ("recorder.retried_non_idempotent.count", |p| {
            p.recorder.retried_non_idempotent.count
        }),
        ("recorder.connects.opened", |p| {
            p.recorder.connects.map_or(0, |c| c.opened)
        }),
        ("recorder.connects.peak_per_second", |p| {
            p.recorder.connects.map_or(0, |c| c.peak_per_second)
        }),
        ("breaker_trips", |p| p.breaker_trips),
        ("recorder.succeeded + recorder.failed", |p| {
            p.recorder.succeeded.saturating_add(p.recorder.failed)
        }),
        ("recorder.attempts + recorder.cut", |p| {
            p.recorder.attempts.saturating_add(p.recorder.cut)
        }),
    ];
    for (field, of) in fields {
        sum(field, &of)?;
    }
    tiers(name, ran)
}

/// The tiers' counts, summed tier by tier.
fn tiers(name: &str, ran: &[(&str, &PartialPolicy)]) -> Result<(), Inconsistent> {
    const NAMES: [&str; 13] = [
        "received",
        "logical",
        "sent",
        "retries",
        "succeeded",
        "gave_up",
        "no_retry_received",
        "faulted",
        "unsent",
        "repeats",
        "repeats_non_idempotent",
        "violations.retried_permanent.count",
        "violations.retried_non_idempotent.count",
    ];
    let overflow = |t: usize, field: String| {
        let paths: Vec<&str> = ran.iter().map(|(path, _)| *path).collect();
        wrong(
            format!("policies[{name}].tiers[{t}].{field}"),
            format!(
                "adds up to more than 2^64 - 1 over the partials ({})",
                paths.join(", ")
            ),
        )
    };
    let add_all = |t: usize, what: &str, sums: &mut Vec<u64>, counts: &[u64]| {
        if sums.len() < counts.len() {
            sums.resize(counts.len(), 0);
        }
        for (i, (sum, n)) in sums.iter_mut().zip(counts).enumerate() {
            *sum = sum
                .checked_add(*n)
                .ok_or_else(|| overflow(t, format!("{what}[{i}]")))?;
        }
        Ok(())
    };
    let depth = ran.iter().map(|(_, p)| p.tiers.len()).max().unwrap_or(0);
    for t in 0..depth {
        let mut scalars = [0u64; NAMES.len()];
        let mut per_second = Vec::new();
        let mut by_peer = Vec::new();
        for (_, p) in ran {
            let Some(c) = p.tiers.get(t) else { continue };
            let v = &c.violations;
            let counts = [
                c.received,
                c.logical,
                c.sent,
                c.retries,
                c.succeeded,
                c.gave_up,
                c.no_retry_received,
                c.faulted,
                c.unsent,
                c.repeats,
                c.repeats_non_idempotent,
                v.retried_permanent.count,
                v.retried_non_idempotent.count,
            ];
            for ((sum, n), field) in scalars.iter_mut().zip(counts).zip(NAMES) {
                *sum = sum
                    .checked_add(n)
                    .ok_or_else(|| overflow(t, field.to_owned()))?;
            }
            add_all(t, "sent_per_second", &mut per_second, &c.sent_per_second)?;
            add_all(t, "received_by_peer", &mut by_peer, &c.received_by_peer)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::partial;
    use crate::shard::Shard;
    use crate::shard::merge::tests::{partial as build, plan, recorder};

    fn fine() -> crate::shard::partial::Partial {
        build(&plan(), Shard { index: 1, count: 2 }, &recorder(30))
    }

    fn refused(p: &crate::shard::partial::Partial) -> String {
        partial(p).expect_err("inconsistent").to_string()
    }

    #[test]
    fn a_partial_as_a_recorder_wrote_it_holds_together() {
        assert_eq!(partial(&fine()), Ok(()));
    }

    #[test]
    fn each_invariant_is_checked_by_name() {
        let mut p = fine();
        p.policies.push(p.policies[0].clone());
        assert_eq!(refused(&p), "policies[plain] appears twice in this partial");

        let mut p = fine();
        p.shard = Shard { index: 2, count: 2 };
        assert!(refused(&p).starts_with("shard is 2/2"));
        p.shard = Shard {
            index: 0,
            count: u32::MAX,
        };
        assert!(refused(&p).starts_with("shard is 0/4294967295"));

        let mut p = fine();
        p.start_at = "soon".into();
        assert!(refused(&p).starts_with("start_at is `soon`"));

        let mut p = fine();
        p.policies[0].ledger = Some(Default::default());
        assert!(refused(&p).starts_with("policies[plain].ledger is present"));

        let mut p = fine();
        p.policies[0].recorder.retries = 31;
        assert_eq!(
            refused(&p),
            "policies[plain].retries is 31, more than the 30 attempts"
        );

        let mut p = fine();
        p.policies[0]
            .recorder
            .outcomes
            .insert("Status(503)".into(), 25);
        assert_eq!(
            refused(&p),
            "policies[plain].outcomes count 45 answered attempts, more than the 30 attempts"
        );

        let mut p = fine();
        p.policies[0]
            .recorder
            .retry_outcomes
            .insert("Status(503)".into(), 11);
        assert_eq!(
            refused(&p),
            "policies[plain].retry_outcomes[Status(503)] is 11, more than outcomes[Status(503)] (10)"
        );

        let mut p = fine();
        p.policies[0].recorder.succeeded += 1;
        assert_eq!(
            refused(&p),
            "policies[plain].series[].succeeded adds up to 20, and the policy's succeeded is 21"
        );

        let mut p = fine();
        p.policies[0].recorder.series[0].unfinished = 1;
        p.policies[0].recorder.series[0].failed = 0;
        assert!(refused(&p).starts_with("policies[plain].series[0].unfinished is 1"));

        let mut p = fine();
        p.policies[0]
            .recorder
            .give_ups
            .insert("budget_exhausted".into(), u64::MAX);
        assert_eq!(
            refused(&p),
            "policies[plain].give_ups adds up to more than 2^64 - 1"
        );

        let mut p = fine();
        p.policies[0].recorder.latency = "HISTOGRAM".into();
        assert!(refused(&p).starts_with("policies[plain].recorder histogram `latency`"));
    }
}
