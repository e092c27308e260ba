//! Learning-rate schedules (`[optim] schedule`).

/// How the learning rate changes over training.
#[derive(Debug, Clone, PartialEq)]
pub enum Schedule {
    /// `lr` throughout.
    Constant { lr: f64 },
    /// `lr · rate^⌊epoch / every⌋` (self-critical.pytorch's step decay).
    Step { lr: f64, every: u64, rate: f64 },
    /// Linear warmup over `warmup` steps to `lr`, then `lr · ½(1 + cos(π p))` with
    /// `p = (step - warmup) / (total - warmup)` clamped to `[0, 1]`.
    Cosine { lr: f64, warmup: u64, total: u64 },
    /// The Transformer's schedule (Vaswani et al. 2017; self-critical.pytorch's `NoamOpt`):
    /// `factor · d_model^(−1/2) · min(s^(−1/2), s · warmup^(−3/2))` at step `s = step + 1`,
    /// rising linearly for `warmup` steps to its peak `factor / √(d_model · warmup)`, then
    /// falling as `1/√s`.
    Noam {
        factor: f64,
        d_model: u64,
        warmup: u64,
    },
}

impl Schedule {
    /// The learning rate for optimizer step `step` (0-based) in epoch `epoch` (0-based).
    pub fn lr(&self, step: u64, epoch: u64) -> f64 {
        match *self {
            Schedule::Constant { lr } => lr,
            Schedule::Step { lr, every, rate } => lr * rate.powi((epoch / every.max(1)) as i32),
            Schedule::Cosine { lr, warmup, total } => {
                if step < warmup {
                    return lr * (step + 1) as f64 / warmup as f64;
                }
                let span = total.saturating_sub(warmup).max(1) as f64;
                let p = ((step - warmup) as f64 / span).clamp(0.0, 1.0);
                lr * 0.5 * (1.0 + (std::f64::consts::PI * p).cos())
            }
            Schedule::Noam {
                factor,
                d_model,
                warmup,
            } => {
                let s = (step + 1) as f64;
                let w = warmup.max(1) as f64;
                factor * (d_model.max(1) as f64).powf(-0.5) * s.powf(-0.5).min(s * w.powf(-1.5))
            }
        }
    }
}
