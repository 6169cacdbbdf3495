//! W3C trace context: the `traceparent` header each attempt carries, and the ids in it.
//!
//! Parsed and written by hand: the header is one fixed-width line, and the hot path of a
//! traced request should not go through a propagator's maps.

use std::fmt::Write as _;

/// The header's name.
pub use crate::wire::TRACEPARENT;

/// What a `traceparent` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceParent {
    pub trace_id: u128,
    /// The caller's span: the parent of the span the receiver records.
    pub parent_id: u64,
    /// The caller exports this trace: so must the receiver.
    pub sampled: bool,
}

impl TraceParent {
    /// Parses version 00 (and, as the specification asks, the first four fields of a
    /// later version). All-zero ids are invalid.
    pub fn parse(value: &str) -> Option<TraceParent> {
        let mut parts = value.trim().split('-');
        let version = parts.next()?;
        let trace = parts.next()?;
        let parent = parts.next()?;
        let flags = parts.next()?;
        if version.len() != 2 || version == "ff" || !hex(version) {
            return None;
        }
        if version == "00" && parts.next().is_some() {
            return None;
        }
        if trace.len() != 32 || parent.len() != 16 || flags.len() != 2 {
            return None;
        }
        if !hex(trace) || !hex(parent) || !hex(flags) {
            return None;
        }
        let trace_id = u128::from_str_radix(trace, 16).ok()?;
        let parent_id = u64::from_str_radix(parent, 16).ok()?;
        let flags = u8::from_str_radix(flags, 16).ok()?;
        (trace_id != 0 && parent_id != 0).then_some(TraceParent {
            trace_id,
            parent_id,
            sampled: flags & 1 == 1,
        })
    }

    /// The header value.
    pub fn format(&self) -> String {
        let mut s = String::with_capacity(55);
        let _ = write!(
            s,
            "00-{:032x}-{:016x}-{:02x}",
            self.trace_id,
            self.parent_id,
            u8::from(self.sampled)
        );
        s
    }
}

fn hex(s: &str) -> bool {
    // Lower case only, as the specification writes them.
    s.bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Ids for traces and spans: unique within a process and across processes and runs (a
/// nonce from the clock and the process id, stepped by SplitMix64), never zero. Not a
/// security token: ids only need not to collide in a collector.
#[derive(Debug)]
pub struct Ids {
    state: std::sync::atomic::AtomicU64,
}

impl Ids {
    pub fn new() -> Ids {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        Ids::seeded(now ^ (u64::from(std::process::id()) << 32))
    }

    pub fn seeded(seed: u64) -> Ids {
        Ids {
            state: std::sync::atomic::AtomicU64::new(seed),
        }
    }

    pub fn span_id(&self) -> u64 {
        loop {
            let x = self
                .state
                .fetch_add(0x9e37_79b9_7f4a_7c15, std::sync::atomic::Ordering::Relaxed);
            let id = crate::seed::splitmix64(x);
            if id != 0 {
                return id;
            }
        }
    }

    pub fn trace_id(&self) -> u128 {
        (u128::from(self.span_id()) << 64) | u128::from(self.span_id())
    }
}

impl Default for Ids {
    fn default() -> Ids {
        Ids::new()
    }
}

/// Whether a trace whose sampling value is `x` (uniform in 0..2^64) is kept at `ratio`.
pub fn keep(x: u64, ratio: f64) -> bool {
    crate::seed::below(x, ratio)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_round_trips() {
        let tp = TraceParent {
            trace_id: 0x4bf9_2f35_77b3_4da6_a3ce_929d_0e0e_4736,
            parent_id: 0x00f0_67aa_0ba9_02b7,
            sampled: true,
        };
        assert_eq!(
            tp.format(),
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        );
        assert_eq!(TraceParent::parse(&tp.format()), Some(tp));
        let unsampled = TraceParent {
            sampled: false,
            ..tp
        };
        assert_eq!(TraceParent::parse(&unsampled.format()), Some(unsampled));
    }

    #[test]
    fn malformed_traceparents_are_ignored() {
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "0x-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            assert_eq!(TraceParent::parse(bad), None, "{bad:?}");
        }
        // A later version may append fields.
        assert!(
            TraceParent::parse("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-xyz")
                .is_some()
        );
    }

    #[test]
    fn ids_are_never_zero_and_do_not_repeat() {
        let ids = Ids::seeded(0);
        let mut seen = std::collections::HashSet::new();
        for _ in 0..10_000 {
            assert!(seen.insert(ids.span_id()));
        }
        assert_ne!(ids.trace_id(), 0);
    }

    #[test]
    fn keep_follows_the_ratio() {
        assert!(keep(u64::MAX, 1.0));
        assert!(!keep(0, 0.0));
        let kept = (0..10_000u64)
            .filter(|i| keep(crate::seed::splitmix64(*i), 0.3))
            .count();
        assert!((2_800..3_200).contains(&kept), "{kept}");
    }
}
