//! Peers and resends: what a hop that listens as several peers (`--peers`, a relay tier's
//! peers) counts per peer and method, and how often it has seen one stated attempt.
//!
//! Why: a proxy in front of N peers resends the same request (same `x-request-id`,
//! `x-chaos-attempt` and `x-chaos-upstream-attempts`) to another peer, or to the same one.
//! The fault draw is seeded by the stated attempt ([`crate::wire::DrawSeeds`]), so without
//! knowing it is a resend, a hop would draw the same fault for it forever; and the proxy's
//! retries are only visible as these resends in what the next hop saw. [`Resends`] is the
//! one memory of stated attempts that the fault-server's ledger and the harness's tier
//! core both keep: bounded by a TTL and a cap, as the ledger's ids are.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, RandomState};
use std::time::Duration;

/// The methods counted apart, in this order; any other counts as `OTHER`.
pub const METHODS: [&str; 8] = [
    "GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "OTHER",
];

/// `method`'s index in [`METHODS`] (case-insensitive; anything else is the last).
pub fn method_index(method: &str) -> usize {
    METHODS[..METHODS.len() - 1]
        .iter()
        .position(|m| m.eq_ignore_ascii_case(method))
        .unwrap_or(METHODS.len() - 1)
}

/// One stated attempt: what makes two arrivals the same request resent.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub struct Stated<'a> {
    /// `x-request-id`.
    pub request_id: &'a str,
    /// The attempt number it states (none: its own value).
    pub attempt: Option<u32>,
    /// The `x-chaos-upstream-attempts` chain above it.
    pub upstream: Option<&'a str>,
}

/// What [`Resends::arrive`] says of one arrival.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Resent {
    /// How many times the same stated attempt arrived before (0: the first time).
    pub repeat: u32,
    /// A resend whose previous arrival was answered with a 4xx.
    pub after_4xx: bool,
    /// The stated attempt's key, for [`Resends::answered`].
    pub key: u64,
}

#[derive(Debug, Clone, Copy)]
struct Seen {
    count: u32,
    last_4xx: bool,
}

/// The stated attempts seen lately, each with how often and how its last arrival was
/// answered: a few dozen bytes each, remembered for `ttl` from the first arrival and at
/// most `max` of them, oldest forgotten first (a forgotten one that comes back counts as
/// new, as an evicted id does in the ledger).
#[derive(Debug)]
pub struct Resends {
    ttl: Duration,
    max: usize,
    seen: HashMap<u64, Seen>,
    /// When each key was first seen, oldest first: every key in `seen` once.
    order: VecDeque<(Duration, u64)>,
    /// Keys the stated attempts are remembered by: random per table, so no client can
    /// choose ids that collide.
    keys: RandomState,
    evicted: u64,
}

impl Resends {
    /// An empty table.
    pub fn new(ttl: Duration, max: usize) -> Resends {
        Resends {
            ttl,
            max,
            seen: HashMap::new(),
            order: VecDeque::new(),
            keys: RandomState::new(),
            evicted: 0,
        }
    }

    /// The key `stated` is remembered by.
    pub fn key(&self, stated: Stated<'_>) -> u64 {
        self.keys.hash_one(stated)
    }

    /// One arrival of `stated` at `now`.
    pub fn arrive(&mut self, stated: Stated<'_>, now: Duration) -> Resent {
        let key = self.key(stated);
        self.arrive_key(key, now)
    }

    /// One arrival of the stated attempt whose key is `key` ([`Resends::key`]).
    pub fn arrive_key(&mut self, key: u64, now: Duration) -> Resent {
        self.expire(now);
        let resent = match self.seen.entry(key) {
            Entry::Occupied(mut entry) => {
                let seen = entry.get_mut();
                let resent = Resent {
                    repeat: seen.count,
                    after_4xx: seen.last_4xx,
                    key,
                };
                seen.count = seen.count.saturating_add(1);
                resent
            }
            Entry::Vacant(entry) => {
                entry.insert(Seen {
                    count: 1,
                    last_4xx: false,
                });
                self.order.push_back((now, key));
                Resent {
                    key,
                    ..Resent::default()
                }
            }
        };
        // A table over its cap by the arrival just made.
        self.expire(now);
        resent
    }

    /// The arrival that [`Resends::arrive`] said `resent` of was answered, with a 4xx or
    /// not: what a resend of it will be counted after.
    pub fn answered(&mut self, resent: &Resent, four_xx: bool) {
        if let Some(seen) = self.seen.get_mut(&resent.key) {
            seen.last_4xx = four_xx;
        }
    }

    /// Stated attempts remembered now.
    pub fn len(&self) -> usize {
        self.seen.len()
    }

    /// Whether it remembers none.
    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }

    /// Stated attempts forgotten to bound memory since the last [`Resends::clear`].
    pub fn evicted(&self) -> u64 {
        self.evicted
    }

    /// Forgets everything, keeping the room.
    pub fn clear(&mut self) {
        self.seen.clear();
        self.order.clear();
        self.evicted = 0;
    }

    fn expire(&mut self, now: Duration) {
        while let Some(&(at, key)) = self.order.front() {
            if now.saturating_sub(at) < self.ttl && self.order.len() <= self.max {
                break;
            }
            self.order.pop_front();
            self.seen.remove(&key);
            self.evicted += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stated<'a>(id: &'a str, attempt: u32, upstream: Option<&'a str>) -> Stated<'a> {
        Stated {
            request_id: id,
            attempt: Some(attempt),
            upstream,
        }
    }

    #[test]
    fn a_stated_attempt_is_repeated_only_by_the_same_id_attempt_and_chain() {
        let mut table = Resends::new(Duration::from_secs(10), 100);
        let at = Duration::ZERO;
        assert_eq!(table.arrive(stated("a", 1, None), at).repeat, 0);
        assert_eq!(table.arrive(stated("a", 2, None), at).repeat, 0);
        assert_eq!(table.arrive(stated("a", 1, Some("1")), at).repeat, 0);
        assert_eq!(table.arrive(stated("b", 1, None), at).repeat, 0);
        let first = table.arrive(stated("a", 1, None), at);
        assert_eq!((first.repeat, first.after_4xx), (1, false));
        table.answered(&first, true);
        let second = table.arrive(stated("a", 1, None), at);
        assert_eq!((second.repeat, second.after_4xx), (2, true));
    }

    #[test]
    fn stated_attempts_expire_by_age_and_by_the_cap() {
        let mut table = Resends::new(Duration::from_secs(10), 2);
        let s = |n| stated("a", n, None);
        table.arrive(s(1), Duration::ZERO);
        table.arrive(s(2), Duration::ZERO);
        table.arrive(s(3), Duration::ZERO);
        assert_eq!((table.len(), table.evicted()), (2, 1));
        assert_eq!(table.arrive(s(1), Duration::ZERO).repeat, 0, "forgotten");
        assert_eq!(
            table.arrive(s(3), Duration::from_secs(20)).repeat,
            0,
            "expired"
        );
        assert_eq!(table.len(), 1);
    }

    #[test]
    fn methods_are_counted_in_a_fixed_set() {
        assert_eq!(METHODS[method_index("get")], "GET");
        assert_eq!(METHODS[method_index("PATCH")], "PATCH");
        assert_eq!(METHODS[method_index("BREW")], "OTHER");
    }
}
