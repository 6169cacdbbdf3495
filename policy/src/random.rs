//! The few draws the core needs, built on the caller's RNG.
//!
//! Kept by hand (rather than `rand`'s distributions) so the stream of decisions is defined by
//! this file alone and stays the same for a seed across dependency upgrades.

use std::time::Duration;

use rand_core::Rng;

/// A uniform draw in `[0, 1)` from the top 53 bits of one `u64`.
pub fn unit_f64<R: Rng + ?Sized>(rng: &mut R) -> f64 {
    const SCALE: f64 = 1.0 / (1u64 << 53) as f64;
    (rng.next_u64() >> 11) as f64 * SCALE
}

/// A uniform duration in `[low, high]` (`low` when the range is empty), to the nanosecond.
pub(crate) fn uniform_duration<R: Rng + ?Sized>(
    rng: &mut R,
    low: Duration,
    high: Duration,
) -> Duration {
    if high <= low {
        return low;
    }
    let span = (high - low).as_nanos() as f64;
    let offset = (unit_f64(rng) * span) as u128;
    low + Duration::from_nanos(offset.min(u128::from(u64::MAX)) as u64)
}
