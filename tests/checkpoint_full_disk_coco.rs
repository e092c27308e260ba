//! A full disk at the size users train: the reference Transformer (6 + 6 layers, d_model 512) on
//! a COCO-shaped data set writes a checkpoint of about 650 MB into a 1,000 MB tmpfs, and the
//! next one fills it. The learner stops with an error naming the file and the full disk, and
//! the first checkpoint is left whole (every file's sha256 verifies), the half-written one gone.
//! Mounting needs root: refused, the test is skipped on a developer's machine and fails in CI
//! (`support/ci.rs`; CI runs as root).

#[path = "../common/tests/support/ci.rs"]
mod ci;
mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::Digest;
use support::{caprl, text};

/// Vocabulary ids of the full-size COCO-shaped set (`caprl data synth --profile coco`).
const COCO_VOCAB: usize = 10_451;

/// Unmounts the tmpfs even when an assertion fails.
struct Mounted(PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.metadata().unwrap().len())
        .sum()
}

#[test]
fn a_disk_filling_during_a_650_mb_checkpoint_keeps_the_previous_one() {
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("checkpoints");
    std::fs::create_dir(&mnt).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1000m", "tmpfs"])
        .arg(&mnt)
        .output();
    let _guard = match mounted {
        Ok(out) if out.status.success() => Mounted(mnt.clone()),
        Ok(out) => {
            return ci::unavailable(&format!(
                "mount refused ({})",
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
        Err(e) => return ci::unavailable(&format!("cannot run `mount` ({e})")),
    };
    // A folder the run makes itself (an existing one would be set aside as an earlier run's).
    let ckpts = mnt.join("ckpts");
    let data = dir.path().join("data");
    let out = caprl()
        .args(["data", "synth", "--profile", "coco", "-q"])
        .args(["--train", "20", "--val", "4", "--test", "4", "--out"])
        .arg(&data)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    // 20 images use a few hundred words; the vocabulary of the full-size set (10,451 ids) makes
    // the embedding and output layers, and so the checkpoint, as big as there.
    let vocab_path = data.join("vocab.json");
    let mut vocab: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&vocab_path).unwrap()).unwrap();
    for i in vocab["words"].as_array().unwrap().len()..COCO_VOCAB {
        vocab["words"]
            .as_array_mut()
            .unwrap()
            .push(format!("unused{i}").into());
        vocab["counts"].as_array_mut().unwrap().push(0.into());
    }
    let words: Vec<&str> = vocab["words"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_str().unwrap())
        .collect();
    let hash = hex::encode(sha2::Sha256::digest(words.join("\n")));
    vocab["hash"] = hash[..16].into();
    std::fs::write(&vocab_path, serde_json::to_vec(&vocab).unwrap()).unwrap();
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/transformer-coco.toml");
    let out = caprl()
        .arg("--config")
        .arg(&config)
        .args(["train", "--objective", "xe", "-q"])
        .args(
            [
                format!("data.dir={:?}", data.display().to_string()),
                format!("run_dir={:?}", dir.path().join("run").display().to_string()),
                format!("checkpoint.dir={:?}", ckpts.display().to_string()),
                "checkpoint.every_steps=1".into(),
                "checkpoint.keep=3".into(),
                "train.xe_epochs=1".into(),
                "train.max_steps=2".into(),
                "train.eval_images=2".into(),
                "train.sample_images=0".into(),
            ]
            .into_iter()
            .flat_map(|k| ["--set".to_string(), k]),
        )
        .output()
        .unwrap();
    let said = text(&out);
    assert!(!out.status.success(), "the second checkpoint fit: {said}");
    assert!(
        said.contains("No space left on device") && said.contains(&ckpts.display().to_string()),
        "the error does not name the full disk and the file: {said}"
    );
    let left: Vec<String> = std::fs::read_dir(&ckpts)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, ["ckpt-0000000001"], "{said}");
    let first = caprl_learner::checkpoint::latest_valid(&ckpts)
        .unwrap()
        .expect("the first checkpoint verifies");
    assert_eq!(first.step, 1);
    let bytes = dir_bytes(&first.dir);
    assert!(
        (600_000_000..700_000_000).contains(&bytes),
        "the checkpoint is {bytes} bytes, not the reference Transformer's ~650 MB"
    );
}
