//! The decoding options a rollout task carries (top-p, bad endings, diverse beam groups) reach
//! every decode the actor runs: its sequences are those of the decoder called with them.

mod support;

use caprl_actor::rollout;
use caprl_model::model::{
    inputs_for_rows, BadEndings, BeamOptions, CaprlRng, Device, SampleOptions,
};
use caprl_wire::{DecodeKind, PolicyVersion, RolloutTask, Sampling};

#[test]
fn the_tasks_decoding_options_reach_samples_greedy_and_beam() {
    let tmp = tempfile::tempdir().unwrap();
    let (data, model, rows) = support::tiny_policy(tmp.path(), 4);
    let cfg = model.config().clone();
    let task = RolloutTask {
        samples: 3,
        sampling: Sampling {
            top_p: 0.5,
            ..Sampling::default()
        },
        remove_bad_endings: true,
        greedy: true,
        beam: 4,
        beam_groups: 2,
        diversity_lambda: 0.7,
        ..support::task(5, rows.clone())
    };
    let bad = BadEndings::from_vocab(&data.vocab);
    assert!(
        !bad.is_empty(),
        "the synthetic vocabulary has none of the bad endings"
    );

    let got = rollout(&model, PolicyVersion(0), &data, &task, "a").unwrap();
    let of = |kind: DecodeKind| -> Vec<Vec<u32>> {
        got.sequences
            .iter()
            .filter(|s| s.kind == kind)
            .map(|s| s.tokens.clone())
            .collect()
    };

    let idx: Vec<usize> = rows.iter().map(|&r| r as usize).collect();
    let x = inputs_for_rows(&data, &idx, &cfg, &Device::Cpu).unwrap();
    let sampling = SampleOptions {
        n_per_input: 3,
        sampling: Sampling {
            temperature: 1.0,
            top_k: 0,
            top_p: 0.5,
        },
        bad_endings: bad.clone(),
        max_len: cfg.max_len,
    };
    let samples = model
        .sample(&x, &sampling, &mut CaprlRng::new(task.seed))
        .unwrap();
    assert_eq!(of(DecodeKind::Sample), samples.tokens);
    let plain = SampleOptions {
        sampling: Sampling {
            top_p: 1.0,
            ..Sampling::default()
        },
        bad_endings: BadEndings::none(),
        ..sampling
    };
    let plain = model
        .sample(&x, &plain, &mut CaprlRng::new(task.seed))
        .unwrap();
    assert_ne!(samples.tokens, plain.tokens, "the options changed nothing");

    let greedy = model.greedy_avoiding(&x, cfg.max_len, &bad).unwrap();
    assert_eq!(of(DecodeKind::Greedy), greedy.tokens);

    let beams = model
        .beam(
            &x,
            &BeamOptions {
                width: 4,
                max_len: cfg.max_len,
                length_norm: false,
                block_trigrams: false,
                groups: 2,
                diversity_lambda: 0.7,
                bad_endings: bad,
            },
        )
        .unwrap();
    let best: Vec<Vec<u32>> = beams.iter().map(|h| h[0].tokens.clone()).collect();
    assert_eq!(of(DecodeKind::Beam), best);
}
