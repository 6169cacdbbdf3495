//! A ChaCha8 stream that is seeded only when something draws from it.
//!
//! The simulator draws from the very streams the live run draws from (the server's per
//! attempt, the client's per request), but most steps draw nothing: an attempt outside
//! every fault window, an answer that needs no backoff. Seeding ChaCha is a good part of
//! what such a step costs, so the stream is made on the first draw, from its first word,
//! or from where an earlier step left it (a word position): the draws are the same.

use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;

pub(super) struct LazyRng {
    seed: u64,
    /// Where an earlier step left the stream (0: at its start).
    word: u128,
    /// Boxed once made: a job waiting carries 32 bytes for its stream, not a generator.
    rng: Option<Box<ChaCha8Rng>>,
}

impl LazyRng {
    pub(super) fn new(seed: u64) -> LazyRng {
        LazyRng::resume(seed, 0)
    }

    /// The stream of `seed`, from word `word` on.
    pub(super) fn resume(seed: u64, word: u128) -> LazyRng {
        LazyRng {
            seed,
            word,
            rng: None,
        }
    }

    /// Where the stream stands now, to resume it later.
    pub(super) fn word(&self) -> u128 {
        self.rng.as_ref().map_or(self.word, |r| r.get_word_pos())
    }

    fn get(&mut self) -> &mut ChaCha8Rng {
        let (seed, word) = (self.seed, self.word);
        self.rng.get_or_insert_with(|| {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            if word != 0 {
                rng.set_word_pos(word);
            }
            Box::new(rng)
        })
    }
}

impl rand_core::TryRng for LazyRng {
    type Error = std::convert::Infallible;

    fn try_next_u32(&mut self) -> Result<u32, Self::Error> {
        Ok(rand_core::Rng::next_u32(self.get()))
    }

    fn try_next_u64(&mut self) -> Result<u64, Self::Error> {
        Ok(rand_core::Rng::next_u64(self.get()))
    }

    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Self::Error> {
        rand_core::Rng::fill_bytes(self.get(), dst);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use rand_core::Rng;

    use super::*;

    #[test]
    fn a_lazy_stream_resumed_draws_what_one_stream_draws() {
        let mut whole = ChaCha8Rng::seed_from_u64(9);
        let expected: Vec<u64> = (0..10).map(|_| whole.next_u64()).collect();
        let mut got = Vec::new();
        let mut word = 0;
        for n in [0, 3, 0, 5, 2] {
            let mut lazy = LazyRng::resume(9, word);
            got.extend((0..n).map(|_| lazy.next_u64()));
            word = lazy.word();
        }
        assert_eq!(got, expected);
    }
}
