//! The mixers behind every seeded decision (SplitMix64, FNV-1a), the per-request seed
//! built from them, the registry of the streams a run's seed feeds, and the one uniform
//! draw.
//!
//! Why one module: a seed must give the same decisions in every release and on every
//! platform, so the mixers and the per-attempt seed of (seed, `x-request-id`, attempt)
//! are defined once, here, with fixed constants and wrapping integer operations only;
//! `wire::attempt_seed` adds the chain of attempts above a hop. Nothing here reads a clock or a global generator.

/// FNV-1a's 64-bit offset basis.
const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
/// FNV-1a's 64-bit prime.
const FNV_PRIME: u64 = 0x0100_0000_01b3;

/// SplitMix64's output function: a bijective 64-bit mixer.
pub fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// 64-bit FNV-1a over `parts`, hashed as if concatenated.
pub fn fnv1a<'a>(parts: impl IntoIterator<Item = &'a [u8]>) -> u64 {
    parts.into_iter().flatten().fold(FNV_OFFSET, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(FNV_PRIME)
    })
}

/// The per-attempt seeds of one logical request: a portable mix of the run's seed and the
/// request's `x-request-id` (FNV-1a over the id, then a SplitMix64 finaliser), hashed
/// once, which gives the seed of any attempt (and attempt 0, the sticky seed) for the cost
/// of one more finaliser. `crate::attempt_seed` adds the chain of attempts above a hop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdSeed(u64);

impl IdSeed {
    /// The request `request_id`'s seeds under the run's `seed`.
    pub fn new(seed: u64, request_id: &str) -> IdSeed {
        IdSeed(splitmix64(seed ^ fnv1a([request_id.as_bytes()])))
    }

    /// The seed of attempt `attempt` (1-based); attempt 0 is the request's sticky seed,
    /// the same for all its attempts.
    pub fn attempt(self, attempt: u32) -> u64 {
        splitmix64(self.0 ^ u64::from(attempt))
    }
}

/// A uniform draw in `[0, 1)` from 64 random bits: their top 53, where an `f64` is exact.
/// Every uniform draw of the project goes through it (the retry core's jitter, the
/// fault-server's distributions, the schedule's arrivals, trace sampling), so a seed's
/// stream of decisions is defined here alone.
pub fn unit(bits: u64) -> f64 {
    const SCALE: f64 = 1.0 / (1u64 << 53) as f64;
    (bits >> 11) as f64 * SCALE
}

/// Whether a value uniform in `0..2^64` falls below `ratio` (a share kept: sampled traces),
/// in the 53 bits of [`unit`].
pub fn below(bits: u64, ratio: f64) -> bool {
    if ratio >= 1.0 {
        return true;
    }
    if ratio <= 0.0 {
        return false;
    }
    unit(bits) < ratio
}

/// The streams one run's seed feeds. Each mixes the seed with a constant of its own, so
/// that no two of them draw alike; the constants and formulas are pinned by tests, since
/// changing one changes every report of every plan.
pub mod stream {
    use super::{fnv1a, splitmix64};

    /// The arrival schedule's generator (arrival times and request kinds).
    pub fn schedule(seed: u64) -> u64 {
        seed ^ 0x5c4e_d01e
    }

    /// The generator of the client's draws for the logical request with arrival `index`
    /// (backoff jitter), so a request's decisions do not depend on how the others
    /// interleave.
    pub fn client_request(seed: u64, index: u64) -> u64 {
        splitmix64(seed ^ 0x6a09_e667_f3bc_c908) ^ index
    }

    /// The simulator's network: one generator of latencies for the run.
    pub fn network(seed: u64) -> u64 {
        splitmix64(seed ^ 0x3c6e_f372_fe94_f82b)
    }

    /// The sampling value of the trace of the logical request with arrival `index`.
    pub fn trace_sampling(seed: u64, index: u64) -> u64 {
        splitmix64(seed ^ 0x7472_6163_6573_u64 ^ index.rotate_left(17))
    }

    /// A relay tier's jitter for one logical request (`id`) under the chain of attempts
    /// above it; `anonymous` tells apart requests that arrived without an id.
    pub fn tier_jitter(seed: u64, id: &str, chain: &str, anonymous: u64) -> u64 {
        splitmix64(seed ^ fnv1a([id.as_bytes(), chain.as_bytes()]) ^ anonymous)
    }

    /// A sticky fault phase's generator for one logical request: the request's sticky
    /// seed and the phase's position in the script.
    pub fn sticky_phase(sticky: u64, phase: usize) -> u64 {
        splitmix64(sticky ^ (phase as u64 + 1))
    }

    /// Names a plan's text (its hash) run with a seed: a baseline's digest.
    pub fn plan_digest(text_hash: u64, seed: u64) -> u64 {
        splitmix64(text_hash ^ seed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix64_matches_the_reference_outputs() {
        // The first outputs of Vigna's SplitMix64 seeded with 0 and with 1.
        assert_eq!(splitmix64(0), 0xe220_a839_7b1d_cdaf);
        assert_eq!(splitmix64(1), 0x910a_2dec_8902_5cc1);
    }

    #[test]
    fn fnv1a_matches_the_reference_vectors() {
        // The published 64-bit FNV-1a test vectors for "", "a" and "foobar".
        assert_eq!(fnv1a([&b""[..]]), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a([&b"a"[..]]), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a([&b"foobar"[..]]), 0x8594_4171_f739_67e8);
        // Parts hash as their concatenation.
        assert_eq!(fnv1a([&b"foo"[..], b"", b"bar"]), fnv1a([&b"foobar"[..]]));
    }

    fn request_seed(seed: u64, request_id: &str, attempt: u32) -> u64 {
        IdSeed::new(seed, request_id).attempt(attempt)
    }

    #[test]
    fn request_seed_is_stable_and_spreads() {
        assert_ne!(request_seed(1, "abc", 1), request_seed(1, "abc", 2));
        assert_ne!(request_seed(1, "abc", 1), request_seed(2, "abc", 1));
        assert_ne!(request_seed(1, "abc", 1), request_seed(1, "abd", 1));
        // Pinned: the decision stream of a seed must not change between releases. The
        // values are literals (computed once), not the formula again.
        assert_eq!(request_seed(0, "", 0), 0x21fa_69a5_8f3d_62f5);
        assert_eq!(request_seed(1, "abc", 1), 0xa6f0_07c1_f54d_f1af);
        assert_eq!(request_seed(42, "req-1", 1), 0xe873_e003_c314_0b39);
        assert_eq!(request_seed(u64::MAX, "x", 3), 0x3934_6ad4_b067_4c21);
    }

    #[test]
    fn a_uniform_draw_is_the_top_53_bits() {
        // Exact values: the draw is a whole number of 2^-53, so bits compare exactly.
        assert_eq!(unit(0).to_bits(), 0.0f64.to_bits());
        assert_eq!(
            unit(u64::MAX).to_bits(),
            (1.0 - f64::EPSILON / 2.0).to_bits()
        );
        assert_eq!(unit(1 << 63).to_bits(), 0.5f64.to_bits());
        assert!(below(0, 1e-9) && !below(u64::MAX, 1.0 - 1e-9) && below(u64::MAX, 1.0));
        assert!(!below(0, 0.0));
    }

    /// Pinned: every shipped report depends on these streams staying what they are.
    #[test]
    fn the_streams_are_pinned_and_apart() {
        assert_eq!(stream::schedule(42), 42 ^ 0x5c4e_d01e);
        assert_eq!(
            stream::client_request(42, 7),
            splitmix64(42 ^ 0x6a09_e667_f3bc_c908) ^ 7
        );
        assert_eq!(stream::network(42), splitmix64(42 ^ 0x3c6e_f372_fe94_f82b));
        assert_eq!(
            stream::trace_sampling(42, 7),
            splitmix64(42 ^ 0x7472_6163_6573 ^ 7u64.rotate_left(17))
        );
        let all = [
            stream::schedule(42),
            stream::client_request(42, 0),
            stream::network(42),
            stream::trace_sampling(42, 0),
            stream::tier_jitter(42, "", "", 0),
            stream::sticky_phase(42, 0),
            stream::plan_digest(0, 42),
        ];
        for (i, a) in all.iter().enumerate() {
            for b in &all[i + 1..] {
                assert_ne!(a, b);
            }
        }
    }
}
