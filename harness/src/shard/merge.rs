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
    // The plan's order; a policy any shard ran.
    let names: Vec<&str> = plan
        .policies
        .iter()
        .map(|p| p.name.as_str())
        .filter(|name| {
            sources
                .iter()
                .any(|s| s.partial.policies.iter().any(|p| p.name == *name))
        })
        .collect();
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

/// The partials are of one run of this plan: one digest, one count, one start, each
/// shard once.
fn check(plan: &Plan, sources: &[Source]) -> Result<(), MergeError> {
    let first = sources.first().ok_or(MergeError::Empty)?;
    let mut shards: BTreeMap<u32, &str> = BTreeMap::new();
    for s in sources {
        let p = &s.partial;
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
