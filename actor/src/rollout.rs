//! Turning one rollout task into decoded captions.
//!
//! The sampling RNG is seeded from the task's own seed, which the learner
//! derives from (run seed, task id): whichever actor runs a task produces the
//! same samples, so results do not depend on scheduling.

use std::time::Instant;

use caprl_common::data::Dataset;
use caprl_common::model::{inputs_for_rows, CaprlRng, Captioner, ModelError, SampleOptions};
use caprl_common::wire::{DecodeKind, Rollout, RolloutTask, Sequence};

/// Runs every decode the task asks for on `policy` (a snapshot of version
/// `task.policy_version` or newer).
pub fn rollout(
    policy: &Captioner,
    policy_version: caprl_common::wire::PolicyVersion,
    data: &Dataset,
    task: &RolloutTask,
    actor_id: &str,
) -> Result<Rollout, ModelError> {
    let started = Instant::now();
    let cfg = policy.config();
    let rows: Vec<usize> = task.image_rows.iter().map(|&r| r as usize).collect();
    let x = inputs_for_rows(data, &rows, cfg, policy.device())?;
    let mut sequences = Vec::new();
    if task.samples > 0 {
        let mut rng = CaprlRng::new(task.seed);
        let d = policy.sample(
            &x,
            &SampleOptions {
                n_per_input: task.samples as usize,
                temperature: task.temperature,
                top_k: task.top_k as usize,
                max_len: cfg.max_len,
            },
            &mut rng,
        )?;
        let n = task.samples as usize;
        for (i, (tokens, logprobs)) in d.tokens.into_iter().zip(d.logprobs).enumerate() {
            sequences.push(Sequence {
                image_row: task.image_rows[i / n],
                kind: DecodeKind::Sample,
                tokens,
                logprobs,
            });
        }
    }
    if task.greedy {
        let d = policy.greedy(&x, cfg.max_len)?;
        for (i, (tokens, logprobs)) in d.tokens.into_iter().zip(d.logprobs).enumerate() {
            sequences.push(Sequence {
                image_row: task.image_rows[i],
                kind: DecodeKind::Greedy,
                tokens,
                logprobs,
            });
        }
    }
    Ok(Rollout {
        task_id: task.task_id,
        policy_version,
        actor_id: actor_id.to_string(),
        sequences,
        decode_seconds: started.elapsed().as_secs_f32(),
    })
}
