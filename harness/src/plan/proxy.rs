//! A proxy tier (`nginx` or `haproxy`): what the config a team deploys makes the proxy do
//! with a request, as plain data. `plan/import/nginx.rs` and `plan/import/haproxy.rs`
//! read it from the file (defaults included, each setting with the line that set it);
//! `hop/proxy.rs` carries it out, in the simulator, and the real binary is checked
//! against it (`just interop-stacks`).
//!
//! Why a model of its own and not a `PolicyConfig`: a proxy retries to another peer (or the
//! same), serially, with no backoff, under a tries limit and an overall cap, and ejects
//! peers that failed; a client policy does none of that.

use std::path::PathBuf;
use std::time::Duration;

/// Which proxy the config is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyKind {
    Nginx,
    Haproxy,
}

impl ProxyKind {
    pub fn name(self) -> &'static str {
        match self {
            ProxyKind::Nginx => "nginx",
            ProxyKind::Haproxy => "haproxy",
        }
    }
}

/// A proxy tier of a plan: the imported model, and the real binary a live run starts.
#[derive(Debug, Clone, PartialEq)]
pub struct ProxyTier {
    pub model: ProxyModel,
    /// The user's config file, as the plan names it (relative to the plan).
    pub file: PathBuf,
    /// Its text: a live run rewrites its upstream to the next hop's peers.
    pub text: String,
    /// The block the model was read from: an nginx `location` (its prefix) or an HAProxy
    /// `backend` (its name).
    pub block: String,
    /// The binary a live run starts, as the plan's `binary:` names it; `None`: the
    /// kind's name found on `PATH` or in `/usr/sbin`, looked for when the run starts (a
    /// plan validated on a laptop without nginx is still a valid plan).
    pub binary: Option<PathBuf>,
}

/// What a live run puts into a proxy tier's config: where it listens, the next hop's
/// peers (in the order of the config's servers), and its private directory.
#[derive(Debug, Clone, Copy)]
pub struct Rewrite<'a> {
    pub listen: std::net::SocketAddr,
    pub peers: &'a [std::net::SocketAddr],
    pub dir: &'a std::path::Path,
}

impl ProxyTier {
    /// The user's config as a live run gives it to the real binary (see
    /// `plan/import/rewrite.rs`), or why it cannot be, at its line.
    pub fn rewrite(&self, r: &Rewrite<'_>) -> Result<String, String> {
        let rewritten = match self.model.kind {
            ProxyKind::Nginx => super::import::rewrite::nginx(self, r),
            ProxyKind::Haproxy => super::import::rewrite::haproxy(self, r),
        };
        rewritten.map_err(|e| {
            format!(
                "{}:{}:{}: {}",
                self.file.display(),
                e.line,
                e.column,
                e.message
            )
        })
    }
}

/// Where a setting came from: the directive and its line in the config, or the default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    /// The directive as written (`proxy_next_upstream error timeout http_503`), or as the
    /// default reads (`proxy_next_upstream error timeout (default)`).
    pub directive: String,
    /// 1-based; `None` for a default.
    pub line: Option<usize>,
}

impl Source {
    pub fn default(directive: impl Into<String>) -> Source {
        Source {
            directive: format!("{} (default)", directive.into()),
            line: None,
        }
    }

    pub fn at(directive: impl Into<String>, line: usize) -> Source {
        Source {
            directive: directive.into(),
            line: Some(line),
        }
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.line {
            Some(line) => write!(f, "`{}` (line {line})", self.directive),
            None => write!(f, "`{}`", self.directive),
        }
    }
}

/// One upstream server (nginx `server`, HAProxy `server`): a peer of the next hop.
#[derive(Debug, Clone, PartialEq)]
pub struct Peer {
    /// The address as written (a live run replaces it with the next hop's peer).
    pub name: String,
    pub weight: u32,
    /// Passive ejection: after `max_fails` failed attempts within `fail_timeout`, the
    /// peer is not chosen for `fail_timeout` (nginx; 0: never). HAProxy ejects nothing
    /// without health checks: 0.
    pub max_fails: u32,
    pub fail_timeout: Duration,
    /// `backup`: chosen only when every other peer is out.
    pub backup: bool,
    pub line: usize,
}

/// What an attempt to a peer ended with, as a proxy tells its retry conditions apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The connection was refused or not made in time: nothing was sent.
    Connect,
    /// The connection closed or was reset before a response: a lost response.
    Lost,
    /// No response within the per-try timeout.
    Timeout,
    /// A complete response with this status.
    Status(u16),
}

/// The conditions a proxy retries on, each with the directive that set it.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryOn {
    /// Connection failures (nginx `error`, HAProxy `conn-failure`).
    pub connect: bool,
    /// A connection closed or reset before a response (nginx `error`, HAProxy
    /// `empty-response`).
    pub lost: bool,
    /// The per-try timeout (nginx `timeout`, HAProxy `response-timeout`).
    pub timeout: bool,
    /// Statuses retried (nginx `http_503`…, HAProxy `503`…).
    pub statuses: Vec<u16>,
    pub source: Source,
}

impl RetryOn {
    pub fn covers(&self, failure: Failure) -> bool {
        match failure {
            Failure::Connect => self.connect,
            Failure::Lost => self.lost,
            Failure::Timeout => self.timeout,
            Failure::Status(s) => self.statuses.contains(&s),
        }
    }
}

/// Which requests a proxy retries once they were sent to a peer. A connection failure
/// sent nothing, and is retried whatever the method.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Methods {
    /// nginx without `non_idempotent`: never a POST, LOCK or PATCH.
    Idempotent,
    /// nginx `non_idempotent`, HAProxy (no method check at all).
    Any,
}

/// Where a retry goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NextPeer {
    /// nginx: the next peer by the balancer, never one this request tried.
    Another,
    /// HAProxy without `option redispatch`: the same server, every time.
    Same,
    /// HAProxy `option redispatch [interval]`: a positive interval P sends every Pth retry
    /// to another server (the balancer's next, never the one just tried); a negative one
    /// -N, the Nth retry before the last (the default, -1: the last retry only). The other
    /// retries stay on the same server.
    Redispatch { interval: i32 },
}

/// What a proxy tier does with a request: everything its config says about retries,
/// defaults included, each with the line that set it.
#[derive(Debug, Clone, PartialEq)]
pub struct ProxyModel {
    pub kind: ProxyKind,
    pub peers: Vec<Peer>,
    pub retry_on: RetryOn,
    pub methods: Methods,
    pub methods_source: Source,
    /// The most attempts a request makes, the first included (nginx: the peers, limited by
    /// `proxy_next_upstream_tries`; HAProxy: `retries` + 1).
    pub tries: u32,
    pub tries_source: Source,
    /// How long one try waits for a response (nginx `proxy_read_timeout`, HAProxy
    /// `timeout server`).
    pub try_timeout: Duration,
    pub try_timeout_source: Source,
    /// How long a request may go on retrying, from its arrival (nginx
    /// `proxy_next_upstream_timeout`; `None`: no cap).
    pub overall: Option<Duration>,
    pub next_peer: NextPeer,
    pub next_peer_source: Source,
    /// How long the proxy waits before a retry after a connection failure (HAProxy: the
    /// turn-around, `min(timeout connect, 1s)`); zero: at once.
    pub turnaround: Duration,
    /// What the model approximates, each at its line: warnings for `validate`.
    pub approximations: Vec<Approximation>,
}

/// A directive whose effect the model approximates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Approximation {
    pub line: usize,
    pub directive: String,
    pub why: String,
}
