//! `reward.df = "corpus"`: the CIDEr-D reward counts its document frequencies over the
//! references of the rollout's images, as self-critical.pytorch's `CiderD(df="corpus")` counts
//! them over the batch it is given; `"train"` over the whole training split. The two give other
//! rewards, and the corpus one equals CIDEr-D computed by hand with that df.

mod support;

use caprl_common::config::RewardSpec;
use caprl_model::model::EOS;
use caprl_reward_worker::Rewarder;
use caprl_score::{with_eos, CiderD, DocFreq, Interner};
use caprl_wire::{DecodeKind, PolicyVersion, Rollout, Sequence, TaskId};
use support::dataset;

#[test]
fn corpus_df_counts_over_the_rollouts_images_and_changes_the_reward() {
    let tmp = tempfile::tempdir().unwrap();
    let data = dataset(&tmp.path().join("synth"), 7, 60);
    let items = &data.train.items;
    let mut interner = Interner::with_words(data.vocab.words());
    let refs: Vec<Vec<Vec<u32>>> = items[..3]
        .iter()
        .map(|it| interner.intern_refs(&it.refs))
        .collect();
    // Each image's first reference, and the second image's first reference for the third
    // image: captions that share n-grams with the corpus to a different degree.
    let captions = [&refs[0][0], &refs[1][0], &refs[1][0]];
    let sequences: Vec<Sequence> = items[..3]
        .iter()
        .zip(captions)
        .map(|(it, words)| Sequence {
            image_row: it.row as u32,
            kind: DecodeKind::Sample,
            tokens: words.iter().copied().chain([EOS]).collect(),
            logprobs: Vec::new(),
        })
        .collect();
    let rollout = Rollout {
        task_id: TaskId(1),
        data: Default::default(),
        policy_version: PolicyVersion(0),
        actor_id: "t".into(),
        sequences,
        decode_seconds: 0.0,
    };
    let spec = RewardSpec::default();
    let df = || Rewarder::training_df(&data, items, true);
    let train = Rewarder::new(&data, items, &spec, df(), None).unwrap();
    let corpus = Rewarder::new(&data, items, &spec, df(), None)
        .unwrap()
        .with_corpus_df();
    let values = |r: &Rewarder| -> Vec<f32> {
        r.score(rollout.clone())
            .unwrap()
            .rewards
            .iter()
            .map(|v| v.components[0].1)
            .collect()
    };
    let (by_train, by_corpus) = (values(&train), values(&corpus));
    assert_ne!(by_train, by_corpus);

    let with_marker: Vec<Vec<Vec<u32>>> = refs
        .iter()
        .map(|image| image.iter().map(|r| with_eos(r, true)).collect())
        .collect();
    let scorer = CiderD::new(DocFreq::from_refs(&with_marker));
    for (i, want) in by_corpus.iter().enumerate() {
        let prepared = scorer.prepare(&with_marker[i]);
        let caption = with_eos(captions[i], true);
        let got = scorer.score(&prepared, &caption) as f32;
        assert!((got - want).abs() < 1e-5, "caption {i}: {got} vs {want}");
    }
}
