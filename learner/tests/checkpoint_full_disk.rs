//! A full disk while a checkpoint is written leaves the previous checkpoint
//! intact and readable, with a clear error naming the file. Two ways to fill
//! the disk: a per-process file-size limit (RLIMIT_FSIZE, works unprivileged;
//! writes past it fail with EFBIG) and, where mounting is permitted, a real
//! 256 KiB tmpfs (ENOSPC). Where mounting is refused, the tmpfs half is skipped on a
//! developer's machine and fails in CI (`support/ci.rs`; CI runs as root).
//!
//! One test in this binary on purpose: the file-size limit is per process.

#[path = "../../common/tests/support/ci.rs"]
mod ci;

use std::path::{Path, PathBuf};
use std::process::Command;

use caprl_learner::checkpoint;

const SMALL: usize = 64 << 10;
const BIG: usize = 1 << 20;

/// Writes checkpoint 1 (64 KiB), then tries checkpoint 2 (1 MiB) and checks
/// that it failed with `expect` in the message and that checkpoint 1 survived.
fn second_write_fails_and_first_survives(root: &Path, fill: impl FnOnce(), expect: &str) {
    checkpoint::write(root, 1, &[("model.safetensors", vec![1; SMALL])], 3).unwrap();
    fill();
    let err = checkpoint::write(
        root,
        2,
        &[
            ("model.safetensors", vec![2; BIG]),
            ("optimizer.safetensors", vec![2; 16]),
        ],
        3,
    )
    .expect_err("the write must fail on a full disk");
    let msg = err.to_string();
    assert!(
        msg.contains(expect) && msg.contains("model.safetensors"),
        "unclear error: {msg}"
    );
    let left: Vec<String> = std::fs::read_dir(root)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != "lost+found")
        .collect();
    assert_eq!(
        left,
        ["ckpt-0000000001"],
        "the half-written checkpoint was not cleaned up"
    );
    let ck = checkpoint::latest_valid(root)
        .unwrap()
        .expect("checkpoint 1");
    assert_eq!(ck.step, 1);
    assert_eq!(
        std::fs::read(ck.file("model.safetensors")).unwrap(),
        vec![1; SMALL]
    );
}

/// Unmounts the tmpfs even when an assertion fails.
struct Mounted(PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn a_full_disk_while_checkpointing_keeps_the_previous_checkpoint() {
    // 1. File-size limit: always runs.
    let dir = tempfile::tempdir().unwrap();
    second_write_fails_and_first_survives(
        dir.path(),
        || {
            // SAFETY: plain libc calls on this process; SIGXFSZ ignored so an
            // oversize write returns EFBIG instead of killing the process.
            unsafe {
                libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
                let mut lim = libc::rlimit {
                    rlim_cur: 0,
                    rlim_max: 0,
                };
                assert_eq!(libc::getrlimit(libc::RLIMIT_FSIZE, &mut lim), 0);
                lim.rlim_cur = (256 << 10) as libc::rlim_t;
                assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &lim), 0);
            }
        },
        "File too large",
    );
    // SAFETY: lifts the soft limit again (the hard limit was never lowered).
    unsafe {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        libc::getrlimit(libc::RLIMIT_FSIZE, &mut lim);
        lim.rlim_cur = lim.rlim_max;
        libc::setrlimit(libc::RLIMIT_FSIZE, &lim);
    }

    // 2. A real full file system, where this process may mount one.
    let mnt = tempfile::tempdir().unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=256k", "tmpfs"])
        .arg(mnt.path())
        .output();
    match mounted {
        Ok(out) if out.status.success() => {
            let _guard = Mounted(mnt.path().to_path_buf());
            second_write_fails_and_first_survives(mnt.path(), || {}, "No space left");
        }
        Ok(out) => ci::unavailable(&format!(
            "tmpfs part: mount refused ({})",
            String::from_utf8_lossy(&out.stderr).trim()
        )),
        Err(e) => ci::unavailable(&format!("tmpfs part: cannot run `mount` ({e})")),
    }
}
