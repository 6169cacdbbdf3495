//! `harness client-test PLAN -- COMMAND`: a program of the user's own (botocore, urllib3,
//! `curl --retry`, a service's client) run against the plan's faults, judged from what
//! the fault-server's ledger saw, with the same report, gates and exit codes as a run of
//! the harness's own policies.
//!
//! The fault-server runs in this process on 127.0.0.1:0 and judges (`Judging`): it
//! groups the program's attempts into logical requests by the headers real clients send,
//! or by a guess, and measures each retry. The program gets the URL as `{url}` in its
//! arguments and as `CHAOS_TARGET_URL`, and is stopped at the plan's `duration` plus
//! `drain`. [`judge`] turns the ledger into the report.

mod judge;
pub mod program;

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use fault_server::{LedgerSnapshot, Script, ServerConfig};

use crate::plan::Plan;

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
    let finished =
        tokio::task::spawn_blocking(move || program::run(line, &url, limit, &interrupted))
            .await
            .map_err(|e| ClientError::Supervisor(e.to_string()));
    // Read after the program (and whatever it started) has gone: nothing is in flight.
    let ledger = server.ledger();
    server.shutdown().await;
    Ok(Tested {
        program: finished??,
        ledger,
    })
}
