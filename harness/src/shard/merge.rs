//! `harness merge`: the shards' partial reports as one report, the same `chaos-report/v1`
//! as a single run's, whose gates are then judged once.
//!
//! Exact where it can be: counters summed, histograms added (hdrhistogram merges
//! losslessly), series added second by second (every shard counts from the common start),
//! waves bucket by bucket; the ledger is the keeper's one reading of the shared
//! fault-server, which the report reconciles against the shards' sum as it does a single
//! client's counts. What has no exact sum is said: the budget's level is the shards'
//! buckets summed, the breaker's state the most open of theirs, the busiest second of new
//! connections the sum of each shard's busiest.
//!
//! A shard that never reported, reported an error, or did not run a policy the others ran
//! makes the report `INCOMPLETE` (exit 3), naming it; the figures cover what was reported.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

use chaos_policy::BreakerState;

use super::partial::{Partial, PartialPolicy};
use super::{Shard, parse_time};
use crate::hop::HopCounts;
use crate::plan::Plan;
use crate::report::{
    self, Ending, FaultsInForce, Mode, PolicyOutcome, Relayed, Report, RunContext, ShardsInfo,
};
use crate::stats::{Connects, PolicyRun, Recorder, SavedError};

/// A partial report and where it came from (for messages).
#[derive(Debug, Clone)]
pub struct Source {
    pub path: String,
    pub partial: Partial,
}

/// Why partial reports cannot be merged at all (exit 2): they are not of one run.
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    #[error("no partial reports to merge")]
    Empty,
    #[error(
        "{path} is a partial report of {theirs}, not of {ours}: the plan or its seed changed since that shard ran"
    )]
    OtherPlan {
        path: String,
        theirs: String,
        ours: String,
    },
    #[error("{path} is shard {shard}, and {other} says the run has {count} shards")]
    OtherCount {
        path: String,
        shard: Shard,
        other: String,
        count: u32,
    },
    #[error("{path} and {other} are both shard {shard}")]
    Duplicate {
        path: String,
        other: String,
        shard: Shard,
    },
    #[error("{path} started at {theirs} and {other} at {ours}: not the same run")]
    OtherStart {
        path: String,
        theirs: String,
        other: String,
        ours: String,
    },
    #[error("{path}: policy `{policy}`: {source}")]
    Saved {
        path: String,
        policy: String,
        source: SavedError,
    },
    #[error("{path}: policy `{policy}` is not in the plan")]
    UnknownPolicy { path: String, policy: String },
    #[error(
        "{path} and {other} both say they are the keeper (the shard that resets the fault-server and reads its ledger): a run has one"
    )]
    TwoKeepers { path: String, other: String },
    #[error("{path} says it is the keeper, and it is shard {shard}: the keeper is shard 0")]
    KeeperNotFirst { path: String, shard: Shard },
    #[error("{path}: {source}")]
    Inconsistent {
        path: String,
        source: super::consistent::Inconsistent,
    },
    #[error("{0}")]
    Overflow(super::consistent::Inconsistent),
}

/// Merges the partial reports of one sharded run of `plan` into its report.
pub fn merge(plan: &Plan, mut sources: Vec<Source>) -> Result<Report, MergeError> {
    check(plan, &sources)?;
    sources.sort_by_key(|s| s.partial.shard.index);
    let first = &sources[0].partial;
    let count = first.shard.count;
    let start_at = first.start_at.clone();
    let reported: BTreeSet<u32> = sources.iter().map(|s| s.partial.shard.index).collect();
    let missing: Vec<u32> = (0..count).filter(|i| !reported.contains(i)).collect();
    let mut problems = shard_problems(&sources, count, &missing);
    let keeper = sources.iter().find(|s| s.partial.keeper);
    if keeper.is_none() && !missing.contains(&0) {
        problems.push(
            "no partial is the keeper's (shard 0 reported, and says it did not reset the fault-server or read its ledger): the report has no ledger".to_owned(),
        );
    }
    let names = names_run(plan, &sources);
    let mut policies = Vec::new();
    for name in names {
        let Some(policy) = plan.policies.iter().find(|p| p.name == name) else {
            continue;
        };
        let mut ran: Vec<(&Source, &PartialPolicy)> = Vec::new();
        let mut without = Vec::new();
        for s in &sources {
            match s.partial.policies.iter().find(|p| p.name == name) {
                Some(p) => ran.push((s, p)),
                None if s.partial.error.is_none() && !s.partial.aborted => {
                    without.push(s.partial.shard.to_string());
                }
                None => {}
            }
        }
        if !without.is_empty() {
            problems.push(format!(
                "policy `{name}`: shard{} {} did not run it",
                if without.len() == 1 { "" } else { "s" },
                without.join(", ")
            ));
        }
        let paths: Vec<(&str, &PartialPolicy)> =
            ran.iter().map(|(s, p)| (s.path.as_str(), *p)).collect();
        super::consistent::sums_fit(name, &paths).map_err(MergeError::Overflow)?;
        let run = merged_run(&ran)?;
        let ledger = keeper.and_then(|k| {
            k.partial
                .policies
                .iter()
                .find(|p| p.name == name)
                .and_then(|p| p.ledger.clone())
        });
        let tiers = merged_tiers(&ran);
        policies.push(report::policy_report(
            plan,
            Mode::Live,
            PolicyOutcome {
                policy,
                run,
                ledger,
                tiers,
                proxies: Vec::new(),
            },
        ));
    }
    let (_, generated_at) = report::timestamp(SystemTime::now());
    let error = (!problems.is_empty())
        .then(|| format!("the sharded run is incomplete: {}", problems.join("; ")));
    let context = RunContext {
        run_id: report::run_id(SystemTime::now()),
        faults: keeper.map_or_else(FaultsInForce::default, |k| FaultsInForce {
            target: Some(k.partial.plan.target.clone()),
            phases: k.partial.faults.clone(),
            from: Some(k.partial.faults_from.clone()),
        }),
        relayed: relayed(&sources),
        shards: Some(ShardsInfo {
            count,
            start_at,
            reported: reported.into_iter().collect(),
            missing,
        }),
        ..RunContext::new(
            Mode::Live,
            Ending {
                aborted: sources.iter().any(|s| s.partial.aborted),
                error,
                generated_at,
            },
        )
    };
    let report = report::build(plan, policies, context);
    Ok(report)
}

/// The policies any shard ran, in the plan's order.
fn names_run<'p>(plan: &'p Plan, sources: &[Source]) -> Vec<&'p str> {
    plan.policies
        .iter()
        .map(|p| p.name.as_str())
        .filter(|name| {
            sources
                .iter()
                .any(|s| s.partial.policies.iter().any(|p| p.name == *name))
        })
        .collect()
}

/// What makes the run incomplete, shard by shard: those that never reported, and those
/// that failed.
fn shard_problems(sources: &[Source], count: u32, missing: &[u32]) -> Vec<String> {
    let mut problems = Vec::new();
    for i in missing {
        let keeper = if *i == 0 {
            " (the keeper, which resets the fault-server and reads its ledger: the report has no ledger)"
        } else {
            ""
        };
        problems.push(format!("shard {i}/{count} never reported{keeper}"));
    }
    for s in sources {
        if let Some(e) = &s.partial.error {
            problems.push(format!("shard {} ({}): {e}", s.partial.shard, s.path));
        }
    }
    problems
}

/// Every shard's warnings, for the report to say each once, after the shard that said it.
fn relayed(sources: &[Source]) -> Vec<Relayed> {
    sources
        .iter()
        .flat_map(|s| {
            s.partial.warnings.iter().map(|w| Relayed {
                from: format!("shard {}", s.partial.shard),
                text: w.clone(),
            })
        })
        .collect()
}

/// The partials are of one run of this plan: each holds together, one digest, one count,
/// one start, each shard once, at most one keeper and it shard 0.
fn check(plan: &Plan, sources: &[Source]) -> Result<(), MergeError> {
    let first = sources.first().ok_or(MergeError::Empty)?;
    let mut shards: BTreeMap<u32, &str> = BTreeMap::new();
    let arrivals = crate::schedule::Schedule::new(&plan.load, plan.seed).count() as u64;
    for s in sources {
        let p = &s.partial;
        let inconsistent = |source| MergeError::Inconsistent {
            path: s.path.clone(),
            source,
        };
        super::consistent::partial(p).map_err(inconsistent)?;
        if p.plan.digest != plan.digest() {
            return Err(MergeError::OtherPlan {
                path: s.path.clone(),
                theirs: format!(
                    "plan `{}` (digest {}, seed {})",
                    p.plan.name, p.plan.digest, p.plan.seed
                ),
                ours: format!("{} (digest {})", plan.file.display(), plan.digest()),
            });
        }
        super::consistent::of_the_run(plan, arrivals, p).map_err(inconsistent)?;
        if p.shard.count != first.partial.shard.count {
            return Err(MergeError::OtherCount {
                path: s.path.clone(),
                shard: p.shard,
                other: first.path.clone(),
                count: first.partial.shard.count,
            });
        }
        if parse_time(&p.start_at).ok() != parse_time(&first.partial.start_at).ok() {
            return Err(MergeError::OtherStart {
                path: s.path.clone(),
                theirs: p.start_at.clone(),
                other: first.path.clone(),
                ours: first.partial.start_at.clone(),
            });
        }
        if let Some(other) = shards.insert(p.shard.index, &s.path) {
            return Err(MergeError::Duplicate {
                path: s.path.clone(),
                other: other.to_owned(),
                shard: p.shard,
            });
        }
        for policy in &p.policies {
            if !plan.policies.iter().any(|q| q.name == policy.name) {
                return Err(MergeError::UnknownPolicy {
                    path: s.path.clone(),
                    policy: policy.name.clone(),
                });
            }
        }
    }
    let keepers: Vec<&Source> = sources.iter().filter(|s| s.partial.keeper).collect();
    if let [one, other, ..] = keepers.as_slice() {
        return Err(MergeError::TwoKeepers {
            path: one.path.clone(),
            other: other.path.clone(),
        });
    }
    if let Some(k) = keepers.first().filter(|k| !k.partial.shard.is_keeper()) {
        return Err(MergeError::KeeperNotFirst {
            path: k.path.clone(),
            shard: k.partial.shard,
        });
    }
    Ok(())
}

/// One policy's run over every shard that ran it.
fn merged_run(ran: &[(&Source, &PartialPolicy)]) -> Result<PolicyRun, MergeError> {
    let mut merged: Option<Recorder> = None;
    let mut states: Vec<(Option<f64>, Option<BreakerState>)> = Vec::new();
    let mut connects: Option<Connects> = None;
    let mut allowed = 0.0;
    let mut bound: Option<f64> = None;
    let mut run = PolicyRun {
        recorder: Recorder::default(),
        budget_bound: None,
        breaker_trips: 0,
        elapsed: Duration::ZERO,
        aborted: false,
        gone: None,
    };
    for (source, p) in ran {
        let mut r =
            Recorder::from_saved(&p.recorder).map_err(|source_error| MergeError::Saved {
                path: source.path.clone(),
                policy: p.name.clone(),
                source: source_error,
            })?;
        // The states sampled each second: no exact sum, so summed (tokens) and the most
        // open (breaker).
        if states.len() < r.series.len() {
            states.resize(r.series.len(), (None, None));
        }
        for (state, second) in states.iter_mut().zip(&r.series) {
            if let Some(tokens) = second.budget_tokens {
                state.0 = Some(state.0.unwrap_or(0.0) + tokens);
            }
            state.1 = most_open(state.1, second.breaker);
        }
        if let Some(c) = r.connects {
            let sum = connects.get_or_insert_with(Connects::default);
            sum.opened += c.opened;
            sum.peak_per_second += c.peak_per_second;
        }
        // The attempts a budget allows add up over the shards: its bound for the fleet
        // is their sum over the fleet's logical requests.
        if let Some(b) = p.budget_bound {
            allowed += b * r.logical as f64;
            bound = Some(bound.map_or(b, |x: f64| x.max(b)));
        }
        run.breaker_trips += p.breaker_trips;
        run.elapsed = run.elapsed.max(Duration::from_millis(p.elapsed_ms));
        run.aborted |= p.aborted;
        if run.gone.is_none() {
            run.gone.clone_from(&p.gone);
        }
        match &mut merged {
            None => merged = Some(r),
            Some(m) => m.absorb(&mut r),
        }
    }
    let mut recorder = merged.unwrap_or_default();
    for (second, (tokens, breaker)) in recorder.series.iter_mut().zip(states) {
        second.budget_tokens = tokens;
        second.breaker = breaker;
    }
    recorder.connects = connects;
    run.budget_bound = match (bound, recorder.logical) {
        (Some(_), logical) if logical > 0 => Some(allowed / logical as f64),
        (b, _) => b,
    };
    run.recorder = recorder;
    Ok(run)
}

fn most_open(a: Option<BreakerState>, b: Option<BreakerState>) -> Option<BreakerState> {
    let rank = |s: BreakerState| match s {
        BreakerState::Closed => 0,
        BreakerState::HalfOpen => 1,
        BreakerState::Open => 2,
    };
    match (a, b) {
        (Some(x), Some(y)) => Some(if rank(y) > rank(x) { y } else { x }),
        (x, y) => x.or(y),
    }
}

/// Each tier's counts summed over the shards (each started its own instance of it).
fn merged_tiers(ran: &[(&Source, &PartialPolicy)]) -> Vec<HopCounts> {
    let mut tiers: Vec<HopCounts> = Vec::new();
    for (_, p) in ran {
        if tiers.len() < p.tiers.len() {
            tiers.resize(p.tiers.len(), HopCounts::default());
        }
        for (mine, theirs) in tiers.iter_mut().zip(&p.tiers) {
            mine.absorb(theirs.clone());
        }
    }
    tiers
}

#[cfg(test)]
pub(crate) mod tests {
    use std::path::Path;
    use std::time::Duration;

    use chaos_policy::{GiveUp, Outcome, Verdict};

    use super::{MergeError, Source, merge};
    use crate::plan::Plan;
    use crate::shard::Shard;
    use crate::shard::partial::{PARTIAL_SCHEMA, Partial, PartialPlan, PartialPolicy};
    use crate::stats::Recorder;

    pub(crate) const PLAN: &str = "name: even
seed: 11
duration: 1s
drain: 1s
target: { url: \"http://127.0.0.1:1\", fault_server: true }
load:
  rate: 300
  requests:
    - { name: read, method: GET, path: \"/items/{n}\" }
policies:
  - { name: plain, max_attempts: 3, attempt_timeout: 1s, backoff: { fixed: 10ms } }
gates:
  - no_duplicate_side_effects
";

    pub(crate) fn plan() -> Plan {
        crate::plan::parse(Path::new("even.yaml"), PLAN).expect("a valid plan")
    }

    /// A recorder of `n` requests: every third fails once with a 503 and gives up.
    pub(crate) fn recorder(n: u64) -> Recorder {
        let mut r = Recorder::new(None);
        for i in 0..n {
            let at = Duration::from_millis(i * 3);
            r.arrived(at, Duration::ZERO);
            r.sent(at, at, false, &format!("r-{i}"), std::iter::empty());
            if i % 3 == 0 {
                r.attempt_done(Outcome::Status(503), Duration::from_millis(2), false);
                let verdict = Verdict::GaveUp {
                    reason: GiveUp::MaxAttempts,
                    attempts: 1,
                    last: None,
                };
                r.finished(at, Duration::from_millis(2), &verdict);
            } else {
                r.attempt_done(Outcome::Status(200), Duration::from_millis(2), false);
                r.finished(
                    at,
                    Duration::from_millis(2),
                    &Verdict::Succeeded { attempts: 1 },
                );
            }
        }
        r
    }

    pub(crate) fn partial(plan: &Plan, shard: Shard, recorder: &Recorder) -> Partial {
        Partial {
            schema: PARTIAL_SCHEMA.to_owned(),
            plan: PartialPlan {
                name: plan.name.clone(),
                file: "even.yaml".into(),
                seed: 11,
                digest: plan.digest(),
                target: "http://127.0.0.1:1".into(),
            },
            shard,
            start_at: "2026-12-07T08:00:00.000Z".into(),
            finished_at: "2026-12-07T08:01:00.000Z".into(),
            keeper: shard.index == 0,
            policies: vec![PartialPolicy {
                name: "plain".into(),
                recorder: recorder.saved(),
                budget_bound: None,
                breaker_trips: 0,
                elapsed_ms: 1000,
                aborted: false,
                gone: None,
                ledger: None,
                tiers: Vec::new(),
            }],
            aborted: false,
            error: None,
            warnings: Vec::new(),
            faults: None,
            faults_from: String::new(),
        }
    }

    fn sources(plan: &Plan, n: u32) -> Vec<Source> {
        (0..n)
            .map(|index| Source {
                path: format!("shard-{index}.json"),
                partial: partial(plan, Shard { index, count: n }, &recorder(30)),
            })
            .collect()
    }

    #[test]
    fn consistent_partials_merge() {
        let plan = plan();
        let report = merge(&plan, sources(&plan, 2)).expect("merges");
        assert_eq!(report.error, None);
    }

    #[test]
    fn two_keepers_are_refused_naming_both() {
        let plan = plan();
        let mut s = sources(&plan, 3);
        s[2].partial.keeper = true;
        let e = merge(&plan, s).expect_err("two keepers");
        assert!(matches!(e, MergeError::TwoKeepers { .. }), "{e}");
        let text = e.to_string();
        assert!(
            text.contains("shard-0.json") && text.contains("shard-2.json"),
            "{text}"
        );
    }

    #[test]
    fn a_keeper_that_is_not_shard_0_is_refused() {
        let plan = plan();
        let mut s = sources(&plan, 2);
        s[0].partial.keeper = false;
        s[1].partial.keeper = true;
        let e = merge(&plan, s).expect_err("keeper not shard 0");
        assert!(matches!(e, MergeError::KeeperNotFirst { .. }), "{e}");
    }

    #[test]
    fn without_a_keeper_the_merge_is_incomplete() {
        let plan = plan();
        let mut s = sources(&plan, 2);
        s[0].partial.keeper = false;
        let report = merge(&plan, s).expect("merges");
        let error = report.error.expect("incomplete");
        assert!(error.contains("no partial is the keeper's"), "{error}");
    }

    #[test]
    fn counts_that_overflow_a_u64_are_refused_not_wrapped() {
        let plan = plan();
        let mut s = sources(&plan, 2);
        // Not `logical`: no partial holds more arrivals than the plan's schedule deals it.
        for source in &mut s {
            source.partial.policies[0].recorder.cut = u64::MAX / 2 + 1;
        }
        let e = merge(&plan, s).expect_err("overflows");
        let text = e.to_string();
        assert!(
            text.contains("policies[plain].recorder.cut adds up to more than 2^64 - 1"),
            "{text}"
        );
        assert!(text.contains("shard-0.json, shard-1.json"), "{text}");
    }

    /// Partials whose counts hold together, of a run that did not happen: each is refused
    /// naming the file and the field.
    #[test]
    fn a_partial_of_a_run_that_did_not_happen_is_refused() {
        let plan = plan();
        let refused = |edit: &dyn Fn(&mut Partial)| {
            let mut s = sources(&plan, 2);
            edit(&mut s[1].partial);
            merge(&plan, s).expect_err("refused").to_string()
        };
        type Edit<'a> = &'a dyn Fn(&mut Partial);
        let cases: [(Edit, &str); 8] = [
            (
                &|p| {
                    let second = p.policies[0].recorder.series[0].clone();
                    let zero = crate::stats::SavedSecond {
                        offered: 0,
                        scheduled_attempts: 0,
                        unfinished: 0,
                        dropped: 0,
                        attempts: 0,
                        retries: 0,
                        succeeded: 0,
                        failed: 0,
                        ..second
                    };
                    p.policies[0].recorder.series.resize(20, zero);
                },
                "shard-1.json: policies[plain].series has 20 seconds, more than the 8",
            ),
            (&|p| p.plan.seed = 12, "shard-1.json: plan.seed is 12"),
            (
                &|p| p.plan.name = "odd".into(),
                "shard-1.json: plan.name is `odd`",
            ),
            (
                &|p| p.plan.target.clear(),
                "shard-1.json: plan.target is empty",
            ),
            (
                &|p| p.finished_at.clear(),
                "shard-1.json: finished_at is ``",
            ),
            (
                &|p| p.finished_at = p.start_at.clone(),
                "shard-1.json: finished_at is `2026-12-07T08:00:00.000Z`",
            ),
            (
                &|p| p.policies[0].elapsed_ms = 0,
                "shard-1.json: policies[plain].elapsed_ms is 0",
            ),
            (
                &|p| p.policies[0].elapsed_ms = 3_600_000,
                "shard-1.json: policies[plain].elapsed_ms is 3600000",
            ),
        ];
        for (edit, said) in cases {
            let text = refused(edit);
            assert!(text.starts_with(said), "{said}: {text}");
        }
        // A shard the run never had: 300 arrivals dealt to 400 shards leave shard 350
        // nothing, and its hand-made partial, consistent in itself, says it sent 30.
        let keeper = partial(
            &plan,
            Shard {
                index: 0,
                count: 400,
            },
            &recorder(1),
        );
        let mut s = vec![Source {
            path: "shard-0.json".into(),
            partial: keeper,
        }];
        let mut extra = partial(
            &plan,
            Shard {
                index: 350,
                count: 400,
            },
            &recorder(30),
        );
        extra.keeper = false;
        s.push(Source {
            path: "shard-350.json".into(),
            partial: extra,
        });
        let text = merge(&plan, s).expect_err("refused").to_string();
        assert!(
            text.starts_with("shard-350.json: policies[plain].logical and dropped count 30 arrivals, and the plan's schedule deals shard 350/400 only 0 of its"),
            "{text}"
        );
    }

    #[test]
    fn an_inconsistent_partial_is_refused_naming_file_and_field() {
        let plan = plan();
        let mut s = sources(&plan, 2);
        s[1].partial.policies[0].recorder.failed = 0;
        let text = merge(&plan, s).expect_err("inconsistent").to_string();
        assert_eq!(
            text,
            "shard-1.json: policies[plain].failed is 0 but give_ups (10) and unfinished (0) count 10 failed requests"
        );
    }
}
