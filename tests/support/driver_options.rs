//! `DriverOptions` for tests that drive a learner `Driver` directly: the production type has no
//! default, so the settings no such test depends on are written once here, and each test states
//! the rest with struct update syntax.
//!
//! Included with `#[path]` by the test files that need it (it uses nothing else of `support`, so
//! the learner crate's own tests can include it too).
#![allow(dead_code)]

use caprl_common::config::StaleRollouts;
use caprl_learner::driver::DriverOptions;
use caprl_learner::objective::Decodes;
use caprl_model::model::DType;
use caprl_wire::Sampling;

/// The smallest sync driver (one task of one image in flight, one image a step), one plain
/// sample per image (no bad-ending rule, one beam group), seed 0, policy lag 1, stale rollouts
/// dropped, 8 MiB messages, an f32 snapshot every version with two kept: a test overrides what
/// it depends on (`..plain_driver_options()`).
pub fn plain_driver_options() -> DriverOptions {
    DriverOptions {
        sync: true,
        tasks_in_flight: 1,
        images_per_task: 1,
        batch_size: 1,
        decodes: Decodes {
            samples: 1,
            ..Decodes::default()
        },
        sampling: Sampling::default(),
        remove_bad_endings: false,
        beam_groups: 1,
        diversity_lambda: 0.0,
        seed: 0,
        max_policy_lag: 1,
        stale_rollouts: StaleRollouts::Drop,
        max_message_bytes: 8 << 20,
        keep_snapshots: 2,
        snapshot_dtype: DType::F32,
        snapshot_every: 1,
        report_wait_after: std::time::Duration::from_secs(30),
    }
}
