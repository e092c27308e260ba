//! wire (to be filled).
