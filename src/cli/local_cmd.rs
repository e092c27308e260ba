//! `caprl local`: the whole distributed system on one machine. Starts
//! `nats-server` (on a free port, with a temporary JetStream store) unless
//! `--nats-url` is given, spawns the learner, `--actors` actors and
//! `--reward-workers` reward workers as processes of this binary, merges their
//! logs with a `[role]` prefix, and keeps them running: a role that dies is
//! restarted (the learner with `--resume`), and so is the nats-server it started.
//! Stops everything when the learner is done or on Ctrl-C; exits non-zero only
//! when a role keeps failing (see [`crate::supervise`]). Before it starts any role it connects
//! to the server once the way the roles do, so that a wrong URL, credential or certificate is
//! one clear error at once rather than roles that die and are restarted until it gives up.

use std::time::Duration;

use anyhow::{bail, Context, Result};
use caprl_common::bus::{LocalNatsServer, LocalNatsServerOptions};
use caprl_common::config::RunConfig;

use super::local_snapshots::LocalSnapshots;
pub use super::local_snapshots::SnapshotTransport;
use super::Global;
use crate::roles;
use crate::supervise::{Output, Policy, Progress, RoleSpec, Supervisor};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Actor processes.
    #[arg(long, default_value_t = 2)]
    pub actors: usize,
    /// Reward-worker processes.
    #[arg(long, default_value_t = 2)]
    pub reward_workers: usize,
    /// Use this NATS server instead of starting one.
    #[arg(long)]
    pub nats_url: Option<String>,
    /// How policy snapshots reach the actors and reward workers: `files` written once to
    /// `runtime.snapshot_dir` (default: shared memory, removed at the end, or `<run_dir>/snapshots`
    /// where it lacks room) and mapped by every reader on this host, or `nats` through the run's
    /// object store, one copy per reader (as across hosts).
    #[arg(long, value_enum, default_value_t = SnapshotTransport::Files)]
    pub snapshots: SnapshotTransport,
}

pub fn run(args: Args, global: &Global) -> Result<()> {
    let cfg = global.load_config()?;
    if args.actors == 0 || args.reward_workers == 0 {
        bail!("caprl local needs --actors >= 1 and --reward-workers >= 1");
    }
    let snapshots = LocalSnapshots::choose(&cfg, args.snapshots)?;
    let global = &global.with_sets(&snapshots.sets);
    // Generate the data set once, before the roles race to open it (and before a server starts:
    // a wrong data.dir fails with nothing to clean up).
    check_data_in_child(global)?;
    let (server, url) = match &args.nats_url {
        Some(u) => (None, u.clone()),
        None => {
            let s = LocalNatsServer::start(LocalNatsServerOptions::default())
                .context("starting a local nats-server for `caprl local` (or pass --nats-url)")?;
            let url = s.url();
            tracing::info!(
                "nats-server on {url} (JetStream store {})",
                s.store_dir().display()
            );
            (Some(s), url)
        }
    };
    check_bus(&cfg, &url)?;
    let interrupted = interrupt_flag();
    let mut sup = Supervisor::start(
        role_specs(args.actors, args.reward_workers),
        common_args(global, &url),
        Output::Terminal,
        Policy::default(),
        server,
    )?;
    let progress = loop {
        let p = sup.poll();
        if !matches!(p, Progress::Running) || interrupted.load(std::sync::atomic::Ordering::SeqCst)
        {
            break p;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let unclean = sup.stop_all(Duration::from_secs(10));
    let restarts: Vec<String> = sup
        .restarts()
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .map(|(name, n)| format!("{name} {n}×"))
        .collect();
    if !restarts.is_empty() {
        tracing::info!("roles restarted during the run: {}", restarts.join(", "));
    }
    match progress {
        Progress::GaveUp(why) => bail!("{why}"),
        Progress::CannotGoOn(why) => Err(crate::supervise::RunCannotGoOn(why).into()),
        Progress::Running => bail!("interrupted"),
        Progress::Finished if !unclean.is_empty() => {
            // Roles stopped by us after the learner finished end with SIGTERM handling (exit 0).
            bail!("a role failed while stopping: {}", unclean.join("; "))
        }
        Progress::Finished => Ok(()),
    }
}

/// Connects to the run's bus once, as every role will (same settings, same code), and lets go:
/// the bus's own error (TLS, rejected credentials, unreachable server, no JetStream) before
/// anything is started or written.
fn check_bus(cfg: &RunConfig, url: &str) -> Result<()> {
    let rt = roles::runtime()?;
    let bus = rt.block_on(roles::connect(cfg, Some(url), &[]))?;
    drop(bus);
    Ok(())
}

/// The roles of a local run: the learner (restarted with `--resume`), `actors` actors and
/// `workers` reward workers, named `actor-<i>` and `reward-worker-<i>` (also their `--id`).
pub fn role_specs(actors: usize, workers: usize) -> Vec<RoleSpec> {
    let mut specs = vec![RoleSpec {
        name: "learner".into(),
        args: vec!["learner".into()],
        restart_args: vec!["--resume".into()],
        finishes_run: true,
    }];
    for (role, n) in [("actor", actors), ("reward-worker", workers)] {
        for i in 0..n {
            let name = format!("{role}-{i}");
            specs.push(RoleSpec {
                args: vec![role.into(), "--id".into(), name.clone()],
                name,
                restart_args: Vec::new(),
                finishes_run: false,
            });
        }
    }
    specs
}

/// Opens and checks the run config's data set (generating the default synthetic task when it
/// is missing) in a child `caprl data check`, whose errors reach this process's stderr. The
/// caller only supervises, so it never holds the check's memory (every image's captions:
/// 0.65 GB at Karpathy's sizes).
pub fn check_data_in_child(global: &Global) -> Result<()> {
    let exe = std::env::current_exe().context("finding the caprl binary for the data check")?;
    let status = std::process::Command::new(exe)
        .args(["data", "check"])
        .args(global_args(global))
        // Not one of the run's processes: no stage report of its own.
        .env_remove(caprl_common::telemetry::stages::REPORT_DIR_ENV)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .status()
        .context("running `caprl data check`")?;
    if !status.success() {
        bail!("the data set check failed (its error is above); no server or role was run");
    }
    Ok(())
}

/// The arguments every role of a local run gets: this command's [`global_args`] and the NATS
/// URL.
pub fn common_args(global: &Global, url: &str) -> Vec<String> {
    let mut args = global_args(global);
    args.extend(["--nats-url".to_string(), url.to_string()]);
    args
}

/// `global` as command-line arguments: the config, the `--set`s and the verbosity.
pub fn global_args(global: &Global) -> Vec<String> {
    let mut args: Vec<String> = Vec::new();
    if let Some(c) = &global.config {
        args.push("--config".into());
        args.push(c.display().to_string());
    }
    for s in &global.sets {
        args.push("--set".into());
        args.push(s.clone());
    }
    for _ in 0..global.verbose {
        args.push("-v".into());
    }
    if global.quiet {
        args.push("-q".into());
    }
    args
}

/// A flag set on Ctrl-C or SIGTERM.
pub fn interrupt_flag() -> std::sync::Arc<std::sync::atomic::AtomicBool> {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    static FLAG: std::sync::OnceLock<Arc<AtomicBool>> = std::sync::OnceLock::new();
    let flag = FLAG
        .get_or_init(|| Arc::new(AtomicBool::new(false)))
        .clone();
    extern "C" fn on_signal(_: libc::c_int) {
        if let Some(f) = FLAG.get() {
            f.store(true, Ordering::SeqCst);
        }
    }
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(
            libc::SIGINT,
            on_signal as extern "C" fn(libc::c_int) as *const () as libc::sighandler_t,
        );
        libc::signal(
            libc::SIGTERM,
            on_signal as extern "C" fn(libc::c_int) as *const () as libc::sighandler_t,
        );
    }
    flag
}
