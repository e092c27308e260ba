//! Where each role's time goes: the named stages of a step, timed where they happen.
//!
//! Every timing is observed twice: as the Prometheus histogram
//! [`names::STAGE_SECONDS`] (label `stage`; a stage's name is unique over all roles, and the
//! process's own `role` label says whose it is), so a cluster's dashboard shows it, and in
//! this process's running totals, which the learner's step records ([`since`]) and the stage
//! report ([`write_report`], read by `caprl bench pipeline`) take.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use metrics::histogram;
use serde::{Deserialize, Serialize};

use super::names::{self, LABEL_STAGE};

/// One stage of one role.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Learner: the policy snapshot turned into safetensors bytes.
    SnapshotSerialise,
    /// Learner: the snapshot's bytes put into the object store and `latest` set.
    SnapshotPut,
    /// Learner: issuing the step's tasks and waiting for their scored rollouts.
    WaitResults,
    /// Learner: rewards turned into the update's targets (baselines, advantages).
    Targets,
    /// Learner: the update's forward passes and its loss.
    Forward,
    /// Learner: the backward pass and the gradient norm.
    Backward,
    /// Learner: the optimizer's step.
    Optimizer,
    /// Learner: a periodic checkpoint written.
    Checkpoint,
    /// Actor: waiting on the task queue (pulls that came back empty included).
    TaskWait,
    /// Actor: a new snapshot fetched from the object store and its sha256 checked.
    SnapshotFetch,
    /// Actor: the fetched snapshot loaded into a model and prepared for decoding.
    SnapshotLoad,
    /// Actor: decoding a task's captions.
    Decode,
    /// Actor: the rollout encoded, published and the task acked.
    RolloutPublish,
    /// Reward worker: waiting on the rollout queue.
    RolloutWait,
    /// Reward worker: scoring a rollout.
    Score,
    /// Reward worker: the scored rollout encoded, published and acked.
    ScoredPublish,
}

impl Stage {
    /// Every stage, grouped by role, in pipeline order.
    pub const ALL: [Stage; 16] = [
        Stage::SnapshotSerialise,
        Stage::SnapshotPut,
        Stage::WaitResults,
        Stage::Targets,
        Stage::Forward,
        Stage::Backward,
        Stage::Optimizer,
        Stage::Checkpoint,
        Stage::TaskWait,
        Stage::SnapshotFetch,
        Stage::SnapshotLoad,
        Stage::Decode,
        Stage::RolloutPublish,
        Stage::RolloutWait,
        Stage::Score,
        Stage::ScoredPublish,
    ];

    /// The role whose time it is, as in the `role` label.
    pub fn role(self) -> &'static str {
        use Stage::*;
        match self {
            SnapshotSerialise | SnapshotPut | WaitResults | Targets | Forward | Backward
            | Optimizer | Checkpoint => "learner",
            TaskWait | SnapshotFetch | SnapshotLoad | Decode | RolloutPublish => "actor",
            RolloutWait | Score | ScoredPublish => "reward-worker",
        }
    }

    /// The `stage` label and the key in step records and stage reports (unique over all roles).
    pub fn name(self) -> &'static str {
        use Stage::*;
        match self {
            SnapshotSerialise => "snapshot_serialise",
            SnapshotPut => "snapshot_put",
            WaitResults => "wait_results",
            Targets => "targets",
            Forward => "forward",
            Backward => "backward",
            Optimizer => "optimizer",
            Checkpoint => "checkpoint",
            TaskWait => "task_wait",
            SnapshotFetch => "snapshot_fetch",
            SnapshotLoad => "snapshot_load",
            Decode => "decode",
            RolloutPublish => "rollout_publish",
            RolloutWait => "rollout_wait",
            Score => "score",
            ScoredPublish => "scored_publish",
        }
    }

    /// The stage of waiting on its queue for a role that serves one (`actor`, `reward-worker`).
    pub fn queue_wait(role: &str) -> Option<Stage> {
        match role {
            "actor" => Some(Stage::TaskWait),
            "reward-worker" => Some(Stage::RolloutWait),
            _ => None,
        }
    }

    /// Its place in [`Stage::ALL`] (declared in the same order; a test checks it).
    fn index(self) -> usize {
        self as usize
    }
}

/// Running totals of this process: nanoseconds and observations per stage.
static NANOS: [AtomicU64; Stage::ALL.len()] = [const { AtomicU64::new(0) }; Stage::ALL.len()];
static COUNTS: [AtomicU64; Stage::ALL.len()] = [const { AtomicU64::new(0) }; Stage::ALL.len()];

/// Records `elapsed` as time spent in `stage`.
pub fn record(stage: Stage, elapsed: Duration) {
    let i = stage.index();
    NANOS[i].fetch_add(elapsed.as_nanos() as u64, Ordering::Relaxed);
    COUNTS[i].fetch_add(1, Ordering::Relaxed);
    histogram!(names::STAGE_SECONDS, LABEL_STAGE => stage.name()).record(elapsed.as_secs_f64());
}

/// Runs `f`, recording its wall time as `stage`.
pub fn time<T>(stage: Stage, f: impl FnOnce() -> T) -> T {
    let started = Instant::now();
    let out = f();
    record(stage, started.elapsed());
    out
}

/// Records the time from its start to its drop as one stage (for work with `.await`s or early
/// returns in it).
#[must_use = "the stage is recorded when the timer is dropped"]
pub struct Timer {
    stage: Stage,
    started: Instant,
}

impl Timer {
    pub fn start(stage: Stage) -> Timer {
        Timer {
            stage,
            started: Instant::now(),
        }
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        record(self.stage, self.started.elapsed());
    }
}

/// This process's totals at one moment, to subtract from later ones.
#[derive(Debug, Clone)]
pub struct Totals([u64; Stage::ALL.len()]);

/// The totals now.
pub fn totals() -> Totals {
    Totals(std::array::from_fn(|i| NANOS[i].load(Ordering::Relaxed)))
}

/// Seconds spent in each of `role`'s stages since `before` (stages with no time left out), keyed
/// by [`Stage::name`]: what a learner step record keeps.
pub fn since(before: &Totals, role: &str) -> std::collections::BTreeMap<String, f64> {
    let now = totals();
    Stage::ALL
        .iter()
        .enumerate()
        .filter(|(i, s)| s.role() == role && now.0[*i] > before.0[*i])
        .map(|(i, s)| (s.name().to_string(), (now.0[i] - before.0[i]) as f64 * 1e-9))
        .collect()
}

/// One stage's total in a [`StageReport`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageTotal {
    pub role: String,
    pub stage: String,
    /// Observations (tasks decoded, snapshots loaded, steps, ...).
    pub count: u64,
    pub seconds: f64,
}

/// What one process says of itself when it ends, when `CAPRL_STAGE_REPORT` names a folder:
/// its stages' totals, its resident memory and how long it ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageReport {
    /// The command and its `--id`, e.g. `actor actor-0`, `local`, `train`.
    pub process: String,
    pub pid: u32,
    /// Peak resident memory (`VmHWM`), bytes.
    pub peak_rss_bytes: u64,
    /// Resident memory at the end (`VmRSS`), bytes.
    pub rss_bytes: u64,
    /// Seconds from the start of `main` to the report.
    pub seconds: f64,
    pub stages: Vec<StageTotal>,
}

/// The environment variable naming the folder stage reports go to.
pub const REPORT_DIR_ENV: &str = "CAPRL_STAGE_REPORT";

impl StageReport {
    /// This process's report now.
    pub fn now(process: &str, started: Instant) -> StageReport {
        let stages = Stage::ALL
            .iter()
            .enumerate()
            .filter(|(i, _)| COUNTS[*i].load(Ordering::Relaxed) > 0)
            .map(|(i, s)| StageTotal {
                role: s.role().into(),
                stage: s.name().into(),
                count: COUNTS[i].load(Ordering::Relaxed),
                seconds: NANOS[i].load(Ordering::Relaxed) as f64 * 1e-9,
            })
            .collect();
        let rss_bytes = status_bytes("VmRSS:");
        StageReport {
            process: process.into(),
            pid: std::process::id(),
            // The kernel updates the high-water mark lazily: it can trail the current size.
            peak_rss_bytes: status_bytes("VmHWM:").max(rss_bytes),
            rss_bytes,
            seconds: started.elapsed().as_secs_f64(),
            stages,
        }
    }

    /// The seconds and count of `role`'s `stage`, (0, 0) when it never ran.
    pub fn get(&self, role: &str, stage: &str) -> (f64, u64) {
        self.stages
            .iter()
            .find(|t| t.role == role && t.stage == stage)
            .map_or((0.0, 0), |t| (t.seconds, t.count))
    }
}

/// Writes this process's report as `DIR/<pid>.json` when [`REPORT_DIR_ENV`] names a folder;
/// a failure is logged, never fatal (the report is a benchmark's, not the run's).
pub fn write_report(process: &str, started: Instant) {
    let Some(dir) = std::env::var_os(REPORT_DIR_ENV) else {
        return;
    };
    let report = StageReport::now(process, started);
    let path = Path::new(&dir).join(format!("{}.json", report.pid));
    let written = serde_json::to_vec_pretty(&report)
        .map_err(std::io::Error::other)
        .and_then(|bytes| std::fs::write(&path, bytes));
    if let Err(e) = written {
        tracing::warn!("could not write the stage report {}: {e}", path.display());
    }
}

/// A size field of this process's `/proc/self/status`, in bytes (0 where there is no procfs).
fn status_bytes(field: &str) -> u64 {
    crate::process::status_kib(None, field).map_or(0, |kib| kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_stage_has_one_index_and_a_role_of_the_three() {
        for (i, s) in Stage::ALL.iter().enumerate() {
            assert_eq!(s.index(), i);
            assert!(["learner", "actor", "reward-worker"].contains(&s.role()));
        }
        let mut names: Vec<_> = Stage::ALL.iter().map(|s| s.name()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), Stage::ALL.len(), "two stages share a name");
    }

    #[test]
    fn time_and_timers_add_to_the_totals_and_since_takes_one_roles_difference() {
        let before = totals();
        time(Stage::Optimizer, || {
            std::thread::sleep(Duration::from_millis(20))
        });
        {
            let _t = Timer::start(Stage::Score);
            std::thread::sleep(Duration::from_millis(10));
        }
        let learner = since(&before, "learner");
        assert!(learner["optimizer"] >= 0.019, "{learner:?}");
        assert!(!learner.contains_key("score"), "{learner:?}");
        let worker = since(&before, "reward-worker");
        assert!(worker["score"] >= 0.009, "{worker:?}");
        let report = StageReport::now("test", Instant::now());
        let (secs, count) = report.get("learner", "optimizer");
        assert!(secs >= 0.019 && count >= 1, "{report:?}");
        assert_eq!(report.get("actor", "no such stage"), (0.0, 0));
        if cfg!(target_os = "linux") {
            assert!(report.peak_rss_bytes >= report.rss_bytes && report.rss_bytes > 0);
        }
    }
}
