//! Which combinations to simulate, within a budget of runs stated up front.
//!
//! Every combination when the keys have few enough values (a grid); otherwise an even
//! spread over every range using about two thirds of the budget (coarse), then finer
//! looks around the best candidate so far, each half the spacing of the one before,
//! until the budget is spent or nothing new is left to look at (coarse-then-fine). "Best"
//! is the ranking's: passes every gate, then least server load, then the worst second.
//! Pure: the caller simulates (`eval`); this decides what to ask for next.

use super::model::{Candidate, Stage};
use super::vary::{Level, Vary};
use crate::report::rank_order;

/// The most finer looks a search takes, however much budget is left: the sixth looks a
/// 1/128 of the coarse spacing either side, finer than a gate tells apart.
const MAX_ROUNDS: usize = 6;

/// How a search went.
#[derive(Debug)]
pub(super) struct Searched {
    pub(super) search: &'static str,
    /// Every candidate, in the order it ran.
    pub(super) candidates: Vec<(Vec<Level>, Candidate)>,
    /// `eval` said stop.
    pub(super) stopped: bool,
}

/// Why the budget allows no search.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "a budget of {budget} simulated runs is too small for {keys} keys: an even spread of two values each takes {needed}; raise --budget"
)]
pub struct TooSmall {
    pub budget: usize,
    pub keys: usize,
    pub needed: usize,
}

/// Searches `vary` in at most `budget` calls of `eval`, which simulates one combination
/// (`None`: stop now).
pub(super) fn search<E>(
    vary: &[Vary],
    budget: usize,
    mut eval: impl FnMut(&[Level], Stage) -> Result<Option<Candidate>, E>,
) -> Result<Result<Searched, TooSmall>, E> {
    let all: Option<usize> = vary
        .iter()
        .map(Vary::count)
        .try_fold(1usize, |acc, c| c.and_then(|c| acc.checked_mul(c)));
    let (search, per_key) = match all {
        Some(n) if n <= budget => (
            "grid",
            vary.iter().map(|v| v.count().unwrap_or(1)).collect(),
        ),
        _ => {
            let share = (budget * 2 / 3).max(1);
            let size = |k: usize| -> usize {
                vary.iter()
                    .map(|v| v.count().map_or(k, |c| c.min(k)))
                    .fold(1usize, usize::saturating_mul)
            };
            let Some(k) = (2..=64).rev().find(|&k| size(k) <= share) else {
                return Ok(Err(TooSmall {
                    budget,
                    keys: vary.len(),
                    needed: size(2),
                }));
            };
            (
                "coarse-then-fine",
                vary.iter()
                    .map(|v| v.count().map_or(k, |c| c.min(k)))
                    .collect::<Vec<usize>>(),
            )
        }
    };
    let mut out = Searched {
        search,
        candidates: Vec::new(),
        stopped: false,
    };
    let levels: Vec<Vec<Level>> = vary
        .iter()
        .zip(&per_key)
        .map(|(v, &n)| v.levels(n))
        .collect();
    for combo in product(&levels) {
        if out.candidates.len() >= budget {
            break;
        }
        if !ask(&mut out, &mut eval, combo, Stage::Coarse)? {
            return Ok(Ok(out));
        }
    }
    if search == "grid" {
        return Ok(Ok(out));
    }
    let coarse = per_key.iter().copied().max().unwrap_or(2).max(2);
    let mut step = 0.5 / (coarse - 1) as f64;
    for _ in 0..MAX_ROUNDS {
        if out.candidates.len() >= budget {
            break;
        }
        let Some(best) = out
            .candidates
            .iter()
            .min_by(|a, b| rank_order(&a.1.figures, &b.1.figures))
            .map(|(levels, _)| levels.clone())
        else {
            break;
        };
        let near: Vec<Vec<Level>> = vary
            .iter()
            .zip(&best)
            .map(|(v, l)| v.around(l, step))
            .collect();
        step /= 2.0;
        let fresh: Vec<Vec<Level>> = product(&near)
            .into_iter()
            .filter(|combo| !out.candidates.iter().any(|(seen, _)| same(seen, combo)))
            .collect();
        for combo in fresh {
            if out.candidates.len() >= budget {
                break;
            }
            if !ask(&mut out, &mut eval, combo, Stage::Fine)? {
                return Ok(Ok(out));
            }
        }
    }
    Ok(Ok(out))
}

/// Simulates `combo` and keeps it; `false` once `eval` says stop (the search is then
/// `stopped`).
fn ask<E>(
    out: &mut Searched,
    eval: &mut impl FnMut(&[Level], Stage) -> Result<Option<Candidate>, E>,
    combo: Vec<Level>,
    stage: Stage,
) -> Result<bool, E> {
    match eval(&combo, stage)? {
        Some(c) => {
            out.candidates.push((combo, c));
            Ok(true)
        }
        None => {
            out.stopped = true;
            Ok(false)
        }
    }
}

fn same(a: &[Level], b: &[Level]) -> bool {
    a.iter().zip(b).all(|(x, y)| x.text == y.text)
}

/// Every combination of one level per key, the first key varying slowest.
fn product(levels: &[Vec<Level>]) -> Vec<Vec<Level>> {
    let mut out: Vec<Vec<Level>> = vec![Vec::new()];
    for key in levels {
        out = out
            .into_iter()
            .flat_map(|prefix| {
                key.iter().map(move |l| {
                    let mut next = prefix.clone();
                    next.push(l.clone());
                    next
                })
            })
            .collect();
    }
    out
}

/// Marks the candidates no other beats on both server load and success rate (and, in
/// turn, on both server load and p99).
pub(super) fn mark_frontiers(candidates: &mut [Candidate]) {
    let points: Vec<(f64, f64, f64)> = candidates
        .iter()
        .map(|c| {
            (
                c.figures.server_load,
                c.figures.success_rate,
                c.figures.p99_ms,
            )
        })
        .collect();
    for (i, c) in candidates.iter_mut().enumerate() {
        let (load, success, p99) = points[i];
        c.frontier_success = !points.iter().enumerate().any(|(j, &(l, s, _))| {
            j != i && l <= load && s >= success && (l < load || s > success)
        });
        c.frontier_p99 = !points
            .iter()
            .enumerate()
            .any(|(j, &(l, _, p))| j != i && l <= load && p <= p99 && (l < load || p < p99));
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::report::RankRow;

    fn row(load: f64, success: f64, qualifies: bool) -> RankRow {
        RankRow {
            policy: "p".into(),
            qualifies,
            gates_passed: usize::from(qualifies),
            gates: 1,
            failed_gates: Vec::new(),
            partial: false,
            server_load: load,
            amplification_client: load,
            amplification_server: Some(load),
            peak_1s: load,
            success_rate: success,
            p99_ms: 100.0,
            recovery_s: None,
            violations: 0,
            synchrony: None,
            delta: None,
            tiers: 0,
            counterexample: false,
        }
    }

    fn candidate(figures: RankRow, stage: Stage) -> Candidate {
        Candidate {
            settings: Vec::new(),
            stage,
            figures,
            failed_gates: Vec::new(),
            frontier_success: false,
            frontier_p99: false,
            live: None,
        }
    }

    /// A made-up world: load is 1 + ratio; the gate wants success 0.5 + ratio >= 0.7.
    fn world(levels: &[Level], stage: Stage) -> Result<Option<Candidate>, ()> {
        let ratio = levels[0].x;
        Ok(Some(candidate(
            row(1.0 + ratio, 0.5 + ratio, 0.5 + ratio >= 0.7),
            stage,
        )))
    }

    #[test]
    fn few_enough_values_are_a_grid() {
        let vary = [Vary::parse("max_attempts=2..5", "p").unwrap()];
        let s = search(&vary, 10, world).unwrap().unwrap();
        assert_eq!(s.search, "grid");
        assert_eq!(s.candidates.len(), 4);
    }

    #[test]
    fn a_range_is_spread_then_refined_toward_the_least_load_that_passes() {
        let vary = [Vary::parse("budget.ratio=0..1", "p").unwrap()];
        let s = search(&vary, 30, world).unwrap().unwrap();
        assert_eq!(s.search, "coarse-then-fine");
        assert!(s.candidates.len() <= 30);
        let best = s
            .candidates
            .iter()
            .min_by(|a, b| rank_order(&a.1.figures, &b.1.figures))
            .unwrap();
        // The least ratio that passes is 0.2; the fine looks get within a hundredth of it.
        assert!((best.0[0].x - 0.2).abs() < 0.01, "{}", best.0[0].x);
        assert!(s.candidates.iter().any(|c| c.1.stage == Stage::Fine));
    }

    #[test]
    fn the_budget_is_never_exceeded_and_a_stop_is_obeyed() {
        let vary = [
            Vary::parse("budget.ratio=0..1", "p").unwrap(),
            Vary::parse("attempt_timeout=100ms..2s", "p").unwrap(),
        ];
        let s = search(&vary, 20, world).unwrap().unwrap();
        assert!(s.candidates.len() <= 20);
        let mut calls = 0;
        let s = search(&vary, 20, |l, st| {
            calls += 1;
            if calls > 3 { Ok(None) } else { world(l, st) }
        })
        .unwrap()
        .unwrap();
        assert!(s.stopped);
        assert_eq!(s.candidates.len(), 3);
        let too_small = search(&vary, 3, world).unwrap().unwrap_err();
        assert_eq!(too_small.needed, 4);
    }

    #[test]
    fn the_frontier_is_what_nothing_beats_on_both() {
        let mut cs = vec![
            candidate(row(1.0, 0.5, true), Stage::Coarse),
            candidate(row(1.2, 0.7, true), Stage::Coarse),
            candidate(row(1.3, 0.6, true), Stage::Coarse),
        ];
        mark_frontiers(&mut cs);
        let on: Vec<bool> = cs.iter().map(|c| c.frontier_success).collect();
        assert_eq!(on, [true, true, false]);
    }
}
