//! One policy's run as the report takes it: its counts and how it ended, whichever shell
//! ran it (the live engine, the simulator, or shards merged).

use std::time::Duration;

use super::Recorder;

/// What one policy's run produced.
#[derive(Debug)]
pub struct PolicyRun {
    pub recorder: Recorder,
    /// The amplification the policy's budget permits for this run's counts.
    pub budget_bound: Option<f64>,
    pub breaker_trips: u64,
    /// How long the run took, arrivals and drain.
    pub elapsed: Duration,
    /// Stopped by the user before the end.
    pub aborted: bool,
    /// Stopped early because the target is plainly gone: why.
    pub gone: Option<String>,
}
