//! Keeping the role processes of one machine alive: `caprl local` and `caprl soak` start the
//! learner, actors and reward workers as child processes of this binary and restart each one
//! that dies (with backoff; the learner with `--resume`), and the nats-server they started too.
//! The run ends when the role that finishes it (the learner) exits cleanly; it is given up only
//! when a role keeps dying within seconds of each start, as a bad config makes it do.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use caprl_common::bus::LocalNatsServer;

mod output;

pub use output::Output;
use output::{lock, open_log, pump, Sink};

/// The exit code of a role that stopped because the run cannot go on (the learner waited for
/// results no live role can deliver): restarting it would only wait again, so the supervisor
/// gives the run up at once, with the role's last lines.
pub const EXIT_CANNOT_GO_ON: u8 = 3;

/// A supervised run ended by a role that stopped with [`EXIT_CANNOT_GO_ON`]: the role's name,
/// why, and its last lines. `caprl local` exits with the same code on it.
#[derive(Debug)]
pub struct RunCannotGoOn(pub String);

impl std::fmt::Display for RunCannotGoOn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RunCannotGoOn {}

/// One role process: how to start it.
#[derive(Debug, Clone)]
pub struct RoleSpec {
    /// Its name in logs, e.g. `actor-0`.
    pub name: String,
    /// The arguments of its first start (after the binary).
    pub args: Vec<String>,
    /// Added to `args` when it is started again (`--resume` for the learner).
    pub restart_args: Vec<String>,
    /// Whether its clean exit ends the run (the learner's).
    pub finishes_run: bool,
}

/// When to restart and when to give up.
#[derive(Debug, Clone)]
pub struct Policy {
    /// Wait before the first restart after a death; doubles with each quick death in a row.
    pub first_backoff: Duration,
    pub max_backoff: Duration,
    /// A role that dies sooner than this after its start died *quickly*.
    pub quick: Duration,
    /// Give the run up when a role died quickly this many times in a row,
    pub give_up_after: u32,
    /// or died this many times, however long each lived, within `window` (a learner that
    /// fails at the same step after each resume).
    pub max_deaths: u32,
    pub window: Duration,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            first_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(30),
            quick: Duration::from_secs(10),
            // With the backoff doubling from 1 s: a broker unreachable for half a minute.
            give_up_after: 6,
            max_deaths: 10,
            window: Duration::from_secs(600),
        }
    }
}

/// How the supervised run stands.
#[derive(Debug)]
pub enum Progress {
    Running,
    /// The role that finishes the run exited cleanly.
    Finished,
    /// A role keeps failing: which, how, and its last lines of output.
    GaveUp(String),
    /// A role stopped because the run cannot go on ([`EXIT_CANNOT_GO_ON`]): which, and its last
    /// lines of output. It is not restarted: a restart would find the run as it is.
    CannotGoOn(String),
}

/// A role's death as the supervisor saw it.
#[derive(Debug, Clone)]
pub struct Death {
    pub role: String,
    pub status: String,
    /// Whether the death was asked for (`Supervisor::kill`, [`Supervisor::expect_exit`]).
    pub planned: bool,
}

struct Supervised {
    spec: RoleSpec,
    child: Option<Child>,
    started: Instant,
    /// When to start it again, once it died.
    restart_at: Option<Instant>,
    quick_deaths: u32,
    /// When its deaths that count towards giving up happened, within the policy's window.
    recent_deaths: VecDeque<Instant>,
    restarts: u32,
    /// The next death was caused on purpose (a fault injected by `caprl soak`): it does not
    /// count towards giving up.
    planned: bool,
    tail: Arc<Mutex<VecDeque<String>>>,
}

/// The role processes of one run, and the nats-server when this process started it.
pub struct Supervisor {
    exe: PathBuf,
    /// Arguments every role gets after its own (config, `--nats-url`).
    common: Vec<String>,
    output: Output,
    policy: Policy,
    roles: Vec<Supervised>,
    pumps: Vec<std::thread::JoinHandle<()>>,
    server: Option<LocalNatsServer>,
    /// The server is kept down until then (a broker outage injected by `caprl soak`).
    server_down_until: Option<Instant>,
    /// When the server last went down or came back: a role that dies around then died of the
    /// outage, not of something wrong with it.
    server_blip: Option<Instant>,
    deaths: Vec<Death>,
}

impl Supervisor {
    /// Starts every role in `specs`.
    pub fn start(
        specs: Vec<RoleSpec>,
        common: Vec<String>,
        output: Output,
        policy: Policy,
        server: Option<LocalNatsServer>,
    ) -> Result<Supervisor> {
        let exe = std::env::current_exe().context("locating the caprl binary")?;
        if let Output::Dir(dir) = &output {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("creating the log directory {}", dir.display()))?;
        }
        let mut sup = Supervisor {
            exe,
            common,
            output,
            policy,
            roles: Vec::new(),
            pumps: Vec::new(),
            server,
            server_down_until: None,
            server_blip: None,
            deaths: Vec::new(),
        };
        for spec in specs {
            let mut role = Supervised {
                spec,
                child: None,
                started: Instant::now(),
                restart_at: None,
                quick_deaths: 0,
                recent_deaths: VecDeque::new(),
                restarts: 0,
                planned: false,
                tail: Arc::new(Mutex::new(VecDeque::new())),
            };
            if let Err(e) = sup.spawn(&mut role, false) {
                sup.roles.push(role);
                sup.stop_all(Duration::from_secs(5));
                return Err(e);
            }
            sup.roles.push(role);
        }
        Ok(sup)
    }

    fn spawn(&mut self, role: &mut Supervised, again: bool) -> Result<()> {
        let mut cmd = Command::new(&self.exe);
        cmd.args(&role.spec.args);
        if again {
            cmd.args(&role.spec.restart_args);
        }
        cmd.args(&self.common)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .stdin(Stdio::null());
        // A role outlives no supervisor: when this process dies, however it dies, the kernel
        // sends the role SIGTERM (roles stop cleanly on it).
        // SAFETY: prctl(2) only, between fork and exec.
        unsafe {
            use std::os::unix::process::CommandExt;
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                Ok(())
            });
        }
        let name = role.spec.name.clone();
        let mut child = cmd
            .spawn()
            .with_context(|| format!("starting {name} ({})", self.exe.display()))?;
        let file = match &self.output {
            Output::Terminal => None,
            Output::Dir(dir) => Some(Arc::new(Mutex::new(open_log(dir, &name)?))),
        };
        if let Some(out) = child.stdout.take() {
            let sink = Sink::new(&name, false, file.clone(), &role.tail);
            self.pumps.push(pump(out, sink));
        }
        if let Some(err) = child.stderr.take() {
            let sink = Sink::new(&name, true, file, &role.tail);
            self.pumps.push(pump(err, sink));
        }
        tracing::info!("{name} started (pid {})", child.id());
        role.child = Some(child);
        role.started = Instant::now();
        role.restart_at = None;
        Ok(())
    }

    /// Reaps the roles that died, restarts those whose backoff is over (and the nats-server),
    /// and says whether the run finished or must be given up.
    pub fn poll(&mut self) -> Progress {
        self.keep_server_up();
        let now = Instant::now();
        let mut roles = std::mem::take(&mut self.roles);
        let mut progress = Progress::Running;
        for role in roles.iter_mut() {
            if let Some(child) = role.child.as_mut() {
                let Ok(Some(status)) = child.try_wait() else {
                    continue;
                };
                role.child = None;
                if status.success() && role.spec.finishes_run {
                    progress = Progress::Finished;
                    continue;
                }
                if let Some(ended) = self.died(role, status, now) {
                    progress = ended;
                }
            } else if role.restart_at.is_some_and(|at| at <= now) {
                role.restarts += 1;
                tracing::info!(
                    "restarting {} (restart {}{})",
                    role.spec.name,
                    role.restarts,
                    match role.spec.restart_args.is_empty() {
                        true => String::new(),
                        false => format!(", with {}", role.spec.restart_args.join(" ")),
                    }
                );
                if let Err(e) = self.spawn(role, true) {
                    progress = Progress::GaveUp(format!("{e:#}"));
                }
            }
        }
        self.roles = roles;
        progress
    }

    /// Books a death and schedules the restart; `Some` of how the run ends when the role said
    /// the run cannot go on ([`Progress::CannotGoOn`]) or keeps failing ([`Progress::GaveUp`]).
    fn died(
        &mut self,
        role: &mut Supervised,
        status: ExitStatus,
        now: Instant,
    ) -> Option<Progress> {
        let lived = now.duration_since(role.started);
        let planned = std::mem::take(&mut role.planned);
        self.deaths.push(Death {
            role: role.spec.name.clone(),
            status: status.to_string(),
            planned,
        });
        let outage = self.server_down_until.is_some()
            || self
                .server_blip
                .is_some_and(|t| now.duration_since(t) < self.policy.quick);
        if planned || outage || lived >= self.policy.quick {
            role.quick_deaths = 0;
        } else {
            role.quick_deaths += 1;
        }
        if !planned && !outage {
            role.recent_deaths.push_back(now);
        }
        while role
            .recent_deaths
            .front()
            .is_some_and(|t| now.duration_since(*t) > self.policy.window)
        {
            role.recent_deaths.pop_front();
        }
        let last_lines = || {
            lock(&role.tail)
                .iter()
                .cloned()
                .collect::<Vec<_>>()
                .join("\n")
        };
        if status.code() == Some(i32::from(EXIT_CANNOT_GO_ON)) {
            return Some(Progress::CannotGoOn(format!(
                "{} stopped because the run cannot go on. Its last lines:\n{}",
                role.spec.name,
                last_lines()
            )));
        }
        let why = if role.quick_deaths >= self.policy.give_up_after {
            Some(format!(
                "it exited with {status} {} times in a row, each within {:?} of its start",
                role.quick_deaths, self.policy.quick
            ))
        } else if role.recent_deaths.len() as u32 >= self.policy.max_deaths {
            Some(format!(
                "it died {} times within {:?}, the last time with {status}",
                role.recent_deaths.len(),
                self.policy.window
            ))
        } else {
            None
        };
        if let Some(why) = why {
            return Some(Progress::GaveUp(format!(
                "{} keeps failing: {why}. Its last lines:\n{}",
                role.spec.name,
                last_lines()
            )));
        }
        let backoff = self
            .policy
            .first_backoff
            .saturating_mul(1 << role.quick_deaths.min(16))
            .min(self.policy.max_backoff);
        let how = match planned {
            true => "stopped on purpose",
            false => "died",
        };
        tracing::warn!(
            "{} {how} ({status}) after {:.1} s: restarting it in {:.1} s",
            role.spec.name,
            lived.as_secs_f64(),
            backoff.as_secs_f64()
        );
        role.restart_at = Some(now + backoff);
        None
    }

    /// Restarts the nats-server this process started when it died (same port and store),
    /// unless it is being kept down.
    fn keep_server_up(&mut self) {
        if self.server_down_until.is_some_and(|t| Instant::now() < t) {
            return;
        }
        self.server_down_until = None;
        let Some(server) = self.server.as_mut() else {
            return;
        };
        if server.is_running() {
            return;
        }
        self.server_blip = Some(Instant::now());
        tracing::warn!(
            "nats-server on port {} is down: restarting it on its port and store",
            server.port()
        );
        if let Err(e) = server.restart() {
            tracing::error!("restarting nats-server: {e} (trying again)");
        }
    }

    /// Kills the nats-server (SIGKILL) and keeps it down for `outage`.
    pub fn take_server_down(&mut self, outage: Duration) -> bool {
        let Some(server) = self.server.as_mut() else {
            return false;
        };
        server.stop();
        self.server_down_until = Some(Instant::now() + outage);
        self.server_blip = Some(Instant::now());
        true
    }

    /// The names of the roles, in start order.
    pub fn names(&self) -> Vec<String> {
        self.roles.iter().map(|r| r.spec.name.clone()).collect()
    }

    /// The pid of the running process of role `name`.
    pub fn pid(&self, name: &str) -> Option<u32> {
        self.find(name)
            .and_then(|r| r.child.as_ref())
            .map(Child::id)
    }

    fn find(&self, name: &str) -> Option<&Supervised> {
        self.roles.iter().find(|r| r.spec.name == name)
    }

    /// Sends `signal` to role `name` if its running process is still `pid`; a SIGKILL makes
    /// its death planned. Returns whether it was sent.
    pub fn signal(&mut self, name: &str, pid: u32, signal: i32) -> bool {
        let Some(role) = self.roles.iter_mut().find(|r| r.spec.name == name) else {
            return false;
        };
        if role.child.as_ref().map(Child::id) != Some(pid) {
            return false;
        }
        if signal == libc::SIGKILL {
            role.planned = true;
        }
        send(pid, signal)
    }

    /// Marks the next death of role `name` as planned (a fault that makes it exit).
    pub fn expect_exit(&mut self, name: &str) {
        if let Some(role) = self.roles.iter_mut().find(|r| r.spec.name == name) {
            role.planned = true;
        }
    }

    /// Every death seen so far.
    pub fn deaths(&self) -> &[Death] {
        &self.deaths
    }

    /// SIGTERM to every running role, SIGKILL to those still running after `grace`, then the
    /// nats-server stops. Returns the roles that did not exit cleanly, with their status.
    pub fn stop_all(&mut self, grace: Duration) -> Vec<String> {
        for child in self.roles.iter().filter_map(|r| r.child.as_ref()) {
            // A stopped (SIGSTOP) process must run to handle the SIGTERM.
            send(child.id(), libc::SIGCONT);
            send(child.id(), libc::SIGTERM);
        }
        let deadline = Instant::now() + grace;
        let mut unclean = Vec::new();
        for role in self.roles.iter_mut() {
            let Some(mut child) = role.child.take() else {
                continue;
            };
            let status = loop {
                match child.try_wait() {
                    Ok(Some(st)) => break Some(st),
                    Ok(None) if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(50))
                    }
                    _ => {
                        tracing::warn!("{} did not stop in {grace:?}: killing it", role.spec.name);
                        let _ = child.kill();
                        break child.wait().ok();
                    }
                }
            };
            if let Some(st) = status.filter(|s| !s.success()) {
                unclean.push(format!("{} exited with {st}", role.spec.name));
            }
        }
        for p in self.pumps.drain(..) {
            let _ = p.join();
        }
        if let Some(mut s) = self.server.take() {
            s.stop();
        }
        unclean
    }

    /// How often each role was restarted, in start order.
    pub fn restarts(&self) -> Vec<(String, u32)> {
        self.roles
            .iter()
            .map(|r| (r.spec.name.clone(), r.restarts))
            .collect()
    }
}

/// kill(2); whether the signal was delivered.
pub fn send(pid: u32, signal: i32) -> bool {
    let Ok(pid) = i32::try_from(pid) else {
        return false;
    };
    // SAFETY: kill(2) on the pid of a child this process spawned and has not reaped.
    unsafe { libc::kill(pid, signal) == 0 }
}

#[cfg(test)]
mod tests {
    //! The roles here are this test binary itself: `--list` exits 0 at once, an unknown flag
    //! exits 1 at once (with a line on stderr).
    use super::*;

    fn spec(args: &[&str], finishes_run: bool) -> RoleSpec {
        RoleSpec {
            name: "role".into(),
            args: args.iter().map(|s| s.to_string()).collect(),
            restart_args: Vec::new(),
            finishes_run,
        }
    }

    fn fast(quick: Duration, give_up_after: u32, max_deaths: u32) -> Policy {
        Policy {
            first_backoff: Duration::from_millis(10),
            max_backoff: Duration::from_millis(50),
            quick,
            give_up_after,
            max_deaths,
            window: Duration::from_secs(60),
        }
    }

    fn until_settled(sup: &mut Supervisor) -> Progress {
        let started = Instant::now();
        loop {
            match sup.poll() {
                Progress::Running => {}
                done => return done,
            }
            assert!(started.elapsed() < Duration::from_secs(60), "never settled");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn logs() -> (tempfile::TempDir, Output) {
        let dir = tempfile::tempdir().unwrap();
        let out = Output::Dir(dir.path().to_path_buf());
        (dir, out)
    }

    #[test]
    fn the_run_finishes_when_its_finishing_role_exits_cleanly() {
        let (_dir, out) = logs();
        let policy = fast(Duration::from_secs(10), 3, 10);
        let mut sup =
            Supervisor::start(vec![spec(&["--list"], true)], vec![], out, policy, None).unwrap();
        assert!(matches!(until_settled(&mut sup), Progress::Finished));
        assert!(sup.deaths().is_empty());
        assert!(sup.stop_all(Duration::from_secs(1)).is_empty());
    }

    #[test]
    fn a_role_dying_at_each_start_is_restarted_then_given_up_with_its_last_lines() {
        let (dir, out) = logs();
        let policy = fast(Duration::from_secs(10), 3, 10);
        let role = spec(&["--no-such-flag"], false);
        let mut sup = Supervisor::start(vec![role], vec![], out, policy, None).unwrap();
        let Progress::GaveUp(why) = until_settled(&mut sup) else {
            panic!("not given up");
        };
        assert!(
            why.starts_with("role keeps failing: it exited with"),
            "{why}"
        );
        assert!(why.contains("3 times in a row"), "{why}");
        assert!(
            why.contains("no-such-flag"),
            "its last lines are missing: {why}"
        );
        assert_eq!(sup.restarts(), vec![("role".to_string(), 2)]);
        assert_eq!(sup.deaths().len(), 3);
        sup.stop_all(Duration::from_secs(1));
        let log = std::fs::read_to_string(dir.path().join("role.log")).unwrap();
        assert_eq!(log.matches("no-such-flag").count(), 3, "{log}");
    }

    /// The role of the next test: with `CAPRL_TEST_CANNOT_GO_ON` set, exits as a learner that
    /// found the run cannot go on; otherwise passes.
    #[test]
    fn role_that_says_the_run_cannot_go_on() {
        if std::env::var_os("CAPRL_TEST_CANNOT_GO_ON").is_some() {
            std::process::exit(i32::from(EXIT_CANNOT_GO_ON));
        }
    }

    #[test]
    fn a_role_that_says_the_run_cannot_go_on_ends_it_at_once() {
        let (_dir, out) = logs();
        std::env::set_var("CAPRL_TEST_CANNOT_GO_ON", "1");
        let policy = fast(Duration::from_secs(10), 3, 10);
        let role = spec(
            &[
                "supervise::tests::role_that_says_the_run_cannot_go_on",
                "--exact",
            ],
            false,
        );
        let mut sup = Supervisor::start(vec![role], vec![], out, policy, None).unwrap();
        let Progress::CannotGoOn(why) = until_settled(&mut sup) else {
            panic!("not given up");
        };
        assert!(
            why.contains("stopped because the run cannot go on"),
            "{why}"
        );
        assert_eq!(sup.deaths().len(), 1, "restarted: {:?}", sup.deaths());
        sup.stop_all(Duration::from_secs(1));
    }

    #[test]
    fn deaths_that_are_not_quick_are_given_up_after_enough_of_them_in_the_window() {
        let (_dir, out) = logs();
        // Nothing is quick: only the count of deaths in the window can end it.
        let policy = fast(Duration::ZERO, 3, 4);
        let role = spec(&["--no-such-flag"], false);
        let mut sup = Supervisor::start(vec![role], vec![], out, policy, None).unwrap();
        let Progress::GaveUp(why) = until_settled(&mut sup) else {
            panic!("not given up");
        };
        assert!(why.contains("it died 4 times within 60s"), "{why}");
        sup.stop_all(Duration::from_secs(1));
    }

    #[test]
    fn planned_deaths_never_count_towards_giving_up() {
        let (_dir, out) = logs();
        let policy = fast(Duration::from_secs(10), 2, 2);
        let role = spec(&["--no-such-flag"], false);
        let mut sup = Supervisor::start(vec![role], vec![], out, policy, None).unwrap();
        for _ in 0..5 {
            sup.expect_exit("role");
            let started = Instant::now();
            let deaths = sup.deaths().len();
            while sup.deaths().len() == deaths {
                assert!(
                    matches!(sup.poll(), Progress::Running),
                    "gave up on a planned death"
                );
                assert!(started.elapsed() < Duration::from_secs(30));
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        assert!(sup.deaths().iter().all(|d| d.planned));
        sup.stop_all(Duration::from_secs(1));
    }
}
