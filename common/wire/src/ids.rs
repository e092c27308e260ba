//! Identifiers that travel on the wire.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Identifies one rollout task; the learner de-duplicates scored rollouts by it.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct TaskId(pub u64);

/// Version of the policy weights; the learner increments it after each step.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct PolicyVersion(pub u64);

impl PolicyVersion {
    /// The version after this one.
    pub fn next(self) -> PolicyVersion {
        PolicyVersion(self.0.saturating_add(1))
    }

    /// How many versions `self` is behind `current` (0 if it is not behind).
    pub fn lag_behind(self, current: PolicyVersion) -> u64 {
        current.0.saturating_sub(self.0)
    }
}

/// Which data set a message was made for: the first 16 hex digits of a hash over the
/// vocabulary and the training split's image ids, feature rows and references
/// (`Dataset::fingerprint`). Tasks, rollouts, scored rollouts and heartbeats carry it, so a role
/// started on another data set refuses the work instead of scoring it wrongly.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct DataFingerprint(pub String);

impl fmt::Display for DataFingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.is_empty() {
            true => f.write_str("(none)"),
            false => f.write_str(&self.0),
        }
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "task-{}", self.0)
    }
}

impl fmt::Display for PolicyVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}", self.0)
    }
}
