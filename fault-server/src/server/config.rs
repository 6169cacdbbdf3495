//! How to run a server: the listen address, the script and seed, the control token and
//! the limits, each default saying where its number comes from.

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use thiserror::Error;

use crate::ledger::{Judging, LedgerLimits};
use crate::otel::ServerTracing;
use crate::script::Script;

use crate::effect::DEFAULT_HANG_CAP;
use crate::upstream_url::Upstream;

/// How long a graceful shutdown waits for requests in progress (delays, queued and
/// served requests) before it closes their connections.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// How long a request's body may take once its headers are in: 1 MiB (the default body
/// limit) in 30 s is 35 KB/s, far below any real client, and a body trickled a byte a
/// second is cut.
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(30);

/// The largest request body read: 1 MiB (larger bodies get 413).
pub const DEFAULT_MAX_BODY: usize = 1 << 20;

/// The largest request head read: the request line, the header fields and the blank
/// line that ends them, 400 KiB (409,600 bytes). A longer head gets hyper's `431` and
/// its connection is closed, before any handler runs.
///
/// Why this figure: it is the "about 400 KB" the README always gave (hyper's read
/// buffer, `8192 + 4096 * 100` bytes, rounded down to whole KiB), far above what real
/// clients send and proxies pass (nginx 4 × 8 KiB, Envoy 60 KiB), so a client under test
/// is not refused for its headers here first; and above the 100,000-byte values of the
/// limit tests, so an over-long header the ledger keeps is still refused by name
/// (`LedgerLimits::max_value_bytes`). Why it is set at all: hyper's read buffer bounds a
/// head only while the head is incomplete, and one read may run past it (the buffer
/// grows by doubling): a head complete after that read was served, 450 KB and 500 KB
/// ones included.
pub const MAX_HEADER_BYTES: usize = 400 * 1024;

/// The most header fields a request may carry: 100, hyper's default (which the server
/// keeps rather than sets: setting it costs hyper work on every request). More get `431`
/// and the connection is closed.
pub const MAX_HEADERS: usize = 100;

/// Why a control token was refused: it would guard nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum TokenError {
    /// The token is the empty string (`--token ''`, or `FAULT_SERVER_TOKEN=` from a
    /// template whose variable was unset).
    #[error(
        "the control token is empty (a variable left unset?), and an empty token guards nothing; give a real token, or none at all"
    )]
    Empty,
    /// The token is whitespace or invisible characters only (any Unicode whitespace,
    /// control and format characters such as U+200B ZERO WIDTH SPACE): no client can
    /// present it reliably (spaces and tabs around a bearer credential are not part of
    /// it), nobody can read it back, and it is no secret.
    #[error(
        "the control token is only whitespace or invisible characters, which guards nothing; give a token of visible characters, or none at all"
    )]
    Blank,
}

/// Checks a control token: refused when empty, or when every character is invisible:
/// Unicode whitespace (`U+00A0`, `U+3000` and `U+0085` count), a control character, or a
/// format character that draws nothing ([`invisible`]). [`super::start`] applies it to
/// [`ServerConfig::token`]; the binary applies it to `--token` and `FAULT_SERVER_TOKEN`
/// before anything else.
pub fn check_token(token: &str) -> Result<(), TokenError> {
    if token.is_empty() {
        Err(TokenError::Empty)
    } else if token.chars().all(invisible) {
        Err(TokenError::Blank)
    } else {
        Ok(())
    }
}

/// A character that shows nothing: whitespace, a control character, or one of the
/// format characters (Unicode category Cf) a copied token picks up: zero-width spaces
/// and joiners, direction marks and embeddings, the word joiner and invisible operators,
/// the byte order mark, the soft hyphen, the Mongolian vowel separator.
fn invisible(c: char) -> bool {
    c.is_whitespace()
        || c.is_control()
        || matches!(
            c,
            '\u{00AD}'
                | '\u{180E}'
                | '\u{200B}'..='\u{200F}'
                | '\u{202A}'..='\u{202E}'
                | '\u{2060}'..='\u{2064}'
                | '\u{2066}'..='\u{206F}'
                | '\u{FEFF}'
        )
}

/// How to run a server.
#[derive(Clone)]
pub struct ServerConfig {
    /// Where to listen; `127.0.0.1:0` (loopback, a free port) by default.
    pub listen: SocketAddr,
    /// The fault script.
    pub script: Script,
    /// Seed for fault decisions (a script's own `seed:` does not override this one; a
    /// script installed later with a `seed:` does).
    pub seed: u64,
    /// A bearer token required by the control API (`/__chaos/`), if any. An empty or
    /// blank one is refused by [`super::start`] ([`check_token`]).
    pub token: Option<String>,
    /// The longest a `timeout` fault holds a request before closing its connection.
    pub hang_cap: Duration,
    /// How long [`super::ServerHandle::shutdown`] waits for requests in progress.
    pub shutdown_grace: Duration,
    /// The largest request body accepted.
    pub max_body: usize,
    /// How long a request's body may take once its headers are in.
    pub body_timeout: Duration,
    /// How much the ledger remembers.
    pub ledger: LedgerLimits,
    /// Connections open at once before the one idle longest is closed; `None`: as many as
    /// the descriptor limit allows ([`crate::fd_limit::connection_budget`], three
    /// descriptors a connection with an `upstream`).
    pub max_connections: Option<usize>,
    /// Serve the control API on a non-loopback address without a token. Off: such a
    /// server refuses to start, since anyone who can reach it could script and reset it.
    pub allow_open_control: bool,
    /// Where the server's spans go (one SERVER span per request, in the caller's trace);
    /// `None`: no tracing.
    pub tracing: Option<Arc<ServerTracing>>,
    /// Told, in a line, of every script installed over the control API (what replaced
    /// what, and who said so): the standalone binary writes it to stderr.
    pub script_log: Option<ScriptLog>,
    /// Group every attempt into its logical request by the headers real clients send
    /// (else a guess) and judge each retry (`ledger::retries`): on for `--judge`,
    /// `harness client-test` and a proxy in front of a service. Off, a request without an
    /// `x-request-id` is only counted.
    pub judging: Option<Judging>,
    /// The user's service to forward every request the script does not fault to
    /// (`--upstream`, a plan's `target: { upstream }`); `None`: the built-in application
    /// answers.
    pub upstream: Option<Upstream>,
    /// `SETTINGS_MAX_CONCURRENT_STREAMS` an HTTP/2 connection advertises: streams past it
    /// wait at the client (hyper's default, 200).
    pub max_concurrent_streams: u32,
    /// How many peers the server listens as (1..=[`crate::wire::MAX_PEERS`]): one
    /// service on that many sockets, with one ledger and one script, whose requests know
    /// the peer they came in at (a phase's `peer:`). The first listens on `listen`, the
    /// others on the ports after it (each on a free port of its own when `listen`'s is 0).
    pub peers: u32,
}

/// hyper's own default for an HTTP/2 server.
pub const DEFAULT_MAX_CONCURRENT_STREAMS: u32 = 200;

/// Where the server says that its script changed.
#[derive(Clone)]
pub struct ScriptLog(pub Arc<dyn Fn(&str) + Send + Sync>);

impl fmt::Debug for ScriptLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ScriptLog")
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            script: Script::empty(),
            seed: 0,
            token: None,
            hang_cap: DEFAULT_HANG_CAP,
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
            max_body: DEFAULT_MAX_BODY,
            body_timeout: DEFAULT_BODY_TIMEOUT,
            ledger: LedgerLimits::default(),
            max_connections: None,
            allow_open_control: false,
            tracing: None,
            script_log: None,
            judging: None,
            upstream: None,
            max_concurrent_streams: DEFAULT_MAX_CONCURRENT_STREAMS,
            peers: 1,
        }
    }
}

impl ServerConfig {
    /// The default configuration with this script (and the script's seed, if it has one).
    pub fn with_script(script: Script) -> ServerConfig {
        ServerConfig {
            seed: script.seed().unwrap_or(0),
            script,
            ..ServerConfig::default()
        }
    }
}

impl fmt::Debug for ServerConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerConfig")
            .field("listen", &self.listen)
            .field("script", &self.script)
            .field("seed", &self.seed)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("hang_cap", &self.hang_cap)
            .field("shutdown_grace", &self.shutdown_grace)
            .field("max_body", &self.max_body)
            .field("body_timeout", &self.body_timeout)
            .field("ledger", &self.ledger)
            .field("max_connections", &self.max_connections)
            .field("allow_open_control", &self.allow_open_control)
            .field("tracing", &self.tracing.is_some())
            .field("script_log", &self.script_log.is_some())
            .field("judging", &self.judging)
            .field("upstream", &self.upstream)
            .field("max_concurrent_streams", &self.max_concurrent_streams)
            .field("peers", &self.peers)
            .finish()
    }
}
