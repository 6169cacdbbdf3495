//! A side effect repeated under a name the judge does not know: a retry under a fresh
//! key (a key minted per attempt, which protects nothing), or an ordinary retry under the
//! call's own key; and identical requests the evidence splits into calls of their own.

use std::hash::BuildHasher;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{Arriving, Grouped, GroupedBy, Retries, SUCCEEDED, note_example};

/// How many windows after its first attempt a named call can still be repeated under a
/// fresh key: a call retried this many times, each within the window of the last answer.
pub(super) const NAMED_WINDOWS: u32 = 6;

/// Identical requests (method, path and query, body) that the window alone would have
/// taken for a retry of the one before, counted as new calls because the evidence said
/// otherwise.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Split {
    /// The one before had been answered with a 2xx: the client saw its call succeed, so
    /// the next is a new call (six identical orders are six calls).
    pub after_success: u64,
    /// The client numbered it attempt 1.
    pub stated_first: u64,
}

/// Side-effect requests (POST, PATCH) that repeated a call whose last answer was a
/// failure, within the window, under a new `Idempotency-Key` or request id: the classic
/// mistake of minting a key per attempt. Each is grouped into the call it repeated, so
/// its attempts count as that call's retries and a side effect it runs again counts as a
/// duplicate.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct FreshKeys {
    pub retries: u64,
    /// A few calls (their logical ids) retried under a fresh key.
    pub examples: Vec<String>,
}

/// The last call a client named (by `Idempotency-Key` or request id) that ran a side
/// effect, by its fingerprint: what an identical request with another name may be
/// retrying.
#[derive(Debug, Clone)]
pub(super) struct Named {
    pub(super) generation: u64,
    pub(super) entry: u64,
    /// The entry's generation: an evicted id that comes back is another call.
    pub(super) entry_generation: u64,
    pub(super) id: String,
    /// Its first attempt's `Idempotency-Key`, hashed: a request id minted per attempt
    /// over a key that stays is a retry under the same key.
    pub(super) key: Option<u64>,
    /// The last fresh name (hashed) taken for a retry of it: resent, it is that retry's
    /// own retry, not another fresh key.
    pub(super) alias: Option<u64>,
}

/// How a request under a name the judge does not know repeats a named call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Repeat {
    /// Under a fresh name, after a failed answer: a retry with a fresh key.
    FreshKey,
    /// Under the call's own `Idempotency-Key` (its request id fresh), or under the
    /// fresh name already taken for its retry: an ordinary retry.
    SameKey,
}

impl Retries {
    /// The call a side effect under a name the judge does not know repeats, if it repeats
    /// one (an identical request named by an `Idempotency-Key` or request id), and how:
    /// under the call's own key, or under the fresh name already taken for its retry, it
    /// is an ordinary retry; under another name, it is a retry with a fresh key when the
    /// call's last answer, within the window, was a failure a retry could follow (not a
    /// 2xx, not a status that forbids a retry, and no attempt of it still awaited: two
    /// identical calls in flight at once under two keys are two calls).
    pub(super) fn repeated_call(
        &self,
        by: GroupedBy,
        arriving: &Arriving<'_>,
        name: u64,
        now: Duration,
    ) -> Option<(Named, Repeat)> {
        if !arriving.side_effect || !by.names_a_call() {
            return None;
        }
        let named = self.named.get(&arriving.fingerprint)?;
        let entry = self
            .entries
            .get(&named.entry)
            .filter(|e| e.generation == named.entry_generation)?;
        let key = arriving.key.map(|k| self.keys.hash_one(k));
        if named.alias == Some(name) || (key.is_some() && key == named.key) {
            return Some((named.clone(), Repeat::SameKey));
        }
        let (at, seen, _) = entry.answer()?;
        let failed = entry.unanswered == 0 && !entry.has(SUCCEEDED) && !seen.forbids_retry();
        (failed && now.saturating_sub(at) <= self.judging.window)
            .then(|| (named.clone(), Repeat::FreshKey))
    }

    /// A side effect that repeats a named call: that call's retry, under a fresh key or
    /// not. A fresh name (`name`, hashed as [`Retries::repeated_call`] took it) becomes
    /// the call's alias.
    pub(super) fn repeat(
        &mut self,
        call: Named,
        repeat: Repeat,
        arriving: &Arriving<'_>,
        name: u64,
        now: Duration,
    ) -> Grouped {
        let fresh = repeat == Repeat::FreshKey;
        if fresh {
            self.fresh_keys.retries += 1;
            note_example(&mut self.fresh_keys.examples, &call.id);
            if let Some(named) = self.named.get_mut(&arriving.fingerprint) {
                named.alias = Some(name);
            }
        }
        let attempt = self.retry(call.entry, &call.id, arriving, now, fresh);
        self.busiest.attempt(&mut self.entries, call.entry, now);
        Grouped {
            id: call.id,
            // A client that mints a name per attempt numbers each as a first one: the
            // count is the call's.
            attempt: if fresh {
                attempt
            } else {
                arriving.stated_attempt.unwrap_or(attempt)
            },
            by: if fresh {
                GroupedBy::FreshKey
            } else {
                GroupedBy::IdempotencyKey
            },
            entry: call.entry,
        }
    }
}
