//! When each logical request is due: arrivals on an absolute timeline.
//!
//! Open loop means the schedule does not wait for the server: request i is due at its own
//! time whatever happened to request i-1, and latency counts from that time. The schedule
//! is pure (a seeded iterator of offsets from the start), so a seed gives the same requests
//! at the same times on every run, whichever shell drives them (the live engine and the
//! simulator).
//!
//! Both kinds of arrivals come from one rule, by the time-rescaling theorem: with Λ(t) the
//! integral of the rate profile, arrival i is at Λ⁻¹(Sᵢ), where Sᵢ = i for uniform arrivals
//! and a sum of i unit-exponential draws for a Poisson process. A ramp is then just a
//! profile whose rate changes linearly.

use std::time::Duration;

use rand_chacha::ChaCha8Rng;
use rand_core::{Rng, SeedableRng};

use crate::plan::{Arrivals, Load, Segment};

/// One logical request the load generator issues.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Arrival {
    /// 0-based, in schedule order.
    pub index: u64,
    /// Due time, from the start of the run.
    pub at: Duration,
    /// Which entry of the request mix.
    pub kind: usize,
    /// What a `{n}` in the path becomes, drawn: [`crate::plan::Numbers::write`] maps it
    /// into the request's range or list.
    pub n: u64,
}

/// The arrivals of one run, in order.
#[derive(Debug, Clone)]
pub struct Schedule {
    arrivals: Arrivals,
    segments: Vec<Segment>,
    /// Cumulative weights of the request mix.
    cumulative: Vec<f64>,
    rng: ChaCha8Rng,
    segment: usize,
    /// Where the current segment starts, in seconds from the start.
    segment_start: f64,
    /// The area (expected arrivals) still to cover inside the current segment before the
    /// next arrival.
    area: f64,
    index: u64,
}

impl Schedule {
    pub fn new(load: &Load, seed: u64) -> Schedule {
        let mut total = 0.0;
        let cumulative = load
            .requests
            .iter()
            .map(|r| {
                total += r.weight;
                total
            })
            .collect();
        let mut schedule = Schedule {
            arrivals: load.arrivals,
            segments: load.profile.clone(),
            cumulative,
            rng: ChaCha8Rng::seed_from_u64(fault_server::seed::stream::schedule(seed)),
            segment: 0,
            segment_start: 0.0,
            area: 0.0,
            index: 0,
        };
        schedule.area = schedule.gap();
        schedule
    }

    /// The area between two arrivals: 1 for uniform arrivals, Exp(1) for Poisson.
    fn gap(&mut self) -> f64 {
        match self.arrivals {
            // The first uniform arrival is at 0, the next after one unit.
            Arrivals::Uniform if self.index == 0 => 0.0,
            Arrivals::Uniform => 1.0,
            Arrivals::Poisson => -(1.0 - unit(&mut self.rng)).ln(),
        }
    }

    fn pick_kind(&mut self) -> usize {
        let total = self.cumulative.last().copied().unwrap_or(0.0);
        let x = unit(&mut self.rng) * total;
        self.cumulative
            .iter()
            .position(|&c| x < c)
            .unwrap_or(self.cumulative.len().saturating_sub(1))
    }
}

fn unit(rng: &mut ChaCha8Rng) -> f64 {
    fault_server::seed::unit(rng.next_u64())
}

impl Iterator for Schedule {
    type Item = Arrival;

    fn next(&mut self) -> Option<Arrival> {
        loop {
            let s = *self.segments.get(self.segment)?;
            let length = s.length.as_secs_f64();
            let segment_area = s.expected_arrivals();
            if self.area >= segment_area {
                self.area -= segment_area;
                self.segment += 1;
                self.segment_start += length;
                continue;
            }
            // Solve a·t + k·t²/2 = area for t, k = (to - from) / length, in the form that
            // stays exact when k is 0 or negative.
            let k = (s.to - s.from) / length;
            let root = (s.from * s.from + 2.0 * k * self.area).max(0.0).sqrt();
            let t = if s.from + root > 0.0 {
                2.0 * self.area / (s.from + root)
            } else {
                0.0
            };
            let at = Duration::from_secs_f64(self.segment_start + t.min(length));
            let arrival = Arrival {
                index: self.index,
                at,
                kind: self.pick_kind(),
                n: self.rng.next_u64(),
            };
            self.index += 1;
            // The next gap is measured from this arrival, inside the same segment.
            self.area += self.gap();
            return Some(arrival);
        }
    }
}

/// Per-request randomness (jitter) from the seed and the request's index, so a request's
/// decisions do not depend on how the others interleave.
pub fn request_rng(seed: u64, index: u64) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(request_rng_seed(seed, index))
}

/// What [`request_rng`] is seeded with.
pub fn request_rng_seed(seed: u64, index: u64) -> u64 {
    fault_server::seed::stream::client_request(seed, index)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::Schedule;
    use crate::plan::{Arrivals, Load, RequestKind, Segment};

    fn load(arrivals: Arrivals, profile: Vec<Segment>) -> Load {
        let kind = |name: &str, weight| RequestKind {
            rpc: None,
            name: name.into(),
            method: "GET".into(),
            path: "/".into(),
            n: Default::default(),
            weight,
            body: None,
            headers: Default::default(),
            idempotency_key: false,
        };
        Load {
            arrivals,
            profile,
            max_in_flight: 10,
            max_connections: None,
            protocol: Default::default(),
            requests: vec![kind("a", 3.0), kind("b", 1.0)],
        }
    }

    fn flat(rate: f64, secs: u64) -> Vec<Segment> {
        vec![Segment {
            from: rate,
            to: rate,
            length: Duration::from_secs(secs),
        }]
    }

    #[test]
    fn uniform_arrivals_are_evenly_spaced_from_zero() {
        let times: Vec<u128> = Schedule::new(&load(Arrivals::Uniform, flat(10.0, 1)), 1)
            .map(|a| a.at.as_millis())
            .collect();
        assert_eq!(times, [0, 100, 200, 300, 400, 500, 600, 700, 800, 900]);
    }

    #[test]
    fn poisson_count_is_close_to_rate_times_duration() {
        let n = Schedule::new(&load(Arrivals::Poisson, flat(1000.0, 10)), 7).count();
        // Mean 10000, sd 100: six sigma either way.
        assert!((9400..=10600).contains(&n), "{n}");
    }

    #[test]
    fn the_same_seed_gives_the_same_schedule() {
        let l = load(Arrivals::Poisson, flat(100.0, 5));
        let a: Vec<_> = Schedule::new(&l, 3).collect();
        let b: Vec<_> = Schedule::new(&l, 3).collect();
        let c: Vec<_> = Schedule::new(&l, 4).collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn arrivals_are_ordered_and_inside_the_profile() {
        let l = load(
            Arrivals::Poisson,
            vec![
                Segment {
                    from: 0.0,
                    to: 200.0,
                    length: Duration::from_secs(2),
                },
                Segment {
                    from: 200.0,
                    to: 200.0,
                    length: Duration::from_secs(1),
                },
                Segment {
                    from: 200.0,
                    to: 0.0,
                    length: Duration::from_secs(2),
                },
            ],
        );
        let all: Vec<_> = Schedule::new(&l, 9).collect();
        assert!(all.windows(2).all(|w| w[0].at <= w[1].at));
        assert!(all.iter().all(|a| a.at < Duration::from_secs(5)));
    }

    #[test]
    fn a_linear_ramp_puts_a_quarter_of_its_arrivals_in_its_first_half() {
        let l = load(
            Arrivals::Uniform,
            vec![Segment {
                from: 0.0,
                to: 100.0,
                length: Duration::from_secs(10),
            }],
        );
        let all: Vec<_> = Schedule::new(&l, 1).collect();
        assert_eq!(all.len(), 500);
        let first_half = all.iter().filter(|a| a.at < Duration::from_secs(5)).count();
        assert_eq!(first_half, 125);
    }

    #[test]
    fn the_mix_follows_its_weights() {
        let all: Vec<_> = Schedule::new(&load(Arrivals::Uniform, flat(1000.0, 10)), 5).collect();
        let a = all.iter().filter(|x| x.kind == 0).count() as f64 / all.len() as f64;
        assert!((a - 0.75).abs() < 0.03, "{a}");
    }

    #[test]
    fn a_zero_rate_sends_nothing() {
        assert_eq!(
            Schedule::new(&load(Arrivals::Poisson, flat(0.0, 10)), 1).count(),
            0
        );
    }
}
