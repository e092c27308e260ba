//! The policy-gradient targets of one step: the sequences a step trains on, in task-id order,
//! with their multipliers (or per-token value targets) and what the run log reports about them.
//!
//! Objectives build a [`PgBatch`] with one of the two walks here: [`per_image_samples`] (the
//! sampled captions of each image, with the greedy caption's reward and the Monte-Carlo
//! completions at hand: SCST, SLE, mc-pg, actor-critic) or [`reward_weighted`] (chosen decode
//! kinds weighted by their own reward: WTF, WTF-RL).

use std::collections::BTreeMap;

use caprl_wire::{DecodeKind, ScoredRollout};

use crate::pg::LossNorm;
use crate::LearnerError;

/// Sequences of the step's scored rollouts with their multipliers.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PgBatch {
    pub rows: Vec<usize>,
    pub seqs: Vec<Vec<u32>>,
    /// The multiplier of each sequence's `log p` (an advantage, or SLE's combined term).
    pub multipliers: Vec<f32>,
    /// Per-token value targets (mc-pg's `Q` estimates, actor-critic's returns); empty for
    /// objectives without a value head.
    pub values: Vec<Vec<f32>>,
    /// `log μ(wₜ)` of each token of each sequence under the policy that decoded it (empty for
    /// ground truth).
    pub behaviour: Vec<Vec<f32>>,
    /// How the step's loss averages its token terms (set by the advantage estimator).
    pub norm: LossNorm,
    /// Policy lag of the rollout each sequence came from (0 for off-policy ground truth).
    pub lags: Vec<u64>,
    pub mean_reward: f64,
    /// Mean of each reward component over the trained sequences.
    pub components: BTreeMap<String, f64>,
}

/// The sums [`PgBatch::mean_reward`] and [`PgBatch::components`] are the means of.
#[derive(Default)]
struct Totals {
    reward: f64,
    components: BTreeMap<String, f64>,
}

impl Totals {
    fn add_components(&mut self, components: &[(String, f32)]) {
        for (name, v) in components {
            *self.components.entry(name.clone()).or_default() += *v as f64;
        }
    }

    fn finish(self, mut out: PgBatch) -> PgBatch {
        let n = out.seqs.len().max(1) as f64;
        out.mean_reward = self.reward / n;
        out.components = self
            .components
            .into_iter()
            .map(|(k, v)| (k, v / n))
            .collect();
        out
    }
}

/// The scored samples of one image of one rollout, with what baselines and value targets read.
pub struct ImageSamples<'a> {
    scored: &'a ScoredRollout,
    /// Indices of the samples in the rollout's sequences.
    idx: &'a [usize],
    /// The total reward of each sample.
    pub rewards: Vec<f32>,
    /// The reward of the image's greedy caption, when actors decoded one.
    pub greedy: Option<f32>,
    completions: &'a BTreeMap<usize, Vec<(usize, f32)>>,
}

impl ImageSamples<'_> {
    /// Reward component `name` of each sample (0 where the reward worker sent none).
    pub fn component(&self, name: &str) -> Vec<f32> {
        self.idx
            .iter()
            .map(|&i| {
                self.scored.rewards[i]
                    .components
                    .iter()
                    .find(|(n, _)| n == name)
                    .map(|(_, v)| *v)
                    .unwrap_or(0.0)
            })
            .collect()
    }

    /// The number of tokens of sample `k` (EOS included).
    pub fn len(&self, k: usize) -> usize {
        self.scored.rollout.sequences[self.idx[k]].tokens.len()
    }

    /// The scored Monte-Carlo completions `(prefix_len, reward)` of sample `k` (mc-pg).
    pub fn completions(&self, k: usize) -> &[(usize, f32)] {
        self.completions
            .get(&self.idx[k])
            .map_or(&[][..], Vec::as_slice)
    }
}

/// The per-token value targets of sample `k` of a group.
pub type ValueTargets<'f> = &'f dyn Fn(&ImageSamples, usize) -> Vec<f32>;

/// The sampled captions of every image, grouped per image in row order within each rollout.
/// `multipliers` gives each group's multipliers; `values`, when given, the per-token value
/// targets of sample `k` of a group.
pub fn per_image_samples(
    scored: &[ScoredRollout],
    version: u64,
    multipliers: impl Fn(&ImageSamples) -> Result<Vec<f32>, LearnerError>,
    values: Option<ValueTargets>,
) -> Result<PgBatch, LearnerError> {
    let mut out = PgBatch::default();
    let mut totals = Totals::default();
    for one in scored {
        let lag = version.saturating_sub(one.rollout.policy_version.0);
        let mut greedy: BTreeMap<u32, f32> = BTreeMap::new();
        let mut samples: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
        let mut completions: BTreeMap<usize, Vec<(usize, f32)>> = BTreeMap::new();
        for (i, s) in one.rollout.sequences.iter().enumerate() {
            match s.kind {
                DecodeKind::Greedy => {
                    greedy.insert(s.image_row, one.rewards[i].total);
                }
                DecodeKind::Sample => samples.entry(s.image_row).or_default().push(i),
                DecodeKind::Completion { sample, prefix_len } => completions
                    .entry(sample as usize)
                    .or_default()
                    .push((prefix_len as usize, one.rewards[i].total)),
                _ => {}
            }
        }
        for (row, idx) in &samples {
            let group = ImageSamples {
                scored: one,
                idx,
                rewards: idx.iter().map(|&i| one.rewards[i].total).collect(),
                greedy: greedy.get(row).copied(),
                completions: &completions,
            };
            totals.reward += group.rewards.iter().map(|&r| r as f64).sum::<f64>();
            for &i in idx {
                totals.add_components(&one.rewards[i].components);
            }
            let m = multipliers(&group)?;
            for (k, (&i, m)) in idx.iter().zip(m).enumerate() {
                let s = &one.rollout.sequences[i];
                out.values
                    .push(values.map_or_else(Vec::new, |v| v(&group, k)));
                out.rows.push(*row as usize);
                out.seqs.push(s.tokens.clone());
                out.multipliers.push(m);
                out.behaviour.push(s.logprobs.clone());
                out.lags.push(lag);
            }
        }
    }
    Ok(totals.finish(out))
}

/// Every sequence whose kind `trains_on` accepts, with its own total reward as multiplier.
/// Ground truth is off-policy by design (paper 004, eq. 3): its lag is 0, so it gets no
/// importance ratio.
pub fn reward_weighted(
    scored: &[ScoredRollout],
    version: u64,
    trains_on: impl Fn(DecodeKind) -> bool,
) -> PgBatch {
    let mut out = PgBatch::default();
    let mut totals = Totals::default();
    for one in scored {
        let lag = version.saturating_sub(one.rollout.policy_version.0);
        for (i, s) in one.rollout.sequences.iter().enumerate() {
            if !trains_on(s.kind) {
                continue;
            }
            let r = &one.rewards[i];
            totals.reward += r.total as f64;
            totals.add_components(&r.components);
            out.rows.push(s.image_row as usize);
            out.seqs.push(s.tokens.clone());
            out.multipliers.push(r.total);
            out.values.push(Vec::new());
            out.behaviour.push(s.logprobs.clone());
            out.lags.push(match s.kind {
                DecodeKind::GroundTruth => 0,
                _ => lag,
            });
        }
    }
    totals.finish(out)
}
