//! score (to be filled).
