//! One SCST iteration end to end at COCO's shapes, in process, as `caprl train` runs it: the
//! actor's decoder prepared for the new policy, 5 samples per image and the greedy baseline,
//! the CIDEr-D rewards a reward worker computes (its `Rewarder`, document frequencies from the
//! training references), and the learner's policy-gradient step (`Trainer::pg_step`: the
//! teacher-forced log-probs of the samples, the loss weighted by `r(sample) − r(greedy)`,
//! backward, clip, AdamW). The model is the `coco-10x5` shape of `benches/model_shapes.json`
//! (fc GRU, embed and hidden 512, 2,048-d features, 10 images, 16 words) with the data set's
//! vocabulary; the same 10 training images every iteration.
//!
//! Rows: `iteration` (the whole of it) and its parts `sample`, `greedy`, `reward`, `update`.
//! The data set is `CAPRL_BENCH_DATA` (a COCO-shaped set from `caprl data synth --profile coco`;
//! the PyTorch peer, scripts/peer/scst_torch.py, reads the same one); without it a 500-image
//! COCO-shaped set is made in a temporary directory. Threads: `RAYON_NUM_THREADS`.
//! See scripts/peer/run_scst_peer.sh.

use std::path::PathBuf;
use std::time::Duration;

use caprl_common::config::{KlEstimator, RewardSpec};
use caprl_data::{synth_profile, Dataset, SynthConfig, SynthProfile};
use caprl_learner::{PgTargets, StepOptions, Trainer};
use caprl_model::model::{
    inputs_for_rows, BadEndings, CaprlRng, Captioner, CaptionerConfig, Decoded, Device, Inputs,
    ModelKind, SampleOptions,
};
use caprl_model::optim::AdamWParams;
use caprl_reward_worker::Rewarder;
use caprl_wire::{DecodeKind, PolicyVersion, Rollout, Sampling, Sequence, TaskId};
use criterion::{criterion_group, criterion_main, Criterion};

/// The allocator the `caprl` binary runs with, so that the figures are the binary's.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod support;

const IMAGES: usize = 10;
const SAMPLES: usize = 5;
const MAX_LEN: usize = 16;
const WIDTH: usize = 512;

/// The data set to read, and the temporary directory that holds it when the bench made it.
fn data() -> (Dataset, Option<tempfile::TempDir>) {
    if let Ok(dir) = std::env::var("CAPRL_BENCH_DATA") {
        let ds = Dataset::open(&PathBuf::from(&dir))
            .unwrap_or_else(|e| panic!("CAPRL_BENCH_DATA={dir}: {e}"));
        return (ds, None);
    }
    let tmp = tempfile::tempdir().expect("temporary directory");
    let dir = tmp.path().join("coco-synth");
    let config = SynthConfig {
        seed: 42,
        train: 500,
        val: 10,
        test: 10,
        progress: false,
    };
    synth_profile(&dir, SynthProfile::Coco, &config).expect("COCO-shaped data set");
    (Dataset::open(&dir).expect("data set"), Some(tmp))
}

struct Iteration {
    data: Dataset,
    trainer: Trainer,
    rewarder: Rewarder,
    /// Feature rows of the images, and of the samples (5 per image).
    rows: Vec<usize>,
    sample_rows: Vec<usize>,
    x: Inputs,
    sampling: SampleOptions,
    rng: CaprlRng,
    step: StepOptions,
}

impl Iteration {
    fn new(data: Dataset) -> Self {
        let mut cfg = CaptionerConfig::new(ModelKind::Fc, data.vocab.len(), data.fc_dim(), None);
        cfg.model.embed = WIDTH;
        cfg.model.hidden = WIDTH;
        cfg.max_len = MAX_LEN;
        let model = Captioner::new(&cfg, &Device::Cpu, 0).expect("model");
        let trainer = Trainer::new(model, AdamWParams::default(), 1).expect("trainer");
        let items = &data.train.items;
        let df = Rewarder::training_df(&data, items, false);
        let rewarder =
            Rewarder::new(&data, items, &RewardSpec::default(), df, None).expect("rewarder");
        let rows: Vec<usize> = items[..IMAGES].iter().map(|it| it.row).collect();
        let sample_rows = rows
            .iter()
            .flat_map(|&r| std::iter::repeat_n(r, SAMPLES))
            .collect();
        let x = inputs_for_rows(&data, &rows, &cfg, &Device::Cpu).expect("inputs");
        Iteration {
            data,
            trainer,
            rewarder,
            rows,
            sample_rows,
            x,
            sampling: SampleOptions {
                n_per_input: SAMPLES,
                sampling: Sampling::default(),
                bad_endings: BadEndings::none(),
                max_len: MAX_LEN,
            },
            rng: CaprlRng::new(3),
            step: StepOptions {
                lr: 5e-5,
                grad_clip: 2.0,
                label_smoothing: 0.0,
                entropy_coef: 0.0,
                kl_coef: 0.0,
                kl_estimator: KlEstimator::K3,
                value_lr: 0.0,
            },
        }
    }

    /// The actor's part: the decoder for the current policy, the samples and the baseline.
    fn decode(&mut self) -> (Decoded, Decoded) {
        let dec = self.trainer.model.decoder().expect("decoder");
        let samples = dec
            .sample(&self.x, &self.sampling, &mut self.rng)
            .expect("sample");
        let greedy = dec.greedy(&self.x, MAX_LEN).expect("greedy");
        (samples, greedy)
    }

    /// The reward worker's part: the rollout scored as a worker scores it, then
    /// `r(sample) − r(greedy of its image)` per sample.
    fn advantages(&self, samples: &Decoded, greedy: &Decoded) -> Vec<f32> {
        let sequence = |kind: DecodeKind, row: usize, tokens: &[u32]| Sequence {
            image_row: row as u32,
            kind,
            tokens: tokens.to_vec(),
            logprobs: Vec::new(),
        };
        let greedy = self
            .rows
            .iter()
            .zip(&greedy.tokens)
            .map(|(&row, t)| sequence(DecodeKind::Greedy, row, t));
        let sampled = self
            .sample_rows
            .iter()
            .zip(&samples.tokens)
            .map(|(&row, t)| sequence(DecodeKind::Sample, row, t));
        let rollout = Rollout {
            task_id: TaskId(0),
            data: Default::default(),
            policy_version: PolicyVersion(0),
            actor_id: "bench".into(),
            sequences: greedy.chain(sampled).collect(),
            decode_seconds: 0.0,
        };
        let rewards = self.rewarder.score(rollout).expect("reward").rewards;
        let (baseline, sampled) = rewards.split_at(IMAGES);
        sampled
            .iter()
            .enumerate()
            .map(|(i, r)| r.total - baseline[i / SAMPLES].total)
            .collect()
    }

    /// The learner's part.
    fn update(&mut self, samples: &Decoded, advantages: &[f32]) {
        self.trainer
            .pg_step(
                &self.data,
                &self.sample_rows,
                &samples.tokens,
                PgTargets::sequence(advantages),
                self.step,
            )
            .expect("pg step");
    }

    fn run(&mut self) {
        let (samples, greedy) = self.decode();
        let advantages = self.advantages(&samples, &greedy);
        self.update(&samples, &advantages);
    }
}

fn bench(c: &mut Criterion) {
    let threads = support::set_up_as_the_binary();
    let (data, _tmp) = data();
    let mut it = Iteration::new(data);
    let mut g = c.benchmark_group(format!("scst/threads={threads}/coco-10x5"));
    g.sample_size(10)
        .warm_up_time(Duration::from_secs(2))
        .measurement_time(Duration::from_secs(6));
    g.bench_function("iteration", |b| b.iter(|| it.run()));

    let (samples, greedy) = it.decode();
    let advantages = it.advantages(&samples, &greedy);
    g.bench_function("sample", |b| {
        b.iter(|| {
            let dec = it.trainer.model.decoder().expect("decoder");
            dec.sample(&it.x, &it.sampling, &mut it.rng)
                .expect("sample")
        })
    });
    g.bench_function("greedy", |b| {
        b.iter(|| {
            let dec = it.trainer.model.decoder().expect("decoder");
            dec.greedy(&it.x, MAX_LEN).expect("greedy")
        })
    });
    g.bench_function("reward", |b| b.iter(|| it.advantages(&samples, &greedy)));
    g.bench_function("update", |b| b.iter(|| it.update(&samples, &advantages)));
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
