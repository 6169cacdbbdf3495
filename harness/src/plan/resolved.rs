//! A policy written out in full: every field after its preset, its import and the plan's
//! keys, in the plan's own key names and spelling (`250ms`, `gateway-error`, `none`).
//!
//! Why: a policy assembled from a preset or a production config hides most of what it
//! does. A one-line summary cannot say that an imported gRPC config has a 2 s deadline and
//! a multiplier of 2, or that the `sre` preset has no attempt timeout at all. This is the
//! one place that says all of it: `harness validate --explain` and `harness presets` write
//! it as YAML (which reads back as the same policy), report.json carries it as each
//! policy's `resolved` object, and report.html as a definition list. What is absent is
//! written out (`deadline: none`), with a note of what that means.

use std::fmt::Write as _;
use std::time::Duration;

use chaos_policy::{
    BackoffShape, BreakerConfig, BudgetConfig, Jitter, PolicyConfig, RetryAfter, RetryCondition,
};
use fault_server::duration::format_duration;
use serde::Serialize;
use serde::ser::{SerializeMap, SerializeSeq, Serializer};

use super::model::{NamedPolicy, TierKind};

mod bounded;

pub use bounded::{MAX_DEPTH, MAX_VALUES};

/// A value as a plan writes it. A map keeps its keys in the order written, the plan's
/// order, in every rendering (a JSON object too).
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Bool(bool),
    Int(u64),
    Float(f64),
    /// A duration as plans spell it, a word (`none`, `full`, `gateway-error`), a kind.
    Text(String),
    List(Vec<Value>),
    Map(Vec<(String, Value)>),
}

impl Value {
    fn text(s: impl Into<String>) -> Value {
        Value::Text(s.into())
    }

    fn duration(d: Duration) -> Value {
        Value::Text(format_duration(d))
    }

    fn duration_or_none(d: Option<Duration>) -> Value {
        d.map_or_else(|| Value::text("none"), Value::duration)
    }

    /// The same policy field: maps compare key by key in any order, since a baseline or a
    /// report.json edited by hand (or passed through a tool that sorts keys) says the same
    /// policy with its keys in another order.
    pub fn same(&self, other: &Value) -> bool {
        match (self, other) {
            (Value::Map(a), Value::Map(b)) => {
                a.len() == b.len()
                    && a.iter().all(|(k, v)| {
                        b.iter()
                            .find(|(key, _)| key == k)
                            .is_some_and(|(_, w)| v.same(w))
                    })
            }
            (Value::List(a), Value::List(b)) => {
                a.len() == b.len() && a.iter().zip(b).all(|(v, w)| v.same(w))
            }
            _ => self == other,
        }
    }

    /// The value of `key` in a map.
    pub fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Map(entries) => entries.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    fn is_none_word(&self) -> bool {
        matches!(self, Value::Text(t) if t == "none")
    }

    /// The value on one line, as YAML's flow style writes it: `{ base: 100ms, cap: 1s }`,
    /// `[gateway-error, 429]`.
    pub fn flow(&self) -> String {
        match self {
            Value::Bool(b) => b.to_string(),
            Value::Int(n) => n.to_string(),
            Value::Float(f) => f.to_string(),
            Value::Text(t) => scalar(t),
            Value::List(items) => {
                let items: Vec<String> = items.iter().map(Value::flow).collect();
                format!("[{}]", items.join(", "))
            }
            Value::Map(entries) if entries.is_empty() => "{}".to_owned(),
            Value::Map(entries) => {
                let entries: Vec<String> = entries
                    .iter()
                    .map(|(k, v)| format!("{}: {}", scalar(k), v.flow()))
                    .collect();
                format!("{{ {} }}", entries.join(", "))
            }
        }
    }
}

/// A text as a YAML plain scalar when it reads back as the same text, else quoted.
fn scalar(text: &str) -> String {
    let plain = !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'@' | b'/'))
        && !text.starts_with(['-', '.'])
        && text.parse::<f64>().is_err()
        && !matches!(
            text.to_ascii_lowercase().as_str(),
            "true" | "false" | "yes" | "no" | "on" | "off" | "null" | "~"
        );
    if plain {
        text.to_owned()
    } else {
        serde_json::to_string(text).expect("a string serialises")
    }
}

/// Every field of a policy, in the order of the plan reference.
pub fn policy(c: &PolicyConfig) -> Value {
    let mut fields = vec![
        ("max_attempts", Value::Int(u64::from(c.max_attempts))),
        (
            "attempt_timeout",
            Value::duration_or_none(c.attempt_timeout),
        ),
        ("deadline", Value::duration_or_none(c.deadline)),
        (
            "retry_on",
            Value::List(c.retry_on.conditions().iter().map(condition).collect()),
        ),
        ("backoff", backoff(&c.backoff)),
    ];
    match c.retry_after {
        RetryAfter::Ignore => fields.push(("honor_retry_after", Value::Bool(false))),
        RetryAfter::Honor { max } => {
            fields.push(("honor_retry_after", Value::Bool(true)));
            fields.push(("retry_after_max", Value::duration(max)));
        }
        RetryAfter::Clamp { max_extra } => {
            fields.push(("honor_retry_after", Value::Bool(true)));
            fields.push(("retry_after_max_extra", Value::duration(max_extra)));
        }
    }
    fields.push(("retry_non_idempotent", Value::Bool(c.retry_non_idempotent)));
    fields.push((
        "budget",
        c.budget
            .as_ref()
            .map_or_else(|| Value::text("none"), budget),
    ));
    fields.push((
        "breaker",
        c.breaker
            .as_ref()
            .map_or_else(|| Value::text("none"), breaker),
    ));
    fields.push(("honor_no_retry", Value::Bool(c.honor_no_retry)));
    Value::Map(fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
}

/// A plan's policy: its fields, and each relay tier's policy when the plan has relay
/// tiers. A proxy tier is not the policy's to set (its config is): [`proxy_tiers`] says it.
pub fn named(p: &NamedPolicy) -> Value {
    let mut value = policy(p.policy.config());
    let relays = p
        .tiers
        .iter()
        .filter(|t| !matches!(t.kind, TierKind::Proxy | TierKind::Mesh));
    if relays.clone().next().is_some()
        && let Value::Map(fields) = &mut value
    {
        let tiers = relays
            .map(|t| {
                let v = match t.kind {
                    TierKind::Same => Value::text("same"),
                    TierKind::None => Value::text("none"),
                    TierKind::Own | TierKind::Proxy | TierKind::Mesh => policy(t.policy.config()),
                };
                (t.tier.clone(), v)
            })
            .collect();
        fields.push(("tiers".to_owned(), Value::Map(tiers)));
    }
    value
}

/// A plan's tiers as `harness validate --explain` writes them: each proxy tier as its
/// config makes it behave, every setting with the directive (and line) that set it or the
/// default it is; a relay tier by name (each policy's `tiers:` says what it does). Empty
/// without proxy tiers.
pub fn proxy_tiers(plan: &super::Plan) -> String {
    let meshes: Vec<Option<&super::mesh::MeshTier>> =
        plan.policies.first().map_or_else(Vec::new, |p| {
            p.tiers.iter().map(|t| t.mesh.as_deref()).collect()
        });
    if plan.tier_proxies.iter().all(Option::is_none) && meshes.iter().all(Option::is_none) {
        return String::new();
    }
    let mut out =
        "tiers:   # as resolved: each proxy and mesh tier as its config makes it behave\n"
            .to_owned();
    for (i, (name, proxy)) in plan.tiers.iter().zip(&plan.tier_proxies).enumerate() {
        if let Some(mesh) = meshes.get(i).copied().flatten() {
            let _ = writeln!(out, "  - name: {}", scalar(name));
            out.push_str(&mesh.explain());
            continue;
        }
        match proxy {
            None => {
                let _ = writeln!(
                    out,
                    "  - {}   # a relay tier: each policy's `tiers:` sets it",
                    scalar(name)
                );
            }
            Some(p) => {
                let _ = writeln!(out, "  - name: {}", scalar(name));
                out.push_str(&proxy_tier(p));
            }
        }
    }
    out
}

/// One proxy tier's resolved model, as YAML at four spaces, each setting's source after
/// a `#`.
fn proxy_tier(p: &super::proxy::ProxyTier) -> String {
    use super::proxy::{Methods, NextPeer, ProxyKind};
    let m = &p.model;
    let mut out = String::new();
    let (block_key, default_binary) = match m.kind {
        ProxyKind::Nginx => ("location", "nginx on PATH, or /usr/sbin/nginx"),
        ProxyKind::Haproxy => ("backend", "haproxy on PATH, or /usr/sbin/haproxy"),
    };
    let file = p.file.display().to_string();
    let binary = p
        .binary
        .as_ref()
        .map_or(default_binary.to_owned(), |b| b.display().to_string());
    entry(
        &mut out,
        m.kind.name(),
        format!(
            "{{ config: {}, {block_key}: {} }}",
            scalar(&file),
            scalar(&p.block)
        ),
        format!("runs {binary}"),
    );
    out.push_str(&peers(&m.peers));
    entry(
        &mut out,
        "retry_on",
        conditions(&m.retry_on),
        m.retry_on.source.to_string(),
    );
    let methods = match m.methods {
        Methods::Idempotent => (
            "idempotent",
            "never resends a POST, LOCK or PATCH once sent",
        ),
        Methods::Any => ("any", "any method, once sent too"),
    };
    entry(
        &mut out,
        "methods",
        methods.0.to_owned(),
        format!("{}; {}", methods.1, m.methods_source),
    );
    entry(
        &mut out,
        "tries",
        m.tries.to_string(),
        format!("the first attempt included; {}", m.tries_source),
    );
    entry(
        &mut out,
        "try_timeout",
        format_duration(m.try_timeout),
        m.try_timeout_source.to_string(),
    );
    let overall = m.overall.map_or_else(|| "none".to_owned(), format_duration);
    entry(&mut out, "overall", overall, match m.kind {
        ProxyKind::Nginx => "how long a request may go on being retried (`proxy_next_upstream_timeout`; none: no cap)".to_owned(),
        ProxyKind::Haproxy => "HAProxy caps retries by their number alone".to_owned(),
    });
    let next = match m.next_peer {
        NextPeer::Another => "another".to_owned(),
        NextPeer::Same => "same".to_owned(),
        NextPeer::Redispatch { interval: -1 } => "redispatch".to_owned(),
        NextPeer::Redispatch { interval } => format!("{{ redispatch: {interval} }}"),
    };
    entry(&mut out, "next_peer", next, m.next_peer_source.to_string());
    entry(
        &mut out,
        "turnaround",
        format_duration(m.turnaround),
        match m.kind {
            ProxyKind::Nginx => "nginx tries the next peer at once".to_owned(),
            ProxyKind::Haproxy => {
                "the wait before a retry after a connection failure: min(timeout connect, 1s)"
                    .to_owned()
            }
        },
    );
    out
}

/// A proxy tier's peers, one flow map a line, each with its line in the config.
fn peers(peers: &[super::proxy::Peer]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "    peers:");
    for peer in peers {
        let _ = writeln!(
            out,
            "      - {{ name: {}, weight: {}, max_fails: {}, fail_timeout: {}, backup: {} }}   # line {}",
            scalar(&peer.name),
            peer.weight,
            peer.max_fails,
            format_duration(peer.fail_timeout),
            peer.backup,
            peer.line
        );
    }
    out
}

/// A proxy's retry conditions as a flow list: `[connect-failure, lost, timeout, 503]`.
fn conditions(on: &super::proxy::RetryOn) -> String {
    let words = [
        (on.connect, "connect-failure"),
        (on.lost, "lost"),
        (on.timeout, "timeout"),
    ];
    let mut conditions: Vec<String> = words
        .iter()
        .filter(|(on, _)| *on)
        .map(|(_, w)| (*w).to_owned())
        .collect();
    conditions.extend(on.statuses.iter().map(u16::to_string));
    format!("[{}]", conditions.join(", "))
}

/// One `key: value   # note` line of a proxy tier.
fn entry(out: &mut String, key: &str, value: String, note: String) {
    let _ = writeln!(out, "    {key}: {value}   # {note}");
}

/// A `retry_on` entry as a plan writes it; a status code as a number.
fn condition(c: &RetryCondition) -> Value {
    Value::text(match c {
        RetryCondition::Any => "any",
        RetryCondition::Transient => "transient",
        RetryCondition::ServerError => "5xx",
        RetryCondition::GatewayError => "gateway-error",
        RetryCondition::ConnectFailure => "connect-failure",
        RetryCondition::Reset => "reset",
        RetryCondition::Timeout => "timeout",
        RetryCondition::RefusedStream => "refused-stream",
        RetryCondition::Grpc(code) => {
            chaos_policy::grpc::snake_name(*code).unwrap_or("unknown_code")
        }
        RetryCondition::Status(code) => return Value::Int(u64::from(*code)),
    })
}

/// `none`, or the shape's block and the jitter, as the plan's `backoff:` takes them.
pub fn backoff(b: &chaos_policy::Backoff) -> Value {
    let d = Value::duration;
    let shape = match b.shape() {
        BackoffShape::None => return Value::text("none"),
        BackoffShape::Fixed(delay) => ("fixed", d(delay)),
        BackoffShape::Exponential {
            base,
            multiplier,
            cap,
        } => (
            "exponential",
            Value::Map(vec![
                ("base".to_owned(), d(base)),
                ("multiplier".to_owned(), Value::Float(multiplier)),
                ("cap".to_owned(), d(cap)),
            ]),
        ),
        BackoffShape::Envoy { base, cap } => (
            "envoy",
            Value::Map(vec![
                ("base".to_owned(), d(base)),
                ("cap".to_owned(), d(cap)),
            ]),
        ),
    };
    let jitter = match b.jitter() {
        Jitter::None => Value::text("none"),
        Jitter::Full => Value::text("full"),
        Jitter::Equal => Value::text("equal"),
        Jitter::Decorrelated => Value::text("decorrelated"),
        Jitter::Additive(f) => Value::Map(vec![("additive".to_owned(), Value::Float(f))]),
        Jitter::Proportional(s) => Value::Map(vec![("proportional".to_owned(), Value::Float(s))]),
    };
    Value::Map(vec![
        (shape.0.to_owned(), shape.1),
        ("jitter".to_owned(), jitter),
    ])
}

/// The budget's kind as the plan's `budget.kind` names it, and every parameter.
pub fn budget(b: &BudgetConfig) -> Value {
    let f = Value::Float;
    let (kind, fields) = match *b {
        BudgetConfig::TokenBucket {
            ratio,
            max_tokens,
            initial_tokens,
        } => (
            "token_bucket",
            vec![
                ("ratio", f(ratio)),
                ("max_tokens", f(max_tokens)),
                ("initial_tokens", f(initial_tokens)),
            ],
        ),
        BudgetConfig::TtlWindow {
            ratio,
            min_per_sec,
            ttl,
        } => (
            "ttl_window",
            vec![
                ("ratio", f(ratio)),
                ("min_per_sec", f(min_per_sec)),
                ("ttl", Value::duration(ttl)),
            ],
        ),
        BudgetConfig::GrpcThrottle {
            max_tokens,
            token_ratio,
        } => (
            "grpc",
            vec![
                ("max_tokens", f(max_tokens)),
                ("token_ratio", f(token_ratio)),
            ],
        ),
        BudgetConfig::RetryQuota {
            capacity,
            costs,
            success_refill,
        } => (
            "aws_quota",
            vec![
                ("capacity", f(capacity)),
                ("retry_cost", f(costs.retry)),
                ("timeout_cost", f(costs.timeout)),
                ("throttling_cost", f(costs.throttling)),
                ("success_refill", f(success_refill)),
            ],
        ),
        BudgetConfig::Concurrency {
            percent,
            min_concurrency,
        } => (
            "envoy_concurrency",
            vec![
                ("percent", f(percent)),
                ("min_concurrency", Value::Int(u64::from(min_concurrency))),
            ],
        ),
    };
    Value::Map(
        std::iter::once(("kind", Value::text(kind)))
            .chain(fields)
            .map(|(k, v)| (k.to_owned(), v))
            .collect(),
    )
}

fn breaker(b: &BreakerConfig) -> Value {
    Value::Map(vec![
        ("failure_ratio".to_owned(), Value::Float(b.failure_ratio)),
        (
            "min_requests".to_owned(),
            Value::Int(u64::from(b.min_requests)),
        ),
        ("window".to_owned(), Value::duration(b.window)),
        ("open_for".to_owned(), Value::duration(b.open_for)),
        (
            "half_open_probes".to_owned(),
            Value::Int(u64::from(b.half_open_probes)),
        ),
    ])
}

/// What a field of `policy` means where the value alone does not say: what is absent, and
/// the defaults that surprise.
pub fn note(policy: &Value, key: &str) -> Option<&'static str> {
    let value = policy.get(key)?;
    let none = value.is_none_word();
    let no_deadline = policy.get("deadline").is_some_and(Value::is_none_word);
    Some(match key {
        "max_attempts" if *value == Value::Int(1) => "never retries",
        "attempt_timeout" if none && no_deadline => {
            "no limit: an attempt waits until it is answered; a server that never answers holds it to the end of the drain"
        }
        "attempt_timeout" if none => "an attempt waits as long as the deadline allows",
        "deadline" if none => {
            "no limit on the whole request: attempts, waits and their timeouts add up"
        }
        "retry_on" if *value == Value::List(Vec::new()) => "retries nothing",
        "backoff" if none => "retries at once",
        "retry_non_idempotent" if *value == Value::Bool(false) => {
            "a POST or PATCH without an idempotency key is retried only after a failure that proves it unsent"
        }
        "retry_non_idempotent" => {
            "unsafe: a POST or PATCH without an idempotency key is retried after any retryable failure"
        }
        "retry_after_max_extra" => {
            "waits what Retry-After asks, clamped to [backoff, backoff + this] (the AWS SDKs' 2026 behaviour)"
        }
        "budget" if none => "only max_attempts limits retries",
        "budget" if value.get("kind") == Some(&Value::text("envoy_concurrency")) => {
            "limits retries in flight, not their number: no amplification bound"
        }
        "breaker" if none => "never stops attempts",
        "honor_no_retry" if *value == Value::Bool(true) => {
            "gives up on an answer marked x-chaos-no-retry: the tier behind it gave up already"
        }
        _ => return None,
    })
}

/// A policy's fields as a YAML block, each line `indent` spaces in, a note after a `#`; a
/// relay tier's own policy is a block of its own under `tiers:`.
pub fn yaml(policy: &Value, indent: usize) -> String {
    let mut out = String::new();
    let pad = " ".repeat(indent);
    let Value::Map(fields) = policy else {
        let _ = writeln!(out, "{pad}{}", policy.flow());
        return out;
    };
    for (key, value) in fields {
        match value {
            Value::Map(tiers) if key == "tiers" => {
                let _ = writeln!(out, "{pad}tiers:");
                for (tier, v) in tiers {
                    if matches!(v, Value::Map(_)) {
                        let _ = writeln!(out, "{pad}  {}:", scalar(tier));
                        out.push_str(&yaml(v, indent + 4));
                    } else {
                        let _ = writeln!(out, "{pad}  {}: {}", scalar(tier), v.flow());
                    }
                }
            }
            _ => {
                let line = format!("{pad}{key}: {}", value.flow());
                match note(policy, key) {
                    Some(note) => {
                        let _ = writeln!(out, "{line}   # {note}");
                    }
                    None => {
                        let _ = writeln!(out, "{line}");
                    }
                }
            }
        }
    }
    out
}

impl Serialize for Value {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Value::Bool(b) => s.serialize_bool(*b),
            Value::Int(n) => s.serialize_u64(*n),
            Value::Float(f) => s.serialize_f64(*f),
            Value::Text(t) => s.serialize_str(t),
            Value::List(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(item)?;
                }
                seq.end()
            }
            Value::Map(entries) => {
                let mut map = s.serialize_map(Some(entries.len()))?;
                for (k, v) in entries {
                    map.serialize_entry(k, v)?;
                }
                map.end()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use chaos_policy::Preset;

    use super::{Value, policy, yaml};

    /// The policy a plan's one policy resolves to, written as YAML.
    fn resolved(keys: &str) -> String {
        let text = format!(
            "duration: 1s\nload:\n  rate: 10\n  requests: [ {{ name: r, path: / }} ]\npolicies:\n  - name: a\n{keys}"
        );
        let plan =
            super::super::parse(Path::new("p.yaml"), &text).unwrap_or_else(|e| panic!("{e}"));
        yaml(&super::named(&plan.policies[0]), 0)
    }

    #[test]
    fn every_field_is_written_and_what_is_absent_says_so() {
        assert_eq!(
            resolved("    preset: sre\n"),
            "\
max_attempts: 3
attempt_timeout: none   # no limit: an attempt waits until it is answered; a server that never answers holds it to the end of the drain
deadline: none   # no limit on the whole request: attempts, waits and their timeouts add up
retry_on: [transient]
backoff: { exponential: { base: 100ms, multiplier: 2, cap: 10s }, jitter: full }
honor_retry_after: false
retry_non_idempotent: false   # a POST or PATCH without an idempotency key is retried only after a failure that proves it unsent
budget: { kind: ttl_window, ratio: 0.1, min_per_sec: 0, ttl: 2m }
breaker: none   # never stops attempts
honor_no_retry: true   # gives up on an answer marked x-chaos-no-retry: the tier behind it gave up already
"
        );
        let grpc = resolved("    preset: grpc\n    attempt_timeout: 1s\n    deadline: 2s\n");
        for line in [
            "attempt_timeout: 1s\n",
            "deadline: 2s\n",
            "retry_on: [unavailable, gateway-error, 429, connect-failure, reset, refused-stream]\n",
            "backoff: { exponential: { base: 100ms, multiplier: 2, cap: 1s }, jitter: { proportional: 0.2 } }\n",
            "honor_retry_after: true\nretry_after_max: 1m\n",
            "budget: { kind: grpc, max_tokens: 10, token_ratio: 0.1 }\n",
        ] {
            assert!(grpc.contains(line), "{line} in\n{grpc}");
        }
    }

    /// What `--explain` writes is a policy: pasted into a plan without its preset, it is
    /// the same policy, for every preset and a policy with tiers of every kind.
    #[test]
    fn the_written_policy_reads_back_as_the_same_policy() {
        let plan = |policy_yaml: &str| {
            let text = format!(
                "duration: 1s\ntiers: [api, backend, edge]\nload:\n  rate: 10\n  requests: [ {{ name: r, path: / }} ]\npolicies:\n  - name: a\n{policy_yaml}"
            );
            super::super::parse(Path::new("p.yaml"), &text)
                .unwrap_or_else(|e| panic!("{e}\n{text}"))
        };
        for preset in Preset::ALL {
            let first = plan(&format!(
                "    preset: {}\n    tiers: {{ api: same, backend: {{ preset: envoy, retry_on: [503, reset] }} }}\n",
                preset.name()
            ));
            let written = yaml(&super::named(&first.policies[0]), 4);
            let again = plan(&written);
            assert_eq!(
                again.policies[0].policy,
                first.policies[0].policy,
                "{}:\n{written}",
                preset.name()
            );
            assert_eq!(
                super::named(&again.policies[0]),
                super::named(&first.policies[0]),
                "{}",
                preset.name()
            );
        }
    }

    #[test]
    fn json_keeps_the_plans_order_and_reads_back() {
        let value = policy(&Preset::AwsStandard2026.config());
        let json = serde_json::to_string(&value).expect("serialises");
        assert!(
            json.starts_with("{\"max_attempts\":3,\"attempt_timeout\":\"none\",\"deadline\":\"none\",\"retry_on\":[\"transient\",500],"),
            "{json}"
        );
        assert!(json.contains("\"retry_after_max_extra\":\"5s\""), "{json}");
        let back: Value = serde_json::from_str(&json).expect("reads back");
        assert_eq!(back, value);
    }
}
