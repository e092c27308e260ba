//! The trainer in a checkpoint: weights, optimizer moments and state written as one
//! checkpoint, and read back for a resume or for the RL phase's start.

use std::path::Path;

use caprl_model::model::{CaprlRng, Captioner, CaptionerConfig, Device};
use caprl_model::optim::{AdamW, AdamWParams};

use super::{Phase, TrainState, Trainer};
use crate::checkpoint::{self, Checkpoint};
use crate::critic::Critic;
use crate::error::LearnerError;

/// The captioner's weights in a checkpoint directory.
pub const WEIGHTS: &str = "model.safetensors";
const OPTIM: &str = "optim.safetensors";
const STATE: &str = "state.json";
/// The value head's weights (mc-pg, actor-critic).
pub const VALUE_WEIGHTS: &str = "value.safetensors";
const VALUE_OPTIM: &str = "value-optim.safetensors";

impl Trainer {
    /// Writes weights, optimizer moments and trainer state as one checkpoint
    /// under `root` (plus any `extra` files), keeping the newest `keep`.
    pub fn save(
        &mut self,
        root: &Path,
        keep: usize,
        extra: &[(&str, Vec<u8>)],
    ) -> Result<Checkpoint, LearnerError> {
        self.state.dropout_rng = self.dropout_rng.state();
        let weights = self.model.to_safetensors()?;
        let optim = self.opt.to_bytes()?;
        let state =
            serde_json::to_vec_pretty(&self.state).map_err(|e| LearnerError::Serialise {
                what: "the trainer state",
                source: Box::new(e),
            })?;
        let mut files = vec![(WEIGHTS, weights), (OPTIM, optim), (STATE, state)];
        if let Some(critic) = &self.critic {
            files.push((VALUE_WEIGHTS, critic.head.to_safetensors()?));
            files.push((VALUE_OPTIM, critic.opt.to_bytes()?));
        }
        files.extend(extra.iter().map(|(n, b)| (*n, b.clone())));
        checkpoint::write(root, self.state.step, &files, keep)
    }

    /// Takes the weights of checkpoint `ck` (the best XE model RL starts from) and fresh
    /// optimizer moments, keeping the step count, the policy version and the dropout stream:
    /// numbers only go forward, so the RL phase's steps and checkpoints follow the XE phase's
    /// instead of reusing them.
    pub fn adopt_weights(
        &mut self,
        ck: &Checkpoint,
        cfg: &CaptionerConfig,
        device: &Device,
        adam: AdamWParams,
    ) -> Result<(), LearnerError> {
        self.model = Captioner::load(&ck.file(WEIGHTS), cfg, device)?;
        self.opt = AdamW::new(self.model.varmap(), adam)?;
        Ok(())
    }

    /// The phase and step checkpoint `ck` was written at (from its trainer state), to tell a
    /// user which model a directory of checkpoints resolved to.
    pub fn phase_of(ck: &Checkpoint) -> Result<(Phase, u64), LearnerError> {
        let state = read_state(ck)?;
        Ok((state.phase, state.step))
    }

    /// Restores a trainer from a verified checkpoint.
    pub fn restore(
        ck: &Checkpoint,
        cfg: &CaptionerConfig,
        device: &Device,
        adam: AdamWParams,
        seed: u64,
    ) -> Result<Self, LearnerError> {
        let model = Captioner::load(&ck.file(WEIGHTS), cfg, device)?;
        let mut opt = AdamW::new(model.varmap(), adam)?;
        opt.load(&ck.file(OPTIM))?;
        let state = read_state(ck)?;
        let critic = match ck.file(VALUE_WEIGHTS).exists() {
            true => Some(Critic::load(
                &ck.file(VALUE_WEIGHTS),
                &ck.file(VALUE_OPTIM),
                cfg.model.state_dim(),
                device,
                adam,
            )?),
            false => None,
        };
        Ok(Self {
            dropout_rng: CaprlRng::from_state(&state.dropout_rng),
            model,
            critic,
            reference: None,
            opt,
            seed,
            state,
        })
    }
}

/// The trainer state checkpoint `ck` holds.
fn read_state(ck: &Checkpoint) -> Result<TrainState, LearnerError> {
    let path = ck.file(STATE);
    let raw = std::fs::read(&path).map_err(|e| LearnerError::Io {
        path: path.clone(),
        source: e,
    })?;
    serde_json::from_slice(&raw).map_err(|e| LearnerError::Corrupt {
        path,
        reason: e.to_string(),
    })
}
