//! The few draws the core needs, built on the caller's RNG.
//!
//! Kept by hand (rather than `rand`'s distributions) so the stream of decisions is defined by
//! this file and `chaos_wire::seed::unit` alone and stays the same for a seed across
//! dependency upgrades.

use std::time::Duration;

use rand_core::Rng;

/// A uniform draw in `[0, 1)`: the project's one uniform draw (`chaos_wire::seed::unit`)
/// of one `u64` of the caller's RNG.
pub fn unit_f64<R: Rng + ?Sized>(rng: &mut R) -> f64 {
    chaos_wire::seed::unit(rng.next_u64())
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
