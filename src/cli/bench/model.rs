//! `caprl bench model`: the captioner's speed on one device, per compute dtype, batch size and
//! hidden size.
//!
//! Columns, each the mean of `--iters` runs after one warm-up run:
//! - XE step: teacher-forced forward + backward + global-norm clip + AdamW on `B` captions.
//! - SCST step: rollouts (5 samples per image and the greedy baseline) + the policy-gradient
//!   update on the `5B` samples. Rewards are not scored: CIDEr runs on the host, the same on
//!   every device, and `caprl bench transport` measures the reward workers.
//! - greedy / sample / beam tokens/s: decoder steps × live rows per second (beam: every beam
//!   counts), 5 samples per image and beam width 5, on weights prepared once (a
//!   [`caprl_model::model::Decoder`], as an actor holds one per policy version).
//! - snapshot: serialising the weights to safetensors (the policy snapshot actors load); the
//!   weights are f32 whatever the compute dtype.
//!
//! The model is the `fc` GRU with embed 256, fc dim 512, vocabulary `--vocab` and captions of
//! `--max-len` words; EOS is suppressed so every sequence runs to the length limit. Weights and
//! inputs are random (speed does not depend on them).

use std::time::Instant;

use anyhow::{Context, Result};
use caprl_learner::objective::xe;
use caprl_learner::pg;
use caprl_model::model::{
    batch_tokens, BeamOptions, CaprlRng, Captioner, CaptionerConfig, DType, Device, Inputs,
    ModelKind, SampleOptions, Tensor, EOS,
};
use caprl_model::optim::{clip_grad_norm, AdamW, AdamWParams};
use caprl_wire::Sampling;
use serde::Serialize;

use crate::cli::write_stdout;

/// Samples per image in the SCST step and the sample column; beam width of the beam column.
const SAMPLES: usize = 5;
const BEAM: usize = 5;
const FC_DIM: usize = 512;
const EMBED: usize = 256;

#[derive(Debug, Clone, clap::Args)]
pub struct ModelArgs {
    /// Compute device: cpu or cuda:N.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// Compute dtypes, comma-separated: f32, bf16, f16.
    #[arg(long, value_delimiter = ',', default_value = "f32,bf16")]
    pub dtype: Vec<String>,
    /// Batch sizes (images), comma-separated. The full grid is 32,128,512.
    #[arg(long, value_delimiter = ',', default_value = "32,128")]
    pub batch: Vec<usize>,
    /// Decoder hidden sizes (the Transformer's d_model), comma-separated. The full grid is
    /// 512,1024.
    #[arg(long, value_delimiter = ',', default_value = "512")]
    pub hidden: Vec<usize>,
    /// Model: `fc` (the GRU captioner) or `transformer` (2 + 2 layers, d_model = hidden,
    /// hidden / 64 heads, d_ff = 4 · hidden, over the fc feature as one region).
    #[arg(long, default_value = "fc")]
    pub kind: String,
    /// Timed runs per measurement (after one warm-up run).
    #[arg(long, default_value_t = 2)]
    pub iters: usize,
    /// Vocabulary size.
    #[arg(long, default_value_t = 1000)]
    pub vocab: usize,
    /// Maximum caption words.
    #[arg(long, default_value_t = 16)]
    pub max_len: usize,
    /// Print JSON rows instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// One line of the table: one dtype, batch size and hidden size.
#[derive(Debug, Clone, Serialize)]
pub struct ModelBenchRow {
    pub device: String,
    /// The CPU kernels' vector level (`CAPRL_SIMD`).
    pub simd: &'static str,
    pub dtype: String,
    pub batch: usize,
    pub hidden: usize,
    pub xe_step_ms: f64,
    pub scst_step_ms: f64,
    pub greedy_tok_s: f64,
    pub sample_tok_s: f64,
    pub beam_tok_s: f64,
    pub snapshot_ms: f64,
    pub snapshot_mb: f64,
}

pub fn run(args: ModelArgs) -> Result<()> {
    let rows = model_rows(&args, |row| {
        if !args.json {
            eprintln!(
                "  {} b={} h={}: xe {:.1} ms, scst {:.1} ms",
                row.dtype, row.batch, row.hidden, row.xe_step_ms, row.scst_step_ms
            );
        }
    })?;
    if args.json {
        write_stdout(&format!("{}\n", serde_json::to_string_pretty(&rows)?))
    } else {
        write_stdout(&table(&args, &rows))
    }
}

/// Runs every (dtype, batch, hidden) of `args` and returns the rows; `progress` sees each row
/// as it is done.
pub fn model_rows(
    args: &ModelArgs,
    mut progress: impl FnMut(&ModelBenchRow),
) -> Result<Vec<ModelBenchRow>> {
    let device = caprl_model::model::parse_device(&args.device)?;
    let dtypes = args
        .dtype
        .iter()
        .map(|d| parse_dtype(d))
        .collect::<Result<Vec<_>>>()?;
    anyhow::ensure!(args.iters >= 1, "--iters must be >= 1");
    let mut rows = Vec::new();
    for &hidden in &args.hidden {
        for &batch in &args.batch {
            for (name, dtype) in &dtypes {
                let row =
                    measure(args, &device, name, *dtype, batch, hidden).with_context(|| {
                        format!("bench model: {name}, batch {batch}, hidden {hidden}")
                    })?;
                progress(&row);
                rows.push(row);
            }
        }
    }
    Ok(rows)
}

fn parse_dtype(s: &str) -> Result<(String, DType)> {
    let d: caprl_common::config::Dtype = s
        .parse()
        .map_err(|_| anyhow::anyhow!("--dtype {}: expected f32, bf16 or f16", s.trim()))?;
    Ok((s.trim().to_string(), d.into()))
}

/// Mean seconds of `iters` calls of `f` after one warm-up call; the device is synchronised
/// after each call so that queued GPU work is counted.
fn time(iters: usize, device: &Device, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    f()?;
    device.synchronize()?;
    let start = Instant::now();
    for _ in 0..iters {
        f()?;
        device.synchronize()?;
    }
    Ok(start.elapsed().as_secs_f64() / iters as f64)
}

fn measure(
    args: &ModelArgs,
    device: &Device,
    dtype_name: &str,
    dtype: DType,
    b: usize,
    hidden: usize,
) -> Result<ModelBenchRow> {
    let l = args.max_len;
    let cfg = bench_config(args, hidden, dtype)?;
    let model = Captioner::new(&cfg, device, 0)?;
    suppress_eos(&model)?;
    let (x, targets) = random_batch(&cfg, b, device)?;
    let mut opt = AdamW::new(model.varmap(), AdamWParams::default())?;
    let vars = opt.vars();
    let mut drop_rng = CaprlRng::new(2);
    let step = |loss: Tensor, opt: &mut AdamW| -> Result<()> {
        let mut grads = loss.backward()?;
        clip_grad_norm(&mut grads, &vars, 1.0)?;
        opt.step(&grads, 1e-5)?;
        Ok(())
    };

    let xe_s = time(args.iters, device, || {
        let tf = model.teacher_forced(&x, &targets, Some(&mut drop_rng))?;
        let mask = model.token_mask(&targets)?;
        step(xe::loss(&tf.logprobs_full, &targets, &mask, 0.0)?, &mut opt)
    })?;

    let sample_opts = SampleOptions {
        n_per_input: SAMPLES,
        sampling: Sampling::default(),
        bad_endings: caprl_model::model::BadEndings::none(),
        max_len: l,
    };
    let mut sample_rng = CaprlRng::new(3);
    let rows: Vec<usize> = (0..b)
        .flat_map(|i| std::iter::repeat_n(i, SAMPLES))
        .collect();
    let xs = x.select_rows(&rows)?;
    let scst_s = time(args.iters, device, || {
        // As an actor decodes a task: the weights prepared once for both decodes.
        let decoder = model.decoder()?;
        let samples = decoder.sample(&x, &sample_opts, &mut sample_rng)?;
        let _baseline = decoder.greedy(&x, l)?;
        let toks = batch_tokens(&samples.tokens, device)?;
        let tf = model.teacher_forced(&xs, &toks, None)?;
        let logp = tf
            .logprobs_full
            .gather(&toks.unsqueeze(2)?, 2)?
            .squeeze(2)?;
        let mask = model.token_mask(&toks)?;
        let advantages: Vec<f32> = (0..toks.dim(0)?)
            .map(|i| if i % 2 == 0 { 0.5 } else { -0.5 })
            .collect();
        step(
            pg::loss(&logp, &mask, &advantages, pg::LossNorm::Tokens)?,
            &mut opt,
        )
    })?;

    let steps = (l + 1) as f64;
    // Decoding rows: the weights prepared once, as an actor holds them for a policy version.
    let decoder = model.decoder()?;
    let greedy_s = time(args.iters, device, || {
        decoder.greedy(&x, l)?;
        Ok(())
    })?;
    let sample_s = time(args.iters, device, || {
        decoder.sample(&x, &sample_opts, &mut sample_rng)?;
        Ok(())
    })?;
    let beam_opts = BeamOptions {
        width: BEAM,
        max_len: l,
        length_norm: true,
        block_trigrams: false,
        groups: 1,
        diversity_lambda: 0.0,
        bad_endings: caprl_model::model::BadEndings::none(),
    };
    let beam_s = time(args.iters, device, || {
        decoder.beam(&x, &beam_opts)?;
        Ok(())
    })?;
    let mut snapshot_bytes = 0usize;
    let snapshot_s = time(args.iters, device, || {
        snapshot_bytes = model.to_safetensors()?.len();
        Ok(())
    })?;
    Ok(ModelBenchRow {
        device: args.device.clone(),
        simd: caprl_kernels::fastmath::simd().name(),
        dtype: dtype_name.to_string(),
        batch: b,
        hidden,
        xe_step_ms: xe_s * 1e3,
        scst_step_ms: scst_s * 1e3,
        greedy_tok_s: b as f64 * steps / greedy_s,
        sample_tok_s: (b * SAMPLES) as f64 * steps / sample_s,
        beam_tok_s: (b * BEAM) as f64 * steps / beam_s,
        snapshot_ms: snapshot_s * 1e3,
        snapshot_mb: snapshot_bytes as f64 / 1e6,
    })
}

/// The benchmarked model: `--kind` with `hidden` units (the Transformer's `d_model`, one head
/// per 64), computing in `dtype`.
fn bench_config(args: &ModelArgs, hidden: usize, dtype: DType) -> Result<CaptionerConfig> {
    let kind = match args.kind.as_str() {
        "fc" => ModelKind::Fc,
        "transformer" => ModelKind::Transformer,
        other => anyhow::bail!("--kind {other}: expected fc or transformer"),
    };
    let mut cfg = CaptionerConfig::new(kind, args.vocab.max(8), FC_DIM, None);
    cfg.model.hidden = hidden;
    cfg.model.d_model = hidden;
    cfg.model.heads = (hidden / 64).max(1);
    cfg.model.d_ff = 4 * hidden;
    cfg.model.embed = EMBED;
    cfg.max_len = args.max_len;
    cfg.model.dropout = 0.2;
    cfg.compute_dtype = dtype;
    Ok(cfg)
}

/// `b` random feature vectors and as many random captions of `cfg.max_len` words and EOS.
fn random_batch(cfg: &CaptionerConfig, b: usize, device: &Device) -> Result<(Inputs, Tensor)> {
    let mut rng = CaprlRng::new(1);
    let fc: Vec<f32> = (0..b * FC_DIM).map(|_| rng.uniform_open() as f32).collect();
    let x = Inputs::from_host(&fc, None, b, cfg, device)?;
    let seqs = random_captions(&mut rng, b, cfg.max_len, cfg.vocab_size);
    Ok((x, batch_tokens(&seqs, device)?))
}

/// `n` captions of `len` words drawn uniformly from the vocabulary's real words (ids 4 and
/// up), each ending with EOS.
pub(crate) fn random_captions(
    rng: &mut CaprlRng,
    n: usize,
    len: usize,
    vocab: usize,
) -> Vec<Vec<u32>> {
    (0..n)
        .map(|_| {
            let mut s: Vec<u32> = (0..len)
                .map(|_| 4 + (rng.next_u64() % (vocab as u64 - 4)) as u32)
                .collect();
            s.push(EOS);
            s
        })
        .collect()
}

/// Pushes EOS's logit bias far down so that every decode runs to the length limit.
pub(crate) fn suppress_eos(model: &Captioner) -> Result<()> {
    let data = model
        .varmap()
        .data()
        .lock()
        .map_err(|_| anyhow::anyhow!("the model's VarMap lock was poisoned"))?;
    let bias = data
        .get("logit.bias")
        .context("the model has no `logit.bias`")?;
    let mut b = bias.as_tensor().to_dtype(DType::F32)?.to_vec1::<f32>()?;
    b[EOS as usize] = -1e4;
    let t = Tensor::new(b, bias.device())?.to_dtype(bias.dtype())?;
    bias.set(&t)?;
    Ok(())
}

fn table(args: &ModelArgs, rows: &[ModelBenchRow]) -> String {
    let threads = std::env::var("RAYON_NUM_THREADS").unwrap_or_else(|_| "default".into());
    let mut out = format!(
        "caprl bench model --device {} --kind {} (vocab {}, max_len {}, embed {EMBED}, fc {FC_DIM}, {} iters, RAYON_NUM_THREADS={threads})\n{}\n",
        args.device,
        args.kind,
        args.vocab,
        args.max_len,
        args.iters,
        caprl_kernels::fastmath::describe()
    );
    out.push_str(
        "| dtype | batch | hidden | XE step ms | SCST step ms | greedy tok/s | sample tok/s | beam5 tok/s | snapshot ms (MB) |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in rows {
        out.push_str(&format!(
            "| {} | {} | {} | {:.1} | {:.1} | {:.0} | {:.0} | {:.0} | {:.1} ({:.1}) |\n",
            r.dtype,
            r.batch,
            r.hidden,
            r.xe_step_ms,
            r.scst_step_ms,
            r.greedy_tok_s,
            r.sample_tok_s,
            r.beam_tok_s,
            r.snapshot_ms,
            r.snapshot_mb
        ));
    }
    out
}
