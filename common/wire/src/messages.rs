//! The messages actors, reward workers and the learner exchange. Plain ids,
//! tokens and floats only: no tensors cross the wire.

use serde::{Deserialize, Serialize};

use super::ids::{DataFingerprint, PolicyVersion, TaskId};
use crate::check::{fails, Check};

/// The distribution a sample is drawn from: `softmax(logit / temperature)` over the `top_k`
/// likeliest words (0 = every word), then over their nucleus of mass `top_p` (1 = all of them).
/// `[decode]` gives it, the learner puts it in every task, the actor's sampler draws from it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Sampling {
    /// `T > 0`.
    pub temperature: f32,
    /// 0 = off.
    pub top_k: u32,
    /// In (0, 1]; 1 = off.
    pub top_p: f32,
}

impl Default for Sampling {
    /// The policy's own distribution: temperature 1, no truncation.
    fn default() -> Self {
        Sampling {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
        }
    }
}

impl Sampling {
    /// The rule for each value, under its `[decode]` key.
    #[rustfmt::skip]
    pub const CHECKS: &'static [Check<Sampling>] = &[
        Check { key: "decode.temperature", allowed: "a finite number > 0", violation: |s| fails(s.temperature, |x| x > 0.0 && x.is_finite()) },
        Check { key: "decode.top_p", allowed: "(0, 1] (1 = no nucleus truncation)", violation: |s| fails(s.top_p, |x| x > 0.0 && x <= 1.0) },
    ];
}

/// Learner → actors: decode these images with the given settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RolloutTask {
    pub task_id: TaskId,
    /// The learner's data set: an actor on another one refuses the task.
    pub data: DataFingerprint,
    /// The policy the learner wants used.
    pub policy_version: PolicyVersion,
    /// Actors holding an older policy must refresh before running the task.
    pub min_version: PolicyVersion,
    /// Rows of the training split to caption.
    pub image_rows: Vec<u32>,
    /// Multinomial samples per image.
    pub samples: u32,
    /// What they are drawn from.
    pub sampling: Sampling,
    /// Forbid EOS right after a bad-ending word (`decode.remove_bad_endings`) in every decode;
    /// each actor finds those words' ids in its own vocabulary.
    pub remove_bad_endings: bool,
    /// Also run a greedy decode (the SCST baseline).
    pub greedy: bool,
    /// Beam width for beam decodes; 0 = no beam decode.
    pub beam: u32,
    /// Groups of diverse beam search for beam decodes, dividing `beam`; 1 = plain beam search.
    pub beam_groups: u32,
    /// Weight λ of the diversity penalty between beam groups.
    pub diversity_lambda: f32,
    /// Seed of this task's sampling stream.
    pub seed: u64,
    /// Send the ground-truth captions along as trajectories (WTF-RL).
    pub ground_truth: bool,
    /// Monte-Carlo completions per prefix of every sample (mc-pg, paper 003); 0 = none.
    pub mc_rollouts: u32,
}

impl RolloutTask {
    /// Task `task_id` on data set `data` for policy `version` (no older one accepted): `samples` samples of each
    /// of `image_rows` with the default sampling, from the stream `seed`, and nothing else.
    pub fn samples(
        data: DataFingerprint,
        task_id: TaskId,
        version: PolicyVersion,
        image_rows: Vec<u32>,
        samples: u32,
        seed: u64,
    ) -> Self {
        Self {
            task_id,
            data,
            policy_version: version,
            min_version: version,
            image_rows,
            samples,
            sampling: Sampling::default(),
            remove_bad_endings: false,
            greedy: false,
            beam: 0,
            beam_groups: 1,
            diversity_lambda: 0.0,
            seed,
            ground_truth: false,
            mc_rollouts: 0,
        }
    }
}

/// How a sequence was produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DecodeKind {
    Sample,
    Greedy,
    Beam,
    GroundTruth,
    /// A Monte-Carlo completion of the first `prefix_len` tokens of the sampled sequence at
    /// index `sample` of the same rollout (mc-pg's estimate of `Q(s_t, w_t)`, paper 003).
    Completion {
        sample: u32,
        prefix_len: u32,
    },
}

/// One caption of one image, with the behaviour policy's per-token log-probs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sequence {
    pub image_row: u32,
    pub kind: DecodeKind,
    /// Token ids, EOS included, BOS excluded.
    pub tokens: Vec<u32>,
    /// `log μ(w_t | w_<t)` for each token (empty for ground truth).
    pub logprobs: Vec<f32>,
}

/// Actor → reward workers: the decodes of one task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rollout {
    pub task_id: TaskId,
    /// The task's data set, which the actor checked against its own: a reward worker on
    /// another one refuses the rollout.
    pub data: DataFingerprint,
    /// The policy that produced the sequences.
    pub policy_version: PolicyVersion,
    pub actor_id: String,
    pub sequences: Vec<Sequence>,
    pub decode_seconds: f32,
}

/// The reward of one sequence: the weighted total and each named component.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RewardVector {
    pub total: f32,
    pub components: Vec<(String, f32)>,
}

/// Reward workers → learner: a rollout with one reward per sequence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScoredRollout {
    pub rollout: Rollout,
    /// `rewards[i]` belongs to `rollout.sequences[i]`.
    pub rewards: Vec<RewardVector>,
}

/// Liveness signal from any process.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Heartbeat {
    /// `actor`, `reward-worker` or `learner`.
    pub role: String,
    pub id: String,
    pub policy_version: PolicyVersion,
    pub unix_ms: u64,
    /// The data set the process opened.
    pub data: DataFingerprint,
    /// Why the process cannot do its work right now, in words for the operator (another data
    /// set than the run's, a rollout too large for a message, ...); `None` while it can. The
    /// learner reports it while it waits, and `caprl status` shows it.
    pub problem: Option<String>,
}
