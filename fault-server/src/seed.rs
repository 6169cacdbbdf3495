//! The mixers behind every seeded decision: SplitMix64, FNV-1a, and the per-request seed
//! built from them.
//!
//! Why one module: a seed must give the same decisions in every release and on every
//! platform, so the mixers and the per-attempt seed of (seed, `x-request-id`, attempt)
//! are defined once, here, with fixed constants and wrapping integer operations only;
//! `wire::attempt_seed` adds the chain of attempts above a hop. Nothing here reads a clock or a global generator.

use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;

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

/// The per-attempt seed of a request with no tier above it (`wire::attempt_seed` with no
/// chain): a portable mix of the server's seed, the request's `x-request-id` and its
/// attempt number (FNV-1a over the id, then SplitMix64
/// finalisers). The same triple always gives the same decision stream.
pub fn request_seed(seed: u64, request_id: &str, attempt: u32) -> u64 {
    IdSeed::new(seed, request_id).attempt(attempt)
}

/// The part of [`request_seed`] that depends on the request id alone: hashed once, it gives
/// the seed of any attempt (and attempt 0, the sticky seed) for the cost of a finaliser.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdSeed(u64);

impl IdSeed {
    pub fn new(seed: u64, request_id: &str) -> IdSeed {
        IdSeed(splitmix64(seed ^ fnv1a([request_id.as_bytes()])))
    }

    /// [`request_seed`]`(seed, request_id, attempt)`.
    pub fn attempt(self, attempt: u32) -> u64 {
        splitmix64(self.0 ^ u64::from(attempt))
    }
}

/// A fresh RNG for one request, seeded by [`request_seed`].
pub fn request_rng(seed: u64, request_id: &str, attempt: u32) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(request_seed(seed, request_id, attempt))
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
}
