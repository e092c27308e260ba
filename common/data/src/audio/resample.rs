//! Band-limited resampling with a Hann-windowed sinc kernel.
//!
//! `y[n] = Σ_k x[k] · c · sinc(c·(t_n − k)) · w(t_n − k)`, `t_n = n · f_in / f_out`,
//! cutoff `c = min(1, f_out / f_in)` (a low-pass below the new Nyquist frequency when
//! downsampling), `w` a Hann window over `±ZEROS / c` input samples.

use std::f64::consts::PI;

/// Zero crossings of the sinc kernel on each side.
const ZEROS: f64 = 16.0;

/// `x` at `from` Hz resampled to `to` Hz; the output has `round(len · to / from)` samples.
pub fn resample(x: &[f64], from: u32, to: u32) -> Vec<f64> {
    if from == to || x.is_empty() {
        return x.to_vec();
    }
    let ratio = to as f64 / from as f64;
    let cutoff = ratio.min(1.0);
    let half = ZEROS / cutoff;
    let n_out = (x.len() as f64 * ratio).round() as usize;
    (0..n_out)
        .map(|n| {
            let t = n as f64 / ratio;
            let lo = ((t - half).ceil().max(0.0)) as usize;
            let hi = ((t + half).floor() as usize).min(x.len() - 1);
            let mut acc = 0.0;
            for (k, &xk) in x.iter().enumerate().take(hi + 1).skip(lo) {
                let d = t - k as f64;
                let w = 0.5 + 0.5 * (PI * d / half).cos();
                acc += xk * cutoff * sinc(cutoff * d) * w;
            }
            acc
        })
        .collect()
}

fn sinc(x: f64) -> f64 {
    if x.abs() < 1e-12 {
        1.0
    } else {
        (PI * x).sin() / (PI * x)
    }
}
