//! Shared helpers of the end-to-end runtime tests: a tiny synthetic data set,
//! the small config every test uses, and the `caprl` binary.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

/// The `caprl` binary under test.
pub fn caprl() -> Command {
    Command::new(env!("CARGO_BIN_EXE_caprl"))
}

/// Generates the tiny synthetic data set (64/16/16 images) in `dir/data`.
pub fn synth(dir: &Path) -> PathBuf {
    synth_into(&dir.join("data"), None)
}

/// The same tiny set from generator seed `seed`, in `dir/name`: another data set of the same
/// shape.
pub fn synth_seeded(dir: &Path, name: &str, seed: u64) -> PathBuf {
    synth_into(&dir.join(name), Some(seed))
}

fn synth_into(data: &Path, seed: Option<u64>) -> PathBuf {
    let mut cmd = caprl();
    cmd.args([
        "data", "synth", "--train", "64", "--val", "16", "--test", "16", "-q",
    ]);
    if let Some(seed) = seed {
        cmd.args(["--seed", &seed.to_string()]);
    }
    let out = cmd.arg("--out").arg(data).output().expect("caprl runs");
    assert!(out.status.success(), "synth failed: {}", text(&out));
    data.to_path_buf()
}

/// Trains the tiny XE run of [`sets`] (no RL) on the synthetic data in `dir/data` into
/// `dir/run`; returns the run directory (its best checkpoint is `run/best-xe`).
pub fn train_tiny_xe(dir: &Path) -> PathBuf {
    let data = synth(dir);
    let run = dir.join("run");
    let out = caprl()
        .args(["train", "--objective", "xe", "-q"])
        .args(sets(&data, &run, 0, &[]))
        .output()
        .expect("caprl runs");
    assert!(out.status.success(), "{}", text(&out));
    run
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

/// `--set` keys of a tiny Transformer: one encoder and one decoder layer of width 16.
pub const TINY_TRANSFORMER: [&str; 6] = [
    "model.kind=\"transformer\"",
    "model.d_model=16",
    "model.heads=2",
    "model.d_ff=32",
    "model.enc_layers=1",
    "model.dec_layers=1",
];

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

/// Runs `caprl eval --split test <flags> --checkpoint <checkpoint>` to the end.
pub fn eval_test_split(checkpoint: &Path, flags: &[&str]) -> Output {
    caprl()
        .args(["eval", "--split", "test"])
        .args(flags)
        .arg("--checkpoint")
        .arg(checkpoint)
        .output()
        .expect("caprl runs")
}

/// Where a fault test starts: a temp dir with the synthetic data (`dir/data`) and the
/// undisturbed [`reference_run`] of `rl_epochs` RL epochs with `extra` (`dir/reference`).
pub fn data_and_reference(rl_epochs: u32, extra: &[&str]) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().expect("a temp dir");
    let data = synth(dir.path());
    let reference = reference_run(&data, dir.path(), rl_epochs, extra);
    (dir, data, reference)
}

/// A nats-server of the test's own (default options) and its URL.
pub fn start_broker() -> (caprl_common::bus::LocalNatsServer, String) {
    use caprl_common::bus::{LocalNatsServer, LocalNatsServerOptions};
    let server = LocalNatsServer::start(LocalNatsServerOptions::default()).expect("nats-server");
    let url = server.url();
    (server, url)
}

/// A current-thread tokio runtime for the test's own bus calls.
pub fn current_thread_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
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

/// Runs `caprl train --resume` with `args`, which must succeed, and returns what it wrote.
pub fn resume_train<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> String {
    let out = caprl()
        .arg("train")
        .args(args)
        .arg("--resume")
        .output()
        .expect("caprl runs");
    let log = text(&out);
    assert!(out.status.success(), "{log}");
    log
}

/// The `ckpt-*` directories in `dir`, oldest first (the names are zero-padded steps).
pub fn checkpoint_dirs(dir: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("ckpt-")
        })
        .collect();
    dirs.sort();
    dirs
}

/// The newest regular checkpoint's weights of a run directory.
pub fn final_weights(run_dir: &Path) -> Vec<u8> {
    let dirs = checkpoint_dirs(&run_dir.join("checkpoints"));
    let last = dirs.last().expect("a checkpoint");
    std::fs::read(last.join("model.safetensors")).expect("weights")
}

/// Pids of role processes a test started and has not reaped yet, with the file their output
/// goes to; the processes are killed when the test panics so that no role outlives its test.
static RUNNING: std::sync::Mutex<Vec<(u32, tempfile::NamedTempFile)>> =
    std::sync::Mutex::new(Vec::new());

fn running() -> std::sync::MutexGuard<'static, Vec<(u32, tempfile::NamedTempFile)>> {
    RUNNING.lock().unwrap_or_else(|e| e.into_inner())
}

/// Process groups of commands started with [`spawn_group`] (`caprl local`, `caprl soak`).
static GROUPS: std::sync::Mutex<Vec<u32>> = std::sync::Mutex::new(Vec::new());

/// Kills (SIGKILL) every still-running role of this test binary on drop.
pub struct Reaper;

impl Drop for Reaper {
    fn drop(&mut self) {
        for pgid in std::mem::take(&mut *GROUPS.lock().unwrap_or_else(|e| e.into_inner())) {
            // SAFETY: kill(2) on a process group this test started.
            unsafe {
                libc::kill(-(pgid as i32), libc::SIGKILL);
            }
        }
        for (pid, _) in std::mem::take(&mut *running()) {
            // SAFETY: kill(2) on a child of this process that was not reaped yet.
            unsafe {
                libc::kill(pid as i32, libc::SIGKILL);
            }
        }
    }
}

/// Starts `caprl <sub> <args> --nats-url <url>`. Its stdout and stderr go to one temp file, not
/// a pipe: a pipe that nobody reads until the role ends fills up and blocks the role.
pub fn spawn(args: &[String], sub: &[&str], url: &str) -> std::process::Child {
    let mut cmd = caprl();
    cmd.args(sub).args(args).args(["--nats-url", url]);
    start_logged(cmd)
}

/// Starts `caprl <args>` (a command that starts processes of its own) in a process group of
/// its own, output to a temp file as [`spawn`] does; [`Reaper`] kills the whole group.
pub fn spawn_group(args: &[String]) -> std::process::Child {
    use std::os::unix::process::CommandExt;
    let mut cmd = caprl();
    cmd.args(args).process_group(0);
    let child = start_logged(cmd);
    GROUPS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(child.id());
    child
}

/// Starts `cmd` with its stdout and stderr in one temp file, known to [`output_of`] and the
/// [`Reaper`].
fn start_logged(mut cmd: Command) -> std::process::Child {
    let log = tempfile::NamedTempFile::new().expect("a temp file for the output");
    let out = log.reopen().expect("the log file");
    let err = out.try_clone().expect("the log file");
    let child = cmd.stdout(out).stderr(err).spawn().expect("caprl starts");
    running().push((child.id(), log));
    child
}

/// What a role started with [`spawn`] has written so far (stdout and stderr, interleaved).
pub fn output_of(child: &std::process::Child) -> String {
    let path = running()
        .iter()
        .find(|(pid, _)| *pid == child.id())
        .map(|(_, log)| log.path().to_path_buf());
    path.and_then(|p| std::fs::read(p).ok())
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}

/// Reaps `child` and returns its output; its log file goes away.
fn reap(mut child: std::process::Child) -> (std::process::ExitStatus, String) {
    let status = child.wait().expect("wait for a role");
    let out = output_of(&child);
    running().retain(|(pid, _)| *pid != child.id());
    (status, out)
}

/// How long [`finish`] waits for a role before it kills it and says so: well inside the test
/// runner's limit, so that a stuck run fails with every role's output instead of timing out.
const FINISH_WITHIN: Duration = Duration::from_secs(180);

/// Waits (at most [`FINISH_WITHIN`]) for `child`; returns whether it succeeded and its stdout +
/// stderr. A role still running then is killed, and its output says so.
pub fn finish(child: std::process::Child) -> (bool, String) {
    finish_within(child, FINISH_WITHIN)
}

/// [`finish`] with another time limit.
pub fn finish_within(mut child: std::process::Child, limit: Duration) -> (bool, String) {
    let started = std::time::Instant::now();
    while child.try_wait().expect("poll a role").is_none() {
        if started.elapsed() > limit {
            let _ = child.kill();
            let (_, out) = reap(child);
            return (
                false,
                format!("[still running after {limit:?}: killed]\n{out}"),
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let (status, out) = reap(child);
    (status.success(), out)
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

/// Waits, at most a minute, for the first RL step in `run_dir`'s log: the learner has purged
/// the bus's leftovers and started RL.
pub fn wait_for_rl(run_dir: &Path) {
    let started = std::time::Instant::now();
    while steps(run_dir, "rl").is_empty() {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60),
            "RL never started in {}",
            run_dir.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// A connection to run "default"'s queues that only publishes and reads depths: it opens no
/// consumer, so once the learner has created the queues it cannot race it changing them.
/// `ack_wait_secs` must be the run's (another would make the connection change the queues).
pub fn publisher(
    rt: &tokio::runtime::Runtime,
    url: &str,
    ack_wait_secs: u64,
) -> caprl_common::bus::NatsBus {
    use caprl_common::bus::{BusOptions, NatsBus, NatsConfig};
    let opts = BusOptions {
        ack_wait_secs,
        ..BusOptions::for_run("default")
    };
    rt.block_on(NatsBus::connect_pulling(
        &NatsConfig::to_url(url),
        &opts,
        &[],
    ))
    .expect("a publisher-only connection")
}

/// SIGKILL, reap, and return the exit status and what the child wrote (for a failure message).
pub fn kill_and_read(mut child: std::process::Child) -> String {
    let _ = child.kill();
    let (status, out) = reap(child);
    format!("[{status}]\n{out}")
}

/// SIGKILL every named role, reap it, and return what each wrote, one `--- name` block each
/// (for a failure message).
pub fn kill_all_and_read<const N: usize>(roles: [(&str, std::process::Child); N]) -> String {
    roles
        .map(|(name, c)| format!("--- {name} {}", kill_and_read(c)))
        .join("\n")
}

/// SIGKILL, then reap.
pub fn kill9(mut child: std::process::Child) {
    child.kill().unwrap();
    reap(child);
}

/// The task ids named by the lines of `log` that contain `marker` (`task-<n>` right before it).
pub fn task_ids(log: &str, marker: &str) -> Vec<String> {
    log.lines()
        .filter_map(|l| {
            let (before, _) = l.split_once(marker)?;
            let id = before.trim_end().rsplit(' ').next()?;
            id.starts_with("task-").then(|| id.to_string())
        })
        .collect()
}
