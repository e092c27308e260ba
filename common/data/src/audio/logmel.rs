//! Log-mel spectrogram (paper 000, "Data pre-processing"): 64 mel bands from a 2048-point FFT
//! of 40 ms Hann-windowed frames every 20 ms.
//!
//! Definition (the NumPy script `scripts/audio/logmel_reference.py` computes the same):
//! - `win = round(0.040·sr)`, `hop = round(0.020·sr)`; periodic Hann window
//!   `w[n] = 0.5 − 0.5·cos(2πn/win)`, zero-padded to `n_fft` in the middle;
//! - the signal is zero-padded by `n_fft/2` on both sides (centred frames), so a clip of `L`
//!   samples gives `1 + ⌊L/hop⌋` frames; frame `t` starts at `t·hop` of the padded signal;
//! - power spectrum `P_t[k] = |FFT(w·x_t)[k]|²`, `k = 0..n_fft/2`;
//! - mel filters on the HTK scale `m(f) = 2595·log10(1 + f/700)`: `n_mels + 2` points evenly
//!   spaced in mel over `[0, sr/2]`, triangles between neighbours, each scaled by
//!   `2/(f_{i+2} − f_i)` (Slaney area normalisation);
//! - `X[t, i] = ln(max(Σ_k M[i, k]·P_t[k], 1e-10))`.
//!
//! Computed in `f64` and returned as `f32`.

use std::f64::consts::PI;
use std::sync::Arc;

use realfft::num_complex::Complex;
use realfft::{RealFftPlanner, RealToComplex};

/// Log floor: `ln(1e-10)` for silent bands.
pub const LOG_FLOOR: f64 = 1e-10;

/// The front end's settings (paper defaults, resampled to 16 kHz unless configured).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MelConfig {
    /// Audio is resampled to this rate before analysis.
    pub sample_rate: u32,
    pub n_fft: usize,
    /// Window length in milliseconds.
    pub win_ms: f64,
    /// Hop in milliseconds.
    pub hop_ms: f64,
    pub n_mels: usize,
}

impl Default for MelConfig {
    fn default() -> Self {
        MelConfig {
            sample_rate: 16_000,
            n_fft: 2048,
            win_ms: 40.0,
            hop_ms: 20.0,
            n_mels: 64,
        }
    }
}

impl MelConfig {
    /// Window length in samples.
    pub fn win_length(&self) -> usize {
        (self.sample_rate as f64 * self.win_ms / 1000.0).round() as usize
    }

    /// Hop in samples.
    pub fn hop_length(&self) -> usize {
        (self.sample_rate as f64 * self.hop_ms / 1000.0).round() as usize
    }

    /// Frames of a clip of `samples` samples: `1 + ⌊samples/hop⌋`.
    pub fn frames(&self, samples: usize) -> usize {
        1 + samples / self.hop_length()
    }

    /// Why the settings cannot be used, if they cannot.
    pub fn check(&self) -> Result<(), String> {
        let (win, hop) = (self.win_length(), self.hop_length());
        if self.sample_rate < 1000 {
            return Err(format!("sample_rate {} is below 1000 Hz", self.sample_rate));
        }
        if self.n_fft < 16 || !self.n_fft.is_power_of_two() {
            return Err(format!("n_fft {} must be a power of two >= 16", self.n_fft));
        }
        if win == 0 || win > self.n_fft {
            return Err(format!(
                "window of {win} samples must be between 1 and n_fft = {}",
                self.n_fft
            ));
        }
        if hop == 0 {
            return Err("hop must be at least one sample".into());
        }
        if self.n_mels == 0 || self.n_mels > self.n_fft / 2 {
            return Err(format!(
                "n_mels {} must be between 1 and n_fft/2 = {}",
                self.n_mels,
                self.n_fft / 2
            ));
        }
        Ok(())
    }
}

fn hz_to_mel(f: f64) -> f64 {
    2595.0 * (1.0 + f / 700.0).log10()
}

fn mel_to_hz(m: f64) -> f64 {
    700.0 * (10f64.powf(m / 2595.0) - 1.0)
}

/// One mel band: its first FFT bin and the weights from there.
#[derive(Debug, Clone)]
struct Band {
    start: usize,
    weights: Vec<f64>,
}

/// A reusable log-mel extractor (window, filter bank and FFT plan built once).
pub struct LogMel {
    cfg: MelConfig,
    window: Vec<f64>,
    bands: Vec<Band>,
    fft: Arc<dyn RealToComplex<f64>>,
}

impl LogMel {
    /// Builds the extractor; `cfg` must pass [`MelConfig::check`].
    pub fn new(cfg: MelConfig) -> Result<Self, String> {
        cfg.check()?;
        let (n_fft, win) = (cfg.n_fft, cfg.win_length());
        let mut window = vec![0.0; n_fft];
        let offset = (n_fft - win) / 2;
        for n in 0..win {
            window[offset + n] = 0.5 - 0.5 * (2.0 * PI * n as f64 / win as f64).cos();
        }
        let sr = cfg.sample_rate as f64;
        let (m_lo, m_hi) = (hz_to_mel(0.0), hz_to_mel(sr / 2.0));
        let points: Vec<f64> = (0..cfg.n_mels + 2)
            .map(|i| mel_to_hz(m_lo + (m_hi - m_lo) * i as f64 / (cfg.n_mels + 1) as f64))
            .collect();
        let bins = n_fft / 2 + 1;
        let bands = (0..cfg.n_mels)
            .map(|i| {
                let (f0, f1, f2) = (points[i], points[i + 1], points[i + 2]);
                let norm = 2.0 / (f2 - f0);
                let all: Vec<f64> = (0..bins)
                    .map(|k| {
                        let f = k as f64 * sr / n_fft as f64;
                        let w = ((f - f0) / (f1 - f0)).min((f2 - f) / (f2 - f1));
                        w.max(0.0) * norm
                    })
                    .collect();
                let start = all.iter().position(|&w| w > 0.0).unwrap_or(0);
                let end = all.iter().rposition(|&w| w > 0.0).map_or(start, |e| e + 1);
                Band {
                    start,
                    weights: all[start..end].to_vec(),
                }
            })
            .collect();
        let fft = RealFftPlanner::<f64>::new().plan_fft_forward(n_fft);
        Ok(LogMel {
            cfg,
            window,
            bands,
            fft,
        })
    }

    pub fn config(&self) -> &MelConfig {
        &self.cfg
    }

    /// The log-mel spectrogram of `x` (already at `sample_rate`), row-major `[frames, n_mels]`.
    pub fn compute(&self, x: &[f64]) -> Vec<f32> {
        let (n_fft, hop) = (self.cfg.n_fft, self.cfg.hop_length());
        let pad = n_fft / 2;
        let frames = self.cfg.frames(x.len());
        let mut out = Vec::with_capacity(frames * self.cfg.n_mels);
        let mut input = self.fft.make_input_vec();
        let mut spectrum: Vec<Complex<f64>> = self.fft.make_output_vec();
        let mut scratch = self.fft.make_scratch_vec();
        let mut power = vec![0.0; n_fft / 2 + 1];
        for t in 0..frames {
            // Padded index p maps to x[p - pad].
            let start = (t * hop) as isize - pad as isize;
            for (n, slot) in input.iter_mut().enumerate() {
                let i = start + n as isize;
                let v = if i >= 0 && (i as usize) < x.len() {
                    x[i as usize]
                } else {
                    0.0
                };
                *slot = v * self.window[n];
            }
            // Lengths are the plan's own, so the transform cannot fail.
            let _ = self
                .fft
                .process_with_scratch(&mut input, &mut spectrum, &mut scratch);
            for (p, c) in power.iter_mut().zip(&spectrum) {
                *p = c.norm_sqr();
            }
            for band in &self.bands {
                let e: f64 = band
                    .weights
                    .iter()
                    .zip(&power[band.start..])
                    .map(|(w, p)| w * p)
                    .sum();
                out.push(e.max(LOG_FLOOR).ln() as f32);
            }
        }
        out
    }
}
