//! `harness client-test PLAN -- COMMAND`: a program of the user's own (botocore, urllib3,
//! `curl --retry`, a service's client) run against the plan's faults, judged from what
//! the fault-server's ledger saw, with the same report, gates and exit codes as a run of
//! the harness's own policies.
//!
//! The fault-server runs in this process on 127.0.0.1:0 and judges (`Judging`): it
//! groups the program's attempts into logical requests by the headers real clients send,
//! or by a guess, and measures each retry. The program gets the URL as `{url}` in its
//! arguments and as `CHAOS_TARGET_URL`, and is stopped, with every process it started
//! ([`tree`]), at the plan's `duration` plus `drain`. [`judge`] turns the ledger into the
//! report.

mod judge;
mod output;
pub mod program;
mod tree;

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use fault_server::{LedgerSnapshot, Script, ServerConfig};

use crate::plan::Plan;
use crate::report::SeriesPoint;

pub use judge::policy_report;
pub use program::{Ended, Finished};

/// Why a client test could not be carried out.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("the plan has no `client:` section: `harness client-test` judges a program against it")]
    NotAClientTest,
    #[error("cannot start the fault-server: {0}")]
    Server(String),
    #[error(transparent)]
    Spawn(#[from] program::SpawnError),
    #[error("the program's supervisor failed: {0}")]
    Supervisor(String),
}

/// What a client test measured: the program's end and output, and the ledger.
#[derive(Debug, Clone)]
pub struct Tested {
    pub program: Finished,
    pub ledger: LedgerSnapshot,
    /// Connections the server accepted, HTTP or not: the ledger counts only requests.
    pub connections: u64,
    /// What the ledger counted in each second of the run.
    pub series: Vec<SeriesPoint>,
}

/// Runs the program against the plan's faults and reads the ledger when it has ended.
pub async fn run(
    plan: &Plan,
    command: &[String],
    interrupted: Arc<AtomicBool>,
) -> Result<Tested, ClientError> {
    let test = plan.client.as_ref().ok_or(ClientError::NotAClientTest)?;
    let script =
        Script::from_spec(plan.script.clone()).map_err(|e| ClientError::Server(e.to_string()))?;
    let server = fault_server::start(ServerConfig {
        script,
        seed: plan.seed,
        judging: Some(test.judging.clone()),
        ..ServerConfig::default()
    })
    .await
    .map_err(|e| ClientError::Server(e.to_string()))?;
    let url = format!("http://{}", server.addr());
    let line = program::command_line(command, &url);
    let limit = plan.duration + plan.drain;
    let mut supervisor =
        tokio::task::spawn_blocking(move || program::run(line, &url, limit, &interrupted));
    // The ledger read once a second while the program runs: the report's timeline.
    let mut series = Vec::new();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    let mut last = Totals::default();
    let finished = loop {
        tokio::select! {
            finished = &mut supervisor => {
                break finished.map_err(|e| ClientError::Supervisor(e.to_string()));
            }
            _ = tick.tick() => {
                let now = Totals::of(&server.ledger());
                series.push(now.since(&last, series.len() as u64));
                last = now;
            }
        }
    };
    // Read after the program (and whatever it started) has gone: nothing is in flight.
    let ledger = server.ledger();
    let connections = server.connections_accepted();
    series.push(Totals::of(&ledger).since(&last, series.len() as u64));
    server.shutdown().await;
    Ok(Tested {
        program: finished??,
        ledger,
        connections,
        series,
    })
}

/// The ledger's running totals, for the per-second series.
#[derive(Debug, Default, Clone, Copy)]
struct Totals {
    logical: u64,
    attempts: u64,
    succeeded: u64,
}

impl Totals {
    fn of(l: &LedgerSnapshot) -> Totals {
        Totals {
            logical: l.logical,
            attempts: l.attempts,
            succeeded: l.judged.as_ref().map_or(0, |j| j.succeeded),
        }
    }

    /// The second `t`: what was counted since `before`.
    fn since(&self, before: &Totals, t: u64) -> SeriesPoint {
        let logical = self.logical.saturating_sub(before.logical);
        let attempts = self.attempts.saturating_sub(before.attempts);
        SeriesPoint {
            t,
            offered: logical,
            dropped: 0,
            attempts,
            succeeded: self.succeeded.saturating_sub(before.succeeded),
            failed: 0,
            retries: attempts.saturating_sub(logical),
            budget_tokens: None,
            breaker_open: false,
        }
    }
}
