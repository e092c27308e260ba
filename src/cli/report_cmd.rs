//! `caprl report RUN_DIR [RUN_DIR...]`: draw the curves of one or more runs
//! into one self-contained HTML page (and optionally PNGs).

use super::outln;
use super::output_paths::{check_output, Input};
use std::path::PathBuf;

use anyhow::Context;
use caprl_report::{write_report, PngFont, ReportOptions};

/// Arguments of `caprl report`.
#[derive(Debug, Clone, clap::Args)]
pub struct ReportArgs {
    /// Run directories written by `caprl train` / `caprl run` (each holds run.jsonl);
    /// several are overlaid, one colour per run.
    #[arg(required = true, value_name = "RUN_DIR")]
    pub run_dirs: Vec<PathBuf>,
    /// The HTML file to write.
    #[arg(long, default_value = "report.html", value_name = "FILE")]
    pub out: PathBuf,
    /// Also write one PNG per plot into this directory.
    #[arg(long, value_name = "DIR")]
    pub png: Option<PathBuf>,
    /// Moving-average weight of the step curves, in [0, 1) as TensorBoard's
    /// smoothing slider; the raw curve stays faint behind. 0 = raw curves only.
    #[arg(long, default_value_t = 0.6, value_name = "W")]
    pub smoothing: f64,
    /// TrueType font for PNG text (default: CAPRL_REPORT_FONT, then common system fonts).
    #[arg(long, value_name = "FILE.ttf", requires = "png")]
    pub png_font: Option<PathBuf>,
}

/// Runs `caprl report`.
pub fn run(args: ReportArgs) -> anyhow::Result<()> {
    let runs: Vec<Input> = args
        .run_dirs
        .iter()
        .map(|dir| Input {
            what: "run directory",
            path: dir,
        })
        .collect();
    check_output("--out", &args.out, &runs, &["report.html"])?;
    let options = ReportOptions {
        run_dirs: args.run_dirs,
        out: args.out,
        png_dir: args.png,
        png_font: args.png_font.map_or(PngFont::Search, PngFont::File),
        smoothing: args.smoothing,
    };
    let outcome = write_report(&options).context("caprl report failed")?;
    for note in &outcome.notes {
        eprintln!("note: {note}");
    }
    outln!("wrote {} ({} plots)", outcome.html.display(), outcome.plots)?;
    if let Some(dir) = &options.png_dir {
        outln!(
            "wrote {} PNG files to {}",
            outcome.pngs.len(),
            dir.display()
        )?;
    }
    Ok(())
}
