//! config (to be filled).
