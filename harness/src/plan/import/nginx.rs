//! An nginx config → the [`ProxyModel`] of one of its `location`s: which peers it proxies
//! to, which failures it passes to the next one, how many times, under which timeouts.
//!
//! The location's settings are nginx's: a directive in a `location` overrides the same one
//! in its `server`, which overrides `http` (nginx's merge of `proxy_*` settings), and what
//! none sets is nginx's default, each cited from the `ngx_http_proxy_module` and
//! `ngx_http_upstream_module` docs. A directive that changes how requests are proxied but
//! that the model does not carry is an [`Approximation`], never dropped silently; the rest
//! (logs, TLS, MIME types, gzip) is not about retries and is skipped.

use std::collections::BTreeMap;
use std::time::Duration;

use super::nginx_syntax::{Directive, Word, duration, parse};
use super::{ConfigError, ImportedProxy};
use crate::plan::proxy::{
    Approximation, Methods, NextPeer, Peer, ProxyKind, ProxyModel, RetryOn, Source,
};

/// `proxy_next_upstream`'s default: "error timeout".
const DEFAULT_NEXT_UPSTREAM: &str = "proxy_next_upstream error timeout";
/// `proxy_read_timeout`'s default: 60s.
const DEFAULT_READ_TIMEOUT: Duration = Duration::from_secs(60);
/// A `server`'s `max_fails` default: 1; `fail_timeout`: 10s.
const DEFAULT_MAX_FAILS: u32 = 1;
const DEFAULT_FAIL_TIMEOUT: Duration = Duration::from_secs(10);
/// The statuses `proxy_next_upstream` can name (`http_XXX`).
const STATUSES: [u16; 7] = [500, 502, 503, 504, 403, 404, 429];

/// The model of the `location` named `location` (its URI, or its modifier and URI as
/// written: `= /x`, `~ ^/api`), or of the one location that proxies to an `upstream`.
pub(crate) fn import(text: &str, location: Option<&str>) -> Result<ImportedProxy, ConfigError> {
    let tree = parse(text)?;
    let http: Vec<&Directive> = tree.iter().filter(|d| d.name() == "http").collect();
    if http.is_empty() {
        return Err(ConfigError::at(1, 1, "the config has no `http` block").hint(
            include_hint(&tree).unwrap_or("a proxy's config holds `http { upstream ... { server ...; } server { location / { proxy_pass http://...; } } }`".to_owned()),
        ));
    }
    let upstreams = upstreams(&http)?;
    let mut found = Vec::new();
    for h in &http {
        for server in h.children().iter().filter(|d| d.name() == "server") {
            locations(server, &mut vec![server, *h], &mut found);
        }
    }
    let chosen = choose(&tree, &found, &upstreams, location)?;
    let (loc, chain) = (chosen.0, &chosen.1);
    let pass = loc
        .children()
        .iter()
        .find(|d| d.name() == "proxy_pass")
        .ok_or_else(|| {
            loc.error(format!(
                "`{}` does not proxy: it has no `proxy_pass`",
                loc.text()
            ))
            .hint("name the location that has `proxy_pass` (`location:` in the plan)")
        })?;
    let mut approximations = Vec::new();
    let (peers, upstream_source) = match target(pass, &upstreams)? {
        Target::Upstream(up) => (
            peers(up, &mut approximations)?,
            Source::at(up.text(), up.line()),
        ),
        Target::Address(host) => {
            if host.parse::<std::net::IpAddr>().is_err()
                && !host.starts_with('[')
                && !host.starts_with("unix:")
            {
                approximations.push(approximation(pass, "nginx resolves a name once, at start, and proxies to each of its addresses as a peer: the model has one peer"));
            }
            let peer = Peer {
                name: host,
                weight: 1,
                max_fails: DEFAULT_MAX_FAILS,
                fail_timeout: DEFAULT_FAIL_TIMEOUT,
                backup: false,
                line: pass.line(),
            };
            (vec![peer], Source::at(pass.text(), pass.line()))
        }
    };
    let mut model = settings(chain, peers, upstream_source)?;
    approximations.extend(unmodelled(chain));
    model.approximations.splice(0..0, approximations);
    Ok(ImportedProxy {
        model,
        block: block_name(loc),
    })
}

/// Where a live run rewrites the config of the tier whose location is `block`: the line
/// of the `server` block holding it, of the `upstream` its `proxy_pass` names (none for a
/// literal address), and of that `proxy_pass`.
pub(super) fn anchors(
    tree: &[Directive],
    block: &str,
) -> Result<(usize, Option<usize>, usize), ConfigError> {
    let http: Vec<&Directive> = tree.iter().filter(|d| d.name() == "http").collect();
    let upstreams = upstreams(&http)?;
    let mut found = Vec::new();
    for h in &http {
        for server in h.children().iter().filter(|d| d.name() == "server") {
            locations(server, &mut vec![server, *h], &mut found);
        }
    }
    for (loc, chain) in &found {
        let Some(pass) = loc.children().iter().find(|d| d.name() == "proxy_pass") else {
            continue;
        };
        if block_name(loc) != block {
            continue;
        }
        let server = chain
            .iter()
            .find(|d| d.name() == "server")
            .map_or(0, |d| d.line());
        let upstream = match target(pass, &upstreams)? {
            Target::Upstream(up) => Some(up.line()),
            Target::Address(_) => None,
        };
        return Ok((server, upstream, pass.line()));
    }
    Err(ConfigError::at(
        1,
        1,
        format!("no `location {block}` with `proxy_pass`"),
    ))
}

/// `location`'s modifier and URI as written: `/api`, `= /exact`.
fn block_name(loc: &Directive) -> String {
    loc.args
        .iter()
        .map(|a| a.text.as_str())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Where the file's `include`s are, when what is looked for may be in one of them.
fn include_hint(tree: &[Directive]) -> Option<String> {
    fn first(ds: &[Directive]) -> Option<&Directive> {
        ds.iter().find_map(|d| {
            (d.name() == "include")
                .then_some(d)
                .or_else(|| first(d.children()))
        })
    }
    first(tree).map(|d| format!("the file has `{}` (line {}), which is not followed: give the whole config as one file, as `nginx -T` prints it", d.text(), d.line()))
}

/// Every `upstream` block of the `http` blocks, by name.
fn upstreams<'a>(http: &[&'a Directive]) -> Result<BTreeMap<&'a str, &'a Directive>, ConfigError> {
    let mut out: BTreeMap<&str, &Directive> = BTreeMap::new();
    for d in http
        .iter()
        .flat_map(|h| h.children())
        .filter(|d| d.name() == "upstream")
    {
        let [name] = d.args.as_slice() else {
            return Err(d
                .error("`upstream` takes one name")
                .hint("`upstream backend { server 127.0.0.1:8081; }`"));
        };
        if d.block.is_none() {
            return Err(d
                .error("`upstream` has no block")
                .hint("`upstream backend { server 127.0.0.1:8081; }`"));
        }
        if let Some(before) = out.insert(&name.text, d) {
            return Err(d
                .error(format!(
                    "a second `upstream {}` (the first is at line {})",
                    name.text,
                    before.line()
                ))
                .hint("nginx refuses a duplicate upstream: rename or remove one"));
        }
    }
    Ok(out)
}

/// The locations of `block` (a `server` or a `location`), each with the blocks it sits
/// in, innermost first: the location, the ones around it, its `server`, `http`.
fn locations<'a>(
    block: &'a Directive,
    around: &mut Vec<&'a Directive>,
    out: &mut Vec<(&'a Directive, Vec<&'a Directive>)>,
) {
    for loc in block
        .children()
        .iter()
        .filter(|d| d.name() == "location" && d.block.is_some())
    {
        let mut chain = vec![loc];
        chain.extend(around.iter().copied());
        out.push((loc, chain.clone()));
        around.insert(0, loc);
        locations(loc, around, out);
        around.remove(0);
    }
}

type Found<'a> = (&'a Directive, Vec<&'a Directive>);

/// The location the plan names, or the one that proxies to an upstream.
fn choose<'a>(
    tree: &[Directive],
    found: &[Found<'a>],
    upstreams: &BTreeMap<&str, &Directive>,
    wanted: Option<&str>,
) -> Result<Found<'a>, ConfigError> {
    let proxies = |f: &&Found<'_>| f.0.children().iter().any(|d| d.name() == "proxy_pass");
    let listed = || {
        let all: Vec<String> = found
            .iter()
            .filter(proxies)
            .map(|f| format!("`{}` (line {})", block_name(f.0), f.0.line()))
            .collect();
        if all.is_empty() {
            "no location has `proxy_pass`".to_owned()
        } else {
            format!("the locations that proxy: {}", all.join(", "))
        }
    };
    let candidates: Vec<&Found<'_>> = match wanted {
        Some(w) => found
            .iter()
            .filter(|f| block_name(f.0) == w || f.0.args.last().is_some_and(|a| a.text == w))
            .collect(),
        None => {
            let to_upstream: Vec<&Found<'_>> = found
                .iter()
                .filter(|f| {
                    f.0.children().iter().any(|d| {
                        d.name() == "proxy_pass"
                            && matches!(target(d, upstreams), Ok(Target::Upstream(_)))
                    })
                })
                .collect();
            if to_upstream.is_empty() {
                found.iter().filter(proxies).collect()
            } else {
                to_upstream
            }
        }
    };
    match candidates.as_slice() {
        [one] => Ok((*one).clone()),
        [] => {
            let message = match wanted {
                Some(w) => format!("the config has no `location {w}`"),
                None => "no `location` of the config proxies (`proxy_pass`)".to_owned(),
            };
            Err(ConfigError::at(1, 1, message).hint(include_hint(tree).unwrap_or_else(listed)))
        }
        [first, second, ..] => {
            let what = match wanted {
                Some(w) => format!(
                    "several locations are `{w}` (lines {} and {})",
                    first.0.line(),
                    second.0.line()
                ),
                None => format!(
                    "several locations proxy to an upstream (lines {} and {})",
                    first.0.line(),
                    second.0.line()
                ),
            };
            Err(second.0.error(what).hint(format!(
                "say which in the plan, `nginx: {{ config: ..., location: /api }}`; {}",
                listed()
            )))
        }
    }
}

/// What a `proxy_pass` names.
enum Target<'a> {
    Upstream(&'a Directive),
    /// A literal address (`127.0.0.1:8081`, `unix:/run/app.sock`): a one-peer upstream.
    Address(String),
}

fn target<'a>(
    pass: &Directive,
    upstreams: &BTreeMap<&str, &'a Directive>,
) -> Result<Target<'a>, ConfigError> {
    let [url] = pass.args.as_slice() else {
        return Err(pass
            .error("`proxy_pass` takes one URL")
            .hint("`proxy_pass http://backend;`"));
    };
    let at = |message: String| ConfigError::at(url.line, url.column, message);
    if url.text.contains('$') {
        return Err(at(format!("`proxy_pass {}` names its upstream with a variable: which peers a request goes to is decided per request", url.text))
            .hint("name the upstream directly (`proxy_pass http://backend;`) in the config the harness reads"));
    }
    let rest = url
        .text
        .strip_prefix("http://")
        .or_else(|| url.text.strip_prefix("https://"))
        .ok_or_else(|| {
            at(format!(
                "`proxy_pass {}` is not an http:// or https:// URL",
                url.text
            ))
            .hint("`proxy_pass http://backend;` or `proxy_pass http://127.0.0.1:8081;`")
        })?;
    let host = rest.split('/').next().unwrap_or_default();
    if let Some(up) = upstreams.get(host) {
        return Ok(Target::Upstream(up));
    }
    let name_like = !host.is_empty()
        && host != "localhost"
        && !host.contains(['.', ':', '['])
        && !host.starts_with(|c: char| c.is_ascii_digit());
    if name_like || host.is_empty() {
        let names: Vec<&str> = upstreams.keys().copied().collect();
        let hint = crate::plan::error::did_you_mean(host, &names).unwrap_or_else(|| {
            if names.is_empty() {
                "define it: `upstream NAME { server 127.0.0.1:8081; }` in `http`".to_owned()
            } else {
                format!("the config's upstreams: {}", names.join(", "))
            }
        });
        return Err(at(format!(
            "`proxy_pass` names `{host}`, which no `upstream` block defines"
        ))
        .hint(hint));
    }
    Ok(Target::Address(host.to_owned()))
}

/// The peers of an `upstream` block (its `down` servers are never chosen: left out).
fn peers(
    up: &Directive,
    approximations: &mut Vec<Approximation>,
) -> Result<Vec<Peer>, ConfigError> {
    let mut peers = Vec::new();
    for d in up.children() {
        match d.name() {
            "server" => {
                if let Some(peer) = server(d, approximations)? {
                    peers.push(peer);
                }
            }
            "keepalive" | "keepalive_requests" | "keepalive_time" | "keepalive_timeout" => {
                approximations.push(approximation(d, "connections to the peers are kept open and reused: the model opens none of its own"));
            }
            "hash" | "ip_hash" | "least_conn" | "random" | "sticky" => {
                approximations.push(approximation(d, "peers are chosen by this balancer: the model takes them in weighted round-robin"));
            }
            "queue" | "ntlm" => approximations.push(approximation(d, "not modelled")),
            _ => {}
        }
    }
    if peers.is_empty() {
        return Err(up
            .error(format!("`{}` has no server that is not `down`", up.text()))
            .hint("add `server 127.0.0.1:8081;` to the upstream"));
    }
    Ok(peers)
}

/// One upstream `server` line; `None` when it is `down`.
fn server(
    d: &Directive,
    approximations: &mut Vec<Approximation>,
) -> Result<Option<Peer>, ConfigError> {
    let Some((address, params)) = d.args.split_first() else {
        return Err(d
            .error("`server` has no address")
            .hint("`server 127.0.0.1:8081 weight=2;`"));
    };
    let mut peer = Peer {
        name: address.text.clone(),
        weight: 1,
        max_fails: DEFAULT_MAX_FAILS,
        fail_timeout: DEFAULT_FAIL_TIMEOUT,
        backup: false,
        line: d.line(),
    };
    for p in params {
        let (key, value) = p.text.split_once('=').unwrap_or((&p.text, ""));
        let number = || {
            value.parse::<u32>().map_err(|_| {
                ConfigError::at(
                    p.line,
                    p.column,
                    format!("`{}`: `{key}=` takes a whole number", p.text),
                )
                .hint(format!("e.g. `{key}=2`"))
            })
        };
        match key {
            "weight" => {
                peer.weight = number()?;
                if peer.weight == 0 {
                    return Err(ConfigError::at(
                        p.line,
                        p.column,
                        "`weight=0`: nginx refuses a weight of zero",
                    )
                    .hint("mark the server `down` to take it out"));
                }
            }
            "max_fails" => peer.max_fails = number()?,
            "fail_timeout" => {
                peer.fail_timeout = duration(&Word {
                    text: value.to_owned(),
                    ..p.clone()
                })?
            }
            "backup" => peer.backup = true,
            "down" => return Ok(None),
            "max_conns" | "slow_start" => approximations.push(Approximation {
                line: p.line,
                directive: d.text(),
                why: format!("`{key}` is not modelled: the peer takes every request it is sent"),
            }),
            "resolve" | "service" | "route" | "drain" => {}
            _ => {
                return Err(ConfigError::at(
                    p.line,
                    p.column,
                    format!("`{}` is not a parameter of an upstream `server`", p.text),
                )
                .hint("weight=N, max_fails=N, fail_timeout=TIME, backup, down, max_conns=N"));
            }
        }
    }
    Ok(Some(peer))
}

/// The first directive `name` along `chain`, innermost first: the one nginx applies.
fn lookup<'a>(chain: &[&'a Directive], name: &str) -> Option<&'a Directive> {
    chain
        .iter()
        .find_map(|scope| scope.children().iter().find(|d| d.name() == name))
}

/// The model's retry settings: `proxy_next_upstream` and its `_tries` and `_timeout`, and
/// `proxy_read_timeout`, as the location inherits them.
fn settings(
    chain: &[&Directive],
    peers: Vec<Peer>,
    upstream: Source,
) -> Result<ProxyModel, ConfigError> {
    let mut approximations = Vec::new();
    let (retry_on, methods) = match lookup(chain, "proxy_next_upstream") {
        None => {
            let source = Source::default(DEFAULT_NEXT_UPSTREAM);
            let on = RetryOn {
                connect: true,
                lost: true,
                timeout: true,
                statuses: Vec::new(),
                source: source.clone(),
            };
            (on, (Methods::Idempotent, source))
        }
        Some(d) => next_upstream(d, &mut approximations)?,
    };
    let available = u32::try_from(peers.len()).unwrap_or(u32::MAX);
    let (mut tries, mut tries_source) = (available, upstream.clone());
    if let Some(d) = lookup(chain, "proxy_next_upstream_tries") {
        let n = one_arg(d)?.text.parse::<u32>().map_err(|_| {
            d.error(format!("`{}`: the tries are a whole number", d.text()))
                .hint("`proxy_next_upstream_tries 3;` (0: as many as the upstream has peers)")
        })?;
        if n > 0 && n < tries {
            (tries, tries_source) = (n, Source::at(d.text(), d.line()));
        }
    }
    let off =
        !(retry_on.connect || retry_on.lost || retry_on.timeout) && retry_on.statuses.is_empty();
    if off {
        (tries, tries_source) = (1, retry_on.source.clone());
    }
    let (try_timeout, try_timeout_source) = match lookup(chain, "proxy_read_timeout") {
        Some(d) => (duration(one_arg(d)?)?, Source::at(d.text(), d.line())),
        None => (
            DEFAULT_READ_TIMEOUT,
            Source::default("proxy_read_timeout 60s"),
        ),
    };
    let overall = match lookup(chain, "proxy_next_upstream_timeout") {
        Some(d) => Some(duration(one_arg(d)?)?).filter(|t| !t.is_zero()),
        None => None,
    };
    Ok(ProxyModel {
        kind: ProxyKind::Nginx,
        peers,
        retry_on,
        methods: methods.0,
        methods_source: methods.1,
        tries,
        tries_source,
        try_timeout,
        try_timeout_source,
        overall,
        next_peer: NextPeer::Another,
        next_peer_source: upstream,
        turnaround: Duration::ZERO,
        approximations,
    })
}

/// `proxy_next_upstream`'s conditions and its method rule.
fn next_upstream(
    d: &Directive,
    approximations: &mut Vec<Approximation>,
) -> Result<(RetryOn, (Methods, Source)), ConfigError> {
    let source = Source::at(d.text(), d.line());
    let mut on = RetryOn {
        connect: false,
        lost: false,
        timeout: false,
        statuses: Vec::new(),
        source: source.clone(),
    };
    let mut methods = Methods::Idempotent;
    let mut off = false;
    for a in &d.args {
        match a.text.as_str() {
            "error" => (on.connect, on.lost) = (true, true),
            "timeout" => on.timeout = true,
            "invalid_header" => {
                on.lost = true;
                approximations.push(approximation(d, "`invalid_header` (an empty or malformed response) is taken for a lost response"));
            }
            "non_idempotent" => methods = Methods::Any,
            "off" => off = true,
            // nginx Plus only; no request is denied here.
            "denied" => {}
            other => {
                let status = other
                    .strip_prefix("http_")
                    .and_then(|s| s.parse::<u16>().ok())
                    .filter(|s| STATUSES.contains(s));
                let Some(status) = status else {
                    return Err(ConfigError::at(a.line, a.column, format!("`{other}` is not a condition of `proxy_next_upstream`"))
                        .hint("error, timeout, invalid_header, http_500, http_502, http_503, http_504, http_403, http_404, http_429, non_idempotent, off"));
                };
                if !on.statuses.contains(&status) {
                    on.statuses.push(status);
                }
            }
        }
    }
    if d.args.is_empty() {
        return Err(d
            .error("`proxy_next_upstream` names no condition")
            .hint("`proxy_next_upstream error timeout;` (the default), or `off`"));
    }
    if off {
        // nginx: `off` among others switches them all off.
        on = RetryOn {
            connect: false,
            lost: false,
            timeout: false,
            statuses: Vec::new(),
            source: source.clone(),
        };
    }
    Ok((on, (methods, source)))
}

fn one_arg(d: &Directive) -> Result<&Word, ConfigError> {
    match d.args.as_slice() {
        [one] => Ok(one),
        _ => Err(d
            .error(format!("`{}` takes one value", d.name()))
            .hint(format!("`{} 10s;`", d.name()))),
    }
}

/// Directives along `chain` that change how a request is proxied and that the model does
/// not carry, each where nginx takes it from.
fn unmodelled(chain: &[&Directive]) -> Vec<Approximation> {
    const WHY: &[(&str, Option<&str>, &str)] = &[
        (
            "proxy_buffering",
            Some("off"),
            "the response is passed on as it arrives: the model answers with it whole",
        ),
        (
            "proxy_request_buffering",
            Some("off"),
            "the body is sent as it arrives, and nginx does not retry a request whose body it began to send: the model retries as if buffered",
        ),
        (
            "proxy_connect_timeout",
            None,
            "the model does not time connecting apart: a refused connection fails at once, one that hangs is bounded by the per-try timeout",
        ),
        (
            "proxy_send_timeout",
            None,
            "the model does not time the sending of a request apart from the per-try timeout",
        ),
        (
            "proxy_cache",
            None,
            "a cached response is answered without a peer: the model sends every request on",
        ),
        (
            "limit_req",
            None,
            "requests past the rate are refused by nginx itself: the model forwards them all",
        ),
        (
            "limit_conn",
            None,
            "connections past the limit are refused by nginx itself: the model forwards them all",
        ),
    ];
    WHY.iter()
        .filter_map(|(name, value, why)| {
            let d = lookup(chain, name)?;
            let applies = match value {
                Some(v) => d.args.first().is_some_and(|a| a.text == *v),
                None => d.args.first().is_none_or(|a| a.text != "off"),
            };
            applies.then(|| approximation(d, why))
        })
        .collect()
}

fn approximation(d: &Directive, why: &str) -> Approximation {
    Approximation {
        line: d.line(),
        directive: d.text(),
        why: why.to_owned(),
    }
}

#[cfg(test)]
mod tests;
