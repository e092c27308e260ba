//! Rollouts the reward benchmarks score: each image's references standing in for decodes.

use caprl_data::{Dataset, Item};
use caprl_wire::{DecodeKind, PolicyVersion, Rollout, Sequence, TaskId};

/// Rollout `id` of the images of `chunk`: per image one caption of each of `kinds`, the k-th its
/// k-th reference (cut at 16 words; a caption as long and as worded as a trained model's).
pub fn of_references(data: &Dataset, chunk: &[Item], kinds: &[DecodeKind], id: u64) -> Rollout {
    let mut sequences = Vec::new();
    for it in chunk {
        let refs = it.targets(&data.vocab, 16);
        for (k, &kind) in kinds.iter().enumerate() {
            let tokens = refs[k % refs.len()].clone();
            sequences.push(Sequence {
                image_row: it.row as u32,
                kind,
                logprobs: vec![-1.0; tokens.len()],
                tokens,
            });
        }
    }
    Rollout {
        task_id: TaskId(id),
        data: Default::default(),
        policy_version: PolicyVersion(0),
        actor_id: "bench".into(),
        sequences,
        decode_seconds: 0.0,
    }
}
