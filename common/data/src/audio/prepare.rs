//! Turns a Clotho-layout directory (split CSVs + audio) into a data set the trainer opens like
//! any other: `captions.csv` (custom format), `features.safetensors` + `features.ids.json`,
//! `audio_norm.json`, and a feature cache `mel-cache/`.
//!
//! - `att` `[N, frames, n_mels]`: the log-mel spectrogram normalised per band by the mean and
//!   standard deviation of the training split (paper 000), cropped to `frames` (the first
//!   frames kept) or padded after normalisation with zeros (the training mean), so every clip
//!   has one shape. `frames` defaults to the longest training clip.
//! - `fc` `[N, n_mels]`: the mean over the clip's own (unpadded) normalised frames.
//! - `audio_norm.json`: the front-end settings, `frames`, and the per-band `mean` and `std`,
//!   so new audio can be normalised exactly as the training set was.
//! - `mel-cache/<sha256>.f32`: the unnormalised log-mel of each audio file, keyed by the file's
//!   bytes and the front-end settings; audio is decoded and analysed once, and preparing again
//!   (another frame count, more clips) only reads the cache.

use std::path::Path;

use sha2::{Digest, Sha256};

use super::clotho::{clotho_csv, read_clotho_csv, ClothoClip, CLOTHO_SPLITS};
use super::logmel::{LogMel, MelConfig};
use super::resample::resample;
use super::wav::read_wav;
use crate::atomic::{write_atomic, write_json_atomic};
use crate::{write_safetensors, DataError, SplitName, CAPTIONS_CSV, VOCAB_JSON};

/// Normalisation statistics and settings saved with the data set.
pub const AUDIO_NORM_JSON: &str = "audio_norm.json";
/// The feature cache directory inside the data set.
pub const MEL_CACHE_DIR: &str = "mel-cache";

/// How to prepare audio features.
#[derive(Debug, Clone, Default)]
pub struct PrepareConfig {
    pub mel: MelConfig,
    /// Fixed frame count; `None` = the longest training clip.
    pub frames: Option<usize>,
}

/// What `audio_norm.json` holds.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct AudioNorm {
    pub mel: MelConfig,
    pub frames: usize,
    pub mean: Vec<f64>,
    pub std: Vec<f64>,
}

/// What was prepared.
#[derive(Debug, Clone)]
pub struct PrepareSummary {
    pub clips: [usize; 3],
    pub frames: usize,
    /// Seconds of audio in all clips (at the front end's rate).
    pub audio_seconds: f64,
    /// Clips decoded and analysed now; the others came from the cache.
    pub computed: usize,
    pub cached: usize,
}

impl std::fmt::Display for PrepareSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} train / {} val / {} test clips, {:.1} s of audio, {} frames per clip; {} analysed, {} from the cache",
            self.clips[0],
            self.clips[1],
            self.clips[2],
            self.audio_seconds,
            self.frames,
            self.computed,
            self.cached
        )
    }
}

/// Log-mel of one file, from the cache when the same bytes were analysed with the same settings.
pub fn cached_logmel(
    path: &Path,
    front: &LogMel,
    cache_dir: &Path,
) -> Result<(Vec<f32>, bool), DataError> {
    let bytes = std::fs::read(path).map_err(|e| DataError::io(path, e))?;
    let mut h = Sha256::new();
    h.update(serde_json::to_vec(front.config()).unwrap_or_default());
    h.update(&bytes);
    let key = hex::encode(h.finalize());
    let cache_path = cache_dir.join(format!("{key}.f32"));
    let n_mels = front.config().n_mels;
    if let Ok(raw) = std::fs::read(&cache_path) {
        if !raw.is_empty() && raw.len() % (4 * n_mels) == 0 {
            let v = raw
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            return Ok((v, true));
        }
    }
    let clip = read_wav(path)?;
    let x = resample(&clip.samples, clip.sample_rate, front.config().sample_rate);
    let mel = front.compute(&x);
    std::fs::create_dir_all(cache_dir).map_err(|e| DataError::io(cache_dir, e))?;
    let raw: Vec<u8> = mel.iter().flat_map(|v| v.to_le_bytes()).collect();
    write_atomic(&cache_path, &raw)?;
    Ok((mel, false))
}

/// Prepares the Clotho-layout directory `clotho` into the data set directory `out`.
pub fn prepare_clotho(
    clotho: &Path,
    out: &Path,
    cfg: &PrepareConfig,
) -> Result<PrepareSummary, DataError> {
    let front = LogMel::new(cfg.mel).map_err(|m| DataError::Audio {
        path: out.to_path_buf(),
        message: format!("front-end settings: {m}"),
    })?;
    let n_mels = cfg.mel.n_mels;
    let splits = read_clotho_splits(clotho)?;
    std::fs::create_dir_all(out).map_err(|e| DataError::io(out, e))?;
    let cache_dir = out.join(MEL_CACHE_DIR);
    let (mut computed, mut cached) = (0, 0);
    let mut mels: Vec<(SplitName, &ClothoClip, Vec<f32>)> = Vec::new();
    let mut seen = std::collections::HashMap::new();
    for (split, clips) in &splits {
        for clip in clips {
            if let Some(other) = seen.insert(clip.file_name.clone(), *split) {
                return Err(DataError::invalid(
                    &clip.path,
                    format!(
                        "{} is in both the {other} and the {split} split; file names must be unique across splits",
                        clip.file_name
                    ),
                ));
            }
            let (mel, hit) = cached_logmel(&clip.path, &front, &cache_dir)?;
            if hit {
                cached += 1;
            } else {
                computed += 1;
            }
            mels.push((*split, clip, mel));
        }
    }
    let train = mels
        .iter()
        .filter(|m| m.0 == SplitName::Train)
        .map(|m| m.2.as_slice());
    let (mean, std, longest) = band_stats(train, n_mels).ok_or_else(|| DataError::EmptySplit {
        path: clotho_csv(clotho, "development"),
        split: "train".into(),
    })?;
    let frames = cfg.frames.unwrap_or(longest);
    if frames == 0 {
        return Err(DataError::Audio {
            path: out.to_path_buf(),
            message: "frames must be at least 1".into(),
        });
    }
    let n = mels.len();
    let mut att = vec![0f32; n * frames * n_mels];
    let mut fc = vec![0f32; n * n_mels];
    let mut ids = Vec::with_capacity(n);
    let mut rows = String::from("image_id,split,caption\n");
    let mut audio_samples = 0usize;
    for (row, (split, clip, mel)) in mels.iter().enumerate() {
        let own = mel.len() / n_mels;
        audio_samples += (own - 1) * cfg.mel.hop_length();
        let block = &mut att[row * frames * n_mels..(row + 1) * frames * n_mels];
        for (t, frame) in mel.chunks_exact(n_mels).take(frames).enumerate() {
            for (i, &v) in frame.iter().enumerate() {
                let z = ((v as f64 - mean[i]) / std[i]) as f32;
                block[t * n_mels + i] = z;
                fc[row * n_mels + i] += z / own.min(frames) as f32;
            }
        }
        ids.push(clip.file_name.clone());
        for caption in &clip.captions {
            rows.push_str(&format!(
                "{},{},{}\n",
                quote(&clip.file_name),
                split,
                caption
            ));
        }
    }
    write_safetensors(out, &ids, &fc, n_mels, Some((&att, frames, n_mels)))?;
    write_atomic(&out.join(CAPTIONS_CSV), rows.as_bytes())?;
    write_json_atomic(
        &out.join(AUDIO_NORM_JSON),
        &AudioNorm {
            mel: cfg.mel,
            frames,
            mean,
            std,
        },
    )?;
    // A vocabulary from earlier captions would not match these.
    let vocab = out.join(VOCAB_JSON);
    if vocab.exists() {
        std::fs::remove_file(&vocab).map_err(|e| DataError::io(&vocab, e))?;
    }
    let count_split = |s: SplitName| mels.iter().filter(|m| m.0 == s).count();
    Ok(PrepareSummary {
        clips: [
            count_split(SplitName::Train),
            count_split(SplitName::Val),
            count_split(SplitName::Test),
        ],
        frames,
        audio_seconds: audio_samples as f64 / cfg.mel.sample_rate as f64,
        computed,
        cached,
    })
}

/// Each split's clips from its captions CSV, in [`CLOTHO_SPLITS`] order.
fn read_clotho_splits(clotho: &Path) -> Result<Vec<(SplitName, Vec<ClothoClip>)>, DataError> {
    let mut splits = Vec::new();
    for (name, split) in CLOTHO_SPLITS {
        let csv = clotho_csv(clotho, name);
        if !csv.is_file() {
            return Err(DataError::invalid(
                &csv,
                format!(
                    "missing; a Clotho directory holds clotho_captions_{{development,validation,evaluation}}.csv and one audio directory per split (here {})",
                    clotho.join(name).display()
                ),
            ));
        }
        splits.push((split, read_clotho_csv(&csv, &clotho.join(name))?));
    }
    Ok(splits)
}

/// Per-band mean and standard deviation over every frame of `mels` (`[frames, n_mels]` each),
/// and the longest clip in frames; `None` without a frame.
fn band_stats<'a>(
    mels: impl Iterator<Item = &'a [f32]>,
    n_mels: usize,
) -> Option<(Vec<f64>, Vec<f64>, usize)> {
    let mut sum = vec![0f64; n_mels];
    let mut sq = vec![0f64; n_mels];
    let mut count = 0usize;
    let mut longest = 0usize;
    for mel in mels {
        for frame in mel.chunks_exact(n_mels) {
            for (i, &v) in frame.iter().enumerate() {
                sum[i] += v as f64;
                sq[i] += (v as f64) * (v as f64);
            }
        }
        count += mel.len() / n_mels;
        longest = longest.max(mel.len() / n_mels);
    }
    if count == 0 {
        return None;
    }
    let mean: Vec<f64> = sum.iter().map(|s| s / count as f64).collect();
    let std: Vec<f64> = sq
        .iter()
        .zip(&mean)
        .map(|(q, m)| (q / count as f64 - m * m).max(0.0).sqrt().max(1e-5))
        .collect();
    Some((mean, std, longest))
}

fn quote(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}
