//! Applying the soak's faults to the supervised roles, and undoing the ones that last: the
//! SIGCONT after a pause, the end of a duplicate role, the check that a second learner was
//! refused.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::faults::{Fault, Kind};
use super::invariants::InvariantCheck;
use crate::supervise::{RoleSpec, Supervisor};

/// How long a second learner may take to say that another one holds the run directory.
const REFUSE_WITHIN: Duration = Duration::from_secs(60);
/// What a refused second learner says.
const REFUSAL: &str = "another learner is training into";

enum Pending {
    /// SIGCONT to a paused role, if it still runs as `pid`.
    Resume { name: String, pid: u32 },
    /// A second process of an actor or reward worker: SIGKILL.
    EndDuplicate { name: String, child: Child },
    /// A second learner, which must exit with [`REFUSAL`] unless the learner died after it was
    /// started (then it may take the lock over, as a replacement pod would): `deaths` is how
    /// often the learner had died when it was started.
    Refused {
        child: Child,
        log: PathBuf,
        deaths: usize,
    },
}

/// The fault injector of one soak: what it did and what it still has to undo.
pub struct Injector {
    specs: Vec<RoleSpec>,
    /// The least RLIMIT_FSIZE of the disk-full fault, bytes (half a weights file).
    fsize_limit: u64,
    /// The round's run log: the limit lets it grow a little, so the write that fails is a
    /// checkpoint's.
    run_log: PathBuf,
    pending: Vec<(Instant, Pending)>,
    /// Per kind: (applied, missed because the target was down).
    counts: BTreeMap<Kind, (u64, u64)>,
    round: usize,
    common: Vec<String>,
    logs: PathBuf,
    duplicates: usize,
    refused: u64,
    took_over: u64,
    not_refused: Vec<String>,
}

impl Injector {
    pub fn new(specs: Vec<RoleSpec>, fsize_limit: u64) -> Injector {
        Injector {
            specs,
            fsize_limit,
            run_log: PathBuf::new(),
            pending: Vec::new(),
            counts: BTreeMap::new(),
            round: 0,
            common: Vec::new(),
            logs: PathBuf::new(),
            duplicates: 0,
            refused: 0,
            took_over: 0,
            not_refused: Vec::new(),
        }
    }

    pub fn specs(&self) -> &[RoleSpec] {
        &self.specs
    }

    /// A new round: its roles' common arguments, run directory and log directory.
    pub fn start_round(
        &mut self,
        round: usize,
        common: Vec<String>,
        run_dir: &Path,
        logs: PathBuf,
    ) {
        self.round = round;
        self.common = common;
        self.run_log = run_dir.join(caprl_common::telemetry::runlog::RUN_LOG_FILE);
        self.logs = logs;
    }

    /// Applies `fault`; returns what was done, for the fault log.
    pub fn apply(&mut self, fault: &Fault, sup: &mut Supervisor) -> String {
        if fault.kind == Kind::Burst {
            self.book(Kind::Burst, true);
            let parts: Vec<String> = fault.parts.iter().map(|f| self.apply_one(f, sup)).collect();
            return format!("burst of {}: {}", parts.len(), parts.join("; "));
        }
        self.apply_one(fault, sup)
    }

    fn apply_one(&mut self, fault: &Fault, sup: &mut Supervisor) -> String {
        let name = self.specs[fault.target].name.clone();
        let secs = fault.lasts.as_secs_f64();
        let (done, line) = match fault.kind {
            Kind::Kill => match sup.pid(&name) {
                Some(pid) if sup.signal(&name, pid, libc::SIGKILL) => {
                    (true, format!("kill -9 {name} (pid {pid})"))
                }
                _ => (false, format!("kill -9 {name}: missed, it is down")),
            },
            Kind::Pause => match sup.pid(&name) {
                Some(pid) if sup.signal(&name, pid, libc::SIGSTOP) => {
                    let at = Instant::now() + fault.lasts;
                    self.pending.push((
                        at,
                        Pending::Resume {
                            name: name.clone(),
                            pid,
                        },
                    ));
                    (true, format!("SIGSTOP {name} (pid {pid}) for {secs:.1} s"))
                }
                _ => (false, format!("pause {name}: missed, it is down")),
            },
            Kind::Broker => match sup.take_server_down(fault.lasts) {
                true => (true, format!("kill -9 nats-server, down for {secs:.1} s")),
                false => (false, "kill -9 nats-server: missed".to_string()),
            },
            Kind::Duplicate => self.duplicate(fault.target, fault.lasts, sup),
            Kind::DiskFull => self.disk_full(sup),
            Kind::Burst => unreachable!("a burst holds no bursts"),
        };
        self.book(fault.kind, done);
        line
    }

    fn book(&mut self, kind: Kind, done: bool) {
        let c = self.counts.entry(kind).or_default();
        match done {
            true => c.0 += 1,
            false => c.1 += 1,
        }
    }

    /// A second process of role `target` under the same identity: the learner with
    /// `--resume` (as a restarted pod would), the others with the same `--id`.
    fn duplicate(&mut self, target: usize, lasts: Duration, sup: &Supervisor) -> (bool, String) {
        let spec = &self.specs[target];
        if spec.finishes_run && sup.pid(&spec.name).is_none() {
            // With no learner running, one started now is not a second one.
            return (false, format!("a second {}: missed, it is down", spec.name));
        }
        self.duplicates += 1;
        let log = self
            .logs
            .join(format!("{}-duplicate-{}.log", spec.name, self.duplicates));
        let child = File::create(&log).and_then(|out| {
            let err = out.try_clone()?;
            Command::new(std::env::current_exe()?)
                .args(&spec.args)
                .args(&spec.restart_args)
                .args(&self.common)
                .stdin(Stdio::null())
                .stdout(out)
                .stderr(err)
                .spawn()
        });
        let child = match child {
            Ok(c) => c,
            Err(e) => return (false, format!("second {}: could not start: {e}", spec.name)),
        };
        let pid = child.id();
        let line = match spec.finishes_run {
            true => {
                let at = Instant::now() + REFUSE_WITHIN;
                let deaths = learner_deaths(sup, &spec.name);
                self.pending
                    .push((at, Pending::Refused { child, log, deaths }));
                format!("a second {} (pid {pid}) on the same run", spec.name)
            }
            false => {
                let at = Instant::now() + lasts;
                let name = spec.name.clone();
                self.pending.push((
                    at,
                    Pending::EndDuplicate {
                        name: name.clone(),
                        child,
                    },
                ));
                format!(
                    "a second {name} with the same id (pid {pid}) for {:.1} s",
                    lasts.as_secs_f64()
                )
            }
        };
        (true, line)
    }

    /// The learner's writes past a limit fail (EFBIG), as on a full disk, until it dies of it
    /// and is restarted. The limit is half a weights file, or the run log's size and 8 KiB when
    /// that is more: the next checkpoint's files are larger (unless the run log has grown
    /// past them; then its next line is the write that fails).
    fn disk_full(&mut self, sup: &mut Supervisor) -> (bool, String) {
        let name = self.specs[0].name.clone();
        let Some(pid) = sup.pid(&name) else {
            return (false, format!("disk full for {name}: missed, it is down"));
        };
        let run_log = std::fs::metadata(&self.run_log).map_or(0, |m| m.len());
        let bytes = self.fsize_limit.max(run_log + 8 * 1024);
        let limit = libc::rlimit {
            rlim_cur: bytes,
            rlim_max: libc::RLIM_INFINITY,
        };
        // SAFETY: prlimit(2) on a child of this process, with a valid rlimit.
        let ok = unsafe {
            libc::prlimit(pid as i32, libc::RLIMIT_FSIZE, &limit, std::ptr::null_mut()) == 0
        };
        if !ok {
            return (false, format!("disk full for {name}: prlimit failed"));
        }
        sup.expect_exit(&name);
        (
            true,
            format!("disk full for {name} (pid {pid}): files limited to {bytes} bytes"),
        )
    }

    /// Undoes the faults whose time is up (a second learner: as soon as it exited); returns
    /// what was done.
    pub fn tick(&mut self, sup: &mut Supervisor) -> Vec<String> {
        let now = Instant::now();
        let learner = self.specs[0].name.clone();
        if self
            .pending
            .iter()
            .any(|(_, p)| matches!(p, Pending::Refused { .. }))
        {
            // While a second learner runs, the learner's deaths are the fault's doing (the
            // second one may hold the lock): they do not count towards giving up.
            sup.expect_exit(&learner);
        }
        let mut due = Vec::new();
        let mut i = 0;
        while i < self.pending.len() {
            let (at, p) = &mut self.pending[i];
            let exited = match p {
                Pending::Refused { child, .. } => matches!(child.try_wait(), Ok(Some(_))),
                _ => false,
            };
            if *at <= now || exited {
                due.push(self.pending.swap_remove(i).1);
            } else {
                i += 1;
            }
        }
        due.into_iter().filter_map(|p| self.undo(p, sup)).collect()
    }

    /// Undoes every fault still lasting (the round is over).
    pub fn end_round(&mut self, sup: &mut Supervisor) -> Vec<String> {
        let all = std::mem::take(&mut self.pending);
        all.into_iter()
            .filter_map(|(_, p)| self.undo(p, sup))
            .collect()
    }

    fn undo(&mut self, p: Pending, sup: &mut Supervisor) -> Option<String> {
        match p {
            Pending::Resume { name, pid } => sup
                .signal(&name, pid, libc::SIGCONT)
                .then(|| format!("SIGCONT {name} (pid {pid})")),
            Pending::EndDuplicate { name, mut child } => {
                let _ = child.kill();
                let status = child.wait().map(|s| s.to_string()).unwrap_or_default();
                Some(format!(
                    "second {name} (pid {}) ended: {status}",
                    child.id()
                ))
            }
            Pending::Refused {
                mut child,
                log,
                deaths,
            } => {
                let status = child.try_wait().ok().flatten();
                if status.is_none() {
                    let _ = child.kill();
                    let _ = child.wait();
                }
                let said = std::fs::read_to_string(&log).unwrap_or_default();
                let refused = status.is_some_and(|s| !s.success()) && said.contains(REFUSAL);
                let took_over = learner_deaths(sup, &self.specs[0].name) > deaths;
                let verdict = if refused {
                    self.refused += 1;
                    "refused, as it must be"
                } else if took_over {
                    self.took_over += 1;
                    "the learner died meanwhile, so it could take the run over"
                } else {
                    self.not_refused.push(format!(
                        "round {}: the second learner (pid {}, log {}) was not refused",
                        self.round,
                        child.id(),
                        log.display()
                    ));
                    "NOT refused"
                };
                Some(format!("second learner (pid {}): {verdict}", child.id()))
            }
        }
    }

    /// Whether every second learner was refused.
    pub fn refusals_check(&self) -> InvariantCheck {
        InvariantCheck {
            name: "second learners refused",
            ok: self.not_refused.is_empty(),
            detail: match self.not_refused.is_empty() {
                true => format!(
                    "{} refused so far ({} started while the learner was up took over after it \
                     died)",
                    self.refused, self.took_over
                ),
                false => self.not_refused.join("; "),
            },
        }
    }

    /// (applied, missed) faults of `kind`.
    pub fn count(&self, kind: Kind) -> (u64, u64) {
        self.counts.get(&kind).copied().unwrap_or_default()
    }

    /// Faults applied, bursts counted by their parts.
    pub fn total(&self) -> u64 {
        self.counts
            .iter()
            .filter(|(k, _)| **k != Kind::Burst)
            .map(|(_, c)| c.0)
            .sum()
    }
}

/// How often role `name` died so far.
fn learner_deaths(sup: &Supervisor, name: &str) -> usize {
    sup.deaths().iter().filter(|d| d.role == name).count()
}
