//! `caprl soak`: the whole system under a sustained, randomised mix of faults. Rounds of a
//! small training run go through [`crate::supervise`] (the restarts `caprl local` does) over a
//! nats-server with a file store, while a seeded [`faults::FaultSchedule`] kills roles, pauses them
//! past the ack wait, kills and restarts the broker, starts roles twice, fills the learner's
//! disk and does several of these at once. After each round [`invariants`] says whether the
//! run ended as an undisturbed one does; memory of every role is sampled throughout.

pub mod faults;
mod injector;
mod invariants;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use caprl_common::bus::{LocalNatsServer, LocalNatsServerOptions};
use caprl_common::config::Mode;
use caprl_data::SynthConfig;

use crate::cli::local_cmd::{common_args, global_args, interrupt_flag, role_specs};
use crate::cli::Global;
use crate::supervise::{Output, Policy, Progress, Supervisor};
use faults::{Fault, FaultSchedule, Kind};
use injector::Injector;
use invariants::{Expected, InvariantCheck};

/// How a soak runs.
#[derive(Debug, Clone)]
pub struct Options {
    pub duration: Duration,
    pub seed: u64,
    /// Mean time between faults.
    pub mean_gap: Duration,
    pub actors: usize,
    pub reward_workers: usize,
    /// Everything the soak writes: data, the reference run, one directory per round, the
    /// fault log and `soak.json`.
    pub out: PathBuf,
    /// The most resident memory any role may reach.
    pub max_rss_mib: u64,
    /// A round not finished by then has stalled.
    pub round_timeout: Duration,
}

/// The small run a soak repeats when no `--config` is given: rounds of half a minute
/// undisturbed, a checkpoint after every step, an ack wait a pause can outlast quickly. Two XE
/// epochs at a learning rate so high that the first validates better than the second: RL then
/// starts from weights older than the step it counts on from, the case in which step numbers,
/// checkpoint names and policy versions once went back.
const SMALL_RUN: [&str; 11] = [
    "model.hidden=32",
    "model.embed=32",
    "train.batch_size=16",
    "runtime.images_per_task=4",
    "runtime.tasks_in_flight=4",
    "train.xe_epochs=2",
    "optim.lr=0.3",
    "train.rl_epochs=24",
    "train.eval_images=8",
    "checkpoint.every_steps=1",
    "runtime.ack_wait_secs=3",
];

/// What a soak found.
pub struct Report {
    pub passed: bool,
}

/// Runs the soak; `Ok` with `passed = false` when an invariant failed or a round stalled.
pub fn run(opts: &Options, global: &Global) -> Result<Report> {
    let mut soak = Soak::prepare(opts, global)?;
    let mut rounds: Vec<RoundReport> = Vec::new();
    let mut passed = true;
    while passed && soak.started.elapsed() < opts.duration {
        let report = soak.round(rounds.len() + 1)?;
        passed = report.checks.iter().all(|c| c.ok);
        rounds.push(report);
    }
    let elapsed = soak.started.elapsed();
    let summary = summary(
        opts,
        &soak.injector,
        &rounds,
        &soak.rss_max,
        elapsed,
        passed,
    );
    soak.log.say(&summary);
    write_json(opts, &soak.injector, &rounds, &soak.rss_max, passed)?;
    if soak.interrupted.load(Ordering::SeqCst) {
        bail!("interrupted");
    }
    Ok(Report { passed })
}

/// A soak under way: its run, what the rounds are checked against, the fault stream and
/// what was seen so far.
struct Soak<'a> {
    opts: &'a Options,
    /// The command-line options of every round's roles, before the round's own.
    base: Global,
    /// The undisturbed run's final weights.
    weights: Vec<u8>,
    /// The undisturbed run's last step and RL steps.
    steps: (u64, u64),
    tasks_per_step: u64,
    sync: bool,
    max_policy_lag: u64,
    schedule: FaultSchedule,
    /// The next fault and when it fires.
    next: (Instant, Fault),
    injector: Injector,
    log: FaultLog,
    rss_max: BTreeMap<String, u64>,
    started: Instant,
    interrupted: Arc<AtomicBool>,
}

impl<'a> Soak<'a> {
    /// The data set, the config, the reference run and the fault schedule.
    fn prepare(opts: &'a Options, global: &Global) -> Result<Soak<'a>> {
        std::fs::create_dir_all(&opts.out)
            .with_context(|| format!("creating {}", opts.out.display()))?;
        let mut base = global.clone();
        if global.config.is_none() {
            let data = opts.out.join("data");
            if !data.exists() {
                make_data(&data)?;
            }
            let mut sets: Vec<String> = SMALL_RUN.iter().map(|s| s.to_string()).collect();
            sets.push(format!("data.dir={:?}", data.display().to_string()));
            sets.extend(global.sets.iter().cloned());
            base.sets = sets;
        }
        let cfg = base.load_config()?;
        let sync = cfg.runtime.mode == Mode::Sync;
        let mut log = FaultLog::create(&opts.out.join("faults.log"))?;
        log.say(&format!(
            "soak: seed {}, {:.0} s, a fault every {:.1} s on average, {} actors, {} reward \
             workers, {} mode; output in {}",
            opts.seed,
            opts.duration.as_secs_f64(),
            opts.mean_gap.as_secs_f64(),
            opts.actors,
            opts.reward_workers,
            if sync { "sync" } else { "async" },
            opts.out.display()
        ));
        log.say("reference: the same run undisturbed, in one process (caprl train)");
        let reference = reference_run(&base, &opts.out.join("reference"))?;
        let records = invariants::step_records(&reference);
        let weights = invariants::final_weights(&reference.join("checkpoints"))
            .context("the reference run left no checkpoint")?;
        let specs = role_specs(opts.actors, opts.reward_workers);
        let ack_wait = Duration::from_secs(cfg.runtime.ack_wait_secs);
        let mut schedule = FaultSchedule::new(opts.seed, opts.mean_gap, specs.len(), ack_wait);
        let started = Instant::now();
        let (gap, first) = schedule.next();
        // Half the weights file: the learner's next checkpoint write fails part-way.
        let fsize_limit = (weights.len() / 2) as u64;
        Ok(Soak {
            opts,
            base,
            weights,
            steps: (
                records.iter().map(|r| r.step).max().unwrap_or(0),
                records.iter().filter(|r| !r.task_ids.is_empty()).count() as u64,
            ),
            tasks_per_step: cfg
                .train
                .batch_size
                .div_ceil(cfg.runtime.images_per_task.max(1)) as u64,
            sync,
            max_policy_lag: cfg.runtime.max_policy_lag,
            schedule,
            next: (started + gap, first),
            injector: Injector::new(specs, fsize_limit),
            log,
            rss_max: BTreeMap::new(),
            started,
            interrupted: interrupt_flag(),
        })
    }

    /// One round: a fresh broker (file store) and run directory, the roles under supervision
    /// while faults fire, then the checks.
    fn round(&mut self, round: usize) -> Result<RoundReport> {
        let dir = self.opts.out.join(format!("round-{round}"));
        let round_global = self.base.with_sets(&[
            format!("run_dir={:?}", dir.display().to_string()),
            "checkpoint.dir=\"\"".to_string(),
            format!("runtime.run_id=\"soak-{round}\""),
            // The actors share one fetch of each version, as on one host of a cluster: kills
            // land while one holds a version's lock or writes it.
            format!(
                "runtime.snapshot_cache_dir={:?}",
                dir.join("snapshot-cache").display().to_string()
            ),
        ]);
        let server = LocalNatsServer::start(LocalNatsServerOptions {
            store_dir: Some(dir.join("jetstream")),
            ..LocalNatsServerOptions::default()
        })
        .context("starting nats-server for a soak round")?;
        let url = server.url();
        let common = common_args(&round_global, &url);
        let logs = dir.join("logs");
        self.log.say(&format!(
            "round {round}: nats-server on {url}, logs in {}",
            logs.display()
        ));
        let mut sup = Supervisor::start(
            self.injector.specs().to_vec(),
            common.clone(),
            Output::Dir(logs.clone()),
            Policy::default(),
            Some(server),
        )?;
        self.injector.start_round(round, common, &dir, logs.clone());
        let round_started = Instant::now();
        let outcome = self.drive(&mut sup, round, &logs);
        for line in self.injector.end_round(&mut sup) {
            self.say_at(round, &line);
        }
        let deaths = sup.deaths().len();
        let unplanned: Vec<String> = sup
            .deaths()
            .iter()
            .filter(|d| !d.planned)
            .map(|d| format!("{} ({})", d.role, d.status))
            .collect();
        sup.stop_all(Duration::from_secs(10));
        let mut checks = match &outcome {
            Ok(()) => invariants::check(&dir, &self.expected()),
            Err(why) => vec![InvariantCheck {
                name: "run finished",
                detail: why.clone(),
                ok: false,
            }],
        };
        checks.push(self.injector.refusals_check());
        checks.push(memory_check(&self.rss_max, self.opts.max_rss_mib));
        for c in &checks {
            let verdict = if c.ok { "ok  " } else { "FAIL" };
            self.log.say(&format!(
                "round {round}: {verdict} {}: {}",
                c.name, c.detail
            ));
        }
        if checks.iter().all(|c| c.ok) {
            // The round's broker store is only needed to debug a failure.
            let _ = std::fs::remove_dir_all(dir.join("jetstream"));
        }
        Ok(RoundReport {
            round,
            seconds: round_started.elapsed().as_secs_f64(),
            deaths,
            unplanned,
            checks,
        })
    }

    /// Supervises the round's roles until the learner finishes, firing the faults that come
    /// due and sampling memory each second; `Err` when the round cannot finish.
    fn drive(&mut self, sup: &mut Supervisor, round: usize, logs: &Path) -> Result<(), String> {
        let round_started = Instant::now();
        let mut sampled = Instant::now();
        loop {
            match sup.poll() {
                Progress::Running => {}
                Progress::Finished => return Ok(()),
                Progress::GaveUp(why) | Progress::CannotGoOn(why) => return Err(why),
            }
            if self.interrupted.load(Ordering::SeqCst) {
                return Err("interrupted".to_string());
            }
            if round_started.elapsed() > self.opts.round_timeout {
                return Err(format!(
                    "the round did not finish in {:?}: stalled (see {})",
                    self.opts.round_timeout,
                    logs.display()
                ));
            }
            let now = Instant::now();
            if now >= self.next.0 && self.started.elapsed() < self.opts.duration {
                let line = self.injector.apply(&self.next.1, sup);
                self.say_at(round, &line);
                let (gap, fault) = self.schedule.next();
                self.next = (now + gap, fault);
            }
            for line in self.injector.tick(sup) {
                self.say_at(round, &line);
            }
            if sampled.elapsed() >= Duration::from_secs(1) {
                sampled = Instant::now();
                for name in sup.names() {
                    if let Some(kib) = sup
                        .pid(&name)
                        .and_then(|pid| caprl_common::process::status_kib(Some(pid), "VmRSS:"))
                    {
                        let max = self.rss_max.entry(name).or_default();
                        *max = (*max).max(kib);
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn expected(&self) -> Expected<'_> {
        Expected {
            weights: self.sync.then_some(self.weights.as_slice()),
            tasks_per_step: self.tasks_per_step,
            last_step: self.steps.0,
            rl_steps: self.steps.1,
            sync: self.sync,
            max_policy_lag: self.max_policy_lag,
        }
    }

    /// A fault-log line stamped with the soak's clock.
    fn say_at(&mut self, round: usize, line: &str) {
        let t = self.started.elapsed().as_secs_f64();
        self.log.say(&format!("[{t:7.1} s] round {round}: {line}"));
    }
}

/// A copy of `global` with `extra` appended to its `--set`s.
/// The synthetic data set of the small run: 128 training images.
fn make_data(dir: &Path) -> Result<()> {
    let config = SynthConfig {
        train: 128,
        val: 16,
        test: 16,
        progress: false,
        ..SynthConfig::default()
    };
    caprl_data::synth(dir, &config)
        .with_context(|| format!("generating the soak's data set in {}", dir.display()))?;
    Ok(())
}

/// The undisturbed run (`caprl train`, in one process, quiet) in `dir`.
fn reference_run(base: &Global, dir: &Path) -> Result<PathBuf> {
    let exe = std::env::current_exe().context("locating the caprl binary")?;
    let mut global = base.with_sets(&[
        format!("run_dir={:?}", dir.display().to_string()),
        "checkpoint.dir=\"\"".to_string(),
    ]);
    (global.verbose, global.quiet) = (0, true);
    let out = Command::new(exe)
        .arg("train")
        .args(global_args(&global))
        .output()
        .context("running the reference caprl train")?;
    if !out.status.success() {
        bail!(
            "the reference run (caprl train) failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(dir.to_path_buf())
}

fn memory_check(rss_max: &BTreeMap<String, u64>, max_mib: u64) -> InvariantCheck {
    let over: Vec<String> = rss_max
        .iter()
        .filter(|(_, kib)| **kib / 1024 > max_mib)
        .map(|(name, kib)| format!("{name} {} MiB", kib / 1024))
        .collect();
    let peak = rss_max.values().max().copied().unwrap_or(0) / 1024;
    InvariantCheck {
        name: "memory bounded",
        ok: over.is_empty(),
        detail: match over.is_empty() {
            true => format!("largest resident set {peak} MiB (bound {max_mib} MiB)"),
            false => format!("over {max_mib} MiB: {}", over.join(", ")),
        },
    }
}

struct RoundReport {
    round: usize,
    seconds: f64,
    deaths: usize,
    /// Deaths no fault asked for, e.g. a role that gave up while the broker was down.
    unplanned: Vec<String>,
    checks: Vec<InvariantCheck>,
}

fn summary(
    opts: &Options,
    injector: &Injector,
    rounds: &[RoundReport],
    rss_max: &BTreeMap<String, u64>,
    elapsed: Duration,
    passed: bool,
) -> String {
    let mut s = format!(
        "\nsoak {} after {:.1} min (seed {}): {} rounds, {} role deaths\nfaults applied (missed: the \
         target was down already):\n",
        if passed { "PASSED" } else { "FAILED" },
        elapsed.as_secs_f64() / 60.0,
        opts.seed,
        rounds.len(),
        rounds.iter().map(|r| r.deaths).sum::<usize>()
    );
    for kind in Kind::ALL {
        let (applied, missed) = injector.count(kind);
        s.push_str(&format!(
            "  {:<10} {applied:>4} ({missed} missed)\n",
            kind.name()
        ));
    }
    s.push_str(&format!("  {:<10} {:>4}\n", "total", injector.total()));
    let (checkpoint, other) = failed_writes(&opts.out, rounds.len());
    s.push_str(&format!(
        "writes the learner saw fail as on a full disk: {checkpoint} checkpoint files, {other} \
         others (run log, TensorBoard)\n"
    ));
    s.push_str("peak resident memory:");
    for (name, kib) in rss_max {
        s.push_str(&format!(" {name} {} MiB;", kib / 1024));
    }
    s.push('\n');
    for r in rounds {
        let failed: Vec<&str> = r.checks.iter().filter(|c| !c.ok).map(|c| c.name).collect();
        s.push_str(&format!(
            "round {}: {:.0} s, {} deaths ({} unplanned{}), {}\n",
            r.round,
            r.seconds,
            r.deaths,
            r.unplanned.len(),
            match r.unplanned.is_empty() {
                true => String::new(),
                false => format!(": {}", r.unplanned.join(", ")),
            },
            match failed.is_empty() {
                true => "every invariant holds".to_string(),
                false => format!("FAILED: {}", failed.join(", ")),
            }
        ));
    }
    s
}

/// The learner's writes that failed with EFBIG in the first `rounds` rounds: (checkpoint
/// files, other files), from the learners' logs.
fn failed_writes(out: &Path, rounds: usize) -> (usize, usize) {
    let mut counts = (0, 0);
    for round in 1..=rounds {
        let log = out.join(format!("round-{round}/logs/learner.log"));
        let text = std::fs::read_to_string(log).unwrap_or_default();
        for line in text
            .lines()
            .filter(|l| l.starts_with("error:") && l.contains("File too large"))
        {
            match line.contains(".tmp-ckpt-") {
                true => counts.0 += 1,
                false => counts.1 += 1,
            }
        }
    }
    counts
}

fn write_json(
    opts: &Options,
    injector: &Injector,
    rounds: &[RoundReport],
    rss_max: &BTreeMap<String, u64>,
    passed: bool,
) -> Result<()> {
    let faults: serde_json::Map<String, serde_json::Value> = Kind::ALL
        .iter()
        .map(|k| {
            let (applied, missed) = injector.count(*k);
            (
                k.name().to_string(),
                serde_json::json!({"applied": applied, "missed": missed}),
            )
        })
        .collect();
    let rounds: Vec<serde_json::Value> = rounds
        .iter()
        .map(|r| {
            serde_json::json!({
                "round": r.round,
                "seconds": r.seconds,
                "deaths": r.deaths,
                "unplanned_deaths": r.unplanned,
                "checks": r.checks.iter().map(|c| serde_json::json!({
                    "name": c.name, "ok": c.ok, "detail": c.detail
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    let json = serde_json::json!({
        "passed": passed,
        "seed": opts.seed,
        "seconds": opts.duration.as_secs_f64(),
        "faults": faults,
        "faults_total": injector.total(),
        "rounds": rounds,
        "peak_rss_kib": rss_max,
    });
    let path = opts.out.join("soak.json");
    std::fs::write(&path, serde_json::to_string_pretty(&json)?)
        .with_context(|| format!("writing {}", path.display()))
}

/// Fault and result lines, to stdout and `faults.log`.
struct FaultLog {
    file: std::fs::File,
}

impl FaultLog {
    fn create(path: &Path) -> Result<FaultLog> {
        let file =
            std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
        Ok(FaultLog { file })
    }

    fn say(&mut self, line: &str) {
        let _ = writeln!(std::io::stdout().lock(), "{line}");
        let _ = writeln!(self.file, "{line}");
    }
}
