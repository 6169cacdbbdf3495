//! `harness relay`: one relay tier of a call chain as its own process.

use std::path::PathBuf;

use super::runtime::{self, Interrupts};
use super::{EXIT_CANNOT_RUN, EXIT_INVALID, EXIT_PASS};
use crate::plan;

#[derive(Debug, clap::Args)]
pub struct RelayArgs {
    /// Where to listen.
    #[arg(long, default_value = "127.0.0.1:8081")]
    pub listen: std::net::SocketAddr,
    /// The next hop: another relay or the fault-server (`http://127.0.0.1:8080`).
    #[arg(long, value_name = "URL")]
    pub to: String,
    /// The tier's retry policy: a YAML file with a plan's policy keys (`preset`, `import`,
    /// `max_attempts`, `backoff`, `budget`, `honor_no_retry`, ...). Without it the tier
    /// forwards once and never retries.
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
    /// The tier's name, in its answers and its counts.
    #[arg(long, default_value = "relay")]
    pub name: String,
    /// The longest the tier works on one request (every attempt and backoff) when neither
    /// its caller (`x-chaos-deadline-ms`) nor its policy's `deadline` sets a nearer one: a
    /// hung next hop holds no request for ever. Envoy's default route timeout.
    #[arg(long, default_value = "15s", value_name = "DURATION", value_parser = relay_timeout)]
    pub timeout: std::time::Duration,
    /// Seeds the jitter of each request, with its id.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Listen, or forward, outside loopback. Load and faults are for machines you own.
    #[arg(long)]
    pub allow_remote: bool,
    /// Connections served in full at once; past them the one idle longest is closed to
    /// make room. By default what the descriptor limit allows (three descriptors each).
    #[arg(long, value_name = "N")]
    pub max_connections: Option<std::num::NonZeroUsize>,
}

pub(super) fn relay(args: RelayArgs) -> u8 {
    let url = reqwest::Url::parse(&args.to)
        .ok()
        .filter(|u| u.scheme() == "http");
    let Some((url, host)) = url.and_then(|u| {
        let host = u.host_str()?.to_owned();
        Some((u, host))
    }) else {
        eprintln!("error: --to {} is not an http:// URL", args.to);
        eprintln!("  hint: e.g. --to http://127.0.0.1:8080");
        return EXIT_INVALID;
    };
    // A name is resolved as the tier's client will resolve it: `localhost` is 127.0.0.1.
    let to = url.socket_addrs(|| None).unwrap_or_default();
    if fault_server::wire::forwards_to_itself(args.listen, &to) {
        eprintln!(
            "error: --to {} is the relay's own --listen address ({}): every request would come back to it",
            args.to, args.listen
        );
        eprintln!(
            "  hint: point --to at the next hop (another relay or the fault-server, e.g. --to http://127.0.0.1:8080), or listen on another port"
        );
        return EXIT_INVALID;
    }
    if !args.listen.ip().is_loopback() && !args.allow_remote {
        eprintln!("error: --listen {} is not on loopback", args.listen);
        eprintln!(
            "  hint: a tier forwards whatever reaches it; pass --allow-remote to listen there anyway"
        );
        return EXIT_INVALID;
    }
    if !plan::is_loopback_host(&host) && !args.allow_remote {
        eprintln!("error: --to {} is not on loopback", args.to);
        eprintln!(
            "  hint: load and faults are for machines you own; pass --allow-remote to forward there anyway"
        );
        return EXIT_INVALID;
    }
    let policy = match &args.policy {
        Some(path) => match plan::load_policy(path) {
            Ok(policy) => policy,
            Err(e) => {
                eprintln!("error: {e}");
                return EXIT_INVALID;
            }
        },
        None => plan::forward_once(),
    };
    let policy = within(policy, args.timeout);
    let Some(runtime) = runtime::runtime(None) else {
        return EXIT_CANNOT_RUN;
    };
    runtime.block_on(async move {
        let signals = match Interrupts::install() {
            Ok(signals) => signals,
            Err(e) => {
                eprintln!("error: cannot listen for Ctrl-C: {e}");
                return EXIT_CANNOT_RUN;
            }
        };
        let summary = crate::report::describe_policy(&policy);
        let relay = match crate::relay::Relay::start(crate::relay::RelayConfig {
            name: args.name.clone(),
            next: args.to.clone(),
            policy,
            seed: args.seed,
            listen: args.listen,
            script: None,
            tracing: None,
            peers: 1,
            max_connections: args.max_connections.map(std::num::NonZeroUsize::get),
        })
        .await
        {
            Ok(relay) => relay,
            Err(e) => {
                eprintln!("error: {e}");
                eprintln!("  hint: pick another address with --listen");
                return EXIT_CANNOT_RUN;
            }
        };
        eprintln!(
            "relay `{}` on {} → {} ({summary})",
            args.name,
            relay.url(),
            args.to
        );
        signals.received().await;
        let c = relay.counts();
        relay.shutdown().await;
        eprintln!(
            "relay `{}`: received {} ({} logical), sent {} ({} retries), {} succeeded, {} gave up",
            args.name, c.received, c.logical, c.sent, c.retries, c.succeeded, c.gave_up
        );
        EXIT_PASS
    })
}

/// `--timeout`: a duration as a plan writes it, and more than zero.
fn relay_timeout(text: &str) -> Result<std::time::Duration, String> {
    match fault_server::duration::parse_duration(text)? {
        d if d.is_zero() => Err("a tier needs some time to forward: e.g. 15s".to_owned()),
        d => Ok(d),
    }
}

/// `policy` with its deadline no later than `timeout`.
fn within(policy: chaos_policy::Policy, timeout: std::time::Duration) -> chaos_policy::Policy {
    let mut config = policy.config().clone();
    config.deadline = Some(config.deadline.map_or(timeout, |d| d.min(timeout)));
    chaos_policy::Policy::new(config).expect("a positive deadline keeps a valid policy valid")
}
