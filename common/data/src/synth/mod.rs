//! `caprl data synth`: a generated captioning task that needs no download.
//!
//! Scenes of 1–4 objects (colour, shape, size, material; spatial relations to the main
//! object) become noisy feature vectors ([`features`]) and five partial references each
//! ([`captions`]). The output is a Karpathy-format data set (`captions.json`,
//! `features.safetensors`, `features.ids.json`, `vocab.json`) plus `descriptions.json` (every
//! fact of each image in words), `scenes.json` (the facts as data) and `synth.json` (the
//! generator settings).
//!
//! `--profile coco` ([`coco`]) writes a set of the same format with COCO's sizes and word
//! statistics instead: about 10,000 words, 8–15-word captions, 2,048-d features.
//!
//! Output is byte-for-byte the same for a seed: one ChaCha8 stream per purpose, no hash-map
//! iteration in any output, integers and fixed strings only in JSON, little-endian floats in
//! safetensors. It is written into `DIR.tmp-XXXX` beside `DIR` and renamed at the end, so a
//! failed run leaves nothing behind.

mod captions;
mod coco;
mod features;
mod regions;
mod world;

pub use regions::CEILINGS_JSON;

use std::fmt;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Instant;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use super::atomic::write_json_atomic;
use super::dataset::{Dataset, CAPTIONS_JSON, VOCAB_JSON};
use super::error::DataError;
use super::features::{write_safetensors, write_safetensors_streamed};
use super::karpathy::{KarpathyFile, KarpathyImage, KarpathySentence};
use super::stats::{stats, DatasetStats};
use super::tokenize;
use super::vocab::Vocab;
use world::{Scene, SLOTS};

/// References written per image.
pub const REFS_PER_IMAGE: usize = 5;
/// Bumped whenever the generator's output for a seed changes.
pub const GENERATOR_VERSION: u32 = 1;

/// Which data set `caprl data synth` generates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SynthProfile {
    /// Scenes of coloured objects: 66 words, 256-d fc and 4 × 128-d regions; learnable in
    /// minutes on a laptop.
    #[default]
    Scenes,
    /// COCO's sizes and word statistics: about 10,000 words, 8–15-word captions, 2,048-d fc
    /// and 36 × 2,048-d regions (about 300 KB of features per image).
    Coco,
    /// The benchmark task (`synth::regions`): 2–6 objects whose attributes are bound only in 36
    /// shuffled regions, relations and counts, held-out colour–category pairs in val/test,
    /// annotators that differ, near-duplicate images, and the ceilings beside the data.
    Regions,
}

impl SynthProfile {
    /// The split sizes used when none are given: (train, val, test).
    pub fn default_sizes(self) -> (usize, usize, usize) {
        match self {
            SynthProfile::Scenes => (10_000, 1_000, 1_000),
            SynthProfile::Coco => (5_000, 500, 500),
            SynthProfile::Regions => (4_000, 500, 1_000),
        }
    }
}

/// What to generate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SynthConfig {
    pub seed: u64,
    pub train: usize,
    pub val: usize,
    pub test: usize,
    /// Draw a progress bar on stderr (only drawn when stderr is a terminal).
    pub progress: bool,
}

impl Default for SynthConfig {
    fn default() -> Self {
        SynthConfig {
            seed: 42,
            train: 10_000,
            val: 1_000,
            test: 1_000,
            progress: true,
        }
    }
}

/// What was written.
#[derive(Debug, Clone)]
pub struct SynthSummary {
    pub dir: PathBuf,
    pub seed: u64,
    /// `(file name, bytes)`, sorted by name.
    pub files: Vec<(String, u64)>,
    pub bytes: u64,
    pub seconds: f64,
    /// Scenes: matched-filter accuracy of colour, shape, size, material of the main object
    /// from fc, and the same from attention region 0 (`None` for the other profiles).
    pub recover: Option<([f64; 4], [f64; 4])>,
    /// Lines the profile adds to the printed summary (the regions profile: what its features
    /// let a matched filter read, and its ceilings).
    pub notes: Vec<String>,
    /// The data set as opened back from disk.
    pub stats: DatasetStats,
}

impl fmt::Display for SynthSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "wrote {} ({} bytes in {} files, seed {}, {:.2} s)",
            self.dir.display(),
            self.bytes,
            self.files.len(),
            self.seed,
            self.seconds
        )?;
        for (name, bytes) in &self.files {
            writeln!(f, "  {name:<22} {bytes:>12}")?;
        }
        let pct = |a: [f64; 4]| {
            a.iter()
                .map(|x| format!("{:.0}%", 100.0 * x))
                .collect::<Vec<_>>()
                .join(" / ")
        };
        if let Some((fc, att)) = self.recover {
            writeln!(
                f,
                "main-object attributes readable by a matched filter (colour / shape / size / material): fc {}, att {}",
                pct(fc),
                pct(att)
            )?;
        }
        for line in &self.notes {
            writeln!(f, "{line}")?;
        }
        write!(f, "{}", self.stats)
    }
}

#[derive(Serialize)]
struct DescriptionRecord {
    id: String,
    split: &'static str,
    description: String,
}

#[derive(Serialize)]
struct GeneratorRecord {
    generator: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    profile: Option<&'static str>,
    version: u32,
    seed: u64,
    train: usize,
    val: usize,
    test: usize,
    refs_per_image: usize,
    fc_dim: usize,
    att_regions: usize,
    att_dim: usize,
}

/// The generator record's file in a synthetic data set.
const GENERATOR_JSON: &str = "synth.json";

impl GeneratorRecord {
    fn of(profile: SynthProfile, config: &SynthConfig) -> GeneratorRecord {
        // The scenes record keeps the form it had before profiles, so sets made then are
        // still recognised.
        let (name, fc_dim, att_regions, att_dim) = match profile {
            SynthProfile::Scenes => (None, features::FC_DIM, SLOTS, features::ATT_DIM),
            SynthProfile::Coco => (Some("coco"), coco::FC_DIM, coco::REGIONS, coco::ATT_DIM),
            SynthProfile::Regions => (
                Some("regions"),
                regions::FC_DIM,
                regions::REGIONS,
                regions::ATT_DIM,
            ),
        };
        GeneratorRecord {
            generator: "caprl-synth",
            profile: name,
            version: GENERATOR_VERSION,
            seed: config.seed,
            train: config.train,
            val: config.val,
            test: config.test,
            refs_per_image: REFS_PER_IMAGE,
            fc_dim,
            att_regions,
            att_dim,
        }
    }
}

/// Whether `out` already holds the data set [`synth`] would write for `config`: its generator
/// record names the same generator version, seed and sizes, and the set opens. The generator is
/// deterministic, so such a directory is what a new run would write, byte for byte (an init
/// container that runs again on its own output may leave it as it is).
pub fn already_generated(out: &Path, profile: SynthProfile, config: &SynthConfig) -> bool {
    let Ok(text) = std::fs::read_to_string(out.join(GENERATOR_JSON)) else {
        return false;
    };
    let found: Result<serde_json::Value, _> = serde_json::from_str(&text);
    let wanted = serde_json::to_value(GeneratorRecord::of(profile, config));
    matches!((found, wanted), (Ok(f), Ok(w)) if f == w) && Dataset::open(out).is_ok()
}

/// Generate the synthetic data set (the scenes profile) into `out` (which must not exist or be
/// empty).
pub fn synth(out: &Path, config: &SynthConfig) -> Result<SynthSummary, DataError> {
    synth_profile(out, SynthProfile::Scenes, config)
}

/// [`synth`], then the data set opened.
pub fn synth_dataset(out: &Path, config: &SynthConfig) -> Result<Dataset, DataError> {
    synth(out, config)?;
    Dataset::open(out)
}

/// Generate the data set of `profile` into `out` (which must not exist or be empty).
pub fn synth_profile(
    out: &Path,
    profile: SynthProfile,
    config: &SynthConfig,
) -> Result<SynthSummary, DataError> {
    let started = Instant::now();
    for (flag, n) in [
        ("--train", config.train),
        ("--val", config.val),
        ("--test", config.test),
    ] {
        if n == 0 {
            return Err(DataError::invalid(
                out,
                format!("{flag} 0: every split needs at least one image"),
            ));
        }
    }
    if out.is_file() {
        return Err(DataError::invalid(
            out,
            "is a file; --out names the directory to write the data set into",
        ));
    }
    if out.exists() {
        let empty = out.is_dir()
            && std::fs::read_dir(out)
                .map_err(|e| DataError::io(out, e))?
                .next()
                .is_none();
        if !empty {
            return Err(DataError::OutputExists {
                path: out.to_path_buf(),
            });
        }
    }
    let name = out
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| DataError::invalid(out, "output path has no directory name"))?;
    let parent = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&parent).map_err(|e| DataError::io(&parent, e))?;
    let tmp = tempfile::Builder::new()
        .prefix(&format!("{name}.tmp-"))
        .tempdir_in(&parent)
        .map_err(|e| DataError::io(&parent, e))?;

    let (recover, notes) = match profile {
        SynthProfile::Scenes => (Some(generate(tmp.path(), config)?), Vec::new()),
        SynthProfile::Coco => {
            generate_coco(tmp.path(), config)?;
            (None, Vec::new())
        }
        SynthProfile::Regions => (None, regions::generate(tmp.path(), config)?),
    };
    // Open it back: validates everything and writes vocab.json.
    Dataset::open(tmp.path())?;

    let mut files = Vec::new();
    for entry in std::fs::read_dir(tmp.path()).map_err(|e| DataError::io(tmp.path(), e))? {
        let entry = entry.map_err(|e| DataError::io(tmp.path(), e))?;
        let len = entry
            .metadata()
            .map_err(|e| DataError::io(&entry.path(), e))?
            .len();
        files.push((entry.file_name().to_string_lossy().into_owned(), len));
    }
    files.sort();
    let bytes = files.iter().map(|f| f.1).sum();

    if out.exists() {
        std::fs::remove_dir(out).map_err(|e| DataError::io(out, e))?;
    }
    std::fs::rename(tmp.path(), out).map_err(|e| DataError::io(out, e))?;
    // The directory now lives at `out`; dropping `tmp` finds nothing left to delete.
    drop(tmp);
    let ds = Dataset::open(out)?;
    Ok(SynthSummary {
        dir: out.to_path_buf(),
        seed: config.seed,
        files,
        bytes,
        seconds: started.elapsed().as_secs_f64(),
        recover,
        notes,
        stats: stats(&ds),
    })
}

/// Random streams, one per purpose, so that changing one part leaves the others as they were.
fn stream(seed: u64, id: u64) -> ChaCha8Rng {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(id);
    rng
}

fn generate(dir: &Path, config: &SynthConfig) -> Result<([f64; 4], [f64; 4]), DataError> {
    let n = config.train + config.val + config.test;
    let mut rng_embed = stream(config.seed, 0);
    let mut rng_scene = stream(config.seed, 1);
    let mut rng_text = stream(config.seed, 2);
    let mut rng_noise = stream(config.seed, 3);
    let emb = features::Embeddings::new(&mut rng_embed);

    let bar = progress_bar(config.progress, n);

    let mut scenes: Vec<Scene> = Vec::with_capacity(n);
    let mut images = Vec::with_capacity(n);
    let mut descriptions = Vec::with_capacity(n);
    let mut records = Vec::with_capacity(n);
    let mut ids = Vec::with_capacity(n);
    let mut fc = Vec::with_capacity(n * features::FC_DIM);
    let mut att = Vec::with_capacity(n * SLOTS * features::ATT_DIM);
    for i in 0..n {
        let split = split_of(i, config);
        let id = i.to_string();
        let scene = world::sample_scene(&mut rng_scene);
        let refs = captions::references(&mut rng_text, &scene, REFS_PER_IMAGE);
        features::render(&mut rng_noise, &emb, &scene, &mut fc, &mut att);
        images.push(karpathy_image(i, format!("synth_{i:06}.png"), split, refs));
        descriptions.push(DescriptionRecord {
            id: id.clone(),
            split,
            description: captions::description(&scene),
        });
        records.push(scene.record(id.clone(), split));
        ids.push(id);
        scenes.push(scene);
        bar.inc(1);
    }
    bar.finish_and_clear();

    let vocab = write_captions(dir, "synth", images, config.train)?;
    write_safetensors(
        dir,
        &ids,
        &fc,
        features::FC_DIM,
        Some((&att, SLOTS, features::ATT_DIM)),
    )?;
    vocab.save(&dir.join(VOCAB_JSON))?;
    write_json_atomic(&dir.join("descriptions.json"), &descriptions)?;
    write_json_atomic(&dir.join("scenes.json"), &records)?;
    write_json_atomic(
        &dir.join(GENERATOR_JSON),
        &GeneratorRecord::of(SynthProfile::Scenes, config),
    )?;
    Ok(features::recoverability(&emb, &scenes, &fc, &att))
}

/// Image `i` of a generated set in Karpathy form: its id is `i`, its file `filename`, its
/// references tokenised as the loader tokenises them.
fn karpathy_image(i: usize, filename: String, split: &str, refs: Vec<String>) -> KarpathyImage {
    KarpathyImage {
        imgid: Some(serde_json::Value::from(i as u64)),
        cocoid: None,
        filename,
        split: split.to_string(),
        sentences: refs
            .into_iter()
            .map(|raw| KarpathySentence {
                tokens: tokenize(&raw),
                raw,
            })
            .collect(),
    }
}

/// Writes `captions.json` and returns the vocabulary of the first `train` images' references
/// (every word seen once; written by the caller once the features are).
fn write_captions(
    dir: &Path,
    dataset: &str,
    images: Vec<KarpathyImage>,
    train: usize,
) -> Result<Vocab, DataError> {
    let train_refs: Vec<Vec<String>> = images[..train]
        .iter()
        .flat_map(|img| img.sentences.iter().map(|s| s.tokens.clone()))
        .collect();
    let vocab = Vocab::build(train_refs.iter().map(Vec::as_slice), 1);
    write_json_atomic(
        &dir.join(CAPTIONS_JSON),
        &KarpathyFile {
            dataset: Some(dataset.to_string()),
            images,
        },
    )?;
    Ok(vocab)
}

/// A progress bar over `n` images on stderr when it is a terminal and `progress` is set.
fn progress_bar(progress: bool, n: usize) -> indicatif::ProgressBar {
    if !(progress && std::io::stderr().is_terminal()) {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(n as u64);
    if let Ok(style) =
        indicatif::ProgressStyle::with_template("synth {bar:40} {pos}/{len} images ({eta} left)")
    {
        bar.set_style(style);
    }
    bar
}

/// The split of image `i`: the first `train` images, then `val`, then `test`.
fn split_of(i: usize, config: &SynthConfig) -> &'static str {
    if i < config.train {
        "train"
    } else if i < config.train + config.val {
        "val"
    } else {
        "test"
    }
}

fn generate_coco(dir: &Path, config: &SynthConfig) -> Result<(), DataError> {
    let n = config.train + config.val + config.test;
    let mut captions = coco::Captions::new(config.seed);
    let drawn: Vec<coco::CocoImage> = (0..n).map(|_| captions.image(REFS_PER_IMAGE)).collect();
    let images: Vec<KarpathyImage> = drawn
        .iter()
        .enumerate()
        .map(|(i, img)| {
            let file = format!("coco_synth_{i:06}.jpg");
            karpathy_image(i, file, split_of(i, config), img.captions.clone())
        })
        .collect();
    let vocab = write_captions(dir, "synth-coco", images, config.train)?;
    let ids: Vec<String> = (0..n).map(|i| i.to_string()).collect();
    let mut feats = coco::Features::new(config.seed);
    let bar = progress_bar(config.progress, n);
    write_safetensors_streamed(
        dir,
        &ids,
        coco::FC_DIM,
        Some((coco::REGIONS, coco::ATT_DIM)),
        |i, fc, att| {
            bar.inc(1);
            feats.render(&drawn[i], fc, att)
        },
    )?;
    bar.finish_and_clear();
    vocab.save(&dir.join(VOCAB_JSON))?;
    write_json_atomic(
        &dir.join(GENERATOR_JSON),
        &GeneratorRecord::of(SynthProfile::Coco, config),
    )
}
