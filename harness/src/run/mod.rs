//! Running a plan: set up the target, run each policy on a freshly reset server with the
//! same seed, reconcile with the ledger, and build the report.

use std::time::{Duration, SystemTime};

use fault_server::ledger::LedgerSnapshot;
use fault_server::script::Script;
use fault_server::{ServerConfig, ServerHandle};
use tokio_util::sync::CancellationToken;

use crate::control;
pub use crate::control::ControlError;
use crate::engine::{self, EngineConfig, PolicyRun, Progress};
use crate::plan::{NamedPolicy, Plan, Target, select};
use crate::report::{self, Draft, Ending, FaultsInForce, Mode, PolicyOutcome, Report, RunContext};
use crate::schedule::Schedule;
use crate::shard::{self, Shard, Sharding};

mod real_proxy;
mod shard_run;
mod tiers;
pub use shard_run::run_shard;
use shard_run::{reset_for, wait_for};

/// Why a run could not be carried out (exit code 3).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("cannot start the embedded fault-server: {0}")]
    Embedded(String),
    #[error("target {url} is unreachable: {detail}")]
    Unreachable { url: String, detail: String },
    #[error(transparent)]
    Control(#[from] ControlError),
    #[error("cannot build the HTTP client: {0}")]
    Client(String),
    #[error(transparent)]
    UnknownPolicy(#[from] crate::plan::UnknownPolicy),
    #[error("cannot start relay tier: {0}")]
    Relay(String),
    #[error(
        "shard {shard} reached policy `{policy}`'s start ({at}) {:.1} s late: its arrivals would be skewed against the other shards', so it did not run",
        late.as_secs_f64()
    )]
    Late {
        shard: Shard,
        policy: String,
        at: String,
        late: Duration,
    },
    #[error("policy `{policy}`: {source}")]
    Engine {
        policy: String,
        source: crate::engine::EngineError,
    },
}

/// Makes the progress callback of each policy's run.
pub type ProgressFactory = std::sync::Arc<dyn Fn(&NamedPolicy, &Plan) -> Progress + Send + Sync>;

#[derive(Clone, Default)]
pub struct RunOptions {
    /// Run only these policies (all when empty).
    pub policies: Vec<String>,
    /// Cancelled on Ctrl-C / SIGTERM.
    pub abort: CancellationToken,
    /// Builds a progress callback for each policy as it starts.
    pub progress: Option<ProgressFactory>,
    /// Says on stderr which policy starts, against which URL.
    pub announce: bool,
    /// Traces and metrics, when the run exports them (the embedded fault-server's spans
    /// included).
    pub telemetry: Option<std::sync::Arc<crate::telemetry::Telemetry>>,
    /// This process's shard of a sharded run, and the run's common start.
    pub sharding: Option<Sharding>,
}

impl std::fmt::Debug for RunOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunOptions")
            .field("policies", &self.policies)
            .finish_non_exhaustive()
    }
}

/// The server a run drives: started here, running elsewhere, or a black box.
enum Server {
    Embedded(ServerHandle),
    Remote { url: String, token: Option<String> },
    BlackBox { url: String },
}

impl Server {
    fn url(&self) -> String {
        match self {
            Server::Embedded(h) => h.url(),
            Server::Remote { url, .. } | Server::BlackBox { url } => url.clone(),
        }
    }

    /// Every peer's URL, peer 1 first: the embedded server's peers, or the one URL of a
    /// server started elsewhere. Hops that are not proxies send to the first.
    fn peer_urls(&self) -> Vec<String> {
        match self {
            Server::Embedded(h) => h.peer_urls(),
            Server::Remote { .. } | Server::BlackBox { .. } => vec![self.url()],
        }
    }
}

/// Every selected policy of a plan, measured and each kept as `T` (what the caller needs of
/// it), and how the run ended.
struct Measurements<T> {
    policies: Vec<T>,
    aborted: bool,
    /// What stopped the run before its end, once something was measured.
    error: Option<String>,
    /// What the run did about a running fault-server's own script, and whether it was put
    /// back.
    faults: Faults,
}

/// Runs every selected policy of `plan` and builds the report.
pub async fn run(plan: &Plan, options: &RunOptions) -> Result<Report, RunError> {
    Ok(run_measured(plan, options).await?.build(plan))
}

/// Runs every selected policy of `plan`: what [`run`] builds its report of.
pub async fn run_measured(plan: &Plan, options: &RunOptions) -> Result<Draft, RunError> {
    // Each policy's report is made as the policy ends, and its recorder (four histograms,
    // ~790 KB) dropped then: a plan of many policies holds one recorder at a time.
    let measured = measure(plan, options, |outcome| {
        report::policy_report(plan, Mode::Live, outcome)
    })
    .await?;
    let (_, generated_at) = report::timestamp(SystemTime::now());
    let (faults, warning) = measured.faults.said();
    let context = RunContext {
        faults,
        warnings: warning.into_iter().collect(),
        ..RunContext::new(
            Mode::Live,
            Ending {
                aborted: measured.aborted,
                error: measured.error,
                generated_at,
            },
        )
    };
    Ok(Draft {
        policies: measured.policies,
        context,
    })
}

/// Runs every selected policy of `plan`, each on a freshly reset server (on a sharded
/// run, each in its slot of the common timeline), and turns each outcome into what the
/// caller keeps of it (`keep`) as soon as that policy has run, before the next one starts,
/// so that no policy's recorder outlives its run.
async fn measure<'a, T>(
    plan: &'a Plan,
    options: &RunOptions,
    mut keep: impl FnMut(PolicyOutcome<'a>) -> T,
) -> Result<Measurements<T>, RunError> {
    let selected = select(plan, &options.policies)?;
    let setup = set_up(plan, options).await?;
    let mut policies = Vec::new();
    let mut aborted = false;
    // What stopped the run before its end, once something was measured: the report is
    // still written, with every policy that ran.
    let mut error: Option<String> = None;
    for (k, policy) in selected.into_iter().enumerate() {
        if options.abort.is_cancelled() {
            aborted = true;
            break;
        }
        match run_policy(&setup, plan, policy, k, options).await {
            Ok(measured) => {
                aborted |= measured.outcome.run.aborted;
                error = measured.error;
                policies.push(keep(measured.outcome));
            }
            Err(e) if policies.is_empty() => return Err(e),
            Err(e) => error = Some(e.to_string()),
        }
        if aborted || error.is_some() {
            break;
        }
    }
    // The server's own script back, as it was, whatever happened.
    let restored = match (&setup.decision, setup.remote()) {
        (
            Some(control::Decision::Replace(theirs) | control::Decision::Install(theirs)),
            Some(remote),
        ) => Some(remote.restore(theirs).await.map_err(|e| e.to_string())),
        _ => None,
    };
    let decision = setup.decision.clone();
    if let Server::Embedded(handle) = setup.server {
        handle.shutdown().await;
    }
    Ok(Measurements {
        policies,
        aborted,
        error,
        faults: Faults { decision, restored },
    })
}

/// What a run did about a running fault-server's own script.
struct Faults {
    decision: Option<control::Decision>,
    restored: Option<Result<(), String>>,
}

impl Faults {
    /// Which faults were in force and where they came from, when not the plan's alone:
    /// a running fault-server's own (kept), or the plan's in place of the server's, which
    /// earns a warning.
    fn said(&self) -> (FaultsInForce, Option<String>) {
        let mut said = FaultsInForce::default();
        let mut warning = None;
        match &self.decision {
            Some(control::Decision::Keep(theirs)) => {
                said.phases = Some(theirs.spec.phase_names());
                said.from = Some(format!(
                    "the fault-server's own script, kept as the plan says (`script: keep`; {}: {})",
                    theirs.origin,
                    theirs.describe()
                ));
            }
            Some(control::Decision::Replace(theirs)) => {
                let back = match &self.restored {
                    Some(Ok(())) => "put back after the run".to_owned(),
                    Some(Err(e)) => format!("NOT put back: {e}"),
                    None => "not put back".to_owned(),
                };
                said.from = Some(format!(
                    "the plan, in place of the fault-server's own script ({}), {back}",
                    theirs.describe()
                ));
                warning = Some(format!(
                    "the fault-server's own script ({}: {}) was replaced by the plan's for this run (`script: replace`) and {back}",
                    theirs.origin,
                    theirs.describe()
                ));
            }
            Some(control::Decision::Install(theirs)) => {
                said.from = Some("the plan, installed on the running fault-server".to_owned());
                if let Some(Err(e)) = &self.restored {
                    warning = Some(format!(
                        "the fault-server's script from before the run ({}: {}) was NOT put back: {e}; the plan's faults may still be in force there",
                        theirs.origin,
                        theirs.describe()
                    ));
                }
            }
            None => {}
        }
        (said, warning)
    }
}

/// The target of a run, ready for its first policy.
struct Setup {
    server: Server,
    /// For the fault-server's control API; never retries, never follows a redirect.
    control: reqwest::Client,
    /// The plan's script, set again for each policy.
    script: Script,
    /// What the run does about a running fault-server's own script.
    decision: Option<control::Decision>,
}

impl Setup {
    /// The running fault-server's control API, if the target is one.
    fn remote(&self) -> Option<control::Remote<'_>> {
        match &self.server {
            Server::Remote { url, token } => Some(control::Remote {
                client: &self.control,
                url,
                token: token.as_deref(),
            }),
            _ => None,
        }
    }
}

/// Starts the embedded fault-server as `peers` peers of one service (one ledger, one
/// script): their URLs, peer 1 first, are [`Server::peer_urls`].
async fn start_embedded(
    plan: &Plan,
    options: &RunOptions,
    script: &Script,
    peers: u32,
) -> Result<ServerHandle, RunError> {
    let config = ServerConfig {
        script: script.clone(),
        seed: plan.seed,
        tracing: options.telemetry.as_ref().map(|t| t.server_tracing()),
        upstream: plan.target.upstream().cloned(),
        peers,
        ..ServerConfig::default()
    };
    fault_server::start(config)
        .await
        .map_err(|e| RunError::Embedded(e.to_string()))
}

/// Starts the embedded fault-server, or makes sure the remote one or the black box is
/// there.
async fn set_up(plan: &Plan, options: &RunOptions) -> Result<Setup, RunError> {
    let control = reqwest::Client::builder()
        .retry(reqwest::retry::never())
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .timeout(Duration::from_secs(10))
        .build()
        .map_err(|e| RunError::Client(e.to_string()))?;
    let script =
        Script::from_spec(plan.script.clone()).map_err(|e| RunError::Embedded(e.to_string()))?;
    let mut decision = None;
    let server = match &plan.target {
        Target::Embedded | Target::Proxy { .. } => {
            if let Some(upstream) = plan.target.upstream() {
                // A service that is not there fails the run now, not as 502s in it.
                connect(&upstream.to_string()).await?;
            }
            // As many peers as the proxy tier above it has servers (every policy has the
            // same proxy tiers).
            let peers = plan
                .policies
                .first()
                .map_or(1, |p| p.peers_of(p.tiers.len()));
            Server::Embedded(start_embedded(plan, options, &script, peers).await?)
        }
        Target::FaultServer { url, token, script } => {
            let remote = control::Remote {
                client: &control,
                url,
                token: token.as_deref(),
            };
            remote.recognise().await?;
            // Of a sharded run's shards, only the keeper scripts the server.
            if options.sharding.is_none_or(|s| s.shard.is_keeper()) {
                let in_force = remote.in_force().await?;
                decision = Some(control::decide(in_force, &plan.script, *script, url)?);
            }
            Server::Remote {
                url: url.clone(),
                token: token.clone(),
            }
        }
        Target::BlackBox { url } => {
            connect(url).await?;
            Server::BlackBox { url: url.clone() }
        }
    };
    Ok(Setup {
        server,
        control,
        script,
        decision,
    })
}

/// One policy's run, measured, and what stopped the whole run there, if anything did.
struct Measured<'a> {
    outcome: PolicyOutcome<'a>,
    error: Option<String>,
}

/// Runs one policy on a freshly reset server, through its relay tiers if it has any, and
/// reads back what the tiers and the server counted. An error means nothing of this
/// policy was measured.
async fn run_policy<'a>(
    setup: &Setup,
    plan: &'a Plan,
    policy: &'a NamedPolicy,
    k: usize,
    options: &RunOptions,
) -> Result<Measured<'a>, RunError> {
    let sharding = options.sharding;
    match sharding {
        None => reset(setup, plan).await?,
        Some(s) if s.shard.is_keeper() => {
            let at = s.policy_start(plan, k);
            wait_for(at.checked_sub(shard::LEAD).unwrap_or(at), &options.abort).await;
            reset_for(setup, plan, at).await?;
        }
        Some(_) => {}
    }
    let relays = tiers::start(&setup.server, plan, policy, options).await?;
    if options.announce {
        tiers::announce(policy, &setup.server, &relays);
    }
    let entry = relays.first().map_or_else(
        || setup.server.url(),
        |outermost| outermost.url().to_owned(),
    );
    let config = EngineConfig {
        plan,
        policy,
        base_url: entry,
        abort: options.abort.clone(),
        progress: options.progress.as_ref().map(|p| p(policy, plan)),
        telemetry: options.telemetry.clone(),
    };
    let schedule = Schedule::new(&plan.load, plan.seed);
    let run = match sharding {
        None => engine::run_arrivals(config, schedule).await,
        Some(s) => {
            let at = s.policy_start(plan, k);
            wait_for(at, &options.abort).await;
            if let Some(late) = shard::late_for(at).filter(|late| *late > shard::SKEW) {
                for relay in relays {
                    relay.shutdown().await;
                }
                return Err(RunError::Late {
                    shard: s.shard,
                    policy: policy.name.clone(),
                    at: shard::format_time(at),
                    late,
                });
            }
            let shard = s.shard;
            engine::run_arrivals(config, schedule.filter(move |a| shard.takes(a))).await
        }
    }
    .map_err(|source| RunError::Engine {
        policy: policy.name.clone(),
        source,
    })?;
    let (mut tiers, proxies) = tiers::counts(relays, plan.drain).await;
    let read = match sharding {
        None => read_ledger(setup, plan.drain, &run).await,
        // The keeper reads once every shard's drain is over; the others read nothing.
        Some(s) if s.shard.is_keeper() => {
            wait_for(s.ledger_at(plan, k), &options.abort).await;
            read_ledger(setup, plan.drain, &run).await
        }
        Some(_) => Ok(None),
    };
    for proxy in proxies {
        proxy.shutdown().await;
    }
    let (ledger, error) = match read {
        // A script someone else installed during the run: its figures are not the
        // policy's, so the run stops here, INCOMPLETE, naming that script.
        Ok(ledger) => {
            let foreign = ledger.as_ref().and_then(LedgerSnapshot::foreign_script);
            (
                ledger,
                foreign.map(|why| format!("policy `{}`: {why}", policy.name)),
            )
        }
        Err(why) => (None, Some(why)),
    };
    let proxies = tiers::from_outside(policy, &run, &mut tiers, ledger.as_ref());
    if let Some(t) = &options.telemetry {
        for (relay, counts) in policy.tiers.iter().zip(&tiers) {
            t.meters().publish_tier(&policy.name, &relay.tier, counts);
        }
    }
    Ok(Measured {
        outcome: PolicyOutcome {
            policy,
            run,
            ledger,
            tiers,
            proxies,
        },
        error,
    })
}

/// The server's ledger of a policy's run (none from a black box) once the server has
/// finished what it was serving, or why there is none to read.
async fn read_ledger(
    setup: &Setup,
    drain: Duration,
    run: &PolicyRun,
) -> Result<Option<LedgerSnapshot>, String> {
    if let Some(gone) = &run.gone {
        // Nothing there to settle or to ask.
        return Err(gone.clone());
    }
    settle(&setup.server, &setup.control, drain).await;
    ledger(setup).await.map_err(|e| e.to_string())
}

/// Whether a black box accepts connections: a TCP connect, closed at once, so the target
/// receives no request beyond the plan's.
async fn connect(url: &str) -> Result<(), RunError> {
    let unreachable = |detail: String| RunError::Unreachable {
        url: url.to_owned(),
        detail,
    };
    let parsed = reqwest::Url::parse(url).map_err(|e| unreachable(e.to_string()))?;
    let addrs = parsed
        .socket_addrs(|| None)
        .map_err(|e| unreachable(e.to_string()))?;
    let mut last = String::from("no address");
    for addr in addrs {
        match tokio::time::timeout(Duration::from_secs(5), tokio::net::TcpStream::connect(addr))
            .await
        {
            Ok(Ok(_)) => return Ok(()),
            Ok(Err(e)) => last = format!("{addr}: {e}"),
            Err(_) => last = format!("{addr}: no answer to a TCP connect within 5 s"),
        }
    }
    Err(unreachable(last))
}

/// A fresh server for the next policy: the script again (which restarts its clock), or
/// the server's own kept, and an empty ledger.
async fn reset(setup: &Setup, plan: &Plan) -> Result<(), RunError> {
    if let Server::Embedded(handle) = &setup.server {
        handle.set_script(setup.script.clone());
        handle.reset();
    }
    if let Some(remote) = setup.remote() {
        if !matches!(setup.decision, Some(control::Decision::Keep(_))) {
            remote.install(&plan.script).await?;
        }
        remote.reset().await?;
    }
    Ok(())
}

/// Waits (at most `limit`) until the server has no request in progress: requests whose
/// client gave up are still served, and their side effects belong to this policy's ledger.
async fn settle(server: &Server, control: &reqwest::Client, limit: Duration) {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let busy = match server {
            Server::Embedded(handle) => handle.in_flight(),
            Server::Remote { url, token } => control::Remote {
                client: control,
                url,
                token: token.as_deref(),
            }
            .in_flight()
            .await
            .unwrap_or(0),
            Server::BlackBox { .. } => 0,
        };
        if busy == 0 || tokio::time::Instant::now() >= deadline {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn ledger(setup: &Setup) -> Result<Option<LedgerSnapshot>, RunError> {
    match &setup.server {
        Server::Embedded(handle) => Ok(Some(handle.ledger())),
        Server::Remote { .. } => match setup.remote() {
            Some(remote) => Ok(Some(remote.ledger().await?)),
            None => Ok(None),
        },
        Server::BlackBox { .. } => Ok(None),
    }
}
