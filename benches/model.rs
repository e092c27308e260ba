//! Captioner throughput over a grid of shapes (`benches/model_shapes.json`): XE step (forward +
//! backward + clip + AdamW), greedy decoding, 5 samples per image and beam 5. The grid holds the
//! former single shape (`toy`: vocabulary 200, 256-d fc, hidden 512, batch 32) and COCO's sizes
//! (vocabulary 10,000, 2,048-d fc, 36 × 2,048-d regions for the `att` model, hidden 512 and
//! 1,024, 32 images or 10 images × 5 captions, 16 and 20 words). EOS is disabled so every
//! sequence runs to the length limit (comparable with the PyTorch peer in scripts/peer/, which
//! reads the same grid). Threads: `RAYON_NUM_THREADS` (candle's CPU matmul reads it).
//!
//! The decoders run on weights prepared once (a `Decoder`, as an actor holds one per policy
//! version). The benchmark runs with the binary's allocator (mimalloc).
//!
//! `CAPRL_BENCH_SHAPES=coco,coco-att` picks shapes (default: all); `CAPRL_BENCH_PARTS=1` adds
//! the parts of the XE step (`xe_forward`, `xe_forward_backward`) and `decoder_prepare`.
//! `RAYON_NUM_THREADS=1 cargo bench --bench model`; see scripts/peer/run_model_peer.sh.

use std::time::Duration;

use caprl_wire::Sampling;

use caprl_model::model::{
    batch_tokens, on_rayon, BeamOptions, CaprlRng, Captioner, CaptionerConfig, Device, Inputs,
    ModelKind, SampleOptions, Tensor, EOS,
};
use caprl_model::optim::{clip_grad_norm, AdamW, AdamWParams};
use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion, Throughput};
use serde::Deserialize;

/// The allocator the `caprl` binary runs with, so that the figures are the binary's.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod support;

/// Samples per image and beam width of the decoding rows.
const FIVE: usize = 5;

/// One row of `benches/model_shapes.json`.
#[derive(Debug, Clone, Deserialize)]
struct Shape {
    name: String,
    kind: String,
    vocab: usize,
    fc: usize,
    regions: usize,
    att_dim: usize,
    embed: usize,
    hidden: usize,
    att_hidden: usize,
    images: usize,
    captions_per_image: usize,
    len: usize,
}

#[derive(Deserialize)]
struct Grid {
    shapes: Vec<Shape>,
}

/// The grid's shapes that `CAPRL_BENCH_SHAPES` names (all when unset), in file order.
fn shapes() -> Vec<Shape> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/model_shapes.json");
    let text = std::fs::read_to_string(path).expect("benches/model_shapes.json");
    let grid: Grid = serde_json::from_str(&text).expect("benches/model_shapes.json");
    let Ok(wanted) = std::env::var("CAPRL_BENCH_SHAPES") else {
        return grid.shapes;
    };
    let wanted: Vec<&str> = wanted.split(',').map(str::trim).collect();
    for w in &wanted {
        assert!(
            grid.shapes.iter().any(|s| s.name == *w),
            "CAPRL_BENCH_SHAPES names {w:?}, which benches/model_shapes.json does not hold"
        );
    }
    grid.shapes
        .into_iter()
        .filter(|s| wanted.contains(&s.name.as_str()))
        .collect()
}

struct Setup {
    model: Captioner,
    /// One row per image.
    images: Inputs,
    /// One row per XE caption (each image's features repeated per caption).
    captions: Inputs,
    tokens: Tensor,
}

fn setup(s: &Shape) -> Setup {
    let kind = match s.kind.as_str() {
        "fc" => ModelKind::Fc,
        "att" => ModelKind::Att,
        other => panic!("shape {}: kind {other:?} is not fc or att", s.name),
    };
    let att = (s.regions > 0).then_some((s.regions, s.att_dim));
    let mut cfg = CaptionerConfig::new(kind, s.vocab, s.fc, att);
    cfg.model.embed = s.embed;
    cfg.model.hidden = s.hidden;
    cfg.model.att_hidden = s.att_hidden;
    cfg.max_len = s.len;
    cfg.model.dropout = 0.2;
    let model = Captioner::new(&cfg, &Device::Cpu, 0).expect("model");
    {
        // No EOS: every decode runs the full length, as in the peer.
        let data = model.varmap().data().lock().expect("varmap");
        let bias = &data["logit.bias"];
        let mut b = bias.as_tensor().to_vec1::<f32>().expect("bias");
        b[EOS as usize] = -1e4;
        bias.set(&Tensor::new(b, &Device::Cpu).expect("bias"))
            .expect("bias");
    }
    let mut rng = CaprlRng::new(1);
    let mut uniform =
        |n: usize| -> Vec<f32> { (0..n).map(|_| rng.uniform_open() as f32).collect() };
    let fc = uniform(s.images * s.fc);
    let att = att.map(|(r, d)| uniform(s.images * r * d));
    let images =
        Inputs::from_host(&fc, att.as_deref(), s.images, &cfg, &Device::Cpu).expect("inputs");
    let captions = images.repeat_each(s.captions_per_image).expect("inputs");
    let seqs: Vec<Vec<u32>> = (0..s.images * s.captions_per_image)
        .map(|_| {
            let mut seq: Vec<u32> = (0..s.len)
                .map(|_| 4 + (rng.next_u64() % (s.vocab as u64 - 4)) as u32)
                .collect();
            seq.push(EOS);
            seq
        })
        .collect();
    let tokens = batch_tokens(&seqs, &Device::Cpu).expect("tokens");
    Setup {
        model,
        images,
        captions,
        tokens,
    }
}

fn bench_shape(g: &mut BenchmarkGroup<'_, criterion::measurement::WallTime>, s: &Shape) {
    let parts = std::env::var("CAPRL_BENCH_PARTS").is_ok_and(|v| v == "1");
    let Setup {
        model: m,
        images,
        captions,
        tokens,
    } = setup(s);
    let name = |task: &str| format!("{}/{task}", s.name);
    let xe_tokens = (s.images * s.captions_per_image * (s.len + 1)) as u64;

    let mut opt = AdamW::new(m.varmap(), AdamWParams::default()).expect("adamw");
    let mut drop_rng = CaprlRng::new(2);
    g.throughput(Throughput::Elements(xe_tokens));
    g.bench_function(name("xe_step"), |bch| {
        // On one of rayon's threads, as the learner runs its steps.
        bch.iter(|| {
            on_rayon(&Device::Cpu, || {
                let (logp, mask) = m
                    .token_logprobs(&captions, &tokens, Some(&mut drop_rng))
                    .expect("fwd");
                let n = mask.sum_all().expect("sum");
                let loss = logp
                    .sum_all()
                    .expect("sum")
                    .neg()
                    .expect("neg")
                    .div(&n)
                    .expect("div");
                let mut grads = loss.backward().expect("bwd");
                clip_grad_norm(&mut grads, &opt.vars(), 2.0).expect("clip");
                opt.step(&grads, 5e-4).expect("step");
            })
        })
    });
    if parts {
        g.bench_function(name("xe_forward"), |bch| {
            bch.iter(|| {
                let (logp, _) = m
                    .token_logprobs(&captions, &tokens, Some(&mut drop_rng))
                    .expect("fwd");
                logp.sum_all().expect("sum")
            })
        });
        g.bench_function(name("xe_forward_backward"), |bch| {
            bch.iter(|| {
                let (logp, _) = m
                    .token_logprobs(&captions, &tokens, Some(&mut drop_rng))
                    .expect("fwd");
                logp.sum_all().expect("sum").backward().expect("bwd")
            })
        });
        g.throughput(Throughput::Elements(1));
        g.bench_function(name("decoder_prepare"), |bch| {
            bch.iter(|| m.decoder().expect("decoder"))
        });
    }
    let dec = m.decoder().expect("decoder");

    let decoded_tokens = (s.images * s.len) as u64;
    g.throughput(Throughput::Elements(decoded_tokens));
    g.bench_function(name("greedy"), |bch| {
        bch.iter(|| dec.greedy(&images, s.len).expect("greedy"))
    });

    let opts = SampleOptions {
        n_per_input: FIVE,
        sampling: Sampling::default(),
        bad_endings: caprl_model::model::BadEndings::none(),
        max_len: s.len,
    };
    let mut rng = CaprlRng::new(3);
    g.throughput(Throughput::Elements(FIVE as u64 * decoded_tokens));
    g.bench_function(name("sample_5"), |bch| {
        bch.iter(|| dec.sample(&images, &opts, &mut rng).expect("sample"))
    });

    let bo = BeamOptions::plain(FIVE, s.len);
    // Tokens of the 5 returned hypotheses per image.
    g.throughput(Throughput::Elements(FIVE as u64 * decoded_tokens));
    g.bench_function(name("beam_5"), |bch| {
        bch.iter(|| dec.beam(&images, &bo).expect("beam"))
    });
}

fn bench(c: &mut Criterion) {
    let threads = support::set_up_as_the_binary();
    let mut g = c.benchmark_group(format!("model/threads={threads}"));
    g.sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));
    for s in shapes() {
        bench_shape(&mut g, &s);
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
