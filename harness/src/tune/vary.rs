//! `--vary KEY=RANGE`: one key of the tuned policy and the values it may take. A range
//! `LO..HI` of whole numbers is every number in it, of decimals a line from LO to HI, of
//! durations a geometric line (100ms..2s: as many steps from 100 ms to 200 ms as from 1 s
//! to 2 s); a list `A,B,C` is those values (a jitter kind, a backoff as a flow mapping).

use std::time::Duration;

use fault_server::duration::{format_duration, parse_duration};

/// Keys whose values are fractions or factors: `0..1` over one of them is a line from 0
/// to 1, not the two whole numbers.
const DECIMAL_KEYS: &[&str] = &[
    "ratio",
    "token_ratio",
    "failure_ratio",
    "multiplier",
    "percent",
    "min_per_sec",
    "max_tokens",
    "initial_tokens",
    "capacity",
    "retry_cost",
    "timeout_cost",
    "success_refill",
];

const HINT: &str = "e.g. --vary budget.ratio=0.05..0.5, --vary max_attempts=2..5, --vary attempt_timeout=200ms..2s, --vary backoff.jitter=full,equal,decorrelated";

/// Why `--vary` is not `KEY=RANGE` for this policy.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VaryError {
    #[error("`{0}` is not KEY=LO..HI or KEY=A,B,C; {HINT}")]
    NotKeyRange(String),
    #[error("`{0}` has an empty part; {HINT}")]
    EmptyPart(String),
    #[error("`{0}`: {1}..{2} is not a range of numbers or durations; {HINT}")]
    NotRange(String, String, String),
    #[error("`{0}`: the range runs backwards ({1} is above {2}); write LO..HI")]
    Backwards(String, String, String),
    #[error(
        "`{0}`: `{1}` is a key of the plan, not of a policy; tune varies the policy's own keys ({HINT})"
    )]
    PlanKey(String, String),
    #[error("`{0}` is varied twice")]
    Twice(String),
}

/// What a key may be.
#[derive(Debug, Clone, PartialEq)]
enum Kind {
    Whole {
        lo: i64,
        hi: i64,
    },
    Decimal {
        lo: f64,
        hi: f64,
    },
    /// In seconds; stepped geometrically.
    Time {
        lo: f64,
        hi: f64,
    },
    List(Vec<String>),
}

/// One value a key takes: as the plan writes it, and its place on the key's line (the
/// number; a list's index) for refining around it.
#[derive(Debug, Clone, PartialEq)]
pub struct Level {
    pub text: String,
    pub x: f64,
}

/// One `--vary`.
#[derive(Debug, Clone, PartialEq)]
pub struct Vary {
    /// The key's path inside the policy, e.g. `["budget", "ratio"]`.
    pub key: Vec<String>,
    kind: Kind,
}

impl Vary {
    /// `KEY=RANGE` for `policy`; the key may start with the policy's name.
    pub fn parse(spec: &str, policy: &str) -> Result<Vary, VaryError> {
        let (key, range) = spec
            .split_once('=')
            .ok_or_else(|| VaryError::NotKeyRange(spec.to_owned()))?;
        let mut parts: Vec<String> = key.split('.').map(|p| p.trim().to_owned()).collect();
        if parts.first().is_some_and(|p| p == policy) && parts.len() > 1 {
            parts.remove(0);
        }
        if parts.iter().any(String::is_empty) || range.trim().is_empty() {
            return Err(VaryError::EmptyPart(spec.to_owned()));
        }
        if crate::simulate::sweep::PLAN_KEYS.contains(&parts[0].as_str()) && parts[0] != "name" {
            return Err(VaryError::PlanKey(spec.to_owned(), parts[0].clone()));
        }
        let range = range.trim();
        let kind = match range.split_once("..") {
            Some((lo, hi)) if !range.contains(',') && !range.contains('{') => {
                let (lo, hi) = (lo.trim(), hi.trim());
                let bad = || VaryError::NotRange(spec.to_owned(), lo.to_owned(), hi.to_owned());
                let decimal = parts
                    .last()
                    .is_some_and(|k| DECIMAL_KEYS.contains(&k.as_str()));
                let whole = (lo.parse::<i64>(), hi.parse::<i64>());
                let kind = if let (Ok(l), Ok(h), false) = (whole.0, whole.1, decimal) {
                    (l <= h).then_some(Kind::Whole { lo: l, hi: h })
                } else if let (Ok(l), Ok(h)) = (lo.parse::<f64>(), hi.parse::<f64>()) {
                    if !(l.is_finite() && h.is_finite()) {
                        return Err(bad());
                    }
                    (l <= h).then_some(Kind::Decimal { lo: l, hi: h })
                } else if let (Ok(l), Ok(h)) = (parse_duration(lo), parse_duration(hi)) {
                    if l.is_zero() {
                        return Err(bad());
                    }
                    (l <= h).then_some(Kind::Time {
                        lo: l.as_secs_f64(),
                        hi: h.as_secs_f64(),
                    })
                } else {
                    return Err(bad());
                };
                kind.ok_or_else(|| {
                    VaryError::Backwards(spec.to_owned(), lo.to_owned(), hi.to_owned())
                })?
            }
            _ => {
                let values = crate::simulate::sweep::split_values(range);
                if values.iter().any(String::is_empty) {
                    return Err(VaryError::EmptyPart(spec.to_owned()));
                }
                Kind::List(values)
            }
        };
        Ok(Vary { key: parts, kind })
    }

    /// The key as written back: `budget.ratio`.
    pub fn name(&self) -> String {
        self.key.join(".")
    }

    /// How many values the key has, when it has a countable few (whole numbers, a list).
    pub fn count(&self) -> Option<usize> {
        match &self.kind {
            Kind::Whole { lo, hi } => usize::try_from(hi - lo + 1).ok(),
            Kind::List(values) => Some(values.len()),
            Kind::Decimal { lo, hi } | Kind::Time { lo, hi } => (hi - lo <= 0.0).then_some(1),
        }
    }

    /// `n` values spread over the range (every one, when it has no more than `n`).
    pub fn levels(&self, n: usize) -> Vec<Level> {
        let n = n.max(1);
        let at = |i: usize| {
            if n == 1 {
                0.5
            } else {
                i as f64 / (n - 1) as f64
            }
        };
        let mut out: Vec<Level> = match &self.kind {
            Kind::Whole { lo, hi } => {
                let count = (hi - lo + 1) as usize;
                if count <= n {
                    (*lo..=*hi).map(|v| self.level(v as f64)).collect()
                } else {
                    (0..n)
                        .map(|i| self.level((*lo as f64 + at(i) * (hi - lo) as f64).round()))
                        .collect()
                }
            }
            Kind::Decimal { lo, hi } => {
                (0..n).map(|i| self.level(lo + at(i) * (hi - lo))).collect()
            }
            Kind::Time { lo, hi } => (0..n)
                .map(|i| self.level(lo * (hi / lo).powf(at(i))))
                .collect(),
            Kind::List(values) => values
                .iter()
                .enumerate()
                .map(|(i, v)| Level {
                    text: v.clone(),
                    x: i as f64,
                })
                .collect(),
        };
        out.dedup_by(|a, b| a.text == b.text);
        out
    }

    /// The values either side of `around`, `step` of the range away (a share of it: 0.1
    /// is a tenth), and `around` itself: where a finer search looks next.
    pub fn around(&self, around: &Level, step: f64) -> Vec<Level> {
        let mut out = match &self.kind {
            Kind::Whole { lo, hi } => {
                let d = ((hi - lo) as f64 * step).round().max(1.0);
                [around.x - d, around.x, around.x + d]
                    .into_iter()
                    .filter(|v| *v >= *lo as f64 && *v <= *hi as f64)
                    .map(|v| self.level(v))
                    .collect()
            }
            Kind::Decimal { lo, hi } => {
                let d = (hi - lo) * step;
                [around.x - d, around.x, around.x + d]
                    .into_iter()
                    .map(|v| self.level(v.clamp(*lo, *hi)))
                    .collect()
            }
            Kind::Time { lo, hi } => {
                let f = (hi / lo).powf(step);
                [around.x / f, around.x, around.x * f]
                    .into_iter()
                    .map(|v| self.level(v.clamp(*lo, *hi)))
                    .collect()
            }
            Kind::List(_) => vec![around.clone()],
        };
        out.dedup_by(|a, b| a.text == b.text);
        out
    }

    /// The value at `x` on the key's line, as the plan writes it.
    fn level(&self, x: f64) -> Level {
        match &self.kind {
            Kind::Whole { .. } => Level {
                text: format!("{}", x as i64),
                x,
            },
            Kind::Decimal { lo, hi } => {
                // To a two-hundredth of the range, in decimal digits: over 0.05..0.5, 0.053
                // rather than 0.053125, a difference no gate can see.
                let digits = decimals(hi - lo);
                let rounded: f64 = format!("{x:.digits$}").parse().unwrap_or(x);
                Level {
                    text: format!("{rounded}"),
                    x: rounded,
                }
            }
            Kind::Time { .. } => {
                let d = Duration::from_secs_f64(x);
                let ms = if d >= Duration::from_millis(1) {
                    Duration::from_millis(d.as_millis() as u64)
                } else {
                    Duration::from_micros(d.as_micros() as u64)
                };
                Level {
                    text: format_duration(ms),
                    x: ms.as_secs_f64(),
                }
            }
            Kind::List(values) => {
                let i = (x.round() as usize).min(values.len().saturating_sub(1));
                Level {
                    text: values[i].clone(),
                    x: i as f64,
                }
            }
        }
    }
}

/// Decimal digits that resolve a two-hundredth of `span`.
fn decimals(span: f64) -> usize {
    if span <= 0.0 {
        return 6;
    }
    (-(span / 200.0).log10()).ceil().clamp(0.0, 9.0) as usize
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // Tests: a panic is the failure report.

    use super::Vary;

    fn texts(v: &Vary, n: usize) -> Vec<String> {
        v.levels(n).into_iter().map(|l| l.text).collect()
    }

    #[test]
    fn ranges_are_numbers_durations_or_lists() {
        let attempts = Vary::parse("max_attempts=2..5", "p").unwrap();
        assert_eq!(attempts.count(), Some(4));
        assert_eq!(texts(&attempts, 8), ["2", "3", "4", "5"]);
        assert_eq!(texts(&attempts, 2), ["2", "5"]);
        let ratio = Vary::parse("p.budget.ratio=0.05..0.5", "p").unwrap();
        assert_eq!(ratio.key, ["budget", "ratio"]);
        assert_eq!(texts(&ratio, 4), ["0.05", "0.2", "0.35", "0.5"]);
        let timeout = Vary::parse("attempt_timeout=100ms..1600ms", "p").unwrap();
        assert_eq!(
            texts(&timeout, 5),
            ["100ms", "200ms", "400ms", "800ms", "1.6s"]
        );
        let jitter = Vary::parse("backoff.jitter=full,equal", "p").unwrap();
        assert_eq!(texts(&jitter, 1), ["full", "equal"]);
    }

    #[test]
    fn a_finer_look_is_either_side_within_the_range() {
        let ratio = Vary::parse("budget.ratio=0..1", "p").unwrap();
        let middle = &ratio.levels(3)[1];
        let near: Vec<String> = ratio
            .around(middle, 0.125)
            .into_iter()
            .map(|l| l.text)
            .collect();
        assert_eq!(near, ["0.375", "0.5", "0.625"]);
        let low = &ratio.levels(3)[0];
        let near: Vec<String> = ratio
            .around(low, 0.125)
            .into_iter()
            .map(|l| l.text)
            .collect();
        assert_eq!(near, ["0", "0.125"]);
    }

    #[test]
    fn malformed_ranges_say_what_to_write() {
        for (spec, says) in [
            ("max_attempts", "is not KEY=LO..HI"),
            ("max_attempts=5..2", "runs backwards"),
            ("budget.ratio=a..b", "not a range"),
            ("load.rate=1..2", "a key of the plan"),
            ("budget..ratio=1..2", "empty part"),
        ] {
            let e = Vary::parse(spec, "p").unwrap_err().to_string();
            assert!(e.contains(says), "{spec}: {e}");
        }
    }
}
