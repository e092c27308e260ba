//! `caprl selftest`: the device's results against the CPU's on tiny models, pass or fail with
//! the largest differences (the comparisons are `caprl_model::selftest`).

use anyhow::{Context, Result};
use caprl_model::model::parse_device;
use caprl_model::selftest::{self, SelftestOptions};

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
    let mut reports = vec![(
        selftest::run(&device, &opts)
            .with_context(|| format!("running the self-test on {}", args.device))?,
        "the CPU (f32, its own kernels)",
    )];
    if device.is_cpu() {
        let levels = selftest::run_levels(&opts).context("comparing the CPU's SIMD levels")?;
        if !levels.checks.is_empty() {
            reports.push((levels, "the same kernels at the baseline level"));
        }
    }
    let mut out = String::new();
    let (mut failed, mut total) = (0, 0);
    for (report, against) in &reports {
        out.push_str(&format!("selftest: {} against {against}\n", report.subject));
        out.push_str(&lines(report));
        failed += report.checks.iter().filter(|c| !c.passed()).count();
        total += report.checks.len();
    }
    let secs = started.elapsed().as_secs_f64();
    if failed == 0 {
        out.push_str(&format!("selftest: pass ({total} checks, {secs:.1} s)\n"));
        write_stdout(&out)
    } else {
        write_stdout(&out)?;
        anyhow::bail!(
            "selftest: {failed} of {total} checks failed: {} does not compute what its reference \
             computes (see the FAIL lines above)",
            reports
                .iter()
                .filter(|(r, _)| !r.passed())
                .map(|(r, _)| r.subject.as_str())
                .collect::<Vec<_>>()
                .join(" and ")
        )
    }
}

/// One line per check: pass/FAIL, name, largest and allowed difference, detail.
fn lines(report: &selftest::Report) -> String {
    let width = report
        .checks
        .iter()
        .map(|c| c.name.len())
        .max()
        .unwrap_or(0);
    let mut out = String::new();
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
    out
}
