//! An HAProxy config → the [`ProxyModel`] of one of its `backend` (or `listen`) sections.
//!
//! The syntax is HAProxy's: sections (`global`, `defaults`, `frontend`, `backend`,
//! `listen`, and others the model skips) holding one directive per line, words split on
//! spaces, `"`/`'` quotes and `\` escapes, `#` comments. A backend takes what it does not
//! say from the last `defaults` section above it (or, since 2.4, the one it names with
//! `backend NAME from DEFAULTS`), and what neither says is HAProxy's default, as its
//! configuration manual (2.6) gives it. A directive that changes how requests are proxied
//! but that the model does not carry is an [`Approximation`]; the rest is skipped.

use std::time::Duration;

use super::haproxy_syntax::{Line, Section, duration, sections};
use super::nginx_syntax::Word;
use super::{ConfigError, ImportedProxy};
use crate::plan::proxy::{
    Approximation, Methods, NextPeer, Peer, ProxyKind, ProxyModel, RetryOn, Source,
};

/// `retries`' default: 3, so 4 attempts.
const DEFAULT_RETRIES: u32 = 3;
/// The longest turn-around before a retry after a connection failure: HAProxy waits
/// `min(timeout connect, 1s)` ("to avoid immediate retries", manual, `retries`).
const MAX_TURNAROUND: Duration = Duration::from_secs(1);
/// Without `timeout server` a try waits for ever (HAProxy warns of it at start): a bound
/// longer than any run stands in for ever.
const NO_TIMEOUT: Duration = Duration::from_secs(24 * 3600);
/// The statuses HAProxy 2.6's `retry-on` accepts; any other code is a config error there.
const STATUSES: [u16; 10] = [401, 403, 404, 408, 425, 500, 501, 502, 503, 504];
/// Server parameters that take a value, so the value is not read as a parameter.
const SERVER_VALUES: &[&str] = &[
    "addr",
    "agent-inter",
    "agent-port",
    "agent-send",
    "alpn",
    "ca-file",
    "check-proto",
    "check-sni",
    "cookie",
    "crt",
    "downinter",
    "error-limit",
    "fall",
    "fastinter",
    "id",
    "init-addr",
    "inter",
    "maxconn",
    "maxqueue",
    "minconn",
    "observe",
    "on-error",
    "on-marked-down",
    "on-marked-up",
    "pool-max-conn",
    "pool-purge-delay",
    "port",
    "proto",
    "resolve-prefer",
    "resolvers",
    "rise",
    "slowstart",
    "sni",
    "source",
    "track",
    "verify",
    "weight",
];

/// The model of the backend named `backend`, or of the one backend with servers.
pub(crate) fn import(text: &str, backend: Option<&str>) -> Result<ImportedProxy, ConfigError> {
    let sections = sections(text)?;
    let index = choose(&sections, backend)?;
    let chosen = &sections[index];
    let defaults = defaults(&sections, index)?;
    // The backend's line, else its defaults'.
    let get = |words: &[&str]| {
        chosen
            .last(words)
            .or_else(|| defaults.and_then(|d| d.last(words)))
    };
    let mut approximations = Vec::new();
    let peers = peers(chosen, defaults, &mut approximations)?;
    let (retries, tries_source) = match get(&["retries"]) {
        Some(l) => (number(l, 1)?, l.source()),
        None => (DEFAULT_RETRIES, Source::default("retries 3")),
    };
    let retry_on = match get(&["retry-on"]) {
        Some(l) => {
            let on = retry_on(l, &mut approximations)?;
            let l7 = on.lost || on.timeout || !on.statuses.is_empty();
            if l7 && get(&["option", "http-buffer-request"]).is_none() {
                approximations.push(approximation(l, "without `option http-buffer-request`, HAProxy resends a request with a body only when the body had arrived with its headers when it was first sent, a race (measured on 2.6.12: 6 to 9 of 20 small POSTs): the model resends every one, the worst case"));
            }
            on
        }
        None => RetryOn {
            connect: true,
            lost: false,
            timeout: false,
            statuses: Vec::new(),
            source: Source::default("retry-on conn-failure"),
        },
    };
    let (next_peer, next_peer_source) = redispatch(chosen, defaults)?;
    let (try_timeout, try_timeout_source) = match get(&["timeout", "server"]) {
        Some(l) => (duration(value(l, 2)?)?, l.source()),
        None => {
            approximations.push(Approximation { line: chosen.header.line(), directive: chosen.header.text(), why: "no `timeout server`: a try waits for ever (HAProxy warns of it); the model bounds it at 24h".to_owned() });
            (NO_TIMEOUT, Source::default("no timeout server"))
        }
    };
    let turnaround = match get(&["timeout", "connect"]) {
        Some(l) => duration(value(l, 2)?)?.min(MAX_TURNAROUND),
        None => MAX_TURNAROUND,
    };
    if let Some(l) = get(&["balance"])
        && !matches!(l.word(1), Some("roundrobin" | "static-rr"))
    {
        approximations.push(approximation(
            l,
            "servers are chosen by this algorithm: the model takes them in weighted round-robin",
        ));
    }
    if let Some(p) = peers.iter().find(|p| p.weight != peers[0].weight) {
        approximations.push(Approximation {
            line: p.line,
            directive: format!("server ... weight {}", p.weight),
            why: "HAProxy's round robin honours weights: the model takes the servers in turn, one each".to_owned(),
        });
    }
    approximations.extend(unmodelled(chosen, defaults));
    // One warning per reason (every server's `check` is one), at its first line.
    approximations.sort_by_key(|a| a.line);
    let mut seen = std::collections::BTreeSet::new();
    approximations.retain(|a| seen.insert(a.why.clone()));
    Ok(ImportedProxy {
        model: ProxyModel {
            kind: ProxyKind::Haproxy,
            peers,
            retry_on,
            // HAProxy checks no method: it retries whatever it could replay. A request it
            // retries after sending it is one whose body it still holds whole in its buffer
            // (L7 retries keep a copy of at most `tune.bufsize`); a larger body is never
            // retried once sent. Plans' bodies are small: the model retries any method.
            methods: Methods::Any,
            methods_source: Source::default("HAProxy retries any method"),
            tries: retries.saturating_add(1),
            tries_source,
            try_timeout,
            try_timeout_source,
            overall: None,
            next_peer,
            next_peer_source,
            turnaround,
            approximations,
        },
        block: chosen.name().unwrap_or_default().to_owned(),
    })
}

fn is_backend(s: &Section) -> bool {
    matches!(s.kind(), "backend" | "listen")
}

/// The index of the backend the plan names, or of the one with servers.
fn choose(sections: &[Section], wanted: Option<&str>) -> Result<usize, ConfigError> {
    let backends: Vec<(usize, &Section)> = sections
        .iter()
        .enumerate()
        .filter(|(_, s)| is_backend(s))
        .collect();
    let listed = || {
        let names: Vec<String> = backends
            .iter()
            .map(|(_, s)| format!("`{}` (line {})", s.name().unwrap_or("?"), s.header.line()))
            .collect();
        if names.is_empty() {
            "the config has no `backend` or `listen` section".to_owned()
        } else {
            format!("the config's backends: {}", names.join(", "))
        }
    };
    let candidates: Vec<&(usize, &Section)> = match wanted {
        Some(w) => backends
            .iter()
            .filter(|(_, s)| s.name() == Some(w))
            .collect(),
        None => backends
            .iter()
            .filter(|(_, s)| s.lines.iter().any(|l| l.is(&["server"])))
            .collect(),
    };
    match candidates.as_slice() {
        [(i, _)] => Ok(*i),
        [] => Err(ConfigError::at(
            1,
            1,
            match wanted {
                Some(w) => format!("the config has no `backend {w}` (nor `listen {w}`)"),
                None => "no `backend` or `listen` section of the config has a `server`".to_owned(),
            },
        )
        .hint(listed())),
        [_, (_, second), ..] => Err(second
            .header
            .error(match wanted {
                Some(w) => format!("two sections are named `{w}`"),
                None => "several backends have servers".to_owned(),
            })
            .hint(format!(
                "say which in the plan, `haproxy: {{ config: ..., backend: app }}`; {}",
                listed()
            ))),
    }
}

/// The `defaults` section the backend at `index` takes its settings from.
fn defaults(sections: &[Section], index: usize) -> Result<Option<&Section>, ConfigError> {
    let backend = &sections[index];
    let above = sections[..index]
        .iter()
        .rev()
        .filter(|s| s.kind() == "defaults");
    match (backend.header.word(2), backend.header.words.get(3)) {
        (None, _) => Ok(above.into_iter().next()),
        (Some("from"), Some(name)) => above
            .into_iter()
            .find(|s| s.name() == Some(name.text.as_str()))
            .map(Some)
            .ok_or_else(|| {
                ConfigError::at(
                    name.line,
                    name.column,
                    format!("no `defaults {}` above this backend", name.text),
                )
                .hint("a backend takes its settings from a `defaults` section written before it")
            }),
        _ => Err(backend
            .header
            .error(format!(
                "`{}`: a backend's name is followed by nothing, or by `from DEFAULTS`",
                backend.header.text()
            ))
            .hint("`backend app` or `backend app from web-defaults`")),
    }
}

/// The backend's servers, with `default-server`'s parameters under their own. A server
/// `disabled` or of weight 0 takes no requests: left out.
fn peers(
    backend: &Section,
    defaults: Option<&Section>,
    approximations: &mut Vec<Approximation>,
) -> Result<Vec<Peer>, ConfigError> {
    let default_server = |s: Option<&Section>| {
        s.and_then(|s| s.last(&["default-server"]))
            .map(|l| l.words[1..].to_vec())
    };
    let base: Vec<Word> = default_server(defaults)
        .into_iter()
        .chain(default_server(Some(backend)))
        .flatten()
        .collect();
    let mut peers = Vec::new();
    for l in &backend.lines {
        if l.is(&["server-template"]) {
            approximations.push(approximation(
                l,
                "the servers a template makes are not read: list them as `server` lines",
            ));
        }
        if !l.is(&["server"]) {
            continue;
        }
        let (Some(name), Some(_)) = (l.word(1), l.word(2)) else {
            return Err(l
                .error("`server` needs a name and an address")
                .hint("`server app1 127.0.0.1:8081 weight 2`"));
        };
        let mut peer = Peer {
            name: l.word(2).unwrap_or(name).to_owned(),
            weight: 1,
            max_fails: 0,
            fail_timeout: Duration::ZERO,
            backup: false,
            line: l.line(),
        };
        let params: Vec<&Word> = base.iter().chain(&l.words[3..]).collect();
        let mut taken = true;
        let mut i = 0;
        while let Some(p) = params.get(i) {
            let arg = params.get(i + 1);
            let needs = |what: &str| {
                arg.ok_or_else(|| {
                    ConfigError::at(p.line, p.column, format!("`{}` needs {what}", p.text))
                })
            };
            match p.text.as_str() {
                "weight" => {
                    let a = needs("a weight from 0 to 256")?;
                    peer.weight = a.text.parse::<u32>().ok().filter(|w| *w <= 256).ok_or_else(|| ConfigError::at(a.line, a.column, format!("`weight {}`: a weight is a whole number from 0 to 256", a.text)))?;
                    taken &= peer.weight > 0;
                }
                "backup" => peer.backup = true,
                "disabled" => taken = false,
                "enabled" => taken = true,
                "check" => approximations.push(approximation(l, "health checks take a server out: the model keeps every server in")),
                "observe" | "error-limit" | "on-error" => approximations.push(approximation(l, "servers taken out on observed errors: the model keeps every server in")),
                "maxconn" | "maxqueue" => approximations.push(approximation(l, "requests past a server's maxconn wait in a queue: the model sends every request at once")),
                _ => {}
            }
            i += if SERVER_VALUES.contains(&p.text.as_str()) {
                2
            } else {
                1
            };
        }
        if taken {
            peers.push(peer);
        }
    }
    approximations.dedup();
    if peers.is_empty() {
        return Err(backend
            .header
            .error(format!(
                "`{}` has no server that takes requests",
                backend.header.text()
            ))
            .hint("add `server app1 127.0.0.1:8081`"));
    }
    Ok(peers)
}

/// `retry-on`'s conditions.
fn retry_on(l: &Line, approximations: &mut Vec<Approximation>) -> Result<RetryOn, ConfigError> {
    let mut on = RetryOn {
        connect: false,
        lost: false,
        timeout: false,
        statuses: Vec::new(),
        source: l.source(),
    };
    let mut statuses = Vec::new();
    if l.words.len() < 2 {
        return Err(l
            .error("`retry-on` names no condition")
            .hint("`retry-on conn-failure empty-response response-timeout 503`"));
    }
    for w in &l.words[1..] {
        match w.text.as_str() {
            "none" => {}
            "conn-failure" => on.connect = true,
            "empty-response" => on.lost = true,
            "junk-response" => {
                on.lost = true;
                approximations.push(approximation(
                    l,
                    "`junk-response` (a malformed response) is taken for a lost one",
                ));
            }
            "response-timeout" => on.timeout = true,
            "0rtt-rejected" => approximations.push(approximation(
                l,
                "`0rtt-rejected` is ignored: no TLS early data here",
            )),
            "all-retryable-errors" => {
                (on.connect, on.lost, on.timeout) = (true, true, true);
                statuses.extend([500, 502, 503, 504]);
                approximations.push(approximation(l, "`all-retryable-errors` includes `junk-response` (taken for a lost response) and `0rtt-rejected` (ignored)"));
            }
            other => match other.parse::<u16>() {
                Ok(code) if STATUSES.contains(&code) => statuses.push(code),
                Ok(code) => {
                    return Err(ConfigError::at(w.line, w.column, format!("`retry-on {code}`: HAProxy 2.6 does not retry on status {code}, and refuses the config"))
                        .hint("HAProxy 2.6's `retry-on` takes 401, 403, 404, 408, 425, 500, 501, 502, 503 and 504: remove this code"));
                }
                Err(_) => {
                    return Err(ConfigError::at(w.line, w.column, format!("`{other}` is not a condition of `retry-on`"))
                        .hint("none, conn-failure, empty-response, junk-response, response-timeout, 0rtt-rejected, all-retryable-errors, or a status such as 503"));
                }
            },
        }
    }
    for status in statuses {
        if !on.statuses.contains(&status) {
            on.statuses.push(status);
        }
    }
    Ok(on)
}

/// Where a retry goes: `option redispatch [N]` (`no option redispatch` undoes one in
/// `defaults`), else the same server.
fn redispatch(
    backend: &Section,
    defaults: Option<&Section>,
) -> Result<(NextPeer, Source), ConfigError> {
    let of = |s: &Section| {
        s.lines
            .iter()
            .rev()
            .find(|l| l.is(&["option", "redispatch"]) || l.is(&["no", "option", "redispatch"]))
            .cloned()
    };
    let Some(l) = of(backend).or_else(|| defaults.and_then(of)) else {
        return Ok((
            NextPeer::Same,
            Source::default("no option redispatch: retries stay on their server"),
        ));
    };
    if l.is(&["no"]) {
        return Ok((NextPeer::Same, l.source()));
    }
    // The interval counts only off round robin: under it, with more than one server, every
    // retry is redispatched (measured on 2.6.12; `stream_choose_redispatch`).
    let interval = match l.words.get(2) {
        None => -1,
        Some(w) => {
            let n: i64 = w.text.parse().map_err(|_| {
                ConfigError::at(
                    w.line,
                    w.column,
                    format!("`{}`: the interval is a whole number", w.text),
                )
                .hint(
                    "`option redispatch` (every retry) or `option redispatch 2` (every second one)",
                )
            })?;
            match n {
                0 => return Ok((NextPeer::Same, l.source())),
                n => i32::try_from(n).unwrap_or(if n > 0 { i32::MAX } else { i32::MIN }),
            }
        }
    };
    Ok((NextPeer::Redispatch { interval }, l.source()))
}

/// Directives of the backend or its defaults that change how a request is proxied and
/// that the model does not carry.
fn unmodelled(backend: &Section, defaults: Option<&Section>) -> Vec<Approximation> {
    const WHY: &[(&[&str], &str)] = &[
        (
            &["option", "httpchk"],
            "health checks take a server out: the model keeps every server in",
        ),
        (
            &["http-check"],
            "health checks take a server out: the model keeps every server in",
        ),
        (
            &["http-request"],
            "request rules (deny, redirect, set-header...) are not carried out: the model forwards every request",
        ),
        (
            &["http-response"],
            "response rules are not carried out: the model passes responses on as they come",
        ),
        (
            &["hash-type"],
            "servers are chosen by a hash: the model takes them in weighted round-robin",
        ),
        (
            &["option", "allbackups"],
            "all backups at once: the model takes the first backup",
        ),
        (
            &["option", "persist"],
            "a request stays on a down server: not modelled",
        ),
        (
            &["timeout", "queue"],
            "the model queues nothing: a request goes to its server at once",
        ),
    ];
    let mut out = Vec::new();
    for (words, why) in WHY {
        if let Some(l) = backend
            .last(words)
            .or_else(|| defaults.and_then(|d| d.last(words)))
        {
            out.push(approximation(l, why));
        }
    }
    out
}

fn approximation(l: &Line, why: &str) -> Approximation {
    Approximation {
        line: l.line(),
        directive: l.text(),
        why: why.to_owned(),
    }
}

/// The word at `i` of a directive that needs it.
fn value(l: &Line, i: usize) -> Result<&Word, ConfigError> {
    l.words.get(i).ok_or_else(|| {
        l.error(format!("`{}` needs a value", l.text()))
            .hint("e.g. `timeout server 30s`, `retries 3`")
    })
}

fn number(l: &Line, i: usize) -> Result<u32, ConfigError> {
    let w = value(l, i)?;
    w.text.parse().map_err(|_| {
        ConfigError::at(
            w.line,
            w.column,
            format!(
                "`{}`: `{}` takes a whole number",
                w.text,
                l.word(0).unwrap_or_default()
            ),
        )
        .hint("e.g. `retries 3`")
    })
}

#[cfg(test)]
mod tests;
