//! optim (to be filled).
