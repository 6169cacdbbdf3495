//! Selection: the first phase whose window, match and attempts admit the request and
//! whose draw fires decides; its weighted pick says which fault.

use std::time::Duration;

use rand_chacha::ChaCha8Rng;
use rand_core::{Rng, SeedableRng};

use super::Script;
use super::facts::RequestFacts;
use super::fault::{Decision, Fault};
use super::resolve::{Entry, Matcher, Phase};
use crate::dist::unit;
use crate::seed;

impl Script {
    /// Decides what happens to `request` arriving at `now` (time since the run started).
    pub fn select<R: Rng + ?Sized>(
        &self,
        request: &RequestFacts<'_>,
        now: Duration,
        rng: &mut R,
    ) -> Decision {
        for (index, phase) in self.phases.iter().enumerate() {
            if now < phase.from || phase.until.is_some_and(|until| now >= until) {
                continue;
            }
            if !phase.matcher.matches(request) {
                continue;
            }
            if let Some(attempts) = &phase.attempts
                && !request.attempt.is_some_and(|n| attempts.contains(&n))
            {
                continue;
            }
            if let Some(peers) = &phase.peers
                && !request.peer.is_some_and(|n| peers.contains(&n))
            {
                continue;
            }
            // A sticky phase draws from a stream of its own for the logical request, so
            // every attempt of the request gets the same answer from it.
            let mut sticky_rng = phase
                .sticky
                .then_some(request.sticky_seed)
                .flatten()
                .map(|sticky| ChaCha8Rng::seed_from_u64(seed::stream::sticky_phase(sticky, index)));
            let drawn = match sticky_rng.as_mut() {
                Some(sticky) => phase.draw(sticky),
                None => phase.draw(rng),
            };
            if let Some(fault) = drawn {
                return Decision::Fault {
                    phase: index,
                    fault,
                };
            }
        }
        Decision::Serve
    }
}

impl Matcher {
    fn matches(&self, request: &RequestFacts<'_>) -> bool {
        if !self.methods.is_empty()
            && !self
                .methods
                .iter()
                .any(|m| m.eq_ignore_ascii_case(request.method))
        {
            return false;
        }
        if let Some(path) = &self.path
            && !path.matches(request.path)
        {
            return false;
        }
        self.headers.iter().all(|(name, pattern)| {
            request
                .headers
                .header(name)
                .is_some_and(|value| pattern.matches(value))
        })
    }
}

impl Phase {
    /// The phase's own draws for a request it matched: does it fire, and with which fault.
    fn draw<R: Rng + ?Sized>(&self, rng: &mut R) -> Option<Fault> {
        let fires = if self.probability >= 1.0 {
            true
        } else if self.probability <= 0.0 {
            false
        } else {
            unit(rng) < self.probability
        };
        if !fires {
            return None;
        }
        let entry = pick(&self.entries, self.total_weight, rng);
        Some(Fault {
            action: entry.action.map_delay(|delay| delay.sample(rng)),
            processed: entry.processed,
        })
    }
}

/// Picks one entry by weight. One entry (or one with positive weight) draws nothing.
fn pick<'a, R: Rng + ?Sized>(entries: &'a [Entry], total: f64, rng: &mut R) -> &'a Entry {
    let mut positive = entries.iter().filter(|e| e.weight > 0.0);
    let first = positive
        .next()
        .expect("from_spec refuses a phase whose weights sum to zero");
    if positive.next().is_none() {
        return first;
    }
    let mut target = unit(rng) * total;
    let mut chosen = first;
    for entry in entries.iter().filter(|e| e.weight > 0.0) {
        chosen = entry;
        if target < entry.weight {
            break;
        }
        target -= entry.weight;
    }
    chosen
}
