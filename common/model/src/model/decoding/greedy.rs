//! Greedy decoding: `w_t = argmax_w log π(w | w_<t, I)`.

use super::bad_endings::BadEndings;
use super::decoder::Decoder;
use super::log_softmax::host_logprob;
use super::rollout::{Decoded, Policy};
use crate::model::captioner::Captioner;
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

/// Index of the largest value; the first one on ties. NaNs are never the largest, but a NaN
/// first value is kept (as a scan that moves only to a strictly larger value keeps it).
pub(crate) fn argmax<T: Lanes>(xs: &[T]) -> usize {
    caprl_kernels::fastmath::vectorised!(argmax_plain(xs))
}

/// Values [`argmax`] runs on (the logits, f32; the sampler's uniform numbers, f64).
pub(crate) trait Lanes: Copy + PartialOrd + PartialEq {
    const NEG_INFINITY: Self;
}

impl Lanes for f32 {
    const NEG_INFINITY: Self = f32::NEG_INFINITY;
}

impl Lanes for f64 {
    const NEG_INFINITY: Self = f64::NEG_INFINITY;
}

/// Lanes of [`argmax_plain`]'s maximum.
const LANES: usize = 8;

#[inline(always)]
fn argmax_plain<T: Lanes>(xs: &[T]) -> usize {
    let Some(&first) = xs.first() else {
        return 0;
    };
    // A NaN first value (unordered even with itself) is never passed by a strictly larger one.
    if first.partial_cmp(&first).is_none() {
        return 0;
    }
    // The largest value in fixed lanes (so that it vectorises), then its first position: the
    // position a left-to-right scan that keeps the first of equal values ends at.
    let mut m = [T::NEG_INFINITY; LANES];
    let chunks = xs.chunks_exact(LANES);
    let rest = chunks.remainder();
    for c in chunks {
        for (m, &x) in m.iter_mut().zip(c) {
            *m = if x > *m { x } else { *m };
        }
    }
    let max = rest
        .iter()
        .chain(&m)
        .fold(T::NEG_INFINITY, |a, &x| if x > a { x } else { a });
    xs.iter().position(|&x| x == max).unwrap_or(0)
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

impl Captioner {
    /// [`Decoder::greedy`] on weights prepared for this call.
    pub fn greedy(&self, x: &Inputs, max_len: usize) -> Result<Decoded> {
        self.decoder()?.greedy(x, max_len)
    }
}

#[cfg(test)]
mod tests {
    use super::argmax;

    /// The scan it replaces: move to a strictly larger value only.
    fn scan(xs: &[f32]) -> usize {
        let mut best = 0;
        for (i, &x) in xs.iter().enumerate() {
            if x > xs[best] {
                best = i;
            }
        }
        best
    }

    #[test]
    fn argmax_is_the_first_largest_like_a_left_to_right_scan() {
        let nan = f32::NAN;
        let cases: Vec<Vec<f32>> = vec![
            vec![],
            vec![nan, 1.0, 2.0],
            vec![1.0, nan, 3.0, 3.0],
            vec![f32::NEG_INFINITY; 9],
            vec![-0.0, 0.0, -1.0],
            vec![0.0, -0.0],
            (0..10_007)
                .map(|i| ((i * 7919) % 1013) as f32 / 7.0)
                .collect(),
            (0..37).map(|i| (i % 5) as f32).collect(),
        ];
        for xs in cases {
            assert_eq!(argmax(&xs), scan(&xs), "{:?}", &xs[..xs.len().min(8)]);
        }
        let us: Vec<f64> = (0..1001).map(|i| ((i * 31) % 997) as f64 / 997.0).collect();
        let want = us
            .iter()
            .enumerate()
            .fold(0, |b, (i, &u)| if u > us[b] { i } else { b });
        assert_eq!(argmax(&us), want);
    }
}
