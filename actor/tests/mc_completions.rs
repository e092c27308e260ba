//! mc-pg's Monte-Carlo completions: every proper prefix of every sample is continued K times,
//! each completion keeps its prefix, and the samples themselves do not depend on K.

mod support;

use caprl_actor::rollout;
use caprl_model::model::EOS;
use caprl_wire::{DecodeKind, PolicyVersion, RolloutTask};

fn task(rows: Vec<u32>, k: u32) -> RolloutTask {
    RolloutTask {
        mc_rollouts: k,
        ..support::task(3, rows)
    }
}

#[test]
fn every_prefix_of_every_sample_gets_k_completions() {
    let tmp = tempfile::tempdir().unwrap();
    let (data, model, rows) = support::tiny_policy(tmp.path(), 1);
    let cfg = model.config().clone();

    let k = 3;
    let with = rollout(&model, PolicyVersion(0), &data, &task(rows.clone(), k), "a").unwrap();
    let without = rollout(&model, PolicyVersion(0), &data, &task(rows, 0), "a").unwrap();
    let samples: Vec<_> = with
        .sequences
        .iter()
        .filter(|s| s.kind == DecodeKind::Sample)
        .collect();
    assert_eq!(samples.len(), 6);
    assert_eq!(
        samples,
        without.sequences.iter().collect::<Vec<_>>(),
        "the samples do not depend on K"
    );
    let mut expected = 0;
    for s in &samples {
        expected += (1..s.tokens.len())
            .take_while(|&t| s.tokens[t - 1] != EOS)
            .count()
            * k as usize;
    }
    let completions: Vec<_> = with
        .sequences
        .iter()
        .filter_map(|s| match s.kind {
            DecodeKind::Completion { sample, prefix_len } => Some((s, sample, prefix_len)),
            _ => None,
        })
        .collect();
    assert!(expected > 0);
    assert_eq!(completions.len(), expected);
    for (c, sample, t) in completions {
        let parent = &with.sequences[sample as usize];
        assert_eq!(parent.kind, DecodeKind::Sample);
        assert_eq!(c.image_row, parent.image_row);
        let t = t as usize;
        assert!(t >= 1 && t < parent.tokens.len());
        assert_eq!(
            &c.tokens[..t],
            &parent.tokens[..t],
            "a completion keeps its prefix"
        );
        assert_eq!(c.logprobs.len(), c.tokens.len());
        assert!(c.tokens.len() <= cfg.max_len + 1);
    }
}
