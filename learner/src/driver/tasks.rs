//! The tasks a collection round issues: their ids, seeds and images, the policy each may be
//! decoded by, and the queue they wait in for credits.

use caprl_wire::{PolicyVersion, RolloutTask, TaskId};

use super::Driver;

/// The sampling seed of a task: a pure function of (run seed, task id), so a
/// task gives the same samples whichever actor runs it (splitmix64 finaliser).
pub fn task_seed(seed: u64, task: TaskId) -> u64 {
    let mut z = seed ^ task.0.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A task of a queued round: its images, and the oldest policy (bus version) that may decode it.
#[derive(Debug, Clone)]
pub(super) struct Planned {
    pub(super) rows: Vec<u32>,
    pub(super) min_version: u64,
}

impl Driver {
    /// The task `id` for images `rows`, made at policy `version` for the round `lead` rounds
    /// after the current one. Its `min_version` keeps the rollout within the lag bound when
    /// its round comes (at version `version + lead` or older): async actors may decode it with
    /// a policy at most `max_policy_lag - lead` versions older than `version`.
    pub(super) fn make_task(
        &self,
        id: TaskId,
        version: u64,
        rows: &[u32],
        lead: u64,
    ) -> RolloutTask {
        let oldest = match self.opts.sync {
            true => version,
            false => (version + lead)
                .saturating_sub(self.opts.max_policy_lag)
                .min(version),
        };
        RolloutTask {
            task_id: id,
            data: self.data.clone().unwrap_or_default(),
            policy_version: PolicyVersion(self.versions.published(version)),
            min_version: PolicyVersion(self.versions.published(oldest)),
            image_rows: rows.to_vec(),
            samples: self.opts.decodes.samples,
            sampling: self.opts.sampling,
            remove_bad_endings: self.opts.remove_bad_endings,
            greedy: self.opts.decodes.greedy,
            beam: self.opts.decodes.beam,
            beam_groups: self.opts.beam_groups,
            diversity_lambda: self.opts.diversity_lambda,
            seed: task_seed(self.opts.seed, id),
            ground_truth: self.opts.decodes.ground_truth,
            mc_rollouts: self.opts.decodes.mc_rollouts,
        }
    }

    /// How many later steps async mode issues ahead: `max_policy_lag` (0 in sync mode), so
    /// that no rollout decoded ahead is older than the lag bound when its step comes.
    pub fn issue_ahead_steps(&self) -> usize {
        match self.opts.sync {
            true => 0,
            false => usize::try_from(self.opts.max_policy_lag).unwrap_or(usize::MAX),
        }
    }

    /// Queues task `id` again, ahead of the others, for policy `version`.
    pub(super) fn requeue(&mut self, id: TaskId, version: u64) {
        let rows = self
            .planned
            .get(&id)
            .map(|t| t.rows.clone())
            .unwrap_or_default();
        self.queued.retain(|t| t.task_id != id);
        let task = self.make_task(id, version, &rows, 0);
        self.plan(&task);
        self.queued.push_front(task);
    }

    /// Remembers `task`'s images and the policy it waits for until its round is collected.
    fn plan(&mut self, task: &RolloutTask) {
        let planned = Planned {
            rows: task.image_rows.clone(),
            min_version: task.min_version.0,
        };
        self.planned.insert(task.task_id, planned);
    }

    /// Queues the tasks of round `round` (images `rows`, ids `round·K ..`), `lead` rounds
    /// after the current one, unless they already are.
    pub(super) fn queue_round(&mut self, round: u64, version: u64, rows: &[u32], lead: u64) {
        if self.queued_through.is_some_and(|done| done >= round) {
            return;
        }
        let k = self.tasks_per_step();
        for (i, chunk) in (0..).zip(rows.chunks(self.opts.images_per_task.max(1))) {
            let t = self.make_task(TaskId(round * k + i), version, chunk, lead);
            self.plan(&t);
            self.queued.push_back(t);
        }
        self.queued_through = Some(round);
    }
}
