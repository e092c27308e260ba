//! Multinomial sampling with temperature and optional top-k, by the Gumbel-max trick:
//! `w_t = argmax_w (logit_w / T + g_w)`, `g_w ~ Gumbel(0, 1)`, which draws from
//! `μ(w) = softmax(logit / T)` restricted to the top k logits when `top_k > 0`.
//!
//! Every row has its own ChaCha8 stream (seeded from one draw of the caller's RNG, stream = row),
//! so the same seed and inputs give the same samples on any machine and in any batch layout.

use super::decoder::Decoder;
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
    /// Maximum words (plus EOS).
    pub max_len: usize,
}

pub(crate) struct Sampler {
    inv_temp: f64,
    top_k: usize,
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
        Ok(Self {
            inv_temp: 1.0 / opts.temperature as f64,
            top_k: opts.top_k,
            seed: rng.next_u64(),
            rngs: vec![None; rows],
        })
    }

    /// Indices the distribution is restricted to: all, or the top k (ties by lower id).
    fn support(&self, logits: &[f32]) -> Option<Vec<usize>> {
        if self.top_k == 0 || self.top_k >= logits.len() {
            return None;
        }
        let mut idx: Vec<usize> = (0..logits.len()).collect();
        let cmp = |a: &usize, b: &usize| logits[*b].total_cmp(&logits[*a]).then(a.cmp(b));
        idx.select_nth_unstable_by(self.top_k - 1, cmp);
        idx.truncate(self.top_k);
        idx.sort_unstable();
        Some(idx)
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
    /// Log-probs are those of the sampling distribution μ (tempered, top-k restricted).
    pub fn sample(&self, x: &Inputs, opts: &SampleOptions, rng: &mut CaprlRng) -> Result<Decoded> {
        let xs = x.repeat_each(opts.n_per_input.max(1))?;
        let mut s = Sampler::new(opts, xs.batch_size()?, rng)?;
        self.rollout(&xs, None, opts.max_len, &mut s)
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
        self.rollout(&xs, Some(&pre), opts.max_len, &mut s)
    }
}
