//! `reward.cider_eos`: the CIDEr-D reward of a caption that finished (its tokens end with EOS)
//! is scored with the `<eos>` marker appended, one cut at `max_len` without it, against
//! references that all end with it and a df counted over them, as self-critical.pytorch's
//! `get_self_critical_reward` does; with the option off both are plain CIDEr-D.

mod support;

use caprl_common::config::RewardSpec;
use caprl_data::Dataset;
use caprl_model::model::EOS;
use caprl_reward_worker::{exploration_terms, Rewarder};
use caprl_score::{
    pairwise_distances, refs_with_eos, with_eos, CiderD, Distance, DocFreq, Interner, EOS_MARK,
};
use caprl_wire::{DecodeKind, PolicyVersion, Rollout, Sequence, TaskId};
use support::dataset;

/// Every training image's references as vocabulary ids (the rewarder's interning).
fn training_refs(data: &Dataset) -> Vec<Vec<Vec<u32>>> {
    let mut interner = Interner::with_words(data.vocab.words());
    data.train
        .items
        .iter()
        .map(|it| interner.intern_refs(&it.refs))
        .collect()
}

fn cider_only(data: &Dataset, eos: bool) -> Rewarder {
    let items = &data.train.items;
    let df = Rewarder::training_df(data, items, eos);
    Rewarder::new(data, items, &RewardSpec::default(), df, None).unwrap()
}

fn cider(r: &Rewarder, row: usize, tokens: &[u32]) -> f64 {
    r.score_caption(row as u32, tokens, None)
        .unwrap()
        .components[0]
        .1 as f64
}

#[test]
fn finished_caption_gets_eos_and_one_cut_at_max_len_does_not() {
    let tmp = tempfile::tempdir().unwrap();
    let data = dataset(&tmp.path().join("synth"), 7, 60);
    let refs = training_refs(&data);
    let (i, item) = (3, &data.train.items[3]);
    // A caption with the words of the image's first reference, once finished and once cut.
    let words = refs[i][0].clone();
    let finished: Vec<u32> = words.iter().copied().chain([EOS]).collect();
    let cut = words.clone();

    let on = cider_only(&data, true);
    assert!(on.cider_eos(), "a df counted with the marker turns it on");
    let scorer = CiderD::new(DocFreq::from_refs(&refs_with_eos(&refs)));
    assert_eq!(
        DocFreq::from_refs(&refs_with_eos(&refs)).get(&[EOS_MARK]) as usize,
        refs.len(),
        "every image's references end with the marker"
    );
    let prepared = scorer.prepare(&refs_with_eos(&refs)[i]);
    let want_finished = scorer.score(&prepared, &with_eos(&words, true));
    let want_cut = scorer.score(&prepared, &with_eos(&words, false));
    let got_finished = cider(&on, item.row, &finished);
    let got_cut = cider(&on, item.row, &cut);
    assert!(
        (got_finished - want_finished).abs() < 1e-5,
        "{got_finished} vs {want_finished}"
    );
    assert!((got_cut - want_cut).abs() < 1e-5, "{got_cut} vs {want_cut}");
    assert!(
        got_finished > got_cut,
        "ending where the references end is rewarded: {got_finished} vs {got_cut}"
    );

    let off = cider_only(&data, false);
    assert!(!off.cider_eos());
    let plain = CiderD::new(DocFreq::from_refs(&refs));
    let want = plain.score(&plain.prepare(&refs[i]), &words);
    assert!((cider(&off, item.row, &finished) - want).abs() < 1e-5);
    assert!((cider(&off, item.row, &cut) - want).abs() < 1e-5);
}

#[test]
fn sle_cider_distance_sees_the_marker_like_the_reward() {
    let tmp = tempfile::tempdir().unwrap();
    let data = dataset(&tmp.path().join("synth"), 7, 60);
    let refs = training_refs(&data);
    let item = &data.train.items[5];
    let words = refs[5][0].clone();
    let finished: Vec<u32> = words.iter().copied().chain([EOS]).collect();
    let seq = |tokens: Vec<u32>| Sequence {
        image_row: item.row as u32,
        kind: DecodeKind::Sample,
        tokens,
        logprobs: Vec::new(),
    };
    let rollout = Rollout {
        task_id: TaskId(1),
        data: Default::default(),
        policy_version: PolicyVersion(0),
        actor_id: "t".into(),
        sequences: vec![seq(finished.clone()), seq(words.clone())],
        decode_seconds: 0.0,
    };
    let items = &data.train.items;
    let spec = RewardSpec::default();
    for eos in [true, false] {
        let df = Rewarder::training_df(&data, items, eos);
        let rewarder = Rewarder::new(&data, items, &spec, df, Some(Distance::Cider)).unwrap();
        let scored = rewarder.score(rollout.clone()).unwrap();
        let e: Vec<f32> = scored
            .rewards
            .iter()
            .map(|r| r.components.last().unwrap().1)
            .collect();
        let scorer = CiderD::new(Rewarder::training_df(&data, items, eos));
        let caps = [with_eos(&words, eos), words.clone()];
        let d = pairwise_distances(&caps, Distance::Cider, Some(&scorer));
        let want = exploration_terms(&d);
        assert_eq!(e, want, "eos = {eos}");
        match eos {
            // The two samples differ only by finishing: with the marker that is a distance.
            true => assert!(d[0][1] > d[0][0], "{d:?}"),
            false => assert!(
                d[0][1] == d[0][0] && e.iter().all(|x| x.abs() < 1e-6),
                "{d:?}"
            ),
        }
    }
}
