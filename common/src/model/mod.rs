//! model (to be filled).
