//! Atomic, checksummed checkpoints.
//!
//! A checkpoint is a directory `ckpt-<step>` holding named files (weights,
//! optimizer state, trainer state) and a `MANIFEST.json` with the sha256 and
//! size of each. It is written into a hidden temp directory, every file is
//! fsynced, and only then renamed into place, so a crash or a full disk
//! mid-write leaves the previous checkpoints untouched. Loading verifies the
//! manifest; a truncated or bit-flipped checkpoint is reported and
//! [`latest_valid`] falls back to the newest one that verifies. The temp directory of a write
//! cut short by a kill is removed by the next write (one learner writes a checkpoint root at a
//! time: it holds its run directory's lock).

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::LearnerError;

const MANIFEST: &str = "MANIFEST.json";
const PREFIX: &str = "ckpt-";
/// Where a checkpoint is written before it is renamed into place.
const TEMP_PREFIX: &str = ".tmp-ckpt-";

#[derive(Debug, Serialize, Deserialize)]
struct Manifest {
    step: u64,
    files: Vec<ManifestEntry>,
}

#[derive(Debug, Serialize, Deserialize)]
struct ManifestEntry {
    name: String,
    bytes: u64,
    sha256: String,
}

/// A verified checkpoint on disk.
#[derive(Debug, Clone)]
pub struct Checkpoint {
    pub dir: PathBuf,
    pub step: u64,
}

impl Checkpoint {
    /// Path of one of the checkpoint's files.
    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

fn io_err(path: &Path, e: std::io::Error) -> LearnerError {
    LearnerError::Io {
        path: path.to_path_buf(),
        source: e,
    }
}

/// Writes `files` as checkpoint `step` under `root`, then keeps only the
/// newest `keep` checkpoints.
pub fn write(
    root: &Path,
    step: u64,
    files: &[(&str, Vec<u8>)],
    keep: usize,
) -> Result<Checkpoint, LearnerError> {
    fs::create_dir_all(root).map_err(|e| io_err(root, e))?;
    remove_unfinished(root)?;
    let final_dir = root.join(format!("{PREFIX}{step:010}"));
    let tmp = root.join(format!("{TEMP_PREFIX}{step:010}-{}", std::process::id()));
    let result = (|| {
        fs::create_dir_all(&tmp).map_err(|e| io_err(&tmp, e))?;
        let mut entries = Vec::with_capacity(files.len());
        for (name, bytes) in files {
            let path = tmp.join(name);
            write_synced(&path, bytes)?;
            entries.push(ManifestEntry {
                name: (*name).to_string(),
                bytes: bytes.len() as u64,
                sha256: sha256_hex(bytes),
            });
        }
        let manifest = Manifest {
            step,
            files: entries,
        };
        let json = serde_json::to_vec_pretty(&manifest).map_err(|e| LearnerError::Corrupt {
            path: tmp.clone(),
            reason: e.to_string(),
        })?;
        write_synced(&tmp.join(MANIFEST), &json)?;
        if final_dir.exists() {
            fs::remove_dir_all(&final_dir).map_err(|e| io_err(&final_dir, e))?;
        }
        fs::rename(&tmp, &final_dir).map_err(|e| io_err(&final_dir, e))?;
        if let Ok(d) = fs::File::open(root) {
            let _ = d.sync_all();
        }
        Ok(())
    })();
    if let Err(e) = result {
        let _ = fs::remove_dir_all(&tmp);
        return Err(e);
    }
    prune(root, keep)?;
    Ok(Checkpoint {
        dir: final_dir,
        step,
    })
}

/// Removes the temp directories of writes that never finished (their learner was killed).
fn remove_unfinished(root: &Path) -> Result<(), LearnerError> {
    let entries = fs::read_dir(root).map_err(|e| io_err(root, e))?;
    for entry in entries.flatten() {
        if entry.file_name().to_string_lossy().starts_with(TEMP_PREFIX) {
            let path = entry.path();
            tracing::warn!(
                "removing {}: a checkpoint write that never finished",
                path.display()
            );
            fs::remove_dir_all(&path).map_err(|e| io_err(&path, e))?;
        }
    }
    Ok(())
}

fn write_synced(path: &Path, bytes: &[u8]) -> Result<(), LearnerError> {
    let mut f = fs::File::create(path).map_err(|e| io_err(path, e))?;
    f.write_all(bytes).map_err(|e| io_err(path, e))?;
    f.sync_all().map_err(|e| io_err(path, e))
}

/// Checkpoint directories under `root`, newest first.
fn list(root: &Path) -> Result<Vec<(u64, PathBuf)>, LearnerError> {
    let mut out = Vec::new();
    let rd = match fs::read_dir(root) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(io_err(root, e)),
    };
    for entry in rd.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(step) = name
            .strip_prefix(PREFIX)
            .and_then(|s| s.parse::<u64>().ok())
        {
            out.push((step, entry.path()));
        }
    }
    out.sort_by_key(|e| std::cmp::Reverse(e.0));
    Ok(out)
}

fn prune(root: &Path, keep: usize) -> Result<(), LearnerError> {
    for (_, dir) in list(root)?.into_iter().skip(keep.max(1)) {
        fs::remove_dir_all(&dir).map_err(|e| io_err(&dir, e))?;
    }
    Ok(())
}

/// Opens and verifies one checkpoint directory.
pub fn open(dir: &Path) -> Result<Checkpoint, LearnerError> {
    let mpath = dir.join(MANIFEST);
    let raw = fs::read(&mpath).map_err(|e| io_err(&mpath, e))?;
    let manifest: Manifest = serde_json::from_slice(&raw).map_err(|e| LearnerError::Corrupt {
        path: mpath.clone(),
        reason: format!("manifest is not valid JSON ({e})"),
    })?;
    for entry in &manifest.files {
        let path = dir.join(&entry.name);
        let bytes = fs::read(&path).map_err(|e| io_err(&path, e))?;
        if bytes.len() as u64 != entry.bytes {
            return Err(LearnerError::Corrupt {
                path,
                reason: format!(
                    "expected {} bytes, found {} ({})",
                    entry.bytes,
                    bytes.len(),
                    match (bytes.len() as u64) < entry.bytes {
                        true => "truncated",
                        false => "it grew: written to after it was saved",
                    }
                ),
            });
        }
        if sha256_hex(&bytes) != entry.sha256 {
            return Err(LearnerError::Corrupt {
                path,
                reason: "sha256 does not match the manifest (file damaged)".into(),
            });
        }
    }
    Ok(Checkpoint {
        dir: dir.to_path_buf(),
        step: manifest.step,
    })
}

/// The newest checkpoint under `root` that verifies; damaged ones are
/// skipped with a warning naming what is wrong with them.
pub fn latest_valid(root: &Path) -> Result<Option<Checkpoint>, LearnerError> {
    for (_, dir) in list(root)? {
        match open(&dir) {
            Ok(c) => return Ok(Some(c)),
            Err(e) => tracing::warn!("skipping damaged checkpoint: {e}"),
        }
    }
    Ok(None)
}

/// Why each checkpoint under `root` fails to verify, newest first: what to report when
/// [`latest_valid`] finds none, so that a damaged checkpoint does not read as a missing one.
pub fn damage(root: &Path) -> Result<Vec<LearnerError>, LearnerError> {
    Ok(list(root)?
        .into_iter()
        .filter_map(|(_, dir)| open(&dir).err())
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_write_removes_a_write_cut_short_by_a_kill() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), 1, &[("a.bin", vec![1; 10])], 2).unwrap();
        let left = dir.path().join(".tmp-ckpt-0000000002-4242");
        fs::create_dir(&left).unwrap();
        fs::write(left.join("a.bin"), [2; 5]).unwrap();
        write(dir.path(), 2, &[("a.bin", vec![2; 10])], 2).unwrap();
        let names: Vec<String> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
        assert!(names.iter().all(|n| n.starts_with("ckpt-")), "{names:?}");
        assert_eq!(latest_valid(dir.path()).unwrap().unwrap().step, 2);
    }

    #[test]
    fn keeps_the_last_k_and_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        for step in 1..=4 {
            write(dir.path(), step, &[("a.bin", vec![step as u8; 10])], 2).unwrap();
        }
        let steps: Vec<u64> = list(dir.path()).unwrap().iter().map(|x| x.0).collect();
        assert_eq!(steps, vec![4, 3]);
        let c = latest_valid(dir.path()).unwrap().unwrap();
        assert_eq!(c.step, 4);
        assert_eq!(fs::read(c.file("a.bin")).unwrap(), vec![4u8; 10]);
    }

    #[test]
    fn bit_flipped_or_truncated_checkpoint_falls_back_to_previous() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), 1, &[("w", vec![1; 64])], 3).unwrap();
        let c2 = write(dir.path(), 2, &[("w", vec![2; 64])], 3).unwrap();
        let mut bytes = fs::read(c2.file("w")).unwrap();
        bytes[10] ^= 0x40;
        fs::write(c2.file("w"), &bytes).unwrap();
        let err = open(&c2.dir).unwrap_err().to_string();
        assert!(err.contains("sha256"), "{err}");
        assert_eq!(latest_valid(dir.path()).unwrap().unwrap().step, 1);

        fs::write(c2.file("w"), &bytes[..20]).unwrap();
        let err = open(&c2.dir).unwrap_err().to_string();
        assert!(err.contains("truncated"), "{err}");
    }

    #[test]
    fn failed_write_leaves_previous_checkpoint_intact() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), 1, &[("w", vec![1; 8])], 3).unwrap();
        // A file name that cannot be created makes the write fail midway.
        let err = write(
            dir.path(),
            2,
            &[("ok", vec![0; 8]), ("no/such/dir", vec![0; 8])],
            3,
        );
        assert!(err.is_err());
        let left: Vec<_> = fs::read_dir(dir.path()).unwrap().flatten().collect();
        assert_eq!(left.len(), 1, "temp dir must be cleaned up");
        assert_eq!(latest_valid(dir.path()).unwrap().unwrap().step, 1);
    }
}
