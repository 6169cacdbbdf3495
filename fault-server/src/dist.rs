//! Distributions of durations (a `delay` fault, a `service_time`), and the uniform draw
//! every random decision of the server is built from.
//!
//! Why by hand: the decision stream must be defined by this crate's code, not by whatever
//! algorithm a sampling crate ships in its next version, so the same seed gives the same
//! delays run after run, and next year. Every draw takes
//! the caller's RNG (`rand_core::Rng`); nothing here reads a clock or a global generator.

use std::fmt;
use std::time::Duration;

use rand_core::Rng;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Serialize, Serializer};

use crate::duration::{DurationSpec, format_duration};

/// z-score of the 99th percentile of the standard normal distribution.
const Z_99: f64 = 2.326_347_874_040_840_8;

/// A lognormal sample is capped at this multiple of its p99, so one draw from the far
/// tail (one in many millions) cannot stall a request for hours. It changes the
/// distribution only far above p99.9.
const LOGNORMAL_CAP_OVER_P99: f64 = 10.0;

/// A uniform draw in `[0, 1)`: the project's one uniform draw (`chaos_wire::seed::unit`)
/// of one `next_u64`.
pub fn unit<R: Rng + ?Sized>(rng: &mut R) -> f64 {
    chaos_wire::seed::unit(rng.next_u64())
}

/// A resolved, validated distribution of durations.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Distribution {
    /// Always the same duration.
    Fixed(Duration),
    /// Uniform in `[low, high]`.
    Uniform {
        /// Lower bound.
        low: Duration,
        /// Upper bound (`>= low`).
        high: Duration,
    },
    /// Lognormal with the given median and 99th percentile (samples capped at 10 × p99).
    LogNormal {
        /// The median.
        p50: Duration,
        /// The 99th percentile (`>= p50`).
        p99: Duration,
    },
}

impl Distribution {
    /// The zero duration, as a fixed distribution.
    pub const ZERO: Distribution = Distribution::Fixed(Duration::ZERO);

    /// Draws one duration. A fixed distribution draws nothing from `rng`; a uniform one
    /// draws once; a lognormal one draws twice (Box-Muller), unless p50 == p99.
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> Duration {
        match *self {
            Distribution::Fixed(duration) => duration,
            Distribution::Uniform { low, high } => {
                if low == high {
                    return low;
                }
                let span = (high - low).as_secs_f64();
                low + Duration::from_secs_f64(span * unit(rng))
            }
            Distribution::LogNormal { p50, p99 } => {
                if p50 == p99 {
                    return p50;
                }
                let mu = p50.as_secs_f64().ln();
                let sigma = (p99.as_secs_f64().ln() - mu) / Z_99;
                let u1 = 1.0 - unit(rng); // (0, 1]: ln never sees 0
                let u2 = unit(rng);
                let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
                let secs = (mu + sigma * z).exp();
                let cap = p99.as_secs_f64() * LOGNORMAL_CAP_OVER_P99;
                Duration::from_secs_f64(secs.clamp(0.0, cap))
            }
        }
    }

    /// True when every sample is zero.
    pub fn is_zero(&self) -> bool {
        matches!(self, Distribution::Fixed(d) if d.is_zero())
    }
}

impl fmt::Display for Distribution {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Distribution::Fixed(d) => f.write_str(&format_duration(*d)),
            Distribution::Uniform { low, high } => write!(
                f,
                "uniform [{}, {}]",
                format_duration(*low),
                format_duration(*high)
            ),
            Distribution::LogNormal { p50, p99 } => write!(
                f,
                "lognormal p50 {} p99 {}",
                format_duration(*p50),
                format_duration(*p99)
            ),
        }
    }
}

/// A duration distribution as written in YAML:
///
/// ```yaml
/// delay: 300ms                              # fixed
/// delay: { uniform: [100ms, 500ms] }        # uniform in [low, high]
/// delay: { lognormal: { p50: 50ms, p99: 800ms } }
/// ```
///
/// Range checks (low <= high, 0 < p50 <= p99) happen while deserialising, so a YAML error
/// points at the offending line and column.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DistributionSpec(pub Distribution);

impl From<DistributionSpec> for Distribution {
    fn from(spec: DistributionSpec) -> Self {
        spec.0
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LogNormalFields {
    p50: DurationSpec,
    p99: DurationSpec,
}

struct DistributionVisitor;

impl<'de> Visitor<'de> for DistributionVisitor {
    type Value = Distribution;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "a duration (\"300ms\"), { uniform: [low, high] } or { lognormal: { p50, p99 } }",
        )
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<Distribution, E> {
        crate::duration::parse_duration(value)
            .map(Distribution::Fixed)
            .map_err(E::custom)
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<Distribution, E> {
        if value == 0 {
            Ok(Distribution::ZERO)
        } else {
            Err(E::custom(format!(
                "duration {value} has no unit: write e.g. \"{value}ms\""
            )))
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Distribution, A::Error> {
        let key: String = map.next_key()?.ok_or_else(|| {
            de::Error::custom("empty distribution: expected uniform or lognormal")
        })?;
        let distribution = match key.as_str() {
            "uniform" => {
                let [low, high]: [DurationSpec; 2] = map.next_value()?;
                if low > high {
                    return Err(de::Error::custom(format!(
                        "uniform: the low bound {low} is above the high bound {high}"
                    )));
                }
                Distribution::Uniform {
                    low: low.get(),
                    high: high.get(),
                }
            }
            "lognormal" => {
                let LogNormalFields { p50, p99 } = map.next_value()?;
                if p50.get().is_zero() {
                    return Err(de::Error::custom("lognormal: p50 must be above zero"));
                }
                if p50 > p99 {
                    return Err(de::Error::custom(format!(
                        "lognormal: p50 {p50} is above p99 {p99}"
                    )));
                }
                Distribution::LogNormal {
                    p50: p50.get(),
                    p99: p99.get(),
                }
            }
            other => {
                return Err(de::Error::unknown_field(other, &["uniform", "lognormal"]));
            }
        };
        if let Some(extra) = map.next_key::<String>()? {
            return Err(de::Error::custom(format!(
                "a distribution has one key (uniform or lognormal), found also {extra:?}"
            )));
        }
        Ok(distribution)
    }
}

impl<'de> Deserialize<'de> for DistributionSpec {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer
            .deserialize_any(DistributionVisitor)
            .map(DistributionSpec)
    }
}

impl Serialize for DistributionSpec {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct LogNormalOut {
            p50: DurationSpec,
            p99: DurationSpec,
        }
        match self.0 {
            Distribution::Fixed(d) => DurationSpec(d).serialize(serializer),
            Distribution::Uniform { low, high } => {
                let mut map = serializer.serialize_map(Some(1))?;
                map.serialize_entry("uniform", &[DurationSpec(low), DurationSpec(high)])?;
                map.end()
            }
            Distribution::LogNormal { p50, p99 } => {
                let mut map = serializer.serialize_map(Some(1))?;
                map.serialize_entry(
                    "lognormal",
                    &LogNormalOut {
                        p50: DurationSpec(p50),
                        p99: DurationSpec(p99),
                    },
                )?;
                map.end()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use rand_chacha::ChaCha8Rng;
    use rand_core::SeedableRng;

    use super::*;

    fn parse(text: &str) -> Result<Distribution, String> {
        serde_yaml::from_str::<DistributionSpec>(text)
            .map(Distribution::from)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn parses_the_three_shapes() {
        assert_eq!(
            parse("300ms"),
            Ok(Distribution::Fixed(Duration::from_millis(300)))
        );
        assert_eq!(
            parse("{ uniform: [100ms, 500ms] }"),
            Ok(Distribution::Uniform {
                low: Duration::from_millis(100),
                high: Duration::from_millis(500)
            })
        );
        assert_eq!(
            parse("lognormal: { p50: 50ms, p99: 800ms }"),
            Ok(Distribution::LogNormal {
                p50: Duration::from_millis(50),
                p99: Duration::from_millis(800)
            })
        );
    }

    #[test]
    fn rejects_bad_shapes_with_a_reason() {
        let cases = [
            ("{ uniform: [500ms, 100ms] }", "above the high bound"),
            ("{ uniform: [100ms] }", "invalid length"),
            ("{ lognormal: { p50: 900ms, p99: 800ms } }", "above p99"),
            ("{ lognormal: { p50: 0s, p99: 800ms } }", "above zero"),
            ("{ lognormal: { p50: 1s, p90: 2s } }", "unknown field"),
            ("{ normal: 1s }", "unknown field"),
            (
                "{ uniform: [1s, 2s], lognormal: { p50: 1s, p99: 2s } }",
                "one key",
            ),
            ("12", "no unit"),
        ];
        for (text, needle) in cases {
            let message = parse(text).expect_err(text);
            assert!(message.contains(needle), "{text}: {message}");
        }
    }

    #[test]
    fn serialises_back_to_the_same_shape() {
        for text in [
            "300ms",
            "{ uniform: [100ms, 500ms] }",
            "{ lognormal: { p50: 50ms, p99: 800ms } }",
        ] {
            let spec: DistributionSpec = serde_yaml::from_str(text).expect("valid");
            let back = serde_yaml::to_string(&spec).expect("serialises");
            let again: DistributionSpec = serde_yaml::from_str(&back).expect("round trip");
            assert_eq!(spec, again);
        }
    }

    #[test]
    fn unit_draws_stay_in_the_half_open_interval() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        for _ in 0..10_000 {
            let u = unit(&mut rng);
            assert!((0.0..1.0).contains(&u));
        }
    }

    #[test]
    fn uniform_samples_stay_within_bounds() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let low = Duration::from_millis(100);
        let high = Duration::from_millis(500);
        let dist = Distribution::Uniform { low, high };
        for _ in 0..10_000 {
            let d = dist.sample(&mut rng);
            assert!(d >= low && d <= high, "{d:?}");
        }
    }

    #[test]
    fn lognormal_percentiles_match_the_spec() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let p50 = Duration::from_millis(50);
        let p99 = Duration::from_millis(800);
        let dist = Distribution::LogNormal { p50, p99 };
        let mut samples: Vec<Duration> = (0..40_000).map(|_| dist.sample(&mut rng)).collect();
        samples.sort();
        let median = samples[samples.len() / 2].as_secs_f64();
        let q99 = samples[samples.len() * 99 / 100].as_secs_f64();
        assert!((0.045..0.055).contains(&median), "median {median}");
        assert!((0.65..0.98).contains(&q99), "p99 {q99}");
        assert!(samples.iter().all(|d| *d <= p99 * 10));
    }

    #[test]
    fn same_seed_same_samples() {
        let dist = Distribution::LogNormal {
            p50: Duration::from_millis(5),
            p99: Duration::from_millis(90),
        };
        let draw = |seed| {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            (0..100).map(|_| dist.sample(&mut rng)).collect::<Vec<_>>()
        };
        assert_eq!(draw(11), draw(11));
        assert_ne!(draw(11), draw(12));
    }

    #[test]
    fn uniform_samples_of_a_seed_are_pinned() {
        // Literal nanoseconds: the same seed must give the same delays next release.
        let dist = Distribution::Uniform {
            low: Duration::from_millis(100),
            high: Duration::from_millis(500),
        };
        let mut rng = ChaCha8Rng::seed_from_u64(0xe873_e003_c314_0b39);
        let nanos: Vec<u128> = (0..4).map(|_| dist.sample(&mut rng).as_nanos()).collect();
        assert_eq!(nanos, [142_358_829, 277_037_727, 249_563_119, 453_599_138]);
    }
}
