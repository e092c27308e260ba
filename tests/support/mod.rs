//! Shared helpers of the end-to-end runtime tests: a tiny synthetic data set,
//! the small config every test uses, and the `caprl` binary.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The `caprl` binary under test.
pub fn caprl() -> Command {
    Command::new(env!("CARGO_BIN_EXE_caprl"))
}

/// Generates the tiny synthetic data set (64/16/16 images) in `dir/data`.
pub fn synth(dir: &Path) -> PathBuf {
    let data = dir.join("data");
    let out = caprl()
        .args([
            "data", "synth", "--train", "64", "--val", "16", "--test", "16", "-q", "--out",
        ])
        .arg(&data)
        .output()
        .expect("caprl runs");
    assert!(out.status.success(), "synth failed: {}", text(&out));
    data
}

/// `--set` arguments of a tiny run: hidden 32, batch 16 in tasks of 4 images,
/// one XE and `rl_epochs` RL epochs, plus `extra` keys.
pub fn sets(data: &Path, run_dir: &Path, rl_epochs: u32, extra: &[&str]) -> Vec<String> {
    let mut keys = vec![
        format!("data.dir={:?}", data.display().to_string()),
        format!("run_dir={:?}", run_dir.display().to_string()),
        "model.hidden=32".into(),
        "model.embed=32".into(),
        "train.batch_size=16".into(),
        "runtime.images_per_task=4".into(),
        "runtime.tasks_in_flight=4".into(),
        "train.xe_epochs=1".into(),
        format!("train.rl_epochs={rl_epochs}"),
        "train.eval_images=8".into(),
        "checkpoint.every_steps=1000".into(),
    ];
    keys.extend(extra.iter().map(|s| s.to_string()));
    keys.into_iter()
        .flat_map(|k| ["--set".to_string(), k])
        .collect()
}

/// An undisturbed in-process run in `dir/reference` with the tiny config: the weights the
/// fault tests must end with.
pub fn reference_run(data: &Path, dir: &Path, rl_epochs: u32, extra: &[&str]) -> PathBuf {
    let reference = dir.join("reference");
    let out = caprl()
        .arg("train")
        .args(sets(data, &reference, rl_epochs, extra))
        .arg("-q")
        .output()
        .expect("caprl runs");
    assert!(out.status.success(), "{}", text(&out));
    reference
}

/// stdout and stderr of a finished command, for assertion messages.
pub fn text(out: &Output) -> String {
    format!(
        "status {}\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The newest regular checkpoint's weights of a run directory.
pub fn final_weights(run_dir: &Path) -> Vec<u8> {
    let ck = run_dir.join("checkpoints");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&ck)
        .unwrap_or_else(|e| panic!("{}: {e}", ck.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("ckpt-")
        })
        .collect();
    dirs.sort();
    let last = dirs.last().expect("a checkpoint");
    std::fs::read(last.join("model.safetensors")).expect("weights")
}

/// Pids of role processes a test started and has not reaped yet; killed when
/// the test panics so that no role outlives its test.
static RUNNING: std::sync::Mutex<Vec<u32>> = std::sync::Mutex::new(Vec::new());

/// Kills (SIGKILL) every still-running role of this test binary on drop.
pub struct Reaper;

impl Drop for Reaper {
    fn drop(&mut self) {
        let pids = std::mem::take(&mut *RUNNING.lock().unwrap_or_else(|e| e.into_inner()));
        for pid in pids {
            // SAFETY: kill(2) on a child of this process that was not reaped yet.
            unsafe {
                libc::kill(pid as i32, libc::SIGKILL);
            }
        }
    }
}

fn forget(pid: u32) {
    RUNNING
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .retain(|&p| p != pid);
}

/// Starts `caprl <sub> <args> --nats-url <url>` with piped output.
pub fn spawn(args: &[String], sub: &[&str], url: &str) -> std::process::Child {
    let child = spawn_untracked(args, sub, url);
    RUNNING
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(child.id());
    child
}

fn spawn_untracked(args: &[String], sub: &[&str], url: &str) -> std::process::Child {
    caprl()
        .args(sub)
        .args(args)
        .args(["--nats-url", url])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("caprl starts")
}

/// Waits for `child`; returns whether it succeeded and its stdout + stderr.
pub fn finish(mut child: std::process::Child) -> (bool, String) {
    use std::io::Read;
    let status = child.wait().unwrap();
    forget(child.id());
    let mut s = String::new();
    child.stdout.take().unwrap().read_to_string(&mut s).unwrap();
    child.stderr.take().unwrap().read_to_string(&mut s).unwrap();
    (status.success(), s)
}

/// SIGTERM (a clean stop), then [`finish`].
pub fn stop(child: std::process::Child) -> (bool, String) {
    // SAFETY: kill(2) on a child we spawned and have not reaped.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    finish(child)
}

/// The step records of one phase in `run_dir/run.jsonl` (none while it does not exist).
pub fn steps(run_dir: &Path, phase: &str) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(run_dir.join("run.jsonl")).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["type"] == "step" && v["phase"] == phase)
        .collect()
}

/// SIGKILL, reap, and return what the child wrote (for a failure message: a child blocked on
/// a full pipe or a lost broker would never answer SIGTERM).
pub fn kill_and_read(mut child: std::process::Child) -> String {
    use std::io::Read;
    let _ = child.kill();
    let status = child.wait().map(|s| s.to_string()).unwrap_or_default();
    forget(child.id());
    let mut s = format!("[{status}]\n");
    if let Some(mut out) = child.stdout.take() {
        let _ = out.read_to_string(&mut s);
    }
    if let Some(mut err) = child.stderr.take() {
        let _ = err.read_to_string(&mut s);
    }
    s
}

/// SIGKILL, then reap.
pub fn kill9(mut child: std::process::Child) {
    child.kill().unwrap();
    child.wait().unwrap();
    forget(child.id());
}
