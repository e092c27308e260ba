//! `caprl features --clip DIR --images DIR --out DIR`: CLIP image embeddings of a folder of
//! images, written as a data set's features (`features.safetensors` + `features.ids.json`),
//! so the `clip` rewards of that checkpoint can read them as image embeddings.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use caprl_clip::hf::HfClip;
use caprl_common::progress::Progress;
use caprl_data::{write_safetensors, Vocab};

/// Images embedded per progress step.
const CHUNK: usize = 64;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Hugging Face CLIP checkpoint directory (config.json, model.safetensors, tokenizer.json).
    #[arg(long, value_name = "DIR")]
    pub clip: PathBuf,
    /// Folder of PNG/JPEG images; each file's name without extension becomes its image id.
    #[arg(long, value_name = "DIR")]
    pub images: PathBuf,
    /// Output directory (created when missing); existing features files in it are replaced.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
}

pub fn run(args: Args) -> Result<()> {
    let (ids, paths) = list_images(&args.images)?;
    // Only images are embedded, so the vocabulary (for captions) can be the empty one.
    let vocab = Vocab::build(std::iter::empty::<&[String]>(), 1);
    let clip = HfClip::open(&args.clip, &vocab)
        .with_context(|| format!("opening the CLIP checkpoint {}", args.clip.display()))?;
    let dim = caprl_clip::Encoder::dim(&clip);

    let progress = Progress::new(paths.len() as u64, "features");
    let mut fc = Vec::with_capacity(paths.len() * dim);
    for chunk in paths.chunks(CHUNK) {
        fc.extend(clip.embed_image_files(chunk)?.data);
        progress.inc(chunk.len() as u64);
    }
    progress.finish();

    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    write_safetensors(&args.out, &ids, &fc, dim, None)
        .with_context(|| format!("writing the features into {}", args.out.display()))?;
    println!(
        "{}: {} images, {dim}-dimensional CLIP embeddings from {}",
        args.out.display(),
        ids.len(),
        args.clip.display()
    );
    Ok(())
}

/// The PNG/JPEG files directly in `dir`, sorted by name, with their ids (file stems).
fn list_images(dir: &Path) -> Result<(Vec<String>, Vec<PathBuf>)> {
    let entries =
        std::fs::read_dir(dir).with_context(|| format!("reading --images {}", dir.display()))?;
    let mut paths = Vec::new();
    for entry in entries {
        let path = entry
            .with_context(|| format!("reading --images {}", dir.display()))?
            .path();
        let is_image = path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| ["png", "jpg", "jpeg"].contains(&e.to_ascii_lowercase().as_str()));
        if is_image && path.is_file() {
            paths.push(path);
        }
    }
    if paths.is_empty() {
        bail!(
            "--images {}: no .png, .jpg or .jpeg files in this directory (subdirectories are not searched)",
            dir.display()
        );
    }
    paths.sort();
    let mut seen = HashSet::new();
    let mut ids = Vec::with_capacity(paths.len());
    for path in &paths {
        let Some(id) = path.file_stem().and_then(|s| s.to_str()) else {
            bail!(
                "{}: the file name is not valid UTF-8, so it cannot be an image id; rename it",
                path.display()
            );
        };
        if !seen.insert(id.to_string()) {
            bail!(
                "{}: another image has the id {id:?} (ids are file names without extension); rename one of them",
                path.display()
            );
        }
        ids.push(id.to_string());
    }
    Ok((ids, paths))
}
