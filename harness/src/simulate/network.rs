//! The network of a simulated run: every hop (client to server, server to client) takes
//! a one-way latency drawn from the plan's `network.latency` distribution, from a stream
//! of its own seeded by the plan's seed, so drawing it changes no other draw.
//!
//! What it leaves out, on purpose: connection set-up, bandwidth, loss and reordering.
//! The plans this harness runs send small requests over loopback, where an attempt's time
//! on the wire is its HTTP stack's and nearly constant; the faults that matter (resets,
//! hangs, lost responses) are the script's.

use std::time::Duration;

use fault_server::Distribution;
use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;

pub(super) struct Network {
    latency: Distribution,
    rng: ChaCha8Rng,
}

impl Network {
    pub(super) fn new(latency: Distribution, seed: u64) -> Network {
        Network {
            latency,
            rng: ChaCha8Rng::seed_from_u64(fault_server::seed::stream::network(seed)),
        }
    }

    /// One hop's latency.
    pub(super) fn hop(&mut self) -> Duration {
        match self.latency {
            Distribution::Fixed(d) => d,
            ref other => other.sample(&mut self.rng),
        }
    }
}
