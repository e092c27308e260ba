//! Async mode's off-policy corrections: the importance weight `w` of each caption (or token)
//! an older policy `μ` sampled, in an update of the current policy `π`.
//!
//! With `ρ = π(y)/μ(y) = exp(Σₜ log π(wₜ) − log μ(wₜ))` per caption (`runtime.is_level =
//! "sequence"`, the whole caption one action of SCST's bandit) or `ρₜ = π(wₜ)/μ(wₜ)` per token
//! (`"token"`):
//!
//! - **truncated IS** (`"truncated-is"`): `w = min(ρ, is_clip)`, V-trace's truncation
//!   (Espeholt et al. 2018), verl's and OpenRLHF's "TIS";
//! - **masked IS** (`"masked-is"`): `w = ρ` inside `[is_mask_low, is_mask_high]` and `w = 0`
//!   outside, so a caption (or token) the policies disagree on gets no gradient ("MIS");
//! - `"none"`: `w = 1`.
//!
//! The weight multiplies the sequence's (token's) term of the policy-gradient loss and carries
//! no gradient itself. Captions of the current policy (lag 0) keep `w = 1` exactly, so a sync
//! run, or an async step whose rollouts are all fresh, trains exactly as without correction.
//! `log π` is the update's own forward pass (detached), so the correction costs no extra pass;
//! where the learner computes in a lower precision than the actors, `ρ` also carries that
//! mismatch, which is what these corrections were introduced for.
//!
//! Decoupled PPO ([`crate::trainer::PpoOptions::proximal`]) applies the same weight to
//! `π_old/μ`, with `π_old` the learner's weights at the step's start.

use caprl_common::config::{IsLevel, OffPolicyCorrection, RuntimeConfig};
use caprl_wire::check::{fails, Check};

/// The rules of the corrections' `[runtime]` keys.
#[rustfmt::skip]
pub(crate) const CHECKS: &[Check<RuntimeConfig>] = &[
    Check { key: "runtime.is_clip", allowed: "a finite number > 0", violation: |r| fails(r.is_clip, |x| x > 0.0 && x.is_finite()) },
    Check { key: "runtime.is_mask_low", allowed: "a finite number >= 0", violation: |r| fails(r.is_mask_low, |x| x >= 0.0 && x.is_finite()) },
    Check {
        key: "runtime.is_mask_high",
        allowed: "a finite number > is_mask_low",
        violation: |r| fails(r.is_mask_high, |x| x > r.is_mask_low && x.is_finite()),
    },
];

/// How the weights are computed (from `[runtime]`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Correction {
    pub kind: OffPolicyCorrection,
    pub level: IsLevel,
    /// Truncated IS: the cap `ρ̄` (`runtime.is_clip`).
    pub cap: f32,
    /// Masked IS: the range of kept ratios.
    pub keep: (f32, f32),
}

impl Correction {
    pub fn from_config(runtime: &RuntimeConfig) -> Correction {
        Correction {
            kind: runtime.off_policy_correction,
            level: runtime.is_level,
            cap: runtime.is_clip as f32,
            keep: (runtime.is_mask_low as f32, runtime.is_mask_high as f32),
        }
    }

    /// The weight of one ratio `ρ`, and whether the correction cut it (truncated or masked).
    fn weigh(&self, rho: f32) -> (f32, bool) {
        let rho = if rho.is_nan() { 0.0 } else { rho };
        match self.kind {
            OffPolicyCorrection::TruncatedIs => (rho.min(self.cap), rho > self.cap),
            OffPolicyCorrection::MaskedIs => {
                let kept = rho >= self.keep.0 && rho <= self.keep.1;
                (if kept { rho } else { 0.0 }, !kept)
            }
            OffPolicyCorrection::None => (1.0, false),
        }
    }
}

/// What one step's weights looked like, over the older policies' captions (or their tokens):
/// `run.jsonl`'s `off_policy`, Prometheus `caprl_off_policy{stat}`, TensorBoard `off_policy/*`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct WeightStats {
    /// Captions sampled by an older policy.
    pub stale_sequences: usize,
    /// Mean, smallest and largest weight `w` applied (NaN when nothing was stale).
    pub mean: f64,
    pub min: f64,
    pub max: f64,
    /// Ratios the correction truncated or masked, as a fraction of those weighted.
    pub cut_fraction: f64,
    /// Mean ratio `ρ` before the correction.
    pub ratio_mean: f64,
}

impl WeightStats {
    /// The stats as `run.jsonl` names them.
    pub fn named(&self) -> [(&'static str, f64); 6] {
        [
            ("stale_sequences", self.stale_sequences as f64),
            ("weight_mean", self.mean),
            ("weight_min", self.min),
            ("weight_max", self.max),
            ("cut_fraction", self.cut_fraction),
            ("ratio_mean", self.ratio_mean),
        ]
    }
}

/// The weight of every token of every sequence: `current[i][t]` is `log π` of token `t` of
/// sequence `i` (rows padded past `lens[i]`), `behaviour[i]` its `log μ`, `stale[i]` whether an
/// older policy sampled it. Returns one row of `current`'s width per sequence (1 where fresh,
/// and past the end) and the stats.
pub fn weights(
    correction: Correction,
    current: &[Vec<f32>],
    behaviour: &[Vec<f32>],
    lens: &[usize],
    stale: &[bool],
) -> (Vec<Vec<f32>>, WeightStats) {
    let mut out = Vec::with_capacity(current.len());
    let (mut n, mut sum, mut cut, mut rho_sum) = (0usize, 0.0f64, 0usize, 0.0f64);
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    let mut note = |w: f32, rho: f32, was_cut: bool| {
        n += 1;
        sum += w as f64;
        rho_sum += rho as f64;
        cut += was_cut as usize;
        lo = lo.min(w as f64);
        hi = hi.max(w as f64);
    };
    for i in 0..current.len() {
        let width = current[i].len();
        let mut row = vec![1.0f32; width];
        let len = lens[i].min(width).min(behaviour[i].len());
        if stale[i] {
            let log_ratio = |t: usize| current[i][t] - behaviour[i][t];
            match correction.level {
                IsLevel::Sequence => {
                    let rho = (0..len).map(log_ratio).sum::<f32>().exp();
                    let (w, was_cut) = correction.weigh(rho);
                    row[..len].fill(w);
                    note(w, rho, was_cut);
                }
                IsLevel::Token => {
                    for (t, slot) in row.iter_mut().enumerate().take(len) {
                        let rho = log_ratio(t).exp();
                        let (w, was_cut) = correction.weigh(rho);
                        *slot = w;
                        note(w, rho, was_cut);
                    }
                }
            }
        }
        out.push(row);
    }
    let stale_sequences = stale.iter().filter(|&&s| s).count();
    let stats = if n == 0 {
        WeightStats {
            stale_sequences,
            mean: f64::NAN,
            min: f64::NAN,
            max: f64::NAN,
            cut_fraction: f64::NAN,
            ratio_mean: f64::NAN,
        }
    } else {
        WeightStats {
            stale_sequences,
            mean: sum / n as f64,
            min: lo,
            max: hi,
            cut_fraction: cut as f64 / n as f64,
            ratio_mean: rho_sum / n as f64,
        }
    };
    (out, stats)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `kind` at `level` with the config's defaults: `is_clip` 1, kept ratios `[0.5, 2]`.
    fn correction(kind: OffPolicyCorrection, level: IsLevel) -> Correction {
        Correction::from_config(&caprl_common::config::RuntimeConfig {
            off_policy_correction: kind,
            is_level: level,
            ..Default::default()
        })
    }

    /// Per-token log-probs of the learner and of the behaviour policy, lengths, staleness.
    type Case = (Vec<Vec<f32>>, Vec<Vec<f32>>, Vec<usize>, Vec<bool>);

    /// Sequence 0 is fresh; sequence 1 (2 tokens, a third padded) has log-ratios ln 3 and
    /// −ln 2, so ρ = 1.5 and ρₜ = (3, 0.5); sequence 2 has ρ = e^−2.
    fn case() -> Case {
        let (l3, l2) = (3f32.ln(), 2f32.ln());
        let current = vec![
            vec![-1.0, -1.0, 0.0],
            vec![l3 - 1.0, -l2 - 1.0, 7.0],
            vec![-3.0, 0.0, 0.0],
        ];
        let behaviour = vec![vec![-2.0, -2.0], vec![-1.0, -1.0], vec![-1.0]];
        (current, behaviour, vec![2, 2, 1], vec![false, true, true])
    }

    fn run(kind: OffPolicyCorrection, level: IsLevel) -> (Vec<Vec<f32>>, WeightStats) {
        let (current, behaviour, lens, stale) = case();
        weights(correction(kind, level), &current, &behaviour, &lens, &stale)
    }

    fn close(a: &[Vec<f32>], b: &[Vec<f32>]) -> bool {
        a.iter()
            .flatten()
            .zip(b.iter().flatten())
            .all(|(x, y)| (x - y).abs() < 1e-5)
    }

    #[test]
    fn truncated_is_cuts_ratios_at_the_clip() {
        let (seq, s) = run(OffPolicyCorrection::TruncatedIs, IsLevel::Sequence);
        let e2 = (-2f32).exp();
        // The fresh sequence keeps 1 even where log π ≠ log μ.
        assert!(
            close(
                &seq,
                &[vec![1.0; 3], vec![1.0, 1.0, 1.0], vec![e2, 1.0, 1.0]]
            ),
            "{seq:?}"
        );
        assert_eq!(s.stale_sequences, 2);
        assert!((s.cut_fraction - 0.5).abs() < 1e-9);
        assert!((s.ratio_mean - (1.5 + e2 as f64) / 2.0).abs() < 1e-5);
        let (tok, s) = run(OffPolicyCorrection::TruncatedIs, IsLevel::Token);
        assert!(
            close(
                &tok,
                &[vec![1.0; 3], vec![1.0, 0.5, 1.0], vec![e2, 1.0, 1.0]]
            ),
            "{tok:?}"
        );
        assert!((s.cut_fraction - 1.0 / 3.0).abs() < 1e-9, "{s:?}");
        assert!((s.mean - (1.0 + 0.5 + e2 as f64) / 3.0).abs() < 1e-5);
    }

    #[test]
    fn masked_is_zeroes_ratios_outside_the_range() {
        let (seq, s) = run(OffPolicyCorrection::MaskedIs, IsLevel::Sequence);
        assert!(
            close(
                &seq,
                &[vec![1.0; 3], vec![1.5, 1.5, 1.0], vec![0.0, 1.0, 1.0]]
            ),
            "{seq:?}"
        );
        assert_eq!((s.min, s.max), (0.0, 1.5));
        assert!((s.cut_fraction - 0.5).abs() < 1e-9);
        let (tok, s) = run(OffPolicyCorrection::MaskedIs, IsLevel::Token);
        // ρₜ = 3 is past 2: masked; 0.5 is kept (the range is closed).
        assert!(
            close(
                &tok,
                &[vec![1.0; 3], vec![0.0, 0.5, 1.0], vec![0.0, 1.0, 1.0]]
            ),
            "{tok:?}"
        );
        assert!((s.cut_fraction - 2.0 / 3.0).abs() < 1e-9);
    }

    #[test]
    fn none_and_fresh_batches_weigh_one() {
        let (w, s) = run(OffPolicyCorrection::None, IsLevel::Token);
        assert!(w.iter().flatten().all(|&x| x == 1.0));
        assert_eq!(s.cut_fraction, 0.0);
        let (current, behaviour, lens, _) = case();
        let (w, s) = weights(
            correction(OffPolicyCorrection::TruncatedIs, IsLevel::Sequence),
            &current,
            &behaviour,
            &lens,
            &[false; 3],
        );
        assert!(w.iter().flatten().all(|&x| x == 1.0));
        assert!(s.mean.is_nan() && s.stale_sequences == 0);
    }

    #[test]
    fn a_nan_ratio_weighs_nothing() {
        let c = correction(OffPolicyCorrection::TruncatedIs, IsLevel::Sequence);
        let (w, _) = weights(c, &[vec![f32::NAN]], &[vec![-1.0]], &[1], &[true]);
        assert_eq!(w, vec![vec![0.0]]);
    }
}
