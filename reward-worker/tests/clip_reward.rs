//! Paper 004's rewards on hand-made embeddings: `r_bicont` of eq. 2 with the positive excluded
//! from each denominator, its τ → 0 limit (SCST with a greedy baseline on the similarity),
//! CLIP-S, and `disc` from a discriminator handed over as in a policy snapshot.

use std::collections::HashMap;

use caprl_clip::{Discriminator, Embeddings, Encoder};
use caprl_common::config::RewardSpec;
use caprl_data::{synth, Dataset, Item, SynthConfig};
use caprl_model::model::EOS;
use caprl_reward_worker::{contrast, ClipReward, RewardError, Rewarder, CLIP_S_WEIGHT};
use caprl_score::DocFreq;
use caprl_wire::{DecodeKind, PolicyVersion, Rollout, Sequence, TaskId};

/// Embeddings looked up by caption tokens and by feature row.
struct Toy {
    texts: HashMap<Vec<u32>, Vec<f32>>,
    images: HashMap<usize, Vec<f32>>,
}

impl Encoder for Toy {
    fn dim(&self) -> usize {
        2
    }
    fn embed_captions(&self, captions: &[Vec<u32>]) -> caprl_clip::Result<Embeddings> {
        let mut data = Vec::new();
        for c in captions {
            let key: Vec<u32> = c.iter().copied().take_while(|&t| t != EOS).collect();
            data.extend(self.texts.get(&key).cloned().unwrap_or(vec![0.0, 0.0]));
        }
        Ok(Embeddings::normalised(2, data))
    }
    fn embed_images(&self, _data: &Dataset, rows: &[usize]) -> caprl_clip::Result<Embeddings> {
        let data = rows.iter().flat_map(|r| self.images[r].clone()).collect();
        Ok(Embeddings::normalised(2, data))
    }
}

fn dataset(dir: &std::path::Path) -> Dataset {
    synth(
        dir,
        &SynthConfig {
            seed: 3,
            train: 6,
            val: 2,
            test: 2,
            progress: false,
        },
    )
    .unwrap();
    Dataset::open(dir).unwrap()
}

fn seq(row: usize, kind: DecodeKind, token: u32) -> Sequence {
    Sequence {
        image_row: row as u32,
        kind,
        tokens: vec![token, EOS],
        logprobs: vec![-1.0, -0.5],
    }
}

/// Images A = (1, 0) and B = (0, 1); captions at known angles.
fn setup(data: &Dataset, tau: f32) -> (ClipReward, usize, usize) {
    let items: &[Item] = &data.train.items;
    let (a, b) = (items[0].row, items[1].row);
    let toy = Toy {
        texts: HashMap::from([
            (vec![10], vec![0.8, 0.6]),   // beam of A
            (vec![11], vec![0.6, 0.8]),   // greedy of A
            (vec![12], vec![1.0, 0.0]),   // ground truth of A
            (vec![13], vec![0.0, 1.0]),   // beam of B
            (vec![14], vec![0.28, 0.96]), // a sample of A (not in the text pool)
        ]),
        images: HashMap::from([(a, vec![1.0, 0.0]), (b, vec![0.0, 1.0])]),
    };
    let data_items = &items[..2];
    let reward = ClipReward::new(Box::new(toy), data, data_items, tau, 0).unwrap();
    (reward, a, b)
}

fn dummy_data() -> (tempfile::TempDir, Dataset) {
    let tmp = tempfile::tempdir().unwrap();
    let data = dataset(&tmp.path().join("synth"));
    (tmp, data)
}

fn rollout(a: usize, b: usize) -> Rollout {
    Rollout {
        task_id: TaskId(1),
        data: Default::default(),
        policy_version: PolicyVersion(0),
        actor_id: "t".into(),
        sequences: vec![
            seq(a, DecodeKind::Beam, 10),
            seq(a, DecodeKind::Greedy, 11),
            seq(a, DecodeKind::GroundTruth, 12),
            seq(b, DecodeKind::Beam, 13),
            seq(a, DecodeKind::Sample, 14),
        ],
        decode_seconds: 0.0,
    }
}

/// `τ log(e^{s⁺/τ} / Σⱼ e^{sⱼ/τ})` written out.
fn by_hand(s_pos: f64, negatives: &[f64], tau: f64) -> f64 {
    tau * ((s_pos / tau).exp() / negatives.iter().map(|s| (s / tau).exp()).sum::<f64>()).ln()
}

#[test]
fn bicont_matches_a_hand_computed_example_with_the_positive_excluded() {
    let (_tmp, data) = dummy_data();
    let tau = 0.5;
    let (reward, a, b) = setup(&data, tau);
    let parts = reward.score(&rollout(a, b)).unwrap();
    let close = |x: f32, y: f64| assert!((x as f64 - y).abs() < 1e-5, "{x} vs {y}");
    // Beam of A: text rivals are the *other* pool captions (greedy A, GT A, beam B) against A;
    // image rivals are the other images of the pool (B).
    let beam = parts[0].unwrap();
    let i2t = by_hand(0.8, &[0.6, 1.0, 0.0], tau as f64);
    let t2i = by_hand(0.8, &[0.6], tau as f64);
    close(beam.i2t, i2t);
    close(beam.bicont, i2t + t2i);
    close(beam.clip_s, CLIP_S_WEIGHT as f64 * 0.8);
    // Ground truth of A: its own similarity (1.0) is not among its rivals.
    let gt = parts[2].unwrap();
    close(gt.i2t, by_hand(1.0, &[0.8, 0.6, 0.0], tau as f64));
    close(gt.bicont - gt.i2t, by_hand(1.0, &[0.0], tau as f64));
    // A sample is not in the text pool, so every pool caption is its rival.
    let sample = parts[4].unwrap();
    close(sample.i2t, by_hand(0.28, &[0.8, 0.6, 1.0, 0.0], tau as f64));
    // Beam of B against image B.
    let beam_b = parts[3].unwrap();
    close(beam_b.i2t, by_hand(1.0, &[0.6, 0.8, 0.0], tau as f64));
    assert!(parts.iter().all(|p| p.unwrap().disc.is_none()));
}

#[test]
fn as_tau_goes_to_zero_the_text_term_is_scst_with_the_greedy_baseline() {
    // Paper 004 §3.4: r_i2t(x) → s(x, i) − max over rivals, and when the greedy caption is the
    // most similar rival that is SCST's advantage r(x^bs) − r(x^gs) on the similarity reward.
    let (_tmp, data) = dummy_data();
    let (a, b) = (data.train.items[0].row, data.train.items[1].row);
    let toy = Toy {
        texts: HashMap::from([
            (vec![10], vec![0.8, 0.6]),
            (vec![11], vec![0.9, 0.436]),
            (vec![13], vec![0.0, 1.0]),
        ]),
        images: HashMap::from([(a, vec![1.0, 0.0]), (b, vec![0.0, 1.0])]),
    };
    let reward = ClipReward::new(Box::new(toy), &data, &data.train.items[..2], 1e-4, 0).unwrap();
    let r = Rollout {
        sequences: vec![
            seq(a, DecodeKind::Beam, 10),
            seq(a, DecodeKind::Greedy, 11),
            seq(b, DecodeKind::Beam, 13),
        ],
        ..rollout(a, b)
    };
    let parts = reward.score(&r).unwrap();
    let s_greedy = 0.9 / (0.9f32 * 0.9 + 0.436 * 0.436).sqrt();
    let advantage = 0.8 - s_greedy;
    assert!(
        (parts[0].unwrap().i2t - advantage).abs() < 1e-3,
        "{:?} vs {advantage}",
        parts[0]
    );
    // The same limit straight from the formula, and no rival at all leaves the similarity.
    assert!((contrast(0.8, &[0.7, 0.1], 1e-4) - 0.1).abs() < 1e-4);
    assert_eq!(contrast(0.8, &[], 0.1), 0.8);
}

#[test]
fn disc_reward_comes_from_the_discriminator_handed_over() {
    let (_tmp, data) = dummy_data();
    let (reward, a, b) = setup(&data, 0.5);
    let df = DocFreq::from_refs(&[]);
    let spec: RewardSpec = "clip=0.94,disc=0.06".parse().expect("spec");
    let rewarder = Rewarder::new(&data, &data.train.items, &spec, df, None)
        .unwrap()
        .with_encoder_rewards(reward);
    assert!(rewarder.needs_discriminator());
    // No discriminator yet: a clear error, not a made-up probability.
    assert!(matches!(
        rewarder.score(rollout(a, b)),
        Err(RewardError::NoDiscriminator)
    ));
    // The discriminator rides in the snapshot bytes beside other tensors.
    let d = Discriminator::new(2, &caprl_model::model::Device::Cpu, 5).unwrap();
    let bytes = d.to_safetensors().unwrap();
    let back = Discriminator::from_safetensors(&bytes, std::path::Path::new("snap"))
        .unwrap()
        .unwrap();
    rewarder
        .clip()
        .unwrap()
        .set_discriminator(3, back.scorer().unwrap());
    assert_eq!(rewarder.clip().unwrap().disc_version(), Some(3));
    let scored = rewarder.score(rollout(a, b)).unwrap();
    for r in &scored.rewards {
        let get = |n: &str| r.components.iter().find(|(k, _)| k == n).unwrap().1;
        let p = get("disc");
        assert!(p > 0.0 && p < 1.0, "P_D = {p}");
        assert!((r.total - (0.94 * get("clip") + 0.06 * p)).abs() < 1e-5);
    }
}

#[test]
fn clip_rewards_without_an_encoder_are_refused_clearly() {
    let (_tmp, data) = dummy_data();
    let df = DocFreq::from_refs(&[]);
    let rewarder = Rewarder::new(
        &data,
        &data.train.items,
        &"clip-s=1".parse().expect("spec"),
        df,
        None,
    )
    .unwrap();
    let a = data.train.items[0].row;
    let err = rewarder.score(rollout(a, a)).unwrap_err();
    assert!(err.to_string().contains("caprl clip train"), "{err}");
}
