//! The `load` section: the rate profile (a flat `rate` or `stages` of ramps and holds),
//! the caps on requests in flight and on connections, and the request mix.

use std::collections::BTreeMap;
use std::time::Duration;

use super::error::{Found, found};
use super::locate::Seg;
use super::model::{Arrivals, Load, Numbers, Protocol, RequestKind, Rpc, Segment};
use super::spec::{ArrivalsSpec, LoadSpec, MaxConnectionsSpec, RequestSpec};

const DEFAULT_MAX_IN_FLIGHT: u32 = 10_000;

/// The client's connections when a plan does not say: oha's and hey's `-c` default. A
/// load generator without a cap turns a stall of the server into a connection storm of
/// its own, and a large cap only delays it: at 40,000 req/s on the bench machine, 50 held
/// arrival lag p99 at 0.6 ms where 1,024 let a stall fill every connection and lag 16 to
/// 119 ms (docs/benchmarks.md). A plan whose client keeps more attempts on the wire (a
/// retry storm through an outage) says so with a larger cap or `per_attempt`.
pub const DEFAULT_MAX_CONNECTIONS: u32 = 50;

/// The load of a plan whose arrivals run for `duration`; `profile` is what [`profile`]
/// made of the stages, if there were any.
pub(super) fn resolve(
    load: &LoadSpec,
    profile: Option<Vec<Segment>>,
    duration: Duration,
    protocol: Protocol,
) -> Result<Load, Found> {
    use Seg::Key;
    let profile = match profile {
        Some(p) => p,
        None => {
            let rate = load.rate.map(|r| r.0).ok_or_else(|| {
                found(vec![Key("load")], "`load` has no `rate`")
                    .hint("add `rate: 100` (logical requests per second)")
            })?;
            vec![Segment {
                from: rate,
                to: rate,
                length: duration,
            }]
        }
    };
    let expected: f64 = profile.iter().map(Segment::expected_arrivals).sum();
    if expected < 1.0 {
        return Err(found(vec![Key("load")], format!("the load profile issues {expected:.2} requests on average: nothing would be measured"))
            .hint("raise `load.rate` (requests per second) or the `duration`"));
    }
    if load.max_in_flight == Some(0) {
        return Err(found(
            vec![Key("load"), Key("max_in_flight")],
            "`max_in_flight` is 0: no request could ever be sent",
        )
        .hint("omit it (default 10000) or give the number of logical requests allowed at once"));
    }
    let max_connections = match load.max_connections {
        Some(MaxConnectionsSpec::Cap(0)) => {
            return Err(found(
                vec![Key("load"), Key("max_connections")],
                "`max_connections` is 0: no attempt could ever be sent",
            )
            .hint(format!("omit it (default {DEFAULT_MAX_CONNECTIONS}), give the most connections the client may open, or say `per_attempt` for a client with no cap")));
        }
        Some(MaxConnectionsSpec::PerAttempt) if protocol.is_http2() => {
            return Err(found(
                vec![Key("load"), Key("max_connections")],
                "`max_connections: per_attempt` with HTTP/2: attempts are multiplexed as streams over a fixed number of connections",
            )
            .hint("give the number of connections to multiplex over (default 1, as a gRPC channel keeps)"));
        }
        Some(MaxConnectionsSpec::Cap(max)) => Some(max),
        Some(MaxConnectionsSpec::PerAttempt) => None,
        // HTTP/2 multiplexes over one connection unless told otherwise.
        None if protocol.is_http2() => None,
        None => Some(DEFAULT_MAX_CONNECTIONS),
    };
    let requests = requests(load, protocol)?;
    Ok(Load {
        arrivals: match load.arrivals {
            Some(ArrivalsSpec::Uniform) => Arrivals::Uniform,
            Some(ArrivalsSpec::Poisson) | None => Arrivals::Poisson,
        },
        profile,
        max_in_flight: load.max_in_flight.unwrap_or(DEFAULT_MAX_IN_FLIGHT).max(1),
        max_connections,
        protocol,
        requests,
    })
}

/// The rate profile from `load.stages`, and how long the stages last (`None`: no stages).
pub(super) fn profile(load: &LoadSpec) -> Result<(Option<Vec<Segment>>, Option<Duration>), Found> {
    use Seg::{Index, Key};
    if load.stages.is_empty() {
        return Ok((None, None));
    }
    let mut rate = load.rate.map_or(0.0, |r| r.0);
    let mut segments = Vec::new();
    let mut total = Duration::ZERO;
    for (i, stage) in load.stages.iter().enumerate() {
        let at = || vec![Key("load"), Key("stages"), Index(i)];
        let segment = match (stage.to, stage.over, stage.hold) {
            (Some(to), Some(over), None) => Segment {
                from: rate,
                to: to.0,
                length: over.get(),
            },
            (None, None, Some(hold)) => Segment {
                from: rate,
                to: rate,
                length: hold.get(),
            },
            _ => {
                return Err(found(
                    at(),
                    "a stage is `{ to: RATE, over: DURATION }` or `{ hold: DURATION }`",
                )
                .hint("e.g. `stages: [ { to: 500, over: 10s }, { hold: 20s } ]`"));
            }
        };
        rate = segment.to;
        total += segment.length;
        segments.push(segment);
    }
    Ok((Some(segments), Some(total)))
}

fn requests(load: &LoadSpec, protocol: Protocol) -> Result<Vec<RequestKind>, Found> {
    use Seg::Key;
    if load.requests.is_empty() {
        return Err(found(
            vec![Key("load"), Key("requests")],
            "`load.requests` is empty",
        )
        .hint("add `- { name: read, method: GET, path: \"/items/{n}\" }`"));
    }
    let mut kinds = Vec::new();
    for (i, r) in load.requests.iter().enumerate() {
        kinds.push(request_kind(i, r, &load.requests[..i], protocol)?);
    }
    if kinds.iter().all(|k| k.weight == 0.0) {
        return Err(found(
            vec![Key("load"), Key("requests")],
            "every request has weight 0",
        ));
    }
    Ok(kinds)
}

/// Where key `key` of request kind `i` is, for an error to point at.
fn request_at(i: usize, key: &'static str) -> Vec<Seg> {
    use Seg::{Index, Key};
    vec![Key("load"), Key("requests"), Index(i), Key(key)]
}

/// Request kind `i`, named unlike the `earlier` ones.
fn request_kind(
    i: usize,
    r: &RequestSpec,
    earlier: &[RequestSpec],
    protocol: Protocol,
) -> Result<RequestKind, Found> {
    let at = |key| request_at(i, key);
    if protocol == Protocol::Grpc {
        return rpc_kind(i, r, earlier);
    }
    if r.service.is_some() {
        return Err(found(
            at("service"),
            "`service` names a gRPC service, and the target speaks HTTP",
        )
        .hint("say `protocol: grpc` under `target:` for gRPC calls, or give a `path`"));
    }
    let Some(path) = r.path.as_deref() else {
        return Err(found(
            request_at(i, "name"),
            format!("request `{}` has no `path`", r.name),
        )
        .hint("e.g. `- { name: read, method: GET, path: \"/items/{n}\" }`"));
    };
    let method = r
        .method
        .clone()
        .unwrap_or_else(|| "GET".into())
        .to_ascii_uppercase();
    if method.is_empty() || !method.bytes().all(|b| b.is_ascii_alphabetic()) {
        return Err(found(
            at("method"),
            format!("`{method}` is not an HTTP method"),
        ));
    }
    if !path.starts_with('/') {
        return Err(
            found(at("path"), format!("path `{path}` must start with `/`"))
                .hint("paths are relative to the target, e.g. `/items/{n}`"),
        );
    }
    let n = numbers(i, r, path)?;
    if let Some(why) = not_a_request_target(path, &n.longest()) {
        return Err(found(at("path"), format!("path `{}` {why}", shorten(path)))
            .hint("write the path as it goes on the request line: percent-encode spaces and other reserved bytes (`%20`), e.g. `/items/{n}?q=a%20b`"));
    }
    let path_only = path.split_once('?').map_or(path, |(p, _)| p);
    match fault_server::wire::path::normalise(path_only) {
        Ok(std::borrow::Cow::Borrowed(_)) => {}
        Ok(std::borrow::Cow::Owned(normal)) => {
            let normal = match path.split_once('?') {
                Some((_, query)) => format!("{normal}?{query}"),
                None => normal,
            };
            return Err(found(
                at("path"),
                format!("path `{}` is not in normal form: the fault-server reads it as `{}`", shorten(path), shorten(&normal)),
            )
            .hint(format!("write `{normal}`: doubled slashes, `.` and `..` segments and escapes of plain characters (`%61`) name the same path, and the simulator takes the path as written")));
        }
        Err(refused) => {
            return Err(
                found(at("path"), format!("path `{}`: {refused}", shorten(path)))
                    .hint("paths are the service's, below its root, e.g. `/items/{n}`"),
            );
        }
    }
    if is_control_path(path) {
        return Err(found(
            at("path"),
            format!(
                "`{path}` is the fault-server's own endpoint: never faulted, never in the ledger"
            ),
        )
        .hint("load paths are the service's, e.g. `/items/{n}`"));
    }
    let weight = name_and_weight(i, r, earlier)?;
    check_headers(i, &r.headers)?;
    Ok(RequestKind {
        rpc: None,
        name: r.name.clone(),
        method,
        path: path.to_owned(),
        n,
        weight,
        body: r.body.clone(),
        headers: r.headers.clone(),
        idempotency_key: r.idempotency_key,
    })
}

/// The name (not empty, not used by the `earlier` kinds) and weight of request kind `i`.
fn name_and_weight(i: usize, r: &RequestSpec, earlier: &[RequestSpec]) -> Result<f64, Found> {
    if r.name.trim().is_empty() || earlier.iter().any(|q| q.name == r.name) {
        return Err(found(
            request_at(i, "name"),
            format!("request name `{}` is empty or used twice", r.name),
        ));
    }
    let weight = r.weight.unwrap_or(1.0);
    if !(weight.is_finite() && (0.0..=1e9).contains(&weight)) {
        return Err(found(
            request_at(i, "weight"),
            format!("weight {weight} must be a number between 0 and 1e9"),
        ));
    }
    Ok(weight)
}

/// Request kind `i` of a gRPC target: a unary call of `service` and `method`, a `POST`
/// to `/service/method` whose body (`body:`, if any) is the one message.
fn rpc_kind(i: usize, r: &RequestSpec, earlier: &[RequestSpec]) -> Result<RequestKind, Found> {
    let at = |key| request_at(i, key);
    let example = "e.g. `- { name: charge, service: chaos.Payments, method: Charge }`";
    if r.path.is_some() || r.n.is_some() {
        let key = if r.path.is_some() { "path" } else { "n" };
        return Err(found(
            at(key),
            "a gRPC call's path is `/service/method`: it takes no `path` nor `n`",
        )
        .hint(example));
    }
    let name_ok = |text: &str, dots: bool| {
        !text.is_empty()
            && !text.starts_with('.')
            && !text.ends_with('.')
            && text
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || (dots && b == b'.'))
    };
    let service = match r.service.as_deref() {
        Some(service) if name_ok(service, true) => service,
        Some(service) => {
            return Err(found(
                at("service"),
                format!(
                    "`{service}` is not a gRPC service name: package-qualified identifiers, like `chaos.Payments`"
                ),
            ));
        }
        None => {
            return Err(found(
                at("name"),
                format!("gRPC request `{}` names no `service`", r.name),
            )
            .hint(example));
        }
    };
    let method = match r.method.as_deref() {
        Some(method) if name_ok(method, false) => method,
        Some(method) => {
            return Err(found(
                at("method"),
                format!("`{method}` is not a gRPC method name: an identifier, like `Charge`"),
            ));
        }
        None => {
            return Err(found(
                at("name"),
                format!("gRPC request `{}` names no `method`", r.name),
            )
            .hint(example));
        }
    };
    let weight = name_and_weight(i, r, earlier)?;
    check_headers(i, &r.headers)?;
    Ok(RequestKind {
        rpc: Some(Rpc {
            service: service.to_owned(),
            method: method.to_owned(),
        }),
        name: r.name.clone(),
        method: "POST".to_owned(),
        path: format!("/{service}/{method}"),
        n: Numbers::default(),
        weight,
        body: r.body.clone(),
        headers: r.headers.clone(),
        idempotency_key: r.idempotency_key,
    })
}

/// The most values an `n: { values: [...] }` may list: a plan is a few KB, and a list
/// of ids a service has is a sample of them, not the table.
const MAX_VALUES: usize = 10_000;

/// What `{n}` becomes in request kind `i`'s path.
fn numbers(i: usize, r: &RequestSpec, path: &str) -> Result<Numbers, Found> {
    let at = || request_at(i, "n");
    let Some(spec) = &r.n else {
        return Ok(Numbers::default());
    };
    if !path.contains("{n}") {
        return Err(found(
            at(),
            format!("`n` is given but path `{}` has no `{{n}}`", shorten(path)),
        )
        .hint("write `{n}` where the value goes, e.g. `path: /items/{n}`"));
    }
    match (spec.min, spec.max, &spec.values) {
        (None, None, Some(values)) => {
            if values.is_empty() || values.len() > MAX_VALUES {
                return Err(found(
                    at(),
                    format!(
                        "`n.values` has {} values: give from 1 to {MAX_VALUES}",
                        values.len()
                    ),
                ));
            }
            let mut out = Vec::with_capacity(values.len());
            for (k, v) in values.iter().enumerate() {
                let text = match v {
                    serde_yaml::Value::String(s) => s.clone(),
                    serde_yaml::Value::Number(n) => n.to_string(),
                    _ => {
                        return Err(found(
                            at(),
                            format!("`n.values[{k}]` is not a string or a number"),
                        ));
                    }
                };
                let why = match text.is_empty() {
                    true => Some("is empty".to_owned()),
                    false => not_a_request_target(path, &text)
                        .map(|why| format!("({:?}): the path with it {why}", shorten(&text))),
                };
                if let Some(why) = why {
                    return Err(found(at(), format!("`n.values[{k}]` {why}")).hint(
                        "percent-encode spaces and other bytes a request line cannot carry (`%20`)",
                    ));
                }
                out.push(text);
            }
            Ok(Numbers::List(out))
        }
        (min, max, None) if min.is_some() || max.is_some() => {
            let (min, max) = (min.unwrap_or(0), max.unwrap_or(999_999));
            if min > max {
                return Err(found(
                    at(),
                    format!("`n` runs from {min} to {max}: `min` is above `max`"),
                ));
            }
            Ok(Numbers::Range { min, max })
        }
        _ => Err(
            found(at(), "`n` is a range or a list, not both nor neither")
                .hint("`n: { min: 1, max: 500 }` or `n: { values: [sku-1, sku-2] }`"),
        ),
    }
}

/// The extra headers of request kind `i`: each a valid name that neither the harness nor
/// the HTTP stack sets, with a printable ASCII value.
fn check_headers(i: usize, headers: &BTreeMap<String, String>) -> Result<(), Found> {
    let at = |key| request_at(i, key);
    for (name, value) in headers {
        if name.is_empty()
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(found(
                at("headers"),
                format!("`{name}` is not a valid header name"),
            ));
        }
        if fault_server::wire::is_reserved(name)
            || HTTP_STACK_HEADERS
                .iter()
                .any(|h| h.eq_ignore_ascii_case(name))
        {
            let mut path = at("headers");
            path.push(Seg::Name(name.clone()));
            return Err(found(path, format!("header `{name}` is set by the harness or the HTTP stack"))
                .hint("for an idempotency key write `idempotency_key: true`; request ids, attempt numbers, deadlines and trace context are always sent by each hop"));
        }
        if !value
            .bytes()
            .all(|b| b == b'\t' || (b' '..=b'~').contains(&b))
        {
            return Err(found(
                at("headers"),
                format!("the value of header `{name}` must be printable ASCII"),
            ));
        }
    }
    Ok(())
}

/// Headers only the HTTP stack may set. The contract's own (`x-request-id`, every
/// `x-chaos-` name, ...) are `fault_server::wire::is_reserved`.
const HTTP_STACK_HEADERS: [&str; 5] = [
    "content-length",
    "transfer-encoding",
    "host",
    "connection",
    "upgrade",
];

/// The longest path a request kind may have, `{n}` written out: servers commonly refuse a
/// request line over 8 KiB (nginx's default buffer, hyper's default too).
const MAX_PATH_BYTES: usize = 8 * 1024;

/// Why `path` cannot be sent as an origin-form request target (RFC 9112 §3.2.1), once
/// every `{n}` is `longest`, its longest value; `None` when it can.
fn not_a_request_target(path: &str, longest: &str) -> Option<String> {
    let written = path.replace("{n}", longest);
    if written.len() > MAX_PATH_BYTES {
        return Some(format!(
            "is {} bytes with `{{n}}` written out; at most {MAX_PATH_BYTES} are sent",
            written.len()
        ));
    }
    if let Some(b) = written.bytes().find(|b| !b.is_ascii_graphic()) {
        return Some(format!(
            "holds {}, which a request line cannot carry",
            match b {
                b' ' => "a space".to_owned(),
                b'\r' | b'\n' => "a line break".to_owned(),
                b => format!("the byte 0x{b:02x}"),
            }
        ));
    }
    http::uri::PathAndQuery::try_from(written.as_str())
        .err()
        .map(|e| format!("is not a request target: {e}"))
}

/// At most 80 characters of `text`, for a message that quotes it.
fn shorten(text: &str) -> String {
    match text.char_indices().nth(80) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

/// Paths the fault-server answers itself: never faulted, never in the ledger.
fn is_control_path(path: &str) -> bool {
    let path = path.split('?').next().unwrap_or(path);
    matches!(path, "/healthz" | "/metrics" | "/__chaos") || path.starts_with("/__chaos/")
}
