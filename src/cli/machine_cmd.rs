//! `caprl machine [--json]`: the machine a figure was made on — CPU model, cores, the SIMD level
//! the kernels run at (and the widest this CPU has), whether this binary has CUDA, the commit
//! and the date. Results scripts put it in every results file; docs print it beside every
//! figure.

use anyhow::Result;
use caprl_kernels::fastmath::{simd, Simd};
use serde::Serialize;

use super::write_stdout;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Print JSON instead of one line.
    #[arg(long)]
    pub json: bool,
}

#[derive(Serialize)]
struct Machine {
    cpu: String,
    cores: usize,
    /// The level the kernels run at (`CAPRL_SIMD` or the widest detected).
    simd: &'static str,
    /// The widest level this CPU has.
    simd_detected: &'static str,
    /// `cuda` when this binary was built with it (a GPU is then named by `--device cuda:N`).
    gpu_build: Option<&'static str>,
    os: &'static str,
    caprl: &'static str,
    date: String,
}

/// The CPU's model name from `/proc/cpuinfo` (the architecture elsewhere).
fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, name)| name.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string())
}

/// Today's date (UTC) as `YYYY-MM-DD`, from the system clock (civil-from-days, no time zone
/// database needed).
fn today() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    let z = secs.div_euclid(86_400) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

pub fn run(args: Args) -> Result<()> {
    let machine = Machine {
        cpu: cpu_model(),
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        simd: simd().name(),
        simd_detected: Simd::detected().name(),
        gpu_build: cfg!(feature = "cuda").then_some("cuda"),
        os: std::env::consts::OS,
        caprl: env!("CARGO_PKG_VERSION"),
        date: today(),
    };
    let text = match args.json {
        true => serde_json::to_string_pretty(&machine)?,
        false => format!(
            "{}, {} cores, SIMD {} (widest {}), {}, {}",
            machine.cpu,
            machine.cores,
            machine.simd,
            machine.simd_detected,
            machine
                .gpu_build
                .map_or("no CUDA build".into(), |g| format!("{g} build")),
            machine.date
        ),
    };
    write_stdout(&format!("{text}\n"))
}
