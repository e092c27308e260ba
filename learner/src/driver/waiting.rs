//! What the learner says while it waits for results, and when it stops waiting: after
//! [`DriverOptions::report_wait_after`](super::DriverOptions) without a result it reads the
//! run's heartbeats ([`Roster`]) and logs what it waits for; when some role kind has live
//! processes and none can work, the run cannot go on and the collection stops with
//! [`LearnerError::Stalled`].

use std::time::{Duration, Instant};

use caprl_common::role::Roster;

use super::Driver;
use crate::LearnerError;

/// When the learner last got a result, and when it says something next.
pub(super) struct Wait {
    every: Duration,
    since: Instant,
    next: Instant,
}

impl Wait {
    /// Starts waiting now; the first report is due after `every`.
    pub(super) fn new(every: Duration) -> Wait {
        let now = Instant::now();
        Wait {
            every,
            since: now,
            next: now + every,
        }
    }

    /// A result came: the next report is `every` from now.
    pub(super) fn progress(&mut self) {
        *self = Wait::new(self.every);
    }

    /// Whether a report is due (and, if so, schedules the next one).
    pub(super) fn due(&mut self) -> bool {
        let now = Instant::now();
        if now < self.next {
            return false;
        }
        self.next = now + self.every;
        true
    }
}

impl Driver {
    /// Logs what round `round` still waits for (`missing` results) and who could deliver them;
    /// [`LearnerError::Stalled`] when no live actor, or no live reward worker, can work. A bus
    /// error while reading the heartbeats skips this report.
    pub(super) fn say_what_it_waits_for(
        &self,
        wait: &mut Wait,
        round: u64,
        missing: usize,
    ) -> Result<(), LearnerError> {
        let Some(data) = self.data.as_ref() else {
            return Ok(());
        };
        let roster = match self.rt.block_on(Roster::read(self.bus.as_ref())) {
            Ok(r) => r,
            Err(e) => {
                tracing::debug!("learner: cannot read the heartbeats ({e})");
                return Ok(());
            }
        };
        let waited = wait.since.elapsed().as_secs();
        match roster.blocking(data) {
            Ok(who) => {
                tracing::warn!(
                    "learner: no result for {waited} s; waiting for {missing} results of round \
                     {round} ({} tasks in flight, {} queued); {who}",
                    self.outstanding.len(),
                    self.queued.len()
                );
                Ok(())
            }
            Err(why) => Err(LearnerError::Stalled(format!(
                "no result for {waited} s, and {why}"
            ))),
        }
    }
}
