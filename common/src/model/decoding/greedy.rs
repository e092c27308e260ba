//! Greedy decoding: `w_t = argmax_w log π(w | w_<t, I)`.

use super::bad_endings::BadEndings;
use super::decoder::Decoder;
use super::rollout::{Decoded, Policy};
use super::softmax::host_logprob;
use crate::model::error::Result;
use crate::model::inputs::Inputs;

pub(crate) struct Greedy;

impl Policy for Greedy {
    fn choose(&mut self, _row: usize, logits: &[f32]) -> (u32, f32) {
        let w = argmax(logits);
        (w as u32, host_logprob(logits, 1.0, w))
    }

    fn logprob(&self, logits: &[f32], token: u32) -> f32 {
        host_logprob(logits, 1.0, token as usize)
    }
}

/// Index of the largest value; the first one on ties.
pub(crate) fn argmax(xs: &[f32]) -> usize {
    let mut best = 0;
    for (i, &x) in xs.iter().enumerate() {
        if x > xs[best] {
            best = i;
        }
    }
    best
}

impl Decoder {
    /// Greedy captions of every image in `x`, at most `max_len` words (plus EOS); log-probs at
    /// temperature 1.
    pub fn greedy(&self, x: &Inputs, max_len: usize) -> Result<Decoded> {
        self.greedy_avoiding(x, max_len, &BadEndings::none())
    }

    /// [`Decoder::greedy`] that never ends a caption right after a word of `bad_endings`
    /// (it may still stop there at `max_len`); the log-probs are those of the distribution
    /// without EOS at such steps, renormalised.
    pub fn greedy_avoiding(
        &self,
        x: &Inputs,
        max_len: usize,
        bad_endings: &BadEndings,
    ) -> Result<Decoded> {
        self.rollout(x, None, max_len, bad_endings, &mut Greedy)
    }
}
