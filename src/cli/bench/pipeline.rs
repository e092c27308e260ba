//! `caprl bench pipeline`: where an RL step's time goes, role by role, for any config, in one
//! process (`caprl train`, the in-process bus) and over NATS (`caprl local` with A actors and W
//! reward workers on a nats-server of the benchmark's own).
//!
//! Each run is the real command as a child process, from a fresh policy
//! (`train.xe_epochs = 0`) for `--steps` RL steps. Every process writes its stage report when
//! it ends (`telemetry::stages`: the same timings the `caprl_stage_seconds` histogram exports)
//! with its peak resident memory; the learner's step records give the step time and the time
//! from start to the first step.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use caprl_common::bus::{LocalNatsServer, LocalNatsServerOptions};
use caprl_common::telemetry::read_run_log;
use caprl_common::telemetry::runlog::unix_ms_now;
use caprl_common::telemetry::stages::{Stage, StageReport, REPORT_DIR_ENV};
use serde::Serialize;

use crate::cli::{local_cmd, write_stdout, Global};

#[derive(Debug, clap::Args)]
pub struct PipelineArgs {
    /// RL steps per run, from a fresh policy (`train.xe_epochs = 0`).
    #[arg(long, default_value_t = 4)]
    pub steps: u64,
    /// Actors of the NATS run.
    #[arg(long, default_value_t = 2)]
    pub actors: usize,
    /// Reward workers of the NATS run.
    #[arg(long, default_value_t = 1)]
    pub reward_workers: usize,
    /// Which runs: `in-process`, `nats` or both.
    #[arg(long, value_delimiter = ',', default_value = "in-process,nats")]
    pub modes: Vec<PipelineMode>,
    /// How the NATS run's snapshots reach its actors (`caprl local --snapshots`): `files` on
    /// this host, or `nats` through the object store as across hosts.
    #[arg(long, value_enum, default_value_t = local_cmd::SnapshotTransport::Files)]
    pub snapshots: local_cmd::SnapshotTransport,
    /// The nats-server binary of the NATS run.
    #[arg(long, default_value = "nats-server")]
    pub nats_server: PathBuf,
    /// Also write the figures as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Keep the runs' directories and stage reports here (default: a temporary folder, removed).
    #[arg(long)]
    pub keep: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PipelineMode {
    InProcess,
    Nats,
}

impl PipelineMode {
    fn name(self) -> &'static str {
        match self {
            PipelineMode::InProcess => "in-process",
            PipelineMode::Nats => "nats",
        }
    }
}

/// What one run measured.
#[derive(Debug, Serialize)]
struct Measured {
    mode: PipelineMode,
    /// Actor and reward-worker processes (or in-process roles).
    actors: usize,
    reward_workers: usize,
    steps: u64,
    /// Mean wall seconds of an RL step (the step records' `seconds`).
    step_seconds: f64,
    /// Mean of the steps after the first (which also waits for every role to come up).
    later_step_seconds: f64,
    /// Seconds from starting the command to its first RL step's record.
    first_step_seconds: f64,
    /// Per `role/stage`: seconds per step summed over the role's processes, and observations.
    stages: BTreeMap<String, (f64, u64)>,
    /// Per process: peak resident memory in bytes.
    peak_rss: BTreeMap<String, u64>,
}

impl Measured {
    fn per_step(&self, stage: Stage) -> f64 {
        let key = format!("{}/{}", stage.role(), stage.name());
        self.stages.get(&key).map_or(0.0, |(s, _)| *s)
    }

    /// serialise + put (learner) + fetch + load (one actor's mean) per step: the snapshot path.
    fn snapshot_path(&self) -> f64 {
        let learner = self.per_step(Stage::SnapshotSerialise) + self.per_step(Stage::SnapshotPut);
        let actor = (self.per_step(Stage::SnapshotFetch) + self.per_step(Stage::SnapshotLoad))
            / self.actors.max(1) as f64;
        learner + actor
    }
}

pub fn run(args: PipelineArgs, global: &Global) -> Result<()> {
    if args.steps < 2 {
        bail!("--steps must be at least 2 (the first step also loads and warms every role)");
    }
    if args.actors == 0 || args.reward_workers == 0 {
        bail!("--actors and --reward-workers must be at least 1");
    }
    let cfg = global.load_config()?;
    // The built-in synthetic set is made here when missing, once for both runs.
    crate::cli::local_cmd::check_data_in_child(global)?;
    let temp = tempfile::tempdir()?;
    let root = match &args.keep {
        Some(dir) => dir.clone(),
        None => temp.path().to_path_buf(),
    };
    let mut runs = Vec::new();
    for &mode in &args.modes {
        tracing::info!("bench pipeline: the {} run", mode.name());
        runs.push(measure(&args, global, mode, &root.join(mode.name()))?);
    }
    let mut out = format!(
        "caprl bench pipeline: {} RL steps from a fresh policy, objective {}, model {}, batch {} \
         images x {} samples; the NATS run's snapshots through {}\n{}\n",
        args.steps,
        caprl_learner::objective::Objective::from_config(&cfg).name(),
        format!("{:?}", cfg.model.kind).to_lowercase(),
        cfg.train.batch_size,
        cfg.train.samples,
        match args.snapshots {
            local_cmd::SnapshotTransport::Files => "files on this host",
            local_cmd::SnapshotTransport::Nats => "the object store",
        },
        caprl_kernels::fastmath::describe(),
    );
    out.push_str(&table(&runs));
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_vec_pretty(&runs)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    write_stdout(&out)
}

/// Runs one mode's command and reads what it left.
fn measure(
    args: &PipelineArgs,
    global: &Global,
    mode: PipelineMode,
    dir: &Path,
) -> Result<Measured> {
    let reports = dir.join("stages");
    let run_dir = dir.join("run");
    std::fs::create_dir_all(&reports).with_context(|| format!("creating {}", reports.display()))?;
    let mut cmd = Command::new(std::env::current_exe()?);
    cmd.args(local_cmd::global_args(global));
    for set in [
        "train.xe_epochs=0".to_string(),
        "train.rl_epochs=1".to_string(),
        format!("train.max_steps={}", args.steps),
        // The phase ends with a validation pass: a few images, not the whole split.
        "train.eval_images=4".to_string(),
        "train.sample_images=0".to_string(),
        format!("run_dir={:?}", run_dir.display().to_string()),
    ] {
        cmd.arg("--set").arg(set);
    }
    let (server, actors, workers) = match mode {
        PipelineMode::InProcess => {
            cmd.arg("train");
            (None, 1, 1)
        }
        PipelineMode::Nats => {
            let server = LocalNatsServer::start(LocalNatsServerOptions {
                binary: args.nats_server.clone(),
                ..LocalNatsServerOptions::default()
            })
            .with_context(|| format!("starting {}", args.nats_server.display()))?;
            cmd.args(["local", "--nats-url", &server.url()]);
            cmd.args(["--actors", &args.actors.to_string()]);
            cmd.args(["--reward-workers", &args.reward_workers.to_string()]);
            cmd.args(["--snapshots", args.snapshots.name()]);
            (Some(server), args.actors, args.reward_workers)
        }
    };
    cmd.env(REPORT_DIR_ENV, &reports);
    if !global.quiet && global.verbose == 0 {
        cmd.arg("-q");
    }
    let started_ms = unix_ms_now();
    let started = Instant::now();
    let status = cmd
        .status()
        .with_context(|| format!("starting the {} run", mode.name()))?;
    drop(server);
    if !status.success() {
        bail!(
            "the {} run failed ({status}); its run directory: {} (pass --keep DIR to keep it)",
            mode.name(),
            run_dir.display()
        );
    }
    tracing::info!(
        "bench pipeline: the {} run took {:.1} s",
        mode.name(),
        started.elapsed().as_secs_f64()
    );
    let log = read_run_log(&run_dir.join("run.jsonl"))?;
    let steps: Vec<_> = log.steps.iter().filter(|s| s.phase == "rl").collect();
    let Some(first) = steps.first() else {
        bail!("the {} run logged no RL step", mode.name());
    };
    let n = steps.len() as u64;
    let mut stages: BTreeMap<String, (f64, u64)> = BTreeMap::new();
    let mut peak_rss = BTreeMap::new();
    for report in read_reports(&reports)? {
        for t in &report.stages {
            let e = stages.entry(format!("{}/{}", t.role, t.stage)).or_default();
            e.0 += t.seconds / n as f64;
            e.1 += t.count;
        }
        peak_rss.insert(report.process.clone(), report.peak_rss_bytes);
    }
    Ok(Measured {
        mode,
        actors,
        reward_workers: workers,
        steps: n,
        step_seconds: steps.iter().map(|s| s.seconds).sum::<f64>() / n as f64,
        later_step_seconds: steps[1..].iter().map(|s| s.seconds).sum::<f64>()
            / (n - 1).max(1) as f64,
        first_step_seconds: first.unix_ms.saturating_sub(started_ms) as f64 / 1e3,
        stages,
        peak_rss,
    })
}

fn read_reports(dir: &Path) -> Result<Vec<StageReport>> {
    let mut reports = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
        reports.push(
            serde_json::from_slice(&bytes)
                .with_context(|| format!("{} is not a stage report", path.display()))?,
        );
    }
    if reports.is_empty() {
        bail!("no process wrote a stage report into {}", dir.display());
    }
    reports.sort_by(|a: &StageReport, b| a.process.cmp(&b.process));
    Ok(reports)
}

/// The figures of every run side by side: seconds per step of each stage (a role's processes
/// summed), then step time, start-up and memory.
fn table(runs: &[Measured]) -> String {
    let mut out = format!("\n{:<34}", "seconds per RL step");
    for r in runs {
        out.push_str(&format!(" {:>22}", heading(r)));
    }
    out.push('\n');
    let row = |out: &mut String, label: &str, cell: &dyn Fn(&Measured) -> String| {
        out.push_str(&format!("{label:<34}"));
        for r in runs {
            out.push_str(&format!(" {:>22}", cell(r)));
        }
        out.push('\n');
    };
    for stage in Stage::ALL {
        if runs.iter().all(|r| r.per_step(stage) == 0.0) {
            continue;
        }
        let label = format!("{} {}", stage.role(), stage.name());
        row(&mut out, &label, &|r| {
            let s = r.per_step(stage);
            format!("{s:.3} ({:.0}%)", 100.0 * s / r.step_seconds.max(1e-9))
        });
    }
    row(&mut out, "step (learner, mean)", &|r| {
        format!("{:.3}", r.step_seconds)
    });
    row(&mut out, "steps after the first (mean)", &|r| {
        format!("{:.3}", r.later_step_seconds)
    });
    row(&mut out, "snapshot path (share of step)", &|r| {
        let s = r.snapshot_path();
        format!("{s:.3} ({:.1}%)", 100.0 * s / r.step_seconds.max(1e-9))
    });
    row(&mut out, "start to first step, s", &|r| {
        format!("{:.1}", r.first_step_seconds)
    });
    let processes: std::collections::BTreeSet<&String> =
        runs.iter().flat_map(|r| r.peak_rss.keys()).collect();
    for p in processes {
        row(&mut out, &format!("peak RSS {p}, MB"), &|r| {
            r.peak_rss
                .get(p)
                .map_or("-".into(), |b| format!("{:.0}", *b as f64 / 1e6))
        });
    }
    row(&mut out, "checkpoints written (s each)", &|r| {
        let key = format!("{}/{}", Stage::Checkpoint.role(), Stage::Checkpoint.name());
        let (per_step, count) = r.stages.get(&key).copied().unwrap_or_default();
        let each = per_step * r.steps as f64 / count.max(1) as f64;
        format!("{count} ({each:.2})")
    });
    out.push_str(
        "\nA role's stages are summed over its processes (actors and reward workers work side \
         by side, so their sums can pass 100%); the snapshot path is the learner's serialise + \
         put and one actor's mean fetch + load per step. Waits are idle time on a queue. Checkpoints \
         come every `checkpoint.every_steps` and at the end of the run, spread here over its steps.\n",
    );
    out
}

fn heading(r: &Measured) -> String {
    match r.mode {
        PipelineMode::InProcess => "in-process".into(),
        PipelineMode::Nats => format!("NATS {}A {}W", r.actors, r.reward_workers),
    }
}
