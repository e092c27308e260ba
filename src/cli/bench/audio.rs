//! `caprl bench audio`: the audio path's speed.
//!
//! 1. Front end: seconds of audio per second of compute for the 64-band log-mel alone (16 kHz
//!    input) and for the whole path from a 44.1 kHz 16-bit WAV file (decode, resample to
//!    16 kHz, log-mel).
//! 2. CRNN encoder forward per clip (batch 1, running statistics, no gradients) at the paper's
//!    size (width 128) on a clip of `--seconds`, and one training pass (forward + backward
//!    through encoder and decoder) at batch 32 of the width given by `--train-width`.
//!
//! Threads: candle's CPU kernels read `RAYON_NUM_THREADS` at each call; every measurement is
//! taken with 1 and with 2. Each figure is the median of `--reps` runs after one warm-up.

use std::time::Instant;

use anyhow::Result;
use caprl_data::audio::{read_wav, resample, write_wav_i16, LogMel, MelConfig};
use caprl_model::model::{
    batch_tokens, crnn_param_count, Captioner, CaptionerConfig, Device, Inputs, ModelKind,
};

#[derive(Debug, clap::Args)]
pub struct AudioBenchArgs {
    /// Clip length in seconds for the front end and the per-clip encoder forward.
    #[arg(long, default_value_t = 10.0)]
    pub seconds: f64,
    /// Repetitions per measurement (median reported).
    #[arg(long, default_value_t = 5)]
    pub reps: usize,
    /// CRNN width of the training-pass measurement (batch 32, 2 s clips).
    #[arg(long, default_value_t = 32)]
    pub train_width: usize,
}

fn median_secs(reps: usize, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    f()?;
    let mut t = Vec::with_capacity(reps);
    for _ in 0..reps.max(1) {
        let start = Instant::now();
        f()?;
        t.push(start.elapsed().as_secs_f64());
    }
    t.sort_by(f64::total_cmp);
    Ok(t[t.len() / 2])
}

fn set_threads(n: usize) {
    // Read by candle at each kernel call; nothing else in this process runs concurrently.
    std::env::set_var("RAYON_NUM_THREADS", n.to_string());
}

fn scene(sr: u32, seconds: f64) -> Vec<f64> {
    let n = (sr as f64 * seconds) as usize;
    let mut state = 12345u64;
    (0..n)
        .map(|i| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let noise = ((state >> 33) as f64 / (1u64 << 31) as f64) - 0.5;
            let t = i as f64 / sr as f64;
            0.3 * (2.0 * std::f64::consts::PI * 440.0 * t).sin() + 0.05 * noise
        })
        .collect()
}

fn crnn_model(width: usize, frames: usize) -> Result<(Captioner, CaptionerConfig)> {
    let mut cfg = CaptionerConfig::new(ModelKind::Crnn, 80, 64, Some((frames, 64)));
    cfg.model.crnn_width = width;
    cfg.model.embed = 64;
    cfg.model.hidden = 128;
    cfg.max_len = 20;
    let m = Captioner::new(&cfg, &Device::Cpu, 0)?;
    Ok((m, cfg))
}

fn mel_inputs(cfg: &CaptionerConfig, b: usize) -> Result<Inputs> {
    let (frames, mels) = cfg.att.unwrap_or((1, 64));
    let att: Vec<f32> = (0..b * frames * mels)
        .map(|i| ((i * 7919 % 101) as f32 - 50.0) / 25.0)
        .collect();
    let fc = vec![0f32; b * cfg.fc_dim];
    Ok(Inputs::from_host(&fc, Some(&att), b, cfg, &Device::Cpu)?)
}

pub fn run(args: AudioBenchArgs) -> Result<()> {
    let mel = MelConfig::default();
    let front = LogMel::new(mel).map_err(anyhow::Error::msg)?;
    let x16 = scene(16_000, args.seconds);
    let dir = tempfile::tempdir()?;
    let wav = dir.path().join("clip44k.wav");
    write_wav_i16(&wav, &scene(44_100, args.seconds), 44_100)?;
    let frames = mel.frames(x16.len());
    let (paper, paper_cfg) = crnn_model(128, frames)?;
    let one = mel_inputs(&paper_cfg, 1)?;
    let mel1 = one.att.clone().unwrap_or(one.fc.clone());
    let train_frames = mel.frames(32_000);
    let (small, small_cfg) = crnn_model(args.train_width, train_frames)?;
    let batch = mel_inputs(&small_cfg, 32)?;
    let seqs: Vec<Vec<u32>> = (0..32)
        .map(|i| {
            (0..10)
                .map(|t| 4 + ((i * 7 + t * 3) % 70) as u32)
                .chain([2])
                .collect()
        })
        .collect();
    let seqs = batch_tokens(&seqs, &Device::Cpu)?;

    println!(
        "caprl bench audio: {:.0} s clips ({frames} frames), CRNN width 128 = {} encoder parameters (paper: 679k)\n{}",
        args.seconds,
        crnn_param_count(128, 64),
        caprl_kernels::fastmath::describe()
    );
    println!(
        "{:<58} {:>14} {:>14}",
        "measurement", "1 thread", "2 threads"
    );
    let mut rows: Vec<(String, [f64; 2], &str)> = Vec::new();
    let mut cells = [[0.0; 2]; 4];
    for (k, threads) in [1usize, 2].into_iter().enumerate() {
        set_threads(threads);
        cells[0][k] = args.seconds
            / median_secs(args.reps, || {
                std::hint::black_box(front.compute(&x16));
                Ok(())
            })?;
        cells[1][k] = args.seconds
            / median_secs(args.reps, || {
                let clip = read_wav(&wav)?;
                let y = resample(&clip.samples, clip.sample_rate, 16_000);
                std::hint::black_box(front.compute(&y));
                Ok(())
            })?;
        cells[2][k] = 1000.0
            * median_secs(args.reps, || {
                std::hint::black_box(paper.audio_encoding(&mel1)?);
                Ok(())
            })?;
        cells[3][k] = 1000.0
            * median_secs(args.reps, || {
                let (logp, _) = small.token_logprobs(&batch, &seqs, None)?;
                std::hint::black_box(logp.sum_all()?.backward()?);
                Ok(())
            })?;
    }
    rows.push(("log-mel, 16 kHz input".into(), cells[0], "s audio/s"));
    rows.push((
        "WAV 44.1 kHz -> decode + resample + log-mel".into(),
        cells[1],
        "s audio/s",
    ));
    rows.push((
        format!("CRNN-128 forward, 1 clip of {:.0} s", args.seconds),
        cells[2],
        "ms",
    ));
    rows.push((
        format!(
            "XE pass (fwd+bwd), CRNN-{} + GRU-128, batch 32 x 2 s",
            args.train_width
        ),
        cells[3],
        "ms",
    ));
    for (name, v, unit) in rows {
        println!(
            "{:<58} {:>9.1} {:<4} {:>9.1} {:<4}",
            name,
            v[0],
            unit_short(unit),
            v[1],
            unit_short(unit)
        );
    }
    Ok(())
}

fn unit_short(unit: &str) -> &str {
    if unit == "ms" {
        "ms"
    } else {
        "x"
    }
}
