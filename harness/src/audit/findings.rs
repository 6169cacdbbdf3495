//! What the walks of a policy's chain say, each at the line that causes it: where each
//! hop's retry settings are written, its budget and the bound it implies, the hop that
//! multiplies most, the hops that resend what is not safe to resend, the hops that go on
//! after their caller gave up, and the hops whose `x-chaos-no-retry` is honoured or not.

use std::fmt::Write;
use std::time::Duration;

use chaos_policy::{BudgetConfig, RunCounts};
use chaos_policy::{Client, GiveUp, Policy, Request};
use fault_server::wire::NO_RETRY;

use super::walk::{Class, Walked};
use super::{Case, Finding, HopInfo};
use crate::plan::locate::{Seg, locate};
use crate::plan::proxy::{ProxyKind, ProxyTier};
use crate::plan::{NamedPolicy, Plan, TierPolicy};

/// One method's request against one failure class, walked twice: with the least backoff
/// draws (the most attempts) and with the most (the longest time).
#[derive(Debug, Clone)]
pub(super) struct Trace {
    pub method: String,
    pub request: Request,
    pub class: Class,
    pub most: Walked,
    pub longest: Walked,
}

/// Each hop's settings and limits, the client first.
pub(super) fn hop_infos(
    plan: &Plan,
    text: &str,
    index: usize,
    policy: &NamedPolicy,
    traces: &[Trace],
) -> Vec<HopInfo> {
    // The time figures come from a request whose every try times out.
    let timed = traces
        .iter()
        .find(|t| t.class == Class::Timeout)
        .map(|t| &t.longest);
    let timing = |hop: usize| {
        let trace = timed.and_then(|w| w.hops.get(hop));
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        (
            trace.map_or(0.0, |t| ms(t.took)),
            trace.and_then(|t| t.caller_waits).map(ms),
        )
    };
    let plan_line = |path: &[Seg]| match locate(text, path) {
        Some((line, _)) => format!("{}:{line}", plan.file.display()),
        None => plan.file.display().to_string(),
    };
    let mut out = Vec::with_capacity(policy.tiers.len() + 1);
    let (serial_ms, caller_waits_ms) = timing(0);
    out.push(HopInfo {
        name: "client".into(),
        kind: policy
            .preset
            .map_or_else(|| "policy".to_owned(), |p| p.name().to_owned()),
        at: plan_line(&client_path(text, index)),
        settings: policy_settings(&policy.policy),
        budget: budget_of(&policy.policy),
        budget_bound: bound_of(plan, &policy.policy),
        serial_ms,
        caller_waits_ms,
    });
    for (i, tier) in policy.tiers.iter().enumerate() {
        let (serial_ms, caller_waits_ms) = timing(i + 1);
        let path = [
            Seg::Key("policies"),
            Seg::Index(index),
            Seg::Key("tiers"),
            Seg::Name(tier.tier.clone()),
        ];
        out.push(hop_info(
            plan,
            tier,
            plan_line(&path),
            serial_ms,
            caller_waits_ms,
        ));
    }
    out
}

/// The line of the client's policy: its `max_attempts`, `preset` or `import` when written,
/// else its entry.
fn client_path(text: &str, index: usize) -> Vec<Seg> {
    let entry = [Seg::Key("policies"), Seg::Index(index)];
    let at_entry = locate(text, &entry);
    for key in ["max_attempts", "preset", "import"] {
        let path = [entry[0].clone(), entry[1].clone(), Seg::Key(key)];
        if locate(text, &path) != at_entry {
            return path.to_vec();
        }
    }
    entry.to_vec()
}

/// A tier's settings: its policy at its line in the plan, or a proxy's at its config's
/// lines. A new tier kind adds its arm here.
fn hop_info(
    plan: &Plan,
    tier: &TierPolicy,
    plan_at: String,
    serial_ms: f64,
    caller_waits_ms: Option<f64>,
) -> HopInfo {
    match &tier.proxy {
        Some(proxy) => HopInfo {
            name: tier.tier.clone(),
            kind: proxy.model.kind.name().into(),
            at: proxy_at(proxy),
            settings: proxy_settings(proxy),
            budget: ejection(proxy),
            budget_bound: None,
            serial_ms,
            caller_waits_ms,
        },
        None => HopInfo {
            name: tier.tier.clone(),
            kind: tier.kind.name().into(),
            at: plan_at,
            settings: policy_settings(&tier.policy),
            budget: budget_of(&tier.policy),
            budget_bound: bound_of(plan, &tier.policy),
            serial_ms,
            caller_waits_ms,
        },
    }
}

/// Where a proxy's retries are set: the line of its retry conditions, else of its tries,
/// else the file (every setting a default).
fn proxy_at(proxy: &ProxyTier) -> String {
    let m = &proxy.model;
    match m.retry_on.source.line.or(m.tries_source.line) {
        Some(line) => format!("{}:{line}", proxy.file.display()),
        None => proxy.file.display().to_string(),
    }
}

/// A proxy's retry settings as its config says them (a default says so), with their lines.
fn proxy_settings(proxy: &ProxyTier) -> String {
    let m = &proxy.model;
    let mut out = m.retry_on.source.to_string();
    for s in [&m.tries_source, &m.methods_source, &m.try_timeout_source] {
        if !out.contains(&s.directive) {
            let _ = write!(out, ", {s}");
        }
    }
    out
}

/// nginx's passive ejection, when it can take every server out.
fn ejection(proxy: &ProxyTier) -> Option<String> {
    let m = &proxy.model;
    let ejecting = m.peers.iter().filter(|p| p.max_fails > 0).count();
    (m.kind == ProxyKind::Nginx && m.peers.len() > 1 && ejecting > 0).then(|| {
        let p = &m.peers[0];
        format!(
            "passive ejection (`max_fails={} fail_timeout={}s` on {ejecting} of {} servers): after the first failures of a lost response or timeout, the servers are out and it answers 502 without sending",
            p.max_fails,
            p.fail_timeout.as_secs_f64(),
            m.peers.len()
        )
    })
}

/// A policy's settings that decide its tries and its time.
fn policy_settings(policy: &Policy) -> String {
    let c = policy.config();
    let secs =
        |d: Option<Duration>| d.map_or("none".to_owned(), |d| format!("{}s", d.as_secs_f64()));
    format!(
        "max_attempts {}, attempt_timeout {}, deadline {}, honor_no_retry {}, retry_non_idempotent {}",
        c.max_attempts,
        secs(c.attempt_timeout),
        secs(c.deadline),
        c.honor_no_retry,
        c.retry_non_idempotent
    )
}

fn budget_of(policy: &Policy) -> Option<String> {
    let config = policy.config();
    let budget = config.budget.as_ref().map(|b| match b {
        BudgetConfig::TokenBucket {
            ratio, max_tokens, ..
        } => format!("token bucket (ratio {ratio}, {max_tokens} tokens)"),
        BudgetConfig::TtlWindow {
            ratio,
            min_per_sec,
            ttl,
        } => format!(
            "retry budget (ratio {ratio}, {min_per_sec}/s, ttl {} s)",
            ttl.as_secs_f64()
        ),
        BudgetConfig::GrpcThrottle {
            max_tokens,
            token_ratio,
        } => format!("gRPC retry throttling ({max_tokens} tokens, ratio {token_ratio})"),
        BudgetConfig::RetryQuota {
            capacity, costs, ..
        } => format!(
            "AWS retry quota ({capacity}, {} a retry, {} after a timeout)",
            costs.retry, costs.timeout
        ),
        BudgetConfig::Concurrency {
            percent,
            min_concurrency,
        } => format!(
            "concurrency budget ({percent}% of active requests, at least {min_concurrency} retries in flight)"
        ),
    });
    let breaker = config.breaker.map(|b| {
        format!(
            "breaker (opens at {}% failures of {} attempts in {} s)",
            b.failure_ratio * 100.0,
            b.min_requests,
            b.window.as_secs_f64()
        )
    });
    match (budget, breaker) {
        (None, None) => None,
        (a, b) => Some(a.into_iter().chain(b).collect::<Vec<_>>().join(", ")),
    }
}

/// The attempts per request a policy's budget allows over the plan's run once it binds.
fn bound_of(plan: &Plan, policy: &Policy) -> Option<f64> {
    let run = RunCounts {
        logical: plan.load.expected_arrivals().round() as u64,
        duration: plan.duration,
    };
    Client::new(policy.clone()).budget_bound(run)
}

/// The leaf's attempts with every budget binding: each hop's tries in the worst case,
/// limited by its budget's bound.
/// With `share_budget`, the client's one budget pays every hop's retries: its bound holds
/// at the leaf.
pub(super) fn budgeted_leaf(infos: &[HopInfo], worst: &Case, shared: bool) -> Option<f64> {
    if shared {
        return infos.first().and_then(|client| client.budget_bound);
    }
    infos.iter().any(|h| h.budget_bound.is_some()).then(|| {
        infos
            .iter()
            .zip(&worst.tries)
            .map(|(h, t)| {
                h.budget_bound
                    .map_or(f64::from(*t), |b| b.min(f64::from(*t)))
            })
            .product()
    })
}

/// The hops that resend a request that is not safe to resend, each at its line.
pub(super) fn resenders(infos: &[HopInfo], traces: &[Trace]) -> Vec<String> {
    hops_where(
        infos,
        traces,
        |t| !t.request.is_idempotent(),
        |h| h.retried_non_idempotent,
    )
}

/// The hops that retry a permanent answer, each at its line.
pub(super) fn permanent_retriers(infos: &[HopInfo], traces: &[Trace]) -> Vec<String> {
    hops_where(infos, traces, |_| true, |h| h.retried_permanent)
}

/// The hops that retry at all.
pub(super) fn retrying_hops(infos: &[HopInfo], traces: &[Trace]) -> Vec<String> {
    hops_where(infos, traces, |_| true, |h| h.tries > 1)
}

/// The hops (each at its line) of which `hop` holds in some walk that `trace` picks.
fn hops_where(
    infos: &[HopInfo],
    traces: &[Trace],
    trace: impl Fn(&Trace) -> bool,
    hop: impl Fn(&super::walk::HopTrace) -> bool,
) -> Vec<String> {
    infos
        .iter()
        .enumerate()
        .filter(|(i, _)| {
            traces
                .iter()
                .any(|t| trace(t) && t.most.hops.get(*i).is_some_and(&hop))
        })
        .map(|(_, h)| format!("`{}` ({})", h.name, h.at))
        .collect()
}

/// Every finding of a policy's walks.
pub(super) fn findings(
    policy: &NamedPolicy,
    infos: &[HopInfo],
    traces: &[Trace],
    worst: &Case,
) -> Vec<Finding> {
    let mut out = Vec::new();
    if let Some((i, tries)) = worst.tries.iter().enumerate().max_by_key(|(_, t)| **t) {
        out.push(Finding {
            at: Some(infos[i].at.clone()),
            message: format!(
                "`{}` multiplies most: {tries} tries per request it receives ({} failing with {}), by {}",
                infos[i].name, worst.method, worst.failure, infos[i].settings
            ),
        });
    }
    resending(infos, traces, &mut out);
    for h in infos {
        if let Some(waits) = h.caller_waits_ms.filter(|w| h.serial_ms > *w) {
            out.push(Finding {
                at: Some(h.at.clone()),
                message: format!(
                    "`{}` can take {:.0} ms (every try timing out, backoff at its maxima) but its caller waits {waits:.0} ms: it keeps retrying after its caller gave up",
                    h.name, h.serial_ms
                ),
            });
        }
    }
    overrides(policy, infos, traces, &mut out);
    for (i, h) in infos.iter().enumerate().filter(|(_, h)| h.budget.is_some()) {
        let tries = worst.tries.get(i).copied().unwrap_or(1);
        let bound = match h.budget_bound {
            Some(b) if b < f64::from(tries) => {
                format!("; once it binds, at most {b:.2} attempts per request it receives")
            }
            Some(b) => format!(
                "; its bound over the plan's run, {b:.2} attempts per request it receives, is no tighter than its {tries} tries"
            ),
            None => String::new(),
        };
        out.push(Finding {
            at: Some(h.at.clone()),
            message: format!(
                "`{}` is limited by {}{bound}: the figures above are before it binds",
                h.name,
                h.budget.as_deref().unwrap_or_default()
            ),
        });
    }
    out
}

/// Which hop resends which non-idempotent method, and after which failures.
fn resending(infos: &[HopInfo], traces: &[Trace], out: &mut Vec<Finding>) {
    for (i, h) in infos.iter().enumerate() {
        let mut by_method: Vec<(String, Vec<String>)> = Vec::new();
        for t in traces.iter().filter(|t| !t.request.is_idempotent()) {
            if t.most.hops.get(i).is_some_and(|x| x.retried_non_idempotent) {
                match by_method.iter_mut().find(|(m, _)| *m == t.method) {
                    Some((_, classes)) => classes.push(t.class.name()),
                    None => by_method.push((t.method.clone(), vec![t.class.name()])),
                }
            }
        }
        for (method, classes) in by_method {
            out.push(Finding {
                at: Some(h.at.clone()),
                message: format!(
                    "`{}` resends a {method} after {} (no_retry_of_non_idempotent)",
                    h.name,
                    classes.join(", ")
                ),
            });
        }
    }
}

/// Where one hop's `x-chaos-no-retry` stops the hop above, or does not.
fn overrides(policy: &NamedPolicy, infos: &[HopInfo], traces: &[Trace], out: &mut Vec<Finding>) {
    let mut said: Vec<String> = Vec::new();
    for t in traces {
        let hops = &t.most.hops;
        for above in 0..hops.len().saturating_sub(1) {
            let below = &hops[above + 1];
            // A hop its caller's timeout cut short: the caller retried on its own timer.
            let cut = below.caller_waits.is_some_and(|w| below.took > w);
            if !below.said_no_retry || cut {
                continue;
            }
            let honours = hops[above].gave_up == Some(GiveUp::NoRetry);
            let message = if honours {
                format!(
                    "`{}` honours `{NO_RETRY}` from `{}`: it stops where `{}` gave up",
                    infos[above].name,
                    infos[above + 1].name,
                    infos[above + 1].name
                )
            } else if hops[above].tries > 1 {
                let proxy = above
                    .checked_sub(1)
                    .is_some_and(|t| policy.tiers[t].proxy.is_some());
                let why = match proxy {
                    true => " (a proxy reads no such header)",
                    false => " (honor_no_retry is off)",
                };
                format!(
                    "`{}` retries what `{}` answered with `{NO_RETRY}`{why}: their retries multiply",
                    infos[above].name,
                    infos[above + 1].name
                )
            } else {
                continue;
            };
            if !said.contains(&message) {
                said.push(message.clone());
                out.push(Finding {
                    at: Some(infos[above].at.clone()),
                    message,
                });
            }
        }
    }
}
