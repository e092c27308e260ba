//! The project's seeded random stream.
//!
//! Candle's CPU random ops cannot be seeded, so dropout masks and sampling noise come from a
//! ChaCha8 stream on the host: the same seed gives the same numbers on every machine.

use rand::{Rng, RngCore, SeedableRng};
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

    /// Fills `out` with what as many [`CaprlRng::uniform_open`] calls would give, the stream's
    /// words taken in blocks.
    pub fn fill_uniform_open(&mut self, out: &mut [f64]) {
        const BLOCK: usize = 256;
        let mut words = [0u8; 8 * BLOCK];
        for chunk in out.chunks_mut(BLOCK) {
            let start = self.inner.get_word_pos();
            let bytes = &mut words[..8 * chunk.len()];
            // `fill_bytes` hands out the words `next_u64` would, low word first.
            self.inner.fill_bytes(bytes);
            for (u, w) in chunk.iter_mut().zip(bytes.chunks_exact(8)) {
                let w = u64::from_le_bytes(w.try_into().expect("8 bytes"));
                // rand's uniform f64: the top 53 bits, scaled into [0, 1).
                *u = (w >> 11) as f64 * (1.0 / (1u64 << 53) as f64);
            }
            // A zero (one in 2⁵³) is redrawn by `uniform_open`, shifting the stream: take the
            // block again one number at a time.
            if chunk.contains(&0.0) {
                self.inner.set_word_pos(start);
                chunk.iter_mut().for_each(|u| *u = self.uniform_open());
            }
        }
    }

    /// Inverted-dropout mask values: `1 / (1 - p)` with probability `1 - p`, else 0.
    ///
    /// Element `i` keeps when the `i`-th `u32` of the stream, as rand's uniform `f32`
    /// (`(u >> 8) · 2⁻²⁴`), is below `1 - p`. The words come from the stream in blocks
    /// (`fill_bytes` hands out the same words in the same order as one `u32` at a time).
    pub fn dropout_mask(&mut self, n: usize, p: f32) -> Vec<f32> {
        let keep = 1.0 - p;
        let scale = 1.0 / keep;
        // `(u >> 8) · 2⁻²⁴ < keep` exactly when the integer `u >> 8` is below `⌈keep · 2²⁴⌉`
        // (both products by a power of two are exact): a compare the loop below vectorises.
        let below = (keep as f64 * (1u64 << 24) as f64).ceil() as u32;
        let mut words = vec![0u32; n];
        let mut bytes = vec![0u8; 4 * n.min(BLOCK_WORDS)];
        for chunk in words.chunks_mut(BLOCK_WORDS) {
            let bytes = &mut bytes[..4 * chunk.len()];
            self.inner.fill_bytes(bytes);
            for (w, b) in chunk.iter_mut().zip(bytes.chunks_exact(4)) {
                *w = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            }
        }
        words
            .into_iter()
            .map(|u| if (u >> 8) < below { scale } else { 0.0 })
            .collect()
    }
}

/// Words drawn per `fill_bytes` call by [`CaprlRng::dropout_mask`] (a 16 KiB buffer).
const BLOCK_WORDS: usize = 4096;

#[cfg(test)]
mod tests {
    use super::*;

    /// The block-wise mask is the one drawn one `f32` at a time with rand's uniform `f32`, and
    /// leaves the stream at the same position.
    #[test]
    fn dropout_masks_match_drawing_one_uniform_f32_at_a_time() {
        for (n, p) in [
            (1usize, 0.5f32),
            (7, 0.2),
            (1000, 0.5),
            (4099, 0.3),
            (9000, 0.1),
            (300, 0.9),
        ] {
            let mut fast = CaprlRng::new(11);
            let mut slow = CaprlRng::new(11);
            let _ = fast.next_u64();
            let _ = slow.next_u64();
            let got = fast.dropout_mask(n, p);
            let want: Vec<f32> = (0..n)
                .map(|_| {
                    if slow.inner.random::<f32>() < 1.0 - p {
                        1.0 / (1.0 - p)
                    } else {
                        0.0
                    }
                })
                .collect();
            assert_eq!(got, want, "n = {n}, p = {p}");
            assert_eq!(fast.state(), slow.state(), "n = {n}");
            let kept = got.iter().filter(|&&m| m > 0.0).count() as f32 / n as f32;
            if n >= 1000 {
                assert!(
                    (kept - (1.0 - p)).abs() < 0.05,
                    "kept {kept} of n = {n}, p = {p}"
                );
            }
        }
    }

    /// The block-wise uniforms are those of `uniform_open` one at a time, from any stream
    /// position (an odd word position included), and leave the stream where it would be.
    #[test]
    fn filled_uniforms_match_drawing_one_at_a_time() {
        for (n, skip_words) in [(1usize, 0u32), (255, 1), (256, 0), (257, 3), (10_000, 1)] {
            let mut fast = CaprlRng::with_stream(5, 2);
            let mut slow = CaprlRng::with_stream(5, 2);
            for _ in 0..skip_words {
                fast.inner.next_u32();
                slow.inner.next_u32();
            }
            let mut got = vec![0f64; n];
            fast.fill_uniform_open(&mut got);
            let want: Vec<f64> = (0..n).map(|_| slow.uniform_open()).collect();
            assert_eq!(got, want, "n = {n}");
            assert_eq!(fast.state(), slow.state(), "n = {n}");
        }
    }
}
