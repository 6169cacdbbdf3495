//! The upstream as the user names it: `http://HOST[:PORT][/base-path]`, checked once at
//! start (the binary's `--upstream`, a harness plan's `target: { upstream }`), and the
//! rule that load goes only to machines you own.

use std::fmt;
use std::net::IpAddr;
use std::time::Duration;

#[cfg(feature = "server")]
use http::uri::PathAndQuery;
use http::uri::{Authority, Scheme, Uri};
use thiserror::Error;

/// How long the upstream may take to begin its answer (`--upstream-timeout`): 30 s,
/// above the attempt timeouts clients use (AWS SDKs and gRPC default to seconds) and
/// half nginx's `proxy_read_timeout` (60 s), so a hung service shows as a 504 well within
/// a run.
pub const DEFAULT_UPSTREAM_TIMEOUT: Duration = Duration::from_secs(30);

/// The user's service the fault-server forwards to: where it is, and how long it may take.
#[derive(Clone, PartialEq, Eq)]
pub struct Upstream {
    authority: Authority,
    /// The base path without its trailing slash: `""` or `/api`.
    base: String,
    timeout: Duration,
}

/// Why an upstream URL was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum UpstreamError {
    /// Not a URL at all.
    #[error("the upstream `{url}` is not a URL like `http://127.0.0.1:8080`: {reason}")]
    NotUrl {
        /// What was given.
        url: String,
        /// What the parser said.
        reason: String,
    },
    /// `https://`: the fault-server speaks plain HTTP to its upstream.
    #[error(
        "the upstream `{url}` is https://, and fault-server forwards plain http:// only (it does not speak TLS to the upstream): give the service's plain-HTTP address, e.g. `http://127.0.0.1:8080`"
    )]
    Https {
        /// What was given.
        url: String,
    },
    /// Another scheme, or none.
    #[error("the upstream `{url}` must start with http://, e.g. `http://127.0.0.1:8080`")]
    Scheme {
        /// What was given.
        url: String,
    },
    /// `user:password@` in the URL: credentials do not belong on a command line or in a
    /// plan, and the proxy would not send them anyway.
    #[error(
        "the upstream `{url}` carries credentials (`user@`); give the address alone, and let the client send its own Authorization header, which is forwarded"
    )]
    Credentials {
        /// What was given.
        url: String,
    },
    /// A query or a fragment: the upstream is an address and a base path, and every
    /// request brings its own query.
    #[error(
        "the upstream `{url}` has a query or a fragment; give the address and at most a base path, e.g. `http://127.0.0.1:8080/api`"
    )]
    Query {
        /// What was given.
        url: String,
    },
    /// A port that no socket has: 0, above 65535, or not a number. (Port 0 means "any
    /// free port" to a listener; to a client it reaches nothing, so every request would
    /// be answered 502.)
    #[error(
        "the upstream `{url}` names port `{port}`, which nothing can listen on: a port is 1 to 65535, e.g. `http://127.0.0.1:8080`"
    )]
    Port {
        /// What was given.
        url: String,
        /// The port as written.
        port: String,
    },
    /// Not on loopback, and remote upstreams were not allowed.
    #[error(
        "the upstream `{url}` is not on loopback (127.0.0.0/8, [::1] or localhost): load and faults go only to machines you own; pass --allow-remote if you really mean to forward to `{host}`"
    )]
    Remote {
        /// What was given.
        url: String,
        /// Its host.
        host: String,
    },
}

impl Upstream {
    /// Parses and checks `url`: `http://` only, no credentials, no query, and a host on
    /// loopback (`localhost`, 127.0.0.0/8, `[::1]`) unless `allow_remote`. The timeout is
    /// [`DEFAULT_UPSTREAM_TIMEOUT`] ([`Upstream::with_timeout`] changes it).
    pub fn parse(url: &str, allow_remote: bool) -> Result<Upstream, UpstreamError> {
        let given = || url.to_string();
        let uri: Uri = url
            .parse()
            .map_err(|e: http::uri::InvalidUri| UpstreamError::NotUrl {
                url: given(),
                reason: e.to_string(),
            })?;
        match uri.scheme() {
            Some(scheme) if *scheme == Scheme::HTTP => {}
            Some(scheme) if *scheme == Scheme::HTTPS => {
                return Err(UpstreamError::Https { url: given() });
            }
            _ => return Err(UpstreamError::Scheme { url: given() }),
        }
        let Some(authority) = uri.authority().cloned() else {
            return Err(UpstreamError::NotUrl {
                url: given(),
                reason: "it names no host".to_string(),
            });
        };
        if authority.as_str().contains('@') {
            return Err(UpstreamError::Credentials { url: given() });
        }
        if uri.query().is_some() || url.contains('#') {
            return Err(UpstreamError::Query { url: given() });
        }
        let host = authority.host();
        if host.is_empty() {
            return Err(UpstreamError::NotUrl {
                url: given(),
                reason: "it names no host".to_string(),
            });
        }
        // `host:port`, the port as written: the parser keeps a port it cannot read as a
        // `u16` in the authority but gives it as none, which would mean 80.
        if let Some(port) = authority
            .as_str()
            .get(host.len()..)
            .and_then(|rest| rest.strip_prefix(':'))
            && !port.parse::<u16>().is_ok_and(|p| p != 0)
        {
            return Err(UpstreamError::Port {
                url: given(),
                port: port.to_string(),
            });
        }
        if !allow_remote && !is_loopback_host(host) {
            return Err(UpstreamError::Remote {
                url: given(),
                host: host.to_string(),
            });
        }
        Ok(Upstream {
            authority,
            base: uri.path().trim_end_matches('/').to_string(),
            timeout: DEFAULT_UPSTREAM_TIMEOUT,
        })
    }

    /// The same upstream with another timeout for the start of its answers.
    pub fn with_timeout(self, timeout: Duration) -> Upstream {
        Upstream { timeout, ..self }
    }

    /// How long the upstream may take to begin an answer (its response head).
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    #[cfg(feature = "server")]
    /// `host:port` (the port as given; 80 when none is).
    pub(crate) fn authority(&self) -> &Authority {
        &self.authority
    }

    #[cfg(feature = "server")]
    /// The port to connect to.
    pub(crate) fn port(&self) -> u16 {
        self.authority.port_u16().unwrap_or(80)
    }

    #[cfg(feature = "server")]
    /// The addresses the upstream's host resolves to (none when it does not), with its
    /// port: what the server compares with its own to refuse forwarding to itself.
    pub(crate) async fn socket_addrs(&self) -> Vec<std::net::SocketAddr> {
        tokio::net::lookup_host((self.host(), self.port()))
            .await
            .map(Iterator::collect)
            .unwrap_or_default()
    }

    #[cfg(feature = "server")]
    /// The host to connect to, without the brackets of an IPv6 address.
    pub(crate) fn host(&self) -> &str {
        self.authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']')
    }

    #[cfg(feature = "server")]
    /// The URI to send for a request's: `None` when it can go as it came (in origin form,
    /// and no base path to prefix).
    pub(crate) fn uri(&self, request: &Uri) -> Option<Uri> {
        if self.base.is_empty() && request.scheme().is_none() && request.authority().is_none() {
            return None;
        }
        Some(Uri::from(self.path(request.path_and_query())))
    }

    #[cfg(feature = "server")]
    /// The upstream's path for a request's path and query: the base path joined to it.
    pub(crate) fn path(&self, request: Option<&PathAndQuery>) -> PathAndQuery {
        let mut asked = request.map_or("/", PathAndQuery::as_str);
        if self.base.is_empty() {
            return request
                .cloned()
                .unwrap_or_else(|| PathAndQuery::from_static("/"));
        }
        // `/api` + `/items?x=1`; `/api` + `?x=1`. `OPTIONS *` asks about the server: under
        // a base path, that is the base itself (`/api` + `*` would be `/api*`, a sibling).
        if !asked.starts_with(['/', '?']) {
            asked = "/";
        }
        let joined = format!("{}{asked}", self.base);
        joined
            .parse()
            .unwrap_or_else(|_| PathAndQuery::from_static("/"))
    }
}

impl fmt::Display for Upstream {
    /// `http://host:port/base`, as it was given but for a trailing slash.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "http://{}{}", self.authority, self.base)
    }
}

impl fmt::Debug for Upstream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Upstream")
            .field("url", &self.to_string())
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// `localhost`, 127.0.0.0/8 or `[::1]` (with or without its brackets).
pub(crate) fn is_loopback_host(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(url: &str) -> Result<Upstream, UpstreamError> {
        Upstream::parse(url, false)
    }

    #[test]
    fn loopback_http_upstreams_parse_with_their_base_path() {
        for (url, shown, base) in [
            ("http://127.0.0.1:8080", "http://127.0.0.1:8080", ""),
            ("http://127.0.0.1:8080/", "http://127.0.0.1:8080", ""),
            ("http://127.9.9.9:1/api/", "http://127.9.9.9:1/api", "/api"),
            ("http://localhost/v1/x", "http://localhost/v1/x", "/v1/x"),
            ("http://LOCALHOST:9", "http://LOCALHOST:9", ""),
            ("http://[::1]:8080/a", "http://[::1]:8080/a", "/a"),
        ] {
            let upstream = parse(url).unwrap_or_else(|e| panic!("{url}: {e}"));
            assert_eq!(upstream.to_string(), shown);
            assert_eq!(upstream.base, base);
        }
        let v6 = parse("http://[::1]:8080").expect("parses");
        assert_eq!((v6.host(), v6.port()), ("::1", 8080));
        assert_eq!(parse("http://localhost").expect("parses").port(), 80);
    }

    #[test]
    fn every_refusal_says_why() {
        let refused = |url: &str| parse(url).expect_err(url);
        assert!(matches!(
            refused("https://127.0.0.1:8443"),
            UpstreamError::Https { .. }
        ));
        assert!(refused("https://127.0.0.1").to_string().contains("http://"));
        assert!(matches!(
            refused("ftp://127.0.0.1"),
            UpstreamError::Scheme { .. }
        ));
        assert!(matches!(
            refused("127.0.0.1:8080"),
            UpstreamError::Scheme { .. }
        ));
        assert!(matches!(refused("http://"), UpstreamError::NotUrl { .. }));
        assert!(matches!(refused("not a url"), UpstreamError::NotUrl { .. }));
        assert!(matches!(
            refused("http://u:p@127.0.0.1"),
            UpstreamError::Credentials { .. }
        ));
        for (url, port) in [
            ("http://127.0.0.1:0", "0"),
            ("http://127.0.0.1:99999", "99999"),
            ("http://127.0.0.1:65536/api", "65536"),
            ("http://localhost:00", "00"),
            ("http://[::1]:0", "0"),
            ("http://127.0.0.1:", ""),
        ] {
            let error = refused(url);
            assert_eq!(
                error,
                UpstreamError::Port {
                    url: url.to_string(),
                    port: port.to_string()
                },
                "{url}"
            );
            assert!(error.to_string().contains("1 to 65535"), "{error}");
        }
        assert_eq!(
            parse("http://127.0.0.1:65535").expect("parses").port(),
            65535
        );
        assert_eq!(parse("http://127.0.0.1:1").expect("parses").port(), 1);
        assert!(matches!(
            refused("http://127.0.0.1/?a=1"),
            UpstreamError::Query { .. }
        ));
        for remote in ["http://10.0.0.1", "http://example.com", "http://[::2]:80"] {
            let error = refused(remote);
            assert!(matches!(error, UpstreamError::Remote { .. }), "{remote}");
            assert!(error.to_string().contains("--allow-remote"), "{error}");
            assert!(Upstream::parse(remote, true).is_ok(), "{remote}");
        }
    }

    #[test]
    #[cfg(feature = "server")]
    fn a_request_path_is_joined_to_the_base_path() {
        let path = |base: &str, request: Option<&str>| {
            let upstream = parse(base).expect("parses");
            let request = request.map(|r| r.parse::<PathAndQuery>().expect("a path"));
            upstream.path(request.as_ref()).as_str().to_string()
        };
        assert_eq!(path("http://127.0.0.1", Some("/a?b=1")), "/a?b=1");
        assert_eq!(path("http://127.0.0.1", None), "/");
        assert_eq!(path("http://127.0.0.1/api/", Some("/a?b=1")), "/api/a?b=1");
        assert_eq!(path("http://127.0.0.1/api", Some("/")), "/api/");
        assert_eq!(path("http://127.0.0.1/api", None), "/api/");
        assert_eq!(path("http://127.0.0.1/api/", Some("*")), "/api/");
        assert_eq!(path("http://127.0.0.1", Some("*")), "*");
    }
}
