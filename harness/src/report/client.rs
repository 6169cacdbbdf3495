//! A client test in the report: what the program under test did, as the fault-server's
//! ledger judged it (`harness client-test`), and the two gates only a client test has.

use std::collections::BTreeMap;

use fault_server::ledger::retries::{FreshKeys, RetryAfter, RetryAfterHonoured, Split};
use serde::{Deserialize, Serialize};

use super::model::{GateResult, PolicyReport};

/// The program under test and the ledger's judgement of its retries.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ClientView {
    /// The command as run (`{url}` filled in).
    pub command: Vec<String>,
    /// How it ended: `exit 0`, `exit 1`, `killed at the plan's end`, `signal 9`.
    pub exit: String,
    /// Its logical requests by how the server told them apart (`request_id`,
    /// `aws_invocation_id`, `guess`, ...).
    pub grouped_by: BTreeMap<String, u64>,
    /// Attempts grouped by a guess (method, path and body within `window_ms`).
    pub guessed_attempts: u64,
    pub window_ms: u64,
    /// Identical requests counted as new calls against the window's guess, and why.
    #[serde(default)]
    pub split: Split,
    /// Side effects repeated under a fresh key or request id after a failure.
    #[serde(default)]
    pub fresh_keys: FreshKeys,
    /// Attempts sent while an earlier attempt of the same request was unanswered.
    pub overlapping: u64,
    /// Retries by what they followed.
    pub retries_after: Vec<RetryAfter>,
    pub retry_after: RetryAfterHonoured,
    /// The waits before each attempt number, and the expected policy's range for them.
    pub backoff: Vec<BackoffRow>,
    /// What the program printed: written beside the report as `program.stdout` and
    /// `program.stderr`, not into report.json.
    #[serde(skip)]
    pub stdout: String,
    #[serde(skip)]
    pub stderr: String,
}

/// The waits before one attempt number (from the previous attempt's answer to this
/// attempt's arrival), in milliseconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct BackoffRow {
    /// 2 is the first retry; the last row pools every attempt from 10 on.
    pub attempt: u32,
    pub count: u64,
    pub min_ms: f64,
    pub p10_ms: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// The expected policy's wait before this attempt, lowest and highest, widened by the
    /// tolerance ([`tolerance_ms`]); null without `client.expect`.
    pub expected_ms: Option<[f64; 2]>,
    /// Its p10 and p90 fall in `expected_ms`.
    pub within: Option<bool>,
}

/// How far outside the expected range a measured wait may fall: the server measures from
/// its answer to the next arrival, which adds the client's own time (parsing, scheduling,
/// a new connection) to its backoff. 50 ms and a tenth of the range's top.
pub fn tolerance_ms(high_ms: f64) -> f64 {
    50.0 + high_ms / 10.0
}

/// `retry_after_honoured`: no retry came sooner than an answer's `Retry-After` asked.
pub(super) fn retry_after_honoured(name: String, r: &PolicyReport) -> GateResult {
    let Some(c) = &r.client else {
        return not_a_client_test(name);
    };
    let h = &c.retry_after;
    let pass = h.early == 0;
    let detail = if h.asked == 0 {
        "no retry followed an answer that asked for a wait (script a `retry_after:` to judge this)"
            .to_owned()
    } else if pass {
        format!(
            "all {} retries after a Retry-After waited as asked (tolerance {} ms)",
            h.asked,
            h.tolerance_us / 1000
        )
    } else {
        format!(
            "{} of {} retries after a Retry-After came early, the worst by {:.0} ms; e.g. {}",
            h.early,
            h.asked,
            h.worst_early_us as f64 / 1000.0,
            h.examples.join(", ")
        )
    };
    GateResult {
        name,
        pass,
        measured: Some(h.early as f64),
        limit: Some(0.0),
        detail,
    }
}

/// `backoff_within_preset`: the waits before each retry fall in the expected range.
pub(super) fn backoff_within_preset(name: String, r: &PolicyReport) -> GateResult {
    let Some(c) = &r.client else {
        return not_a_client_test(name);
    };
    let outside: Vec<String> = c
        .backoff
        .iter()
        .filter(|b| b.within == Some(false))
        .map(|b| {
            let [low, high] = b.expected_ms.unwrap_or_default();
            format!(
                "attempt {}: p10 {:.0} ms, p90 {:.0} ms, expected {:.0}–{:.0} ms",
                b.attempt, b.p10_ms, b.p90_ms, low, high
            )
        })
        .collect();
    let judged = c.backoff.iter().filter(|b| b.within.is_some()).count();
    let (pass, detail) = if judged == 0 {
        (
            false,
            "no retry was measured: nothing to judge the backoff by (fault the first attempts, e.g. `attempts: [1, 2]`)".to_owned(),
        )
    } else if outside.is_empty() {
        (
            true,
            format!("the waits before {judged} attempt numbers fall in the expected range"),
        )
    } else {
        (false, outside.join("; "))
    };
    GateResult {
        name,
        pass,
        measured: Some(outside.len() as f64),
        limit: Some(0.0),
        detail,
    }
}

/// `no_retry_with_fresh_key`: no side effect was repeated, after a failed answer, under a
/// new `Idempotency-Key` (a key minted per attempt protects nothing).
pub(super) fn no_retry_with_fresh_key(name: String, r: &PolicyReport) -> GateResult {
    let Some(n) = r.violations.retried_with_fresh_key else {
        return not_a_client_test(name);
    };
    let examples = r
        .violation_examples
        .get("retried_with_fresh_key")
        .filter(|e| !e.is_empty())
        .map_or(String::new(), |e| format!(" (e.g. {})", e.join(", ")));
    GateResult {
        name,
        pass: n == 0,
        measured: Some(n as f64),
        limit: Some(0.0),
        detail: if n == 0 {
            "no POST/PATCH was repeated under a fresh Idempotency-Key".to_owned()
        } else {
            format!(
                "{n} retries of a POST/PATCH under a fresh Idempotency-Key after a failed answer{examples}"
            )
        },
    }
}

/// A client test's gate whose figure rests on the window's guess (calls told apart by
/// method, path and body, not by anything the program sent) says so, and how much of it.
pub(super) fn on_a_guess(mut gate: GateResult, r: &PolicyReport) -> GateResult {
    let Some(c) = &r.client else {
        return gate;
    };
    let guessed = c.grouped_by.get("guess").copied().unwrap_or(0);
    if guessed > 0 && gate.measured.is_some() {
        let calls: u64 = c.grouped_by.values().sum();
        gate.detail.push_str(&format!(
            " [rests on a guess: {guessed} of {calls} calls told apart by method, path and body within {} ms]",
            c.window_ms
        ));
    }
    gate
}

fn not_a_client_test(name: String) -> GateResult {
    GateResult {
        name,
        pass: false,
        measured: None,
        limit: None,
        detail: "only a client test (`harness client-test`) measures this".to_owned(),
    }
}

/// The client section every renderer shows: facts in sentences, then the backoff table
/// (its header first). Plain text: each renderer escapes it.
pub(super) fn section(c: &ClientView) -> (Vec<String>, Vec<Vec<String>>) {
    (facts(c), backoff_table(c))
}

/// What the ledger found of the client, in sentences.
fn facts(c: &ClientView) -> Vec<String> {
    let grouped: Vec<String> = c
        .grouped_by
        .iter()
        .map(|(by, n)| format!("{n} by {by}"))
        .collect();
    let retried: Vec<String> = c
        .retries_after
        .iter()
        .map(|r| {
            let what = match (r.side_effect, r.keyed, r.fresh_key) {
                (false, _, _) => "",
                (true, true, true) => " (POST/PATCH under a fresh key)",
                (true, false, true) => " (POST/PATCH without a key, under a fresh request id)",
                (true, true, false) => " (POST/PATCH with a key)",
                (true, false, false) => " (POST/PATCH without a key)",
            };
            format!("{} after {}{what}", r.retries, r.after)
        })
        .collect();
    let h = &c.retry_after;
    let mut facts = vec![
        format!("Command: {}", c.command.join(" ")),
        format!("Ended: {}", c.exit),
        format!(
            "Logical requests told apart: {}{}",
            if grouped.is_empty() {
                "none".to_owned()
            } else {
                grouped.join(", ")
            },
            if c.guessed_attempts > 0 {
                format!(
                    " ({} attempts grouped by a guess: the same method, path and body within {} ms)",
                    c.guessed_attempts, c.window_ms
                )
            } else {
                String::new()
            }
        ),
        format!(
            "Retries: {}",
            if retried.is_empty() {
                "none".to_owned()
            } else {
                retried.join(", ")
            }
        ),
        format!(
            "Retry-After: {} retries followed an answer that asked for a wait; {} waited as asked, {} came early{}",
            h.asked,
            h.honoured,
            h.early,
            if h.early > 0 {
                format!(" (the worst by {:.0} ms)", h.worst_early_us as f64 / 1000.0)
            } else {
                String::new()
            }
        ),
    ];
    if c.fresh_keys.retries > 0 {
        facts.push(format!(
            "Fresh keys: {} POST/PATCH attempts repeated a failed call under a new Idempotency-Key or request id within {} ms; each is counted as that call's retry, and a side effect it ran again as a duplicate (e.g. {})",
            c.fresh_keys.retries,
            c.window_ms,
            c.fresh_keys.examples.join(", ")
        ));
    }
    let split = &c.split;
    if split.after_success + split.stated_first > 0 {
        facts.push(format!(
            "Not grouped: {} identical requests came within {} ms of one the program had seen succeed, and {} said they were a first attempt; each is a new call",
            split.after_success, c.window_ms, split.stated_first
        ));
    }
    let after_success: u64 = c
        .retries_after
        .iter()
        .filter(|r| r.after.strip_prefix("status_2").is_some())
        .map(|r| r.retries)
        .sum();
    if after_success > 0 {
        facts.push(format!(
            "{after_success} attempts resent a key or request id whose call had already succeeded: a replay, or a name reused for a new call (the evidence says the call was over)"
        ));
    }
    if c.overlapping > 0 {
        facts.push(format!(
            "{} attempts were sent while an earlier attempt of the same request was unanswered (the program stopped waiting, or hedged)",
            c.overlapping
        ));
    }
    facts
}

/// The waits before each attempt number against the expected policy's, its header first.
fn backoff_table(c: &ClientView) -> Vec<Vec<String>> {
    let mut table = vec![
        [
            "before attempt",
            "count",
            "min ms",
            "p10 ms",
            "p50 ms",
            "p90 ms",
            "max ms",
            "expected ms",
            "within",
        ]
        .map(str::to_owned)
        .to_vec(),
    ];
    for b in &c.backoff {
        table.push(vec![
            if b.attempt >= fault_server::ledger::retries::MAX_GAP_ATTEMPT {
                format!("{}+", b.attempt)
            } else {
                b.attempt.to_string()
            },
            b.count.to_string(),
            format!("{:.0}", b.min_ms),
            format!("{:.0}", b.p10_ms),
            format!("{:.0}", b.p50_ms),
            format!("{:.0}", b.p90_ms),
            format!("{:.0}", b.max_ms),
            b.expected_ms
                .map_or("–".to_owned(), |[l, h]| format!("{l:.0}–{h:.0}")),
            b.within.map_or("–".to_owned(), |w| {
                if w { "yes" } else { "NO" }.to_owned()
            }),
        ]);
    }
    table
}
