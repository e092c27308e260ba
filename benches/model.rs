//! Captioner throughput: XE step (forward + backward + clip + AdamW), greedy decoding,
//! 5 samples per image and beam 5, at batch 32, hidden 512, embed 256, vocab 200, max length 16,
//! fc dim 256. EOS is disabled so every sequence runs to the length limit (comparable with the
//! PyTorch peer in scripts/peer/). Threads: `RAYON_NUM_THREADS` (candle's CPU matmul reads it).
//!
//! The decoders run on weights prepared once (a `Decoder`, as an actor holds one per policy
//! version); `decoder_prepare` times that preparation on its own. The benchmark runs with the
//! binary's allocator (mimalloc).
//!
//! `RAYON_NUM_THREADS=1 cargo bench --bench model`; see scripts/peer/run_model_peer.sh.

use std::time::Duration;

use caprl_common::model::{
    batch_tokens, on_rayon, BeamOptions, CaprlRng, Captioner, CaptionerConfig, Device, Inputs,
    ModelKind, SampleOptions, Tensor, EOS,
};
use caprl_common::optim::{clip_grad_norm, AdamW, AdamWParams};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

/// The allocator the `caprl` binary runs with, so that the figures are the binary's.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

const B: usize = 32;
const MAX_LEN: usize = 16;

fn setup() -> (Captioner, Inputs, Tensor, Vec<Vec<u32>>) {
    let mut cfg = CaptionerConfig::new(ModelKind::Fc, 200, 256, None);
    cfg.max_len = MAX_LEN;
    cfg.dropout = 0.2;
    let m = Captioner::new(&cfg, &Device::Cpu, 0).expect("model");
    {
        // No EOS: every decode runs the full length, as in the peer.
        let data = m.varmap().data().lock().expect("varmap");
        let bias = &data["logit.bias"];
        let mut b = bias.as_tensor().to_vec1::<f32>().expect("bias");
        b[EOS as usize] = -1e4;
        bias.set(&Tensor::new(b, &Device::Cpu).expect("bias"))
            .expect("bias");
    }
    let mut rng = CaprlRng::new(1);
    let fc: Vec<f32> = (0..B * 256).map(|_| rng.uniform_open() as f32).collect();
    let x = Inputs::from_host(&fc, None, B, &cfg, &Device::Cpu).expect("inputs");
    let seqs: Vec<Vec<u32>> = (0..B)
        .map(|_| {
            let mut s: Vec<u32> = (0..MAX_LEN)
                .map(|_| 4 + (rng.next_u64() % 196) as u32)
                .collect();
            s.push(EOS);
            s
        })
        .collect();
    let t = batch_tokens(&seqs, &Device::Cpu).expect("tokens");
    (m, x, t, seqs)
}

fn bench(c: &mut Criterion) {
    caprl_common::model::keep_elementwise_ops_on_one_thread();
    let threads = candle_core_threads();
    let (m, x, seqs_t, _) = setup();
    let mut g = c.benchmark_group(format!("model/threads={threads}"));
    g.sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));

    let mut opt = AdamW::new(m.varmap(), AdamWParams::default()).expect("adamw");
    let mut drop_rng = CaprlRng::new(2);
    g.throughput(Throughput::Elements((B * (MAX_LEN + 1)) as u64));
    g.bench_function("xe_step", |bch| {
        // On one of rayon's threads, as the learner runs its steps.
        bch.iter(|| {
            on_rayon(&Device::Cpu, || {
                let (logp, mask) = m
                    .token_logprobs(&x, &seqs_t, Some(&mut drop_rng))
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

    // The parts of the XE step, to see where its time goes.
    g.bench_function("xe_forward", |bch| {
        bch.iter(|| {
            let (logp, _) = m
                .token_logprobs(&x, &seqs_t, Some(&mut drop_rng))
                .expect("fwd");
            logp.sum_all().expect("sum")
        })
    });
    g.bench_function("xe_forward_backward", |bch| {
        bch.iter(|| {
            let (logp, _) = m
                .token_logprobs(&x, &seqs_t, Some(&mut drop_rng))
                .expect("fwd");
            logp.sum_all().expect("sum").backward().expect("bwd")
        })
    });

    g.throughput(Throughput::Elements(1));
    g.bench_function("decoder_prepare", |bch| {
        bch.iter(|| m.decoder().expect("decoder"))
    });
    let dec = m.decoder().expect("decoder");

    g.throughput(Throughput::Elements((B * MAX_LEN) as u64));
    g.bench_function("greedy", |bch| {
        bch.iter(|| dec.greedy(&x, MAX_LEN).expect("greedy"))
    });

    let opts = SampleOptions {
        n_per_input: 5,
        temperature: 1.0,
        top_k: 0,
        top_p: 1.0,
        bad_endings: caprl_common::model::BadEndings::none(),
        max_len: MAX_LEN,
    };
    let mut rng = CaprlRng::new(3);
    g.throughput(Throughput::Elements((5 * B * MAX_LEN) as u64));
    g.bench_function("sample_5", |bch| {
        bch.iter(|| dec.sample(&x, &opts, &mut rng).expect("sample"))
    });

    let bo = BeamOptions {
        width: 5,
        max_len: MAX_LEN,
        length_norm: false,
        block_trigrams: false,
        groups: 1,
        diversity_lambda: 0.0,
        bad_endings: caprl_common::model::BadEndings::none(),
    };
    // Tokens of the 5 returned hypotheses per image.
    g.throughput(Throughput::Elements((5 * B * MAX_LEN) as u64));
    g.bench_function("beam_5", |bch| {
        bch.iter(|| dec.beam(&x, &bo).expect("beam"))
    });
    g.finish();
}

fn candle_core_threads() -> usize {
    std::env::var("RAYON_NUM_THREADS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

criterion_group!(benches, bench);
criterion_main!(benches);
