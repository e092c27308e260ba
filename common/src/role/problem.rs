//! What keeps a role from doing its work, said once in its log and carried in every heartbeat,
//! so that the learner and `caprl status` can tell the operator (see [`super::Roster`]).

use std::sync::{Arc, Mutex, PoisonError};

/// A role's current problem, shared between its work and its heartbeat; `None` while it can
/// work. Problems are the operator's to fix (another data set than the run's, a rollout too
/// large for a message, a policy of another vocabulary), not passing broker faults.
#[derive(Debug, Clone, Default)]
pub struct Problem(Arc<Mutex<Option<String>>>);

impl Problem {
    /// Records `text` as the problem of `who` ("actor a1"), logging it when it is new.
    pub fn set(&self, who: &str, text: String) {
        let mut current = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if current.as_deref() != Some(text.as_str()) {
            tracing::warn!("{who}: {text}");
            *current = Some(text);
        }
    }

    /// The role works again.
    pub fn clear(&self) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }

    /// The problem now, if any.
    pub fn get(&self) -> Option<String> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}
