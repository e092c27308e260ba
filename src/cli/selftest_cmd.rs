//! `caprl selftest`: the device's results against the CPU's on tiny models, pass or fail with
//! the largest differences (the comparisons are `caprl_common::selftest`).

use anyhow::{Context, Result};
use caprl_common::model::parse_device;
use caprl_common::selftest::{self, SelftestOptions};

use super::write_stdout;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Device under test: cuda:N, or cpu (then the CPU's generic ops, the ones CUDA runs, are
    /// compared with its own kernels).
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// Largest allowed difference, relative to the largest reference magnitude (at least 1).
    #[arg(long, default_value_t = SelftestOptions::default().tolerance)]
    pub tolerance: f64,
    /// Training steps of each of the two identical-seed runs.
    #[arg(long, default_value_t = SelftestOptions::default().train_steps)]
    pub steps: usize,
}

pub fn run(args: Args) -> Result<()> {
    let device = parse_device(&args.device)?;
    let opts = SelftestOptions {
        tolerance: args.tolerance,
        train_steps: args.steps,
        ..SelftestOptions::default()
    };
    let started = std::time::Instant::now();
    let report = selftest::run(&device, &opts)
        .with_context(|| format!("running the self-test on {}", args.device))?;
    let width = report
        .checks
        .iter()
        .map(|c| c.name.len())
        .max()
        .unwrap_or(0);
    let mut out = format!(
        "selftest: {} against the CPU (f32, its own kernels)\n",
        report.subject
    );
    for c in &report.checks {
        out.push_str(&format!(
            "{}  {:<width$}  largest {:<9.3e} allowed {:<9.3e} {}\n",
            if c.passed() { "pass" } else { "FAIL" },
            c.name,
            c.largest,
            c.allowed,
            c.detail
        ));
    }
    let failed = report.checks.iter().filter(|c| !c.passed()).count();
    let total = report.checks.len();
    let secs = started.elapsed().as_secs_f64();
    if failed == 0 {
        out.push_str(&format!("selftest: pass ({total} checks, {secs:.1} s)\n"));
        write_stdout(&out)
    } else {
        write_stdout(&out)?;
        anyhow::bail!(
            "selftest: {failed} of {total} checks failed on {}: the device does not compute \
             what the CPU computes (see the FAIL lines above)",
            report.subject
        )
    }
}
