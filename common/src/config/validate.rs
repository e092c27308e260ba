//! Range and consistency checks run on every loaded config, so a bad value
//! fails at start-up with its key named, not hours into a run. The objectives' own settings
//! (SLE's α, PPO's passes and clip range, the KL and entropy terms) and what an objective needs
//! of the config are checked by the objectives (`caprl_learner::objective::CheckedConfig`).

use super::error::ConfigError;
use super::schema::{DecodeConfig, Mode, ModelConfig, OptimConfig, RunConfig};
use crate::bus;
use caprl_model::model::{MAX_CAPTION_WORDS, MAX_CAPTION_WORDS_ALLOWED};
use caprl_wire::check::{self, fails, first_violation, outside, toml_int, Check, TOML_INT};
use caprl_wire::Sampling;

#[rustfmt::skip]
const CHECKS: &[Check<RunConfig>] = &[
    Check { key: "seed", allowed: TOML_INT, violation: |c| toml_int(c.seed) },
    Check { key: "run_dir", allowed: "a non-empty path", violation: |c| c.run_dir.is_empty().then(|| "\"\"".into()) },
    Check { key: "data.dir", allowed: "a non-empty path", violation: |c| c.data.dir.is_empty().then(|| "\"\"".into()) },
    Check { key: "data.min_count", allowed: ">= 1", violation: |c| outside(c.data.min_count, 1..) },
    Check { key: "data.max_len", allowed: MAX_CAPTION_WORDS_ALLOWED, violation: |c| outside(c.data.max_len as usize, 1..=MAX_CAPTION_WORDS) },
    Check { key: "train.batch_size", allowed: ">= 1", violation: |c| outside(c.train.batch_size, 1..) },
    Check { key: "train.samples", allowed: ">= 1", violation: |c| outside(c.train.samples, 1..) },
    Check { key: "train.label_smoothing", allowed: "[0, 1)", violation: |c| fails(c.train.label_smoothing, |x| (0.0..1.0).contains(&x)) },
    Check { key: "train.eval_every", allowed: ">= 1", violation: |c| outside(c.train.eval_every, 1..) },
    Check { key: "train.sample_images", allowed: "0..=100", violation: |c| outside(c.train.sample_images, 0..=100) },
    Check { key: "train.max_steps", allowed: TOML_INT, violation: |c| toml_int(c.train.max_steps) },
    Check {
        key: "runtime.run_id",
        allowed: "a non-empty name of [a-z0-9-] (it becomes part of NATS subjects and bucket names)",
        violation: |c| {
            let id = &c.runtime.run_id;
            let ok = !id.is_empty() && id.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
            (!ok).then(|| format!("{id:?}"))
        },
    },
    Check { key: "runtime.max_policy_lag", allowed: TOML_INT, violation: |c| toml_int(c.runtime.max_policy_lag) },
    Check {
        key: "runtime.snapshot_every",
        allowed: "1 in sync mode (a sync task is decoded by exactly the learner's policy), 1..=max_policy_lag + 1 in async mode (the oldest published policy must stay within the lag bound)",
        violation: |c| {
            let r = &c.runtime;
            let (most, context) = match r.mode {
                Mode::Sync => (1, " in sync mode".to_string()),
                Mode::Async => (r.max_policy_lag.saturating_add(1), format!(" with max_policy_lag = {}", r.max_policy_lag)),
            };
            outside(r.snapshot_every, 1..=most).map(|v| format!("{v}{context}"))
        },
    },
    Check { key: "runtime.is_clip", allowed: "a finite number > 0", violation: |c| fails(c.runtime.is_clip, |x| x > 0.0 && x.is_finite()) },
    Check { key: "runtime.is_mask_low", allowed: "a finite number >= 0", violation: |c| fails(c.runtime.is_mask_low, |x| x >= 0.0 && x.is_finite()) },
    Check {
        key: "runtime.is_mask_high",
        allowed: "a finite number > is_mask_low",
        violation: |c| fails(c.runtime.is_mask_high, |x| x > c.runtime.is_mask_low && x.is_finite()),
    },
    Check { key: "runtime.tasks_in_flight", allowed: ">= 1", violation: |c| outside(c.runtime.tasks_in_flight, 1..) },
    Check { key: "runtime.images_per_task", allowed: ">= 1", violation: |c| outside(c.runtime.images_per_task, 1..) },
    Check { key: "runtime.ack_wait_secs", allowed: bus::MAX_SECS_ALLOWED, violation: |c| outside(c.runtime.ack_wait_secs, 1..=bus::MAX_SECS) },
    Check { key: "nats.url", allowed: "a non-empty server URL, e.g. nats://127.0.0.1:4222", violation: |c| c.nats.url.is_empty().then(|| "\"\"".into()) },
    Check { key: "nats.max_message_bytes", allowed: caprl_wire::MAX_MESSAGE_BYTES_ALLOWED, violation: |c| caprl_wire::message_limit_violation(c.nats.max_message_bytes) },
    Check { key: "nats.replicas", allowed: "1..=5 (1 on a single server, 3 on a 3-node JetStream cluster)", violation: |c| outside(c.nats.replicas, 1..=5) },
    Check { key: "nats.connect_timeout_secs", allowed: "1..=9223372036854775807", violation: |c| outside(c.nats.connect_timeout_secs, 1..=i64::MAX as u64) },
    Check {
        key: "nats.tls_key",
        allowed: "set together with nats.tls_cert (client TLS needs both)",
        violation: |c| (c.nats.tls_cert.is_empty() != c.nats.tls_key.is_empty()).then(|| format!("{:?}", c.nats.tls_key)),
    },
    Check { key: "clip.tau", allowed: "a finite number > 0", violation: |c| fails(c.clip.tau, |x| x > 0.0 && x.is_finite()) },
    Check { key: "clip.disc_lr", allowed: "a finite number > 0", violation: |c| fails(c.clip.disc_lr, |x| x > 0.0 && x.is_finite()) },
    Check { key: "checkpoint.keep", allowed: ">= 1", violation: |c| outside(c.checkpoint.keep, 1..) },
    Check { key: "checkpoint.every_steps", allowed: "1..=9223372036854775807", violation: |c| outside(c.checkpoint.every_steps, 1..=i64::MAX as u64) },
];

/// Checks every range and cross-key rule; the first failure is returned. The `[model]`,
/// `[optim]` and `[decode]` sections' rules are their owners' ([`ModelConfig::CHECKS`],
/// [`OptimConfig::CHECKS`], [`DecodeConfig::CHECKS`]), the sampling keys' those of the
/// [`Sampling`] every task carries.
pub(crate) fn validate(config: &RunConfig) -> Result<(), ConfigError> {
    let violation = first_violation(CHECKS, config)
        .or_else(|| first_violation(ModelConfig::CHECKS, &config.model))
        .or_else(|| first_violation(OptimConfig::CHECKS, &config.optim))
        .or_else(|| first_violation(DecodeConfig::CHECKS, &config.decode))
        .or_else(|| first_violation(Sampling::CHECKS, &config.decode.sampling()));
    violation.map_or(Ok(()), |v| Err(v.into()))
}

/// What every rule about `key` (`section.key`) allows, joined by "; "; `None` when no rule
/// is about it.
pub fn allowed_for(key: &str) -> Option<String> {
    let rules: Vec<&str> = check::allowed_for(CHECKS, key)
        .chain(check::allowed_for(ModelConfig::CHECKS, key))
        .chain(check::allowed_for(OptimConfig::CHECKS, key))
        .chain(check::allowed_for(DecodeConfig::CHECKS, key))
        .chain(check::allowed_for(Sampling::CHECKS, key))
        .collect();
    (!rules.is_empty()).then(|| rules.join("; "))
}
