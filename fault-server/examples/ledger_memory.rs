//! The ledger's worst-case memory, measured: every cap of [`LedgerLimits::default`]
//! filled with values of the longest length accepted (`max_value_bytes`), and every
//! stored idempotent response the longest the server builds. Twice the caps are
//! inserted, so eviction runs and the tables sit at their steady-state size.
//!
//! `cargo run --release -p fault-server --example ledger_memory [BYTES]` (Linux: reads
//! `/proc/self/status`); BYTES, the length of every value, defaults to the longest
//! accepted (36 is a UUID).

use std::io::Write;
use std::time::Duration;

use fault_server::ledger::group::{Claim, GroupedBy};
use fault_server::ledger::{Arriving, KeyCheck, Ledger, RequestIdentity, Seen, StoredResponse};
use fault_server::{Judging, LedgerLimits};

/// Resident and peak memory of this process, in bytes.
fn memory() -> Option<(u64, u64)> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().strip_suffix("kB"))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(|kb| kb * 1024)
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

/// A distinct value of exactly `len` bytes.
fn value(prefix: char, i: usize, len: usize) -> String {
    let mut v = format!("{prefix}{i}");
    v.extend(std::iter::repeat_n('x', len - v.len()));
    v
}

fn main() {
    let limits = LedgerLimits::default();
    let len = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(limits.max_value_bytes)
        .clamp(16, limits.max_value_bytes);
    let mut out = std::io::stdout();
    let Some((before, _)) = memory() else {
        let _ = writeln!(out, "needs /proc/self/status (Linux)");
        return;
    };
    // Judging, as `client-test` and `fault-server --judge` run it.
    let ledger = Ledger::new(limits).judging(Judging::default());
    let now = Duration::ZERO;
    let policies: Vec<String> = (0..limits.max_policies * 2)
        .map(|i| value('p', i, len))
        .collect();
    // The longest stored response: the id escaped at two bytes a character (`"`), the
    // largest attempt and effect numbers.
    let stored = serde_json::json!({
        "ok": true, "id": "\"".repeat(len), "attempt": u32::MAX, "effect": u64::MAX,
    })
    .to_string();
    for i in 0..limits.max_ids * 2 {
        let id = value('i', i, len);
        let who = RequestIdentity {
            request_id: Some(&id),
            policy: Some(&policies[i % policies.len()]),
            attempt: None,
        };
        ledger.record_request(who, now);
        if i % (limits.max_ids / limits.max_examples) == 0 {
            ledger.execute(who, now);
            ledger.execute(who, now); // a duplicate: its id joins the examples
        }
    }
    let Some((with_ids, _)) = memory() else {
        return;
    };
    for i in 0..limits.max_keys * 2 {
        let key = value('k', i, len);
        if let KeyCheck::Fresh(claim) =
            ledger.begin_keyed(&key, i as u64, RequestIdentity::default(), now)
        {
            ledger.complete_key(
                claim,
                StoredResponse {
                    status: 200,
                    body: stored.clone(),
                },
            );
        }
    }
    let Some((with_keys, _)) = memory() else {
        return;
    };
    // The judge's tables: every logical request a keyed POST and a guessed one, answered
    // (an entry each, a fingerprint per guess, and a named call per keyed POST: what a
    // fresh key would be matched against).
    for i in 0..limits.max_ids * 2 {
        let id = value('j', i, len);
        for claim in [
            Claim::Named(GroupedBy::IdempotencyKey, &id),
            Claim::Unnamed(i as u64),
        ] {
            let arriving = Arriving {
                claim,
                fingerprint: i as u64,
                stated_attempt: None,
                side_effect: true,
                key: Some(&id),
            };
            if let Some(grouped) = ledger.group(arriving, now) {
                ledger.answered(&grouped, now, Seen::Status(503), None);
            }
        }
    }
    let snapshot = ledger.snapshot();
    let Some((after, peak)) = memory() else {
        return;
    };
    let mb = |bytes: u64| bytes as f64 / 1e6;
    let _ = writeln!(
        out,
        "{} ids, {} keys (stored responses of {} bytes), {} policies, {} examples, values of {len} bytes",
        snapshot.tracked_ids,
        snapshot.tracked_keys,
        stored.len(),
        snapshot.by_policy.len(),
        snapshot.duplicate_examples.len(),
    );
    let _ = writeln!(
        out,
        "ledger: {:.0} MB resident ({:.0} MB ids, policies and examples, {:.0} MB keys and stored responses, {:.0} MB the judge's {} logical requests); process peak {:.0} MB, {:.0} MB before",
        mb(after.saturating_sub(before)),
        mb(with_ids.saturating_sub(before)),
        mb(with_keys.saturating_sub(with_ids)),
        mb(after.saturating_sub(with_keys)),
        snapshot.judged.as_ref().map_or(0, |j| j.tracked),
        mb(peak),
        mb(before)
    );
}
