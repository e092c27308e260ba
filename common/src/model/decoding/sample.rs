//! Multinomial sampling with temperature, optional top-k and optional top-p, by the Gumbel-max
//! trick: `w_t = argmax_{w ∈ S} (logit_w / T + g_w)`, `g_w ~ Gumbel(0, 1)`, which draws from
//! `μ(w) = softmax(logit / T)` renormalised on `S`: the top k logits when `top_k > 0`, then
//! their nucleus of mass `top_p` when `top_p < 1` (see `nucleus`), else every word.
//!
//! Every row has its own ChaCha8 stream (seeded from one draw of the caller's RNG, stream = row),
//! so the same seed and inputs give the same samples on any machine and in any batch layout.

use super::bad_endings::BadEndings;
use super::decoder::Decoder;
use super::nucleus::nucleus;
use super::rollout::{Decoded, Policy, PARALLEL_MIN_LOGITS};
use super::softmax::{host_log_softmax, host_logprob};
use crate::model::error::{ModelError, Result};
use crate::model::inputs::Inputs;
use crate::model::rng::CaprlRng;

/// How to sample.
#[derive(Debug, Clone, PartialEq)]
pub struct SampleOptions {
    /// Samples per input image (rows `i*n .. i*n+n` of the result belong to image `i`).
    pub n_per_input: usize,
    /// Softmax temperature `T > 0`.
    pub temperature: f32,
    /// Keep only the `k` largest logits; 0 = off.
    pub top_k: usize,
    /// Keep only the nucleus of probability mass `p ∈ (0, 1]` (after top-k); 1 = off.
    pub top_p: f32,
    /// Words after which EOS may not be drawn (`decode.remove_bad_endings`).
    pub bad_endings: BadEndings,
    /// Maximum words (plus EOS).
    pub max_len: usize,
}

pub(crate) struct Sampler {
    inv_temp: f64,
    top_k: usize,
    top_p: f64,
    seed: u64,
    rngs: Vec<Option<CaprlRng>>,
}

impl Sampler {
    fn new(opts: &SampleOptions, rows: usize, rng: &mut CaprlRng) -> Result<Self> {
        if !(opts.temperature > 0.0 && opts.temperature.is_finite()) {
            return Err(ModelError::Input(format!(
                "decode.temperature = {}: must be a finite number > 0",
                opts.temperature
            )));
        }
        if !(opts.top_p > 0.0 && opts.top_p <= 1.0) {
            return Err(ModelError::Input(format!(
                "decode.top_p = {}: must be in (0, 1] (1 = no nucleus truncation)",
                opts.top_p
            )));
        }
        Ok(Self {
            inv_temp: 1.0 / opts.temperature as f64,
            top_k: opts.top_k,
            top_p: opts.top_p as f64,
            seed: rng.next_u64(),
            rngs: vec![None; rows],
        })
    }

    /// Indices the distribution is restricted to: all (`None`), the top k (ties by lower id),
    /// and of those the nucleus of mass `top_p`; ascending.
    fn support(&self, logits: &[f32]) -> Option<Vec<usize>> {
        let top_k = (self.top_k > 0 && self.top_k < logits.len()).then(|| {
            let mut idx: Vec<usize> = (0..logits.len()).collect();
            let cmp = |a: &usize, b: &usize| logits[*b].total_cmp(&logits[*a]).then(a.cmp(b));
            idx.select_nth_unstable_by(self.top_k - 1, cmp);
            idx.truncate(self.top_k);
            idx.sort_unstable();
            idx
        });
        if self.top_p >= 1.0 {
            return top_k;
        }
        Some(nucleus(logits, self.inv_temp, top_k.as_deref(), self.top_p))
    }

    fn log_mu(&self, logits: &[f32], support: &Option<Vec<usize>>, w: usize) -> f32 {
        match support {
            None => host_logprob(logits, self.inv_temp, w),
            Some(s) => {
                let sub: Vec<f32> = s.iter().map(|&i| logits[i]).collect();
                match s.iter().position(|&i| i == w) {
                    Some(p) => host_log_softmax(&sub, self.inv_temp)[p] as f32,
                    None => f32::NEG_INFINITY,
                }
            }
        }
    }

    /// Row `row`'s next token, drawn from its own stream (created on first use).
    fn draw(&self, rng: &mut Option<CaprlRng>, row: usize, logits: &[f32]) -> (u32, f32) {
        let seed = self.seed;
        let rng = rng.get_or_insert_with(|| CaprlRng::with_stream(seed, row as u64));
        let support = self.support(logits);
        let candidates: Box<dyn Iterator<Item = usize>> = match &support {
            None => Box::new(0..logits.len()),
            Some(s) => Box::new(s.clone().into_iter()),
        };
        let mut best = (0usize, f64::NEG_INFINITY);
        for i in candidates {
            let y = logits[i] as f64 * self.inv_temp + rng.gumbel();
            if y > best.1 {
                best = (i, y);
            }
        }
        (best.0 as u32, self.log_mu(logits, &support, best.0))
    }
}

impl Policy for Sampler {
    fn choose(&mut self, row: usize, logits: &[f32]) -> (u32, f32) {
        let mut rng = self.rngs[row].take();
        let out = self.draw(&mut rng, row, logits);
        self.rngs[row] = rng;
        out
    }

    fn logprob(&self, logits: &[f32], token: u32) -> f32 {
        let support = self.support(logits);
        self.log_mu(logits, &support, token as usize)
    }

    /// Rows draw from their own streams, so they can run on rayon's threads and give the same
    /// tokens as one after the other.
    fn choose_rows(
        &mut self,
        rows: &[usize],
        logits: &[f32],
        forced: &[Option<u32>],
    ) -> Vec<(u32, f32)> {
        use rayon::prelude::*;
        let v = logits.len() / rows.len().max(1);
        // The live rows' streams, in the order of `rows`, handed back after the step.
        let mut streams: Vec<Option<CaprlRng>> =
            rows.iter().map(|&r| self.rngs[r].take()).collect();
        let this = &*self;
        let one = |(i, rng): (usize, &mut Option<CaprlRng>)| {
            let l = &logits[i * v..(i + 1) * v];
            match forced[i] {
                Some(w) => (w, this.logprob(l, w)),
                None => this.draw(rng, rows[i], l),
            }
        };
        let out: Vec<(u32, f32)> =
            if rayon::current_num_threads() > 1 && logits.len() >= PARALLEL_MIN_LOGITS {
                streams.par_iter_mut().enumerate().map(one).collect()
            } else {
                streams.iter_mut().enumerate().map(one).collect()
            };
        for (&r, rng) in rows.iter().zip(streams) {
            self.rngs[r] = rng;
        }
        out
    }
}

impl Decoder {
    /// `n_per_input` sampled captions per image (rows `i*n + j`), reproducible from `rng`.
    /// Log-probs are those of the sampling distribution μ (tempered, top-k and top-p
    /// restricted, EOS removed after a bad ending), renormalised.
    pub fn sample(&self, x: &Inputs, opts: &SampleOptions, rng: &mut CaprlRng) -> Result<Decoded> {
        let xs = x.repeat_each(opts.n_per_input.max(1))?;
        let mut s = Sampler::new(opts, xs.batch_size()?, rng)?;
        self.rollout(&xs, None, opts.max_len, &opts.bad_endings, &mut s)
    }

    /// Continues each prefix `n_per_input` times by sampling (Monte-Carlo rollouts). `x` has one
    /// image per prefix; row `i*n + j` of the result is prefix `i`'s `j`-th completion, returned
    /// whole (prefix tokens included, with their log μ). A prefix that contains EOS is returned as is.
    pub fn complete_from_prefix(
        &self,
        x: &Inputs,
        prefixes: &[Vec<u32>],
        opts: &SampleOptions,
        rng: &mut CaprlRng,
    ) -> Result<Decoded> {
        if prefixes.len() != x.batch_size()? {
            return Err(ModelError::Input(format!(
                "{} prefixes for {} images: give one image row per prefix",
                prefixes.len(),
                x.batch_size()?
            )));
        }
        let v = self.cfg.vocab_size as u32;
        if let Some(bad) = prefixes.iter().flatten().find(|&&w| w >= v) {
            return Err(ModelError::Input(format!(
                "prefix token id {bad} is outside the vocabulary of {v}"
            )));
        }
        let n = opts.n_per_input.max(1);
        let xs = x.repeat_each(n)?;
        let pre: Vec<Vec<u32>> = prefixes
            .iter()
            .flat_map(|p| std::iter::repeat_n(p.clone(), n))
            .collect();
        let mut s = Sampler::new(opts, xs.batch_size()?, rng)?;
        self.rollout(&xs, Some(&pre), opts.max_len, &opts.bad_endings, &mut s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sampler(temperature: f32, top_k: usize, top_p: f32) -> Sampler {
        let opts = SampleOptions {
            n_per_input: 1,
            temperature,
            top_k,
            top_p,
            bad_endings: BadEndings::none(),
            max_len: 4,
        };
        Sampler::new(&opts, 1, &mut CaprlRng::new(1)).unwrap()
    }

    /// softmax([2, 1, 0, -1]) = [0.6439, 0.2369, 0.0871, 0.0321].
    const LOGITS: [f32; 4] = [1.0, -1.0, 2.0, 0.0];

    #[test]
    fn nucleus_log_mu_is_the_renormalised_truncated_distribution() {
        let s = sampler(1.0, 0, 0.7);
        // The nucleus of 0.7 is {2, 0}: μ = e² / (e² + e) = 0.7311, e / (e² + e) = 0.2689.
        assert!((s.logprob(&LOGITS, 2) - 0.731_058_6f32.ln()).abs() < 1e-6);
        assert!((s.logprob(&LOGITS, 0) - 0.268_941_4f32.ln()).abs() < 1e-6);
        assert_eq!(s.logprob(&LOGITS, 3), f32::NEG_INFINITY);
        assert_eq!(s.logprob(&LOGITS, 1), f32::NEG_INFINITY);
        let mass: f32 = (0..4).map(|w| s.logprob(&LOGITS, w).exp()).sum();
        assert!((mass - 1.0).abs() < 1e-6, "μ sums to {mass}");
    }

    #[test]
    fn top_k_is_applied_before_top_p() {
        // Top 3 = {2, 0, 3}: softmax = [0.6652, 0.2447, 0.0900]; 0.95 needs all three (of all
        // four words it would need only those three too, but with 0.9 mass left for word 1).
        let s = sampler(1.0, 3, 0.95);
        let kept: Vec<u32> = (0..4)
            .filter(|&w| s.logprob(&LOGITS, w) > f32::NEG_INFINITY)
            .collect();
        assert_eq!(kept, vec![0, 2, 3]);
        assert!(
            (s.logprob(&LOGITS, 3) - (1.0f32 / (1.0 + 1f32.exp() + 2f32.exp())).ln()).abs() < 1e-6
        );
    }

    #[test]
    fn top_p_outside_zero_one_is_refused_naming_the_key() {
        for bad in [0.0, -0.5, 1.5, f32::NAN] {
            let opts = SampleOptions {
                n_per_input: 1,
                temperature: 1.0,
                top_k: 0,
                top_p: bad,
                bad_endings: BadEndings::none(),
                max_len: 4,
            };
            let err = Sampler::new(&opts, 1, &mut CaprlRng::new(1)).err().unwrap();
            assert!(err.to_string().contains("decode.top_p"), "{err}");
        }
    }
}
