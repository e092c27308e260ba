//! The project's seeded random stream.
//!
//! Candle's CPU random ops cannot be seeded, so dropout masks and sampling noise come from a
//! ChaCha8 stream on the host: the same seed gives the same numbers on every machine.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// Seeded ChaCha8 random stream used for dropout masks and Gumbel noise.
#[derive(Debug, Clone)]
pub struct CaprlRng {
    inner: ChaCha8Rng,
}

/// A checkpointable position of a [`CaprlRng`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RngState {
    pub seed: [u8; 32],
    pub stream: u64,
    pub word_pos: u128,
}

impl CaprlRng {
    /// A stream from a `u64` seed.
    pub fn new(seed: u64) -> Self {
        Self {
            inner: ChaCha8Rng::seed_from_u64(seed),
        }
    }

    /// An independent stream for row `stream` derived from `seed` (used per sampled sequence so
    /// that one row's length never shifts another row's noise).
    pub fn with_stream(seed: u64, stream: u64) -> Self {
        let mut inner = ChaCha8Rng::seed_from_u64(seed);
        inner.set_stream(stream);
        Self { inner }
    }

    /// Where the stream is, for checkpoints.
    pub fn state(&self) -> RngState {
        RngState {
            seed: self.inner.get_seed(),
            stream: self.inner.get_stream(),
            word_pos: self.inner.get_word_pos(),
        }
    }

    /// Resumes a stream exactly where [`CaprlRng::state`] left it.
    pub fn from_state(state: &RngState) -> Self {
        let mut inner = ChaCha8Rng::from_seed(state.seed);
        inner.set_stream(state.stream);
        inner.set_word_pos(state.word_pos);
        Self { inner }
    }

    /// A fresh `u64` (used to seed per-row streams).
    pub fn next_u64(&mut self) -> u64 {
        self.inner.random()
    }

    /// Uniform in the open interval (0, 1).
    pub fn uniform_open(&mut self) -> f64 {
        loop {
            let u: f64 = self.inner.random();
            if u > 0.0 {
                return u;
            }
        }
    }

    /// Standard Gumbel noise `g = -ln(-ln u)`, `u ~ U(0, 1)`: `argmax(logits / T + g)` is a sample
    /// from `softmax(logits / T)` (the Gumbel-max trick).
    pub fn gumbel(&mut self) -> f64 {
        -(-self.uniform_open().ln()).ln()
    }

    /// Inverted-dropout mask values: `1 / (1 - p)` with probability `1 - p`, else 0.
    pub fn dropout_mask(&mut self, n: usize, p: f32) -> Vec<f32> {
        let keep = 1.0 - p;
        let scale = 1.0 / keep;
        (0..n)
            .map(|_| {
                if self.inner.random::<f32>() < keep {
                    scale
                } else {
                    0.0
                }
            })
            .collect()
    }
}
