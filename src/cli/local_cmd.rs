//! `caprl local`: the whole distributed system on one machine. Starts
//! `nats-server` (on a free port, with a temporary JetStream store) unless
//! `--nats-url` is given, spawns the learner, `--actors` actors and
//! `--reward-workers` reward workers as processes of this binary, merges their
//! logs with a `[role]` prefix, and stops everything when the learner is done
//! or on Ctrl-C. Exits non-zero if any role failed.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use caprl_common::bus::{LocalNatsServer, LocalNatsServerOptions};

use super::Global;
use crate::setup;

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
}

struct Role {
    name: String,
    child: Child,
    /// Exit status once it ended.
    status: Option<std::process::ExitStatus>,
}

pub fn run(args: Args, global: &Global) -> Result<()> {
    let cfg = global.load_config()?;
    if args.actors == 0 || args.reward_workers == 0 {
        bail!("caprl local needs --actors >= 1 and --reward-workers >= 1");
    }
    // Generate the data set once, before the roles race to open it (and before a server starts:
    // a wrong data.dir fails with nothing to clean up).
    setup::open_data(&cfg, true)?;
    let mut server = None;
    let url = match &args.nats_url {
        Some(u) => u.clone(),
        None => {
            let s = LocalNatsServer::start(LocalNatsServerOptions::default())
                .context("starting a local nats-server for `caprl local` (or pass --nats-url)")?;
            let url = s.url();
            tracing::info!(
                "nats-server on {url} (JetStream store {})",
                s.store_dir().display()
            );
            server = Some(s);
            url
        }
    };
    let exe = std::env::current_exe().context("locating the caprl binary")?;
    let mut common: Vec<String> = Vec::new();
    if let Some(c) = &global.config {
        common.push("--config".into());
        common.push(c.display().to_string());
    }
    for s in &global.sets {
        common.push("--set".into());
        common.push(s.clone());
    }
    for _ in 0..global.verbose {
        common.push("-v".into());
    }
    if global.quiet {
        common.push("-q".into());
    }
    let mut specs: Vec<(String, Vec<String>)> = vec![("learner".into(), vec!["learner".into()])];
    for i in 0..args.actors {
        specs.push((
            format!("actor-{i}"),
            vec!["actor".into(), "--id".into(), format!("actor-{i}")],
        ));
    }
    for i in 0..args.reward_workers {
        specs.push((
            format!("reward-worker-{i}"),
            vec![
                "reward-worker".into(),
                "--id".into(),
                format!("reward-worker-{i}"),
            ],
        ));
    }
    let mut roles: Vec<Role> = Vec::new();
    let mut pumps = Vec::new();
    for (name, sub) in specs {
        let mut cmd = Command::new(&exe);
        cmd.args(&common).args(&sub).arg("--nats-url").arg(&url);
        cmd.stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .stdin(Stdio::null());
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                stop_all(&mut roles, Duration::from_secs(5));
                return Err(e).with_context(|| format!("starting {name} ({})", exe.display()));
            }
        };
        if let Some(out) = child.stdout.take() {
            pumps.push(pump(out, name.clone(), false));
        }
        if let Some(err) = child.stderr.take() {
            pumps.push(pump(err, name.clone(), true));
        }
        roles.push(Role {
            name,
            child,
            status: None,
        });
    }
    let interrupted = interrupt_flag();
    let mut failed: Vec<String> = Vec::new();
    loop {
        for r in roles.iter_mut().filter(|r| r.status.is_none()) {
            if let Ok(Some(st)) = r.child.try_wait() {
                r.status = Some(st);
                if !st.success() {
                    failed.push(format!("{} exited with {st}", r.name));
                }
            }
        }
        let learner_done = roles[0].status.is_some();
        if learner_done
            || !failed.is_empty()
            || interrupted.load(std::sync::atomic::Ordering::SeqCst)
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let was_interrupted = interrupted.load(std::sync::atomic::Ordering::SeqCst);
    stop_all(&mut roles, Duration::from_secs(10));
    for p in pumps {
        let _ = p.join();
    }
    if let Some(mut s) = server.take() {
        s.stop();
    }
    if was_interrupted {
        bail!("interrupted");
    }
    if !failed.is_empty() {
        bail!("a role failed: {}", failed.join("; "));
    }
    // Roles stopped by us after the learner finished end with SIGTERM handling (exit 0).
    let late: Vec<String> = roles
        .iter()
        .skip(1)
        .filter_map(|r| {
            r.status
                .filter(|s| !s.success())
                .map(|s| format!("{} exited with {s}", r.name))
        })
        .collect();
    if !late.is_empty() {
        bail!("a role failed while stopping: {}", late.join("; "));
    }
    Ok(())
}

/// Copies a child's output line by line with a `[name]` prefix.
fn pump<R: Read + Send + 'static>(
    from: R,
    name: String,
    to_stderr: bool,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let reader = BufReader::new(from);
        for line in reader.split(b'\n') {
            let Ok(line) = line else { break };
            let text = String::from_utf8_lossy(&line);
            let text = text.trim_end_matches('\r');
            if to_stderr {
                let _ = writeln!(std::io::stderr().lock(), "[{name}] {text}");
            } else {
                let _ = writeln!(std::io::stdout().lock(), "[{name}] {text}");
            }
        }
    })
}

/// SIGTERM to every running role, then SIGKILL to those still running after `grace`.
fn stop_all(roles: &mut [Role], grace: Duration) {
    for r in roles.iter_mut().filter(|r| r.status.is_none()) {
        if let Ok(pid) = i32::try_from(r.child.id()) {
            // SAFETY: kill(2) on the pid of a child we spawned and have not reaped.
            unsafe {
                libc::kill(pid, libc::SIGTERM);
            }
        }
    }
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline && roles.iter().any(|r| r.status.is_none()) {
        for r in roles.iter_mut().filter(|r| r.status.is_none()) {
            if let Ok(Some(st)) = r.child.try_wait() {
                r.status = Some(st);
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    for r in roles.iter_mut().filter(|r| r.status.is_none()) {
        tracing::warn!("{} did not stop in {grace:?}: killing it", r.name);
        let _ = r.child.kill();
        r.status = r.child.wait().ok();
    }
}

/// A flag set on Ctrl-C or SIGTERM.
fn interrupt_flag() -> std::sync::Arc<std::sync::atomic::AtomicBool> {
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
