//! A baseline's tolerance: how much worse each figure may get before it is a regression.
//! The plan says it (`baseline: { tolerance: ... }`), a saved baseline records it, and
//! the comparison ([`crate::baseline`]) applies it.

use serde::{Deserialize, Serialize};

/// How much worse each figure may get before it is a regression.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct Tolerance {
    /// Attempts per logical request, client's and server's count: an absolute increase.
    pub amplification: f64,
    /// The worst second's attempts per request: an absolute increase.
    pub peak_amplification: f64,
    /// An absolute decrease of `succeeded / offered`.
    pub success_rate: f64,
    pub p50_ms: Relative,
    pub p99_ms: Relative,
    /// Seconds more to recover (a recovery lost altogether always regresses).
    pub recovery_s: f64,
    /// An absolute increase of `dropped / offered`.
    pub dropped_ratio: f64,
}

/// A latency may grow by `ratio` of its baseline, and always by `floor` milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Relative {
    pub ratio: f64,
    pub floor: f64,
}

impl Default for Tolerance {
    /// Measured on this project's 2-core machines: repeated runs of the shipped plans with
    /// one seed stay within these (see plans/README.md, "Baselines").
    fn default() -> Tolerance {
        Tolerance {
            amplification: 0.05,
            peak_amplification: 0.25,
            success_rate: 0.02,
            p50_ms: Relative {
                ratio: 0.25,
                floor: 20.0,
            },
            p99_ms: Relative {
                ratio: 0.25,
                floor: 50.0,
            },
            recovery_s: 2.0,
            dropped_ratio: 0.01,
        }
    }
}

/// The largest tolerance each kind of figure may have. A larger one is a typo or a check
/// turned off (1e308 passes everything). The defaults and every committed baseline
/// (`reports/baselines/`, all at the defaults: 0.05, 0.25, 0.02, 25% + 20/50 ms, 2 s, 0.01)
/// sit far inside them.
pub mod bounds {
    /// A rate or ratio's absolute change (`success_rate`, `dropped_ratio`): its whole range.
    pub const RATE: f64 = 1.0;
    /// Attempts per logical request more (`amplification`, `peak_amplification`): the
    /// worst committed storm (chain-storm, 64 at the server) stays well under it.
    pub const AMPLIFICATION: f64 = 100.0;
    /// A latency's growth as a ratio of its baseline (`p50_ms.ratio`, `p99_ms.ratio`):
    /// 100 times slower.
    pub const LATENCY_RATIO: f64 = 100.0;
    /// A latency floor, in milliseconds (`p50_ms.floor`, `p99_ms.floor`): an hour.
    pub const LATENCY_FLOOR_MS: f64 = 3_600_000.0;
    /// Seconds more to recover (`recovery_s`): an hour.
    pub const RECOVERY_S: f64 = 3_600.0;
}

impl Tolerance {
    /// Each field by its plan key, with its value and the largest value it may take.
    fn fields(&self) -> [(&'static str, f64, f64); 9] {
        use bounds::{AMPLIFICATION, LATENCY_FLOOR_MS, LATENCY_RATIO, RATE, RECOVERY_S};
        [
            ("amplification", self.amplification, AMPLIFICATION),
            ("peak_amplification", self.peak_amplification, AMPLIFICATION),
            ("success_rate", self.success_rate, RATE),
            ("p50_ms.ratio", self.p50_ms.ratio, LATENCY_RATIO),
            ("p50_ms.floor", self.p50_ms.floor, LATENCY_FLOOR_MS),
            ("p99_ms.ratio", self.p99_ms.ratio, LATENCY_RATIO),
            ("p99_ms.floor", self.p99_ms.floor, LATENCY_FLOOR_MS),
            ("recovery_s", self.recovery_s, RECOVERY_S),
            ("dropped_ratio", self.dropped_ratio, RATE),
        ]
    }

    /// The first field that is negative, not a number or above its bound (see [`bounds`]):
    /// its plan key, its value and its bound.
    pub fn out_of_range(&self) -> Option<(&'static str, f64, f64)> {
        self.fields()
            .into_iter()
            .find(|&(_, v, max)| !(v.is_finite() && (0.0..=max).contains(&v)))
    }

    /// The first field that is negative, not a number or above its bound, by its plan key.
    pub fn invalid_field(&self) -> Option<&'static str> {
        self.out_of_range().map(|(name, _, _)| name)
    }
}
