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

/// Main-context nginx directives the run sets itself.
const NGINX_RUN: &[&str] = &[
    "user",
    "pid",
    "daemon",
    "master_process",
    "worker_processes",
    "error_log",
    "include",
];

/// nginx: the user's config, for a live run.
pub(crate) fn nginx(tier: &ProxyTier, r: &Rewrite<'_>) -> Result<String, ConfigError> {
    let tree = parse(&tier.text)?;
    let (server_line, upstream_line, pass_line) = nginx::anchors(&tree, &tier.block)?;
    let peer_lines: Vec<usize> = tier.model.peers.iter().map(|p| p.line).collect();
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
        peer_lines: &peer_lines,
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
    peer_lines: &'a [usize],
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
            "include" | "access_log" | "error_log" => return Ok(()),
            "server" if d.block.is_some() && d.line() != self.server_line => return Ok(()),
            "listen" => return Ok(()),
            "server" if upstream => {
                let Some(i) = self.peer_lines.iter().position(|l| *l == d.line()) else {
                    return Ok(());
                };
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
            "proxy_pass" if d.line() == self.pass_line && self.upstream_line.is_none() => {
                let peer = self.r.peers.first().ok_or_else(|| too_few(d, 0))?;
                let url = &d.args[0].text;
                let (scheme, rest) = url.split_once("://").unwrap_or(("http", url));
                let path = rest.find('/').map_or("", |i| &rest[i..]);
                writeln!(out, "{indent}proxy_pass {scheme}://{peer}{path};").ok();
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
                    first == "bind"
                        || first == "log"
                        || (first == "use_backend" && l.word(1) != Some(backend))
                }
            };
            if dropped {
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
                words.extend(
                    l.words[3..]
                        .iter()
                        .map(|w| w.text.as_str())
                        .filter(|w| *w != "check"),
                );
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
        for want in [
            "daemon off;",
            "master_process off;",
            "pid /tmp/run/nginx.pid;",
            "listen 127.0.0.1:9000 default_server;",
            "server 127.0.0.1:9001 max_fails=3 fail_timeout=30s;",
            "server 127.0.0.1:9003 backup;",
            "proxy_set_header Connection \"\";",
        ] {
            assert!(out.contains(want), "{want} in\n{out}");
        }
        for gone in [
            "include",
            "/var/log",
            "listen 8080",
            "user www-data",
            "8081",
        ] {
            assert!(!out.contains(gone), "{gone} in\n{out}");
        }
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
        for want in [
            "bind 127.0.0.1:9000",
            "server app1 127.0.0.1:9001",
            "server app3 127.0.0.1:9003 backup",
            "option http-buffer-request",
            "default_backend app",
            "option httpclose",
        ] {
            assert!(out.contains(want), "{want} in\n{out}");
        }
        for gone in ["check", "8080", "8081", "chroot", "stats socket", "daemon"] {
            assert!(!out.contains(gone), "{gone} in\n{out}");
        }
        let back = super::super::haproxy::import(&out, None).expect("reads back");
        assert_eq!(back.model.tries, t.model.tries);
    }
}
