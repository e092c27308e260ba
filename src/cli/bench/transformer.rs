//! `caprl bench transformer`: the Transformer captioner on the protocol of its PyTorch peer
//! (`scripts/peer/transformer_torch.py`, compared by `scripts/peer/run_transformer_peer.sh`).
//!
//! Tasks, each the median of `--reps` runs after `--warmup` runs, on random weights and inputs
//! with EOS suppressed so every sequence runs to the length limit:
//! - `xe_step`: teacher forcing over `B` captions (`T + 1` tokens each), backward, global-norm
//!   clip and AdamW. At COCO's shape the `B = 50` captions are 10 images × 5 references, and
//!   each image is encoded once (the peer, like self-critical.pytorch, encodes every caption's
//!   copy of its image).
//! - `greedy`, `sample_5`, `beam_5`: key/value-cached decoding of `B_dec` images (5 samples
//!   per image, beam width 5), on weights prepared once.
//! - `greedy_uncached`: greedy that re-runs the whole decoder over the prefix at every step, as
//!   self-critical.pytorch's reference code decodes: what the cache saves.
//! - `snapshot_encode`, `snapshot_load`, `decoder_prep` (not run by default): what a policy
//!   snapshot costs outside the bus: the learner's serialisation, an actor's reading of the
//!   bytes into a model, and its preparation of the weights for decoding.
//!
//! Shapes: `synth` (the synthetic task's vocabulary of 66 words and 4 regions × 128-d, the
//! run config's default Transformer: 2 + 2 layers, d_model 128, 4 heads, d_ff 512, B = 32)
//! and `coco` (vocabulary 10,000, 36 regions × 2,048-d, 3 + 3 layers, d_model 512, 8 heads,
//! d_ff 2048); `coco-ref` is `coco` with the reference 6 + 6 layers. Threads: `RAYON_NUM_THREADS`.

use std::time::Instant;

use anyhow::{Context, Result};
use caprl_model::model::{
    batch_tokens, on_rayon, BeamOptions, CaprlRng, Captioner, CaptionerConfig, Device, Inputs,
    ModelConfig, ModelKind, SampleOptions, EOS,
};
use caprl_model::optim::{clip_grad_norm, AdamW, AdamWParams};
use caprl_wire::Sampling;
use serde::Serialize;

use super::model::random_captions;
use super::transformer_flops::Dims;
use crate::cli::write_stdout;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BenchShape {
    Synth,
    Coco,
    /// COCO's shape with the reference 6 + 6 layers (configs/transformer-coco.toml).
    #[value(name = "coco-ref")]
    #[serde(rename = "coco-ref")]
    CocoRef,
}

#[derive(Debug, Clone, clap::Args)]
pub struct TransformerBenchArgs {
    /// Shapes to run, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "synth,coco")]
    pub shape: Vec<BenchShape>,
    /// Timed runs per task (the median is kept).
    #[arg(long, default_value_t = 10)]
    pub reps: usize,
    /// Untimed runs before them.
    #[arg(long, default_value_t = 2)]
    pub warmup: usize,
    /// Print one JSON object per shape (what scripts/peer/compare_transformer.py reads).
    #[arg(long)]
    pub json: bool,
    /// Tasks to time, comma-separated (the others report 0): xe_step, greedy, sample_5,
    /// beam_5, greedy_uncached, snapshot_encode, snapshot_load, decoder_prep.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "xe_step,greedy,sample_5,beam_5,greedy_uncached"
    )]
    pub tasks: Vec<String>,
}

/// One shape of the benchmark, as the peer defines it.
pub(super) struct Shape {
    pub(super) vocab: usize,
    pub(super) regions: usize,
    pub(super) att_dim: usize,
    /// The Transformer's layers and sizes.
    pub(super) model: ModelConfig,
    /// Captions in the XE step, and references per image among them.
    pub(super) xe_rows: usize,
    pub(super) refs_per_image: usize,
    /// Images decoded.
    pub(super) dec_images: usize,
    pub(super) max_len: usize,
}

impl BenchShape {
    pub(super) fn spec(self) -> Shape {
        match self {
            BenchShape::Synth => Shape {
                vocab: 66,
                regions: 4,
                att_dim: 128,
                model: ModelConfig {
                    kind: ModelKind::Transformer,
                    ..ModelConfig::default()
                },
                xe_rows: 32,
                refs_per_image: 1,
                dec_images: 32,
                max_len: 16,
            },
            BenchShape::Coco => Shape {
                vocab: 10_000,
                regions: 36,
                att_dim: 2048,
                model: ModelConfig {
                    kind: ModelKind::Transformer,
                    enc_layers: 3,
                    dec_layers: 3,
                    d_model: 512,
                    heads: 8,
                    d_ff: 2048,
                    ..ModelConfig::default()
                },
                xe_rows: 50,
                refs_per_image: 5,
                dec_images: 10,
                max_len: 16,
            },
            BenchShape::CocoRef => {
                let mut s = BenchShape::Coco.spec();
                s.model.enc_layers = 6;
                s.model.dec_layers = 6;
                s
            }
        }
    }
}

/// Seconds per task and the tokens each run produces.
#[derive(Debug, Serialize)]
struct Row {
    source: &'static str,
    /// The CPU kernels' vector level (`CAPRL_SIMD`).
    simd: &'static str,
    model: &'static str,
    shape: BenchShape,
    threads: usize,
    #[serde(rename = "B")]
    xe_rows: usize,
    #[serde(rename = "B_dec")]
    dec_images: usize,
    #[serde(rename = "T")]
    max_len: usize,
    xe_step: f64,
    greedy: f64,
    sample_5: f64,
    beam_5: f64,
    greedy_uncached: f64,
    snapshot_encode: f64,
    snapshot_load: f64,
    decoder_prep: f64,
    tokens: std::collections::BTreeMap<&'static str, usize>,
    /// FLOPs of one run of each task whose work is counted (`transformer_flops`), in GFLOP.
    gflop: std::collections::BTreeMap<&'static str, f64>,
    /// The multiply-add peak of the threads at the level in use, GFLOP/s
    /// ([`caprl_kernels::fastmath::fma_peak_gflops`] on every thread at once).
    peak_gflops: f64,
}

pub fn run(args: TransformerBenchArgs) -> Result<()> {
    anyhow::ensure!(args.reps >= 1, "--reps must be >= 1");
    let threads = candle_core::utils::get_num_threads();
    let peak = fma_peak(threads);
    let mut out = String::new();
    if !args.json {
        out.push_str(&format!(
            "caprl bench transformer ({} reps after {} warm-up, median; {threads} threads)\n{}\n\
             multiply-add peak of {threads} threads at this level: {peak:.1} GFLOP/s; GFLOP \
             counted from the shapes (each image encoded once)\n\
             | shape | task | tokens/s | ms per run | GFLOP | GFLOP/s | of peak |\n\
             |---|---|---:|---:|---:|---:|---:|\n",
            args.reps,
            args.warmup,
            caprl_kernels::fastmath::describe()
        ));
    }
    for &shape in &args.shape {
        let mut row = measure(shape, threads, &args)
            .with_context(|| format!("bench transformer, shape {shape:?}"))?;
        row.peak_gflops = peak;
        if args.json {
            out.push_str(&serde_json::to_string(&row)?);
            out.push('\n');
        } else {
            let tasks = [
                ("xe_step", row.xe_step),
                ("greedy", row.greedy),
                ("sample_5", row.sample_5),
                ("beam_5", row.beam_5),
                ("greedy_uncached", row.greedy_uncached),
                ("snapshot_encode", row.snapshot_encode),
                ("snapshot_load", row.snapshot_load),
                ("decoder_prep", row.decoder_prep),
            ];
            for (task, s) in tasks.into_iter().filter(|(_, s)| *s > 0.0) {
                let tokens = match row.tokens.get(task) {
                    Some(&n) => format!("{:.0}", n as f64 / s),
                    None => "-".into(),
                };
                out.push_str(&format!(
                    "| {shape:?} | {task} | {tokens} | {:.1} | {} |\n",
                    s * 1e3,
                    work_cells(row.gflop.get(task).copied(), s, peak)
                ));
            }
            if row.xe_step > 0.0 && row.sample_5 > 0.0 {
                let (s, gflop) = (
                    row.xe_step + row.sample_5,
                    row.gflop["xe_step"] + row.gflop["sample_5"],
                );
                out.push_str(&format!(
                    "| {shape:?} | xe_step + sample_5 | - | {:.1} | {} |\n",
                    s * 1e3,
                    work_cells(Some(gflop), s, peak)
                ));
            }
        }
    }
    write_stdout(&out)
}

/// The multiply-add peak of `threads` threads running at once, GFLOP/s.
fn fma_peak(threads: usize) -> f64 {
    let budget = std::time::Duration::from_millis(400);
    std::thread::scope(|scope| {
        let runs: Vec<_> = (0..threads.max(1))
            .map(|_| scope.spawn(|| caprl_kernels::fastmath::fma_peak_gflops(budget)))
            .collect();
        runs.into_iter().map(|r| r.join().unwrap_or(0.0)).sum()
    })
}

/// The GFLOP, GFLOP/s and share of `peak` cells of a task of `gflop` that took `s` seconds.
fn work_cells(gflop: Option<f64>, s: f64, peak: f64) -> String {
    match gflop {
        Some(g) => format!("{g:.1} | {:.1} | {:.0}%", g / s, 100.0 * g / s / peak),
        None => "- | - | -".into(),
    }
}

/// Median seconds of `reps` calls after `warmup` calls.
fn median(warmup: usize, reps: usize, f: &mut dyn FnMut() -> Result<()>) -> Result<f64> {
    for _ in 0..warmup {
        f()?;
    }
    let mut ts = Vec::with_capacity(reps);
    for _ in 0..reps {
        let start = Instant::now();
        f()?;
        ts.push(start.elapsed().as_secs_f64());
    }
    ts.sort_by(f64::total_cmp);
    Ok(ts[ts.len() / 2])
}

/// The Transformer of shape `s`, weights from seed 0, dropout 0.1, its EOS suppressed so
/// that every decode runs the full length.
pub(super) fn bench_model(s: &Shape, device: &Device) -> Result<(Captioner, CaptionerConfig)> {
    let mut cfg = CaptionerConfig::new(
        ModelKind::Transformer,
        s.vocab,
        s.att_dim,
        Some((s.regions, s.att_dim)),
    );
    cfg.model = s.model.clone();
    cfg.max_len = s.max_len;
    cfg.model.dropout = 0.1;
    let model = Captioner::new(&cfg, device, 0)?;
    super::model::suppress_eos(&model)?;
    Ok((model, cfg))
}

fn measure(which: BenchShape, threads: usize, args: &TransformerBenchArgs) -> Result<Row> {
    let s = which.spec();
    let device = Device::Cpu;
    let t = s.max_len;
    let (model, cfg) = bench_model(&s, &device)?;
    let (x_xe, x_dec) = random_images(&s, &cfg, &device)?;
    let seqs = random_captions(&mut CaprlRng::new(2), s.xe_rows, t, s.vocab);
    let targets = batch_tokens(&seqs, &device)?;
    let mut opt = AdamW::new(model.varmap(), AdamWParams::default())?;
    let vars = opt.vars();
    let mut drop_rng = CaprlRng::new(3);
    let (warmup, reps) = (args.warmup, args.reps);
    let wanted = |task: &str| args.tasks.iter().any(|t| t == task);
    // Median seconds of `task`, or 0 when it was not asked for.
    let timed =
        |task: &str, warmup: usize, reps: usize, f: &mut dyn FnMut() -> Result<()>| match wanted(
            task,
        ) {
            true => median(warmup, reps, f),
            false => Ok(0.0),
        };

    let xe_step = timed("xe_step", warmup, reps, &mut || {
        on_rayon(&device, || {
            let (logp, mask) = model.token_logprobs(&x_xe, &targets, Some(&mut drop_rng))?;
            let loss = (logp.sum_all()?.neg()? / mask.sum_all()?.to_scalar::<f32>()? as f64)?;
            let mut grads = loss.backward()?;
            clip_grad_norm(&mut grads, &vars, 2.0)?;
            opt.step(&grads, 5e-4)?;
            Ok(())
        })
    })?;

    let decoder = model.decoder()?;
    let sample = |n: usize| SampleOptions {
        n_per_input: n,
        sampling: Sampling::default(),
        bad_endings: caprl_model::model::BadEndings::none(),
        max_len: t,
    };
    let mut sample_rng = CaprlRng::new(4);
    let greedy = timed("greedy", warmup, reps, &mut || {
        decoder.greedy(&x_dec, t)?;
        Ok(())
    })?;
    let sample_5 = timed("sample_5", warmup, reps, &mut || {
        decoder.sample(&x_dec, &sample(5), &mut sample_rng)?;
        Ok(())
    })?;
    let beam = BeamOptions::plain(5, t);
    let beam_5 = timed("beam_5", warmup, reps, &mut || {
        decoder.beam(&x_dec, &beam)?;
        Ok(())
    })?;
    let greedy_uncached = timed("greedy_uncached", warmup.min(1), reps.min(3), &mut || {
        on_rayon(&device, || uncached_greedy(&model, &x_dec, t))
    })?;

    let snapshot = model.to_safetensors()?;
    let snapshot_encode = timed("snapshot_encode", warmup, reps, &mut || {
        model.to_safetensors()?;
        Ok(())
    })?;
    let snapshot_load = timed("snapshot_load", warmup, reps, &mut || {
        Captioner::from_safetensors(&snapshot, &cfg, &device)?;
        Ok(())
    })?;
    let decoder_prep = timed("decoder_prep", warmup, reps, &mut || {
        model.decoder()?;
        Ok(())
    })?;

    let tokens = [
        ("xe_step", s.xe_rows * (t + 1)),
        ("greedy", s.dec_images * t),
        ("sample_5", 5 * s.dec_images * t),
        ("beam_5", 5 * s.dec_images * t),
        ("greedy_uncached", s.dec_images * t),
    ]
    .into_iter()
    .collect();
    let gflop = task_gflop(&s);
    Ok(Row {
        source: "caprl",
        simd: caprl_kernels::fastmath::simd().name(),
        model: "transformer",
        shape: which,
        threads,
        xe_rows: s.xe_rows,
        dec_images: s.dec_images,
        max_len: t,
        xe_step,
        greedy,
        sample_5,
        beam_5,
        greedy_uncached,
        snapshot_encode,
        snapshot_load,
        decoder_prep,
        tokens,
        gflop,
        peak_gflops: 0.0,
    })
}

/// GFLOP of one run of each task whose work is counted, at shape `s`.
fn task_gflop(s: &Shape) -> std::collections::BTreeMap<&'static str, f64> {
    let dims = Dims::new(&s.model, s.regions, s.att_dim, s.vocab);
    let (t, xe_images) = (s.max_len, s.xe_rows / s.refs_per_image);
    [
        ("xe_step", dims.xe_step(xe_images, s.xe_rows, t + 1)),
        ("greedy", dims.decode(s.dec_images, 1, t)),
        ("sample_5", dims.decode(s.dec_images, 5, t)),
        ("beam_5", dims.decode(s.dec_images, 5, t)),
    ]
    .into_iter()
    .map(|(task, flops)| (task, flops / 1e9))
    .collect()
}

/// Random images: the XE step's (each image repeated for its references, as the learner lays
/// them out) and the decodes'.
pub(super) fn random_images(
    s: &Shape,
    cfg: &CaptionerConfig,
    device: &Device,
) -> Result<(Inputs, Inputs)> {
    let mut rng = CaprlRng::new(1);
    let mut images = |n: usize| -> Result<Inputs> {
        let fc: Vec<f32> = (0..n * s.att_dim)
            .map(|_| rng.uniform_open() as f32)
            .collect();
        let att: Vec<f32> = (0..n * s.regions * s.att_dim)
            .map(|_| rng.uniform_open() as f32)
            .collect();
        Ok(Inputs::from_host(&fc, Some(&att), n, cfg, device)?)
    };
    let xe_images = s.xe_rows / s.refs_per_image;
    let rows: Vec<usize> = (0..xe_images)
        .flat_map(|i| std::iter::repeat_n(i, s.refs_per_image))
        .collect();
    let x_xe = images(xe_images)?.select_rows(&rows)?;
    Ok((x_xe, images(s.dec_images)?))
}

/// Greedy decoding without a cache: every step runs the whole decoder over the prefix (the
/// teacher-forced pass, detached inputs) and takes the last position's argmax.
fn uncached_greedy(model: &Captioner, x: &Inputs, max_len: usize) -> Result<()> {
    let b = x.batch_size()?;
    let mut prefix: Vec<Vec<u32>> = vec![Vec::new(); b];
    for step in 0..=max_len {
        // The last position's target is a placeholder: only its distribution is read.
        let seqs: Vec<Vec<u32>> = prefix
            .iter()
            .map(|p| p.iter().copied().chain([EOS]).collect())
            .collect();
        let toks = batch_tokens(&seqs, x.fc.device())?;
        let full = model.teacher_forced(x, &toks, None)?.logprobs_full.detach();
        let last = full.narrow(1, step, 1)?.squeeze(1)?;
        let next = last.argmax(candle_core::D::Minus1)?.to_vec1::<u32>()?;
        if step < max_len {
            for (p, w) in prefix.iter_mut().zip(next) {
                p.push(w);
            }
        }
    }
    Ok(())
}
