//! Damaged checkpoints on disk: the newest one bit-flipped, the one before it
//! truncated. `caprl train --resume` names both and what is wrong with them,
//! falls back to the newest good one, and ends with exactly the weights the
//! undamaged run had.

mod support;

use support::{caprl, checkpoint_dirs, final_weights, resume_train, sets, synth, text};

#[test]
fn resume_skips_a_bit_flipped_and_a_truncated_checkpoint_and_ends_with_the_same_weights() {
    let dir = tempfile::tempdir().unwrap();
    let data = synth(dir.path());
    let run = dir.path().join("run");
    let args = sets(&data, &run, 2, &["checkpoint.every_steps=2"]);
    let out = caprl().arg("train").args(&args).arg("-q").output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let want = final_weights(&run);

    let dirs = checkpoint_dirs(&run.join("checkpoints"));
    assert!(dirs.len() >= 3, "need three checkpoints, have {dirs:?}");
    let flipped = dirs[dirs.len() - 1].join("model.safetensors");
    let mut bytes = std::fs::read(&flipped).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x01;
    std::fs::write(&flipped, &bytes).unwrap();
    let truncated = dirs[dirs.len() - 2].join("model.safetensors");
    let bytes = std::fs::read(&truncated).unwrap();
    std::fs::write(&truncated, &bytes[..bytes.len() - 100]).unwrap();

    let log = resume_train(&args);
    for (file, reason) in [(&flipped, "sha256"), (&truncated, "truncated")] {
        let line = log
            .lines()
            .find(|l| {
                l.contains("skipping damaged checkpoint") && l.contains(&*file.to_string_lossy())
            })
            .unwrap_or_else(|| panic!("{} not reported:\n{log}", file.display()));
        assert!(line.contains(reason), "{line}");
    }
    let fallback = dirs[dirs.len() - 3].display().to_string();
    assert!(
        log.contains(&format!("resuming from {fallback}")),
        "did not resume from the newest good checkpoint {fallback}:\n{log}"
    );
    assert!(
        final_weights(&run) == want,
        "the resumed run ended with different weights:\n{log}"
    );
}
