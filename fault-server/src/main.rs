//! `fault-server`: run the fault-server alone.
//!
//! ```text
//! fault-server --listen 127.0.0.1:8080 --script plans/outage.yaml [--seed N] [--token T]
//!              [--otlp http://127.0.0.1:4318]
//!              [--upstream http://127.0.0.1:9000[/base] [--upstream-timeout 30s] [--allow-remote]]
//!              [--threads N] [--max-concurrent-streams N]
//! ```
//!
//! One port speaks HTTP/1.1 and HTTP/2 with prior knowledge (h2c, as gRPC clients and
//! `curl --http2-prior-knowledge` do), told apart by the connection's first bytes.
//!
//! Exit codes (those of the harness): 0 stopped by Ctrl-C or SIGTERM after a graceful
//! shutdown; 2 the command line or the script is invalid (a non-loopback `--listen`
//! without `--token`, an empty or blank `--token` or `FAULT_SERVER_TOKEN`, and an
//! `--upstream` that is not http:// or, without `--allow-remote`, not on loopback,
//! included); 3 the server could not start (port taken, address not available).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use std::sync::Arc;

use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches, Parser};

// mimalloc, as in the harness: it is cheaper on allocations freed on another thread than
// made them. bench/server.sh gives the hello world it is measured against the same.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
use fault_server::otel::{self, OtelConfig, ServerTracing, SpanSink, Warn};
use fault_server::{
    Judging, Script, ScriptLog, ServerConfig, StartError, Upstream, check_token, format_duration,
    parse_duration, start,
};

/// An HTTP server that executes a scripted fault schedule, models finite capacity and
/// keeps a ledger of what it received and executed.
#[derive(Debug, Parser)]
#[command(name = "fault-server", version, about, long_about = None)]
struct Args {
    /// Address to listen on (loopback unless told otherwise; port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// A script or a whole plan (YAML or JSON); its `faults:`, `server:` and `seed:`
    /// are read. Without it the server injects no fault until `PUT /__chaos/script`.
    #[arg(long, value_name = "FILE")]
    script: Option<PathBuf>,
    /// Seed for fault decisions (default: the script's `seed:`, else a fresh one).
    #[arg(long)]
    seed: Option<u64>,
    /// Bearer token required by the control API (`/__chaos/`); an empty or blank one is
    /// refused.
    #[arg(long, env = fault_server::wire::TOKEN_VARIABLE, hide_env_values = true)]
    token: Option<String>,
    /// The longest a `timeout` fault holds a request before closing its connection.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    hang_cap: Duration,
    /// How long shutdown waits for requests in progress.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    shutdown_grace: Duration,
    /// Serve the control API on a non-loopback `--listen` without `--token` (anyone who
    /// can reach the port can then script, reset and read the server).
    #[arg(long)]
    allow_open_control: bool,
    /// Export a SERVER span per request to this OTLP/HTTP collector (e.g.
    /// http://127.0.0.1:4318), in the trace of the caller's `traceparent`. Without it,
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` and the other `OTEL_*` variables decide; with
    /// neither, no telemetry.
    #[arg(long, value_name = "ENDPOINT")]
    otlp: Option<String>,
    /// Group every attempt into its logical request without the client's help (by
    /// `x-request-id`, `Idempotency-Key`, `amz-sdk-invocation-id`, `--group-header`, else
    /// by method, path and body within `--group-window`) and judge each retry: backoff
    /// gaps, `Retry-After`, retries after permanent answers (`judged` in the ledger).
    #[arg(long)]
    judge: bool,
    /// A header that names the logical request, tried first (implies `--judge`).
    #[arg(long, value_name = "NAME")]
    group_header: Option<String>,
    /// How long after an attempt's answer an identical request counts as its retry.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    group_window: Duration,
    /// Forward every request the script does not fault to this service
    /// (http://HOST:PORT[/base-path]) and pass its answer back: a fault proxy in front of
    /// your own service. Loopback only, unless --allow-remote.
    #[arg(long, value_name = "URL")]
    upstream: Option<String>,
    /// How long the upstream may take to begin its answer before the client gets a 504.
    #[arg(long, default_value = "30s", value_parser = parse_duration, requires = "upstream")]
    upstream_timeout: Duration,
    /// Allow an --upstream that is not on loopback (load and faults are meant for machines
    /// you own).
    #[arg(long, requires = "upstream")]
    allow_remote: bool,
    /// Worker threads (default: one per core, or TOKIO_WORKER_THREADS). With 1 the server
    /// runs on one thread, as an nginx worker does: tokio's current-thread runtime, without
    /// the work-stealing machinery that one thread does not need.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    threads: Option<u16>,
    /// SETTINGS_MAX_CONCURRENT_STREAMS of an HTTP/2 connection: a client's streams past it
    /// wait at the client.
    #[arg(long, value_name = "N", default_value_t = fault_server::DEFAULT_MAX_CONCURRENT_STREAMS,
          value_parser = clap::value_parser!(u32).range(1..))]
    max_concurrent_streams: u32,
    /// Listen as N peers of one service (1 to 16): on N consecutive ports from --listen's
    /// (N free ports when it is 0), one ledger and one script for all; a fault phase's
    /// `peer: 2` faults only what arrives at the second. For a proxy in front with N
    /// `server` lines, in the order printed.
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=fault_server::wire::MAX_PEERS as i64))]
    peers: u32,
}

/// A failure with the exit code it maps to.
struct Failure {
    code: u8,
    message: String,
}

fn main() -> ExitCode {
    let matches = Args::command().get_matches();
    let args = Args::from_arg_matches(&matches).unwrap_or_else(|error| error.exit());
    // A token that guards nothing is refused before anything else happens, naming where
    // it came from: `FAULT_SERVER_TOKEN=` is the usual way to pass one by accident.
    if let Some(token) = &args.token
        && let Err(error) = check_token(token)
    {
        let from = match matches.value_source("token") {
            Some(ValueSource::EnvVariable) => fault_server::wire::TOKEN_VARIABLE,
            _ => "--token",
        };
        say(&format!("fault-server: {from}: {error}"));
        return ExitCode::from(2);
    }
    let mut builder = match args.threads {
        // Measured in front of nginx (bench/proxy.sh, one worker each): 12% more requests
        // a second than the multi-thread runtime with one worker.
        Some(1) => tokio::runtime::Builder::new_current_thread(),
        Some(threads) => {
            let mut builder = tokio::runtime::Builder::new_multi_thread();
            builder.worker_threads(usize::from(threads));
            builder
        }
        None => tokio::runtime::Builder::new_multi_thread(),
    };
    let runtime = match builder.enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            say(&format!(
                "fault-server: cannot start the async runtime: {error}"
            ));
            return ExitCode::from(3);
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            say(&format!("fault-server: {}", failure.message));
            ExitCode::from(failure.code)
        }
    }
}

async fn run(args: Args) -> Result<(), Failure> {
    raise_fd_limit(args.upstream.is_some());
    let script = match &args.script {
        None => Script::empty(),
        Some(path) => read_script(path)?,
    };
    let upstream = match &args.upstream {
        None => None,
        Some(url) => Some(
            Upstream::parse(url, args.allow_remote)
                .map_err(|error| Failure {
                    code: 2,
                    message: format!("--upstream: {error}"),
                })?
                .with_timeout(args.upstream_timeout),
        ),
    };
    let seed = args.seed.or(script.seed()).unwrap_or_else(fresh_seed);
    let mut describe = describe(&script);
    if let Some(upstream) = &upstream {
        describe.push_str(&format!(
            ", forwarding to {upstream} (timeout {})",
            format_duration(upstream.timeout())
        ));
    }
    let tracing = tracing(args.otlp.as_deref())?;
    let config = ServerConfig {
        listen: args.listen,
        script,
        seed,
        token: args.token,
        hang_cap: args.hang_cap,
        shutdown_grace: args.shutdown_grace,
        allow_open_control: args.allow_open_control,
        tracing: tracing.clone(),
        // An operator must be able to tell from the log that a run replaced the script
        // the server was started with.
        script_log: Some(ScriptLog(Arc::new(say))),
        judging: (args.judge || args.group_header.is_some()).then(|| Judging {
            header: args.group_header.map(|h| h.to_ascii_lowercase()),
            window: args.group_window,
            ..Judging::default()
        }),
        upstream,
        max_concurrent_streams: args.max_concurrent_streams,
        peers: args.peers,
        ..ServerConfig::default()
    };
    let server = start(config).await.map_err(start_failure)?;
    say(&format!(
        "fault-server listening on {} (seed {seed}; {describe})",
        server.url()
    ));
    // The first line stays what scripts read the address from; the peers follow it.
    if args.peers > 1 {
        for (peer, url) in (1..).zip(server.peer_urls()) {
            say(&format!("fault-server peer {peer} listening on {url}"));
        }
    }
    wait_for_signal().await;
    say("fault-server: shutting down");
    server.shutdown().await;
    if let Some(tracing) = tracing {
        flush_tracing(tracing).await;
    }
    Ok(())
}

/// Each connection costs two descriptors, three with an upstream: takes all the OS
/// allows, and says so when it is still little.
fn raise_fd_limit(upstream: bool) {
    match fault_server::fd_limit::raise() {
        Ok(limit) if limit < fault_server::fd_limit::LOW => say(&format!(
            "fault-server: warning: only {limit} file descriptors (the hard limit): about {} connections fit before the idlest are closed{}; raise it with `ulimit -Hn`",
            fault_server::fd_limit::connection_budget(limit, upstream),
            if upstream {
                " (three descriptors each with --upstream)"
            } else {
                ""
            }
        )),
        Ok(_) => {}
        Err(error) => say(&format!(
            "fault-server: warning: cannot raise the file-descriptor limit: {error}"
        )),
    }
}

/// The script `--script` names, read within the size a script may have.
fn read_script(path: &Path) -> Result<Script, Failure> {
    let limit = fault_server::script::MAX_SCRIPT_BYTES as u64;
    let bytes = fault_server::yaml_guard::read_bounded(path, limit)
        .map_err(|error| Failure {
            code: 2,
            message: format!("cannot read script {}: {error}", path.display()),
        })?
        .ok_or_else(|| Failure {
            code: 2,
            message: format!(
                "script {} is larger than {} KiB",
                path.display(),
                limit / 1024
            ),
        })?;
    let text = String::from_utf8(bytes).map_err(|_| Failure {
        code: 2,
        message: format!("script {} is not UTF-8 text", path.display()),
    })?;
    Script::from_yaml_str(&text).map_err(|error| Failure {
        code: 2,
        message: format!("invalid script {}: {error}", path.display()),
    })
}

/// Why the server did not start, with its exit code: 2 for a configuration the user must
/// change, 3 for an address that cannot be had.
fn start_failure(error: StartError) -> Failure {
    match &error {
        StartError::OpenControl { .. }
        | StartError::Token(_)
        | StartError::Peers { .. }
        | StartError::UpstreamIsSelf { .. } => Failure {
            code: 2,
            message: error.to_string(),
        },
        StartError::AddrInUse { .. } => Failure {
            code: 3,
            message: format!("{error}; pick another with --listen"),
        },
        StartError::Bind { .. } | StartError::PeerPorts { .. } => Failure {
            code: 3,
            message: error.to_string(),
        },
    }
}

/// Sends the spans still queued and says how many went and how many were lost. Bounded:
/// a collector that is gone costs at most the flush timeout.
async fn flush_tracing(tracing: Arc<ServerTracing>) {
    let counts = tokio::task::spawn_blocking(move || {
        tracing.shutdown(fault_server::otel::config::FLUSH_TIMEOUT)
    })
    .await
    .unwrap_or_default();
    say(&format!(
        "fault-server: {} span(s) exported, {} dropped",
        counts.exported, counts.dropped
    ));
}

/// The server's tracing, when `--otlp` or the environment asks for it.
fn tracing(flag: Option<&str>) -> Result<Option<Arc<ServerTracing>>, Failure> {
    let config =
        OtelConfig::resolve(flag, "fault-server", &otel::config::process_env).map_err(|error| {
            Failure {
                code: 2,
                message: error.to_string(),
            }
        })?;
    let Some(config) = config else {
        return Ok(None);
    };
    for warning in &config.warnings {
        say(&format!("fault-server: warning: {warning}"));
    }
    let warn = Warn::new(|message| say(&format!("fault-server: {message}")));
    let sink =
        SpanSink::new(&config, &config.service_name, "fault-server", warn).map_err(|error| {
            Failure {
                code: 2,
                message: error.to_string(),
            }
        })?;
    say(&format!(
        "fault-server: exporting spans to {}",
        config.traces_endpoint
    ));
    Ok(Some(Arc::new(ServerTracing::new(
        sink,
        config.sampling_ratio.unwrap_or(1.0),
    ))))
}

/// One line to stderr. Unlike `eprintln!`, a closed stderr (a supervisor that stopped
/// reading) is not a reason to panic.
fn say(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{line}");
}

fn describe(script: &Script) -> String {
    let mut parts = vec![format!("{} fault phase(s)", script.phase_count())];
    if let Some(capacity) = script.capacity() {
        parts.push(format!(
            "capacity {} + queue {}, service time {}",
            capacity
                .capacity
                .map_or_else(|| "unlimited".to_string(), |c| c.to_string()),
            capacity.queue,
            capacity.service_time
        ));
    }
    if let Some(end) = script.last_fault_end() {
        parts.push(format!(
            "last fault window ends at {}",
            format_duration(end)
        ));
    }
    parts.join(", ")
}

/// A seed when none was given: the clock's nanoseconds, mixed. Printed at start so a run
/// can be repeated.
fn fresh_seed() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    fault_server::seed::splitmix64(nanos ^ u64::from(std::process::id()))
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut terminate) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = terminate.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
