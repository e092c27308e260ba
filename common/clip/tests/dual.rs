//! The dual encoder, nearest-image mining and the discriminator of paper 004.

use caprl_clip::disc::Pairs;
use caprl_clip::retrieval::{nearest, recall};
use caprl_clip::train::{self, Pairs as TrainPairs, TrainOptions};
use caprl_clip::{open_encoder, Discriminator, DualEncoder, Embeddings, Encoder};
use caprl_data::{synth, Dataset, SynthConfig};
use caprl_model::model::CaprlRng;
use caprl_model::optim::{AdamW, AdamWParams};

fn dataset(dir: &std::path::Path, train: usize) -> Dataset {
    synth(
        dir,
        &SynthConfig {
            seed: 11,
            train,
            val: 100,
            test: 10,
            progress: false,
        },
    )
    .unwrap();
    Dataset::open(dir).unwrap()
}

fn random_embeddings(n: usize, dim: usize, seed: u64) -> Embeddings {
    let mut rng = CaprlRng::new(seed);
    let data = (0..n * dim)
        .map(|_| rng.uniform_open() as f32 - 0.5)
        .collect();
    Embeddings::normalised(dim, data)
}

#[test]
fn contrastive_training_learns_to_retrieve_and_survives_a_save_load_round_trip() {
    let tmp = tempfile::tempdir().unwrap();
    let data = dataset(&tmp.path().join("synth"), 600);
    let pairs = TrainPairs::from_items(&data, &data.train.items, &|_| None);
    let mut epochs = Vec::new();
    let enc = train::train(
        &data,
        &pairs,
        &TrainOptions {
            epochs: 12,
            batch: 64,
            lr: 3e-3,
            seed: 2,
        },
        &mut |r| epochs.push(*r),
    )
    .unwrap();
    let first = epochs.first().unwrap();
    let last = epochs.last().unwrap();
    assert!(
        last.loss < first.loss,
        "loss {} → {}",
        first.loss,
        last.loss
    );
    // 100 val images: chance R@1 is 1%, R@10 10%.
    assert!(
        last.val.t2i[0] > 5.0 && last.val.t2i[2] > 30.0,
        "{:?}",
        last.val
    );
    assert!(last.val.i2t[2] > 30.0, "{:?}", last.val);

    let path = tmp.path().join("enc.safetensors");
    enc.save(&path).unwrap();
    let back = open_encoder(&path, &data.vocab).unwrap();
    let caps: Vec<Vec<u32>> = data.val.items[..5]
        .iter()
        .map(|it| data.vocab.encode(&it.refs[0]))
        .collect();
    let rows: Vec<usize> = data.val.items[..5].iter().map(|it| it.row).collect();
    assert_eq!(
        enc.embed_captions(&caps).unwrap(),
        back.embed_captions(&caps).unwrap()
    );
    assert_eq!(
        enc.embed_images(&data, &rows).unwrap(),
        back.embed_images(&data, &rows).unwrap()
    );
    let e = back.embed_captions(&caps).unwrap();
    for i in 0..e.len() {
        let n: f32 = e.row(i).iter().map(|x| x * x).sum();
        assert!((n - 1.0).abs() < 1e-4);
    }
}

#[test]
fn an_encoder_refuses_another_vocabulary_and_files_that_are_not_encoders() {
    let tmp = tempfile::tempdir().unwrap();
    let data = dataset(&tmp.path().join("a"), 60);
    let enc = DualEncoder::new(
        caprl_clip::DualConfig::for_data(&data),
        "not-this-vocabulary",
        &candle_core::Device::Cpu,
        1,
    )
    .unwrap();
    let path = tmp.path().join("enc.safetensors");
    enc.save(&path).unwrap();
    let err = DualEncoder::load(&path, &data.vocab)
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("another vocabulary") && err.contains("caprl clip train"),
        "{err}"
    );

    let junk = tmp.path().join("junk.safetensors");
    std::fs::write(&junk, b"not a tensor file").unwrap();
    let err = DualEncoder::load(&junk, &data.vocab)
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("junk.safetensors") && err.contains("safetensors"),
        "{err}"
    );

    let missing = tmp.path().join("missing.safetensors");
    let err = open_encoder(&missing, &data.vocab)
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("missing.safetensors") && err.contains("cannot read"),
        "{err}"
    );
}

#[test]
fn mined_neighbours_are_the_true_nearest() {
    let e = random_embeddings(1500, 8, 3);
    let k = 5;
    let got = nearest(&e, k).unwrap();
    for i in (0..e.len()).step_by(97) {
        let mut all: Vec<(f32, usize)> = (0..e.len())
            .filter(|&j| j != i)
            .map(|j| (e.dot(i, &e, j), j))
            .collect();
        all.sort_by(|a, b| b.0.total_cmp(&a.0));
        let want: Vec<usize> = all[..k].iter().map(|x| x.1).collect();
        assert_eq!(got[i], want, "row {i}");
    }
}

#[test]
fn recall_is_perfect_for_matching_embeddings_and_low_for_shuffled_ones() {
    let e = random_embeddings(50, 16, 4);
    let r = recall(&e, &e);
    assert_eq!(r.t2i, [100.0, 100.0, 100.0]);
    assert_eq!(r.i2t, [100.0, 100.0, 100.0]);
    let other = random_embeddings(50, 16, 5);
    let r = recall(&other, &e);
    assert!(r.t2i[0] < 20.0, "{r:?}");
    // One caption said for every image: image→text ties are broken at random, 1/50 at R@1.
    let same = Embeddings::normalised(16, e.row(0).repeat(50));
    let r = recall(&same, &e);
    assert!(
        (r.i2t[0] - 2.0).abs() < 1e-9 && (r.i2t[2] - 20.0).abs() < 1e-9,
        "{r:?}"
    );
}

#[test]
fn discriminator_loss_falls_on_a_separable_toy_set() {
    // Real captions lie near their image's embedding, generated ones far from it.
    let (n, dim) = (64, 8);
    let images = random_embeddings(n, dim, 6);
    let noise = random_embeddings(n, dim, 7);
    let mix = |sign: f32| {
        let data = (0..n * dim)
            .map(|k| images.data[k] * sign + 0.3 * noise.data[k])
            .collect();
        Embeddings::normalised(dim, data)
    };
    let (real, fake) = (mix(1.0), mix(-1.0));
    let d = Discriminator::new(dim, &candle_core::Device::Cpu, 1).unwrap();
    let mut opt = AdamW::new(d.varmap(), AdamWParams::default()).unwrap();
    let r = Pairs {
        texts: &real,
        images: &images,
    };
    let f = Pairs {
        texts: &fake,
        images: &images,
    };
    let first = d.train_step(&mut opt, &r, &f, 1e-3).unwrap();
    let mut last = first;
    for _ in 0..150 {
        last = d.train_step(&mut opt, &r, &f, 1e-3).unwrap();
    }
    assert!(
        last.loss < first.loss * 0.3,
        "loss {} → {}",
        first.loss,
        last.loss
    );
    assert!(
        last.accuracy > 0.95 && last.p_real > 0.8 && last.p_fake < 0.2,
        "{last:?}"
    );
    let p = d.probabilities(&r).unwrap();
    assert_eq!(p.len(), n);
}

#[test]
fn host_scorer_matches_the_tensor_forward_with_shared_images() {
    let dim = 16;
    let texts = random_embeddings(10, dim, 8);
    let images = random_embeddings(3, dim, 9);
    let image_of: Vec<usize> = (0..10).map(|k| (k * 7) % 3).collect();
    let d = Discriminator::new(dim, &candle_core::Device::Cpu, 4).unwrap();
    // Each caption beside its own copy of its image, through Candle.
    let expanded = Embeddings {
        dim,
        data: image_of
            .iter()
            .flat_map(|&i| images.row(i).to_vec())
            .collect(),
    };
    let want = d
        .probabilities(&Pairs {
            texts: &texts,
            images: &expanded,
        })
        .unwrap();
    let scorer = d.scorer().unwrap();
    let texts_t = caprl_clip::transpose(&texts.data, dim);
    let got = scorer.probabilities(&texts_t, &images, &image_of).unwrap();
    assert_eq!(got.len(), 10);
    for (g, w) in got.iter().zip(&want) {
        assert!((g - w).abs() < 1e-5, "{got:?} vs {want:?}");
    }
    // Probabilities differ across captions: the forward is not a constant.
    assert!(got.iter().any(|p| (p - got[0]).abs() > 1e-4), "{got:?}");
    let err = scorer
        .probabilities(&texts_t, &images, &[5; 10])
        .unwrap_err()
        .to_string();
    assert!(err.contains("image index 5"), "{err}");
}
