//! The project's optimizer: AdamW whose moments and step count are checkpointed, global-norm
//! gradient clipping and learning-rate schedules. Parameters are addressed by their `VarMap`
//! names, so state survives save/load.

mod adamw;
mod clip;
mod config;
mod error;
mod schedule;
mod state;

pub use adamw::{AdamW, AdamWParams};
pub use clip::{clip_grad_norm, grad_norm};
pub use config::{OptimConfig, ScheduleKind};
pub use error::OptimError;
pub use schedule::Schedule;
