//! How a forwarding hop names itself in `Via`, and finds itself there: the loop rule every
//! hop that forwards (the fault-server's proxy mode, a relay tier) applies alike.
//!
//! Why: a hop that forwards to itself, or two that forward to each other, turn one request
//! into thousands of hops (one fault-server proxy pointed at its own port made 6,635 in
//! 4 s, 2 GB of memory and 18,000 descriptors). A hop count ([`crate::loops`]) ends such a
//! loop only late, and only between hops that write it; `Via` (RFC 9110 §7.6.3) is written
//! by every proxy. So each forwarding process appends an entry that names it alone
//! (`1.1 fault-server-3f9c0d2e8a41b7c5`: the protocol, and a pseudonym of its kind and a
//! random 64-bit id drawn when it starts), and a request that arrives already carrying that
//! entry has come round a loop: the hop answers it [`crate::LOOP_DETECTED`] at once, and
//! never forwards it again. The loop then costs one round, and the 508 is retried by no
//! policy.

use std::hash::{BuildHasher, Hasher};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};

/// The standard `Via` header (lower case, as HTTP/2 and the `http` crate write it).
pub const VIA: &str = "via";

/// The kinds of hop that forward, as their `Via` pseudonyms begin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HopKind {
    /// The fault-server in proxy mode (`--upstream`): `fault-server-…`.
    FaultServer,
    /// A harness relay tier: `harness-relay-…`.
    Relay,
}

impl HopKind {
    /// The start of its pseudonym: `fault-server`, `harness-relay`.
    pub fn name(self) -> &'static str {
        match self {
            HopKind::FaultServer => "fault-server",
            HopKind::Relay => "harness-relay",
        }
    }
}

/// One forwarding hop's own `Via` entry: `1.1 <kind>-<16 hex digits>`, unique to the hop
/// (a server or tier started in this process, or another).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ViaName {
    /// `1.1 fault-server-3f9c0d2e8a41b7c5`.
    entry: String,
}

impl ViaName {
    /// A fresh name for a hop of `kind`: its id is drawn from the standard library's
    /// random hash keys (fresh per process and per call), the process id, the time and a
    /// counter, so two hops, in one process or two, never share one (but by a 2⁻⁶⁴
    /// chance).
    pub fn new(kind: HopKind) -> ViaName {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let mut hasher = std::hash::RandomState::new().build_hasher();
        hasher.write_u64(NEXT.fetch_add(1, Ordering::Relaxed));
        hasher.write_u32(std::process::id());
        if let Ok(since) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
            hasher.write_u128(since.as_nanos());
        }
        ViaName::with_id(kind, hasher.finish())
    }

    /// The name of a hop of `kind` whose id is `id` (tests, and a hop that must keep its
    /// name across restarts).
    pub fn with_id(kind: HopKind, id: u64) -> ViaName {
        ViaName {
            entry: format!("1.1 {}-{id:016x}", kind.name()),
        }
    }

    /// What the hop appends to `Via`: `1.1 fault-server-3f9c0d2e8a41b7c5`.
    pub fn entry(&self) -> &str {
        &self.entry
    }

    /// The pseudonym alone: `fault-server-3f9c0d2e8a41b7c5`.
    pub fn pseudonym(&self) -> &str {
        &self.entry[4..]
    }

    /// Whether one `Via` field value (a comma-separated list of `protocol received-by
    /// [comment]` entries) holds an entry received by this hop: then the request has been
    /// here before. Bytes that are not text, and entries of other hops, are not this hop.
    pub fn is_in(&self, via: &[u8]) -> bool {
        let me = self.pseudonym().as_bytes();
        via.split(|b| *b == b',').any(|entry| {
            let mut words = entry
                .split(|b| *b == b' ' || *b == b'\t')
                .filter(|w| !w.is_empty());
            words.next().is_some() && words.next().is_some_and(|by| by == me)
        })
    }

    /// [`ViaName::is_in`] over every `Via` field of a request.
    pub fn is_in_any<'a>(&self, fields: impl IntoIterator<Item = &'a [u8]>) -> bool {
        fields.into_iter().any(|field| self.is_in(field))
    }
}

/// Whether a hop listening on `listen` and forwarding to `to` (the addresses its upstream
/// resolves to) would forward to itself: the same port on the same address, or on a
/// loopback one when it listens on every address. A port given as 0 is chosen at start,
/// so it cannot be named in advance. (Hops forwarding to each other are found by
/// [`ViaName`] instead: a 508.)
pub fn forwards_to_itself(listen: SocketAddr, to: &[SocketAddr]) -> bool {
    listen.port() != 0
        && to.iter().any(|t| {
            t.port() == listen.port()
                && (t.ip() == listen.ip()
                    || (listen.ip().is_unspecified()
                        && (t.ip().is_loopback() || t.ip().is_unspecified())))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> SocketAddr {
        s.parse().expect("an address")
    }

    #[test]
    fn a_hop_finds_its_own_entry_and_no_other() {
        let me = ViaName::with_id(HopKind::FaultServer, 0x3f9c);
        assert_eq!(me.entry(), "1.1 fault-server-0000000000003f9c");
        assert_eq!(me.pseudonym(), "fault-server-0000000000003f9c");
        assert!(me.is_in(b"1.1 fault-server-0000000000003f9c"));
        assert!(me.is_in(b"1.0 edge, 1.1 fault-server-0000000000003f9c (comment)"));
        assert!(me.is_in(b"HTTP/1.1 fault-server-0000000000003f9c,1.1 x"));
        assert!(me.is_in(b"  1.1\tfault-server-0000000000003f9c  "));
        // Another hop, an older fault-server's bare name, a prefix, a comment.
        assert!(!me.is_in(b"1.1 fault-server-0000000000003f9d"));
        assert!(!me.is_in(b"1.1 fault-server"));
        assert!(!me.is_in(b"1.1 fault-server-0000000000003f9"));
        assert!(!me.is_in(b"1.1 edge (fault-server-0000000000003f9c)"));
        assert!(!me.is_in(b"fault-server-0000000000003f9c"));
        assert!(!me.is_in(b""));
        assert!(!me.is_in(b"\xff\xfe"));
        let relay = ViaName::with_id(HopKind::Relay, 0x3f9c);
        assert!(!relay.is_in(me.entry().as_bytes()));
        assert!(me.is_in_any([&b"1.0 a"[..], me.entry().as_bytes()]));
    }

    #[test]
    fn every_fresh_name_is_its_own() {
        let names: std::collections::HashSet<String> = (0..1000)
            .map(|_| ViaName::new(HopKind::Relay).entry().to_owned())
            .collect();
        assert_eq!(names.len(), 1000);
        let one = ViaName::new(HopKind::FaultServer);
        assert!(one.entry().starts_with("1.1 fault-server-"), "{one:?}");
        assert_eq!(one.entry().len(), "1.1 fault-server-".len() + 16);
    }

    #[test]
    fn a_hop_forwarding_to_its_own_address_is_found_and_others_are_not() {
        let cases = [
            ("127.0.0.1:8081", "127.0.0.1:8081", true),
            ("0.0.0.0:8081", "127.0.0.1:8081", true),
            ("[::]:8081", "[::1]:8081", true),
            ("[::1]:8081", "[::1]:8081", true),
            ("127.0.0.1:8081", "127.0.0.1:8080", false),
            ("127.0.0.1:8081", "127.0.0.2:8081", false),
            ("127.0.0.1:0", "127.0.0.1:0", false),
        ];
        for (listen, to, loops) in cases {
            assert_eq!(
                forwards_to_itself(addr(listen), &[addr(to)]),
                loops,
                "{listen} → {to}"
            );
        }
        // `localhost`: one of the addresses it resolves to is enough.
        assert!(forwards_to_itself(
            addr("127.0.0.1:8081"),
            &[addr("[::1]:8081"), addr("127.0.0.1:8081")]
        ));
    }
}
