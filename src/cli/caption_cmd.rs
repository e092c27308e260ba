//! `caprl caption`: captions for new inputs from a features file.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use caprl_learner::run::load_checkpoint;
use caprl_model::model::{BadEndings, BeamOptions, Inputs, EOS};

use super::beam_args::DiverseBeamArgs;
use super::compute_args::ComputeArgs;
use super::{write_stdout, Global};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// A checkpoint directory (ckpt-*) or a directory holding them.
    #[arg(long)]
    pub checkpoint: PathBuf,
    /// Safetensors file with `fc` [N, D] (and `att` [N, R, D] for att models).
    /// Ids are read from `<file>.ids.json` or `features.ids.json` beside it when present.
    #[arg(long)]
    pub features: PathBuf,
    /// Beam width; 1 = greedy.
    #[arg(long, default_value_t = 3, value_parser = super::ranges::config_key::<usize>("decode.beam"))]
    pub beam: usize,
    /// Diverse beam search and bad endings; the beam groups must divide --beam.
    #[command(flatten)]
    pub diverse: DiverseBeamArgs,
    #[command(flatten)]
    pub compute: ComputeArgs,
}

pub fn run(args: Args, global: &Global) -> Result<()> {
    let device = args.compute.device_or_cpu()?;
    let mut loaded = load_checkpoint(&args.checkpoint, None, &device)?;
    loaded.cfg = super::eval_cmd::with_decode_sets(&loaded.cfg, &global.sets)?;
    if let Some(dtype) = args.compute.compute_dtype() {
        loaded.model.set_compute_dtype(dtype)?;
    }
    let cfg = loaded.model.config().clone();
    let HostFeatures {
        fc: fc_host,
        att: att_host,
        n,
        d,
    } = read_features(&args.features, cfg.fc_dim)?;
    let ids = read_ids(&args.features, n)?;
    let diverse = args.diverse.resolve(&loaded.cfg.decode, args.beam)?;
    let groups = diverse.groups;
    let bad_endings = if diverse.remove_bad_endings {
        BadEndings::from_vocab(&loaded.data.vocab)
    } else {
        BadEndings::none()
    };
    let mut out = String::new();
    let chunk = 64;
    let decoder = loaded.model.decoder()?;
    for start in (0..n).step_by(chunk) {
        let b = chunk.min(n - start);
        let fc_part = &fc_host[start * d..(start + b) * d];
        let att_part = match (&att_host, cfg.att) {
            (Some(a), Some((r, ad))) => Some(&a[start * r * ad..(start + b) * r * ad]),
            _ => None,
        };
        let x = Inputs::from_host(fc_part, att_part, b, &cfg, &device)?;
        let captions: Vec<Vec<u32>> = if args.beam <= 1 {
            decoder
                .greedy_avoiding(&x, cfg.max_len, &bad_endings)?
                .tokens
        } else {
            decoder
                .beam(
                    &x,
                    &BeamOptions {
                        width: args.beam,
                        max_len: cfg.max_len,
                        length_norm: loaded.cfg.decode.length_norm,
                        block_trigrams: loaded.cfg.decode.block_trigrams,
                        groups,
                        diversity_lambda: diverse.lambda,
                        bad_endings: bad_endings.clone(),
                    },
                )?
                .into_iter()
                .map(|h| h.into_iter().next().map(|h| h.tokens).unwrap_or_default())
                .collect()
        };
        for (i, toks) in captions.iter().enumerate() {
            let toks: Vec<u32> = toks.iter().copied().take_while(|&t| t != EOS).collect();
            let words = loaded.data.vocab.decode(&toks).join(" ");
            out.push_str(&format!("{}\t{}\n", ids[start + i], words));
        }
    }
    write_stdout(&out)
}

/// The inputs of a features file on the host: `n` rows of `d` global features, and the region
/// features when the file has them.
struct HostFeatures {
    fc: Vec<f32>,
    att: Option<Vec<f32>>,
    n: usize,
    d: usize,
}

/// The features of `path` (safetensors with `fc` `[N, fc_dim]`, finite, and optionally `att`),
/// or an error that names the file and what it must hold.
fn read_features(path: &std::path::Path, fc_dim: usize) -> Result<HostFeatures> {
    let tensors =
        candle_core::safetensors::load(path, &candle_core::Device::Cpu).with_context(|| {
            format!(
                "{}: not a readable safetensors file (expected a tensor `fc` of shape [N, {}])",
                path.display(),
                fc_dim
            )
        })?;
    let fc = tensors.get("fc").with_context(|| {
        format!(
            "{}: no tensor named `fc` (expected [N, {}])",
            path.display(),
            fc_dim
        )
    })?;
    // Checked by hand: a Candle shape error would carry a backtrace under RUST_BACKTRACE.
    let &[n, d] = fc.dims() else {
        bail!(
            "{}: `fc` has shape {:?}; it must be 2-D [N, {}] (one row of features per input)",
            path.display(),
            fc.dims(),
            fc_dim
        );
    };
    if n == 0 {
        bail!(
            "{}: `fc` has no rows (shape [0, {d}]); give at least one input",
            path.display()
        );
    }
    if d != fc_dim {
        bail!(
            "{}: `fc` has {d} features per input but the model was trained on {}",
            path.display(),
            fc_dim
        );
    }
    let fc_host: Vec<f32> = fc
        .to_dtype(candle_core::DType::F32)?
        .flatten_all()?
        .to_vec1()?;
    if let Some(i) = fc_host.iter().position(|v| !v.is_finite()) {
        bail!(
            "{}: `fc` row {} has a NaN or infinite value",
            path.display(),
            i / d
        );
    }
    let att_host: Option<Vec<f32>> = match tensors.get("att") {
        Some(a) => Some(
            a.to_dtype(candle_core::DType::F32)?
                .flatten_all()?
                .to_vec1()?,
        ),
        None => None,
    };
    Ok(HostFeatures {
        fc: fc_host,
        att: att_host,
        n,
        d,
    })
}

fn read_ids(features: &std::path::Path, n: usize) -> Result<Vec<String>> {
    let candidates = [
        features.with_extension("ids.json"),
        features.with_file_name("features.ids.json"),
    ];
    if let Some(p) = candidates.iter().find(|p| p.exists()) {
        let text =
            std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
        let v: Vec<serde_json::Value> = serde_json::from_str(&text)
            .with_context(|| format!("{}: expected a JSON array of ids", p.display()))?;
        if v.len() != n {
            bail!("{}: {} ids for {n} feature rows", p.display(), v.len());
        }
        return Ok(v
            .into_iter()
            .map(|x| {
                x.as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| x.to_string())
            })
            .collect());
    }
    Ok((0..n).map(|i| i.to_string()).collect())
}
