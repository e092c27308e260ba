//! `caprl eval` of a damaged checkpoint fails with an error that names the damage — the file and
//! the checksum or size that failed — whether it is given the checkpoint itself or the directory
//! holding it (`RUN/best-xe`); a warning before it is not enough, and "not a checkpoint ...
//! MANIFEST.json: No such file" would send the user looking for the wrong problem.

mod support;

use std::path::{Path, PathBuf};
use std::process::Output;

use support::{caprl, checkpoint_dirs, text, train_tiny_xe};

fn eval(checkpoint: &Path) -> Output {
    caprl()
        .args(["eval", "--split", "test", "--beam", "1", "--checkpoint"])
        .arg(checkpoint)
        .output()
        .expect("caprl runs")
}

/// The error report (`error:` and its `caused by:` lines), without the log lines before it.
fn error_report(out: &Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err.lines().collect();
    let start = lines
        .iter()
        .position(|l| l.starts_with("error: "))
        .unwrap_or_else(|| panic!("no error report:\n{}", text(out)));
    lines[start..].join("\n")
}

/// `eval` of `target` fails, and its error report names `file` and says `why`.
fn assert_damage_named(target: &Path, file: &Path, why: &str) {
    let out = eval(target);
    assert!(
        !out.status.success(),
        "eval of a damaged checkpoint succeeded:\n{}",
        text(&out)
    );
    let report = error_report(&out);
    assert!(
        report.contains(&*file.to_string_lossy()) && report.contains(why),
        "eval {}: the error does not name {} and `{why}`:\n{report}\n\nfull output:\n{}",
        target.display(),
        file.display(),
        text(&out)
    );
    assert!(!report.contains("No such file"), "{report}");
}

#[test]
fn eval_of_a_damaged_checkpoint_names_the_damage_in_its_error() {
    let tmp = tempfile::tempdir().unwrap();
    let run = train_tiny_xe(tmp.path());
    let best = run.join("best-xe");
    // The control: intact, it evaluates.
    let out = eval(&best);
    assert!(out.status.success(), "{}", text(&out));

    // Newest first (the names are zero-padded steps): the one an error about `best` names.
    let mut checkpoints = checkpoint_dirs(&best);
    checkpoints.reverse();
    assert!(
        !checkpoints.is_empty(),
        "no checkpoint in {}",
        best.display()
    );
    let weights: Vec<PathBuf> = checkpoints
        .iter()
        .map(|c| c.join("model.safetensors"))
        .collect();
    let intact: Vec<Vec<u8>> = weights.iter().map(|w| std::fs::read(w).unwrap()).collect();

    // One bit flipped in the middle of every weights file.
    for (w, bytes) in weights.iter().zip(&intact) {
        let mut b = bytes.clone();
        let mid = b.len() / 2;
        b[mid] ^= 0x10;
        std::fs::write(w, b).unwrap();
    }
    assert_damage_named(&best, &weights[0], "sha256");
    assert_damage_named(&checkpoints[0], &weights[0], "sha256");

    // Cut to half.
    for (w, bytes) in weights.iter().zip(&intact) {
        std::fs::write(w, &bytes[..bytes.len() / 2]).unwrap();
    }
    assert_damage_named(&best, &weights[0], "truncated");
    assert_damage_named(&checkpoints[0], &weights[0], "truncated");
}
