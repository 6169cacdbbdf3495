//! One shard of a sharded run: the run on the common timeline, its partial report, and
//! the keeper's reset ahead of each slot.

use std::time::{Duration, SystemTime};

use tokio_util::sync::CancellationToken;

use super::{RunError, RunOptions, Setup, measure};
use crate::control;
use crate::plan::Plan;
use crate::report::PolicyOutcome;
use crate::shard::{self, Shard, Sharding, partial::Partial};

/// Runs this process's shard of every selected policy of `plan` (`options.sharding`) on
/// the run's common timeline and returns its partial report, which `harness merge` folds
/// with the other shards'. A shard that cannot start says why in the partial's `error`.
pub async fn run_shard(plan: &Plan, options: &RunOptions) -> Partial {
    let Some(sharding) = options.sharding else {
        // The command line sets it; an unsharded call is one shard of one.
        let mut options = options.clone();
        options.sharding = Some(Sharding {
            shard: Shard { index: 0, count: 1 },
            start: SystemTime::now(),
        });
        return Box::pin(run_shard(plan, &options)).await;
    };
    let mut partial = Partial {
        schema: shard::partial::PARTIAL_SCHEMA.to_owned(),
        plan: shard::partial::PartialPlan {
            name: plan.name.clone(),
            file: plan.file.display().to_string(),
            seed: plan.seed,
            digest: plan.digest(),
            target: plan.target.url().unwrap_or("embedded").to_owned(),
        },
        shard: sharding.shard,
        start_at: shard::format_time(sharding.start),
        finished_at: String::new(),
        keeper: sharding.shard.is_keeper(),
        policies: Vec::new(),
        aborted: false,
        error: None,
        warnings: plan.warnings.iter().map(|w| w.message.clone()).collect(),
        faults: None,
        faults_from: String::new(),
    };
    // A partial keeps each policy's recorder whole, for an exact merge, but saved as the
    // policy ends (its histograms in V2, which writes a run of empty buckets as one
    // number), not live until the run's end.
    let save = |outcome: PolicyOutcome<'_>| shard::partial::PartialPolicy {
        name: outcome.policy.name.clone(),
        recorder: outcome.run.recorder.saved(),
        budget_bound: outcome.run.budget_bound,
        breaker_trips: outcome.run.breaker_trips,
        elapsed_ms: u64::try_from(outcome.run.elapsed.as_millis()).unwrap_or(u64::MAX),
        aborted: outcome.run.aborted,
        gone: outcome.run.gone,
        ledger: outcome.ledger,
        tiers: outcome.tiers,
    };
    match measure(plan, options, save).await {
        Ok(measured) => {
            partial.aborted = measured.aborted;
            partial.error = measured.error;
            if partial.keeper {
                let (said, warning) = measured.faults.said();
                partial.faults = Some(said.phases.unwrap_or_else(|| plan.script.phase_names()));
                if let Some(from) = said.from {
                    partial.faults_from = from;
                }
                partial.warnings.extend(warning);
            }
            partial.policies = measured.policies;
        }
        Err(e) => partial.error = Some(e.to_string()),
    }
    partial.finished_at = shard::format_time(SystemTime::now());
    partial.fit();
    partial
}

/// The keeper's reset before a sharded run's slot: the script again and an empty ledger
/// now, the server's run clock started at `at`, the slot's instant on every shard.
pub(super) async fn reset_for(setup: &Setup, plan: &Plan, at: SystemTime) -> Result<(), RunError> {
    let Some(remote) = setup.remote() else {
        // A black box has nothing to reset.
        return Ok(());
    };
    if !matches!(setup.decision, Some(control::Decision::Keep(_))) {
        remote.install(&plan.script).await?;
    }
    let delay = at
        .duration_since(SystemTime::now())
        .unwrap_or(Duration::ZERO);
    Ok(remote.reset_clock_in(delay).await?)
}

/// Sleeps until the wall-clock time `at`, or until the run is interrupted.
pub(super) async fn wait_for(at: SystemTime, abort: &CancellationToken) {
    tokio::select! {
        () = tokio::time::sleep_until(shard::instant_of(at)) => {}
        () = abort.cancelled() => {}
    }
}
