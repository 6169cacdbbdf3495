//! The config a live run gives the real nginx or HAProxy: the user's own, with what ties it
//! to their machines replaced, and nothing else touched.
//!
//! - The tier listens on one loopback port: the `listen`s of the `server` holding the
//!   location (nginx), the `bind`s of the frontends that route to the backend (HAProxy);
//!   the other servers and frontends are left out, so nothing else listens.
//! - Its peers are the next hop's: each `server` of the upstream or backend the model read
//!   (matched by line) gets the next peer's address, in order; a `down` or `disabled`
//!   one, which the model leaves out, is left out here too.
//! - It runs in the foreground as one process, with its pid file, logs and temporary files
//!   in the run's private directory; `include`s (which the importer does not read either)
//!   are left out.
//! - Another location's `proxy_pass` answers 404, and the other upstreams are left out
//!   (they are the user's machines); the peers speak plain HTTP (`https://` and TLS
//!   parameters dropped); `stream` and `mail` blocks are left out.
//! - HAProxy's health checks (`check`) are dropped: they would be counted by the next
//!   hop's ledger as requests, and the model has none. Its frontend closes each client
//!   connection after its response (`option httpclose`): HAProxy answers a lost response
//!   to a request that was not the first on its client connection by closing that
//!   connection silently (so that the client retries), instead of a 502.

use std::fmt::Write as _;

use super::haproxy_syntax::{Section, sections};
use super::nginx_syntax::{Directive, Word, parse};
use super::{ConfigError, nginx};
use crate::plan::proxy::{ProxyTier, Rewrite};

/// Main-context nginx directives the run sets itself, and the blocks that only serve
/// other listeners (`stream`, `mail`: proxies of their own, on ports of their own).
const NGINX_RUN: &[&str] = &[
    "user",
    "pid",
    "daemon",
    "master_process",
    "worker_processes",
    "error_log",
    "include",
    "stream",
    "mail",
    "rtmp",
];

/// nginx directives at any level the run sets itself (its files go in its directory), or
/// that speak TLS to a peer that speaks plain HTTP.
const NGINX_DROP: &[&str] = &[
    "include",
    "access_log",
    "error_log",
    "client_body_temp_path",
    "proxy_temp_path",
    "listen",
    "proxy_ssl_certificate",
    "proxy_ssl_certificate_key",
    "proxy_ssl_trusted_certificate",
    "proxy_ssl_verify",
    "proxy_ssl_name",
    "proxy_ssl_server_name",
    "proxy_ssl_protocols",
    "proxy_ssl_session_reuse",
];

/// nginx: the user's config, for a live run.
pub(crate) fn nginx(tier: &ProxyTier, r: &Rewrite<'_>) -> Result<String, ConfigError> {
    let tree = parse(&tier.text)?;
    let (server_line, upstream_line, pass_line) = nginx::anchors(&tree, &tier.block)?;
    let dir = r.dir.display();
    let mut out = format!(
        "# The config of {} for a harness run: see harness/src/plan/import/rewrite.rs.\n\
         daemon off;\nmaster_process off;\nworker_processes 1;\npid {dir}/nginx.pid;\n\
         error_log {dir}/error.log notice;\n",
        tier.file.display()
    );
    if !tree.iter().any(|d| d.name() == "events") {
        out.push_str("events {}\n");
    }
    let rewrite = NginxRewrite {
        r,
        server_line,
        upstream_line,
        pass_line,
        next_peer: std::cell::Cell::new(0),
    };
    for d in tree.iter().filter(|d| !NGINX_RUN.contains(&d.name())) {
        rewrite.directive(&mut out, d, 0, false)?;
    }
    Ok(out)
}

struct NginxRewrite<'a> {
    r: &'a Rewrite<'a>,
    server_line: usize,
    upstream_line: Option<usize>,
    pass_line: usize,
    /// The chosen upstream's servers that are peers (not `down`) written so far: the next
    /// one is that peer (the model reads them in this order).
    next_peer: std::cell::Cell<usize>,
}

impl NginxRewrite<'_> {
    /// Writes `d` as the run needs it; `upstream`: it is in the upstream the model read.
    fn directive(
        &self,
        out: &mut String,
        d: &Directive,
        depth: usize,
        upstream: bool,
    ) -> Result<(), ConfigError> {
        let indent = "    ".repeat(depth);
        match d.name() {
            name if NGINX_DROP.contains(&name) => return Ok(()),
            "server" if d.block.is_some() && d.line() != self.server_line => return Ok(()),
            // Only the upstream the tier sends to: another one's servers are the user's
            // machines, which nginx would resolve at start.
            "upstream" if Some(d.line()) != self.upstream_line => return Ok(()),
            "server" if upstream => {
                if d.args.iter().any(|a| a.text == "down") {
                    return Ok(());
                }
                let i = self.next_peer.replace(self.next_peer.get() + 1);
                let peer = self
                    .r
                    .peers
                    .get(i)
                    .ok_or_else(|| too_few(d, self.r.peers.len()))?;
                let mut words = vec![d.name.clone(), with_text(&d.args[0], peer.to_string())];
                words.extend(d.args[1..].iter().cloned());
                writeln!(out, "{indent}{};", render(&words)).ok();
                return Ok(());
            }
            "proxy_pass" if d.line() == self.pass_line => {
                // The peers speak plain HTTP, whatever the user's upstream speaks.
                let url = &d.args[0].text;
                let rest = url.split_once("://").map_or(url.as_str(), |(_, rest)| rest);
                let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
                let host = match self.upstream_line {
                    Some(_) => host.to_owned(),
                    None => self
                        .r
                        .peers
                        .first()
                        .ok_or_else(|| too_few(d, 0))?
                        .to_string(),
                };
                writeln!(out, "{indent}proxy_pass http://{host}{path};").ok();
                return Ok(());
            }
            // Another location's upstream is not the tier's: answered by nginx itself.
            "proxy_pass" | "grpc_pass" | "fastcgi_pass" | "uwsgi_pass" | "scgi_pass" => {
                writeln!(out, "{indent}return 404;").ok();
                return Ok(());
            }
            _ => {}
        }
        let mut words = vec![d.name.clone()];
        words.extend(d.args.iter().cloned());
        match &d.block {
            None => writeln!(out, "{indent}{};", render(&words)).ok(),
            Some(children) => {
                writeln!(out, "{indent}{} {{", render(&words)).ok();
                let inner = "    ".repeat(depth + 1);
                let dir = self.r.dir.display();
                if d.name() == "http" {
                    writeln!(out, "{inner}access_log {dir}/access.log;").ok();
                    writeln!(out, "{inner}client_body_temp_path {dir}/client_body;").ok();
                    writeln!(out, "{inner}proxy_temp_path {dir}/proxy;").ok();
                }
                if d.name() == "server" {
                    writeln!(out, "{inner}listen {} default_server;", self.r.listen).ok();
                }
                let chosen = d.name() == "upstream" && Some(d.line()) == self.upstream_line;
                for child in children {
                    self.directive(out, child, depth + 1, chosen)?;
                }
                writeln!(out, "{indent}}}").ok()
            }
        };
        Ok(())
    }
}

fn with_text(w: &Word, text: String) -> Word {
    Word { text, ..w.clone() }
}

/// Words as nginx reads them back: quoted when they hold what would split them.
fn render(words: &[Word]) -> String {
    words
        .iter()
        .map(|w| {
            let plain = !w.text.is_empty()
                && !w
                    .text
                    .contains(|c: char| c.is_whitespace() || "\"';{}#\\".contains(c));
            if plain {
                w.text.clone()
            } else {
                format!("\"{}\"", w.text.replace('\\', "\\\\").replace('"', "\\\""))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn too_few(d: &Directive, peers: usize) -> ConfigError {
    d.error(format!(
        "the next hop has {peers} peers, fewer than the servers of this upstream"
    ))
}

/// Global directives the run sets itself or that reach outside it (sockets, users, logs).
const HAPROXY_GLOBAL_DROP: &[&str] = &[
    "daemon",
    "chroot",
    "user",
    "group",
    "uid",
    "gid",
    "pidfile",
    "stats",
    "log",
    "master-worker",
    "nbproc",
];

/// HAProxy: the user's config, for a live run.
pub(crate) fn haproxy(tier: &ProxyTier, r: &Rewrite<'_>) -> Result<String, ConfigError> {
    let sections = sections(&tier.text)?;
    let raw: Vec<&str> = tier.text.lines().collect();
    let original = |n: usize| raw.get(n.wrapping_sub(1)).map_or("", |l| l.trim());
    let backend = tier.block.as_str();
    let peer_lines: Vec<usize> = tier.model.peers.iter().map(|p| p.line).collect();
    let mut out = format!(
        "# The config of {} for a harness run: see harness/src/plan/import/rewrite.rs.\n",
        tier.file.display()
    );
    let mut routed = false;
    for s in &sections {
        let keep = match s.kind() {
            "global" | "defaults" | "resolvers" | "userlist" | "http-errors" | "cache" => true,
            "backend" | "listen" if s.name() == Some(backend) => true,
            "frontend" => routes_to(s, backend),
            _ => false,
        };
        if !keep {
            continue;
        }
        routed |= s.kind() == "frontend" || s.kind() == "listen";
        writeln!(out, "{}", original(s.header.line())).ok();
        if s.kind() == "frontend" || s.kind() == "listen" {
            writeln!(out, "    bind {}", r.listen).ok();
        }
        for l in &s.lines {
            let first = l.word(0).unwrap_or_default();
            let dropped = match s.kind() {
                "global" => HAPROXY_GLOBAL_DROP.contains(&first),
                "defaults" => first == "log",
                _ => {
                    // A template's servers are the user's machines, not peers.
                    matches!(first, "bind" | "log" | "server-template")
                        || (first == "use_backend" && l.word(1) != Some(backend))
                }
            };
            if dropped {
                continue;
            }
            if first == "default_backend" && l.word(1) != Some(backend) {
                // That backend is left out: what would go to it comes to the tier's.
                writeln!(out, "    default_backend {backend}").ok();
                continue;
            }
            if first == "default-server" {
                let words: Vec<&str> = server_params(&l.words[1..]);
                writeln!(out, "    default-server {}", words.join(" ")).ok();
                continue;
            }
            if first == "server" {
                let Some(i) = peer_lines.iter().position(|n| *n == l.line()) else {
                    continue;
                };
                let peer = r.peers.get(i).ok_or_else(|| {
                    l.error(format!(
                        "the next hop has {} peers, fewer than the servers of this backend",
                        r.peers.len()
                    ))
                })?;
                let mut words = vec!["server", l.word(1).unwrap_or("peer")];
                let address = peer.to_string();
                words.push(&address);
                words.extend(server_params(l.words.get(3..).unwrap_or_default()));
                // A `default-server ... check` would check it all the same.
                words.extend(["no-check", "no-agent-check"]);
                writeln!(out, "    {}", words.join(" ")).ok();
                continue;
            }
            writeln!(out, "    {}", original(l.line())).ok();
        }
        if matches!(s.kind(), "frontend" | "listen") {
            // A lost response to a request that was not the first on its client connection
            // is answered by closing that connection silently (so that the client
            // retries), not with a 502: which one depends on the client's connection reuse,
            // which the model does not follow. One request per connection makes it the 502
            // every time.
            writeln!(out, "    option httpclose").ok();
        }
    }
    if !routed {
        writeln!(
            out,
            "frontend chaos-run\n    mode http\n    bind {}\n    default_backend {backend}\n    option httpclose",
            r.listen
        )
        .ok();
    }
    Ok(out)
}

/// A server's parameters without its health checks (which the next hop would count as
/// requests) and its TLS (the peers speak plain HTTP): each dropped with its value.
fn server_params(words: &[Word]) -> Vec<&str> {
    const ALONE: &[&str] = &["check", "agent-check", "check-ssl", "ssl", "no-verifyhost"];
    const WITH_VALUE: &[&str] = &[
        "verify",
        "ca-file",
        "crt",
        "sni",
        "alpn",
        "check-sni",
        "crl-file",
        "track",
        "ciphers",
        "ciphersuites",
        "ssl-min-ver",
        "ssl-max-ver",
        "verifyhost",
    ];
    let mut out = Vec::new();
    let mut skip = false;
    for w in words {
        let w = w.text.as_str();
        if skip {
            skip = false;
        } else if WITH_VALUE.contains(&w) {
            skip = true;
        } else if !ALONE.contains(&w) {
            out.push(w);
        }
    }
    out
}

/// Whether a frontend sends requests to `backend`.
fn routes_to(s: &Section, backend: &str) -> bool {
    s.lines.iter().any(|l| {
        (l.is(&["default_backend"]) || l.is(&["use_backend"])) && l.word(1) == Some(backend)
    })
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::path::Path;

    use super::*;
    use crate::plan::proxy::ProxyKind;

    fn tier(kind: ProxyKind, text: &str, block: Option<&str>) -> ProxyTier {
        let imported = match kind {
            ProxyKind::Nginx => nginx::import(text, block),
            ProxyKind::Haproxy => super::super::haproxy::import(text, block),
        }
        .expect("imports");
        ProxyTier {
            model: imported.model,
            file: "stacks/x".into(),
            text: text.to_owned(),
            block: imported.block,
            binary: None,
        }
    }

    /// Every piece is in the config written.
    fn has(out: &str, pieces: &[&str]) {
        for piece in pieces {
            assert!(out.contains(piece), "{piece} in\n{out}");
        }
    }

    /// No piece is.
    fn lacks(out: &str, pieces: &[&str]) {
        for piece in pieces {
            assert!(!out.contains(piece), "{piece} in\n{out}");
        }
    }

    fn addrs(ports: &[u16]) -> Vec<SocketAddr> {
        ports
            .iter()
            .map(|p| SocketAddr::from(([127, 0, 0, 1], *p)))
            .collect()
    }

    #[test]
    fn nginx_listens_on_loopback_and_sends_to_the_next_hops_peers() {
        let text = include_str!("../../../../plans/stacks/nginx.conf");
        let t = tier(ProxyKind::Nginx, text, Some("/api"));
        let peers = addrs(&[9001, 9002, 9003]);
        let r = Rewrite {
            listen: SocketAddr::from(([127, 0, 0, 1], 9000)),
            peers: &peers,
            dir: Path::new("/tmp/run"),
        };
        let out = nginx(&t, &r).expect("rewrites");
        has(
            &out,
            &[
                "daemon off;",
                "master_process off;",
                "pid /tmp/run/nginx.pid;",
                "listen 127.0.0.1:9000 default_server;",
                "server 127.0.0.1:9001 max_fails=3 fail_timeout=30s;",
                "server 127.0.0.1:9003 backup;",
                "proxy_set_header Connection \"\";",
            ],
        );
        lacks(
            &out,
            &[
                "include",
                "/var/log",
                "listen 8080",
                "user www-data",
                "8081",
            ],
        );
        // What it wrote reads back as the same tier, but for its addresses.
        let back = nginx::import(&out, Some("/api")).expect("reads back");
        assert_eq!(back.model.tries, t.model.tries);
        assert_eq!(back.model.retry_on.statuses, t.model.retry_on.statuses);
        // Fewer peers than servers is an error at the server.
        let r = Rewrite {
            peers: &peers[..2],
            ..r
        };
        assert!(nginx(&t, &r).is_err());
    }

    #[test]
    fn haproxy_binds_on_loopback_sends_to_the_peers_and_checks_nothing() {
        let text = include_str!("../../../../plans/stacks/haproxy.cfg");
        let t = tier(ProxyKind::Haproxy, text, None);
        let peers = addrs(&[9001, 9002, 9003]);
        let r = Rewrite {
            listen: SocketAddr::from(([127, 0, 0, 1], 9000)),
            peers: &peers,
            dir: Path::new("/tmp/run"),
        };
        let out = haproxy(&t, &r).expect("rewrites");
        has(
            &out,
            &[
                "bind 127.0.0.1:9000",
                "server app1 127.0.0.1:9001",
                "server app3 127.0.0.1:9003 backup",
                "option http-buffer-request",
                "default_backend app",
                "option httpclose",
            ],
        );
        assert!(
            out.contains("server app1 127.0.0.1:9001 no-check no-agent-check"),
            "{out}"
        );
        lacks(
            &out,
            &[
                " check\n",
                " check ",
                "8080",
                "8081",
                "chroot",
                "stats socket",
                "daemon",
            ],
        );
        let back = super::super::haproxy::import(&out, None).expect("reads back");
        assert_eq!(back.model.tries, t.model.tries);
    }

    #[test]
    fn what_is_not_the_tiers_goes_nowhere_near_the_users_machines() {
        let text = "events {}\nhttp {\n upstream api { server a.internal:80; server b.internal:80 down; server c.internal:80; }\n upstream web { server web.internal:3000; }\n proxy_temp_path /var/cache/x;\n server {\n  listen 443 ssl;\n  location /api/ { proxy_pass https://api; }\n  location / { proxy_pass http://web; }\n }\n}\nstream { server { listen 53; proxy_pass dns.internal:53; } }\n";
        let t = tier(ProxyKind::Nginx, text, Some("/api/"));
        let peers = addrs(&[9001, 9002]);
        let r = Rewrite {
            listen: SocketAddr::from(([127, 0, 0, 1], 9000)),
            peers: &peers,
            dir: Path::new("/tmp/run"),
        };
        let out = nginx(&t, &r).expect("rewrites");
        has(
            &out,
            &[
                "server 127.0.0.1:9001;",
                "server 127.0.0.1:9002;",
                "proxy_pass http://api;",
                "return 404;",
            ],
        );
        lacks(
            &out,
            &[
                "internal",
                "upstream web",
                "stream {",
                "listen 443",
                "/var/cache",
                "https",
            ],
        );
        let text = "defaults\n mode http\n default-server inter 2s check\nfrontend f\n bind :443 ssl crt /x.pem\n use_backend api if { path_beg /api }\n default_backend web\nbackend api\n server-template extra 3 app.internal:80 check\n server a 10.0.0.1:443 ssl verify none check\nbackend web\n server w web.internal:80\n";
        let t = tier(ProxyKind::Haproxy, text, Some("api"));
        let out = haproxy(&t, &r).expect("rewrites");
        has(
            &out,
            &[
                "default-server inter 2s",
                "default_backend api",
                "server a 127.0.0.1:9001 no-check no-agent-check",
                "bind 127.0.0.1:9000",
            ],
        );
        lacks(
            &out,
            &["internal", "backend web", "ssl", "verify", " check", ":443"],
        );
    }
}
