//! Turning one rollout task into decoded captions.
//!
//! The sampling RNG is seeded from the task's own seed, which the learner
//! derives from (run seed, task id): whichever actor runs a task produces the
//! same samples, so results do not depend on scheduling.

use std::time::Instant;

use caprl_common::telemetry::metrics as tm;
use caprl_data::Dataset;
use caprl_model::model::{
    inputs_for_rows, BadEndings, BeamOptions, CaprlRng, Decoder, ModelError, SampleOptions, EOS,
};
use caprl_wire::{DecodeKind, Rollout, RolloutTask, Sequence};

/// Runs every decode the task asks for on `policy` (a snapshot of version
/// `task.policy_version` or newer, prepared for decoding once per snapshot).
pub fn rollout(
    policy: &Decoder,
    policy_version: caprl_wire::PolicyVersion,
    data: &Dataset,
    task: &RolloutTask,
    actor_id: &str,
) -> Result<Rollout, ModelError> {
    let started = Instant::now();
    let cfg = policy.config();
    let rows: Vec<usize> = task.image_rows.iter().map(|&r| r as usize).collect();
    let x = inputs_for_rows(data, &rows, cfg, policy.device())?;
    let bad_endings = task_bad_endings(data, task);
    let mut sequences = Vec::new();
    if task.samples > 0 {
        let mut rng = CaprlRng::new(task.seed);
        let d = policy.sample(
            &x,
            &SampleOptions {
                n_per_input: task.samples as usize,
                sampling: task.sampling,
                bad_endings: bad_endings.clone(),
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
        if task.mc_rollouts > 0 {
            let completions = mc_completions(policy, &x, task, &bad_endings, &sequences)?;
            sequences.extend(completions);
        }
    }
    if task.greedy {
        let d = policy.greedy_avoiding(&x, cfg.max_len, &bad_endings)?;
        for (i, (tokens, logprobs)) in d.tokens.into_iter().zip(d.logprobs).enumerate() {
            sequences.push(Sequence {
                image_row: task.image_rows[i],
                kind: DecodeKind::Greedy,
                tokens,
                logprobs,
            });
        }
    }
    if task.beam > 0 {
        let beams = policy.beam(
            &x,
            &BeamOptions {
                width: task.beam as usize,
                max_len: cfg.max_len,
                length_norm: false,
                block_trigrams: false,
                groups: task.beam_groups as usize,
                diversity_lambda: task.diversity_lambda,
                bad_endings,
            },
        )?;
        // Paper 004's x^bs: the best beam of each image.
        for (i, hyps) in beams.into_iter().enumerate() {
            if let Some(h) = hyps.into_iter().next() {
                sequences.push(Sequence {
                    image_row: task.image_rows[i],
                    kind: DecodeKind::Beam,
                    tokens: h.tokens,
                    logprobs: h.logprobs,
                });
            }
        }
    }
    if task.ground_truth {
        sequences.extend(ground_truth(data, task, cfg.max_len)?);
    }
    Ok(Rollout {
        task_id: task.task_id,
        data: task.data.clone(),
        policy_version,
        actor_id: actor_id.to_string(),
        sequences,
        decode_seconds: started.elapsed().as_secs_f32(),
    })
}

/// The words after which the task forbids EOS, as ids of this actor's vocabulary.
fn task_bad_endings(data: &Dataset, task: &RolloutTask) -> BadEndings {
    if task.remove_bad_endings {
        BadEndings::from_vocab(&data.vocab)
    } else {
        BadEndings::none()
    }
}

/// mc-pg's Monte-Carlo rollouts (paper 003): `task.mc_rollouts` sampled completions of every
/// proper prefix `w_1..w_t` (`t < |w|`) of every sampled sequence, in one batched decode. Their
/// mean reward estimates `Q(s_t, w_t)`; the full sample's own reward is `Q` of its last step.
/// The completions draw from a stream of their own, so the samples do not depend on `K`.
fn mc_completions(
    policy: &Decoder,
    x: &caprl_model::model::Inputs,
    task: &RolloutTask,
    bad_endings: &BadEndings,
    samples: &[Sequence],
) -> Result<Vec<Sequence>, ModelError> {
    let started = Instant::now();
    let k = task.mc_rollouts as usize;
    let per_image = task.samples.max(1) as usize;
    let mut rows = Vec::new();
    let mut prefixes = Vec::new();
    let mut origin = Vec::new();
    for (si, seq) in samples.iter().enumerate() {
        for t in 1..seq.tokens.len() {
            if seq.tokens[t - 1] == EOS {
                break;
            }
            rows.push(si / per_image);
            prefixes.push(seq.tokens[..t].to_vec());
            origin.push((si, t));
        }
    }
    if prefixes.is_empty() {
        return Ok(Vec::new());
    }
    let xs = x.select_rows(&rows)?;
    let mut rng = CaprlRng::with_stream(task.seed, MC_STREAM);
    let d = policy.complete_from_prefix(
        &xs,
        &prefixes,
        &SampleOptions {
            n_per_input: k,
            sampling: task.sampling,
            bad_endings: bad_endings.clone(),
            max_len: policy.config().max_len,
        },
        &mut rng,
    )?;
    let out: Vec<Sequence> = d
        .tokens
        .into_iter()
        .zip(d.logprobs)
        .enumerate()
        .map(|(j, (tokens, logprobs))| {
            let (si, t) = origin[j / k];
            Sequence {
                image_row: samples[si].image_row,
                kind: DecodeKind::Completion {
                    sample: si as u32,
                    prefix_len: t as u32,
                },
                tokens,
                logprobs,
            }
        })
        .collect();
    tm::count_mc_completions(out.len() as u64, started.elapsed());
    Ok(out)
}

/// One reference of each image as a ground-truth trajectory (paper 004's `x^gt`: a batch of
/// GT caption–image pairs), the reference drawn from the task seed so that any actor sends
/// the same one.
fn ground_truth(
    data: &Dataset,
    task: &RolloutTask,
    max_len: usize,
) -> Result<Vec<Sequence>, ModelError> {
    let mut out = Vec::with_capacity(task.image_rows.len());
    for &row in &task.image_rows {
        let item = data.train.items.iter().find(|it| it.row == row as usize).ok_or_else(|| {
            ModelError::Input(format!(
                "image row {row} is not in the training split (is every role using the same data set?)"
            ))
        })?;
        let refs = item.targets(&data.vocab, max_len);
        if refs.is_empty() {
            continue;
        }
        let mut rng = CaprlRng::with_stream(task.seed ^ u64::from(row), GT_STREAM);
        let pick = (rng.uniform_open() * refs.len() as f64) as usize;
        out.push(Sequence {
            image_row: row,
            kind: DecodeKind::GroundTruth,
            tokens: refs[pick.min(refs.len() - 1)].clone(),
            logprobs: Vec::new(),
        });
    }
    Ok(out)
}

/// RNG stream of the ground-truth picks.
const GT_STREAM: u64 = 0x4754;

/// RNG stream of the Monte-Carlo completions (the samples use stream 0 of the task seed).
const MC_STREAM: u64 = 0x4d43;
