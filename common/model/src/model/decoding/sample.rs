//! Multinomial sampling with temperature, optional top-k and optional top-p, by the Gumbel-max
//! trick: `w_t = argmax_{w ∈ S} (logit_w / T + g_w)`, `g_w ~ Gumbel(0, 1)`, which draws from
//! `μ(w) = softmax(logit / T)` renormalised on `S`: the top k logits when `top_k > 0`, then
//! their nucleus of mass `top_p` when `top_p < 1` (see `nucleus`), else every word.
//!
//! Every row has its own ChaCha8 stream (seeded from one draw of the caller's RNG, stream = row),
//! so the same seed and inputs give the same samples on any machine and in any batch layout.
//!
//! Each word takes one uniform number `u` from the stream, but the two logarithms of its Gumbel
//! number `g(u)` are taken only for words that might win ([`gumbel_argmax`]): with `y_lb` the
//! score of the word of the largest logit or of the largest `u` (the winner scores at least
//! that), `x + g(u) < y_lb` exactly when `u < exp(−exp(x − y_lb))`, a test of two polynomial
//! exponentials that runs vectorised over the row. The tokens and log-probs are those of
//! computing every Gumbel number; at a 10,000-word vocabulary the logarithms were most of a
//! sampling step.

use super::bad_endings::BadEndings;
use super::decoder::Decoder;
use super::greedy::argmax;
use super::log_softmax::{host_log_softmax, host_logprob};
use super::nucleus::nucleus;
use super::rollout::{Decoded, Policy};
use crate::model::captioner::Captioner;
use crate::model::device::PARALLEL_MIN_LOGITS;
use crate::model::error::{ModelError, Result};
use crate::model::inputs::Inputs;
use crate::model::rng::CaprlRng;
use caprl_kernels::fastmath::exp_f32;
use caprl_wire::check::first_violation;
use caprl_wire::Sampling;

/// How to sample.
#[derive(Debug, Clone, PartialEq)]
pub struct SampleOptions {
    /// Samples per input image (rows `i*n .. i*n+n` of the result belong to image `i`).
    pub n_per_input: usize,
    /// Temperature, top-k and nucleus mass.
    pub sampling: Sampling,
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
        let s = &opts.sampling;
        if let Some(v) = first_violation(Sampling::CHECKS, s) {
            return Err(ModelError::Input(format!(
                "{} = {}: expected {}",
                v.key, v.value, v.allowed
            )));
        }
        Ok(Self {
            inv_temp: 1.0 / s.temperature as f64,
            top_k: s.top_k as usize,
            top_p: s.top_p as f64,
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
        let xs: Vec<f32> = match &support {
            None => Vec::new(),
            Some(s) => s.iter().map(|&i| logits[i]).collect(),
        };
        let xs = if support.is_some() { &xs[..] } else { logits };
        let mut us = vec![0f64; xs.len()];
        rng.fill_uniform_open(&mut us);
        let k = gumbel_argmax(xs, &us, self.inv_temp);
        let w = support.as_ref().map_or(k, |s| s[k]);
        (w as u32, self.log_mu(logits, &support, w))
    }
}

/// Standard Gumbel noise of `u ~ U(0, 1)`: `g = −ln(−ln u)`.
fn gumbel(u: f64) -> f64 {
    -(-u.ln()).ln()
}

/// `argmax_i (x_i / T + g(u_i))`, the first index on ties, computing `g` only where it may
/// win (see the module docs).
fn gumbel_argmax(xs: &[f32], us: &[f64], inv_temp: f64) -> usize {
    if xs.is_empty() {
        return 0;
    }
    let score = |i: usize| xs[i] as f64 * inv_temp + gumbel(us[i]);
    let by_logit = argmax(xs);
    let by_noise = argmax(us);
    let floor = score(by_logit).max(score(by_noise));
    let may_win = may_win(xs, us, inv_temp, floor);
    let mut best = (0usize, f64::NEG_INFINITY);
    for (i, _) in may_win.iter().enumerate().filter(|(_, &m)| m) {
        let y = score(i);
        if y > best.1 {
            best = (i, y);
        }
    }
    best.0
}

/// Per word, whether `x / T + g(u) ≥ floor` is possible: `false` only where `u` lies below a
/// bound a little under `exp(−exp(x / T − floor))` (room for the f32 polynomials and the
/// rounding of the exact comparison), so such a word scores below `floor`.
fn may_win(xs: &[f32], us: &[f64], inv_temp: f64, floor: f64) -> Vec<bool> {
    caprl_kernels::fastmath::vectorised!(may_win_plain(xs, us, inv_temp, floor))
}

#[inline(always)]
fn may_win_plain(xs: &[f32], us: &[f64], inv_temp: f64, floor: f64) -> Vec<bool> {
    // In f32: the rounding of `d` (at most a few 1e-7 of |x / T| + |floor|)
    // goes into the margin on e^d, with the polynomial's 2e-7 and 1e-5 to spare; exp(−e^d) is
    // then lowered by 1e-5, far more than the rounding of `u` to f32 and of the exact scores.
    let (inv, fl) = (inv_temp as f32, floor as f32);
    let slack = 1e-6 * fl.abs();
    let one = |x: f32, u: f32| -> bool {
        let xi = x * inv;
        let d = xi - fl;
        let margin = 1.0 + 1e-5 + 1e-6 * xi.abs() + slack + 1e-7 * d.abs();
        let e = exp_f32(d.clamp(-80.0, 4.0)) * margin;
        let bound = exp_f32(-e) * (1.0 - 1e-5);
        // No bound above d = 4 (or for NaN): the word may win.
        !((d < 4.0) & (u < bound))
    };
    let n = xs.len();
    // `u` in f32 first: a loop that mixed f64 inputs with the f32 polynomials would run as
    // many lanes as f64 fills.
    let us: Vec<f32> = us[..n].iter().map(|&u| u as f32).collect();
    let mut out = vec![true; n];
    // Fixed chunks without bounds checks, so that the loop vectorises.
    let mut o = out.chunks_exact_mut(LANES);
    for ((o, x), u) in (&mut o)
        .zip(xs.chunks_exact(LANES))
        .zip(us.chunks_exact(LANES))
    {
        for k in 0..LANES {
            o[k] = one(x[k], u[k]);
        }
    }
    let done = n / LANES * LANES;
    for (k, o) in o.into_remainder().iter_mut().enumerate() {
        *o = one(xs[done + k], us[done + k]);
    }
    out
}

/// Words per step of [`may_win_plain`]'s loop.
const LANES: usize = 16;

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

impl Captioner {
    /// [`Decoder::sample`] on weights prepared for this call.
    pub fn sample(&self, x: &Inputs, opts: &SampleOptions, rng: &mut CaprlRng) -> Result<Decoded> {
        self.decoder()?.sample(x, opts, rng)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sampler(temperature: f32, top_k: u32, top_p: f32) -> Sampler {
        let opts = SampleOptions {
            n_per_input: 1,
            sampling: Sampling {
                temperature,
                top_k,
                top_p,
            },
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
    fn the_filtered_gumbel_argmax_is_the_plain_one() {
        let mut rng = CaprlRng::new(5);
        for case in 0..400 {
            let n = 1 + case % 37 * 50;
            let spread = [0.01, 1.0, 8.0, 40.0][case % 4];
            let mut xs: Vec<f32> = (0..n)
                .map(|_| ((rng.uniform_open() - 0.5) * spread) as f32)
                .collect();
            if case % 5 == 0 {
                xs[n / 2] = f32::NEG_INFINITY;
            }
            let us: Vec<f64> = (0..n).map(|_| rng.uniform_open()).collect();
            for inv_temp in [1.0, 0.5, 3.0] {
                let mut plain = (0, f64::NEG_INFINITY);
                for (i, (&x, &u)) in xs.iter().zip(&us).enumerate() {
                    let y = x as f64 * inv_temp + gumbel(u);
                    if y > plain.1 {
                        plain = (i, y);
                    }
                }
                assert_eq!(gumbel_argmax(&xs, &us, inv_temp), plain.0, "case {case}");
            }
        }
    }

    #[test]
    fn top_p_outside_zero_one_is_refused_naming_the_key() {
        for bad in [0.0, -0.5, 1.5, f32::NAN] {
            let opts = SampleOptions {
                n_per_input: 1,
                sampling: Sampling {
                    top_p: bad,
                    ..Sampling::default()
                },
                bad_endings: BadEndings::none(),
                max_len: 4,
            };
            let err = Sampler::new(&opts, 1, &mut CaprlRng::new(1)).err().unwrap();
            assert!(err.to_string().contains("decode.top_p"), "{err}");
        }
    }
}
