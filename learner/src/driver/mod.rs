//! The learner's side of the bus: publish policy snapshots, issue rollout
//! tasks with credit-based backpressure, collect scored rollouts,
//! de-duplicate them by task id and drop stale ones.
//!
//! The training loop itself is synchronous (heavy compute stays on its own
//! thread, off the async executor); every bus call goes through
//! [`tokio::runtime::Handle::block_on`].
//!
//! Both modes collect a round (a step's batch, or one of dynamic sampling's refills) the same
//! way: the tasks of round `r` have ids `r·K .. r·K+K-1` (`K` = tasks per step), and the
//! learner waits for exactly these ids and returns them sorted by task id, so the batch does
//! not depend on which actor or reward worker ran what, nor on the transport. A learner's
//! first round takes the results already in the queue (a resumed learner's predecessor's)
//! before it issues anything; results for later rounds are kept for their round, and a task
//! whose result is neither kept, in flight nor queued is queued again. So every task id is
//! trained on once, also across a learner's restart (the step records' `task_ids` are the
//! ledger).
//!
//! - `sync` (the source papers' setting): the tasks name policy `v`, and only results of
//!   exactly `v` are taken (others are dropped and their task issued again).
//! - `async`: the tasks of the next `max_policy_lag` rounds are issued ahead (the data order
//!   is known), within `tasks_in_flight` credits, so actors decode rounds `r+1..r+L` while
//!   the learner trains round `r`; a result is taken when its lag `v - v_rollout` is at most
//!   `max_policy_lag`. Older ones are dropped and counted, and their task is issued again
//!   first (same id, current policy) so the credits never run dry; with
//!   `runtime.stale_rollouts = "reweight"` they are kept instead (counted as reweighted),
//!   and the learner weighs them ([`crate::off_policy`]). A result of a policy newer than the
//!   learner's (a predecessor's that went further than its checkpoint) is dropped in both
//!   modes.
//!
//! A snapshot is published every version, or in async mode every `snapshot_every` versions
//! (at most `max_policy_lag + 1`, so the newest published policy is always within the bound):
//! the broadcast, which every actor fetches, then costs `1/snapshot_every` per step. A task
//! waits for no policy newer than its `min_version`, and the learner publishes early when a
//! round's task needs it ([`Driver::publish_with`]).
//!
//! Versions on the bus never go back, also when a learner resumes from a checkpoint older than
//! the newest snapshot it published before it died: the driver publishes the trainer's version
//! plus an offset chosen at start ([`Driver::continue_versions`]), and translates the versions
//! of the scored rollouts it collects back into the trainer's, those of its predecessor's
//! rollouts with the predecessor's offset. The trainer's versions stay a pure function of its
//! steps, so a resumed run repeats the undisturbed one.
//!
//! Tasks carry the data set's fingerprint ([`Driver::set_data`]); a scored rollout of another
//! data set is refused, and one scored with other rewards than the run's spec
//! ([`Driver::set_rewards`]) stops the run with [`LearnerError::Stalled`]. When no result comes for `report_wait_after`, the learner reads the
//! run's heartbeats and says what it waits for (live actors and reward workers, and what keeps
//! any of them from working), again at that interval; when some role kind has live processes
//! and none of them can work (another data set, a refused snapshot, rollouts too large for a
//! message), it stops with [`LearnerError::Stalled`] naming each one's reason (`waiting`).
//!
//! `publish` holds the snapshots and the versions; `tasks` the tasks a round issues.

mod fits;
mod options;
mod publish;
mod tasks;
mod waiting;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use caprl_common::bus::{Backoff, Bus, BusError, Queue, SnapshotMeta};
use caprl_common::config::StaleRollouts;
use caprl_common::role::reject_reason;
use caprl_common::shutdown::Shutdown;
use caprl_common::telemetry::metrics as tm;
use caprl_common::telemetry::stages::{self, Stage};
use caprl_common::telemetry::Readiness;
use caprl_wire::{DataFingerprint, PolicyVersion, RolloutTask, ScoredRollout, TaskId};
use tokio::runtime::Handle;

use crate::error::Doing;
use crate::LearnerError;
pub use options::DriverOptions;
use publish::Versions;
pub use tasks::task_seed;
use tasks::Planned;

/// What one step's collection saw.
#[derive(Debug, Clone, Default)]
pub struct Collected {
    /// The batch's scored rollouts, sorted by task id.
    pub scored: Vec<ScoredRollout>,
    pub dropped_stale: u64,
    /// Async: rollouts past `max_policy_lag` kept for a truncated importance weight.
    pub stale_reweighted: u64,
    pub duplicates: u64,
    pub rejected: u64,
    /// `rejected` by reason (the labels of `caprl_rejected_messages_total`).
    pub rejected_by: BTreeMap<&'static str, u64>,
    pub redeliveries: u64,
    /// Mean `v - v_rollout` of the batch.
    pub mean_lag: f64,
    /// Largest `v - v_rollout` of the batch.
    pub max_lag: u64,
    /// Tasks published during this step.
    pub tasks_issued: u64,
    /// Sync: results used that this learner did not ask for (a predecessor's, in JetStream).
    pub results_found: u64,
}

impl Collected {
    /// Adds a further collection round of the same step: its rollouts after these, its counts
    /// and lags.
    pub fn absorb(&mut self, more: Collected) {
        let (n, m) = (self.scored.len() as f64, more.scored.len() as f64);
        if n + m > 0.0 {
            self.mean_lag = (self.mean_lag * n + more.mean_lag * m) / (n + m);
        }
        self.max_lag = self.max_lag.max(more.max_lag);
        self.dropped_stale += more.dropped_stale;
        self.stale_reweighted += more.stale_reweighted;
        self.duplicates += more.duplicates;
        self.rejected += more.rejected;
        for (reason, k) in more.rejected_by {
            *self.rejected_by.entry(reason).or_default() += k;
        }
        self.redeliveries += more.redeliveries;
        self.tasks_issued += more.tasks_issued;
        self.results_found += more.results_found;
        self.scored.extend(more.scored);
    }

    fn reject(&mut self, reason: &'static str) {
        tm::count_rejected(reason);
        self.rejected += 1;
        *self.rejected_by.entry(reason).or_default() += 1;
    }
}

/// Running totals over the whole run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DriverTotals {
    pub dropped_stale: u64,
    pub duplicates: u64,
    pub rejected: u64,
    pub redeliveries: u64,
    pub scored: u64,
    /// Task ids of every scored rollout trained on, in order.
    pub used: Vec<TaskId>,
}

/// The learner's handle on the bus.
pub struct Driver {
    bus: Arc<dyn Bus>,
    rt: Handle,
    shutdown: Shutdown,
    opts: DriverOptions,
    published: Option<SnapshotMeta>,
    /// The bus versions of the last `keep_snapshots + 1` snapshots this learner published,
    /// oldest first.
    stored: VecDeque<u64>,
    /// The oldest version not yet deleted (set at the first publication).
    delete_from: Option<u64>,
    /// Scored rollouts of later rounds, kept for their round.
    buffer: BTreeMap<TaskId, ScoredRollout>,
    /// Task ids issued and not yet back.
    outstanding: BTreeSet<TaskId>,
    /// Tasks made but not yet issued (no credit yet).
    queued: VecDeque<RolloutTask>,
    /// Each task of the queued rounds, for queueing it again and for the policy it waits for.
    planned: BTreeMap<TaskId, Planned>,
    /// The round the next [`Driver::collect`] takes (the next step's, or a refill's).
    next_round: u64,
    /// The last round whose tasks are queued (its own collect, or an earlier one issuing
    /// ahead).
    queued_through: Option<u64>,
    /// Whether the scored results already waiting (a predecessor's) were taken.
    took_waiting: bool,
    pub totals: DriverTotals,
    readiness: Option<Readiness>,
    /// The vocabulary stamped on each snapshot ([`Driver::set_data`]).
    vocab_hash: Option<String>,
    /// The data set stamped on each task and required of each result ([`Driver::set_data`]);
    /// unset, results are not checked.
    data: Option<DataFingerprint>,
    /// The reward components every scored rollout carries: the spec's terms
    /// ([`Driver::set_rewards`]).
    rewards: Option<BTreeSet<String>>,
    versions: Versions,
}

impl Driver {
    /// A driver on `bus`, calling it through `rt`; stops waiting on `shutdown`.
    pub fn new(bus: Arc<dyn Bus>, rt: Handle, shutdown: Shutdown, opts: DriverOptions) -> Driver {
        if !opts.sync {
            // The bound CaprlPolicyLagAboveBound and the dashboard's lag panel compare against.
            tm::set_max_policy_lag(opts.max_policy_lag);
        }
        Driver {
            bus,
            rt,
            shutdown,
            opts,
            published: None,
            stored: VecDeque::new(),
            delete_from: None,
            buffer: BTreeMap::new(),
            outstanding: BTreeSet::new(),
            queued: VecDeque::new(),
            planned: BTreeMap::new(),
            next_round: 0,
            queued_through: None,
            took_waiting: false,
            totals: DriverTotals::default(),
            readiness: None,
            vocab_hash: None,
            data: None,
            rewards: None,
            versions: Versions::default(),
        }
    }

    /// Marks `readiness` ready once the first snapshot is published.
    pub fn set_readiness(&mut self, readiness: Readiness) {
        self.readiness = Some(readiness);
    }

    /// The bus this driver talks to.
    pub fn bus(&self) -> &Arc<dyn Bus> {
        &self.bus
    }

    /// Tasks per optimizer step: `ceil(batch_size / images_per_task)`.
    pub fn tasks_per_step(&self) -> u64 {
        self.opts
            .batch_size
            .div_ceil(self.opts.images_per_task.max(1))
            .max(1) as u64
    }

    /// Drops everything queued from an earlier run with the same run id.
    pub fn purge(&mut self) -> Result<(), LearnerError> {
        for q in Queue::ALL {
            let bus = Arc::clone(&self.bus);
            self.retry("purging the queues", || {
                let bus = Arc::clone(&bus);
                async move { bus.purge(q).await }
            })?;
        }
        Ok(())
    }

    fn issue(&mut self, task: &RolloutTask) -> Result<(), LearnerError> {
        let bytes = caprl_wire::encode(task, self.opts.max_message_bytes)
            .doing(|| format!("encoding {}", task.task_id))?;
        let (bus, bytes) = (Arc::clone(&self.bus), Bytes::from(bytes));
        self.retry("publishing a task", || {
            let (bus, bytes) = (Arc::clone(&bus), bytes.clone());
            async move { bus.publish(Queue::Tasks, bytes).await }
        })?;
        self.outstanding.insert(task.task_id);
        tm::set_tasks_in_flight(self.outstanding.len() as u64);
        Ok(())
    }

    /// Runs the rollouts of collection round `round` (images `rows`; a step's round, or one of
    /// dynamic sampling's refills) under policy `version` and returns its scored batch: the
    /// results of exactly the round's task ids `round·K .. round·K + n`, sorted by id (see the
    /// module docs). `ahead` holds the images of the following rounds; async mode queues the
    /// first [`Driver::issue_ahead_steps`] of them, sync mode none.
    pub fn collect(
        &mut self,
        round: u64,
        version: u64,
        rows: &[u32],
        ahead: &[Vec<u32>],
    ) -> Result<Collected, LearnerError> {
        let _waiting = stages::Timer::start(Stage::WaitResults);
        let k = self.tasks_per_step();
        let mut out = Collected::default();
        if !self.took_waiting {
            self.took_waiting = true;
            self.take_waiting(round * k, &mut out)?;
        }
        self.queue_round(round, version, rows, 0);
        for (j, later) in (1..).zip(ahead.iter().take(self.issue_ahead_steps())) {
            self.queue_round(round + j, version, later, j);
        }
        let n = rows.len().div_ceil(self.opts.images_per_task.max(1)) as u64;
        let wanted: BTreeSet<TaskId> = (0..n.min(k)).map(|i| TaskId(round * k + i)).collect();
        let mut got: BTreeMap<TaskId, ScoredRollout> = BTreeMap::new();
        for &id in &wanted {
            if let Some(s) = self.buffer.remove(&id) {
                self.queued.retain(|t| t.task_id != id);
                self.accept(s, version, &mut got, &mut out)?;
            } else if !self.outstanding.contains(&id)
                && !self.queued.iter().any(|t| t.task_id == id)
            {
                // Neither answered, in flight nor queued: its result was dropped from a full
                // buffer, or a predecessor issued it and its result was lost with it.
                self.requeue(id, version);
            }
        }
        let mut issued = BTreeSet::new();
        let mut wait = waiting::Wait::new(self.opts.report_wait_after);
        while got.len() < wanted.len() {
            if wait.due() {
                self.say_what_it_waits_for(&mut wait, round, wanted.len() - got.len())?;
            }
            while self.outstanding.len() < self.opts.tasks_in_flight.max(1) {
                let Some(t) = self.queued.pop_front() else {
                    break;
                };
                self.issue(&t)?;
                issued.insert(t.task_id);
            }
            for s in self.pull(&mut out)? {
                wait.progress();
                let id = s.rollout.task_id;
                self.outstanding.remove(&id);
                if wanted.contains(&id) && !got.contains_key(&id) {
                    self.accept(s, version, &mut got, &mut out)?;
                } else if id.0 >= round * k + k && !self.buffer.contains_key(&id) {
                    self.keep_for_later(id, s, &mut out);
                } else {
                    out.duplicates += 1;
                }
            }
            tm::set_tasks_in_flight(self.outstanding.len() as u64);
        }
        self.outstanding.retain(|id| !wanted.contains(id));
        self.planned.retain(|id, _| !wanted.contains(id));
        self.next_round = round + 1;
        tm::set_tasks_in_flight(self.outstanding.len() as u64);
        out.tasks_issued = issued.len() as u64;
        out.results_found = got.keys().filter(|id| !issued.contains(id)).count() as u64;
        out.scored = got.into_values().collect();
        let n = out.scored.len().max(1) as f64;
        let lags: Vec<u64> = out
            .scored
            .iter()
            .map(|s| s.rollout.policy_version.lag_behind(PolicyVersion(version)))
            .collect();
        for &lag in &lags {
            tm::observe_policy_lag(lag);
        }
        out.max_lag = lags.iter().copied().max().unwrap_or(0);
        out.mean_lag = lags.iter().map(|&l| l as f64).sum::<f64>() / n;
        self.totals.dropped_stale += out.dropped_stale;
        self.totals.duplicates += out.duplicates;
        self.totals.rejected += out.rejected;
        self.totals.redeliveries += out.redeliveries;
        self.totals.scored += out.scored.len() as u64;
        self.totals
            .used
            .extend(out.scored.iter().map(|s| s.rollout.task_id));
        Ok(out)
    }

    /// Takes `s` for the round at policy `version` if its policy fits: exactly `version` in
    /// sync mode, at most `max_policy_lag` older in async mode (or older still, reweighted).
    /// Otherwise (also a policy newer than `version`: a predecessor's that went further than
    /// its checkpoint) drops it and queues its task again, first, for the current policy.
    /// A result scored with other rewards than the run's stops the run
    /// ([`Driver::set_rewards`]).
    fn accept(
        &mut self,
        s: ScoredRollout,
        version: u64,
        got: &mut BTreeMap<TaskId, ScoredRollout>,
        out: &mut Collected,
    ) -> Result<(), LearnerError> {
        if let Some(why) = scored_otherwise(&s, &self.rewards) {
            tracing::error!("learner: refusing scored {}: {why}", s.rollout.task_id);
            out.reject("other_reward_spec");
            return Err(LearnerError::Stalled(why));
        }
        let made_by = s.rollout.policy_version.0;
        let lag = version.saturating_sub(made_by);
        let bound = match self.opts.sync {
            true => 0,
            false => self.opts.max_policy_lag,
        };
        let id = s.rollout.task_id;
        if made_by <= version && lag <= bound {
            got.insert(id, s);
        } else if made_by <= version
            && !self.opts.sync
            && self.opts.stale_rollouts == StaleRollouts::Reweight
        {
            out.stale_reweighted += 1;
            tm::count_stale_reweighted(1);
            got.insert(id, s);
        } else {
            out.dropped_stale += 1;
            tm::count_dropped_stale(1);
            self.requeue(id, version);
        }
        Ok(())
    }

    /// First round of this learner: takes the scored results already in JetStream (those of a
    /// killed predecessor's last tasks, and in async mode those it issued ahead) before
    /// issuing anything, so that their tasks are not issued and run a second time. Results for
    /// rounds before `first_id`'s are duplicates of trained-on work.
    fn take_waiting(&mut self, first_id: u64, out: &mut Collected) -> Result<(), LearnerError> {
        loop {
            let waiting = self.pull(out)?;
            if waiting.is_empty() {
                return Ok(());
            }
            for s in waiting {
                let id = s.rollout.task_id;
                if id.0 >= first_id && !self.buffer.contains_key(&id) {
                    self.keep_for_later(id, s, out);
                } else {
                    out.duplicates += 1;
                }
            }
        }
    }

    /// Keeps a result for a later round (one issued ahead, or a resumed learner's
    /// predecessor's found in JetStream). The buffer holds at most
    /// `4 · max(tasks_in_flight, K)` results so that a flood of scored
    /// rollouts for far-off task ids cannot grow memory; the one furthest
    /// ahead is dropped, and its task is simply issued again at its step
    /// (in sync mode tasks are deterministic, so the result is the same).
    fn keep_for_later(&mut self, id: TaskId, s: ScoredRollout, out: &mut Collected) {
        let cap = 4 * self
            .opts
            .tasks_in_flight
            .max(self.tasks_per_step() as usize);
        self.buffer.insert(id, s);
        while self.buffer.len() > cap {
            if let Some((far, _)) = self.buffer.pop_last() {
                tracing::debug!("learner: not keeping the result of {far} (buffer full)");
                out.reject("buffer_full");
            }
        }
    }

    /// One pull of scored rollouts: decoded ones are acked and returned,
    /// undecodable ones termed and counted.
    fn pull(&mut self, out: &mut Collected) -> Result<Vec<ScoredRollout>, LearnerError> {
        if self.shutdown.is_shutdown() {
            return Err(LearnerError::Stopped("scored rollouts"));
        }
        let bus = Arc::clone(&self.bus);
        let limit = self.opts.max_message_bytes;
        let data = self.data.clone();
        let stop = self.shutdown.clone();
        let deliveries = self.retry("pulling scored rollouts", || {
            let (bus, mut stop) = (Arc::clone(&bus), stop.clone());
            async move {
                tokio::select! {
                    d = bus.pull(Queue::Scored, 64, Duration::from_millis(250)) => d,
                    _ = stop.recv() => Ok(Vec::new()),
                }
            }
        })?;
        let result = self.rt.block_on(async move {
            let mut good = Vec::new();
            let (mut rejected, mut redelivered) = (Vec::new(), 0u64);
            for d in deliveries {
                if d.is_redelivery() {
                    redelivered += 1;
                    tm::count_redelivery("scored");
                }
                match caprl_wire::decode::<ScoredRollout>(d.payload(), limit) {
                    Ok(s) if data.as_ref().is_some_and(|data| s.rollout.data != *data) => {
                        tracing::warn!(
                            "learner: rejecting scored {}: it is for data set {}, not the run's \
                             ({})",
                            s.rollout.task_id,
                            s.rollout.data,
                            data.as_ref().map_or_else(String::new, ToString::to_string)
                        );
                        rejected.push("other_data_set");
                        term(d).await;
                    }
                    Ok(s) if s.rewards.len() == s.rollout.sequences.len() => {
                        // Kept even if the ack is lost: the redelivery is a counted duplicate.
                        if let Err(e) = d.ack().await {
                            tracing::warn!("learner: ack of {} failed ({e})", s.rollout.task_id);
                        }
                        good.push(s);
                    }
                    Ok(s) => {
                        tracing::warn!(
                            "learner: rejecting scored {}: {} rewards for {} sequences",
                            s.rollout.task_id,
                            s.rewards.len(),
                            s.rollout.sequences.len()
                        );
                        rejected.push("bad_payload");
                        term(d).await;
                    }
                    Err(e) => {
                        tracing::warn!("learner: rejecting a scored message: {e}");
                        rejected.push(reject_reason(&e));
                        term(d).await;
                    }
                }
            }
            (good, rejected, redelivered)
        });
        let (mut good, rejected, redelivered) = result;
        for reason in rejected {
            out.reject(reason);
        }
        out.redeliveries += redelivered;
        // From here on a rollout's version is the trainer's.
        for s in &mut good {
            let v = &mut s.rollout.policy_version;
            *v = PolicyVersion(self.versions.trainer(v.0));
        }
        Ok(good)
    }

    /// Runs the bus operation `op` until it succeeds; a broker outage
    /// (transient error) is waited out with backoff until shutdown, which ends the wait.
    fn retry<T, F, Fut>(&self, what: &str, mut op: F) -> Result<T, LearnerError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, BusError>>,
    {
        let mut backoff = Backoff::default();
        let mut stop = self.shutdown.clone();
        loop {
            match self.rt.block_on(op()) {
                Ok(v) => {
                    if backoff.failures() > 0 {
                        tracing::info!("learner: broker back after {} retries", backoff.failures());
                    }
                    return Ok(v);
                }
                Err(e) if e.is_transient() && !stop.is_shutdown() => {
                    if backoff.failures() == 0 {
                        tracing::warn!("learner: {what} failed ({e}); retrying with backoff");
                    }
                    self.rt.block_on(backoff.wait(&mut stop));
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Depth of each queue, recorded as gauges.
    pub fn record_depths(&self) {
        for q in Queue::ALL {
            if let Ok(d) = self.rt.block_on(self.bus.depth(q)) {
                tm::set_queue_depth(q.name(), d);
            }
        }
    }
}

/// Terms a bad message; if the term is lost, it comes back and is termed again.
async fn term(d: caprl_common::bus::Delivery) {
    if let Err(e) = d.term().await {
        tracing::warn!("learner: term of a bad message failed ({e})");
    }
}

/// Why `scored` was not scored with the run's rewards `want` (its components, `diversity` aside,
/// are not the spec's terms): a reward worker started with another `reward.spec`.
fn scored_otherwise(scored: &ScoredRollout, want: &Option<BTreeSet<String>>) -> Option<String> {
    let want = want.as_ref()?;
    let got: BTreeSet<String> = scored
        .rewards
        .first()?
        .components
        .iter()
        .map(|(name, _)| name.clone())
        .filter(|name| name != caprl_common::config::DIVERSITY)
        .collect();
    let list = |names: &BTreeSet<String>| names.iter().cloned().collect::<Vec<_>>().join(", ");
    (got != *want).then(|| {
        format!(
            "{} was scored with the rewards [{}], and this run's reward.spec has [{}]: start \
             every reward worker with the learner's reward.spec (and reward.python)",
            scored.rollout.task_id,
            list(&got),
            list(want)
        )
    })
}
