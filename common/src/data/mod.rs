//! data (to be filled).
