//! `caprl selftest`: does a device compute what the CPU computes?
//!
//! GPU time is rare and short, so one command must tell within minutes whether a device gives
//! the project's results. On tiny models of each kind (fc/GRU, att/LSTM two layers, crnn) it
//! compares the device with the CPU reference (f32, the CPU's own kernels): token log-probs,
//! every parameter's gradient, the global gradient norm, one AdamW step from the same gradients, greedy tokens, a
//! snapshot saved on the device and loaded on the CPU, and two training runs from one seed,
//! stepped from alternating threads, which must give byte-identical weights (work queued from
//! different threads must stay in order). On the CPU the subject is the generic-ops mode (the
//! ops CUDA runs, see [`caprl_kernels::kernels_enabled`]), so the same command runs in CI, and
//! [`run_levels`] compares the kernels at every vector level of the CPU (`CAPRL_SIMD`) with
//! the baseline build the same way.

mod checks;

use candle_core::Device;

use self::checks::{Mode, Sides};
use crate::model::ModelError;
use crate::optim::OptimError;
use caprl_kernels::fastmath::{set_simd, Simd};
use caprl_kernels::set_generic_ops;

/// What to compare and how closely.
#[derive(Debug, Clone, Copy)]
pub struct SelftestOptions {
    /// Largest allowed difference, relative to the largest magnitude of the reference values
    /// (at least 1): `|device − cpu| ≤ tolerance · max(1, max |cpu|)`.
    pub tolerance: f64,
    /// Training steps of each of the two identical-seed runs.
    pub train_steps: usize,
    /// Seed of the weights, inputs and dropout masks.
    pub seed: u64,
}

impl Default for SelftestOptions {
    fn default() -> Self {
        Self {
            tolerance: 1e-4,
            train_steps: 4,
            seed: 7,
        }
    }
}

/// One comparison's outcome.
#[derive(Debug, Clone)]
pub struct Comparison {
    /// Model and quantity, e.g. `fc-gru token log-probs`.
    pub name: String,
    /// The largest difference seen (absolute; 0 for exact checks that passed).
    pub largest: f64,
    /// The largest difference allowed (absolute).
    pub allowed: f64,
    /// Where the largest difference is (a parameter name, a row), or what differed.
    pub detail: String,
}

impl Comparison {
    /// Whether the difference is within what is allowed.
    pub fn passed(&self) -> bool {
        self.largest <= self.allowed
    }
}

/// Every comparison of one self-test.
#[derive(Debug, Clone)]
pub struct Report {
    /// The device under test, e.g. `cuda:0` or `cpu (generic ops)`.
    pub subject: String,
    pub checks: Vec<Comparison>,
}

impl Report {
    /// Whether every check passed.
    pub fn passed(&self) -> bool {
        self.checks.iter().all(Comparison::passed)
    }
}

/// Why the self-test could not run (a failed comparison is a [`Report`], not an error).
#[derive(Debug, thiserror::Error)]
pub enum SelftestError {
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error(transparent)]
    Optim(#[from] OptimError),
    #[error("tensor error: {0}")]
    Candle(#[from] candle_core::Error),
    #[error("self-test option {0}")]
    Option(String),
    #[error(transparent)]
    Simd(#[from] caprl_kernels::fastmath::SimdError),
}

pub(crate) type Result<T> = std::result::Result<T, SelftestError>;

/// Runs every check of `device` against the CPU. Sets the process-wide generic-ops mode while
/// it runs (kernels for the reference, generic ops for the subject) and restores the
/// environment's afterwards: do not run model work on other threads meanwhile.
pub fn run(device: &Device, opts: &SelftestOptions) -> Result<Report> {
    let level = caprl_kernels::fastmath::simd();
    let sides = Sides {
        reference: Mode {
            generic_ops: false,
            level,
        },
        subject: Mode {
            generic_ops: true,
            level,
        },
    };
    let subject = if device.is_cpu() {
        "cpu (generic ops)".to_string()
    } else {
        format!("{:?}", device.location())
    };
    compare(device, sides, subject, opts)
}

/// Runs every check of the CPU's kernels at each vector level this CPU has above the baseline
/// against the same kernels at the baseline level (`CAPRL_SIMD=baseline`); an empty report
/// where the CPU has no such level. Sets the process-wide level while it runs and restores the
/// environment's afterwards.
pub fn run_levels(opts: &SelftestOptions) -> Result<Report> {
    let baseline = Mode {
        generic_ops: false,
        level: Simd::Baseline,
    };
    let mut checks = Vec::new();
    let levels: Vec<Simd> = Simd::available()
        .into_iter()
        .filter(|&l| l != Simd::Baseline)
        .collect();
    for &level in &levels {
        let sides = Sides {
            reference: baseline,
            subject: Mode {
                generic_ops: false,
                level,
            },
        };
        let report = compare(&Device::Cpu, sides, level.name().into(), opts)?;
        checks.extend(report.checks.into_iter().map(|mut c| {
            c.name = format!("{level}: {}", c.name);
            c
        }));
    }
    let names: Vec<&str> = levels.iter().map(|l| l.name()).collect();
    Ok(Report {
        subject: format!("cpu kernels at {}", names.join(", ")),
        checks,
    })
}

/// Every check of every tiny model on `device` between the two sides; restores the
/// environment's generic-ops mode and level afterwards.
fn compare(
    device: &Device,
    sides: Sides,
    subject: String,
    opts: &SelftestOptions,
) -> Result<Report> {
    if !(opts.tolerance >= 0.0 && opts.tolerance.is_finite()) {
        return Err(SelftestError::Option(format!(
            "tolerance = {}: give a finite number >= 0, e.g. 1e-4",
            opts.tolerance
        )));
    }
    if opts.train_steps == 0 {
        return Err(SelftestError::Option(
            "train steps = 0: the runs need at least one step to compare".into(),
        ));
    }
    let out = (|| {
        let mut all = Vec::new();
        for model in checks::tiny_models() {
            all.extend(checks::compare_model(&model, device, sides, opts)?);
        }
        Ok(Report {
            subject,
            checks: all,
        })
    })();
    set_generic_ops(None);
    set_simd(None)?;
    out
}
