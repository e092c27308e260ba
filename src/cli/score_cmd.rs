//! `caprl score`: BLEU-1..4, ROUGE-L and CIDEr-D (and METEOR with `--meteor`) of a caption file.

use super::outln;
use std::path::PathBuf;

use anyhow::{bail, Context};
use caprl_score::{load_cands, load_refs, locate_jar, score_captions, DocFreq, Meteor, Scores};

/// Score candidate captions against references (pycocoevalcap numbers).
#[derive(Debug, clap::Args)]
pub struct ScoreArgs {
    /// References: COCO annotations JSON or `{"<id>": ["ref", ...]}`.
    #[arg(long)]
    pub refs: PathBuf,
    /// Candidates: COCO results JSON or `{"<id>": "caption"}`.
    #[arg(long)]
    pub cands: PathBuf,
    /// CIDEr-D document frequency: `corpus` (from the references of the scored images only,
    /// as pycocoevalcap: an n-gram every scored image's references share weighs nothing) or a
    /// df file written by `caprl data df`.
    #[arg(long, default_value = "corpus")]
    pub df: String,
    /// Print JSON (corpus and per-image scores) instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Score on one thread only.
    #[arg(long)]
    pub single_thread: bool,
    /// Also METEOR 1.5, with the jar pycocoevalcap ships (needs Java and `pip install
    /// pycocoevalcap`; CAPRL_METEOR_JAR overrides the jar's path).
    #[arg(long)]
    pub meteor: bool,
}

/// Runs `caprl score`.
pub fn run(args: ScoreArgs) -> anyhow::Result<()> {
    let refs = load_refs(&args.refs)?;
    let cands = load_cands(&args.cands)?;
    let df = if args.df == "corpus" {
        None
    } else {
        let path = PathBuf::from(&args.df);
        let df = DocFreq::load(&path).with_context(|| format!("--df {}", path.display()))?;
        if df.words().is_empty() {
            bail!(
                "--df {}: the file has no vocabulary, so words cannot be mapped to its ids; rebuild it with `caprl data df`",
                path.display()
            );
        }
        Some(df)
    };
    // Before scoring: a missing jar or Java is reported without waiting for the other metrics.
    let mut meteor = match args.meteor {
        true => Some(Meteor::start(&locate_jar()?)?),
        false => None,
    };
    let mut report = score_captions(&args.refs, &refs, &cands, df, !args.single_thread)?;
    if let Some(m) = &mut meteor {
        report
            .add_meteor(m, &refs, &cands)
            .context("computing METEOR")?;
    }
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&report)?)?;
    } else {
        print_table(&report.corpus, report.images.len())?;
    }
    Ok(())
}

fn print_table(s: &Scores, images: usize) -> anyhow::Result<()> {
    outln!("{:<10} {:>8}", "metric", "score")?;
    for (n, b) in s.bleu.iter().enumerate() {
        outln!("{:<10} {:>8.4}", format!("BLEU-{}", n + 1), b)?;
    }
    outln!("{:<10} {:>8.4}", "ROUGE-L", s.rouge_l)?;
    outln!("{:<10} {:>8.4}", "CIDEr-D", s.cider_d)?;
    if let Some(m) = s.meteor {
        outln!("{:<10} {:>8.4}", "METEOR", m)?;
    }
    outln!("({images} images)")
}
