//! Whether the largest result a task can produce fits a message (`nats.max_message_bytes`),
//! checked before training starts: a rollout that does not fit is dropped by the actor, and
//! the learner would wait for it in vain.

use caprl_wire::{
    DataFingerprint, DecodeKind, PolicyVersion, RewardVector, Rollout, ScoredRollout, Sequence,
    TaskId,
};

use super::Driver;
use crate::LearnerError;

/// The longest actor id the bound allows for (`<hostname>-<pid>` is shorter).
const ACTOR_ID_BYTES: usize = 64;

impl Driver {
    /// Refuses a run whose largest scored rollout (every decode of `runtime.images_per_task`
    /// images at `max_len` words, tokens up to `vocab_len`, a reward per named `components`)
    /// is over `nats.max_message_bytes`, saying how large it can be.
    pub fn check_messages_fit(
        &self,
        max_len: usize,
        vocab_len: usize,
        components: &[String],
    ) -> Result<(), LearnerError> {
        let scored = self.largest_scored(max_len, vocab_len, components);
        let bytes = caprl_wire::encode(&scored, caprl_wire::HARD_MAX_MESSAGE_BYTES * 64)
            .map_or(usize::MAX, |b| b.len());
        let limit = self.opts.max_message_bytes;
        if bytes <= limit {
            return Ok(());
        }
        Err(LearnerError::Misconfigured(format!(
            "a task's scored rollout ({} images, {} captions of up to {max_len} words each) can \
             take {bytes} bytes, over nats.max_message_bytes = {limit}: raise \
             nats.max_message_bytes to at least {bytes}, or lower runtime.images_per_task or \
             data.max_len",
            self.opts.images_per_task,
            scored.rewards.len()
        )))
    }

    /// The largest scored rollout one task can give: every sequence the objective's decodes
    /// make, each at its longest with the largest token ids and row numbers.
    fn largest_scored(
        &self,
        max_len: usize,
        vocab_len: usize,
        components: &[String],
    ) -> ScoredRollout {
        let d = &self.opts.decodes;
        let len = max_len + 1;
        let sequence = |kind| Sequence {
            image_row: u32::MAX,
            kind,
            tokens: vec![vocab_len.saturating_sub(1) as u32; len],
            logprobs: vec![-1.0; len],
        };
        let mut per_image = vec![sequence(DecodeKind::Sample); d.samples as usize];
        let completion = DecodeKind::Completion {
            sample: d.samples,
            prefix_len: len as u32,
        };
        let completions = d.samples as usize * d.mc_rollouts as usize * max_len;
        per_image.extend(std::iter::repeat_n(sequence(completion), completions));
        per_image.extend(d.greedy.then(|| sequence(DecodeKind::Greedy)));
        per_image.extend((d.beam > 0).then(|| sequence(DecodeKind::Beam)));
        per_image.extend(d.ground_truth.then(|| sequence(DecodeKind::GroundTruth)));
        let sequences: Vec<Sequence> = (0..self.opts.images_per_task.max(1))
            .flat_map(|_| per_image.iter().cloned())
            .collect();
        let reward = RewardVector {
            total: 1.0,
            components: components.iter().map(|c| (c.clone(), 1.0)).collect(),
        };
        ScoredRollout {
            rewards: vec![reward; sequences.len()],
            rollout: Rollout {
                task_id: TaskId(u64::MAX),
                data: DataFingerprint("f".repeat(16)),
                policy_version: PolicyVersion(u64::MAX),
                actor_id: "a".repeat(ACTOR_ID_BYTES),
                sequences,
                decode_seconds: 1.0,
            },
        }
    }
}
