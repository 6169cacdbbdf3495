//! Durations as people write them in plans: `"250ms"`, `"10s"`, `"2m"`, `"1.5s"`.
//!
//! Why a module of its own: every duration in a script or a plan goes through the same
//! parser, so `from: 10s` and `retry_after: 1s` and `service_time: 5ms` accept exactly the
//! same spellings and fail with the same message. The serde pieces ([`DurationSpec`] and
//! the [`serde_duration`] / [`serde_opt_duration`] helpers) are public so the harness can
//! parse its own plan fields with the very same rules, and a bad value is reported by
//! serde_yaml with its line and column.

use std::fmt;
use std::time::Duration;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

/// The units a duration may carry, with their length in nanoseconds.
const UNITS: [(&str, u128); 6] = [
    ("ns", 1),
    ("us", 1_000),
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
    ("h", 3_600_000_000_000),
];

/// The longest duration accepted: a year. Anything longer in a chaos plan is a typo.
pub const MAX: Duration = Duration::from_secs(365 * 24 * 3600);
const MAX_NANOS: u128 = MAX.as_nanos();

/// Parses `"250ms"`, `"10s"`, `"2m"`, `"1.5s"`, `"1h"`, `"500us"`, `"0"`.
///
/// A number (integer or decimal) followed by one unit of `ns`, `us`, `ms`, `s`, `m`, `h`.
/// A bare `0` is accepted; any other bare number is an error (is `5` seconds or
/// milliseconds? the plan must say). The arithmetic is exact (decimal digits times the
/// unit in nanoseconds; digits below a nanosecond are dropped), so `"12.345s"` and
/// `"12345ms"` are the same duration.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("empty duration: expected a value like \"250ms\", \"10s\" or \"2m\"".into());
    }
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    let split = text
        .find(|c: char| c.is_ascii_alphabetic())
        .ok_or_else(|| {
            format!("duration {text:?} has no unit: write e.g. \"{text}ms\" or \"{text}s\"")
        })?;
    let (number, unit) = text.split_at(split);
    let unit_nanos = UNITS
        .iter()
        .find(|(name, _)| *name == unit)
        .map(|(_, nanos)| *nanos)
        .ok_or_else(|| {
            format!("duration {text:?} has an unknown unit {unit:?}: use ns, us, ms, s, m or h")
        })?;
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let digits_only = |part: &str| part.bytes().all(|b| b.is_ascii_digit());
    if (whole.is_empty() && fraction.is_empty()) || !digits_only(whole) || !digits_only(fraction) {
        return Err(format!(
            "duration {text:?} is not a non-negative number followed by a unit (e.g. \"1.5s\")"
        ));
    }
    let too_long = || format!("duration {text:?} is longer than a year");
    if whole.len() > 20 {
        return Err(too_long());
    }
    let whole_value: u128 = if whole.is_empty() {
        0
    } else {
        whole.parse().map_err(|_| too_long())?
    };
    let mut nanos = whole_value.checked_mul(unit_nanos).ok_or_else(too_long)?;
    let mut scale = unit_nanos;
    for digit in fraction.bytes() {
        scale /= 10;
        if scale == 0 {
            break;
        }
        nanos += u128::from(digit - b'0') * scale;
    }
    if nanos > MAX_NANOS {
        return Err(too_long());
    }
    let secs = u64::try_from(nanos / 1_000_000_000).map_err(|_| too_long())?;
    let subsec = u32::try_from(nanos % 1_000_000_000).map_err(|_| too_long())?;
    Ok(Duration::new(secs, subsec))
}

/// Formats a duration in the shortest unit that shows it exactly enough to read:
/// `250ms`, `10s`, `1.5s`, `2m`, `0s`. The result parses back with [`parse_duration`].
pub fn format_duration(duration: Duration) -> String {
    let nanos = duration.as_nanos();
    if nanos == 0 {
        return "0s".into();
    }
    if nanos.is_multiple_of(60_000_000_000) && nanos >= 60_000_000_000 {
        if nanos.is_multiple_of(3_600_000_000_000) {
            return format!("{}h", nanos / 3_600_000_000_000);
        }
        return format!("{}m", nanos / 60_000_000_000);
    }
    if nanos.is_multiple_of(1_000_000_000) {
        return format!("{}s", nanos / 1_000_000_000);
    }
    if nanos >= 1_000_000_000 && nanos.is_multiple_of(1_000_000) {
        return format!("{}s", trim_float(duration.as_secs_f64()));
    }
    if nanos.is_multiple_of(1_000_000) {
        return format!("{}ms", nanos / 1_000_000);
    }
    if nanos.is_multiple_of(1_000) {
        return format!("{}us", nanos / 1_000);
    }
    format!("{nanos}ns")
}

fn trim_float(value: f64) -> String {
    let text = format!("{value:.3}");
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// A duration field of a plan or script: deserialises from a string such as `"250ms"`
/// and serialises back to the same kind of string.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct DurationSpec(pub Duration);

impl DurationSpec {
    /// The duration itself.
    pub fn get(self) -> Duration {
        self.0
    }
}

impl From<Duration> for DurationSpec {
    fn from(duration: Duration) -> Self {
        Self(duration)
    }
}

impl From<DurationSpec> for Duration {
    fn from(spec: DurationSpec) -> Self {
        spec.0
    }
}

impl fmt::Display for DurationSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format_duration(self.0))
    }
}

struct DurationVisitor;

impl Visitor<'_> for DurationVisitor {
    type Value = Duration;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a duration string like \"250ms\", \"10s\" or \"2m\"")
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<Duration, E> {
        parse_duration(value).map_err(E::custom)
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<Duration, E> {
        if value == 0 {
            Ok(Duration::ZERO)
        } else {
            Err(E::custom(format!(
                "duration {value} has no unit: write e.g. \"{value}ms\" or \"{value}s\""
            )))
        }
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<Duration, E> {
        if value >= 0 {
            self.visit_u64(value.unsigned_abs())
        } else {
            Err(E::custom(format!("duration {value} is negative")))
        }
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<Duration, E> {
        Err(E::custom(format!(
            "duration {value} has no unit: write e.g. \"{value}s\""
        )))
    }
}

impl<'de> Deserialize<'de> for DurationSpec {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer
            .deserialize_any(DurationVisitor)
            .map(DurationSpec)
    }
}

impl Serialize for DurationSpec {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&format_duration(self.0))
    }
}

/// `#[serde(with = "fault_server::duration::serde_duration")]` for a plain `Duration` field.
pub mod serde_duration {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::DurationSpec;

    /// Deserialises a duration string such as `"250ms"`.
    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        DurationSpec::deserialize(deserializer).map(DurationSpec::get)
    }

    /// Serialises a duration as a string such as `"250ms"`.
    pub fn serialize<S: Serializer>(value: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
        DurationSpec(*value).serialize(serializer)
    }
}

/// `#[serde(default, with = "fault_server::duration::serde_opt_duration")]` for an
/// `Option<Duration>` field.
pub mod serde_opt_duration {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::DurationSpec;

    /// Deserialises an optional duration string such as `"250ms"`.
    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<Duration>, D::Error> {
        Option::<DurationSpec>::deserialize(deserializer).map(|value| value.map(DurationSpec::get))
    }

    /// Serialises an optional duration as a string such as `"250ms"` (or null).
    pub fn serialize<S: Serializer>(
        value: &Option<Duration>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        value.map(DurationSpec).serialize(serializer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(text: &str, expected: Duration) {
        assert_eq!(parse_duration(text), Ok(expected), "{text}");
    }

    fn err(text: &str, needle: &str) {
        let message = parse_duration(text).expect_err(text);
        assert!(message.contains(needle), "{text}: {message}");
    }

    #[test]
    fn parses_the_spellings_plans_use() {
        ok("250ms", Duration::from_millis(250));
        ok("10s", Duration::from_secs(10));
        ok("2m", Duration::from_secs(120));
        ok("1.5s", Duration::from_millis(1500));
        ok("1h", Duration::from_secs(3600));
        ok("500us", Duration::from_micros(500));
        ok("7ns", Duration::from_nanos(7));
        ok("0", Duration::ZERO);
        ok("0s", Duration::ZERO);
        ok(" 3s ", Duration::from_secs(3));
        ok("0.25s", Duration::from_millis(250));
    }

    #[test]
    fn rejects_what_a_person_might_mistype() {
        err("", "empty");
        err("5", "no unit");
        err("5 s", "non-negative");
        err("5sec", "unknown unit");
        err("-1s", "non-negative");
        err("1.2.3s", "non-negative");
        err("ms", "non-negative");
        err("1e3s", "unknown unit");
        err("99999999h", "longer than a year");
    }

    #[test]
    fn formats_round_trip() {
        for ms in [
            0u64, 1, 5, 250, 1000, 1500, 60_000, 90_000, 3_600_000, 7_200_000, 12_345,
        ] {
            let duration = Duration::from_millis(ms);
            let text = format_duration(duration);
            assert_eq!(parse_duration(&text), Ok(duration), "{text}");
        }
        assert_eq!(format_duration(Duration::from_millis(250)), "250ms");
        assert_eq!(format_duration(Duration::from_millis(1500)), "1.5s");
        assert_eq!(format_duration(Duration::from_secs(120)), "2m");
        assert_eq!(format_duration(Duration::from_micros(3)), "3us");
    }

    #[test]
    fn yaml_errors_carry_line_and_column() {
        #[derive(Debug, Deserialize)]
        #[allow(dead_code)]
        struct Holder {
            a: DurationSpec,
        }
        let error = serde_yaml::from_str::<Holder>("a: 10 parsecs").expect_err("bad");
        let location = error.location().expect("location");
        assert_eq!((location.line(), location.column()), (1, 4));
        let error = serde_yaml::from_str::<Holder>("a: 5").expect_err("bad");
        assert!(error.to_string().contains("no unit"), "{error}");
    }
}
