//! bus (to be filled).
